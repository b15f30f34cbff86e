//! `--redis-cluster redis://ANY_NODE`: a whole Redis Cluster as one node of
//! the bridge, found by discovery and followed as it changes.
//!
//! * **Topology**: `CLUSTER SLOTS` (Redis ≥ 3.0) gives each slot's master
//!   as one node sees it; [`RedisCluster::refresh`] asks up to [`VIEWS`]
//!   nodes every [`REFRESH`] and after a `MOVED`, and keeps for each slot
//!   the newest claim by config epoch (`CLUSTER NODES`), so a node not yet
//!   told of a failover cannot hide the new master (see `topology`). `run`
//!   in the bridge's `mod.rs` subscribes to every master it finds.
//! * **Timers are named by the key**, not by a master: the cluster is one
//!   bridge node, so a key's timer and index entry stay the same whichever
//!   master holds it. A resharding (`MIGRATE`: `del` on the old master,
//!   `restore` on the new) or a failover (a replica promoted with the keys
//!   and their TTLs) changes nothing but where the key is read.
//! * **Reads follow the key**: a batch of keys is split by slot owner, one
//!   pipeline per master; a key a master answers `MOVED` for is read at the
//!   node `MOVED` names (and the topology read again), one answered `ASK`
//!   (its slot is being migrated and the key is already gone) is read at
//!   the importing node after `ASKING`. So a key in flight during a
//!   migration is found on one side or the other, never taken for deleted.
//! * Reconciliation scans every master of the moment (see `reconcile`), and
//!   its vanished-key check covers the whole cluster.
//!
//! Limits: one database (Cluster has only 0); a master that leaves the
//! cluster keeps its (failing) subscription retried in the background.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo, ErrorKind, RedisResult};

use super::expiry::Reading;
use super::redis_side::Redis;
use topology::{Topology, View};

mod topology;

/// How often the topology is read (besides after a `MOVED`), and how long
/// each node asked has to answer.
pub const REFRESH: Duration = Duration::from_secs(1);
/// How many nodes' views a topology read compares.
const VIEWS: usize = 3;

/// A Redis Cluster: its topology and a connection per node met; clones
/// share them.
#[derive(Clone)]
pub struct RedisCluster(Arc<Inner>);

struct Inner {
    /// Database and credentials for every node; the seed's address.
    template: ConnectionInfo,
    pubsub: bool,
    topology: RwLock<Topology>,
    nodes: tokio::sync::Mutex<HashMap<String, Redis>>,
}

impl RedisCluster {
    /// Reads the topology from the node at `seed` and connects to every
    /// master.
    pub async fn discover(seed: ConnectionInfo, pubsub: bool) -> RedisResult<RedisCluster> {
        let cluster = RedisCluster(Arc::new(Inner {
            template: seed,
            pubsub,
            topology: RwLock::new(Topology::default()),
            nodes: tokio::sync::Mutex::new(HashMap::new()),
        }));
        let seed = addr_of(&cluster.0.template);
        cluster.refresh_from(&[seed]).await?;
        Ok(cluster)
    }

    fn topology(&self) -> Topology {
        self.0
            .topology
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The masters now, each with its connection.
    pub async fn masters(&self) -> RedisResult<Vec<(String, Redis)>> {
        let mut out = Vec::new();
        for addr in self.topology().masters {
            let redis = self.node(&addr).await?;
            out.push((addr, redis));
        }
        Ok(out)
    }

    /// Whether the node at `addr` (`HOST:PORT`) is a master now.
    fn is_master(&self, addr: &str) -> bool {
        let topology = self.0.topology.read().unwrap_or_else(|e| e.into_inner());
        topology.masters.iter().any(|m| m == addr)
    }

    /// Reads the topology again from the masters (and the seed); true if
    /// the masters changed.
    pub async fn refresh(&self) -> RedisResult<bool> {
        let mut ask = self.topology().masters;
        ask.push(addr_of(&self.0.template));
        self.refresh_from(&ask).await
    }

    /// Asks the nodes at `ask`, in turn, until [`VIEWS`] have answered
    /// (each within a [`REFRESH`]), and keeps the newest view of each slot
    /// (see `topology`); true if the masters changed.
    async fn refresh_from(&self, ask: &[String]) -> RedisResult<bool> {
        let mut views = Vec::new();
        let mut last = None;
        for addr in ask {
            match tokio::time::timeout(REFRESH, self.view_of(addr)).await {
                Ok(Ok(view)) => views.push(view),
                Ok(Err(e)) => last = Some(e),
                Err(_) => last = Some((ErrorKind::IoError, "no answer in time").into()),
            }
            if views.len() == VIEWS {
                break;
            }
        }
        if views.is_empty() {
            let none = || (ErrorKind::ClientError, "no cluster node to ask").into();
            return Err(last.unwrap_or_else(none));
        }
        let t = Topology::newest(&views);
        let mut current = self.0.topology.write().unwrap_or_else(|e| e.into_inner());
        let changed = current.masters != t.masters;
        *current = t;
        Ok(changed)
    }

    /// What the node at `addr` says of the cluster.
    async fn view_of(&self, addr: &str) -> RedisResult<View> {
        let (slots, nodes) = self.node(addr).await?.cluster_view().await?;
        let host = addr.rsplit_once(':').map_or("", |(h, _)| h);
        View::parse(&slots, &nodes, host)
            .ok_or_else(|| (ErrorKind::TypeError, "unreadable CLUSTER SLOTS answer").into())
    }

    /// The connection to the node at `addr` (`HOST:PORT`), opened once
    /// (not under the lock: a node slow to answer holds up only its own
    /// keys).
    async fn node(&self, addr: &str) -> RedisResult<Redis> {
        if let Some(redis) = self.0.nodes.lock().await.get(addr) {
            return Ok(redis.clone());
        }
        let (host, port) = addr
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
            .ok_or_else(|| redis::RedisError::from((ErrorKind::ClientError, "bad node address")))?;
        let info = ConnectionInfo {
            addr: ConnectionAddr::Tcp(host.to_owned(), port),
            redis: self.0.template.redis.clone(),
        };
        let redis = Redis::connect_to(info, self.0.pubsub).await?;
        let mut nodes = self.0.nodes.lock().await;
        Ok(nodes.entry(addr.to_owned()).or_insert(redis).clone())
    }

    /// The master of `key`'s slot.
    async fn owner(&self, key: &[u8]) -> RedisResult<Redis> {
        let addr = self.topology().master_of(key).map(str::to_owned);
        match addr {
            Some(addr) => self.node(&addr).await,
            None => {
                self.refresh().await?;
                Err((ErrorKind::ClusterDown, "no master holds the key's slot").into())
            }
        }
    }

    /// Each key's expiry, read where it is (see the module docs); in the
    /// order of `keys`.
    pub async fn expiries(&self, keys: &[&[u8]]) -> RedisResult<Vec<Reading>> {
        let topology = self.topology();
        let mut out: Vec<Option<Reading>> = vec![None; keys.len()];
        let mut by_master: HashMap<Option<&str>, Vec<usize>> = HashMap::new();
        for (i, key) in keys.iter().enumerate() {
            by_master
                .entry(topology.master_of(key))
                .or_default()
                .push(i);
        }
        let mut redirected = Vec::new();
        for (master, at) in by_master {
            let Some(master) = master else {
                redirected.extend(at);
                continue;
            };
            let names: Vec<&[u8]> = at.iter().map(|&i| keys[i]).collect();
            let answers = self
                .node(master)
                .await?
                .expiries_each(&names, false)
                .await?;
            for (i, answer) in at.into_iter().zip(answers) {
                match answer {
                    Ok(reading) => out[i] = Some(reading),
                    Err(e) if matches!(e.kind(), ErrorKind::Moved | ErrorKind::Ask) => {
                        redirected.push(i);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        if !redirected.is_empty() {
            // Keys in flight: read each where its master sends it.
            for i in redirected {
                out[i] = Some(self.expiry_redirected(keys[i]).await?);
            }
        }
        Ok(out
            .into_iter()
            .map(|r| r.expect("every key read"))
            .collect())
    }

    /// One key's expiry, following one `MOVED` (the topology is read
    /// again) or `ASK` (read after `ASKING`) from its master.
    async fn expiry_redirected(&self, key: &[u8]) -> RedisResult<Reading> {
        let mut asking = false;
        let mut at = self.owner(key).await?;
        for _ in 0..3 {
            let answer = at.expiries_each(&[key], asking).await?.remove(0);
            match answer {
                Ok(reading) => return Ok(reading),
                Err(e) => match (e.kind(), e.redirect_node()) {
                    (ErrorKind::Moved, Some((addr, _))) => {
                        let addr = addr.to_owned();
                        self.refresh().await?;
                        at = self.node(&addr).await?;
                        asking = false;
                    }
                    (ErrorKind::Ask, Some((addr, _))) => {
                        at = self.node(addr).await?;
                        asking = true;
                    }
                    _ => return Err(e),
                },
            }
        }
        Err((ErrorKind::ClusterDown, "redirected too often").into())
    }

    /// The key's value from its master (`None` if gone); a redirection is
    /// an error (the caller retries once the topology is read again).
    pub async fn value(&self, key: &[u8]) -> RedisResult<Option<Vec<u8>>> {
        let answer = self.owner(key).await?.value(key).await;
        self.refresh_on_moved(answer).await
    }

    /// `--delete-on-fire` at the key's master (see [`Redis::delete_if_due`]).
    pub async fn delete_if_due(
        &self,
        key: &[u8],
        expire_at_ms: i64,
        slack_ms: i64,
    ) -> RedisResult<Reading> {
        let mut owner = self.owner(key).await?;
        let answer = owner.delete_if_due(key, expire_at_ms, slack_ms).await;
        self.refresh_on_moved(answer).await
    }

    async fn refresh_on_moved<T>(&self, answer: RedisResult<T>) -> RedisResult<T> {
        if let Err(e) = &answer {
            if matches!(e.kind(), ErrorKind::Moved | ErrorKind::Ask) {
                self.refresh().await?;
            }
        }
        answer
    }
}

fn addr_of(info: &ConnectionInfo) -> String {
    match &info.addr {
        ConnectionAddr::Tcp(host, port) => format!("{host}:{port}"),
        other => other.to_string(),
    }
}

/// What the registry reads keys from: one Redis node, or a whole cluster.
#[derive(Clone)]
pub enum Target {
    One(Redis),
    RedisCluster(RedisCluster),
}

impl Target {
    pub async fn expiries(&self, keys: &[&[u8]]) -> RedisResult<Vec<Reading>> {
        match self {
            Target::One(redis) => redis.clone().expiries(keys).await,
            Target::RedisCluster(cluster) => cluster.expiries(keys).await,
        }
    }

    pub async fn value(&self, key: &[u8]) -> RedisResult<Option<Vec<u8>>> {
        match self {
            Target::One(redis) => redis.clone().value(key).await,
            Target::RedisCluster(cluster) => cluster.value(key).await,
        }
    }

    pub async fn delete_if_due(
        &self,
        key: &[u8],
        expire_at_ms: i64,
        slack_ms: i64,
    ) -> RedisResult<Reading> {
        match self {
            Target::One(redis) => {
                redis
                    .clone()
                    .delete_if_due(key, expire_at_ms, slack_ms)
                    .await
            }
            Target::RedisCluster(cluster) => {
                cluster.delete_if_due(key, expire_at_ms, slack_ms).await
            }
        }
    }

    /// Whether a reconciliation still scans `redis`, one of the
    /// [`Target::scan_nodes`] of its pass: the node always; a cluster's
    /// master only while it is one (one failed over meanwhile, the pass
    /// starts over with the masters of now).
    pub fn scans(&self, redis: &Redis) -> bool {
        match self {
            Target::One(_) => true,
            Target::RedisCluster(cluster) => cluster.is_master(&addr_of(&redis.address())),
        }
    }

    /// The nodes a reconciliation scans: the node, or every master now.
    pub async fn scan_nodes(&self) -> RedisResult<Vec<Redis>> {
        match self {
            Target::One(redis) => Ok(vec![redis.clone()]),
            Target::RedisCluster(cluster) => {
                Ok(cluster.masters().await?.into_iter().map(|m| m.1).collect())
            }
        }
    }
}
