//! Failover under load, for the cluster tests (`cluster.rs`, and
//! `cluster_secure.rs` over TLS with credentials): producers, consumers
//! and a kicker working through a cluster's nodes ([`Load`]), leaders
//! killed under them ([`kill_leaders`]), and the check of the leader
//! afterwards against what the clients were told ([`check`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::model::{self, Carry, Log, Nodes, Res, Shared, TUBES};
use super::sprouts::{Sprouts, TAKEOVER_BOUND};
use super::Client;

/// Producers, consumers and a kicker (`model.rs`), each going on through
/// the next node when its node dies.
pub struct Load {
    shared: Arc<Shared>,
    threads: Vec<thread::JoinHandle<Res<()>>>,
}

impl Load {
    pub fn start(ports: &[u16]) -> Load {
        let nodes = Nodes::cluster(ports);
        let shared = Arc::new(Shared::default());
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        eprintln!("load seed {seed}");
        let mut threads = Vec::new();
        for w in 0..5u64 {
            let (nodes, shared, s) = (nodes.clone(), shared.clone(), seed.wrapping_add(w));
            threads.push(thread::spawn(move || match w {
                0 | 1 => model::producer(&nodes, &shared, TUBES[w as usize], s),
                2 | 3 => model::consumer(&nodes, &shared, s),
                _ => model::kicker(&nodes, &shared, s),
            }));
        }
        Load { shared, threads }
    }

    /// Stops the workers; what they were told. A worker that failed other
    /// than by losing its node fails the test.
    pub fn finish(self) -> Log {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            if let Err(e) = t.join().expect("a load thread panicked") {
                panic!("a worker failed: {e}");
            }
        }
        self.shared.take_log()
    }
}

/// Kills the leader `kills` times (kill -9), each time until a put is
/// acknowledged again, then starts it again; asserts each takeover was
/// within [`TAKEOVER_BOUND`] and prints the times.
pub fn kill_leaders(sprouts: &mut Sprouts, kills: usize) {
    let mut times = Vec::new();
    for _ in 0..kills {
        let leader = sprouts.wait_leader(Duration::from_secs(30));
        sprouts.kill9(leader);
        times.push(sprouts.time_to_put(Duration::from_secs(30)));
        sprouts.start_node(leader);
        thread::sleep(Duration::from_millis(1500));
    }
    let mut sorted = times.clone();
    sorted.sort();
    eprintln!(
        "service back after a leader's kill -9 ({kills} kills): min {:?}, median {:?}, max {:?}: {times:?}",
        sorted[0],
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1]
    );
    for t in &times {
        assert!(*t < TAKEOVER_BOUND, "takeovers took {times:?}");
    }
}

/// Checks the cluster's leader against what the clients were told
/// (`model::check`): every acknowledged job with its state, priority,
/// tube, body and counters, buried order, jobs reserved on a dead leader
/// still reserved, no acknowledged delete back, ids never reused.
pub fn check(sprouts: &Sprouts, log: &Log) {
    // Asked through any node still running (a leader that stepped down
    // exited).
    let deadline = Instant::now() + Duration::from_secs(30);
    let leader = loop {
        if let Some(l) = sprouts
            .alive()
            .into_iter()
            .find_map(|i| sprouts.leader_via(i))
        {
            break l;
        }
        assert!(Instant::now() < deadline, "no leader to check");
        thread::sleep(Duration::from_millis(50));
    };
    let mut c = Client::tcp(sprouts.ports[leader]);
    let violations = model::check(&mut c, log, Carry::Kept);
    let (acked, deleted) = log.counts();
    eprintln!(
        "checked {acked} acknowledged jobs ({deleted} deleted): {} violations",
        violations.len()
    );
    assert!(acked > 50, "only {acked} jobs acknowledged");
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}
