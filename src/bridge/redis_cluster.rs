//! `--redis-cluster redis://ANY_NODE`: a whole Redis Cluster as one node of
//! the bridge, found by discovery and followed as it changes.
//!
//! * **Topology**: `CLUSTER SLOTS` (Redis ≥ 3.0) from any node gives each
//!   slot's master; [`RedisCluster::refresh`] reads it again every [`REFRESH`],
//!   after a `MOVED`, and when a master's connection is lost (see `run` in
//!   the bridge's `mod.rs`, which subscribes to every master it finds).
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

use redis::{ConnectionAddr, ConnectionInfo, ErrorKind, RedisResult, Value};

use super::expiry::Reading;
use super::redis_side::Redis;

/// Slots of a Redis Cluster.
pub const SLOTS: usize = 16384;
/// How often the topology is read besides `MOVED` and lost connections.
pub const REFRESH: Duration = Duration::from_secs(1);

/// The slot of `key` (CRC16-XMODEM of its hash tag, if any, mod 16384).
pub fn slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % SLOTS as u16
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// Each slot's master, as `HOST:PORT`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Topology {
    masters: Vec<String>,
    /// Per slot, an index into `masters` (`u16::MAX`: no owner).
    owner: Vec<u16>,
}

impl Topology {
    /// From a `CLUSTER SLOTS` answer of the node at `asked_host` (a node
    /// that does not know its own address reports an empty one).
    fn parse(reply: &Value, asked_host: &str) -> Option<Topology> {
        let Value::Array(ranges) = reply else {
            return None;
        };
        let mut t = Topology {
            masters: Vec::new(),
            owner: vec![u16::MAX; SLOTS],
        };
        for range in ranges {
            let Value::Array(items) = range else {
                return None;
            };
            let int = |v: &Value| match v {
                Value::Int(n) => Some(*n),
                _ => None,
            };
            let (start, end) = (int(items.first()?)?, int(items.get(1)?)?);
            let Value::Array(master) = items.get(2)? else {
                return None;
            };
            let host = match master.first()? {
                Value::BulkString(b) => String::from_utf8(b.clone()).ok()?,
                Value::SimpleString(s) => s.clone(),
                _ => return None,
            };
            let host = if host.is_empty() {
                asked_host.to_owned()
            } else {
                host
            };
            let addr = format!("{host}:{}", int(master.get(1)?)?);
            let i = match t.masters.iter().position(|m| *m == addr) {
                Some(i) => i,
                None => {
                    t.masters.push(addr);
                    t.masters.len() - 1
                }
            };
            for s in start.max(0)..=end.min(SLOTS as i64 - 1) {
                t.owner[s as usize] = i as u16;
            }
        }
        Some(t)
    }

    fn master_of(&self, key: &[u8]) -> Option<&str> {
        let i = *self.owner.get(usize::from(slot(key)))?;
        self.masters.get(usize::from(i)).map(String::as_str)
    }
}

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

    /// Reads the topology again from any master (or the seed); true if the
    /// masters changed.
    pub async fn refresh(&self) -> RedisResult<bool> {
        let mut ask = self.topology().masters;
        ask.push(addr_of(&self.0.template));
        self.refresh_from(&ask).await
    }

    async fn refresh_from(&self, ask: &[String]) -> RedisResult<bool> {
        let mut last = None;
        for addr in ask {
            let read = async {
                let mut conn = self.node(addr).await?;
                let reply = conn.cluster_slots().await?;
                let host = addr.rsplit_once(':').map_or("", |(h, _)| h);
                Topology::parse(&reply, host).ok_or_else(|| {
                    redis::RedisError::from((
                        ErrorKind::TypeError,
                        "unreadable CLUSTER SLOTS answer",
                    ))
                })
            };
            match read.await {
                Ok(t) => {
                    let mut current = self.0.topology.write().unwrap_or_else(|e| e.into_inner());
                    let changed = current.masters != t.masters;
                    *current = t;
                    return Ok(changed);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| (ErrorKind::ClientError, "no cluster node to ask").into()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_clusters() {
        // As `CLUSTER KEYSLOT` answers.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"123456789"), 12739);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
    }

    #[test]
    fn cluster_slots_give_each_slots_master() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(8191),
                node("10.0.0.1", 7000),
                node("10.0.0.2", 7003),
            ]),
            Value::Array(vec![Value::Int(8192), Value::Int(16383), node("", 7001)]),
        ]);
        let t = Topology::parse(&reply, "10.0.0.9").unwrap();
        assert_eq!(t.masters, ["10.0.0.1:7000", "10.0.0.9:7001"]);
        assert_eq!(t.master_of(b"123456789"), Some("10.0.0.9:7001"));
        assert_eq!(t.master_of(b"bar"), Some("10.0.0.1:7000")); // slot 5061
        assert!(Topology::parse(&Value::Nil, "x").is_none());
    }
}
