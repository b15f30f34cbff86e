//! `sprout admin`: the admin API from a shell. Tables for people by
//! default, the API's own JSON with `--json` (for scripts and `jq`).
//!
//! A thin client: every subcommand is one HTTP call to a server started
//! with `--http`, so what it can do and what it refuses are the API's.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::percent;
use clap::{Args, Subcommand};
use serde_json::{json, Value};

#[derive(Debug, Args)]
pub struct AdminArgs {
    /// The server's --http address: ADDR:PORT, or https://ADDR:PORT for a
    /// server started with --http-tls. Default 127.0.0.1:11380 (the address
    /// the README's examples give `--http`), or $SPROUT_ADMIN_HTTP.
    #[arg(
        long = "http",
        value_name = "[https://]ADDR:PORT",
        env = "SPROUT_ADMIN_HTTP",
        default_value = "127.0.0.1:11380"
    )]
    pub http: String,

    /// Trust the CA certificates in FILE (PEM) for https:// instead of the
    /// usual public ones (for a server whose certificate your own CA made).
    #[arg(long = "ca", value_name = "FILE")]
    pub ca: Option<PathBuf>,

    /// The server's --http-token.
    #[arg(long = "token", value_name = "TOKEN", conflicts_with = "token_file")]
    pub token: Option<String>,

    /// Read the token from FILE (its first line).
    #[arg(long = "token-file", value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    /// Print the API's JSON instead of a table.
    #[arg(long = "json")]
    pub json: bool,

    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// The server's `stats`.
    Server,
    /// A cluster node's view: its members with their roles, the leader
    /// and its epoch.
    Cluster,
    /// Every tube with its counts.
    Tubes,
    /// A page of a tube's jobs in one state (in that state's order).
    Jobs {
        tube: String,
        #[arg(long, default_value = "ready")]
        state: String,
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Start after this cursor (the `next` a previous page printed).
        #[arg(long)]
        after: Option<String>,
    },
    /// One job: its stats and body (control characters and bytes that are
    /// not UTF-8 escaped, the first 1 KiB; `--raw` for the exact bytes).
    Job {
        id: String,
        /// Print only the body, its exact bytes (for a pipe or a file).
        #[arg(long)]
        raw: bool,
    },
    /// Kick up to N jobs of a tube (buried ones, else delayed ones).
    Kick { tube: String, bound: u32 },
    /// Kick one buried or delayed job.
    KickJob { id: String },
    /// Run an `aft:` job now although its group has members: the one way
    /// past the dependency (kicks leave it held).
    ReleaseHold { id: String },
    /// Delete one job (not a reserved one).
    Delete { id: String },
    /// Delete every job of a tube in a state (ready, delayed or buried).
    Flush {
        tube: String,
        #[arg(long)]
        state: String,
    },
    /// Move a tube's jobs in a state to another tube.
    Move {
        tube: String,
        #[arg(long)]
        state: String,
        #[arg(long)]
        to: String,
        /// At most this many.
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Pause a tube for SECONDS.
    Pause { tube: String, seconds: u32 },
    /// End a tube's pause.
    Resume { tube: String },
    /// Put a job.
    Put {
        tube: String,
        body: String,
        #[arg(long, default_value_t = 1024)]
        pri: u32,
        #[arg(long, default_value_t = 0)]
        delay: u32,
        #[arg(long, default_value_t = 60)]
        ttr: u32,
    },
}

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
        (None, Some(file)) => Some(crate::http::config::read_token(file, "--token-file")?),
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
    Ok(human(&args.command, &answer).into_bytes())
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

/// A table (or a line) for people.
fn human(command: &AdminCommand, answer: &Value) -> String {
    match command {
        AdminCommand::Server => key_values(&answer["stats"]),
        AdminCommand::Cluster => cluster_view(answer),
        AdminCommand::Tubes => {
            let columns = [
                ("tube", "name"),
                ("ready", "current_jobs_ready"),
                ("reserved", "current_jobs_reserved"),
                ("delayed", "current_jobs_delayed"),
                ("buried", "current_jobs_buried"),
                ("waiting", "current_waiting"),
                ("total", "total_jobs"),
                ("paused", "paused"),
            ];
            table(
                &columns,
                answer["tubes"].as_array().map_or(&[][..], Vec::as_slice),
            )
        }
        AdminCommand::Jobs { .. } => {
            let columns = [
                ("id", "id"),
                ("pri", "pri"),
                ("age", "age"),
                ("time-left", "time_left"),
                ("size", "size"),
                ("body", "preview"),
            ];
            let jobs: Vec<Value> = answer["jobs"]
                .as_array()
                .map_or(&[][..], Vec::as_slice)
                .iter()
                .map(with_human_ages)
                .collect();
            let mut out = table(&columns, &jobs);
            if let Some(next) = answer["next"].as_str() {
                out.push_str(&format!("next page: --after {next}\n"));
            }
            out
        }
        AdminCommand::Job { .. } => {
            let mut stats = with_human_ages(answer);
            let body = stats.as_object_mut().and_then(|o| {
                o.remove("body_text");
                o.remove("preview");
                o.remove("body_truncated");
                o.remove("body_base64")
            });
            let mut out = key_values(&stats);
            let bytes = body.as_ref().and_then(Value::as_str).and_then(|b64| {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD.decode(b64).ok()
            });
            match bytes {
                Some(bytes) => out.push_str(&format!("body:\n{}\n", escaped(&bytes, SHOWN_BODY))),
                None => out.push_str("body: too large to show inline: see --raw\n"),
            }
            out
        }
        _ => {
            // Changes answer one small object, e.g. {"deleted": 1000}.
            let pairs: Vec<String> = answer
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| format!("{k} {}", plain(v)))
                .collect();
            format!("{}\n", pairs.join(", "))
        }
    }
}

/// `cluster`: the cluster, the leader and its epoch, the node asked, then
/// a table of the members.
fn cluster_view(answer: &Value) -> String {
    let leader = match &answer["leader_node"] {
        Value::String(node) => format!("{node} at {}", plain(&answer["leader"])),
        _ => plain(&answer["leader"]),
    };
    let asked = format!("{} ({})", plain(&answer["node"]), plain(&answer["role"]));
    let summary = [
        ("cluster", plain(&answer["name"])),
        ("leader", leader),
        ("epoch", plain(&answer["epoch"])),
        ("asked", asked),
    ];
    let summary: String = summary
        .iter()
        .map(|(k, v)| format!("{k:7}  {v}\n"))
        .collect();
    let columns = [("node", "node"), ("address", "addr"), ("role", "role")];
    let members = answer["members"].as_array().map_or(&[][..], Vec::as_slice);
    format!("{summary}\n{}", table(&columns, members))
}

/// How much of a body `job` shows: a screenful, not a terminal flooded
/// by a megabyte.
const SHOWN_BODY: usize = 1024;

/// `body` safe to print on a terminal: its first `cap` bytes, text as it
/// is (newlines and tabs too) but other control characters escaped, and
/// bytes that are not UTF-8 as `\xNN`, so a binary body cannot drive the
/// terminal; what is left out is counted.
fn escaped(body: &[u8], cap: usize) -> String {
    let shown = &body[..body.len().min(cap)];
    let mut out = String::new();
    for chunk in shown.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\n' | '\t' => out.push(c),
                c if c.is_control() => out.extend(c.escape_default()),
                c => out.push(c),
            }
        }
        out.push_str(&chunk.invalid().escape_ascii().to_string());
    }
    if body.len() > cap {
        let more = body.len() - cap;
        out.push_str(&format!("… ({more} more bytes: --raw for all of them)"));
    }
    out
}

/// A duration for people: `450ms`, `1.2s`, `3m12s`, `2h05m`, `3d04h`;
/// two units at most, as an age needs no more.
fn human_duration(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "-".into();
    }
    if seconds < 1.0 {
        return format!("{}ms", (seconds * 1000.0) as u64);
    }
    if seconds < 60.0 {
        return format!("{:.1}s", (seconds * 10.0).floor() / 10.0);
    }
    let whole = seconds as u64;
    let (d, h, m, s) = (
        whole / 86400,
        whole / 3600 % 24,
        whole / 60 % 60,
        whole % 60,
    );
    match (d, h) {
        (0, 0) => format!("{m}m{s:02}s"),
        (0, _) => format!("{h}h{m:02}m"),
        _ => format!("{d}d{h:02}h"),
    }
}

/// A job object with its durations (seconds in the API) in human units:
/// `age`, `delay` and `ttr` (whole seconds: `30s`), and `time_left` only
/// where a clock runs (delayed: until ready; reserved: until its TTR
/// ends), elsewhere `-`.
fn with_human_ages(job: &Value) -> Value {
    let mut job = job.clone();
    let running = matches!(job["state"].as_str(), Some("delayed" | "reserved"));
    for key in ["age", "time_left"] {
        if let Some(seconds) = job[key].as_f64() {
            job[key] = Value::String(human_duration(seconds));
        }
    }
    if !running && job.get("time_left").is_some() {
        job["time_left"] = Value::Null;
    }
    for key in ["delay", "ttr"] {
        if let Some(seconds) = job[key].as_u64() {
            job[key] = Value::String(format!("{seconds}s"));
        }
    }
    job
}

fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn key_values(object: &Value) -> String {
    let entries: Vec<(&String, &Value)> = object.as_object().into_iter().flatten().collect();
    let width = entries.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    entries
        .iter()
        .map(|(k, v)| format!("{k:width$}  {}\n", plain(v)))
        .collect()
}

/// Rows of `objects` under `columns` (header, key), each column as wide
/// as its widest cell; numbers right-aligned.
fn table(columns: &[(&str, &str)], objects: &[Value]) -> String {
    let cells: Vec<Vec<String>> = objects
        .iter()
        .map(|o| columns.iter().map(|(_, key)| plain(&o[*key])).collect())
        .collect();
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, (header, _))| {
            cells
                .iter()
                .map(|r| r[i].chars().count())
                .fold(header.len(), usize::max)
        })
        .collect();
    let numeric: Vec<bool> = (0..columns.len())
        .map(|i| objects.iter().all(|o| o[columns[i].1].is_number()) && !objects.is_empty())
        .collect();
    let line = |row: Vec<String>| {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, cell)| match numeric[i] {
                true => format!("{cell:>w$}", w = widths[i]),
                false => format!("{cell:<w$}", w = widths[i]),
            })
            .collect();
        format!("{}\n", cells.join("  ").trim_end())
    };
    let mut out = line(columns.iter().map(|(h, _)| h.to_string()).collect());
    for row in cells {
        out.push_str(&line(row));
    }
    out
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

    #[test]
    fn durations_read_in_human_units() {
        // (seconds, shown)
        let table = [
            (0.0, "0ms"),
            (0.45, "450ms"),
            (0.999_9, "999ms"),
            (1.0, "1.0s"),
            (1.26, "1.2s"),
            (59.99, "59.9s"),
            (60.0, "1m00s"),
            (192.4, "3m12s"),
            (3600.0, "1h00m"),
            (7_500.0, "2h05m"),
            (86_400.0 * 3.0 + 4.0 * 3600.0 + 59.0, "3d04h"),
            (-1.0, "-"),
            (f64::NAN, "-"),
        ];
        for (seconds, shown) in table {
            assert_eq!(human_duration(seconds), shown, "{seconds}");
        }
    }

    #[test]
    fn job_durations_carry_units_and_time_left_only_where_a_clock_runs() {
        // (state, time left shown)
        let table = [
            ("delayed", json!("2.5s")),
            ("reserved", json!("2.5s")),
            ("ready", Value::Null),
            ("buried", Value::Null),
        ];
        for (state, left) in table {
            let job =
                json!({"state": state, "age": 0.45, "delay": 30, "ttr": 60, "time_left": 2.5});
            let shown = with_human_ages(&job);
            assert_eq!(shown["time_left"], left, "{state}");
            assert_eq!(
                (&shown["age"], &shown["delay"], &shown["ttr"]),
                (&json!("450ms"), &json!("30s"), &json!("60s"))
            );
        }
    }

    #[test]
    fn bodies_are_escaped_and_capped() {
        // (body, cap, shown)
        let table: [(&[u8], usize, &str); 6] = [
            (b"hello there", 1024, "hello there"),
            (b"two\nlines\tand a tab", 1024, "two\nlines\tand a tab"),
            ("h\u{e9}llo".as_bytes(), 1024, "h\u{e9}llo"),
            (b"\x1b[2Jwiped\r", 1024, "\\u{1b}[2Jwiped\\r"),
            (b"\xff\x00ok", 1024, "\\xff\\u{0}ok"),
            (b"abcdef", 3, "abc… (3 more bytes: --raw for all of them)"),
        ];
        for (body, cap, shown) in table {
            assert_eq!(escaped(body, cap), shown, "{body:?}");
        }
        // A cap in the middle of a character escapes its first bytes.
        assert!(escaped("\u{e9}".as_bytes(), 1).starts_with("\\xc3…"));
    }

    #[test]
    fn tables_align_columns_and_right_align_numbers() {
        let rows = [
            json!({"name": "emails", "n": 3}),
            json!({"name": "a", "n": 1200}),
        ];
        let out = table(&[("tube", "name"), ("count", "n")], &rows);
        assert_eq!(out, "tube    count\nemails      3\na        1200\n");
        assert_eq!(table(&[("tube", "name")], &[]), "tube\n");
    }
}
