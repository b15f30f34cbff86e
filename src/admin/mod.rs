//! `sprout admin`: the admin API from a shell. Tables for people by
//! default, the API's own JSON with `--json` (for scripts and `jq`).
//!
//! A thin client: every subcommand is one HTTP call to a server started
//! with `--http`, so what it can do and what it refuses are the API's.
//!
//! `args.rs`: the command line; `view.rs`: what a person sees.

mod args;
mod view;

pub use args::{AdminArgs, AdminCommand};

use std::process::ExitCode;
use std::time::Duration;

use serde_json::{json, Value};

use crate::percent;

/// Runs `sprout admin …`.
pub fn run(args: &AdminArgs) -> ExitCode {
    match call(args) {
        Ok(bytes) => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            if let Err(e) = out.write_all(&bytes).and_then(|()| out.flush()) {
                eprintln!("sprout admin: stdout: {e}");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("sprout admin: {message}");
            ExitCode::FAILURE
        }
    }
}

/// One HTTP call: (method, path, JSON body).
type Request = (&'static str, String, Option<Value>);

fn request(command: &AdminCommand) -> Request {
    let tube_path = |tube: &str, rest: &str| format!("/api/tubes/{}{rest}", percent::encode(tube));
    match command {
        AdminCommand::Server => ("GET", "/api/server".into(), None),
        AdminCommand::Cluster => ("GET", "/api/cluster".into(), None),
        AdminCommand::Tubes => ("GET", "/api/tubes".into(), None),
        AdminCommand::Jobs {
            tube,
            state,
            limit,
            after,
        } => {
            let mut query = format!("?state={}&limit={limit}", percent::encode(state));
            if let Some(after) = after {
                query.push_str(&format!("&after={}", percent::encode(after)));
            }
            ("GET", tube_path(tube, &format!("/jobs{query}")), None)
        }
        AdminCommand::Job { id, raw: false } => {
            ("GET", format!("/api/jobs/{}", percent::encode(id)), None)
        }
        AdminCommand::Job { id, raw: true } => (
            "GET",
            format!("/api/jobs/{}/body", percent::encode(id)),
            None,
        ),
        AdminCommand::Kick { tube, bound } => (
            "POST",
            tube_path(tube, "/kick"),
            Some(json!({ "bound": bound })),
        ),
        AdminCommand::KickJob { id } => (
            "POST",
            format!("/api/jobs/{}/kick", percent::encode(id)),
            Some(json!({})),
        ),
        AdminCommand::ReleaseHold { id } => (
            "POST",
            format!("/api/jobs/{}/release-hold", percent::encode(id)),
            Some(json!({})),
        ),
        AdminCommand::Delete { id } => {
            ("DELETE", format!("/api/jobs/{}", percent::encode(id)), None)
        }
        AdminCommand::Flush { tube, state } => (
            "POST",
            tube_path(tube, "/flush"),
            Some(json!({ "state": state })),
        ),
        AdminCommand::Move {
            tube,
            state,
            to,
            limit,
        } => {
            let mut body = json!({ "state": state, "to": to });
            if let Some(limit) = limit {
                body["limit"] = json!(limit);
            }
            ("POST", tube_path(tube, "/move"), Some(body))
        }
        AdminCommand::Pause { tube, seconds } => (
            "POST",
            tube_path(tube, "/pause"),
            Some(json!({ "delay": seconds })),
        ),
        AdminCommand::Resume { tube } => ("POST", tube_path(tube, "/resume"), Some(json!({}))),
        AdminCommand::Put {
            tube,
            body,
            pri,
            delay,
            ttr,
        } => (
            "POST",
            tube_path(tube, "/jobs"),
            Some(json!({ "body": body, "pri": pri, "delay": delay, "ttr": ttr })),
        ),
    }
}

/// What to print on stdout: a table, JSON, or (`job --raw`) a body's bytes.
fn call(args: &AdminArgs) -> Result<Vec<u8>, String> {
    let token = match (&args.token, &args.token_file) {
        (Some(token), _) => Some(token.clone()),
        (None, Some(file)) => Some(crate::http::http_flags::read_token(file, "--token-file")?),
        (None, None) => None,
    };
    let (method, path, body) = request(&args.command);
    let url = format!("{}{path}", base_url(&args.http));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(600)))
        .tls_config(tls_config(args.ca.as_deref())?)
        .build()
        .into();
    let mut builder = ureq::http::Request::builder().method(method).uri(&url);
    if let Some(token) = token {
        builder = builder.header("Authorization", format!("Bearer {token}"));
    }
    if body.is_some() {
        builder = builder.header("Content-Type", "application/json");
    }
    let text = body.map(|b| b.to_string()).unwrap_or_default();
    let request = builder
        .body(text)
        .map_err(|e| format!("bad request to {url}: {e}"))?;
    let mut response = agent.run(request).map_err(|e| format!("{url}: {e}"))?;
    let status = response.status();
    if matches!(args.command, AdminCommand::Job { raw: true, .. }) && status.is_success() {
        return response
            .body_mut()
            .with_config()
            .limit(u64::MAX)
            .read_to_vec()
            .map_err(|e| format!("{url}: {e}"));
    }
    let answer: Value = response
        .body_mut()
        .read_json()
        .map_err(|e| format!("{url}: {status}, not JSON: {e}"))?;
    if !status.is_success() {
        let error = answer["error"].as_str().unwrap_or("(no message)");
        return Err(format!("{status}: {error}"));
    }
    if args.json {
        return Ok(format!("{answer:#}\n").into_bytes());
    }
    Ok(view::human(&args.command, &answer).into_bytes())
}

/// `--http` as a URL base: a bare ADDR:PORT is plain HTTP.
fn base_url(http: &str) -> String {
    if http.starts_with("http://") || http.starts_with("https://") {
        http.trim_end_matches('/').to_owned()
    } else {
        format!("http://{http}")
    }
}

/// TLS trusting `--ca`'s certificates, or the usual public roots.
fn tls_config(ca: Option<&std::path::Path>) -> Result<ureq::tls::TlsConfig, String> {
    use ureq::tls::{Certificate, RootCerts, TlsConfig};
    let Some(file) = ca else {
        return Ok(TlsConfig::default());
    };
    let read = |e: &dyn std::fmt::Display| format!("--ca {}: {e}", file.display());
    let pem = std::fs::read(file).map_err(|e| read(&e))?;
    let certs: Vec<Certificate<'static>> = ureq::tls::parse_pem(&pem)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(cert)) => Some(Ok(cert)),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        })
        .collect::<Result<_, _>>()
        .map_err(|e| read(&e))?;
    if certs.is_empty() {
        return Err(read(&"no certificate in it"));
    }
    let roots = RootCerts::Specific(std::sync::Arc::new(certs));
    Ok(TlsConfig::builder().root_certs(roots).build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subcommands_are_one_call_each() {
        let flush = AdminCommand::Flush {
            tube: "a/b".into(),
            state: "buried".into(),
        };
        let jobs = AdminCommand::Jobs {
            tube: "t".into(),
            state: "ready".into(),
            limit: 5,
            after: Some("1.2".into()),
        };
        // (command, method, path, body)
        let table: [(AdminCommand, &str, &str, Option<Value>); 5] = [
            (
                flush,
                "POST",
                "/api/tubes/a%2Fb/flush",
                Some(json!({"state": "buried"})),
            ),
            (
                jobs,
                "GET",
                "/api/tubes/t/jobs?state=ready&limit=5&after=1.2",
                None,
            ),
            (
                AdminCommand::Delete { id: "7".into() },
                "DELETE",
                "/api/jobs/7",
                None,
            ),
            (
                AdminCommand::ReleaseHold { id: "7".into() },
                "POST",
                "/api/jobs/7/release-hold",
                Some(json!({})),
            ),
            (
                AdminCommand::Kick {
                    tube: "t".into(),
                    bound: 3,
                },
                "POST",
                "/api/tubes/t/kick",
                Some(json!({"bound": 3})),
            ),
        ];
        for (command, method, path, body) in table {
            assert_eq!(
                request(&command),
                (method, path.to_owned(), body),
                "{command:?}"
            );
        }
    }
}
