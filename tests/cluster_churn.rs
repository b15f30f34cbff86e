//! The cluster's stream stays bounded by the live jobs under churn, against
//! real nats-server processes and a sprout node: each subject keeps only
//! its last message, the leader cleans its pages as sled's are cleaned
//! (`store/log.rs`: at most twice the live bytes plus 1 MiB of dead ones),
//! and the change messages a snapshot covers are purged 5 s after it
//! (`cluster/purges.rs`), so puts and deletes that come and go leave
//! nothing behind.
//!
//! Freed slots keep an empty message each (a slot's last word), so what
//! is held is bounded by the live jobs plus the most pages ever held at
//! once: slots are handed out again, lowest first.
//!
//! CI churns 100,000 jobs (about 15 MB written); `SPROUT_CHURN=1000000`
//! is the by-hand run of issue 34.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::nats::NatsCluster;
use common::sprouts::Sprouts;
use common::Client;

/// Jobs that stay through the churn.
const LIVE: usize = 2_000;
/// Connections churning at once, and puts each pipelines before deleting.
const CONNS: usize = 4;
const WINDOW: usize = 50;
const BODY: &[u8] = &[b'x'; 100];
/// Dead bytes the leader's log tolerates beyond twice the live ones.
const SLACK: u64 = 1 << 20;

fn churn() -> usize {
    let n = std::env::var("SPROUT_CHURN").ok();
    n.and_then(|n| n.parse().ok()).unwrap_or(100_000)
}

/// Puts `n` jobs and deletes them, [`WINDOW`] at a time.
fn put_and_delete(port: u16, n: usize) {
    let mut c = Client::tcp(port);
    let put = format!(
        "put 0 0 60 {}\r\n{}\r\n",
        BODY.len(),
        "x".repeat(BODY.len())
    );
    for done in (0..n).step_by(WINDOW) {
        let k = WINDOW.min(n - done);
        c.send(put.repeat(k).as_bytes());
        let ids: Vec<String> = (0..k)
            .map(|_| {
                c.expect_line()
                    .strip_prefix("INSERTED ")
                    .unwrap()
                    .to_string()
            })
            .collect();
        let deletes: String = ids.iter().map(|id| format!("delete {id}\r\n")).collect();
        c.send(deletes.as_bytes());
        for _ in 0..k {
            assert_eq!(c.expect_line(), "DELETED");
        }
    }
}

/// The stream's bytes, messages and last sequence.
fn stream_state(nats: &NatsCluster, stream: &str) -> (u64, u64, u64) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let client = async_nats::connect(nats.url_list()).await.expect("connect");
        let js = async_nats::jetstream::new(client);
        let mut s = js.get_stream(stream).await.expect("the stream");
        let state = s.info().await.expect("stream info").state.clone();
        (state.bytes, state.messages, state.last_sequence)
    })
}

#[test]
fn churn_leaves_the_stream_bounded_by_the_live_jobs() {
    let Some(nats) = NatsCluster::start(3, "churn_leaves_the_stream_bounded") else {
        return;
    };
    let sprouts = Sprouts::start(&nats, "churn", 1);
    let port = sprouts.ports[sprouts.wait_leader(Duration::from_secs(30))];
    let mut c = Client::tcp(port);
    for _ in 0..LIVE {
        c.put_with(0, 3600, 60, BODY);
    }
    let n = churn();
    let started = Instant::now();
    let workers: Vec<_> = (0..CONNS)
        .map(|_| thread::spawn(move || put_and_delete(port, n / CONNS)))
        .collect();
    for w in workers {
        w.join().expect("a churning connection");
    }
    let took = started.elapsed();
    // An idle leader snapshots and cleans once a second while over its
    // bound, and purges the changes covered 5 s after.
    thread::sleep(Duration::from_secs(8));
    let (bytes, messages, last) = stream_state(&nats, "SPROUT_churn");
    eprintln!(
        "{LIVE} live jobs; after {n} put and deleted in {took:?}: \
         {bytes} B in {messages} messages held, {last} written"
    );
    // A job's image is its body and at most 64 bytes; each message also
    // carries its subject and batch headers.
    let live = (LIVE * (BODY.len() + 64)) as u64;
    let bound = 2 * live + SLACK + messages * 256;
    assert!(bytes <= bound, "{bytes} B held, bound {bound}");
    assert!(last > messages * 4, "the churn wrote far more than is held");
    assert_eq!(c.stat("current-jobs-delayed"), LIVE.to_string());
}
