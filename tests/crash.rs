//! Crash stress: the real binary with `-b DIR` under each fsync policy
//! (`-f 0`, the default `-f 50`, `-F`: all must be kill -9 safe, since a
//! reply waits for its records to be written to the journal) under
//! concurrent producers, consumers and a kicker (each on its own
//! connection), SIGKILLed at a random moment (50–500 ms in), restarted on
//! the same directory, and checked against what the clients were told
//! (`common/model.rs` lists the checks; a job reserved at the crash comes
//! back ready).
//!
//! 2 iterations per policy by default; `SPROUT_STRESS_ITERATIONS=N` runs N.
//! `SPROUT_STRESS_SEED` fixes the random seed (the interleaving still varies).

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::model::{self, Carry, Nodes, Res, Shared, TUBES};
use common::{sprout_only, TempDir, TestServer};
use sprout_testkit::Rng;

/// Runs a worker; returns its result and when it ended.
fn timed(f: impl FnOnce() -> Res<()>) -> (Res<()>, Instant) {
    let result = f();
    (result, Instant::now())
}

/// One iteration: load, SIGKILL, restart, check. Returns the violations.
fn iteration(n: u64, seed: u64, policy: &[&str]) -> Vec<String> {
    let store = TempDir::new();
    let dir = store.path().join("store");
    let mut server = TestServer::start_with_store(&dir, policy);
    let nodes = Nodes::one(server.port());
    let shared = Arc::new(Shared::default());
    let mut rng = Rng::new(seed);
    let mut workers = Vec::new();
    for (w, tube) in TUBES.iter().enumerate() {
        let (shared, nodes, s) = (shared.clone(), nodes.clone(), rng.next_u64());
        workers.push(thread::spawn(move || {
            timed(|| model::producer(&nodes, &shared, tube, s ^ w as u64))
        }));
    }
    for _ in 0..3 {
        let (shared, nodes, s) = (shared.clone(), nodes.clone(), rng.next_u64());
        workers.push(thread::spawn(move || {
            timed(|| model::consumer(&nodes, &shared, s))
        }));
    }
    {
        let (shared, nodes, s) = (shared.clone(), nodes.clone(), rng.next_u64());
        workers.push(thread::spawn(move || {
            timed(|| model::kicker(&nodes, &shared, s))
        }));
    }
    let run_for = Duration::from_millis(50 + rng.below(451));
    thread::sleep(run_for);
    let killed_at = Instant::now();
    server.kill9();
    shared.stop.store(true, Ordering::Relaxed);
    for w in workers {
        // Errors are expected once the server died under them, not before.
        let (result, ended) = w.join().expect("worker panicked");
        if let Err(e) = result {
            assert!(ended >= killed_at, "a worker failed before the kill: {e}");
        }
    }
    let log = shared.take_log();
    let server = TestServer::start_with_store(&dir, policy);
    let violations = model::check(&mut server.connect(), &log, Carry::Released);
    let (acked, deleted) = log.counts();
    eprintln!(
        "{policy:?} iteration {n}: seed {seed}, killed after {run_for:?}, {acked} jobs \
         acknowledged, {deleted} deleted, {} violations",
        violations.len()
    );
    violations
}

/// Runs the stress under `policy`, failing with every violation found.
fn stress(name: &str, policy: &[&str]) {
    if !sprout_only(name) {
        return;
    }
    let iterations: u64 = std::env::var("SPROUT_STRESS_ITERATIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2);
    let base_seed: u64 = std::env::var("SPROUT_STRESS_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    let mut failures = Vec::new();
    for n in 0..iterations {
        let seed = base_seed.wrapping_add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let violations = iteration(n, seed, policy);
        if !violations.is_empty() {
            failures.push(format!(
                "iteration {n} (seed {seed}):\n  {}",
                violations.join("\n  ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {iterations} iterations under {policy:?} broke a guarantee:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn acknowledged_work_survives_sigkill_under_f0() {
    stress("acknowledged_work_survives_sigkill_under_f0", &["-f", "0"]);
}

#[test]
fn acknowledged_work_survives_sigkill_under_the_default_policy() {
    stress(
        "acknowledged_work_survives_sigkill_under_the_default_policy",
        &[],
    );
}

#[test]
fn acknowledged_work_survives_sigkill_under_no_fsync() {
    stress("acknowledged_work_survives_sigkill_under_no_fsync", &["-F"]);
}

/// Every body longer than the engine's inline limit read back from sled
/// (issue 33): nothing stays in the body cache once sled holds it.
#[test]
fn acknowledged_work_survives_sigkill_with_bodies_read_from_the_disk() {
    stress(
        "acknowledged_work_survives_sigkill_with_bodies_read_from_the_disk",
        &["--body-cache", "0"],
    );
}
