//! The TLS flags and what a set of them means: which listeners, which
//! files, or why the combination is refused.

use std::path::PathBuf;
use std::time::Duration;

/// `--tls-listen …` and the limits on connections not yet trusted.
#[derive(Debug, Default, clap::Args)]
pub struct TlsArgs {
    /// Serve the beanstalk protocol over TLS (1.3 and 1.2) on ADDR:PORT;
    /// repeat to listen on several. Needs --tls-cert and --tls-key. With
    /// it and without -l or -p, the plain listener is not opened.
    #[arg(id = "tls_listen", long = "tls-listen", value_name = "ADDR:PORT")]
    pub listen: Vec<String>,

    /// The server's certificate chain (PEM: its certificate first, then
    /// any intermediates). Read again on SIGHUP.
    #[arg(id = "tls_cert", long = "tls-cert", value_name = "FILE")]
    pub cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM: PKCS#8, RSA or SEC1). Read
    /// again on SIGHUP.
    #[arg(id = "tls_key", long = "tls-key", value_name = "FILE")]
    pub key: Option<PathBuf>,

    /// Require every TLS client to show a certificate that chains to a CA
    /// in FILE (PEM; mutual TLS). Read again on SIGHUP.
    #[arg(id = "tls_client_ca", long = "tls-client-ca", value_name = "FILE")]
    pub client_ca: Option<PathBuf>,

    /// Close a connection whose TLS handshake (and, with --auth,
    /// authentication) has not finished SECS seconds (fractions allowed)
    /// after it was accepted.
    #[arg(long = "handshake-timeout", value_name = "SECS", default_value = "10", value_parser = seconds)]
    pub handshake_timeout: Duration,

    /// At most N connections may be in their TLS handshake or (with
    /// --auth) not yet authenticated at once; more are closed as soon as
    /// they are accepted.
    #[arg(long = "max-pending", value_name = "N", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_pending: u32,
}

/// The TLS listeners to open and the files they serve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// `--tls-listen`, as given.
    pub listen: Vec<String>,
    pub files: Files,
}

/// The files a TLS listener's configuration is built from, at startup and
/// at each SIGHUP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Files {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

impl Options {
    /// What `args` ask for: None without `--tls-listen`, or why the flags
    /// do not go together. A certificate nothing serves is refused rather
    /// than ignored: whoever gave it expects TLS somewhere.
    pub fn from_args(args: &TlsArgs, http_tls: bool) -> Result<Option<Options>, String> {
        let user = if args.listen.is_empty() {
            "--http-tls"
        } else {
            "--tls-listen"
        };
        if args.listen.is_empty() && !http_tls {
            let files = [
                (&args.cert, "--tls-cert"),
                (&args.key, "--tls-key"),
                (&args.client_ca, "--tls-client-ca"),
            ];
            return match files.into_iter().find(|(file, _)| file.is_some()) {
                Some((_, flag)) => Err(format!("{flag} is given but no --tls-listen uses it")),
                None => Ok(None),
            };
        }
        if args.listen.is_empty() && args.client_ca.is_some() {
            return Err("--tls-client-ca is given but no --tls-listen uses it \
                        (the HTTP port asks for no client certificate)"
                .into());
        }
        match (&args.cert, &args.key) {
            (Some(cert), Some(key)) => Ok(Some(Options {
                listen: args.listen.clone(),
                files: Files {
                    cert: cert.clone(),
                    key: key.clone(),
                    client_ca: args.client_ca.clone(),
                },
            })),
            (None, _) => Err(format!("{user} needs --tls-cert (and --tls-key)")),
            (Some(_), None) => Err(format!("{user} needs --tls-key (the key of --tls-cert)")),
        }
    }
}

/// A positive, finite number of seconds.
fn seconds(value: &str) -> Result<Duration, String> {
    let secs: f64 = value
        .parse()
        .map_err(|_| format!("{value:?} is not a number of seconds"))?;
    if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
        return Err(format!("{value} is not between 0 and 86400 seconds"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_flags_go_together() {
        let p = |s: &str| Some(PathBuf::from(s));
        let files = |ca: Option<PathBuf>| Files {
            cert: "c.pem".into(),
            key: "k.pem".into(),
            client_ca: ca,
        };
        let listen = || vec!["127.0.0.1:11443".to_string()];
        let args = |listen: Vec<String>, cert, key, client_ca| TlsArgs {
            listen,
            cert,
            key,
            client_ca,
            ..TlsArgs::default()
        };
        let want = |ca| {
            Ok(Some(Options {
                listen: listen(),
                files: files(ca),
            }))
        };
        for (args, expected) in [
            (args(vec![], None, None, None), Ok(None)),
            (args(listen(), p("c.pem"), p("k.pem"), None), want(None)),
            (
                args(listen(), p("c.pem"), p("k.pem"), p("ca.pem")),
                want(p("ca.pem")),
            ),
            (
                args(listen(), None, None, None),
                Err("--tls-listen needs --tls-cert (and --tls-key)"),
            ),
            (
                args(listen(), None, p("k.pem"), None),
                Err("--tls-listen needs --tls-cert (and --tls-key)"),
            ),
            (
                args(listen(), p("c.pem"), None, None),
                Err("--tls-listen needs --tls-key (the key of --tls-cert)"),
            ),
            (
                args(vec![], p("c.pem"), p("k.pem"), None),
                Err("--tls-cert is given but no --tls-listen uses it"),
            ),
            (
                args(vec![], None, p("k.pem"), None),
                Err("--tls-key is given but no --tls-listen uses it"),
            ),
            (
                args(vec![], None, None, p("ca.pem")),
                Err("--tls-client-ca is given but no --tls-listen uses it"),
            ),
        ] {
            let expected = expected.map_err(String::from);
            assert_eq!(Options::from_args(&args, false), expected, "{args:?}");
        }
    }

    #[test]
    fn the_http_port_may_use_the_certificate_alone() {
        let p = |s: &str| Some(PathBuf::from(s));
        let args = |cert, key, client_ca| TlsArgs {
            cert,
            key,
            client_ca,
            ..TlsArgs::default()
        };
        let files = Files {
            cert: "c.pem".into(),
            key: "k.pem".into(),
            client_ca: None,
        };
        let want = Ok(Some(Options {
            listen: vec![],
            files,
        }));
        // (args, expected) with --http-tls
        for (args, expected) in [
            (args(p("c.pem"), p("k.pem"), None), want),
            (
                args(None, None, None),
                Err("--http-tls needs --tls-cert (and --tls-key)".to_owned()),
            ),
            (
                args(p("c.pem"), None, None),
                Err("--http-tls needs --tls-key (the key of --tls-cert)".to_owned()),
            ),
            (
                args(p("c.pem"), p("k.pem"), p("ca.pem")),
                Err("--tls-client-ca is given but no --tls-listen uses it \
                     (the HTTP port asks for no client certificate)"
                    .to_owned()),
            ),
        ] {
            assert_eq!(Options::from_args(&args, true), expected, "{args:?}");
        }
    }

    #[test]
    fn handshake_timeouts() {
        for (value, want) in [
            ("10", Some(Duration::from_secs(10))),
            ("0.25", Some(Duration::from_millis(250))),
            ("86400", Some(Duration::from_secs(86_400))),
            ("0", None),
            ("-1", None),
            ("86401", None),
            ("inf", None),
            ("NaN", None),
            ("ten", None),
            ("", None),
        ] {
            assert_eq!(seconds(value).ok(), want, "{value:?}");
        }
    }
}
