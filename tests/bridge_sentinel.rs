//! The Redis TTL bridge and Redis Sentinel (Debian's `redis-sentinel`): a
//! master and a replica, the bridge pointed at the sentinel
//! (`--redis-sentinel`), and a forced failover while keys are pending.
//! Every expiry is delivered once: the keys written on the old master
//! (which the promoted replica holds with their TTLs) and those written on
//! the new one after the failover.

mod bridge_common;
mod common;

use bridge_common::{
    assert_each_once, bridge_args_for, can_run, keys_to_write, write_keys, Bridge, Collector,
    SentinelSet, Worker,
};
use common::{tool_available, TempDir, TestServer};

/// Lateness allowed: keys due while the failover runs wait for it.
const MAX_LATE_MS: i64 = 1_500;

#[test]
fn a_sentinel_failover_with_pending_keys_delivers_each_once() {
    let test = "a_sentinel_failover_with_pending_keys_delivers_each_once";
    if !(can_run(test) && tool_available("redis-sentinel", test)) {
        return;
    }
    let set = SentinelSet::start();
    let server = TestServer::start(&[]);
    let state = TempDir::new();
    let url = set.url();
    let args = bridge_args_for(&["--redis-sentinel", &url], server.port(), state.path());
    let mut bridge = Bridge::start(&args);
    let master = format!(
        "{url} (Sentinel master mymaster at 127.0.0.1:{})",
        set.master.port
    );
    bridge.wait_log(&master);
    let collector = Collector::start(Worker::new(server.port(), "offline"));
    let n = keys_to_write(2_000);
    let mut want = write_keys(&mut set.master.conn(), "before", n, 1_000, 3_000);
    // On the replica too before the failover (else they are the old
    // master's loss, not the bridge's): a loaded machine may take longer
    // than one WAIT.
    let replicated = (0..15).any(|_| set.master.run::<i64>(&["WAIT", "1", "2000"]) >= 1);
    assert!(
        replicated,
        "the replica did not acknowledge the keys within 30 s"
    );
    set.failover();
    bridge.wait_log("the master moved to");
    let after = write_keys(&mut set.replica.conn(), "after", n / 4, 500, 1_000);
    want.extend(after);
    let last = want.values().max().copied().unwrap_or(0);
    let got = collector.finish(last + 2_000);
    assert_each_once("Sentinel, failover mid-test", &got, &want, MAX_LATE_MS, 0);
}
