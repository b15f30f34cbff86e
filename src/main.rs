//! The `sprout` binary: serves the beanstalk protocol with beanstalkd's flags.

use std::io::IsTerminal;
use std::os::fd::OwnedFd;
use std::process::ExitCode;

use sprout::auth::{log_directive, Policy};
use sprout::bridge::{self, config::BridgeArgs};
use sprout::cli::{self, Args, LogFormat, Mode};
use sprout::http;
use sprout::server::{self, Listener, Server};
use sprout::service;
use sprout::tls;
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
        Some(Mode::Bridge(ref bridge)) => runtime.block_on(run_bridge(bridge)),
        Some(Mode::Admin(ref admin)) => sprout::admin::run(admin),
        Some(Mode::HashToken) => sprout::auth::hash_token_command(),
        None => runtime.block_on(serve(args, inherited)),
    }
}

/// `sprout bridge …`: the Redis TTL bridge as its own process.
async fn run_bridge(args: &BridgeArgs) -> ExitCode {
    sprout::malloc::tune();
    let config = match bridge::config::Config::from_args(args) {
        Ok(config) => config,
        Err(e) => return fail("bridge", std::io::Error::other(e)),
    };
    let shutdown = match server::termination() {
        Ok(s) => s,
        Err(e) => return fail("cannot handle signals", e),
    };
    let remote = match bridge::remote::Remote::new(args.server.clone(), &args.remote) {
        Ok(remote) => remote,
        Err(e) => return fail("bridge", std::io::Error::other(e)),
    };
    let connector = bridge::server_side::Connector::Tcp(remote);
    let status = bridge::Status::default();
    if let Some(addr) = &args.metrics {
        if let Err(e) = http::serve_bridge_metrics(addr, status.clone()).await {
            return fail(&format!("cannot listen on --metrics {addr}"), e);
        }
    }
    match bridge::run(config, connector, shutdown, &status).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail("bridge failed", e),
    }
}

async fn serve(args: Args, inherited: Vec<(OwnedFd, String)>) -> ExitCode {
    if args.binlog_dir.is_some() && args.cluster.urls.is_none() {
        // What sled takes in churns the heap (see `malloc`).
        sprout::malloc::trim_free();
    }
    if args.max_job_size > sprout_protocol::MAX_JOB_SIZE_LIMIT as u64 {
        tracing::warn!(
            "maximum job size was set to {}",
            sprout_protocol::MAX_JOB_SIZE_LIMIT
        );
    }
    // Before anything is bound: a policy is read whole or not at all.
    let policy = match args.auth.file.as_deref().map(Policy::load).transpose() {
        Ok(policy) => policy,
        Err(e) => return fail("--auth", std::io::Error::other(e)),
    };
    // (`--http-tls` without `--http` is refused with the HTTP flags.)
    let http_tls = args.http.tls && args.http.http.is_some();
    let tls = match tls::Options::from_args(&args.tls, http_tls) {
        Ok(tls) => tls,
        Err(e) => return fail("TLS", std::io::Error::other(e)),
    };
    let cluster = match cluster_options(&args) {
        Ok(cluster) => cluster,
        Err(e) => return fail("--cluster", std::io::Error::other(e)),
    };
    let listeners = match listen(&args, inherited, tls.as_ref(), cluster.as_ref()).await {
        Ok(listeners) => listeners,
        Err((what, e)) => return fail(&what, e),
    };
    let http = match http_port(&args, tls.as_ref()).await {
        Ok(port) => port,
        Err((what, e)) => return fail(&what, e),
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
    for listener in &listeners {
        tracing::info!(target: sprout::STATUS, pid = std::process::id(), "listening on {listener}");
    }
    let embedded = bridge::config::Config::from_embedded(&args.bridge, args.binlog_dir.as_deref());
    let embedded = match embedded.transpose() {
        Ok(config) => config,
        Err(_) if args.cluster.urls.is_some() && args.bridge.state_dir.is_none() => {
            let why = "in a cluster node the bridge's timers live in the cluster, its small \
                       index in --bridge-state-dir DIR (the node's own; -b is not used)";
            return fail("--redis-bridge", std::io::Error::other(why));
        }
        Err(e) => return fail("--redis-bridge", std::io::Error::other(e)),
    };
    if let Some(dir) = &args.binlog_dir {
        service::status(&format!("recovering jobs from {}", dir.display()));
    }
    let status = bridge::Status::default();
    if let (Some(port), Some(config)) = (&http, &embedded) {
        port.show_bridge(&config.tube, &config.timer_tube, status.clone());
    }
    // Setting a cluster up waits for NATS, for as long as it takes to
    // start or elect: SIGTERM stops that wait too.
    tokio::pin!(shutdown);
    let opened = match cluster {
        Some(options) => tokio::select! {
            opened = Server::open_cluster(listeners, &args, &options) => opened,
            () = &mut shutdown => return ExitCode::SUCCESS,
        },
        None => Server::open(listeners, &args),
    };
    let server = match opened {
        Ok(server) => server.with_http(http).with_auth(policy),
        Err(e) => return fail("cannot start", e),
    };
    if let Some(config) = embedded {
        let connector = bridge::server_side::Connector::Local(server.local_connector());
        // In a cluster, only on the leader, once it leads.
        if let Some(side) = server.cluster() {
            side.run_bridge(config, move |config, stepped_down| async move {
                bridge::run(config, connector, stepped_down, &status).await
            });
        } else {
            tokio::spawn(async move {
                let run = bridge::run(config, connector, std::future::pending(), &status);
                if let Err(e) = run.await {
                    tracing::error!(error = %e, "the embedded Redis bridge stopped");
                }
            });
        }
    }
    match server.run(shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail("server failed", e),
    }
}

/// `--cluster`'s options, checked before anything is bound.
fn cluster_options(args: &Args) -> Result<Option<sprout::cluster::Options>, String> {
    let guards = [
        ("--auth", args.auth.file.is_some()),
        ("--tls-listen", !args.tls.listen.is_empty()),
    ];
    let guards: Vec<&str> = guards.iter().filter(|g| g.1).map(|g| g.0).collect();
    let binlog = args.binlog_dir.is_some();
    sprout::cluster::Options::from_args(&args.cluster, &args.listen, args.port, binlog, &guards)
}

/// The sockets to serve: those systemd passed (socket activation, which
/// replaces `-l`/`-p`, as in beanstalkd), else one per `-l`; and one per
/// `--tls-listen` and the cluster's peer listener either way (systemd
/// passes no TLS configuration).
async fn listen(
    args: &Args,
    inherited: Vec<(OwnedFd, String)>,
    tls: Option<&tls::Options>,
    cluster: Option<&sprout::cluster::Options>,
) -> Result<Vec<Listener>, (String, std::io::Error)> {
    let mut listeners = tls_listeners(tls).await?;
    if let Some(l) = peer_listener(cluster).await? {
        listeners.push(l);
    }
    if !inherited.is_empty() {
        tracing::info!(
            sockets = inherited.len(),
            "serving the sockets systemd passed; -l and -p are not used"
        );
        for (fd, name) in inherited {
            let inherited = Listener::inherit(fd);
            listeners.push(inherited.map_err(|e| (format!("socket {name} from systemd"), e))?);
        }
        return Ok(listeners);
    }
    for addr in &args.listen {
        match Listener::bind(addr, args.port).await {
            Ok(l) => listeners.push(l),
            Err(e) => return Err((format!("cannot listen on {addr} port {}", args.port), e)),
        }
    }
    Ok(listeners)
}

/// One listener per `--tls-listen`, all serving the certificate read now.
async fn tls_listeners(
    tls: Option<&tls::Options>,
) -> Result<Vec<Listener>, (String, std::io::Error)> {
    let Some(options) = tls.filter(|o| !o.listen.is_empty()) else {
        return Ok(Vec::new());
    };
    let certs = tls::Certs::load(options.files.clone()).map_err(|e| ("TLS".into(), e))?;
    let certs = std::sync::Arc::new(certs);
    let mut listeners = Vec::with_capacity(options.listen.len());
    for addr in &options.listen {
        match Listener::bind_tls(addr, certs.clone()).await {
            Ok(l) => listeners.push(l),
            Err(e) => return Err((format!("cannot listen on --tls-listen {addr}"), e)),
        }
    }
    Ok(listeners)
}

/// The `--http` port, bound (over TLS with `--http-tls`), if asked for.
async fn http_port(
    args: &Args,
    tls: Option<&tls::Options>,
) -> Result<Option<http::Port>, (String, std::io::Error)> {
    let mut options = match http::Options::from_args(&args.http) {
        Ok(None) => return Ok(None),
        Ok(Some(options)) => options,
        Err(e) => return Err(("--http".into(), std::io::Error::other(e))),
    };
    options.auth = args.auth.file.is_some();
    let secure = match tls.filter(|_| options.tls) {
        None => None,
        Some(tls) => {
            // The beanstalk port's certificate, without its client CA.
            let files = tls::Files {
                client_ca: None,
                ..tls.files.clone()
            };
            let certs = tls::Certs::load(files).map_err(|e| ("--http-tls".into(), e))?;
            Some(http::HttpTls {
                certs: std::sync::Arc::new(certs),
                max_pending: args.tls.max_pending as usize,
                handshake_timeout: args.tls.handshake_timeout,
            })
        }
    };
    let store = args.binlog_dir.clone();
    let bound = http::Port::bind(&options, args.effective_max_job_size(), store, secure).await;
    bound.map(Some).map_err(|e| {
        let what = format!("cannot listen on --http {}:{}", options.host, options.port);
        (what, e)
    })
}

/// The cluster's peer listener, with `--cluster-peer-*`, its files read now.
async fn peer_listener(
    cluster: Option<&sprout::cluster::Options>,
) -> Result<Option<Listener>, (String, std::io::Error)> {
    let Some((peers, options)) = cluster.and_then(|o| Some((o.peers.as_ref()?, o))) else {
        return Ok(None);
    };
    let what = "--cluster-peer-cert";
    let tls = sprout::cluster::PeerTls::load(peers, &options.advertise);
    let tls = std::sync::Arc::new(tls.map_err(|e| (what.to_string(), e))?);
    match Listener::bind_peer(&peers.listen, tls).await {
        Ok(l) => Ok(Some(l)),
        Err(e) => Err((
            format!("cannot listen on --cluster-peer-listen {}", peers.listen),
            e,
        )),
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

fn fail(what: &str, error: std::io::Error) -> ExitCode {
    eprintln!("sprout: {what}: {error}");
    ExitCode::FAILURE
}
