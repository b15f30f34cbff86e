//! The `sprout` binary: serves the beanstalk protocol with beanstalkd's flags.

use std::process::ExitCode;

use clap::Parser;
use sprout::bridge::{self, config::BridgeArgs};
use sprout::cli::{Args, Mode};
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
    match args.command {
        Some(Mode::Bridge(ref bridge)) => runtime.block_on(run_bridge(bridge)),
        None => runtime.block_on(serve(args)),
    }
}

/// `sprout bridge …`: the Redis TTL bridge as its own process.
async fn run_bridge(args: &BridgeArgs) -> ExitCode {
    let config = match bridge::config::Config::from_args(args) {
        Ok(config) => config,
        Err(e) => return fail("bridge", std::io::Error::other(e)),
    };
    let shutdown = match server::termination() {
        Ok(s) => s,
        Err(e) => return fail("cannot handle signals", e),
    };
    let connector = bridge::server_side::Connector::Tcp(args.server.clone());
    match bridge::run(config, connector, shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail("bridge failed", e),
    }
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
    let embedded = bridge::config::Config::from_embedded(&args.bridge, args.binlog_dir.as_deref());
    let embedded = match embedded.transpose() {
        Ok(config) => config,
        Err(e) => return fail("--redis-bridge", std::io::Error::other(e)),
    };
    let server = match Server::open(listener, &args) {
        Ok(server) => server,
        Err(e) => return fail("cannot start", e),
    };
    if let Some(config) = embedded {
        let connector = bridge::server_side::Connector::Local(server.local_connector());
        tokio::spawn(async move {
            if let Err(e) = bridge::run(config, connector, std::future::pending()).await {
                tracing::error!(error = %e, "the embedded Redis bridge stopped");
            }
        });
    }
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
