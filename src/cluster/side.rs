//! The server's side of cluster mode: joining (`start`), where each
//! client goes (served here, or passed to the leader), the embedded
//! bridge's turn, and the graceful stop.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

use crate::auth;
use crate::engine::{Clock, Engine, EngineConfig};
use crate::peer::Peer;
use crate::shared::Shared;

use super::bridge::SteppedDown;
use super::cluster_flags::Options;
use super::follow::Pages;
use super::peers::PeerTls;
use super::role::Role;
use super::{bridge, cluster_store, node, relay, version, via, vouch};

/// How long a client that connects while no node leads waits for one.
const WAIT_FOR_LEADER: Duration = Duration::from_secs(10);

/// How long a graceful stop waits for NATS to take this node's claim and
/// lease back (a node that cannot reach NATS leaves them to age out).
const LEAVE_TIMEOUT: Duration = Duration::from_secs(1);

/// The server's side of cluster mode: where each client goes, and the
/// graceful stop.
#[derive(Clone)]
pub struct Side {
    role: watch::Receiver<Role>,
    /// Turns true at a graceful stop.
    closed: Arc<watch::Sender<bool>>,
    /// Turns true once the node has left (claim withdrawn, lease released).
    left: watch::Receiver<bool>,
    shared: Arc<Shared>,
    /// This node, for the `stats` answers it relays.
    via: via::Via,
    max_job_size: u32,
    /// With `--cluster-peer-*`: the links to the other nodes.
    peers: Option<Arc<PeerTls>>,
    /// Why this node must stop serving, once it must (see [`Side::failed`]).
    fatal: Fatal,
}

/// Set once, by whichever part of the node finds it must stop serving
/// (deposed, its stream refusing a batch, NATS too old, the embedded
/// bridge stopping): the server stops and `main` exits with an error.
type Fatal = Arc<watch::Sender<Option<String>>>;

/// Records why the node must stop (the first reason stays).
fn fail(fatal: &Fatal, why: String) {
    tracing::error!("cluster: {why}; stopping");
    fatal.send_if_modified(|first| match first {
        Some(_) => false,
        None => {
            *first = Some(why);
            true
        }
    });
}

/// Connects to the cluster and starts following it: the engine begins
/// empty and fills from the stream. A node that must stop serving (deposed,
/// or its stream refuses a batch) says so through [`Side::failed`], and the
/// server stops: fail-stop. `peers`: the peer links' TLS, with
/// `--cluster-peer-*`.
pub async fn start(
    options: &Options,
    config: EngineConfig,
    clock: Clock,
    peers: Option<Arc<PeerTls>>,
) -> Result<(Arc<Shared>, Side), node::NodeError> {
    let node = node::connect(options).await?;
    let client = node.client();
    let fatal: Fatal = Arc::new(watch::channel(None).0);
    let too_old = fatal.clone();
    tokio::spawn(async move { fail(&too_old, version::watch(client).await) });
    let max_job_size = config.max_job_size.min(node.max_job_size());
    if max_job_size < config.max_job_size {
        tracing::warn!("-z lowered to {max_job_size}: a job must fit in one NATS message");
    }
    let pages = Pages::open(options.local.as_ref(), config.binlog.clone())
        .map_err(|e| node::NodeError::Page(e.into()))?;
    let config = EngineConfig {
        max_job_size,
        journal: true,
        // With -b, bodies are read back from this node's copy of the pages.
        bodies_in_store: pages.bodies.is_some(),
        ..config
    };
    let engine = Engine::new(config, clock.now());
    let store = cluster_store::ClusterStore::new(pages.bodies.clone());
    let shared = Arc::new(Shared::new(engine, clock, Box::new(store.clone())));
    let (role_tx, role) = watch::channel(Role::Standby { leader: None });
    let (closed, closed_rx) = watch::channel(false);
    let (left_tx, left) = watch::channel(false);
    let run = node::run(node, pages, shared.clone(), store, role_tx, closed_rx);
    let failed = fatal.clone();
    tokio::spawn(async move {
        match run.await {
            Ok(()) => drop(left_tx.send_replace(true)),
            Err(why) => fail(&failed, why.to_string()),
        }
    });
    let via = via::Via {
        node: options.node.clone(),
        max_job_size,
    };
    Ok((
        shared.clone(),
        Side {
            role,
            closed: Arc::new(closed),
            left,
            shared,
            via,
            max_job_size,
            peers,
            fatal,
        },
    ))
}

impl Side {
    /// The largest job body, as lowered for the cluster.
    pub fn max_job_size(&self) -> u32 {
        self.max_job_size
    }

    /// Whether this node serves its clients itself.
    pub fn leading(&self) -> bool {
        *self.role.borrow() == Role::Leader
    }

    /// Serves a client a standby accepted: passed through to the leader
    /// (waiting for one to be known), or served here if this node has come
    /// to lead meanwhile. `peer` is where the client came from.
    pub async fn pass<S>(mut self, client: S, peer: Peer)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let known = self.role.wait_for(|r| *r != Role::Standby { leader: None });
        let role = match tokio::time::timeout(WAIT_FOR_LEADER, known).await {
            Ok(Ok(role)) => role.clone(),
            _ => return,
        };
        match role {
            Role::Leader => {
                let shared = self.shared.clone();
                crate::connection::serve(client, peer, shared, self.max_job_size, None).await
            }
            Role::Standby { leader: Some(addr) } => {
                let (via, wait) = (Some(&self.via), relay::CONNECT_TIMEOUT);
                let relayed = match &self.peers {
                    None => relay::relay(client, &addr, wait, via).await,
                    Some(peers) => {
                        let first = vouch::line(&peer.addr, self.principal(&peer));
                        let (config, first) = (peers.client(), first.as_bytes());
                        relay::relay_tls(client, &addr, config, first, wait, via).await
                    }
                };
                if let Err(e) = relayed {
                    tracing::info!("relay to the leader {addr}: {e}");
                }
            }
            Role::Standby { leader: None } => {}
        }
    }

    /// The principal the leader is to give a client from `peer`: the one
    /// it would have on this node (none without `--auth`).
    fn principal(&self, peer: &Peer) -> Option<&str> {
        let gate = self.shared.auth()?;
        let id = auth::proven_principal(gate, peer)?;
        Some(&gate.policy().principal(id).name)
    }

    /// Serves a client another node passed on to this one's peer listener
    /// (`peers.rs`), once this node leads: the node sent it here because
    /// it saw this one take the lease, which it may not have claimed yet.
    /// A node that does not come to lead closes it (the client reconnects
    /// and finds the leader) rather than pass it on again: passes between
    /// nodes that disagree on who leads could go round in a loop.
    pub async fn serve_relayed<S>(mut self, client: S, peer: Peer)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let leading = self.role.wait_for(|r| *r == Role::Leader);
        let leads = tokio::time::timeout(WAIT_FOR_LEADER, leading)
            .await
            .is_ok_and(|r| r.is_ok());
        match leads {
            true => {
                let (shared, max) = (self.shared, self.max_job_size);
                crate::connection::serve(client, peer, shared, max, None).await
            }
            false => tracing::info!("a relayed client, but this node does not lead: closed"),
        }
    }

    /// Runs the embedded Redis bridge whenever this node leads (see
    /// `bridge.rs`): once it leads and has handed the old leader's bridge
    /// work over, `bridge(config, stepped_down)` runs it (the caller's
    /// wiring: in-process connections to this node), where `stepped_down`
    /// completes if this node stops leading.
    pub fn run_bridge<F, Fut>(&self, config: crate::bridge::config::Config, bridge: F)
    where
        F: FnOnce(crate::bridge::config::Config, SteppedDown) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = std::io::Result<()>> + Send + 'static,
    {
        let run = bridge::run(self.role.clone(), self.shared.clone(), config, bridge);
        let fatal = self.fatal.clone();
        tokio::spawn(async move {
            if let Some(why) = run.await {
                fail(&fatal, why);
            }
        });
    }

    /// Completes, with the reason, once this node must stop serving: the
    /// server then stops at once, without the graceful stop's wait (a
    /// deposed leader's writes fail anyway), and the process exits with an
    /// error.
    pub async fn failed(&self) -> String {
        let mut fatal = self.fatal.subscribe();
        let why = match fatal.wait_for(Option::is_some).await {
            Ok(why) => why.clone(),
            Err(_) => None,
        };
        match why {
            Some(why) => why,
            None => std::future::pending().await,
        }
    }

    /// At shutdown, after the store is closed: withdraws this node's
    /// claim on its id and gives the lease up (if it leads), so neither a
    /// standby nor this node started elsewhere need wait them out. Waits
    /// for NATS at most [`LEAVE_TIMEOUT`].
    pub async fn stop(&self) {
        self.closed.send_replace(true);
        let mut left = self.left.clone();
        let _ = tokio::time::timeout(LEAVE_TIMEOUT, left.wait_for(|left| *left)).await;
    }
}
