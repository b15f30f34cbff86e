//! The `--http*` flags and what they resolve to.

use std::path::{Path, PathBuf};

use clap::Args;

/// The HTTP side port: metrics, health checks, the admin API, the dashboard.
#[derive(Debug, Clone, Default, Args)]
pub struct HttpArgs {
    /// Serve /metrics, /healthz, /readyz, the admin API (/api) and the
    /// dashboard (/) on ADDR:PORT; a bare PORT or :PORT means 127.0.0.1.
    #[arg(long = "http", value_name = "ADDR:PORT")]
    pub http: Option<String>,

    /// Require TOKEN for the admin API and the dashboard (a bearer header,
    /// or the cookie the dashboard's login sets).
    #[arg(
        long = "http-token",
        value_name = "TOKEN",
        conflicts_with = "token_file"
    )]
    pub token: Option<String>,

    /// Read the token from FILE (its first line), keeping it out of `ps`.
    #[arg(long = "http-token-file", value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    /// Require the token for /metrics too (health checks stay open).
    #[arg(long = "http-token-metrics")]
    pub token_metrics: bool,

    /// Serve the HTTP port over TLS (1.3 and 1.2) with --tls-cert and
    /// --tls-key, reloaded on SIGHUP; it asks for no client certificate.
    #[arg(long = "http-tls")]
    pub tls: bool,
}

/// The flags, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Host (name or address) and port to bind.
    pub host: String,
    pub port: u16,
    pub token: Option<String>,
    pub token_metrics: bool,
    /// `--auth` is on: the policy's principals use this port too.
    pub auth: bool,
    /// `--http-tls`.
    pub tls: bool,
}

impl Options {
    /// `None` without `--http`.
    pub fn from_args(args: &HttpArgs) -> Result<Option<Options>, String> {
        let Some(addr) = &args.http else {
            if args.token.is_some() || args.token_file.is_some() || args.token_metrics {
                return Err("--http-token* needs --http".into());
            }
            if args.tls {
                return Err("--http-tls needs --http".into());
            }
            return Ok(None);
        };
        let (host, port) = parse_addr(addr)?;
        let token = match (&args.token, &args.token_file) {
            (Some(token), _) => Some(token.clone()),
            (None, Some(file)) => Some(read_token(file, "--http-token-file")?),
            (None, None) => None,
        };
        if token.as_deref() == Some("") {
            return Err("the HTTP token is empty".into());
        }
        if args.token_metrics && token.is_none() {
            return Err("--http-token-metrics needs --http-token or --http-token-file".into());
        }
        Ok(Some(Options {
            host,
            port,
            token,
            token_metrics: args.token_metrics,
            auth: false,
            tls: args.tls,
        }))
    }
}

/// The token in `file`: its first line, trimmed (`flag` names it in errors).
pub fn read_token(file: &Path, flag: &str) -> Result<String, String> {
    let text =
        std::fs::read_to_string(file).map_err(|e| format!("{flag} {}: {e}", file.display()))?;
    Ok(text.lines().next().unwrap_or("").trim().to_owned())
}

/// `ADDR:PORT`, `[V6]:PORT`, `:PORT` or `PORT` (the last two on loopback,
/// as sprout's `-l` defaults to it).
pub fn parse_addr(s: &str) -> Result<(String, u16), String> {
    let bad = || format!("--http {s:?}: expected ADDR:PORT, :PORT or PORT");
    let (host, port) = match s.rsplit_once(':') {
        None => ("", s),
        Some((host, port)) => (host, port),
    };
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return Err(bad());
    }
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port: u16 = port.parse().map_err(|_| bad())?;
    let host = if host.is_empty() { "127.0.0.1" } else { host };
    Ok((host.to_owned(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        // (flag, expected)
        let table: [(&str, Option<(&str, u16)>); 9] = [
            ("127.0.0.1:11380", Some(("127.0.0.1", 11380))),
            ("0.0.0.0:80", Some(("0.0.0.0", 80))),
            (":11380", Some(("127.0.0.1", 11380))),
            ("11380", Some(("127.0.0.1", 11380))),
            ("localhost:0", Some(("localhost", 0))),
            ("[::1]:9000", Some(("::1", 9000))),
            ("::1:9000", None),
            ("host:", None),
            ("host:70000", None),
        ];
        for (flag, expected) in table {
            let got = parse_addr(flag).ok();
            let got = got.as_ref().map(|(h, p)| (h.as_str(), *p));
            assert_eq!(got, expected, "{flag}");
        }
    }

    #[test]
    fn token_flags() {
        let dir = std::env::temp_dir().join(format!("sprout-token-{}", std::process::id()));
        std::fs::write(&dir, "s3cret\nignored\n").unwrap();
        let with = |f: fn(&mut HttpArgs)| {
            let mut args = HttpArgs {
                http: Some(":1".into()),
                ..HttpArgs::default()
            };
            f(&mut args);
            args
        };
        let from_file = with(|a| a.token_file = Some(std::env::temp_dir().join("missing")));
        assert!(Options::from_args(&from_file).is_err());
        let mut args = with(|_| {});
        args.token_file = Some(dir.clone());
        let options = Options::from_args(&args).unwrap().unwrap();
        assert_eq!(options.token.as_deref(), Some("s3cret"));
        // (args, accepted)
        let table = [
            (with(|a| a.token = Some(String::new())), false),
            (with(|a| a.token_metrics = true), false),
            (with(|a| a.http = None), true),
            (
                HttpArgs {
                    token: Some("t".into()),
                    ..HttpArgs::default()
                },
                false,
            ),
        ];
        for (args, accepted) in table {
            assert_eq!(Options::from_args(&args).is_ok(), accepted, "{args:?}");
        }
        let _ = std::fs::remove_file(dir);
    }
}
