//! A Redis Cluster of real nodes, with the key-slot function to place
//! keys on its masters.

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use sprout_testkit::now_ms;

use super::load::set_expiring;
use super::redis_server::{Redis, Version};
use crate::common::{TempDir, TestServer};

/// The slot of a key, as Redis Cluster computes it (CRC16-XMODEM of the
/// hash tag, if any, mod 16384); a copy of the bridge's, to route writes.
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    let mut crc: u16 = 0;
    for &b in tagged.unwrap_or(key) {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// A Redis Cluster on loopback from Debian's redis-server: three masters,
/// each with a replica (`redis-cli --cluster create … --cluster-replicas
/// 1`).
pub struct RedisCluster {
    pub nodes: Vec<Redis>,
    _dir: TempDir,
}

/// A free port whose cluster bus port (port + 10000) is free too.
fn free_cluster_port() -> u16 {
    loop {
        let port = TestServer::free_port();
        if port < 55_000 && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        let dir = TempDir::new();
        let nodes: Vec<Redis> = (0..6)
            .map(|_| {
                let port = free_cluster_port();
                let conf = dir.path().join(format!("nodes-{port}.conf"));
                let conf = conf.display().to_string();
                let log = dir.path().join(format!("{port}.log")).display().to_string();
                let args = [
                    "--logfile",
                    &log,
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    &conf,
                    "--cluster-node-timeout",
                    "2000",
                    "--repl-diskless-sync-delay",
                    "0",
                ];
                Redis::spawn(port, Version::V7_0, &args)
            })
            .collect();
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for n in &nodes {
            create.arg(format!("127.0.0.1:{}", n.port));
        }
        let out = create
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = RedisCluster { nodes, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        for n in &cluster.nodes {
            while !n
                .run::<String>(&["CLUSTER", "INFO"])
                .contains("cluster_state:ok")
            {
                assert!(Instant::now() < deadline, "the cluster never came up");
                thread::sleep(Duration::from_millis(50));
            }
        }
        // Every replica in sync (a failover of one that is not times out).
        for n in &cluster.nodes {
            loop {
                let info: String = n.run(&["INFO", "replication"]);
                if info.contains("role:master") || info.contains("master_link_status:up") {
                    break;
                }
                assert!(Instant::now() < deadline, "a replica never synced: {info}");
                thread::sleep(Duration::from_millis(50));
            }
        }
        cluster
    }

    pub fn url(&self) -> String {
        self.nodes[0].url()
    }

    fn node(&self, port: u16) -> &Redis {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .expect("a node of the cluster")
    }

    /// Each slot's master's port, as node `asked` sees it.
    pub fn owners(&self) -> Vec<u16> {
        let mut owner = vec![0; 16384];
        let slots: Vec<redis::Value> = self.nodes[0].run(&["CLUSTER", "SLOTS"]);
        for range in slots {
            let redis::Value::Array(items) = range else {
                panic!("CLUSTER SLOTS")
            };
            let int = |v: &redis::Value| match v {
                redis::Value::Int(n) => *n,
                _ => panic!("CLUSTER SLOTS"),
            };
            let redis::Value::Array(master) = &items[2] else {
                panic!("CLUSTER SLOTS")
            };
            for s in int(&items[0])..=int(&items[1]) {
                owner[s as usize] = int(&master[1]) as u16;
            }
        }
        owner
    }

    /// The masters' ports.
    pub fn masters(&self) -> Vec<u16> {
        let mut m = self.owners();
        m.sort_unstable();
        m.dedup();
        m
    }

    pub fn id(&self, port: u16) -> String {
        self.node(port).run(&["CLUSTER", "MYID"])
    }

    /// [`write_keys`] across the cluster, each key on its slot's master;
    /// `tag` (a hash tag) puts them all in one slot.
    pub fn write_keys(
        &self,
        prefix: &str,
        tag: Option<&str>,
        n: usize,
        lead_ms: i64,
        spread_ms: i64,
    ) -> std::collections::BTreeMap<String, i64> {
        let owners = self.owners();
        let start = now_ms() + lead_ms;
        let mut want = std::collections::BTreeMap::new();
        let mut pipes: std::collections::HashMap<u16, redis::Pipeline> = Default::default();
        for i in 0..n {
            let key = match tag {
                Some(t) => format!("dev:{{{t}}}:{prefix}:{i}"),
                None => format!("dev:{prefix}:{i}"),
            };
            let at = start + spread_ms * i as i64 / n.max(1) as i64;
            let port = owners[usize::from(key_slot(key.as_bytes()))];
            set_expiring(pipes.entry(port).or_insert_with(redis::pipe), &key, at);
            want.insert(key, at);
        }
        for (port, pipe) in pipes {
            let _: () = pipe
                .query(&mut self.node(port).conn())
                .expect("write the keys");
        }
        want
    }

    /// Moves `slot` (with its keys) from its master to the master `to`, as
    /// `redis-cli --cluster reshard` does: IMPORTING, MIGRATING, MIGRATE,
    /// then SETSLOT NODE everywhere. Returns how many keys moved.
    pub fn migrate_slot(&self, slot: u16, to: u16) -> usize {
        let from = self.owners()[usize::from(slot)];
        let (from_id, to_id) = (self.id(from), self.id(to));
        let s = slot.to_string();
        let _: () = self
            .node(to)
            .run(&["CLUSTER", "SETSLOT", &s, "IMPORTING", &from_id]);
        let _: () = self
            .node(from)
            .run(&["CLUSTER", "SETSLOT", &s, "MIGRATING", &to_id]);
        let mut moved = 0;
        loop {
            let keys: Vec<String> = self
                .node(from)
                .run(&["CLUSTER", "GETKEYSINSLOT", &s, "100"]);
            if keys.is_empty() {
                break;
            }
            moved += keys.len();
            let port = to.to_string();
            let mut words = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            words.extend(keys.iter().map(String::as_str));
            let _: () = self.node(from).run(&words);
            // Between batches, keys are on both sides: the bridge must
            // follow ASK for those already moved.
            thread::sleep(Duration::from_millis(50));
        }
        for port in self.masters() {
            let _: () = self
                .node(port)
                .run(&["CLUSTER", "SETSLOT", &s, "NODE", &to_id]);
        }
        moved
    }

    /// The replica of the master `master`.
    fn replica_of(&self, master: u16) -> &Redis {
        let id = self.id(master);
        self.nodes
            .iter()
            .find(|n| {
                let info: String = n.run(&["CLUSTER", "NODES"]);
                info.lines()
                    .any(|l| l.contains("myself") && l.contains(&format!("slave {id}")))
            })
            .expect("a replica of the master")
    }

    /// Waits until `replica` holds every write of the master `master`: a
    /// failover without the offset handshake (FORCE, or a crash) loses the
    /// rest for good (seen: a third of the keys). `WAIT` would not tell: it
    /// counts only the writes of its own connection.
    fn wait_replicated(&self, master: u16, replica: &Redis) {
        let target = repl_offset(self.node(master), "master_repl_offset");
        let synced = Instant::now() + Duration::from_secs(30);
        while repl_offset(replica, "slave_repl_offset") < target {
            assert!(Instant::now() < synced, "the replica never caught up");
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// `notify-keyspace-events` of the node at `port`.
    pub fn notify_flags(&self, port: u16) -> String {
        let reply: Vec<String> = self
            .node(port)
            .run(&["CONFIG", "GET", "notify-keyspace-events"]);
        reply.get(1).cloned().unwrap_or_default()
    }

    /// `PEXPIRETIME key` at the node at `port`.
    pub fn expire_time(&self, port: u16, key: &str) -> i64 {
        self.node(port).run(&["PEXPIRETIME", key])
    }

    /// How many times the node at `port` ran `command` (lower case), as
    /// `INFO commandstats` counts.
    pub fn calls(&self, port: u16, command: &str) -> u64 {
        let info: String = self.node(port).run(&["INFO", "commandstats"]);
        let prefix = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix)?.split(',').next()?.parse().ok())
            .unwrap_or(0)
    }

    /// Kills the master `master` (SIGKILL), once its writes are on its
    /// replica, whose port it returns; the cluster promotes the replica
    /// after its node timeout (2 s) and an election. `master` must not be
    /// the first node, which [`RedisCluster::owners`] asks.
    pub fn crash(&mut self, master: u16) -> u16 {
        assert_ne!(
            master, self.nodes[0].port,
            "the first node answers owners()"
        );
        let replica = self.replica_of(master).port;
        self.wait_replicated(master, self.node(replica));
        let i = self.nodes.iter().position(|n| n.port == master).unwrap();
        self.nodes[i].kill9();
        replica
    }

    /// Waits until the first node names the node at `port` a master, and
    /// every master says the cluster is up again: a master that has not
    /// heard of the promotion yet refuses writes with CLUSTERDOWN (seen in
    /// CI, bridge_failover).
    pub fn wait_promoted(&self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.masters().contains(&port) {
            assert!(Instant::now() < deadline, "{port} was never promoted");
            thread::sleep(Duration::from_millis(10));
        }
        for master in self.masters() {
            let node = self.node(master);
            while !node
                .run::<String>(&["CLUSTER", "INFO"])
                .contains("cluster_state:ok")
            {
                assert!(
                    Instant::now() < deadline,
                    "{master} never said the cluster is up"
                );
                thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// `CLUSTER FAILOVER FORCE` on a replica of the master `master`, once
    /// the master's writes are on it; waits until it is the master of the
    /// slots. Returns the new master's port. (Without FORCE, the handshake
    /// with the master timed out here on a loaded machine.)
    pub fn failover(&self, master: u16) -> u16 {
        let replica = self.replica_of(master);
        self.wait_replicated(master, replica);
        // Votes are denied to a replica behind on the cluster's epoch (a
        // migration just bumped it): let gossip settle, and ask again if an
        // election expires.
        let epoch = |n: &Redis| -> String {
            let info: String = n.run(&["CLUSTER", "INFO"]);
            let line = info
                .lines()
                .find(|l| l.starts_with("cluster_current_epoch:"));
            line.unwrap_or_default().to_owned()
        };
        let settle = Instant::now() + Duration::from_secs(5);
        while self.nodes.iter().any(|n| epoch(n) != epoch(replica)) && Instant::now() < settle {
            thread::sleep(Duration::from_millis(50));
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        'elections: loop {
            let _: () = replica.run(&["CLUSTER", "FAILOVER", "FORCE"]);
            let expires = Instant::now() + Duration::from_secs(6);
            while Instant::now() < expires {
                if self.masters().contains(&replica.port) {
                    break 'elections;
                }
                thread::sleep(Duration::from_millis(50));
            }
            if Instant::now() > deadline {
                let log = self._dir.path().join(format!("{}.log", replica.port));
                let log = std::fs::read_to_string(log).unwrap_or_default();
                let nodes: String = replica.run(&["CLUSTER", "NODES"]);
                panic!("the replica was never promoted: {nodes}\n{log}");
            }
        }
        replica.port
    }
}

/// A replication offset from `INFO replication` (`master_repl_offset`, or
/// a replica's `slave_repl_offset`); -1 if not there yet.
fn repl_offset(node: &Redis, field: &str) -> i64 {
    let info: String = node.run(&["INFO", "replication"]);
    info.lines()
        .find_map(|l| l.trim_end().strip_prefix(field)?.strip_prefix(':'))
        .and_then(|n| n.parse().ok())
        .unwrap_or(-1)
}
