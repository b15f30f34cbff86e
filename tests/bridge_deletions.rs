//! The bridge never reports a deletion as an expiry, whichever way the key
//! went: deleted while the bridge was down, flushed (no keyspace event),
//! deleted behind a proxy without pub/sub, or deleted racing its deadline.
//! What it cannot tell apart (the deadline passed while it was down) is
//! delivered marked `"uncertain": true`. Real redis-server, real binaries.

mod bridge_common;
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::thread;
use std::time::Duration;

use bridge_common::{
    assert_on_time, can_run, can_run_on, keys, now_ms, start_embedded, wait_numpat, wait_timers,
    Bridge, Delivered, Redis, Setup, Version, Worker, TIMERS,
};
use common::{TempDir, TestServer};

/// How late a delivery may be (generous, for loaded CI machines).
const MAX_LATE_MS: i64 = 250;
const QUIET: Duration = Duration::from_millis(600);

/// Longer than the bridge's index takes to reach the disk (it syncs every
/// 100 ms): a bridge killed sooner after arming a timer has forgotten it,
/// and can only deliver its key marked uncertain.
const INDEX_SYNCED: Duration = Duration::from_millis(300);

/// Sleeps until the Unix time `at_ms`.
fn sleep_until(at_ms: i64) {
    let left = at_ms - now_ms();
    if left > 0 {
        thread::sleep(Duration::from_millis(left as u64));
    }
}

/// Every delivery until `until_ms` has passed and then none came for
/// [`QUIET`].
fn drain_past(worker: &mut Worker, until_ms: i64) -> Vec<Delivered> {
    let mut got = Vec::new();
    while now_ms() < until_ms {
        got.extend(worker.next(Duration::from_millis(100)));
    }
    got.extend(worker.drain(QUIET));
    got
}

/// Asserts that `got` is exactly `want` (key → expiry), once each, on time
/// and not marked uncertain.
#[track_caller]
fn assert_delivered(got: &[Delivered], want: &BTreeMap<String, i64>) {
    assert_delivered_from(&Version::V7_0, got, want);
}

/// [`assert_delivered`], with `version`'s tolerance on `expire_at_ms`.
#[track_caller]
fn assert_delivered_from(version: &Version, got: &[Delivered], want: &BTreeMap<String, i64>) {
    let mut keys: Vec<&str> = got.iter().map(|d| d.key.as_str()).collect();
    keys.sort();
    let want_keys: Vec<&str> = want.keys().map(String::as_str).collect();
    assert_eq!(keys, want_keys, "exactly one job each: {got:?}");
    for d in got {
        let off = d.expire_at_ms - want[&d.key];
        assert!(
            (0..=version.tolerance_ms()).contains(&off),
            "{off} ms off the expiry: {d:?}"
        );
        assert_on_time(d, MAX_LATE_MS);
        assert!(!d.uncertain, "marked uncertain: {d:?}");
    }
}

#[test]
fn deletions_while_the_bridge_is_down_are_not_delivered() {
    if !can_run("deletions_while_the_bridge_is_down_are_not_delivered") {
        return;
    }
    let mut s = Setup::start(&["dev:*"], &[]);
    let start = now_ms();
    let kinds = [
        "del",
        "unlink",
        "persist",
        "rename",
        "set",
        "refresh",
        "untouched",
    ];
    let mut want = BTreeMap::new();
    for (i, kind) in kinds.iter().enumerate() {
        for j in 0..5 {
            let key = format!("dev:{kind}:{j}");
            let at = s.redis.set_px(&key, "x", 3_000 + 100 * i as u64 + 20 * j);
            if *kind == "untouched" {
                want.insert(key, at);
            }
        }
    }
    wait_timers(&mut s.worker, kinds.len() * 5);
    sleep_until(start + 1_000);
    s.bridge.kill9();
    for j in 0..5 {
        let key = |kind: &str| format!("dev:{kind}:{j}");
        let _: i64 = s.redis.run(&["DEL", &key("del")]);
        let _: i64 = s.redis.run(&["UNLINK", &key("unlink")]);
        let _: i64 = s.redis.run(&["PERSIST", &key("persist")]);
        let _: () = s
            .redis
            .run(&["RENAME", &key("rename"), &format!("gone:{j}")]);
        let _: () = s.redis.run(&["SET", &key("set"), "y"]);
        let refreshed = s.redis.set_px(&key("refresh"), "x", 3_500);
        want.insert(key("refresh"), refreshed);
    }
    thread::sleep(Duration::from_millis(300));
    // Back well before any deadline: its first reconciliation sees what
    // went while it was down.
    let _bridge = Bridge::start(&s.bridge_args(&["dev:*"]));
    assert_eq!(
        s.worker.tube_stat(TIMERS, "current-jobs-delayed"),
        want.len().to_string(),
        "after the first pass, only the live keys have timers"
    );
    let last = want.values().max().copied().unwrap_or(0);
    let got = drain_past(&mut s.worker, last);
    assert_delivered(&got, &want);
}

#[test]
fn an_expiry_the_bridge_was_down_for_is_delivered_marked_uncertain() {
    if !can_run("an_expiry_the_bridge_was_down_for_is_delivered_marked_uncertain") {
        return;
    }
    let mut s = Setup::start(&["dev:*"], &[]);
    let gone = s.redis.set_px("dev:deleted", "x", 800);
    let quiet = s.redis.set_px("dev:expired", "x", 800);
    let later = s.redis.set_px("dev:later", "x", 3_000);
    wait_timers(&mut s.worker, 3);
    thread::sleep(INDEX_SYNCED);
    s.bridge.kill9();
    let _: i64 = s.redis.run(&["DEL", "dev:deleted"]);
    // Both deadlines pass while the bridge is down.
    sleep_until(quiet + 200);
    let _bridge = Bridge::start(&s.bridge_args(&["dev:*"]));
    let fresh = s.redis.set_px("dev:fresh", "x", 300);
    let got = drain_past(&mut s.worker, later);
    let marks: BTreeSet<(String, i64, bool)> = got
        .iter()
        .map(|d| (d.key.clone(), d.expire_at_ms, d.uncertain))
        .collect();
    // Deleted or expired while the bridge was down: the same to it, so
    // both are delivered, and both are marked. Later deadlines are not.
    let want = BTreeSet::from([
        ("dev:deleted".to_string(), gone, true),
        ("dev:expired".to_string(), quiet, true),
        ("dev:fresh".to_string(), fresh, false),
        ("dev:later".to_string(), later, false),
    ]);
    assert_eq!(marks, want, "{got:?}");
    for d in &got {
        assert!(d.received_ms >= d.expire_at_ms, "early: {d:?}");
    }
}

/// `flush` (FLUSHDB or FLUSHALL) with pending keys: none of them is
/// delivered; keys set after the flush are, on time.
fn a_flush_cancels_pending_keys(test: &str, flush: &str, version: Version) {
    if !can_run_on(version, test) {
        return;
    }
    let mut s = Setup::start_on(version, &["dev:*"], &[]);
    let start = now_ms();
    for i in 0..30 {
        s.redis
            .set_px(&format!("dev:flushed:{i}"), "x", 2_500 + 33 * i);
    }
    wait_timers(&mut s.worker, 30);
    sleep_until(start + 1_000);
    let _: () = s.redis.run(&[flush]);
    let mut want = BTreeMap::new();
    for i in 0..5 {
        let key = format!("dev:control:{i}");
        want.insert(key.clone(), s.redis.set_px(&key, "x", 1_500 + 100 * i));
    }
    let got = drain_past(&mut s.worker, start + 3_600);
    assert_delivered_from(&version, &got, &want);
    assert_eq!(s.worker.tube_stat(TIMERS, "current-jobs-delayed"), "0");
}

#[test]
fn flushdb_cancels_pending_keys() {
    a_flush_cancels_pending_keys("flushdb_cancels_pending_keys", "FLUSHDB", Version::V7_0);
}

#[test]
fn flushall_cancels_pending_keys() {
    a_flush_cancels_pending_keys("flushall_cancels_pending_keys", "FLUSHALL", Version::V7_0);
}

/// Redis 6.2 takes one `INFO` section a command: the flush is seen all
/// the same.
#[test]
fn flushdb_on_redis_6_2_cancels_pending_keys() {
    let test = "flushdb_on_redis_6_2_cancels_pending_keys";
    a_flush_cancels_pending_keys(test, "FLUSHDB", Version::V6_2);
}

#[test]
fn without_pubsub_deletions_a_scan_ahead_are_not_delivered() {
    if !can_run("without_pubsub_deletions_a_scan_ahead_are_not_delivered") {
        return;
    }
    let mut s = Setup::start(&["dev:*"], &["--no-pubsub", "--scan-interval", "0.5"]);
    let start = now_ms();
    let mut want = BTreeMap::new();
    for i in 0..10 {
        s.redis.set_px(&format!("dev:del:{i}"), "x", 3_000 + 20 * i);
        s.redis
            .set_px(&format!("dev:unlink:{i}"), "x", 3_000 + 20 * i);
        let key = format!("dev:kept:{i}");
        want.insert(key.clone(), s.redis.set_px(&key, "x", 2_000 + 20 * i));
    }
    // A heartbeat, refreshed faster than its TTL, then left to expire.
    let mut beat = 0;
    while now_ms() < start + 1_000 {
        beat = s.redis.set_px("dev:heartbeat", "on", 700);
        thread::sleep(Duration::from_millis(150));
    }
    want.insert("dev:heartbeat".into(), beat);
    // Two scan intervals and more before their deadlines.
    for i in 0..10 {
        let _: i64 = s.redis.run(&["DEL", &format!("dev:del:{i}")]);
        let _: i64 = s.redis.run(&["UNLINK", &format!("dev:unlink:{i}")]);
    }
    let got = drain_past(&mut s.worker, start + 3_300);
    assert_delivered(&got, &want);
}

#[test]
fn a_deletion_racing_the_deadline_is_delivered_at_most_once_and_never_early() {
    if !can_run("a_deletion_racing_the_deadline_is_delivered_at_most_once_and_never_early") {
        return;
    }
    let mut s = Setup::start(&["dev:*"], &[]);
    let deadlines: Vec<(String, i64)> = (0..40)
        .map(|i| {
            let key = format!("dev:race:{i}");
            let at = s.redis.set_px(&key, "x", 800 + 30 * i);
            (key, at)
        })
        .collect();
    // DEL from 4 ms before to 4 ms after each deadline.
    for (i, (key, at)) in deadlines.iter().enumerate() {
        sleep_until(at + (i as i64 % 9) - 4);
        let _: i64 = s.redis.run(&["DEL", key]);
    }
    let got = s.worker.drain(QUIET);
    let mut seen = BTreeSet::new();
    for d in &got {
        assert!(seen.insert(d.key.clone()), "delivered twice: {got:?}");
        assert!(
            d.fired_at_ms >= d.expire_at_ms && d.received_ms >= d.expire_at_ms,
            "early: {d:?}"
        );
        let want = deadlines.iter().find(|(k, _)| *k == d.key).map(|e| e.1);
        assert_eq!(Some(d.expire_at_ms), want, "{d:?}");
    }
    assert_eq!(s.worker.tube_stat(TIMERS, "current-jobs-delayed"), "0");
    assert_eq!(s.worker.tube_stat(TIMERS, "current-jobs-ready"), "0");
}

#[test]
fn a_precheck_catches_deletions_no_event_announces() {
    if !can_run("a_precheck_catches_deletions_no_event_announces") {
        return;
    }
    // Without pub/sub and with scans far apart, only the last look before
    // each deadline can see a deletion.
    let redis = Redis::start();
    let deleted = redis.set_px("dev:deleted", "x", 2_500);
    let kept = redis.set_px("dev:kept", "x", 2_500);
    redis.set_px("dev:refreshed", "x", 2_500);
    let server = TestServer::start(&[]);
    let extra = [
        "--no-pubsub",
        "--scan-interval",
        "60",
        "--precheck-ms",
        "800",
        "--delete-on-fire",
    ];
    let mut s = Setup::with(redis, server, &["dev:*"], &extra);
    sleep_until(deleted - 1_500);
    let _: i64 = s.redis.run(&["DEL", "dev:deleted"]);
    let refreshed = s.redis.set_px("dev:refreshed", "x", 2_500);
    // The look before the deadline deletes nothing, even with
    // --delete-on-fire.
    sleep_until(kept - 400);
    assert_eq!(s.redis.run::<i64>(&["EXISTS", "dev:kept"]), 1);
    let want = BTreeMap::from([
        ("dev:kept".to_string(), kept),
        ("dev:refreshed".to_string(), refreshed),
    ]);
    let got = drain_past(&mut s.worker, refreshed);
    assert_delivered(&got, &want);
}

#[test]
fn the_embedded_bridge_follows_the_same_rules() {
    if !can_run("the_embedded_bridge_follows_the_same_rules") {
        return;
    }
    let redis = Redis::start();
    let store = TempDir::new();
    let port = TestServer::free_port();
    let mut server = start_embedded(&redis, port, store.path());
    let mut worker = Worker::new(port, "offline");
    // A flush.
    let start = now_ms();
    for i in 0..10 {
        redis.set_px(&format!("dev:flushed:{i}"), "x", 2_500 + 50 * i);
    }
    wait_timers(&mut worker, 10);
    let _: () = redis.run(&["FLUSHALL"]);
    let control = redis.set_px("dev:control", "x", 1_500);
    let got = drain_past(&mut worker, start + 3_100);
    assert_delivered(&got, &BTreeMap::from([("dev:control".into(), control)]));
    // Deletions while the server, and the bridge in it, is down.
    for i in 0..5 {
        redis.set_px(&format!("dev:deleted:{i}"), "x", 3_000);
    }
    let kept = redis.set_px("dev:kept", "x", 3_000);
    wait_timers(&mut worker, 6);
    thread::sleep(INDEX_SYNCED);
    server.kill9();
    wait_numpat(&redis, 0);
    for i in 0..5 {
        let _: i64 = redis.run(&["DEL", &format!("dev:deleted:{i}")]);
    }
    let _server = start_embedded(&redis, port, store.path());
    let mut worker = Worker::new(port, "offline");
    let got = drain_past(&mut worker, kept);
    assert_eq!(
        keys(&got),
        BTreeSet::from([("dev:kept".to_string(), kept)]),
        "{got:?}"
    );
    for d in &got {
        assert_on_time(d, MAX_LATE_MS);
        assert!(!d.uncertain, "{d:?}");
    }
}
