//! The Redis TTL bridge against a real redis-server and a real sprout:
//! on-time delivery, filtering, refresh, cancellation, TTLs moved by
//! RENAME/COPY/RESTORE, startup reconciliation, the options.

mod bridge_common;
mod common;

use std::collections::BTreeSet;
use std::thread;
use std::time::Duration;

use bridge_common::{assert_on_time, can_run, can_run_on, now_ms, on_every_redis, Setup, Version};

/// How late a delivery may be in these tests: generous, for loaded CI
/// machines; the bridge's own figures are far lower (see benches/RESULTS.md).
const MAX_LATE_MS: i64 = 250;
const QUIET: Duration = Duration::from_millis(600);

// The core tests, against Redis 7.0 (`PEXPIRETIME`) and 6.2 (`PTTL`).
on_every_redis!(
    fractional_ttls_are_delivered_on_time,
    only_matching_keys_with_a_ttl_fire,
    a_refreshed_heartbeat_fires_once_after_its_last_expiry,
    a_key_written_again_after_it_fired_fires_again,
    persist_del_and_a_plain_set_cancel,
    rename_copy_and_restore_move_ttls,
    keys_set_before_the_bridge_starts_are_reconciled,
    with_value_and_delete_on_fire,
    scan_alone_finds_ttls_without_pubsub,
    a_restarted_redis_is_followed_again,
    keys_that_expire_before_the_bridge_sees_them_are_still_delivered,
    thousands_of_keys_are_each_delivered_once_on_time,
);

/// A few thousand keys (`SPROUT_BRIDGE_KEYS`, default 2,000) due over two
/// seconds: each delivered once; prints the lateness.
fn thousands_of_keys_are_each_delivered_once_on_time(v: Version) {
    if !can_run_on(v, "thousands_of_keys_are_each_delivered_once_on_time") {
        return;
    }
    let mut s = Setup::start_on(v, &["dev:*"], &[]);
    let n = bridge_common::keys_to_write(2_000);
    let want = bridge_common::write_keys(&mut s.redis.conn(), "many", n, 1_000, 2_000);
    let got = s.worker.drain(Duration::from_millis(1_500));
    let deployment = format!("one node, {v:?}");
    let tolerance = v.tolerance_ms();
    bridge_common::assert_each_once(&deployment, &got, &want, 500, tolerance);
}

fn fractional_ttls_are_delivered_on_time(v: Version) {
    if !can_run_on(v, "fractional_ttls_are_delivered_on_time") {
        return;
    }
    let mut s = Setup::start_on(v, &["dev:*"], &[]);
    let ttls = [250, 400, 550, 700, 850];
    let mut expected: Vec<(String, i64)> = ttls
        .iter()
        .enumerate()
        .map(|(i, ms)| {
            let key = format!("dev:{i}");
            let at = s.redis.set_px(&key, "on", *ms);
            (key, at)
        })
        .collect();
    let mut got: Vec<_> = s.worker.drain(QUIET);
    assert_eq!(got.len(), ttls.len(), "{got:?}");
    got.sort_by_key(|d| d.expire_at_ms);
    expected.sort_by_key(|e| e.1);
    for (d, (key, at)) in got.iter().zip(&expected) {
        assert_eq!((&d.key, d.db), (key, 0));
        s.redis.assert_expiry(d.expire_at_ms, *at);
        assert_on_time(d, MAX_LATE_MS);
        assert_eq!(d.value, None);
    }
}

fn only_matching_keys_with_a_ttl_fire(v: Version) {
    if !can_run_on(v, "only_matching_keys_with_a_ttl_fire") {
        return;
    }
    let mut s = Setup::start_on(v, &["dev:*", "order:?"], &[]);
    s.redis.set_px("other:1", "x", 200);
    s.redis.set_px("order:12", "x", 200);
    let _: () = s.redis.run(&["SET", "dev:forever", "x"]);
    let at = s.redis.set_px("order:1", "x", 300);
    let got = s.worker.drain(QUIET);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].key, "order:1");
    s.redis.assert_expiry(got[0].expire_at_ms, at);
}

fn a_refreshed_heartbeat_fires_once_after_its_last_expiry(v: Version) {
    if !can_run_on(v, "a_refreshed_heartbeat_fires_once_after_its_last_expiry") {
        return;
    }
    let mut s = Setup::start_on(v, &["dev:*"], &[]);
    let mut last = 0;
    for _ in 0..8 {
        last = s.redis.set_px("dev:hb", "online", 300);
        thread::sleep(Duration::from_millis(100));
    }
    let got = s.worker.drain(QUIET);
    assert_eq!(got.len(), 1, "{got:?}");
    s.redis.assert_expiry(got[0].expire_at_ms, last);
    assert_on_time(&got[0], MAX_LATE_MS);
}

fn a_key_written_again_after_it_fired_fires_again(v: Version) {
    if !can_run_on(v, "a_key_written_again_after_it_fired_fires_again") {
        return;
    }
    let mut s = Setup::start_on(v, &["order:*"], &[]);
    let mut want = Vec::new();
    for round in 0..3 {
        want.push(s.redis.set_px("order:7", "open", 200));
        let got = s.worker.next(Duration::from_secs(5));
        let got = got.unwrap_or_else(|| panic!("round {round}: no delivery"));
        assert_eq!(got.key, "order:7");
        s.redis.assert_expiry(got.expire_at_ms, want[round]);
        assert_on_time(&got, MAX_LATE_MS);
        // Written again at once: Redis's `expired` for the last round may
        // still be on its way to the bridge, and must not hide this one.
    }
    let extra = s.worker.drain(QUIET);
    assert!(extra.is_empty(), "one job per expiry: {extra:?}");
}

fn persist_del_and_a_plain_set_cancel(v: Version) {
    if !can_run_on(v, "persist_del_and_a_plain_set_cancel") {
        return;
    }
    let mut s = Setup::start_on(v, &["dev:*"], &[]);
    s.redis.set_px("dev:p", "x", 300);
    s.redis.set_px("dev:d", "x", 300);
    s.redis.set_px("dev:s", "x", 300);
    s.redis.set_px("dev:u", "x", 300);
    let _: i64 = s.redis.run(&["PERSIST", "dev:p"]);
    let _: i64 = s.redis.run(&["DEL", "dev:d"]);
    let _: () = s.redis.run(&["SET", "dev:s", "y"]);
    let _: i64 = s.redis.run(&["UNLINK", "dev:u"]);
    let got = s.worker.drain(QUIET);
    assert!(got.is_empty(), "{got:?}");
    let timers = "bridge-timers.offline";
    assert_eq!(s.worker.tube_stat(timers, "current-jobs-delayed"), "0");
    assert_eq!(s.worker.tube_stat(timers, "current-jobs-ready"), "0");
}

fn rename_copy_and_restore_move_ttls(v: Version) {
    if !can_run_on(v, "rename_copy_and_restore_move_ttls") {
        return;
    }
    let mut s = Setup::start_on(v, &["dev:*"], &[]);
    let renamed = s.redis.set_px("dev:a", "x", 400);
    let _: () = s.redis.run(&["RENAME", "dev:a", "dev:b"]);
    let copied = s.redis.set_px("dev:c", "x", 400);
    let _: i64 = s.redis.run(&["COPY", "dev:c", "dev:c2"]);
    let _: () = s.redis.run(&["SET", "dev:r", "x"]);
    let dump: Vec<u8> = s.redis.run(&["DUMP", "dev:r"]);
    let _: i64 = s.redis.run(&["DEL", "dev:r"]);
    let restored_at = now_ms() + 400;
    let _: () = redis::cmd("RESTORE")
        .arg("dev:r2")
        .arg(restored_at)
        .arg(dump)
        .arg("ABSTTL")
        .query(&mut s.redis.conn())
        .expect("RESTORE");
    let got = s.worker.drain(QUIET);
    let want = BTreeSet::from([
        ("dev:b".to_string(), renamed),
        ("dev:c".to_string(), copied),
        ("dev:c2".to_string(), copied),
        ("dev:r2".to_string(), restored_at),
    ]);
    s.redis.assert_keys(&got, &want);
}

fn keys_set_before_the_bridge_starts_are_reconciled(v: Version) {
    if !can_run_on(v, "keys_set_before_the_bridge_starts_are_reconciled") {
        return;
    }
    let redis = bridge_common::Redis::start_version(v);
    let at = redis.set_px("dev:early", "x", 1_000);
    let _: () = redis.run(&["SET", "dev:no-ttl", "x"]);
    let server = common::TestServer::start(&[]);
    let mut s = Setup::with(redis, server, &["dev:*"], &[]);
    let got = s.worker.drain(Duration::from_millis(1_500));
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].key, "dev:early");
    s.redis.assert_expiry(got[0].expire_at_ms, at);
    assert_on_time(&got[0], MAX_LATE_MS);
}

fn with_value_and_delete_on_fire(v: Version) {
    if !can_run_on(v, "with_value_and_delete_on_fire") {
        return;
    }
    let mut s = Setup::start_on(
        v,
        &["dev:*"],
        &["--with-value", "--delete-on-fire", "--pri", "7"],
    );
    let at = s.redis.set_px("dev:v", "last words", 300);
    let got = s.worker.drain(QUIET);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].value.as_deref(), Some("last words"));
    s.redis.assert_expiry(got[0].expire_at_ms, at);
    assert_on_time(&got[0], MAX_LATE_MS);
}

fn scan_alone_finds_ttls_without_pubsub(v: Version) {
    if !can_run_on(v, "scan_alone_finds_ttls_without_pubsub") {
        return;
    }
    let mut s = Setup::start_on(v, &["dev:*"], &["--no-pubsub", "--scan-interval", "0.2"]);
    let at = s.redis.set_px("dev:quiet", "x", 600);
    let got = s.worker.drain(Duration::from_millis(1_000));
    assert_eq!(got.len(), 1, "{got:?}");
    s.redis.assert_expiry(got[0].expire_at_ms, at);
    assert_on_time(&got[0], MAX_LATE_MS);
}

#[test]
fn a_classic_beanstalkd_gets_whole_second_delays() {
    if !can_run("a_classic_beanstalkd_gets_whole_second_delays") {
        return;
    }
    // Optional: only where a beanstalkd binary is installed.
    if std::process::Command::new("beanstalkd")
        .arg("-v")
        .output()
        .is_err()
    {
        eprintln!("skipping: beanstalkd is not installed");
        return;
    }
    let port = common::TestServer::free_port();
    let _beanstalkd = KillOnDrop(
        std::process::Command::new("beanstalkd")
            .args(["-l", "127.0.0.1", "-p", &port.to_string()])
            .spawn()
            .expect("spawn beanstalkd"),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "beanstalkd did not start"
        );
        thread::sleep(Duration::from_millis(10));
    }
    let redis = bridge_common::Redis::start();
    let state = common::TempDir::new();
    let args = bridge_common::bridge_args(&redis, port, "offline", &["dev:*"], state.path());
    let mut bridge = bridge_common::Bridge::start(&args);
    bridge.wait_log("whole seconds only");
    let mut worker = bridge_common::Worker::new(port, "offline");
    let at = redis.set_px("dev:1", "x", 300);
    let d = worker.next(Duration::from_secs(3)).expect("delivered");
    assert_eq!((d.key.as_str(), d.expire_at_ms), ("dev:1", at));
    // Rounded up to a whole second: never early, at most ~1 s late.
    assert_on_time(&d, 1_000 + MAX_LATE_MS);
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn a_restarted_redis_is_followed_again(v: Version) {
    if !can_run_on(v, "a_restarted_redis_is_followed_again") {
        return;
    }
    let mut s = Setup::start_on(v, &["dev:*"], &[]);
    let port = s.redis.port;
    s.redis.kill9();
    s.redis = bridge_common::Redis::start_on_version(port, v);
    // Set before the bridge is back: found by the reconciliation that
    // follows the new subscription.
    let early = s.redis.set_px("dev:early", "x", 2_500);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while s.redis.run::<i64>(&["PUBSUB", "NUMPAT"]) < 1 {
        assert!(std::time::Instant::now() < deadline, "never resubscribed");
        thread::sleep(Duration::from_millis(10));
    }
    let flags: Vec<String> = s.redis.run(&["CONFIG", "GET", "notify-keyspace-events"]);
    assert!(
        flags[1].contains('K'),
        "notifications not re-enabled: {flags:?}"
    );
    let late = s.redis.set_px("dev:late", "x", 300);
    let got = s.worker.drain(Duration::from_millis(2_600));
    let want = BTreeSet::from([
        ("dev:early".to_string(), early),
        ("dev:late".to_string(), late),
    ]);
    s.redis.assert_keys(&got, &want);
}

#[test]
fn several_nodes_and_databases_are_followed_apart() {
    if !can_run("several_nodes_and_databases_are_followed_apart") {
        return;
    }
    // Two "nodes": databases 0 and 3 of one server, as two --redis URLs,
    // with the same key name in both.
    let redis = bridge_common::Redis::start();
    let server = common::TestServer::start(&[]);
    let db3 = format!("redis://127.0.0.1:{}/3", redis.port);
    let mut s = Setup::with(redis, server, &["dev:*"], &["--redis", &db3]);
    let at0 = s.redis.set_px("dev:1", "x", 300);
    let mut conn3 = redis::Client::open(db3.as_str())
        .and_then(|c| c.get_connection())
        .expect("connect to db 3");
    let _: () = redis::cmd("SET")
        .arg(&["dev:1", "y", "PX", "500"][..])
        .query(&mut conn3)
        .expect("SET in db 3");
    let at3: i64 = redis::cmd("PEXPIRETIME")
        .arg("dev:1")
        .query(&mut conn3)
        .expect("PEXPIRETIME in db 3");
    let mut got: Vec<_> = s
        .worker
        .drain(QUIET)
        .into_iter()
        .map(|d| (d.db, d.key, d.expire_at_ms))
        .collect();
    got.sort();
    let want = vec![(0, "dev:1".to_string(), at0), (3, "dev:1".to_string(), at3)];
    assert_eq!(got, want);
}

fn keys_that_expire_before_the_bridge_sees_them_are_still_delivered(v: Version) {
    if !can_run_on(
        v,
        "keys_that_expire_before_the_bridge_sees_them_are_still_delivered",
    ) {
        return;
    }
    let mut s = Setup::start_on(v, &["flash:*"], &[]);
    // 1 ms TTLs: by the time the bridge reads a key's expiry it is gone,
    // and only Redis's `expired` event says what happened to it.
    let keys: Vec<String> = (0..100).map(|i| format!("flash:{i}")).collect();
    for key in &keys {
        s.redis.set_px(key, "x", 1);
    }
    let mut got: Vec<String> = s.worker.drain(QUIET).into_iter().map(|d| d.key).collect();
    got.sort();
    let mut want = keys.clone();
    want.sort();
    assert_eq!(got, want, "every expired key delivered exactly once");
}
