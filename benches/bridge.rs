//! The Redis TTL bridge benchmark: the bridge's jobs side by side with
//! Redis's own `expired` notifications, for the same keys in the same run.
//!
//! ```text
//! cargo bench --bench bridge -- [--keys 100000] [--min-ttl 10] [--max-ttl 20]
//!                               [--memory] [--embedded] [--workers 4] [--grace 30]
//!                               [--consumer-batch N] [--consume-after]
//!                               [--sprout PATH] [--precheck-ms MS] [--scan-interval SECS]
//! cargo bench --bench bridge -- --recognise [--keys 100000] [--scan-interval 10]
//! ```
//!
//! It starts its own `redis-server` (free port, no persistence), a sprout
//! (`-b` in a temp dir; in memory with `--memory`) and `sprout bridge`
//! watching `bench:*` (with `--embedded`, the bridge inside that sprout:
//! `--redis-bridge`, no TCP hop; its RSS and CPU are then the server's too), then sets `--keys` keys with `SET … PXAT`, pipelined,
//! their deadlines spread at random over `--min-ttl`..`--max-ttl` seconds
//! from the start. It subscribes to `__keyevent@0__:expired` and runs
//! `--workers` workers reserving from the bridge's tube, and records for
//! every key how late (arrival minus deadline) (a) the bridge's job was at
//! `RESERVED` and (b) Redis's notification arrived. A worker takes one job
//! at a time (the delete of the last goes out with the next reserve); with
//! `--consumer-batch N` it takes up to N at once (`reserve-batch N`, the
//! deletes in one `delete-batch`), blocking in `reserve-with-timeout` only
//! when none is ready: consumers that cost the server less, to tell the
//! bridge's CPU from theirs. With `--consume-after` the workers start only
//! once every key has been delivered (the delivery tube's `total-jobs`
//! reaches N): the CPU per expiry is then firing alone, with no consumer
//! served meanwhile, and only `fired_at_ms` says how late. A key that has not
//! arrived `--grace` seconds after the last deadline counts as lost; of
//! the bridge's, those still queued in the delivery tube then (consumers
//! behind, not the bridge) are told apart.
//!
//! Redis's notifications are taken twice: from the Redis the bridge
//! watches, and from a second, untouched `redis-server` given the same keys
//! with the same deadlines. Only the second shows Redis on its own: the
//! bridge's `PEXPIRETIME` at each deadline makes the first delete the key
//! (and notify) right then, where left alone it deletes expired keys only
//! as its sampling finds them.
//!
//! Also: keys registered per second (from the first `SET` until the timer
//! tube's `total-jobs` reaches N: one timer put per key) and the bridge's
//! RSS per tracked key (`VmRSS` growth from before the keys to when all are
//! armed, and again 6 s later, once the burst's freed heap went back, if no
//! key is due by then). An early delivery, or a key delivered twice, is
//! reported, the first few with their bodies.
//! `--precheck-ms` and `--scan-interval` are handed to the bridge.
//!
//! `--recognise` measures instead how soon deletions are recognised: N
//! keys due in two minutes are armed, then deleted four ways in turn (DEL,
//! announced; FLUSHDB, announced by no event; DEL while the bridge is
//! down, from its restart; DEL with `--no-pubsub`), and for each it prints
//! the time until the last of their timers is cancelled (the timer tube's
//! `current-jobs-delayed` back to 0) and the bridge's CPU meanwhile.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use sprout::bridge::now_ms;
use sprout::client::Client;
use sprout_protocol::Command as Bs;
use sprout_protocol::Response;
use sprout_testkit::{cpu_seconds, free_port, status_kb, Rng};

const TUBE: &str = "bench-expired";
const TIMER_TUBE: &str = "bridge-timers.bench-expired";
const BATCH: usize = 1000;
/// How long after the last key is armed its RSS is read again.
const SETTLE_SECS: u64 = 6;

struct Args {
    keys: usize,
    min_ttl_ms: i64,
    max_ttl_ms: i64,
    memory: bool,
    embedded: bool,
    workers: usize,
    consumer_batch: u32,
    consume_after: bool,
    grace_ms: i64,
    sprout: PathBuf,
    recognise: bool,
    /// Flags handed to the bridge (embedded, each `--x` as `--bridge-x`).
    bridge_flags: Vec<String>,
}

fn args() -> Args {
    let mut a = Args {
        keys: 100_000,
        min_ttl_ms: 10_000,
        max_ttl_ms: 20_000,
        memory: false,
        embedded: false,
        workers: 4,
        consumer_batch: 1,
        consume_after: false,
        grace_ms: 30_000,
        sprout: PathBuf::from(env!("CARGO_BIN_EXE_sprout")),
        recognise: false,
        bridge_flags: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    let secs = |v: Option<String>| -> i64 {
        (v.and_then(|v| v.parse::<f64>().ok())
            .expect("a number of seconds")
            * 1000.0) as i64
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--keys" => a.keys = it.next().and_then(|v| v.parse().ok()).expect("--keys N"),
            "--min-ttl" => a.min_ttl_ms = secs(it.next()),
            "--max-ttl" => a.max_ttl_ms = secs(it.next()),
            "--grace" => a.grace_ms = secs(it.next()),
            "--memory" => a.memory = true,
            "--embedded" => a.embedded = true,
            "--workers" => a.workers = it.next().and_then(|v| v.parse().ok()).expect("--workers N"),
            "--consumer-batch" => {
                a.consumer_batch = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|n| (1..=1000).contains(n))
                    .expect("--consumer-batch 1..1000")
            }
            "--consume-after" => a.consume_after = true,
            "--sprout" => a.sprout = PathBuf::from(it.next().expect("--sprout PATH")),
            "--recognise" => a.recognise = true,
            "--precheck-ms" | "--scan-interval" => {
                let value = it.next().filter(|v| v.parse::<f64>().is_ok());
                a.bridge_flags.push(arg.clone());
                a.bridge_flags
                    .push(value.unwrap_or_else(|| panic!("{arg} needs a number")));
            }
            "--bench" => {} // added by `cargo bench`
            other => panic!("unknown argument {other:?} (see benches/bridge.rs)"),
        }
    }
    assert!(a.keys > 0 && a.max_ttl_ms > a.min_ttl_ms && a.min_ttl_ms > 0);
    a
}

/// A child process killed (by its own pid) on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(what: &'static str, cmd: &mut Command) -> Proc {
    Proc(cmd.spawn().unwrap_or_else(|e| panic!("spawn {what}: {e}")))
}

fn wait_until(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ok() {
        assert!(Instant::now() < deadline, "{what}: timed out");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `VmRSS` of `pid`, in KiB (0 once it is gone).
fn rss_kib(pid: u32) -> u64 {
    status_kb(pid, "VmRSS").unwrap_or(0)
}

/// Each key's first arrival, plus duplicates.
struct Arrivals {
    at: Mutex<Vec<First>>,
    count: AtomicU64,
    duplicates: AtomicU64,
    /// What the first few duplicates carried (a delivery's body), to tell
    /// which path delivered a key twice.
    shown: Mutex<Vec<String>>,
}

/// A key's first arrival: when (-1: not yet), as which job (0: a
/// notification) and through which consumer, so a duplicate tells a second
/// delivery job from the same job handed out again, and to whom.
#[derive(Clone, Copy)]
struct First {
    at: i64,
    job: u64,
    by: usize,
}

impl Default for First {
    fn default() -> First {
        First {
            at: -1,
            job: 0,
            by: 0,
        }
    }
}

/// Duplicates whose bodies are kept for the report.
const SHOWN_DUPLICATES: usize = 5;

impl Arrivals {
    fn new(n: usize) -> Arc<Arrivals> {
        Arc::new(Arrivals {
            at: Mutex::new(vec![First::default(); n]),
            count: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            shown: Mutex::new(Vec::new()),
        })
    }

    /// Records `key`'s arrival at `at` as job `job` (0: a notification)
    /// through consumer `by`; `what` (the delivery) is kept if it is one of
    /// the first duplicates.
    fn record(&self, key: &[u8], at: i64, (job, by): (u64, usize), what: &[u8]) {
        let Some(i) = key
            .strip_prefix(b"bench:")
            .and_then(|i| std::str::from_utf8(i).ok())
            .and_then(|i| i.parse::<usize>().ok())
        else {
            return;
        };
        let mut v = self.at.lock().unwrap();
        match v.get_mut(i) {
            Some(first) if first.at < 0 => {
                *first = First { at, job, by };
                self.count.fetch_add(1, Ordering::Relaxed);
            }
            Some(first) => {
                self.duplicates.fetch_add(1, Ordering::Relaxed);
                let mut shown = self.shown.lock().unwrap();
                if shown.len() < SHOWN_DUPLICATES {
                    let what = String::from_utf8_lossy(what);
                    let First {
                        at: first,
                        job: first_job,
                        by: first_by,
                    } = *first;
                    shown.push(format!(
                        "first at {first} (job {first_job}, consumer {first_by}), \
                         again at {at} (job {job}, consumer {by}): {what}"
                    ));
                }
            }
            None => {}
        }
    }

    fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed) as usize
    }
}

struct Report {
    p50: i64,
    p99: i64,
    max: i64,
    lost: usize,
    early: usize,
}

fn report(arrivals: &Arrivals, deadlines: &[i64]) -> Report {
    let at = arrivals.at.lock().unwrap();
    let mut late: Vec<i64> = at
        .iter()
        .zip(deadlines)
        .filter(|(a, _)| a.at >= 0)
        .map(|(a, d)| a.at - d)
        .collect();
    late.sort_unstable();
    let pct = |p: f64| -> i64 {
        if late.is_empty() {
            return -1;
        }
        late[((late.len() as f64 * p).ceil() as usize).clamp(1, late.len()) - 1]
    };
    Report {
        p50: pct(0.50),
        p99: pct(0.99),
        max: late.last().copied().unwrap_or(-1),
        lost: deadlines.len() - late.len(),
        early: late.iter().filter(|&&l| l < 0).count(),
    }
}

/// CPU seconds (user + system) `pid` has used (0 once it is gone).
fn cpu_secs(pid: u32) -> f64 {
    cpu_seconds(pid).map_or(0.0, |(user, sys)| user + sys)
}

/// What the benchmark reads of a delivery (the rest is not parsed).
#[derive(serde::Deserialize)]
struct Delivery<'a> {
    #[serde(borrow)]
    key: std::borrow::Cow<'a, str>,
    fired_at_ms: Option<i64>,
}

fn arrived(job: (u64, usize), body: &[u8], arrivals: &Arrivals, fired: &Arrivals) {
    let at = now_ms();
    let d: Delivery = serde_json::from_slice(body).expect("a JSON delivery");
    arrivals.record(d.key.as_bytes(), at, job, body);
    if let Some(f) = d.fired_at_ms {
        fired.record(d.key.as_bytes(), f, job, body);
    }
}

async fn worker(
    me: usize,
    port: u16,
    batch: u32,
    arrivals: Arc<Arrivals>,
    fired: Arc<Arrivals>,
    done: Arc<AtomicBool>,
) {
    let mut c = Client::connect(("127.0.0.1", port)).await.expect("connect");
    c.watch(TUBE).await.expect("watch");
    c.ignore("default").await.expect("ignore");
    if batch > 1 {
        return batch_worker(me, c, batch, arrivals, fired, done).await;
    }
    let mut prev = None;
    while !done.load(Ordering::Relaxed) {
        // The delete of the previous job goes out with the next reserve.
        if let Some(id) = prev.take() {
            c.send(&Bs::Delete(id)).await.expect("send");
        }
        c.send(&Bs::ReserveWithTimeout(Duration::from_secs(1)))
            .await
            .expect("send");
        c.flush().await.expect("flush");
        let mut reply = c.recv().await.expect("reply");
        if matches!(reply, Response::Deleted | Response::NotFound) {
            reply = c.recv().await.expect("reply");
        }
        match reply {
            Response::Reserved { id, body } => {
                arrived((id, me), &body, &arrivals, &fired);
                prev = Some(id);
            }
            Response::TimedOut | Response::DeadlineSoon => {}
            other => panic!("worker: unexpected {other:?}"),
        }
    }
    // A job left reserved would go back to ready as the connection
    // closes, and a worker still running would take it again: a duplicate
    // of the benchmark's own making.
    if let Some(id) = prev {
        let reply = c.request(&Bs::Delete(id)).await.expect("reply");
        assert_eq!(reply, Response::Deleted);
    }
}

/// `--consumer-batch`: up to `batch` jobs per `reserve-batch`, their
/// deletes in one `delete-batch` sent with the next.
async fn batch_worker(
    me: usize,
    mut c: Client<tokio::net::TcpStream>,
    batch: u32,
    arrivals: Arc<Arrivals>,
    fired: Arc<Arrivals>,
    done: Arc<AtomicBool>,
) {
    let mut ids = Vec::new();
    while !done.load(Ordering::Relaxed) {
        let deleting = !ids.is_empty();
        if deleting {
            c.send(&Bs::DeleteBatch(std::mem::take(&mut ids)))
                .await
                .expect("send");
        }
        c.send(&Bs::ReserveBatch(batch)).await.expect("send");
        c.flush().await.expect("flush");
        if deleting {
            let reply = c.recv().await.expect("reply");
            assert!(matches!(reply, Response::DeletedBatch { .. }), "{reply:?}");
        }
        match c.recv().await.expect("reply") {
            Response::ReservedBatch(jobs) if jobs.is_empty() => {
                let timeout = Bs::ReserveWithTimeout(Duration::from_secs(1));
                match c.request(&timeout).await.expect("reply") {
                    Response::Reserved { id, body } => {
                        arrived((id, me), &body, &arrivals, &fired);
                        ids.push(id);
                    }
                    Response::TimedOut | Response::DeadlineSoon => {}
                    other => panic!("worker: unexpected {other:?}"),
                }
            }
            Response::ReservedBatch(jobs) => {
                for (id, body) in jobs {
                    arrived((id, me), &body, &arrivals, &fired);
                    ids.push(id);
                }
            }
            other => panic!("worker: unexpected {other:?}"),
        }
    }
    // As in `worker`: nothing left reserved to come back as a duplicate.
    if !ids.is_empty() {
        let reply = c.request(&Bs::DeleteBatch(ids)).await.expect("reply");
        assert!(matches!(reply, Response::DeletedBatch { .. }), "{reply:?}");
    }
}

async fn subscriber(url: String, arrivals: Arc<Arrivals>, ready: tokio::sync::oneshot::Sender<()>) {
    let client = redis::Client::open(url).expect("url");
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
    pubsub
        .subscribe("__keyevent@0__:expired")
        .await
        .expect("subscribe");
    let _ = ready.send(());
    let mut messages = pubsub.into_on_message();
    while let Some(msg) = messages.next().await {
        let at = now_ms();
        let key: Vec<u8> = msg.get_payload().unwrap_or_default();
        arrivals.record(&key, at, (0, 0), &key);
    }
}

/// `SET bench:<i> 1 PXAT <deadline i>` for every key, pipelined.
async fn set_keys(conn: &mut redis::aio::MultiplexedConnection, deadlines: &[i64]) {
    for (start, chunk) in (0..).step_by(BATCH).zip(deadlines.chunks(BATCH)) {
        let mut pipe = redis::pipe();
        for (i, deadline) in (start..).zip(chunk) {
            pipe.cmd("SET")
                .arg(format!("bench:{i}"))
                .arg("1")
                .arg("PXAT")
                .arg(deadline)
                .ignore();
        }
        let () = pipe.query_async(conn).await.expect("SET pipeline");
    }
}

async fn tube_stat(c: &mut Client<tokio::net::TcpStream>, tube: &str, stat: &str) -> u64 {
    let tube = sprout_protocol::TubeName::new(tube.as_bytes()).expect("tube");
    match c.stats(&Bs::StatsTube(tube)).await {
        Ok(s) => s.get(stat).and_then(|v| v.parse().ok()).unwrap_or(0),
        Err(_) => 0,
    }
}

fn main() {
    let a = args();
    let dir = std::env::temp_dir().join(format!("sprout-bridge-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let result = std::panic::catch_unwind(|| {
        if a.recognise {
            recognise(&a, &dir)
        } else {
            run(&a, &dir)
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// Starts a `redis-server` on a free port, without persistence and with
/// `expired` notifications on (the bridge adds its own classes to these).
fn start_redis() -> (Proc, String, redis::Client) {
    let port = free_port();
    let proc = spawn(
        "redis-server",
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let url = format!("redis://127.0.0.1:{port}/0");
    let client = redis::Client::open(url.as_str()).expect("url");
    wait_until("redis-server", Duration::from_secs(10), || {
        client.get_connection().is_ok()
    });
    let mut conn = client.get_connection().expect("redis");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("Ex")
        .query(&mut conn)
        .expect("CONFIG SET");
    (proc, url, client)
}

/// Starts `sprout bridge` on `url` and the server at `server_port`, its
/// state in `dir/state` and its log in `dir/bridge.log` (written anew).
fn start_bridge(a: &Args, url: &str, server_port: u16, dir: &Path, flags: &[String]) -> Proc {
    let log = std::fs::File::create(dir.join("bridge.log")).expect("log file");
    spawn(
        "sprout bridge",
        Command::new(&a.sprout)
            .arg("bridge")
            .args(["--redis", url])
            .args(["--server", &format!("127.0.0.1:{server_port}")])
            .args(["--tube", TUBE, "--match", "bench:*"])
            .arg("--state-dir")
            .arg(dir.join("state"))
            .args(flags)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log),
    )
}

/// Waits (`timeout` at most) until the bridge's log at `dir/bridge.log`
/// says its first reconciliation is done.
fn wait_reconciled(dir: &Path, timeout: Duration) {
    wait_until("the bridge's first reconciliation", timeout, || {
        std::fs::read_to_string(dir.join("bridge.log")).is_ok_and(|l| l.contains("reconciled"))
    });
}

/// CPU seconds of each process whose CPU is reported, in the order of
/// [`Deployment::pids`].
type Cpu = [f64; 5];

/// The processes one run measures. Dropped (killed) in field order: the
/// bridge, the server, then the two Redis servers.
struct Deployment {
    _bridge: Option<Proc>,
    _server: Proc,
    server_port: u16,
    _control: Proc,
    control_url: String,
    control: redis::Client,
    _redis: Proc,
    url: String,
    client: redis::Client,
    /// The bridge's log (the server's, embedded).
    log: PathBuf,
    /// Whose CPU is reported, in this order: the bridge (embedded: the
    /// server), the server, the watched Redis, the untouched one, this
    /// benchmark.
    pids: [u32; 5],
}

/// Starts the watched Redis, an untouched copy (Redis on its own, for
/// comparison), the server and the bridge; returns once the bridge has
/// reconciled.
fn deploy(a: &Args, dir: &Path) -> Deployment {
    let (redis_proc, url, client) = start_redis();
    let (control_proc, control_url, control) = start_redis();
    let server_port = free_port();
    let log = dir.join("bridge.log");
    let log_file = || std::fs::File::create(&log).expect("log file");
    let mut server_cmd = Command::new(&a.sprout);
    server_cmd
        .args(["-l", "127.0.0.1", "-p", &server_port.to_string()])
        .stdout(Stdio::null());
    if !a.memory {
        server_cmd.arg("-b").arg(dir.join("binlog"));
    }
    let flags = &a.bridge_flags;
    if a.embedded {
        server_cmd
            .args(["--redis-bridge", &url, "--bridge-tube", TUBE])
            .args(["--bridge-match", "bench:*", "--bridge-state-dir"])
            .arg(dir.join("state"))
            .args(flags.iter().map(|f| f.replacen("--", "--bridge-", 1)))
            .env("RUST_LOG", "info")
            .stderr(log_file());
    } else {
        server_cmd.stderr(Stdio::null());
    }
    let server = spawn("sprout", &mut server_cmd);
    wait_until("sprout", Duration::from_secs(10), || {
        std::net::TcpStream::connect(("127.0.0.1", server_port)).is_ok()
    });
    let bridge = (!a.embedded).then(|| start_bridge(a, &url, server_port, dir, flags));
    let server_pid = server.0.id();
    let bridge_pid = bridge.as_ref().map_or(server_pid, |b| b.0.id());
    wait_reconciled(dir, Duration::from_secs(30));
    let others = [redis_proc.0.id(), control_proc.0.id(), std::process::id()];
    Deployment {
        _bridge: bridge,
        _server: server,
        server_port,
        _control: control_proc,
        control_url,
        control,
        _redis: redis_proc,
        url,
        client,
        log,
        pids: [bridge_pid, server_pid, others[0], others[1], others[2]],
    }
}

/// When each key's expiry arrived, by each way of hearing of it.
struct Arrived {
    /// The bridge's jobs, as reserved.
    bridge: Arc<Arrivals>,
    /// The `fired_at_ms` in those jobs.
    fired: Arc<Arrivals>,
    /// Redis's `expired` events, from the watched Redis and the untouched.
    redis: Arc<Arrivals>,
    control: Arc<Arrivals>,
}

/// What a run measured, besides the arrivals.
struct Measured {
    deadlines: Vec<i64>,
    set_secs: f64,
    /// When every timer was armed (s after the first SET), if it was.
    registered: Option<f64>,
    rss_before: u64,
    rss_armed: u64,
    rss_settled: Option<u64>,
    rss_end: u64,
    cpu_start: Cpu,
    cpu_armed: Cpu,
    /// With `--consume-after`: once every key was delivered.
    cpu_fired: Option<Cpu>,
    cpu_end: Cpu,
    /// Deliveries still queued at the end.
    behind: u64,
    /// The server's command counts.
    cmds: Vec<String>,
}

fn run(a: &Args, dir: &Path) {
    let d = deploy(a, dir);
    let rss_before = rss_kib(d.pids[0]);
    let cpu_start = d.pids.map(cpu_secs);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let arrived = Arrived {
        bridge: Arrivals::new(a.keys),
        fired: Arrivals::new(a.keys),
        redis: Arrivals::new(a.keys),
        control: Arrivals::new(a.keys),
    };
    let measured = rt.block_on(measure(a, &d, &arrived, rss_before, cpu_start));
    print_report(a, &d, &arrived, &measured);
}

/// The run itself: subscribe to both Redis servers' events, set the keys,
/// wait for the timers, then for every delivery and event.
async fn measure(
    a: &Args,
    d: &Deployment,
    arrived: &Arrived,
    rss_before: u64,
    cpu_start: Cpu,
) -> Measured {
    let n = a.keys;
    let done = Arc::new(AtomicBool::new(false));
    for (url, arrivals) in [(&d.url, &arrived.redis), (&d.control_url, &arrived.control)] {
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(subscriber(url.clone(), arrivals.clone(), ready_tx));
        ready_rx.await.expect("subscribed");
    }
    let mut workers = match a.consume_after {
        true => Vec::new(),
        false => start_workers(a, d.server_port, arrived, &done),
    };
    let (deadlines, started, set_secs) = set_all_keys(a, d).await;
    let last_deadline = deadlines.iter().copied().max().unwrap_or(0);
    let first_deadline = deadlines.iter().copied().min().unwrap_or(0);
    let mut stats = Client::connect(("127.0.0.1", d.server_port))
        .await
        .expect("connect");
    // Registration: one timer put per key.
    let mut registered = None;
    let (mut rss_armed, mut cpu_armed) = (0, cpu_start);
    while now_ms() < last_deadline + a.grace_ms {
        if tube_stat(&mut stats, TIMER_TUBE, "total-jobs").await >= n as u64 {
            registered = Some(started.elapsed().as_secs_f64());
            rss_armed = rss_kib(d.pids[0]);
            cpu_armed = d.pids.map(cpu_secs);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let rss_settled = match registered {
        Some(_) => settled_rss(d.pids[0], first_deadline).await,
        None => None,
    };
    // `--consume-after`: firing alone, until every key is delivered.
    let mut cpu_fired = None;
    if a.consume_after {
        while now_ms() < last_deadline + a.grace_ms
            && tube_stat(&mut stats, TUBE, "total-jobs").await < n as u64
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cpu_fired = Some(d.pids.map(cpu_secs));
        workers = start_workers(a, d.server_port, arrived, &done);
    }
    wait_arrivals(a, arrived, last_deadline).await;
    done.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.await;
    }
    // Deliveries the consumers had not taken by the end: behind, not lost.
    let behind = tube_stat(&mut stats, TUBE, "current-jobs-ready").await
        + tube_stat(&mut stats, TUBE, "current-jobs-reserved").await;
    let rss_end = rss_kib(d.pids[0]);
    let cmds = command_counts(&mut stats).await;
    Measured {
        deadlines,
        set_secs,
        registered,
        rss_before,
        rss_armed,
        rss_settled,
        rss_end,
        cpu_start,
        cpu_armed,
        cpu_fired,
        cpu_end: d.pids.map(cpu_secs),
        behind,
        cmds,
    }
}

/// The consumers of the delivery tube, `a.workers` of them.
fn start_workers(
    a: &Args,
    port: u16,
    arrived: &Arrived,
    done: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..a.workers)
        .map(|me| {
            tokio::spawn(worker(
                me,
                port,
                a.consumer_batch,
                arrived.bridge.clone(),
                arrived.fired.clone(),
                done.clone(),
            ))
        })
        .collect()
}

/// Sets the keys, pipelined, on both Redis servers at once; returns their
/// deadlines, when the first SET went out, and how long the watched
/// Redis took.
async fn set_all_keys(a: &Args, d: &Deployment) -> (Vec<i64>, Instant, f64) {
    let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15);
    let t0 = now_ms();
    let spread = (a.max_ttl_ms - a.min_ttl_ms) as u64;
    let deadlines: Vec<i64> = (0..a.keys)
        .map(|_| t0 + a.min_ttl_ms + (rng.next_u64() % spread) as i64)
        .collect();
    let started = Instant::now();
    let mut conn = d
        .client
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    let mut control_conn = d
        .control
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    // The untouched copy is fed alongside, on its own connection, so
    // the bridged Redis gets its keys as fast as without it.
    let control_keys = {
        let deadlines = deadlines.clone();
        tokio::spawn(async move { set_keys(&mut control_conn, &deadlines).await })
    };
    set_keys(&mut conn, &deadlines).await;
    let set_secs = started.elapsed().as_secs_f64();
    control_keys.await.expect("the untouched copy's keys");
    (deadlines, started, set_secs)
}

/// What the keys cost once the burst of registering them is over (the
/// bridge hands freed heap back every few seconds), if nothing fires
/// meanwhile: `None` if the first deadline is too close.
async fn settled_rss(pid: u32, first_deadline: i64) -> Option<u64> {
    let settle = Duration::from_secs(SETTLE_SECS);
    if now_ms() + settle.as_millis() as i64 + 1_000 >= first_deadline {
        return None;
    }
    tokio::time::sleep(settle).await;
    Some(rss_kib(pid))
}

/// Waits for every delivery and event (or the grace period after the last
/// deadline), then a moment for duplicates to show.
async fn wait_arrivals(a: &Args, arrived: &Arrived, last_deadline: i64) {
    while now_ms() < last_deadline + a.grace_ms
        && [&arrived.bridge, &arrived.redis, &arrived.control]
            .iter()
            .any(|arr| arr.count() < a.keys)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// The server's counts of the commands the bridge and consumers use.
async fn command_counts(stats: &mut Client<tokio::net::TcpStream>) -> Vec<String> {
    let server_stats = stats.stats(&Bs::Stats).await.unwrap_or_default();
    [
        "cmd-put",
        "cmd-delete",
        "cmd-reserve",
        "cmd-reserve-with-timeout",
        "cmd-release",
        "job-timeouts",
    ]
    .iter()
    .map(|c| format!("{c} {}", server_stats.get(*c).map_or("?", String::as_str)))
    .collect()
}

/// Prints what a run measured.
fn print_report(a: &Args, d: &Deployment, arrived: &Arrived, m: &Measured) {
    print_setup(a, m);
    print_memory(a, m);
    print_cpu(a, m);
    println!("  server commands: {}", m.cmds.join(", "));
    print_lateness(arrived, m);
    print_duplicates(arrived, d);
}

/// What was run, and how fast the keys were set and armed.
fn print_setup(a: &Args, m: &Measured) {
    let n = a.keys;
    let server = match (a.memory, a.embedded) {
        (true, false) => "in memory",
        (false, false) => "-b",
        (true, true) => "in memory, bridge embedded",
        (false, true) => "-b, bridge embedded",
    };
    println!(
        "bridge benchmark: {n} keys, deadlines {}..{} s, sprout {server}, \
         {} workers taking {} at a time{}",
        a.min_ttl_ms as f64 / 1e3,
        a.max_ttl_ms as f64 / 1e3,
        a.workers,
        a.consumer_batch,
        match a.consume_after {
            true => ", started once every key is delivered",
            false => "",
        }
    );
    println!(
        "  SET pipeline: {:.2} s ({:.0} keys/s)",
        m.set_secs,
        n as f64 / m.set_secs
    );
    match m.registered {
        Some(s) => println!(
            "  registered: all {n} timers armed after {s:.2} s = {:.0} keys/s",
            n as f64 / s
        ),
        None => println!("  registered: NOT all timers armed before the end"),
    }
}

/// The bridge's RSS before, armed, settled and at the end.
fn print_memory(a: &Args, m: &Measured) {
    // Embedded, the bridge's process is the server's.
    let whose = if a.embedded {
        "sprout + bridge"
    } else {
        "bridge"
    };
    let per_key = |rss: u64| (rss.saturating_sub(m.rss_before) * 1024) as f64 / a.keys as f64;
    let settled = match m.rss_settled {
        Some(rss) => format!(
            "{} MiB {SETTLE_SECS} s later ({:.0} bytes/key)",
            rss / 1024,
            per_key(rss)
        ),
        None => "not settled before the first deadline".to_string(),
    };
    println!(
        "  {whose} RSS: {} MiB before, {} MiB armed ({:.0} bytes/key), {settled}, {} MiB at the end",
        m.rss_before / 1024,
        m.rss_armed / 1024,
        per_key(m.rss_armed),
        m.rss_end / 1024
    );
}

/// CPU seconds of each process in each phase, and per expiry while firing.
fn print_cpu(a: &Args, m: &Measured) {
    // Embedded, the bridge's process is the server's: one figure.
    let cpu_line = |what: &str, from: &Cpu, to: &Cpu| {
        let d: Vec<f64> = to.iter().zip(from).map(|(t, f)| t - f).collect();
        let ours = if a.embedded {
            format!("sprout + bridge {:.1}", d[1])
        } else {
            format!("bridge {:.1}, sprout {:.1}", d[0], d[1])
        };
        println!(
            "  CPU s {what:<16} {ours}, watched redis {:.1}, untouched redis {:.1}, \
             this benchmark {:.1}",
            d[2], d[3], d[4]
        );
    };
    cpu_line("while arming:", &m.cpu_start, &m.cpu_armed);
    let fired_end = match m.cpu_fired {
        Some(fired) => {
            cpu_line("firing alone:", &m.cpu_armed, &fired);
            cpu_line("consuming after:", &fired, &m.cpu_end);
            fired
        }
        None => {
            cpu_line("after:", &m.cpu_armed, &m.cpu_end);
            m.cpu_end
        }
    };
    // Per expiry, while firing: the issue's figure (bridge + server).
    let us = |i: usize| (fired_end[i] - m.cpu_armed[i]) * 1e6 / a.keys as f64;
    let ours = match a.embedded {
        true => format!("sprout + bridge {:.1}", us(1)),
        false => format!(
            "bridge {:.1} + sprout {:.1} = {:.1}",
            us(0),
            us(1),
            us(0) + us(1)
        ),
    };
    println!(
        "  CPU µs/expiry firing:   {ours}; watched redis {:.1}, untouched redis {:.1}, \
         this benchmark {:.1}",
        us(2),
        us(3),
        us(4)
    );
}

/// Lateness of each way of hearing of an expiry, losses and duplicates.
fn print_lateness(arrived: &Arrived, m: &Measured) {
    let b = report(&arrived.bridge, &m.deadlines);
    println!("  lateness (ms)            p50     p99     max    lost   early  dupes");
    let rows = [
        ("bridge job (reserved)", &b, &arrived.bridge),
        (
            "  its fired_at_ms",
            &report(&arrived.fired, &m.deadlines),
            &arrived.fired,
        ),
        (
            "redis `expired` event",
            &report(&arrived.redis, &m.deadlines),
            &arrived.redis,
        ),
        (
            "  untouched redis",
            &report(&arrived.control, &m.deadlines),
            &arrived.control,
        ),
    ];
    for (name, r, arr) in rows {
        println!(
            "  {name:<22} {:>6}  {:>6}  {:>6}  {:>6}  {:>6}  {:>5}",
            r.p50,
            r.p99,
            r.max,
            r.lost,
            r.early,
            arr.duplicates.load(Ordering::Relaxed)
        );
    }
    if m.behind > 0 {
        println!(
            "  of the bridge's lost: {} deliveries still queued in its tube at the \
             end (the consumers fell behind), {} not delivered by then",
            m.behind,
            (b.lost as u64).saturating_sub(m.behind)
        );
    }
}

/// Each duplicate delivery, and then what the bridge logged that was not
/// routine.
fn print_duplicates(arrived: &Arrived, d: &Deployment) {
    let shown = arrived.bridge.shown.lock().unwrap();
    for dup in shown.iter() {
        println!("  duplicate: {dup}");
    }
    if !shown.is_empty() {
        let said = std::fs::read_to_string(&d.log).unwrap_or_default();
        let odd = said.lines().filter(|l| !l.contains(" INFO ")).take(20);
        for line in odd {
            println!("  bridge log: {line}");
        }
    }
}

/// `--recognise`: how soon each kind of deletion cancels N armed timers.
fn recognise(a: &Args, dir: &Path) {
    let n = a.keys;
    let (redis_proc, url, client) = start_redis();
    let server_port = free_port();
    let server = spawn(
        "sprout",
        Command::new(&a.sprout)
            .args(["-l", "127.0.0.1", "-p", &server_port.to_string(), "-b"])
            .arg(dir.join("binlog"))
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    wait_until("sprout", Duration::from_secs(10), || {
        std::net::TcpStream::connect(("127.0.0.1", server_port)).is_ok()
    });
    let mut bridge = start_bridge(a, &url, server_port, dir, &a.bridge_flags);
    wait_reconciled(dir, Duration::from_secs(30));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("redis");
        let mut stats = Client::connect(("127.0.0.1", server_port))
            .await
            .expect("connect");
        println!("bridge deletions: {n} keys, each way of deleting them in turn");
        let report = |what: &str, from: Instant, bridge: u32, cpu: [f64; 3]| {
            let now = [bridge, server.0.id(), redis_proc.0.id()].map(cpu_secs);
            let d: Vec<f64> = now.iter().zip(cpu).map(|(t, f)| t - f).collect();
            println!(
                "  {what:<40} recognised after {:>7.3} s; CPU s: bridge {:.2} ({:.1} µs/key), \
                 sprout {:.2}, redis {:.2}",
                from.elapsed().as_secs_f64(),
                d[0],
                d[0] * 1e6 / n as f64,
                d[1],
                d[2]
            );
        };
        let cpu = |bridge: u32| [bridge, server.0.id(), redis_proc.0.id()].map(cpu_secs);

        arm(&mut conn, &mut stats, n).await;
        let (t, c) = (Instant::now(), cpu(bridge.0.id()));
        delete_keys(&mut conn, n).await;
        wait_delayed(&mut stats, 0).await;
        report("DEL (a keyspace event each)", t, bridge.0.id(), c);

        arm(&mut conn, &mut stats, n).await;
        let (t, c) = (Instant::now(), cpu(bridge.0.id()));
        let () = redis::cmd("FLUSHDB")
            .query_async(&mut conn)
            .await
            .expect("FLUSHDB");
        wait_delayed(&mut stats, 0).await;
        report("FLUSHDB (no event)", t, bridge.0.id(), c);

        arm(&mut conn, &mut stats, n).await;
        // Past the index's sync (every 100 ms), then down.
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(bridge);
        delete_keys(&mut conn, n).await;
        let c = cpu(0);
        let t = Instant::now();
        bridge = start_bridge(a, &url, server_port, dir, &a.bridge_flags);
        wait_delayed(&mut stats, 0).await;
        report("DEL while down (from the restart)", t, bridge.0.id(), c);

        drop(bridge);
        let interval = "10";
        let mut flags = vec!["--no-pubsub".to_string()];
        if !a.bridge_flags.iter().any(|f| f == "--scan-interval") {
            flags.extend(["--scan-interval".to_string(), interval.to_string()]);
        }
        flags.extend(a.bridge_flags.iter().cloned());
        bridge = start_bridge(a, &url, server_port, dir, &flags);
        wait_reconciled(dir, Duration::from_secs(30));
        arm(&mut conn, &mut stats, n).await;
        let (t, c) = (Instant::now(), cpu(bridge.0.id()));
        delete_keys(&mut conn, n).await;
        wait_delayed(&mut stats, 0).await;
        report("DEL with --no-pubsub", t, bridge.0.id(), c);
        let passes: Vec<String> = std::fs::read_to_string(dir.join("bridge.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("reconciled"))
            .map(|l| l.rsplit("  ").next().unwrap_or(l).trim().to_string())
            .collect();
        println!("  --no-pubsub passes: {}", passes.join("; "));
        drop(bridge);
    });
    drop(server);
}

/// Sets `n` keys, due far beyond the run, and waits until all are armed.
async fn arm(
    conn: &mut redis::aio::MultiplexedConnection,
    stats: &mut Client<tokio::net::TcpStream>,
    n: usize,
) {
    let due = now_ms() + 600_000;
    let deadlines: Vec<i64> = (0..n as i64).map(|i| due + i % 10_000).collect();
    set_keys(conn, &deadlines).await;
    wait_delayed(stats, n as u64).await;
}

/// `DEL bench:<i>` for every key, pipelined.
async fn delete_keys(conn: &mut redis::aio::MultiplexedConnection, n: usize) {
    for start in (0..n).step_by(BATCH) {
        let mut pipe = redis::pipe();
        for i in start..(start + BATCH).min(n) {
            pipe.cmd("DEL").arg(format!("bench:{i}")).ignore();
        }
        let () = pipe.query_async(conn).await.expect("DEL pipeline");
    }
}

/// Waits until the timer tube holds `n` delayed timers.
async fn wait_delayed(stats: &mut Client<tokio::net::TcpStream>, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(600);
    while tube_stat(stats, TIMER_TUBE, "current-jobs-delayed").await != n {
        assert!(Instant::now() < deadline, "{n} delayed timers: timed out");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
