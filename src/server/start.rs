//! From the parsed command line to a serving process: every flag that can
//! be wrong is checked before anything is bound, then the ports are bound,
//! the store recovered (or the cluster joined), the embedded bridge
//! started, and the server run until a signal stops it. `sprout bridge`
//! starts here too. `main.rs` only parses, sets up logging and turns a
//! [`Failure`] into the exit status.

use std::fmt::Display;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use super::listener::Listener;
use super::{termination, Server};
use crate::auth::Policy;
use crate::bridge::{self, config::BridgeArgs};
use crate::cli::Args;
use crate::{cluster, http, service, tls};

/// Why the process could not start or stopped: what was being done, and
/// the error (printed as `sprout: WHAT: ERROR`).
#[derive(Debug)]
pub struct Failure {
    pub what: String,
    pub error: io::Error,
}

impl Failure {
    fn new(what: impl Into<String>, error: io::Error) -> Failure {
        Failure {
            what: what.into(),
            error,
        }
    }

    /// A flag's value refused, for the reason `why`.
    fn flag(what: &str, why: impl Display) -> Failure {
        Failure::new(what, io::Error::other(why.to_string()))
    }
}

type Started<T> = Result<T, Failure>;

/// `sprout bridge …`: the Redis TTL bridge as its own process.
pub async fn bridge(args: &BridgeArgs) -> Started<()> {
    crate::malloc::tune();
    let config = bridge::config::Config::from_args(args).map_err(|e| Failure::flag("bridge", e))?;
    let shutdown = termination().map_err(|e| Failure::new("cannot handle signals", e))?;
    let remote = bridge::remote::Remote::new(args.server.clone(), &args.remote)
        .map_err(|e| Failure::flag("bridge", e))?;
    let connector = bridge::server_side::Connector::Tcp(remote);
    let status = bridge::Status::default();
    if let Some(addr) = &args.metrics {
        http::serve_bridge_metrics(addr, status.clone())
            .await
            .map_err(|e| Failure::new(format!("cannot listen on --metrics {addr}"), e))?;
    }
    bridge::run(config, connector, shutdown, &status)
        .await
        .map_err(|e| Failure::new("bridge failed", e))
}

/// The flags read whole before anything is bound.
struct Checked {
    policy: Option<Policy>,
    tls: Option<tls::Options>,
    cluster: Option<cluster::Options>,
    bridge: Option<bridge::config::Config>,
}

/// Reads and checks them: a policy whole or not at all, the TLS files,
/// the cluster's options, the embedded bridge's.
fn check(args: &Args) -> Started<Checked> {
    if args.max_job_size > sprout_protocol::MAX_JOB_SIZE_LIMIT as u64 {
        tracing::warn!(
            "maximum job size was set to {}",
            sprout_protocol::MAX_JOB_SIZE_LIMIT
        );
    }
    let policy = args.auth.file.as_deref().map(Policy::load).transpose();
    let policy = policy.map_err(|e| Failure::flag("--auth", e))?;
    // (`--http-tls` without `--http` is refused with the HTTP flags.)
    let http_tls = args.http.tls && args.http.http.is_some();
    let tls = tls::Options::from_args(&args.tls, http_tls).map_err(|e| Failure::flag("TLS", e))?;
    let cluster = cluster_options(args).map_err(|e| Failure::flag("--cluster", e))?;
    let bridge = bridge::config::Config::from_embedded(&args.bridge, args.binlog_dir.as_deref());
    let bridge = match bridge.transpose() {
        Ok(config) => config,
        Err(_) if args.cluster.urls.is_some() && args.bridge.state_dir.is_none() => {
            let why = "in a cluster node the bridge's timers live in the cluster, its small \
                       index in --bridge-state-dir DIR (the node's own; -b is not used)";
            return Err(Failure::flag("--redis-bridge", why));
        }
        Err(e) => return Err(Failure::flag("--redis-bridge", e)),
    };
    Ok(Checked {
        policy,
        tls,
        cluster,
        bridge,
    })
}

/// The server: checks, binds, drops privileges, recovers or joins the
/// cluster, and serves until SIGTERM or SIGINT.
pub async fn serve(args: Args, inherited: Vec<(OwnedFd, String)>) -> Started<()> {
    // What sled takes in, a cluster node's pages and a burst of jobs
    // churn the heap (see `malloc`).
    crate::malloc::trim_free();
    let checked = check(&args)?;
    let (tls, cluster) = (checked.tls.as_ref(), checked.cluster.as_ref());
    let listeners = listen(&args, inherited, tls, cluster).await?;
    let http = http_port(&args, tls).await?;
    if let Some(user) = &args.user {
        crate::user::become_user(user)
            .map_err(|e| Failure::new(format!("cannot become user {user}"), e))?;
    }
    let shutdown = termination().map_err(|e| Failure::new("cannot handle signals", e))?;
    for listener in &listeners {
        tracing::info!(target: crate::STATUS, pid = std::process::id(), "listening on {listener}");
    }
    if let Some(dir) = &args.binlog_dir {
        service::status(&format!("recovering jobs from {}", dir.display()));
    }
    let status = bridge::Status::default();
    if let (Some(port), Some(config)) = (&http, &checked.bridge) {
        port.show_bridge(&config.tube, &config.timer_tube, status.clone());
    }
    // Setting a cluster up waits for NATS, for as long as it takes to
    // start or elect: SIGTERM stops that wait too.
    tokio::pin!(shutdown);
    let opened = match checked.cluster {
        Some(options) => tokio::select! {
            opened = Server::open_cluster(listeners, &args, &options) => opened,
            () = &mut shutdown => return Ok(()),
        },
        None => Server::open(listeners, &args),
    };
    let server = opened.map_err(|e| Failure::new("cannot start", e))?;
    let server = server.with_http(http).with_auth(checked.policy);
    if let Some(config) = checked.bridge {
        run_embedded_bridge(&server, config, status);
    }
    let served = server.run(shutdown).await;
    served.map_err(|e| Failure::new("server failed", e))
}

/// The embedded bridge, over in-process connections: in a cluster only on
/// the leader, once it leads.
fn run_embedded_bridge(server: &Server, config: bridge::config::Config, status: bridge::Status) {
    let connector = bridge::server_side::Connector::Local(server.local_connector());
    if let Some(side) = server.cluster() {
        side.run_bridge(config, move |config, stepped_down| async move {
            bridge::run(config, connector, stepped_down, &status).await
        });
        return;
    }
    tokio::spawn(async move {
        let run = bridge::run(config, connector, std::future::pending(), &status);
        if let Err(e) = run.await {
            tracing::error!(error = %e, "the embedded Redis bridge stopped");
        }
    });
}

/// `--cluster`'s options, checked before anything is bound.
fn cluster_options(args: &Args) -> Result<Option<cluster::Options>, cluster::ConfigError> {
    let guards = [
        ("--auth", args.auth.file.is_some()),
        ("--tls-listen", !args.tls.listen.is_empty()),
    ];
    let guards: Vec<&str> = guards.iter().filter(|g| g.1).map(|g| g.0).collect();
    let local = args.binlog_dir.clone().map(|dir| cluster::LocalCopy {
        dir,
        body_cache: args.body_cache,
    });
    cluster::Options::from_args(&args.cluster, &args.listen, args.port, local, &guards)
}

/// The sockets to serve: those systemd passed (socket activation, which
/// replaces `-l`/`-p`, as in beanstalkd), else one per `-l`; and one per
/// `--tls-listen` and the cluster's peer listener either way (systemd
/// passes no TLS configuration).
async fn listen(
    args: &Args,
    inherited: Vec<(OwnedFd, String)>,
    tls: Option<&tls::Options>,
    cluster: Option<&cluster::Options>,
) -> Started<Vec<Listener>> {
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
            listeners.push(
                inherited.map_err(|e| Failure::new(format!("socket {name} from systemd"), e))?,
            );
        }
        return Ok(listeners);
    }
    for addr in &args.listen {
        let bound = Listener::bind(addr, args.port).await;
        let what = || format!("cannot listen on {addr} port {}", args.port);
        listeners.push(bound.map_err(|e| Failure::new(what(), e))?);
    }
    Ok(listeners)
}

/// One listener per `--tls-listen`, all serving the certificate read now.
async fn tls_listeners(tls: Option<&tls::Options>) -> Started<Vec<Listener>> {
    let Some(options) = tls.filter(|o| !o.listen.is_empty()) else {
        return Ok(Vec::new());
    };
    let certs = tls::Certs::load(options.files.clone()).map_err(|e| Failure::new("TLS", e))?;
    let certs = Arc::new(certs);
    let mut listeners = Vec::with_capacity(options.listen.len());
    for addr in &options.listen {
        let bound = Listener::bind_tls(addr, certs.clone()).await;
        let what = || format!("cannot listen on --tls-listen {addr}");
        listeners.push(bound.map_err(|e| Failure::new(what(), e))?);
    }
    Ok(listeners)
}

/// The `--http` port, bound (over TLS with `--http-tls`), if asked for.
async fn http_port(args: &Args, tls: Option<&tls::Options>) -> Started<Option<http::Port>> {
    let Some(mut options) =
        http::Options::from_args(&args.http).map_err(|e| Failure::flag("--http", e))?
    else {
        return Ok(None);
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
            let certs = tls::Certs::load(files).map_err(|e| Failure::new("--http-tls", e))?;
            Some(http::HttpTls {
                certs: Arc::new(certs),
                max_pending: args.tls.max_pending as usize,
                handshake_timeout: args.tls.handshake_timeout,
            })
        }
    };
    let store = args.binlog_dir.clone();
    let bound = http::Port::bind(&options, args.effective_max_job_size(), store, secure).await;
    let what = || format!("cannot listen on --http {}:{}", options.host, options.port);
    bound.map(Some).map_err(|e| Failure::new(what(), e))
}

/// The cluster's peer listener, with `--cluster-peer-*`, its files read now.
async fn peer_listener(cluster: Option<&cluster::Options>) -> Started<Option<Listener>> {
    let Some((peers, options)) = cluster.and_then(|o| Some((o.peers.as_ref()?, o))) else {
        return Ok(None);
    };
    let tls = cluster::PeerTls::load(peers, &options.advertise);
    let tls = Arc::new(tls.map_err(|e| Failure::new("--cluster-peer-cert", e))?);
    let bound = Listener::bind_peer(&peers.listen, tls).await;
    let what = || format!("cannot listen on --cluster-peer-listen {}", peers.listen);
    bound.map(Some).map_err(|e| Failure::new(what(), e))
}
