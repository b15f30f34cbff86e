//! A leader that stalls, against real nats-server 2.15.1 processes and
//! sprout binaries with the default lease (`SPROUT_CLUSTER_LEASE_MS`
//! overrides it), under producers, consumers and a kicker through every
//! node (`common/failover.rs`):
//!
//! - stopped (SIGSTOP) for 300 ms again and again, as an fsync or a
//!   starved CPU would stop it, it keeps its lease: no takeover, nothing
//!   acknowledged lost. `SPROUT_CLUSTER_SOAK_SECS=600` makes it the
//!   by-hand soak of `benches/failover.sh soak`;
//! - stopped for three leases, a standby takes over; continued, the old
//!   leader's write is fenced (the put it read meanwhile is never
//!   acknowledged, nor anywhere), it stops, and nothing acknowledged is
//!   lost.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::failover::{check, Load};
use common::nats::NatsCluster;
use common::sprouts::Sprouts;
use common::FallibleClient;
use sprout::cluster::lease::Timing;

/// The lease these tests run with: the default, unless the environment
/// names another.
fn lease() -> Duration {
    let ms = std::env::var("SPROUT_CLUSTER_LEASE_MS").ok();
    ms.and_then(|ms| ms.parse().ok())
        .map_or(Timing::DEFAULT_TTL, Duration::from_millis)
}

/// Three NATS servers, three sprout nodes on [`lease`], and the load; the
/// leader's index.
fn under_load(test: &str, name: &str) -> Option<(NatsCluster, Sprouts, Load, usize)> {
    let nats = NatsCluster::start(3, test)?;
    let ms = lease().as_millis().to_string();
    let flags = move |_| vec!["--cluster-lease-ms".to_string(), ms.clone()];
    let sprouts = Sprouts::start_with(&nats, name, 3, flags);
    let leader = sprouts.wait_leader(Duration::from_secs(30));
    let load = Load::start(&sprouts.ports);
    Some((nats, sprouts, load, leader))
}

/// How many times a node of `sprouts` took over (its first lead is not
/// one).
fn takeovers(sprouts: &Sprouts) -> usize {
    let mut logs = sprouts.past_logs.clone();
    logs.extend(sprouts.logs());
    let leads: usize = logs
        .iter()
        .map(|log| log.matches("leading cluster").count())
        .sum();
    leads.saturating_sub(1)
}

/// `was` if it still leads; else (it was deposed and exits) the leader
/// the others agree on.
fn still_leading(sprouts: &mut Sprouts, was: usize) -> usize {
    if sprouts.leader_via(was) == Some(was) {
        return was;
    }
    if let Some(mut node) = sprouts.nodes[was].take() {
        node.wait_exit(Duration::from_secs(10));
        sprouts.past_logs.push(node.stderr());
    }
    sprouts.wait_leader(Duration::from_secs(30))
}

#[test]
fn a_leader_stopped_briefly_keeps_its_lease_and_loses_nothing() {
    let test = "a_leader_stopped_briefly";
    let Some((_nats, mut sprouts, load, leader)) = under_load(test, "stall") else {
        return;
    };
    let secs = std::env::var("SPROUT_CLUSTER_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let until = Instant::now() + Duration::from_secs(secs);
    let mut stops = 0;
    let mut now_leading = leader;
    while Instant::now() < until {
        thread::sleep(Duration::from_millis(1700));
        // After a takeover (a failure, counted below), the new leader.
        now_leading = still_leading(&mut sprouts, now_leading);
        let node = sprouts.nodes[now_leading].as_ref().unwrap();
        node.signal(libc::SIGSTOP);
        thread::sleep(Duration::from_millis(300));
        node.signal(libc::SIGCONT);
        stops += 1;
    }
    // A takeover the last stop caused would be in by now.
    thread::sleep(2 * lease());
    let log = load.finish();
    let taken = takeovers(&sprouts);
    eprintln!(
        "{stops} stops of 300 ms over {secs} s (lease {} ms): {taken} takeovers",
        lease().as_millis()
    );
    assert_eq!(taken, 0, "stderr:\n{}", sprouts.notable_logs());
    assert_eq!(sprouts.wait_leader(Duration::from_secs(10)), leader);
    check(&sprouts, &log);
}

/// Waits until every thread of process `pid` is stopped (state `T`).
fn wait_stopped(pid: u32) {
    let stopped = || {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
        tasks.flatten().all(|task| {
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            // The state follows the command name's closing parenthesis.
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T'))
        })
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !stopped() {
        assert!(Instant::now() < deadline, "process {pid} did not stop");
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_leader_stopped_for_three_leases_is_fenced_when_continued() {
    let test = "a_leader_stopped_for_three_leases";
    let Some((_nats, mut sprouts, load, old)) = under_load(test, "fenced") else {
        return;
    };
    thread::sleep(Duration::from_millis(800));
    // A client of the old leader's, whose put it reads only once continued.
    let mut client = FallibleClient::connect(sprouts.ports[old], Duration::from_secs(10)).unwrap();
    assert_eq!(
        client.request("use fenced-probe").unwrap(),
        "USING fenced-probe"
    );
    let node = sprouts.nodes[old].as_ref().unwrap();
    node.signal(libc::SIGSTOP);
    // Sent only once every thread is stopped: a put read before is merely
    // in flight (it may be in the stream, unanswered).
    wait_stopped(node.pid());
    client.send(b"put 0 0 60 5\r\nprobe\r\n").unwrap();
    thread::sleep(3 * lease());
    let other = (old + 1) % 3;
    let new = sprouts.leader_via(other);
    assert!(
        new.is_some_and(|l| l != old),
        "no standby took over in 3 leases: {new:?}; stderr:\n{}",
        sprouts.notable_logs()
    );
    node.signal(libc::SIGCONT);
    let answer = client.read_line();
    assert!(
        !answer.as_ref().is_ok_and(|l| l.starts_with("INSERTED")),
        "a deposed leader acknowledged a put: {answer:?}"
    );
    let node = sprouts.nodes[old].as_mut().unwrap();
    let status = node.wait_exit(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| !s.success()),
        "the continued leader did not stop: {status:?}; stderr: {}",
        node.stderr()
    );
    // It says why: its lease ran out on its own clock, or the lease is
    // another's, or a batch found another's claim.
    let said = node.stderr();
    let why = [
        "no renewal succeeded within the lease",
        "deposed: ",
        "claimed the stream at epoch",
    ];
    assert!(why.iter().any(|w| said.contains(w)), "{said}");
    sprouts.nodes[old] = None;
    thread::sleep(Duration::from_millis(500));
    let log = load.finish();
    let leader = sprouts.wait_leader(Duration::from_secs(30));
    assert_eq!(Some(leader), new);
    let mut c = FallibleClient::connect(sprouts.ports[leader], Duration::from_secs(5)).unwrap();
    // The tube may be known, never with a job.
    let probe = c.request("stats-tube fenced-probe").unwrap();
    if let Some(len) = probe.strip_prefix("OK ") {
        let body = c.read_body(len.parse().unwrap()).unwrap();
        let body = String::from_utf8(body).unwrap();
        let empty = ["ready", "reserved", "delayed", "buried"]
            .iter()
            .all(|state| body.contains(&format!("\ncurrent-jobs-{state}: 0\n")));
        assert!(empty, "the fenced put is in: {body}");
    } else {
        assert_eq!(probe, "NOT_FOUND");
    }
    check(&sprouts, &log);
}
