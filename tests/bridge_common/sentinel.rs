//! A Redis Sentinel deployment: a master, a replica and sentinels.

use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::bridge::{wait_port, Process};
use super::redis_server::{Redis, Version};
use crate::common::{TempDir, TestServer};

/// A Redis Sentinel deployment on loopback: a master, a replica of it, and
/// one sentinel (Debian's `redis-sentinel`, quorum 1) watching them as
/// `mymaster`.
pub struct SentinelSet {
    pub master: Redis,
    pub replica: Redis,
    _sentinel: Process,
    pub sentinel_port: u16,
    _dir: TempDir,
}

impl SentinelSet {
    pub const MASTER: &'static str = "mymaster";

    pub fn start() -> SentinelSet {
        let master = Redis::start();
        let master_port = master.port.to_string();
        let replica = Redis::spawn(
            TestServer::free_port(),
            Version::V7_0,
            &["--replicaof", "127.0.0.1", &master_port],
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while !replica
            .run::<String>(&["INFO", "replication"])
            .contains("master_link_status:up")
        {
            assert!(Instant::now() < deadline, "the replica never synced");
            thread::sleep(Duration::from_millis(20));
        }
        let dir = TempDir::new();
        let sentinel_port = TestServer::free_port();
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {sentinel_port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor {} 127.0.0.1 {master_port} 1\n\
                 sentinel down-after-milliseconds {} 2000\n\
                 sentinel failover-timeout {} 10000\n",
                dir.path().display(),
                Self::MASTER,
                Self::MASTER,
                Self::MASTER
            ),
        )
        .expect("write sentinel.conf");
        let child = Command::new("redis-sentinel")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-sentinel");
        let sentinel = Process(child);
        wait_port(sentinel_port, "redis-sentinel");
        let set = SentinelSet {
            master,
            replica,
            _sentinel: sentinel,
            sentinel_port,
            _dir: dir,
        };
        // The sentinel learns of the replica from the master's INFO.
        let deadline = Instant::now() + Duration::from_secs(15);
        while set
            .sentinel(&["SENTINEL", "replicas", Self::MASTER])
            .is_empty()
        {
            assert!(
                Instant::now() < deadline,
                "the sentinel never saw the replica"
            );
            thread::sleep(Duration::from_millis(50));
        }
        set
    }

    /// Runs a command on the sentinel.
    #[track_caller]
    pub fn sentinel(&self, words: &[&str]) -> Vec<redis::Value> {
        let mut conn = redis::Client::open(format!("redis://127.0.0.1:{}", self.sentinel_port))
            .and_then(|c| c.get_connection())
            .expect("connect to the sentinel");
        redis::cmd(words[0])
            .arg(&words[1..])
            .query(&mut conn)
            .unwrap_or_else(|e| panic!("{words:?}: {e}"))
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/{}", self.sentinel_port, Self::MASTER)
    }

    /// `SENTINEL FAILOVER` (retried while the sentinel is not ready), then
    /// waits until the replica is the master.
    pub fn failover(&self) {
        let mut conn = redis::Client::open(format!("redis://127.0.0.1:{}", self.sentinel_port))
            .and_then(|c| c.get_connection())
            .expect("connect to the sentinel");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let done: redis::RedisResult<()> = redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg(Self::MASTER)
                .query(&mut conn);
            match done {
                Ok(()) => break,
                Err(e) => assert!(Instant::now() < deadline, "SENTINEL FAILOVER: {e}"),
            }
            thread::sleep(Duration::from_millis(100));
        }
        while !self
            .replica
            .run::<String>(&["INFO", "replication"])
            .contains("role:master")
        {
            assert!(Instant::now() < deadline, "the replica was never promoted");
            thread::sleep(Duration::from_millis(20));
        }
    }
}
