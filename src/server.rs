//! The listener, the accept loop, signals and shutdown.
//!
//! `-l unix:PATH` serves a unix socket (a stale socket file left by a
//! previous run is replaced); anything else is a host or address to bind
//! with `-p`. `--tls-listen ADDR:PORT` serves TLS (see [`crate::tls`]): a
//! connection accepted there takes a slot of `--max-pending` (or is closed
//! at once when none is free), finishes its handshake in its own task by
//! `--handshake-timeout`, and is served as any other: without `--auth` it
//! gives the slot back then, with `--auth` once it authenticates (a plain
//! connection that must authenticate takes a slot too: `auth/session.rs`).
//! `--cluster-peer-listen` is a TLS listener for the clients other nodes
//! pass on (`cluster/peers.rs`): the same slots and deadline cover its
//! handshake and the node's first line, and its clients are served as the
//! nodes vouch, once this node leads.
//!
//! SIGUSR1 turns drain mode on; SIGTERM and SIGINT stop the server at
//! once, releasing the port for the next process. SIGHUP reloads the TLS
//! certificate, key and client CA (and the peer links' files), and is
//! caught only when there are TLS listeners (or a peer listener): without
//! them it ends the process as it ends beanstalkd (a
//! supervisor or a closed terminal may rely on that), so a server started
//! without TLS flags behaves to signals exactly as before.

pub mod start;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tracing::Instrument;

use crate::auth::{Gate, Policy};
use crate::binlog_stats::BinlogStats;
use crate::cli::Args;
use crate::cluster;
use crate::connection::{self, LocalConnector};
use crate::engine::{Clock, Engine, EngineConfig, JobImage};
use crate::http;
use crate::peer::Peer;
use crate::pending::{Pending, PendingLimit};
use crate::service;
use crate::shared::Shared;
use crate::store::durable::{self, DurableStore};
use crate::store::{Memory, Store};
use crate::timer;
use crate::tls;

/// One socket the server accepts connections on.
pub enum Listener {
    Tcp(TcpListener),
    /// A unix socket, with the path to remove on exit when sprout made it
    /// (a socket systemd passed stays: systemd owns it).
    Unix(UnixListener, Option<PathBuf>),
    /// `--tls-listen`: TCP, every connection a TLS handshake with the
    /// configuration all TLS listeners share.
    Tls(TcpListener, Arc<tls::Certs>),
    /// `--cluster-peer-listen`: TLS for the other nodes of the cluster,
    /// which pass their clients on here.
    Peer(TcpListener, Arc<cluster::PeerTls>),
}

impl Listener {
    /// Binds what one `-l` (with `-p`) names.
    pub async fn bind(listen: &str, port: u16) -> io::Result<Listener> {
        match listen.strip_prefix("unix:") {
            Some(path) => Listener::bind_unix(Path::new(path)),
            None => Ok(Listener::Tcp(TcpListener::bind((listen, port)).await?)),
        }
    }

    /// Binds one `--tls-listen ADDR:PORT`, serving `certs`.
    pub async fn bind_tls(addr: &str, certs: Arc<tls::Certs>) -> io::Result<Listener> {
        Ok(Listener::Tls(TcpListener::bind(addr).await?, certs))
    }

    /// Binds `--cluster-peer-listen ADDR:PORT`, serving `peers`.
    pub async fn bind_peer(addr: &str, peers: Arc<cluster::PeerTls>) -> io::Result<Listener> {
        Ok(Listener::Peer(TcpListener::bind(addr).await?, peers))
    }

    fn bind_unix(path: &Path) -> io::Result<Listener> {
        use std::os::unix::fs::FileTypeExt;
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path)?,
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a socket", path.display()),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(Listener::Unix(
            UnixListener::bind(path)?,
            Some(path.to_owned()),
        ))
    }

    /// Takes over a listening socket systemd passed (socket activation):
    /// TCP or unix, refused if it is not a listening stream socket.
    pub fn inherit(fd: OwnedFd) -> io::Result<Listener> {
        let raw = fd.as_raw_fd();
        let not_ours = |what: &str| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("descriptor {raw} from systemd is {what}, not a listening stream socket"),
            )
        };
        if sockopt(&fd, libc::SO_TYPE)? != libc::SOCK_STREAM {
            return Err(not_ours("not a stream socket"));
        }
        if sockopt(&fd, libc::SO_ACCEPTCONN)? == 0 {
            return Err(not_ours("not listening"));
        }
        match socket_family(&fd)? {
            libc::AF_INET | libc::AF_INET6 => {
                let l = std::net::TcpListener::from(fd);
                l.set_nonblocking(true)?;
                Ok(Listener::Tcp(TcpListener::from_std(l)?))
            }
            libc::AF_UNIX => {
                let l = std::os::unix::net::UnixListener::from(fd);
                l.set_nonblocking(true)?;
                Ok(Listener::Unix(UnixListener::from_std(l)?, None))
            }
            _ => Err(not_ours("of another family")),
        }
    }

    /// The origin of a connection this listener accepted from `addr`
    /// (its certificate, on a TLS listener, once the handshake is done).
    fn peer(&self, addr: String) -> Peer {
        Peer {
            addr,
            listener: self.name(),
            cert: None,
            vouched: None,
        }
    }

    /// Its name in `Peer.listener` and in an `--auth` policy: as bound,
    /// and as `-l` or `--tls-listen` spell it (`127.0.0.1:11300`,
    /// `unix:/run/sprout/sprout.sock`): the `tls:` the log shows before a
    /// TLS listener is left out.
    fn name(&self) -> String {
        match self {
            Listener::Tls(l, _) => l.local_addr().map_or("tls:?".into(), |a| a.to_string()),
            // The peer listener's `peer:ADDR`, which no policy names: its
            // clients are who the nodes vouch for (`auth/session.rs`).
            _ => self.to_string(),
        }
    }

    /// The bound TCP address (None for a unix socket).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match self {
            Listener::Tcp(l) | Listener::Tls(l, _) | Listener::Peer(l, _) => l.local_addr().ok(),
            Listener::Unix(..) => None,
        }
    }

    /// The TLS configuration it serves, if it is a TLS listener.
    fn certs(&self) -> Option<&Arc<tls::Certs>> {
        match self {
            Listener::Tls(_, certs) => Some(certs),
            _ => None,
        }
    }

    /// The peer links' configuration, if it is the peer listener.
    fn peers(&self) -> Option<&Arc<cluster::PeerTls>> {
        match self {
            Listener::Peer(_, peers) => Some(peers),
            _ => None,
        }
    }
}

impl std::fmt::Display for Listener {
    /// `127.0.0.1:11300` or `unix:/run/sprout/sprout.sock`, as `-l` reads it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listener::Tcp(l) => match l.local_addr() {
                Ok(addr) => write!(f, "{addr}"),
                Err(_) => f.write_str("tcp:?"),
            },
            Listener::Tls(l, _) => match l.local_addr() {
                Ok(addr) => write!(f, "tls:{addr}"),
                Err(_) => f.write_str("tls:?"),
            },
            Listener::Peer(l, _) => match l.local_addr() {
                Ok(addr) => write!(f, "peer:{addr}"),
                Err(_) => f.write_str("peer:?"),
            },
            Listener::Unix(l, _) => {
                match l.local_addr().ok().as_ref().and_then(|a| a.as_pathname()) {
                    Some(path) => write!(f, "unix:{}", path.display()),
                    None => f.write_str("unix:?"),
                }
            }
        }
    }
}

fn sockopt(fd: &OwnedFd, option: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `value`.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(value)
}

fn socket_family(fd: &OwnedFd) -> io::Result<libc::c_int> {
    // SAFETY: an all-zero sockaddr_storage is valid; getsockname fills at
    // most `len` bytes of it.
    let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let r = unsafe {
        libc::getsockname(
            fd.as_raw_fd(),
            (&mut addr as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(addr.ss_family as libc::c_int)
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, Some(path)) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A durable store's jobs go straight into the engine as they are read.
impl durable::Restore for Engine {
    fn reserve(&mut self, jobs: usize) {
        self.reserve_jobs(jobs);
    }

    fn restore(&mut self, image: &JobImage) {
        Engine::restore(self, image);
    }
}

/// A bound server, ready to run.
pub struct Server {
    listeners: Vec<Listener>,
    shared: Arc<Shared>,
    max_job_size: u32,
    http: Option<http::Port>,
    cluster: Option<cluster::Side>,
    /// Slots for connections still in their TLS handshake (or, with
    /// `--auth`, not yet authenticated).
    pending: Arc<PendingLimit>,
}

impl Server {
    /// Builds the server `args` describe on `listeners`: with `-b`, opens
    /// the store and restores every job it holds.
    pub fn open(listeners: Vec<Listener>, args: &Args) -> io::Result<Server> {
        let clock = Clock::new();
        let binlog = Arc::new(BinlogStats::default());
        let config = engine_config(args, binlog.clone());
        let mut engine = Engine::new(config, clock.now());
        let store: Box<dyn Store> = match &args.binlog_dir {
            None => Box::new(Memory::new()),
            Some(dir) => {
                let started = std::time::Instant::now();
                let options = durable::Options {
                    dir: dir.clone(),
                    policy: args.policy(),
                    cache_bytes: args.store_cache,
                    salvage: args.salvage,
                    file_size: args.binlog_size,
                    max_job_size: args.effective_max_job_size(),
                };
                let (store, recovered) = DurableStore::open(&options, binlog, &mut engine)?;
                engine.reserve_ids_below(recovered.next_id);
                tracing::info!(
                    target: crate::STATUS,
                    jobs = recovered.jobs,
                    skipped = recovered.skipped,
                    journal_frames = recovered.replayed,
                    stored_bytes = recovered.stored_bytes,
                    live_bytes = recovered.live_bytes,
                    "recovered from {} in {:.1?}",
                    dir.display(),
                    started.elapsed()
                );
                Box::new(store)
            }
        };
        Ok(Server {
            listeners,
            shared: Arc::new(Shared::new(engine, clock, store)),
            max_job_size: args.effective_max_job_size(),
            http: None,
            cluster: None,
            pending: pending_limit(args),
        })
    }

    /// Builds a node of the cluster `options` describe (`--cluster`): it
    /// follows the cluster's stream, and serves once it leads.
    pub async fn open_cluster(
        listeners: Vec<Listener>,
        args: &Args,
        options: &cluster::Options,
    ) -> io::Result<Server> {
        let config = engine_config(args, Arc::default());
        let peers = listeners.iter().find_map(Listener::peers).cloned();
        let (shared, side) = cluster::start(options, config, Clock::new(), peers)
            .await
            .map_err(io::Error::other)?;
        Ok(Server {
            listeners,
            shared,
            max_job_size: side.max_job_size(),
            http: None,
            cluster: Some(side),
            pending: pending_limit(args),
        })
    }

    /// Puts every connection through a gate of `policy` (`--auth`). A
    /// listener the policy names that this server does not listen on is
    /// worth a warning: its connections would have to authenticate after
    /// all.
    pub fn with_auth(self, policy: Option<Policy>) -> Server {
        let Some(policy) = policy else { return self };
        let gate = Gate::new(policy, self.pending.clone());
        let bound: Vec<String> = self.listeners.iter().map(Listener::name).collect();
        for named in gate.policy().listeners() {
            if !bound.iter().any(|l| l == named) {
                tracing::warn!(
                    listener = named,
                    "--auth: the policy names a listener this server does not have"
                );
            }
        }
        self.shared.set_auth(Arc::new(gate));
        self
    }

    /// Serves `port` (bound before recovery, see [`http`]) once running.
    pub fn with_http(mut self, port: Option<http::Port>) -> Server {
        self.http = port;
        self
    }

    /// Serves until `shutdown` completes.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> io::Result<()> {
        // Registered before the first accept: SIGUSR1's default action
        // would kill the process.
        let usr1 = signal(SignalKind::user_defined1())?;
        // Only with TLS listeners (see the module doc).
        let mut reloads = Vec::new();
        if let Some(certs) = self.listeners.iter().find_map(Listener::certs) {
            let hup = signal(SignalKind::hangup())?;
            reloads.push(tokio::spawn(
                certs.clone().reload_at(hup, "the beanstalk port"),
            ));
        }
        if let Some(peers) = self.listeners.iter().find_map(Listener::peers) {
            let hup = signal(SignalKind::hangup())?;
            reloads.push(tokio::spawn(peers.clone().reload_at(hup)));
        }
        let timer = timer::spawn(self.shared.clone())?;
        let drain = tokio::spawn(drain_on_sigusr1(self.shared.clone(), usr1));
        if let Some(port) = &self.http {
            port.attach(self.shared.clone());
        }
        service::ready(&self.describe());
        tokio::select! {
            result = self.accept_loop() => result?,
            _ = shutdown => {}
        }
        service::stopping();
        self.shared.alarm.stop();
        drain.abort();
        for reload in reloads {
            reload.abort();
        }
        // Whatever was acknowledged reaches the disk before we exit.
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || {
            let _ = timer.join();
            shared.store.close();
        })
        .await?;
        if let Some(side) = &self.cluster {
            side.stop().await;
        }
        Ok(())
    }

    /// "serving on ADDR, ADDR": the service status line.
    fn describe(&self) -> String {
        let on: Vec<String> = self.listeners.iter().map(|l| l.to_string()).collect();
        format!("serving on {}", on.join(", "))
    }

    async fn accept_loop(&self) -> io::Result<()> {
        let loops = self.listeners.iter().map(|l| self.accept_on(l));
        futures_util::future::try_join_all(loops).await?;
        Ok(())
    }

    async fn accept_on(&self, listener: &Listener) -> io::Result<()> {
        loop {
            let accepted = match listener {
                Listener::Tcp(l) => l.accept().await.map(|(stream, addr)| {
                    // Answers are written whole; don't let Nagle hold them.
                    let _ = stream.set_nodelay(true);
                    self.spawn(stream, listener.peer(addr.to_string()))
                }),
                Listener::Unix(l, _) => l
                    .accept()
                    .await
                    .map(|(stream, _)| self.spawn(stream, listener.peer("unix".into()))),
                Listener::Tls(l, certs) => l.accept().await.map(|(stream, addr)| {
                    let _ = stream.set_nodelay(true);
                    let peer = listener.peer(addr.to_string());
                    self.spawn_tls(stream, peer, certs.current())
                }),
                Listener::Peer(l, peers) => l.accept().await.map(|(stream, addr)| {
                    let _ = stream.set_nodelay(true);
                    let peer = listener.peer(addr.to_string());
                    self.spawn_relayed(stream, peer, peers.server())
                }),
            };
            if let Err(e) = accepted {
                // Out of descriptors or memory: wait for some to free up
                // rather than spin.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    /// Serves `stream` in its own task; its log lines carry `peer`.
    fn spawn<S>(&self, stream: S, peer: Peer)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let span = tracing::info_span!("client", peer = %peer);
        tokio::spawn(self.serving().serve(stream, peer, None).instrument(span));
    }

    /// Completes the TLS handshake on `stream` in its own task, with
    /// `config`, then serves it; closes it at once instead when
    /// `--max-pending` connections are already in their handshake.
    fn spawn_tls(&self, stream: TcpStream, mut peer: Peer, config: Arc<ServerConfig>) {
        let Some(pending) = self.pending.admit() else {
            return;
        };
        let span = tracing::info_span!("client", peer = %peer);
        let serving = self.serving();
        let task = async move {
            match tls::accept(config, stream, pending.deadline()).await {
                Ok((stream, cert)) => {
                    peer.cert = cert;
                    // Boxed: a connection's state is allocated once it
                    // is served, not while 1000s may wait in handshakes.
                    Box::pin(serving.serve(stream, peer, Some(pending))).await
                }
                Err(e) => tracing::info!(error = %e, "TLS handshake failed"),
            }
        };
        tokio::spawn(task.instrument(span));
    }

    /// Takes a client another node passes on (the handshake with a
    /// node's certificate and its first line, `cluster/peers.rs`, in its
    /// own task under a `--max-pending` slot and its deadline), and serves
    /// it as that client.
    fn spawn_relayed(&self, stream: TcpStream, node: Peer, config: Arc<ServerConfig>) {
        let (Some(side), Some(pending)) = (self.cluster.clone(), self.pending.admit()) else {
            return;
        };
        let span = tracing::info_span!("relay", node = %node);
        let task = async move {
            match cluster::peers::accept(config, stream, node, pending.deadline()).await {
                Ok((stream, peer)) => {
                    drop(pending);
                    let span = tracing::info_span!("client", peer = %peer);
                    Box::pin(side.serve_relayed(stream, peer))
                        .instrument(span)
                        .await
                }
                Err(e) => tracing::info!(error = %e, "refused a relay"),
            }
        };
        tokio::spawn(task.instrument(span));
    }

    fn serving(&self) -> Serving {
        Serving {
            shared: self.shared.clone(),
            max_job_size: self.max_job_size,
            cluster: self.cluster.clone(),
        }
    }
}

/// What serving an accepted connection takes from the server.
struct Serving {
    shared: Arc<Shared>,
    max_job_size: u32,
    cluster: Option<cluster::Side>,
}

impl Serving {
    /// Serves the client here (`slot`: see `connection::serve`) or, on a
    /// standby, passes it to the leader, where it takes the leader's.
    async fn serve<S>(self, stream: S, peer: Peer, slot: Option<Pending>)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        match self.cluster {
            Some(side) if !side.leading() => {
                drop(slot);
                side.pass(stream, peer).await
            }
            _ => connection::serve(stream, peer, self.shared, self.max_job_size, slot).await,
        }
    }
}

/// `--max-pending` slots of `--handshake-timeout` each.
fn pending_limit(args: &Args) -> Arc<PendingLimit> {
    let limit = PendingLimit::new(args.tls.max_pending as usize, args.tls.handshake_timeout);
    Arc::new(limit)
}

/// The engine's settings from the command line.
fn engine_config(args: &Args, binlog: Arc<BinlogStats>) -> EngineConfig {
    EngineConfig {
        max_job_size: args.effective_max_job_size(),
        binlog_max_size: args.binlog_size,
        journal: args.binlog_dir.is_some(),
        binlog,
        jobs_budget: args.max_jobs_size,
    }
}

impl Server {
    /// Its cluster side, in cluster mode.
    pub fn cluster(&self) -> Option<&cluster::Side> {
        self.cluster.as_ref()
    }

    /// A connector for in-process clients of this server.
    pub fn local_connector(&self) -> LocalConnector {
        LocalConnector::new(self.shared.clone(), self.max_job_size)
    }
}

async fn drain_on_sigusr1(shared: Arc<Shared>, mut usr1: Signal) {
    while usr1.recv().await.is_some() {
        tracing::info!("SIGUSR1: entering drain mode");
        shared.lock().engine.set_draining(true);
    }
}

/// A future that completes on SIGTERM or SIGINT. The handlers are installed
/// by this call, not when the future is first polled.
pub fn termination() -> io::Result<impl Future<Output = ()>> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!(target: crate::STATUS, "SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!(target: crate::STATUS, "SIGINT: shutting down"),
        }
    })
}
