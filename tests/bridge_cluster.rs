//! The Redis TTL bridge and Redis Cluster: three masters with a replica
//! each (Debian's redis-server), the bridge given one node
//! (`--redis-cluster`), keys across all slots, a slot migrated with its
//! pending keys mid-test, and a master failover (`CLUSTER FAILOVER` on its
//! replica): exactly one job per key, none early, none lost.

mod bridge_common;
mod common;

use bridge_common::{
    assert_each_once, bridge_args_for, can_run, key_slot, keys_to_write, Bridge, Collector,
    RedisCluster, Worker,
};
use common::{TempDir, TestServer};

/// Lateness allowed: keys due while a failover runs wait for it.
const MAX_LATE_MS: i64 = 1_500;

#[test]
fn a_cluster_resharded_and_failed_over_delivers_each_expiry_once() {
    let test = "a_cluster_resharded_and_failed_over_delivers_each_expiry_once";
    if !can_run(test) {
        return;
    }
    let cluster = RedisCluster::start();
    let server = TestServer::start(&[]);
    let state = TempDir::new();
    let url = cluster.url();
    let args = bridge_args_for(&["--redis-cluster", &url], server.port(), state.path());
    let mut bridge = Bridge::start(&args);
    bridge.wait_log(&format!("bridge source {url} (Redis Cluster)"));
    // Every master reads deadlines exactly, though it sends the probe's
    // key to the master of its slot (MOVED).
    assert_eq!(bridge.log().matches("PEXPIRETIME (exact)").count(), 3);
    let collector = Collector::start(Worker::new(server.port(), "offline"));
    let n = keys_to_write(2_000);
    let mut want = cluster.write_keys("spread", None, n, 1_500, 3_000);
    // A slot full of pending keys, moved to another master meanwhile.
    let migrating = cluster.write_keys("moved", Some("mig"), 200, 1_500, 2_000);
    want.extend(migrating);
    let slot = key_slot(b"{mig}");
    let from = cluster.owners()[usize::from(slot)];
    let to = *cluster.masters().iter().find(|&&m| m != from).unwrap();
    assert_eq!(cluster.migrate_slot(slot, to), 200);
    // MIGRATE carries TTLs relative, so Redis itself moves each deadline by
    // the time in transit (seen: 22 ms on a loaded machine): what is due is
    // the deadline the new master holds.
    for (key, at) in want.iter_mut() {
        if key_slot(key.as_bytes()) == slot {
            *at = cluster.expire_time(to, key);
        }
    }
    // A master failed over to its replica (with the keys and their TTLs):
    // the third one (a replica whose master's slots just changed may not
    // have heard yet, and the other masters deny it their votes).
    let old = *cluster
        .masters()
        .iter()
        .find(|&&m| m != to && m != from)
        .unwrap();
    let promoted = cluster.failover(old);
    bridge.wait_log(&format!("following the master 127.0.0.1:{promoted}"));
    // Keys written after both, on the cluster as it is now, with the same
    // lead as the first (a key the bridge reads only after its deadline, as
    // on a machine loaded by parallel builds, is delivered at once, off its
    // deadline: seen with 500 ms).
    want.extend(cluster.write_keys("after", None, n / 4, 1_500, 1_000));
    let last = want.values().max().copied().unwrap_or(0);
    let got = collector.finish(last + 2_000);
    assert_each_once(
        "Cluster, resharded and failed over",
        &got,
        &want,
        MAX_LATE_MS,
        0,
    );
}
