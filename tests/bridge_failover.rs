//! The Redis TTL bridge at a Redis Cluster failover it could not watch
//! happen: a master dies (SIGKILL) while the bridge reconciles every
//! second, the bridge is frozen (SIGSTOP, as on an overloaded machine)
//! while the cluster promotes the master's replica, and keys are written to
//! the new master before the bridge is running again. The replica had
//! Redis's default `notify-keyspace-events ""` (the bridge switches the
//! classes on only on the masters it follows), so no event announces those
//! keys: only a `SCAN` of the new master, once the bridge has subscribed
//! there, finds them. Each must still be delivered once, on time.

mod bridge_common;
mod common;

use bridge_common::{
    assert_each_once, bridge_args_for, can_run, Bridge, Collector, RedisCluster, Worker,
};
use common::{TempDir, TestServer};

/// Lateness allowed.
const MAX_LATE_MS: i64 = 1_000;

#[test]
fn keys_written_to_a_replica_promoted_unseen_are_delivered() {
    let test = "keys_written_to_a_replica_promoted_unseen_are_delivered";
    if !can_run(test) {
        return;
    }
    let mut cluster = RedisCluster::start();
    let server = TestServer::start(&[]);
    let state = TempDir::new();
    let url = cluster.url();
    let mut args = bridge_args_for(&["--redis-cluster", &url], server.port(), state.path());
    args.extend(["--scan-interval".to_owned(), "1".to_owned()]);
    let mut bridge = Bridge::start(&args);
    bridge.wait_log(&format!("bridge source {url} (Redis Cluster)"));
    let collector = Collector::start(Worker::new(server.port(), "offline"));
    // The bridge scans the masters in slot order: the first one's SCANs
    // tell when a pass begins, the one killed comes later in the pass.
    let owners = cluster.owners();
    let (first, old) = (owners[0], owners[16383]);
    assert!(first != old && first == cluster.nodes[0].port);
    let promoted = cluster.crash(old);
    assert_eq!(cluster.notify_flags(promoted), "", "Redis's default");
    // A reconciliation begins while the dead master is still one (the
    // promotion waits for the 2 s node timeout).
    let scans = cluster.calls(first, "scan");
    let began = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while cluster.calls(first, "scan") == scans {
        assert!(std::time::Instant::now() < began, "no reconciliation began");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        !cluster.masters().contains(&promoted),
        "promoted before a reconciliation began"
    );
    bridge.signal(libc::SIGSTOP);
    cluster.wait_promoted(promoted);
    assert_eq!(cluster.notify_flags(promoted), "", "the bridge was frozen");
    let want = cluster.write_keys("after", None, 300, 4_000, 1_000);
    bridge.signal(libc::SIGCONT);
    let last = want.values().max().copied().unwrap_or(0);
    let got = collector.finish(last + 2_000);
    assert_each_once(
        "Cluster, a master crashed and its replica promoted unseen",
        &got,
        &want,
        MAX_LATE_MS,
        0,
    );
    // Due after the reconciliation that found them: deletions meanwhile
    // would have been seen.
    let uncertain: Vec<_> = got.iter().filter(|d| d.uncertain).collect();
    assert!(uncertain.is_empty(), "marked uncertain: {uncertain:?}");
}
