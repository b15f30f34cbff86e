//! The `sprout` binary: serves the beanstalk protocol with beanstalkd's flags.

use std::process::ExitCode;

use clap::Parser;
use sprout::cli::Args;
use sprout::server::{self, Listener, Server};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let args = Args::parse();
    init_logging(args.verbose);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail("cannot start the runtime", e),
    };
    runtime.block_on(serve(args))
}

async fn serve(args: Args) -> ExitCode {
    if args.max_job_size > sprout_protocol::MAX_JOB_SIZE_LIMIT as u64 {
        tracing::warn!(
            "maximum job size was set to {}",
            sprout_protocol::MAX_JOB_SIZE_LIMIT
        );
    }
    let listener = match Listener::bind(&args.listen, args.port).await {
        Ok(l) => l,
        Err(e) => {
            return fail(
                &format!("cannot listen on {} port {}", args.listen, args.port),
                e,
            )
        }
    };
    if let Some(user) = &args.user {
        if let Err(e) = sprout::user::become_user(user) {
            return fail(&format!("cannot become user {user}"), e);
        }
    }
    let shutdown = match server::termination() {
        Ok(s) => s,
        Err(e) => return fail("cannot handle signals", e),
    };
    tracing::info!(
        pid = std::process::id(),
        "listening on {} port {}",
        args.listen,
        args.port
    );
    let server = match Server::open(listener, &args) {
        Ok(server) => server,
        Err(e) => return fail("cannot start", e),
    };
    match server.run(shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail("server failed", e),
    }
}

fn init_logging(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn fail(what: &str, error: std::io::Error) -> ExitCode {
    eprintln!("sprout: {what}: {error}");
    ExitCode::FAILURE
}
