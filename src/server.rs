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

mod listener;
pub mod start;

pub use listener::Listener;

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use tokio::net::TcpStream;
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
                    body_cache_bytes: args.body_cache,
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
            why = self.cluster_failed() => return Err(io::Error::other(why)),
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

    /// Why this node must stop serving, once it must (cluster mode only).
    async fn cluster_failed(&self) -> String {
        match &self.cluster {
            Some(side) => side.failed().await,
            None => std::future::pending().await,
        }
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
        bodies_in_store: args.binlog_dir.is_some(),
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
