//! `stats`, `stats-job` and `stats-tube`: the exact key sets in their exact
//! order, every counter after a scripted sequence of commands, and the
//! shape of the values that depend on time, pid or host.

mod common;

use common::{lookup, Client, TestServer};

const STATS_KEYS: [&str; 51] = [
    "current-jobs-urgent",
    "current-jobs-ready",
    "current-jobs-reserved",
    "current-jobs-delayed",
    "current-jobs-buried",
    "cmd-put",
    "cmd-peek",
    "cmd-peek-ready",
    "cmd-peek-delayed",
    "cmd-peek-buried",
    "cmd-reserve",
    "cmd-reserve-with-timeout",
    "cmd-delete",
    "cmd-release",
    "cmd-use",
    "cmd-watch",
    "cmd-ignore",
    "cmd-bury",
    "cmd-kick",
    "cmd-touch",
    "cmd-stats",
    "cmd-stats-job",
    "cmd-stats-tube",
    "cmd-list-tubes",
    "cmd-list-tube-used",
    "cmd-list-tubes-watched",
    "cmd-pause-tube",
    "job-timeouts",
    "total-jobs",
    "max-job-size",
    "current-tubes",
    "current-connections",
    "current-producers",
    "current-workers",
    "current-waiting",
    "total-connections",
    "pid",
    "version",
    "rusage-utime",
    "rusage-stime",
    "uptime",
    "binlog-oldest-index",
    "binlog-current-index",
    "binlog-records-migrated",
    "binlog-records-written",
    "binlog-max-size",
    "draining",
    "id",
    "hostname",
    "os",
    "platform",
];

const STATS_JOB_KEYS: [&str; 14] = [
    "id",
    "tube",
    "state",
    "pri",
    "age",
    "delay",
    "ttr",
    "time-left",
    "file",
    "reserves",
    "timeouts",
    "releases",
    "buries",
    "kicks",
];

const STATS_TUBE_KEYS: [&str; 14] = [
    "name",
    "current-jobs-urgent",
    "current-jobs-ready",
    "current-jobs-reserved",
    "current-jobs-delayed",
    "current-jobs-buried",
    "total-jobs",
    "current-using",
    "current-watching",
    "current-waiting",
    "cmd-delete",
    "cmd-pause-tube",
    "pause",
    "pause-time-left",
];

fn keys(map: &[(String, String)]) -> Vec<&str> {
    map.iter().map(|(k, _)| k.as_str()).collect()
}

fn is_uint(v: &str) -> bool {
    !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit())
}

fn is_quoted(v: &str) -> bool {
    v.len() >= 2 && v.starts_with('"') && v.ends_with('"') && !v[1..v.len() - 1].contains('"')
}

/// `SECONDS.MICROSECONDS` with exactly six fractional digits.
fn is_rusage(v: &str) -> bool {
    matches!(v.split_once('.'), Some((s, us)) if is_uint(s) && us.len() == 6 && is_uint(us))
}

/// Asserts `key` has `want` in `map`, with a readable message.
#[track_caller]
fn check(map: &[(String, String)], want: &[(&str, &str)]) {
    for (k, v) in want {
        assert_eq!(lookup(map, k), *v, "key {k}");
    }
}

#[test]
fn stats_keys_and_value_shapes_on_a_fresh_server() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    // Wait until the harness's readiness probe is gone.
    let polls = c.wait_stat("current-connections", "1");
    let st = c.stats_of("stats");
    assert_eq!(keys(&st), STATS_KEYS);
    for (k, v) in &st {
        let ok = match k.as_str() {
            "pid" => *v == s.pid().to_string(),
            "version" | "hostname" | "os" | "platform" => is_quoted(v),
            "rusage-utime" | "rusage-stime" => is_rusage(v),
            "draining" => v == "false",
            "id" => v.len() == 16 && v.bytes().all(|b| b.is_ascii_hexdigit()),
            "binlog-oldest-index" | "binlog-current-index" => v == "0",
            "binlog-records-migrated" | "binlog-records-written" => v == "0",
            "uptime" | "binlog-max-size" => is_uint(v),
            "max-job-size" => v == "65535",
            "current-tubes" | "current-connections" => v == "1",
            "cmd-stats" => *v == (polls + 1).to_string(),
            // Our connection and the harness's readiness probe.
            "total-connections" => v == "2",
            _ => v == "0",
        };
        assert!(ok, "stats {k}: unexpected value {v:?}");
    }
}

#[test]
fn stats_id_is_stable_and_uptime_counts_seconds() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    let id = c.stat("id");
    assert_eq!(c.stat("id"), id);
    let up: u64 = c.stat("uptime").parse().unwrap();
    assert!(up <= 1, "uptime {up} on a fresh server");
    let other = TestServer::start(&[]);
    assert_ne!(
        other.connect().stat("id"),
        id,
        "two servers share an instance id"
    );
}

#[test]
fn max_job_size_follows_z() {
    let s = TestServer::start(&["-z", "1234"]);
    assert_eq!(s.connect().stat("max-job-size"), "1234");
}

#[test]
fn counters_after_a_scripted_sequence() {
    let s = TestServer::start(&[]);
    let mut a = s.connect();
    let mut b = s.connect();
    a.exchange(b"use t1\r\n", b"USING t1\r\n");
    a.put(b"j1");
    a.put(b"j2");
    a.put(b"j3");
    a.exchange(b"use default\r\n", b"USING default\r\n");
    a.put_with(0, 100, 60, b"j4");
    a.put_with(2000, 0, 60, b"j5");
    a.put_with(5, 0, 60, b"j6");

    b.exchange(b"watch t1\r\n", b"WATCHING 2\r\n");
    b.exchange(b"ignore default\r\n", b"WATCHING 1\r\n");
    b.exchange(b"reserve\r\n", b"RESERVED 1 2\r\nj1\r\n");
    b.exchange(b"release 1 0 0\r\n", b"RELEASED\r\n");
    b.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 1 2\r\nj1\r\n");
    b.exchange(b"bury 1 0\r\n", b"BURIED\r\n");
    b.exchange(b"reserve\r\n", b"RESERVED 2 2\r\nj2\r\n");
    b.exchange(b"touch 2\r\n", b"TOUCHED\r\n");
    b.exchange(b"delete 3\r\n", b"DELETED\r\n");
    // Commands answered NOT_FOUND still count ...
    b.exchange(b"delete 99\r\n", b"NOT_FOUND\r\n");
    b.exchange(b"peek 3\r\n", b"NOT_FOUND\r\n");
    // ... commands answered BAD_FORMAT do not.
    b.exchange(b"delete x\r\n", b"BAD_FORMAT\r\n");
    b.exchange(b"peek-ready x\r\n", b"BAD_FORMAT\r\n");
    b.exchange(b"use -x\r\n", b"BAD_FORMAT\r\n");
    b.exchange(b"peek-ready\r\n", b"FOUND 6 2\r\nj6\r\n");
    b.exchange(b"peek-delayed\r\n", b"FOUND 4 2\r\nj4\r\n");
    b.exchange(b"peek-buried\r\n", b"NOT_FOUND\r\n");
    b.exchange(b"kick 0\r\n", b"KICKED 0\r\n");
    b.exchange(b"stats-tube nope\r\n", b"NOT_FOUND\r\n");
    b.exchange(b"stats-job 99\r\n", b"NOT_FOUND\r\n");
    b.exchange(b"list-tube-used\r\n", b"USING default\r\n");
    b.exchange(b"list-tubes\r\n", b"OK 19\r\n---\n- default\n- t1\n\r\n");
    b.exchange(b"list-tubes-watched\r\n", b"OK 9\r\n---\n- t1\n\r\n");
    b.exchange(b"pause-tube t1 0\r\n", b"PAUSED\r\n");
    b.exchange(b"quitnot\r\n", b""); // closes b; quit is not counted
    b.expect_closed();

    let mut c: Client = s.connect();
    let polls = c.wait_stat("current-connections", "2");
    let st = c.stats_of("stats");
    assert_eq!(lookup(&st, "cmd-stats"), (polls + 1).to_string());
    check(
        &st,
        &[
            ("current-jobs-urgent", "2"), // j2 (back from b) and j6
            ("current-jobs-ready", "3"),
            ("current-jobs-reserved", "0"),
            ("current-jobs-delayed", "1"),
            ("current-jobs-buried", "1"),
            ("cmd-put", "6"),
            ("cmd-peek", "1"),
            ("cmd-peek-ready", "1"),
            ("cmd-peek-delayed", "1"),
            ("cmd-peek-buried", "1"),
            ("cmd-reserve", "2"),
            ("cmd-reserve-with-timeout", "1"),
            ("cmd-delete", "2"),
            ("cmd-release", "1"),
            ("cmd-use", "2"),
            ("cmd-watch", "1"),
            ("cmd-ignore", "1"),
            ("cmd-bury", "1"),
            ("cmd-kick", "1"),
            ("cmd-touch", "1"),
            ("cmd-stats-job", "1"),
            ("cmd-stats-tube", "1"),
            ("cmd-list-tubes", "1"),
            ("cmd-list-tube-used", "1"),
            ("cmd-list-tubes-watched", "1"),
            ("cmd-pause-tube", "1"),
            ("job-timeouts", "0"),
            ("total-jobs", "6"),
            ("current-tubes", "2"),
            ("current-connections", "2"),
            ("current-producers", "1"),
            ("current-workers", "0"),
            ("current-waiting", "0"),
            ("total-connections", "4"), // a, b, c and the readiness probe
        ],
    );
    // Job 2, reserved by b, went back to ready when b left.
    assert_eq!(c.job_stat(2, "state"), "ready");
    assert_eq!(c.job_stat(2, "releases"), "0");
}

#[test]
fn connection_kinds_are_counted() {
    let s = TestServer::start(&[]);
    let mut p = s.connect();
    let mut w = s.connect();
    let mut both = s.connect();
    let mut idle = s.connect();
    p.put(b"x");
    w.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 1 1\r\nx\r\n");
    both.put(b"y");
    both.exchange(b"reserve-job 2\r\n", b"RESERVED 2 1\r\ny\r\n");
    w.send(b"reserve\r\n");
    idle.wait_stat("current-waiting", "1");
    check(
        &idle.stats_of("stats"),
        &[
            ("current-connections", "4"),
            ("current-producers", "2"),
            ("current-workers", "2"),
            ("current-waiting", "1"),
            ("total-connections", "5"), // and the readiness probe
            ("current-jobs-reserved", "2"),
        ],
    );
    check(
        &idle.stats_of("stats-tube default"),
        &[
            ("current-using", "4"),
            ("current-watching", "4"),
            ("current-waiting", "1"),
            ("current-jobs-reserved", "2"),
        ],
    );
}

#[test]
fn stats_job_in_every_state() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(b"use jobs\r\n", b"USING jobs\r\n");
    c.put_with(1023, 0, 60, b"r");
    c.put_with(1024, 30, 0, b"d");
    let st = c.stats_of("stats-job 1");
    assert_eq!(keys(&st), STATS_JOB_KEYS);
    check(
        &st,
        &[
            ("id", "1"),
            ("tube", "\"jobs\""),
            ("state", "ready"),
            ("pri", "1023"),
            ("age", "0"),
            ("delay", "0"),
            ("ttr", "60"),
            ("time-left", "0"),
            ("file", "0"),
            ("reserves", "0"),
            ("timeouts", "0"),
            ("releases", "0"),
            ("buries", "0"),
            ("kicks", "0"),
        ],
    );
    let st = c.stats_of("stats-job 2");
    check(
        &st,
        &[
            ("state", "delayed"),
            ("pri", "1024"),
            ("delay", "30"),
            ("ttr", "1"),
        ],
    );
    let left: u64 = lookup(&st, "time-left").parse().unwrap();
    assert!((28..=30).contains(&left), "delayed time-left {left}");

    c.exchange(b"watch jobs\r\n", b"WATCHING 2\r\n");
    c.exchange(b"reserve\r\n", b"RESERVED 1 1\r\nr\r\n");
    let st = c.stats_of("stats-job 1");
    check(&st, &[("state", "reserved"), ("reserves", "1")]);
    let left: u64 = lookup(&st, "time-left").parse().unwrap();
    assert!((58..=60).contains(&left), "reserved time-left {left}");

    c.exchange(b"bury 1 7\r\n", b"BURIED\r\n");
    check(
        &c.stats_of("stats-job 1"),
        &[
            ("state", "buried"),
            ("pri", "7"),
            ("time-left", "0"),
            ("buries", "1"),
        ],
    );
    c.exchange(b"kick-job 1\r\n", b"KICKED\r\n");
    c.exchange(b"kick-job 2\r\n", b"KICKED\r\n");
    check(
        &c.stats_of("stats-job 1"),
        &[("state", "ready"), ("kicks", "1")],
    );
    // A kicked delayed job keeps its delay setting.
    check(
        &c.stats_of("stats-job 2"),
        &[
            ("state", "ready"),
            ("kicks", "1"),
            ("delay", "30"),
            ("time-left", "0"),
        ],
    );
}

#[test]
fn stats_tube_keys_and_counts() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    let st = c.stats_of("stats-tube default");
    assert_eq!(keys(&st), STATS_TUBE_KEYS);
    check(
        &st,
        &[
            ("name", "\"default\""),
            ("current-jobs-urgent", "0"),
            ("current-jobs-ready", "0"),
            ("current-jobs-reserved", "0"),
            ("current-jobs-delayed", "0"),
            ("current-jobs-buried", "0"),
            ("total-jobs", "0"),
            ("current-using", "1"),
            ("current-watching", "1"),
            ("current-waiting", "0"),
            ("cmd-delete", "0"),
            ("cmd-pause-tube", "0"),
            ("pause", "0"),
            ("pause-time-left", "0"),
        ],
    );
    c.exchange(b"use t\r\n", b"USING t\r\n");
    c.put_with(0, 0, 60, b"urgent");
    c.put_with(1024, 0, 60, b"normal");
    c.put_with(0, 50, 60, b"delayed");
    c.put_with(0, 0, 60, b"buried");
    c.exchange(b"reserve-job 4\r\n", b"RESERVED 4 6\r\nburied\r\n");
    c.exchange(b"bury 4 0\r\n", b"BURIED\r\n");
    c.exchange(b"reserve-job 1\r\n", b"RESERVED 1 6\r\nurgent\r\n");
    c.exchange(b"delete 1\r\n", b"DELETED\r\n");
    c.exchange(b"delete 1\r\n", b"NOT_FOUND\r\n");
    c.exchange(b"pause-tube t 60\r\n", b"PAUSED\r\n");
    let st = c.stats_of("stats-tube t");
    check(
        &st,
        &[
            ("name", "\"t\""),
            ("current-jobs-urgent", "0"),
            ("current-jobs-ready", "1"),
            ("current-jobs-reserved", "0"),
            ("current-jobs-delayed", "1"),
            ("current-jobs-buried", "1"),
            ("total-jobs", "4"),
            ("current-using", "1"),
            ("current-watching", "0"),
            ("current-waiting", "0"),
            ("cmd-delete", "1"),
            ("cmd-pause-tube", "1"),
            ("pause", "60"),
        ],
    );
    let left: u64 = lookup(&st, "pause-time-left").parse().unwrap();
    assert!((58..=60).contains(&left), "pause-time-left {left}");
    assert_eq!(c.tube_stat("default", "current-using"), "0");
}
