//! Reading what the bridge delivers: a [`Worker`] that reserves delivered
//! jobs with the time each arrived, and a [`Collector`] that does it in
//! the background.

use std::thread;
use std::time::{Duration, Instant};

use sprout_testkit::now_ms;

use crate::common::Client;

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
