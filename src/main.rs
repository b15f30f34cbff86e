//! The `sprout` binary: parses the command line, sets up logging and
//! hands over to `server::start` (the server, or `sprout bridge`), or runs
//! `sprout admin`; a failure to start is its exit status.

use std::io::IsTerminal;
use std::process::ExitCode;

use sprout::auth::log_directive;
use sprout::cli::{self, LogFormat, Mode};
use sprout::server::start;
use sprout::service;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let args = cli::parse();
    init_logging(args.verbose, args.log_format, args.auth.file.is_some());
    // Before any other thread exists: reads LISTEN_FDS and marks the
    // descriptors close-on-exec.
    let inherited = match service::inherited_sockets() {
        Ok(sockets) => sockets,
        Err(e) => return fail("socket activation", e),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail("cannot start the runtime", e),
    };
    match args.command {
        Some(Mode::Bridge(ref bridge)) => exit(runtime.block_on(start::bridge(bridge))),
        Some(Mode::Admin(ref admin)) => sprout::admin::run(admin),
        Some(Mode::HashToken) => sprout::auth::hash_token_command(),
        None => {
            let served = runtime.block_on(start::serve(args, inherited));
            if served.is_err() {
                // A server that failed (a cluster node that must stop
                // serving) may leave tasks that never end: not waited for.
                runtime.shutdown_background();
            }
            exit(served)
        }
    }
}

/// Logging on stderr: `-V`'s level unless `RUST_LOG` says otherwise; with
/// `--auth`, the audit trail at info level unless `RUST_LOG` names it
/// (`auth/audit.rs`).
fn init_logging(verbose: u8, format: LogFormat, audit: bool) {
    let mut filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(log_level(verbose)));
    let rust_log = std::env::var("RUST_LOG").ok();
    if let Some(directive) = audit.then(|| log_directive(rust_log.as_deref())).flatten() {
        filter = filter.add_directive(directive.parse().expect("a valid directive"));
    }
    let logger = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => logger.json().init(),
        // The journal stamps each line itself; colours only on a terminal.
        LogFormat::Text if service::stderr_is_journal() => {
            logger.without_time().with_ansi(false).init()
        }
        LogFormat::Text => logger.with_ansi(std::io::stderr().is_terminal()).init(),
    }
}

/// The filter for `-V` given `verbose` times: without it warnings, and
/// the status lines (listening, recovered, shutting down); `-V` all of
/// info (connections too), `-VV` debug (every command).
fn log_level(verbose: u8) -> String {
    match verbose {
        0 => format!("warn,{}=info", sprout::STATUS),
        1 => "info".into(),
        _ => "debug".into(),
    }
}

fn exit(started: Result<(), start::Failure>) -> ExitCode {
    match started {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e.what, e.error),
    }
}

fn fail(what: &str, error: std::io::Error) -> ExitCode {
    eprintln!("sprout: {what}: {error}");
    ExitCode::FAILURE
}
