//! The Redis TTL bridge across crashes: the bridge killed with -9 and
//! restarted, the server killed with -9 and restarted with `-b`, and the
//! embedded bridge inside a server killed with -9. No expiry may be lost;
//! keys that expired meanwhile are delivered right after the restart.

mod bridge_common;
mod common;

use std::collections::BTreeSet;
use std::thread;
use std::time::{Duration, Instant};

use bridge_common::{
    assert_on_time, can_run, can_run_on, keys, now_ms, on_every_redis, start_embedded, wait_numpat,
    wait_timers, Bridge, Redis, Setup, Version, Worker, TIMERS,
};
use common::{Addr, TempDir, TestServer};

/// Lateness allowed right after a restart: reconnecting backs off.
const MAX_LATE_MS_RESTART: i64 = 2_500;

// Restart safety against Redis 7.0 (`PEXPIRETIME`) and 6.2 (`PTTL`).
on_every_redis!(
    a_bridge_killed_with_9_loses_no_expiry,
    a_server_killed_with_9_and_restarted_with_b_loses_no_expiry,
    a_refresh_just_before_a_bridge_crash_is_not_lost,
    timers_lost_by_a_server_without_b_are_armed_again,
    a_leftover_older_timer_of_a_delivered_key_is_dropped,
);

fn a_bridge_killed_with_9_loses_no_expiry(v: Version) {
    if !can_run_on(v, "a_bridge_killed_with_9_loses_no_expiry") {
        return;
    }
    let mut s = Setup::start_on(v, &["dev:*"], &[]);
    let mut want = BTreeSet::new();
    for i in 0..10 {
        let key = format!("dev:{i}");
        want.insert((key.clone(), s.redis.set_px(&key, "x", 500 + 50 * i)));
    }
    wait_timers(&mut s.worker, 10);
    s.bridge.kill9();
    // While it is down: a refresh and a new key (no events seen), and the
    // first ten keys expire.
    // Their expiries leave the restarted bridge ample time to SCAN first:
    // a key set and expired while the bridge is away cannot be seen at all.
    let refreshed = s.redis.set_px("dev:0", "x", 2_500);
    want.retain(|(k, _)| k != "dev:0");
    want.insert(("dev:0".into(), refreshed));
    want.insert(("dev:new".into(), s.redis.set_px("dev:new", "x", 2_400)));
    thread::sleep(Duration::from_millis(1_100));
    let restarted = now_ms();
    let _bridge = Bridge::start(&s.bridge_args(&["dev:*"]));
    let got = s.worker.drain(Duration::from_millis(1_600));
    s.redis.assert_keys(&got, &want);
    for d in &got {
        assert!(d.received_ms >= d.expire_at_ms, "early: {d:?}");
        // Expired while the bridge was down: delivered right after it is back.
        let due = d.expire_at_ms.max(restarted);
        assert!(d.received_ms - due <= 1_000, "late: {d:?}");
    }
}

/// Starts a server on `port` with `-b store`, and waits for it to answer.
fn server_on(port: u16, store: &std::path::Path) -> TestServer {
    let port_s = port.to_string();
    let store = store.to_str().expect("UTF-8 path");
    let args = ["-l", "127.0.0.1", "-p", &port_s, "-b", store, "-f", "0"];
    TestServer::spawn(&args, Addr::Tcp(port)).expect("restart the server")
}

fn a_server_killed_with_9_and_restarted_with_b_loses_no_expiry(v: Version) {
    if !can_run_on(
        v,
        "a_server_killed_with_9_and_restarted_with_b_loses_no_expiry",
    ) {
        return;
    }
    let store = TempDir::new();
    let port = TestServer::free_port();
    let redis = Redis::start_version(v);
    let mut s = Setup::with(redis, server_on(port, store.path()), &["dev:*"], &[]);
    let mut want = BTreeSet::new();
    for i in 0..5 {
        let key = format!("dev:{i}");
        want.insert((key.clone(), s.redis.set_px(&key, "x", 900 + 100 * i)));
    }
    // With -f 0, acknowledged means on disk: nothing to wait for.
    wait_timers(&mut s.worker, 5);
    s.server.kill9();
    // A key set while the server is down is registered once it is back,
    // and fires on time: its delay is counted from when the timer is put,
    // not from before the reconnect. The reconnect backs off (attempts at
    // 50, 150, 350, 750, 1550 ms), so under load the timer may be put 1.5 s
    // after the set; with less TTL than that the key would expire
    // unregistered (and be delivered with the moment the bridge learnt of
    // it as its expiry).
    want.insert(("dev:late".into(), s.redis.set_px("dev:late", "x", 3_000)));
    thread::sleep(Duration::from_millis(300));
    s.server = server_on(port, store.path());
    let mut worker = Worker::new(port, &s.tube);
    let got = worker.drain(Duration::from_millis(2_500));
    s.redis.assert_keys(&got, &want);
    for d in &got {
        assert_on_time(d, MAX_LATE_MS_RESTART);
    }
}

#[test]
fn the_embedded_bridge_survives_a_server_killed_with_9() {
    if !can_run("the_embedded_bridge_survives_a_server_killed_with_9") {
        return;
    }
    let redis = Redis::start();
    let store = TempDir::new();
    let port = TestServer::free_port();
    let start = || start_embedded(&redis, port, store.path());
    let mut server = start();
    let mut worker = Worker::new(port, "offline");
    let first = redis.set_px("dev:a", "x", 300);
    let d = worker
        .next(Duration::from_secs(2))
        .expect("dev:a delivered");
    assert_eq!((d.key.as_str(), d.expire_at_ms), ("dev:a", first));
    assert_on_time(&d, 250);
    let second = redis.set_px("dev:b", "x", 800);
    wait_timers(&mut worker, 1);
    server.kill9();
    wait_numpat(&redis, 0);
    let _server = start();
    let mut worker = Worker::new(port, "offline");
    // The crash took the embedded bridge along, so a duplicate (same key,
    // same expiry) is allowed.
    let got = worker.drain(Duration::from_millis(1_200));
    assert_eq!(
        keys(&got),
        BTreeSet::from([("dev:b".to_string(), second)]),
        "{got:?}"
    );
    for d in &got {
        assert_on_time(d, 1_000);
    }
}

/// A connection of the test's own using the bridge's timer tube.
fn timer_tube(s: &Setup) -> common::Client {
    let mut timers = s.server.connect();
    assert_eq!(
        timers.line(&format!("use {TIMERS}")),
        format!("USING {TIMERS}")
    );
    timers
}

fn a_refresh_just_before_a_bridge_crash_is_not_lost(v: Version) {
    if !can_run_on(v, "a_refresh_just_before_a_bridge_crash_is_not_lost") {
        return;
    }
    let mut s = Setup::start_on(v, &["dev:*"], &[]);
    let mut timers = timer_tube(&s);
    s.redis.set_px("dev:k", "x", 400);
    wait_timers(&mut s.worker, 1);
    let (old, _) = timers.peek_cmd("peek-delayed").expect("the first timer");
    let refreshed = s.redis.set_px("dev:k", "x", 600);
    // The refresh is handled once the old timer is gone; crash right then,
    // likely before the index's write reaches the disk.
    let deadline = Instant::now() + Duration::from_secs(5);
    while timers.peek(old).is_some() {
        assert!(
            Instant::now() < deadline,
            "the old timer was never replaced"
        );
        thread::sleep(Duration::from_millis(2));
    }
    s.bridge.kill9();
    thread::sleep(Duration::from_millis(800));
    let _bridge = Bridge::start(&s.bridge_args(&["dev:*"]));
    let got = s.worker.drain(Duration::from_millis(600));
    let want = BTreeSet::from([("dev:k".to_string(), refreshed)]);
    s.redis.assert_keys(&got, &want);
}

fn timers_lost_by_a_server_without_b_are_armed_again(v: Version) {
    if !can_run_on(v, "timers_lost_by_a_server_without_b_are_armed_again") {
        return;
    }
    let port = TestServer::free_port();
    let in_memory = || {
        let port_s = port.to_string();
        TestServer::spawn(&["-l", "127.0.0.1", "-p", &port_s], Addr::Tcp(port))
            .expect("start the server")
    };
    let mut s = Setup::with(Redis::start_version(v), in_memory(), &["dev:*"], &[]);
    let at = s.redis.set_px("dev:1", "x", 1_500);
    wait_timers(&mut s.worker, 1);
    s.server.kill9();
    s.server = in_memory();
    // The bridge notices the lost connection, reconciles, finds its timer
    // gone and puts it again.
    s.bridge.wait_log("timer lost by the server; re-arming");
    let mut worker = Worker::new(port, &s.tube);
    let got = worker.drain(Duration::from_millis(2_500));
    s.redis
        .assert_keys(&got, &BTreeSet::from([("dev:1".to_string(), at)]));
    assert_on_time(&got[0], MAX_LATE_MS_RESTART);
}

/// A timer the index does not name, older than the one that delivered its
/// key (what a connection lost mid-pipeline, or a crash, leaves behind: put
/// on the server, its answer never read), is a duplicate when it comes due
/// after the delivery: dropped, not delivered a second time.
fn a_leftover_older_timer_of_a_delivered_key_is_dropped(v: Version) {
    if !can_run_on(v, "a_leftover_older_timer_of_a_delivered_key_is_dropped") {
        return;
    }
    let mut s = Setup::start_on(v, &["dev:*"], &[]);
    let mut timers = timer_tube(&s);
    // The leftover: due a second after the key's own timer fired.
    let key = "dev:left";
    let leftover = format!("T1 0 0 {} {} N\n{key}", now_ms() + 500, key.len());
    let left_id = timers.put_with(0, 2, 300, leftover.as_bytes());
    let deadline = s.redis.set_px(key, "x", 800);
    let got = s.worker.drain(Duration::from_millis(2_500));
    let want = BTreeSet::from([(key.to_string(), deadline)]);
    s.redis.assert_keys(&got, &want);
    assert!(!got[0].uncertain, "{got:?}");
    assert!(
        timers.peek(left_id).is_none(),
        "the leftover timer is still there"
    );
    assert_eq!(s.worker.tube_stat(TIMERS, "current-jobs-ready"), "0");
}
