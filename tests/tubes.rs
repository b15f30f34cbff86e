//! Tubes: `use`, `watch`, `ignore`, `list-tubes`, `list-tube-used`,
//! `list-tubes-watched`, tube name rules, tubes disappearing when nothing
//! refers to them, and `pause-tube`.

mod common;

use std::time::{Duration, Instant};

use common::{parse_yaml_list, TestServer};

#[test]
fn a_new_connection_uses_and_watches_default() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(b"list-tube-used\r\n", b"USING default\r\n");
    c.exchange(b"list-tubes-watched\r\n", b"OK 14\r\n---\n- default\n\r\n");
    c.exchange(b"list-tubes\r\n", b"OK 14\r\n---\n- default\n\r\n");
}

#[test]
fn use_sends_puts_to_that_tube() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(b"use foo\r\n", b"USING foo\r\n");
    c.exchange(b"list-tube-used\r\n", b"USING foo\r\n");
    c.put(b"in-foo");
    assert_eq!(c.job_stat(1, "tube"), "\"foo\"");
    // The default watch list does not see it.
    c.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    c.exchange(b"watch foo\r\n", b"WATCHING 2\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 1 6\r\nin-foo\r\n");
    // `use` does not change the watch list, and re-using is fine.
    c.exchange(b"use foo\r\n", b"USING foo\r\n");
    c.exchange(
        b"list-tubes-watched\r\n",
        b"OK 20\r\n---\n- default\n- foo\n\r\n",
    );
}

#[test]
fn watch_and_ignore_counts() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(b"watch a\r\n", b"WATCHING 2\r\n");
    c.exchange(b"watch a\r\n", b"WATCHING 2\r\n");
    c.exchange(b"watch b\r\n", b"WATCHING 3\r\n");
    c.exchange(
        b"list-tubes-watched\r\n",
        b"OK 22\r\n---\n- default\n- a\n- b\n\r\n",
    );
    // Ignoring a tube that is not watched (or does not exist) is a no-op.
    c.exchange(b"ignore nope\r\n", b"WATCHING 3\r\n");
    c.exchange(b"ignore a\r\n", b"WATCHING 2\r\n");
    c.exchange(b"ignore default\r\n", b"WATCHING 1\r\n");
    c.exchange(b"list-tubes-watched\r\n", b"OK 8\r\n---\n- b\n\r\n");
    // The last watched tube cannot be ignored.
    c.exchange(b"ignore b\r\n", b"NOT_IGNORED\r\n");
    c.exchange(b"ignore default\r\n", b"WATCHING 1\r\n");
}

#[test]
fn list_tubes_is_in_creation_order() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(b"watch zeta\r\n", b"WATCHING 2\r\n");
    c.exchange(b"use alpha\r\n", b"USING alpha\r\n");
    c.exchange(b"watch mid\r\n", b"WATCHING 3\r\n");
    let tubes = parse_yaml_list(&c.ok_body(b"list-tubes\r\n"));
    assert_eq!(tubes, ["default", "zeta", "alpha", "mid"]);
}

#[test]
fn tubes_disappear_when_unused_unwatched_and_empty() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(b"use gone\r\n", b"USING gone\r\n");
    c.exchange(b"use default\r\n", b"USING default\r\n");
    c.exchange(b"stats-tube gone\r\n", b"NOT_FOUND\r\n");
    c.exchange(b"watch w\r\n", b"WATCHING 2\r\n");
    c.exchange(b"ignore w\r\n", b"WATCHING 1\r\n");
    c.exchange(b"stats-tube w\r\n", b"NOT_FOUND\r\n");
    c.exchange(b"list-tubes\r\n", b"OK 14\r\n---\n- default\n\r\n");

    // A tube holding a job stays, and goes once the job is deleted.
    c.exchange(b"use keep\r\n", b"USING keep\r\n");
    c.put(b"j");
    c.exchange(b"use default\r\n", b"USING default\r\n");
    assert_eq!(c.tube_stat("keep", "current-jobs-ready"), "1");
    c.exchange(b"delete 1\r\n", b"DELETED\r\n");
    c.exchange(b"stats-tube keep\r\n", b"NOT_FOUND\r\n");

    // A tube used by another connection stays until it disconnects.
    let mut other = s.connect();
    other.exchange(b"use theirs\r\n", b"USING theirs\r\n");
    assert_eq!(c.tube_stat("theirs", "current-using"), "1");
    drop(other);
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        c.send(b"stats-tube theirs\r\n");
        let line = c.expect_line();
        if line == "NOT_FOUND" {
            break;
        }
        assert!(line.starts_with("OK "), "{line}");
        let n: usize = line[3..].parse().unwrap();
        c.read_exact_bytes(n + 2);
        assert!(
            Instant::now() < deadline,
            "tube not removed after disconnect"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The default tube is never removed.
    c.exchange(b"watch x\r\n", b"WATCHING 2\r\n");
    c.exchange(b"ignore default\r\n", b"WATCHING 1\r\n");
    c.exchange(b"use x\r\n", b"USING x\r\n");
    c.exchange(b"stats-tube default\r\n", b"");
    assert!(c.expect_line().starts_with("OK "));
}

#[test]
fn tube_name_rules() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    let all = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-+/;.$_()";
    c.exchange(
        format!("use {all}\r\n").as_bytes(),
        format!("USING {all}\r\n").as_bytes(),
    );
    let n200 = "n".repeat(200);
    c.exchange(
        format!("use {n200}\r\n").as_bytes(),
        format!("USING {n200}\r\n").as_bytes(),
    );
    c.exchange(format!("watch {n200}\r\n").as_bytes(), b"WATCHING 2\r\n");
    let n201 = "n".repeat(201);
    for cmd in ["use", "watch", "ignore", "stats-tube"] {
        for bad in [n201.as_str(), "-dash", "sp ace", "bad!", "a*b", "", "t\x01"] {
            c.exchange(format!("{cmd} {bad}\r\n").as_bytes(), b"BAD_FORMAT\r\n");
        }
    }
    // A dash is fine anywhere but first.
    c.exchange(b"use a-\r\n", b"USING a-\r\n");
    c.exchange(b"list-tube-used\r\n", b"USING a-\r\n");
}

#[test]
fn stats_tube_of_unknown_tube() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(b"stats-tube nope\r\n", b"NOT_FOUND\r\n");
    c.exchange(b"pause-tube nope 1\r\n", b"NOT_FOUND\r\n");
}

#[test]
fn pause_tube_holds_jobs_until_the_pause_ends() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.put(b"x");
    let start = Instant::now();
    c.exchange(b"pause-tube default 1\r\n", b"PAUSED\r\n");
    assert_eq!(c.tube_stat("default", "pause"), "1");
    assert_eq!(c.tube_stat("default", "cmd-pause-tube"), "1");
    // Ready, but not handed out while paused.
    c.exchange(b"peek-ready\r\n", b"FOUND 1 1\r\nx\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    c.send(b"reserve-with-timeout 3\r\n");
    c.expect_reserved(b"x");
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(990),
        "reserved after {waited:?}"
    );
    assert_eq!(c.tube_stat("default", "pause"), "0");
    assert_eq!(c.tube_stat("default", "pause-time-left"), "0");
}

#[test]
fn pause_only_affects_that_tube() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(b"use p\r\n", b"USING p\r\n");
    c.put_with(0, 0, 60, b"paused");
    c.exchange(b"use q\r\n", b"USING q\r\n");
    c.put_with(5, 0, 60, b"free");
    c.exchange(b"watch p\r\n", b"WATCHING 2\r\n");
    c.exchange(b"watch q\r\n", b"WATCHING 3\r\n");
    c.exchange(b"pause-tube p 100\r\n", b"PAUSED\r\n");
    // The better-priority job in p is skipped while p is paused.
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 2 4\r\nfree\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    assert_eq!(c.tube_stat("p", "pause"), "100");
    let left: u64 = c.tube_stat("p", "pause-time-left").parse().unwrap();
    assert!((98..=100).contains(&left), "pause-time-left {left}");
    // Pausing again replaces the pause.
    c.exchange(b"pause-tube p 0\r\n", b"PAUSED\r\n");
    c.send(b"reserve-with-timeout 2\r\n");
    c.expect_reserved(b"paused");
    assert_eq!(c.tube_stat("p", "cmd-pause-tube"), "2");
}
