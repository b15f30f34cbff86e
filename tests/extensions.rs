//! Documented sprout extensions and fixes of beanstalkd bugs, as byte
//! transcripts.
//!
//! The first part is sprout's own; its tests skip when `SPROUT_TEST_BINARY`
//! points at another server:
//!
//! - Fractional seconds for the delays of `put`, `release`, `pause-tube`
//!   and the timeout of `reserve-with-timeout`.
//! - Timers keep sub-second precision (beanstalkd's integer seconds can make
//!   a 1 s delay last up to ~2 s).
//! - A reserved job goes back to ready at its TTR even when the client
//!   holding it stays silent.
//! - A stray `\r` inside a line is `BAD_FORMAT` (beanstalkd waits for more).
//! - A CRLF straddling the 224-byte line limit is `BAD_FORMAT` without
//!   swallowing the next command.
//!
//! The second part is tuber's dialect (`tuberq/tuber`, `docs/protocol.md`):
//! `put` tags, the batch commands, `drain` and `undrain`; and what tuber
//! added after 0.5.6 (`flush-buried`, `reserve-batch`'s timeout), sprout
//! only here since the differential run is against 0.5.6. Those tests also run against tuber
//! itself, `SPROUT_TEST_BINARY=benches/tuber-wrap.sh TUBER=/path/to/tuber
//! SPROUT_TEST_TUBER=1`, so the bytes are tuber's; against any other server
//! (beanstalkd has none of it) they skip. Where sprout differs from tuber
//! on purpose, the test runs on sprout only and says why (the README's
//! "Extensions" section lists the differences).

mod common;

use std::time::{Duration, Instant};

use common::{assert_between, foreign_binary, sprout_only, TempDir, TestServer};

const MS: fn(u64) -> Duration = Duration::from_millis;

#[test]
fn fractional_put_delay() {
    if !sprout_only("fractional_put_delay") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    let start = Instant::now();
    c.exchange(b"put 0 0.25 10 1\r\nx\r\n", b"INSERTED 1\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    c.send(b"reserve-with-timeout 2\r\n");
    c.expect(b"RESERVED 1 1\r\nx\r\n");
    assert_between(start.elapsed(), MS(250), MS(900));
}

#[test]
fn fractional_release_delay() {
    if !sprout_only("fractional_release_delay") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.put(b"x");
    c.exchange(b"reserve\r\n", b"RESERVED 1 1\r\nx\r\n");
    let start = Instant::now();
    c.exchange(b"release 1 0 0.2\r\n", b"RELEASED\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    c.send(b"reserve-with-timeout 2\r\n");
    c.expect(b"RESERVED 1 1\r\nx\r\n");
    assert_between(start.elapsed(), MS(200), MS(900));
}

#[test]
fn fractional_reserve_timeout() {
    if !sprout_only("fractional_reserve_timeout") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    let start = Instant::now();
    c.exchange(b"reserve-with-timeout 0.2\r\n", b"TIMED_OUT\r\n");
    assert_between(start.elapsed(), MS(200), MS(900));
    let start = Instant::now();
    c.exchange(b"reserve-with-timeout 1.25e-1\r\n", b"TIMED_OUT\r\n");
    assert_between(start.elapsed(), MS(125), MS(900));
}

#[test]
fn fractional_pause() {
    if !sprout_only("fractional_pause") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.put(b"x");
    let start = Instant::now();
    c.exchange(b"pause-tube default 0.3\r\n", b"PAUSED\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    c.send(b"reserve-with-timeout 2\r\n");
    c.expect(b"RESERVED 1 1\r\nx\r\n");
    assert_between(start.elapsed(), MS(300), MS(900));
}

#[test]
fn one_second_delay_is_precise() {
    if !sprout_only("one_second_delay_is_precise") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    let start = Instant::now();
    c.put_with(0, 1, 60, b"x");
    c.send(b"reserve-with-timeout 3\r\n");
    c.expect(b"RESERVED 1 1\r\nx\r\n");
    assert_between(start.elapsed(), MS(990), MS(1300));
}

#[test]
fn ttr_expires_while_the_owner_stays_silent() {
    if !sprout_only("ttr_expires_while_the_owner_stays_silent") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut owner = s.connect();
    let mut watcher = s.connect();
    owner.put_with(0, 0, 1, b"x");
    let start = Instant::now();
    owner.exchange(b"reserve\r\n", b"RESERVED 1 1\r\nx\r\n");
    // Nobody waits for the job: it must still become ready at its TTR.
    loop {
        watcher.send(b"peek-ready\r\n");
        if watcher.expect_line() != "NOT_FOUND" {
            watcher.expect(b"x\r\n");
            break;
        }
        assert!(
            start.elapsed() < MS(1300),
            "job still reserved after {:?}",
            start.elapsed()
        );
        std::thread::sleep(MS(10));
    }
    assert_between(start.elapsed(), MS(990), MS(1300));
    assert_eq!(watcher.job_stat(1, "state"), "ready");
    assert_eq!(watcher.job_stat(1, "timeouts"), "1");
    // The owner no longer holds it.
    owner.exchange(b"touch 1\r\n", b"NOT_FOUND\r\n");
    owner.exchange(b"release 1 0 0\r\n", b"NOT_FOUND\r\n");
}

#[test]
fn stray_cr_inside_a_line_is_bad_format() {
    if !sprout_only("stray_cr_inside_a_line_is_bad_format") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(
        b"use foo\rbar\r\nlist-tube-used\r\n",
        b"BAD_FORMAT\r\nUSING default\r\n",
    );
    c.exchange(
        b"list-tube-used\r\r\nlist-tube-used\r\n",
        b"BAD_FORMAT\r\nUSING default\r\n",
    );
}

#[test]
fn crlf_straddling_the_line_limit_does_not_swallow_the_next_command() {
    if !sprout_only("crlf_straddling_the_line_limit_does_not_swallow_the_next_command") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    // 223 bytes then CRLF: the '\r' is byte 224, the '\n' byte 225.
    let mut line = b"peek".to_vec();
    line.resize(222, b' ');
    line.push(b'1');
    line.extend_from_slice(b"\r\nlist-tube-used\r\n");
    c.exchange(&line, b"BAD_FORMAT\r\nUSING default\r\n");
}

// tuber's dialect.

/// Whether the server under test speaks tuber's dialect.
fn dialect(test: &str) -> bool {
    if foreign_binary() && std::env::var_os("SPROUT_TEST_TUBER").is_none() {
        eprintln!("skipping {test}: tuber's dialect (set SPROUT_TEST_TUBER=1 for tuber)");
        return false;
    }
    true
}

fn put(tags: &str, body: &str) -> Vec<u8> {
    format!("put 0 0 30 {} {tags}\r\n{body}\r\n", body.len()).into_bytes()
}

#[test]
fn idp_put_answers_the_original_job_in_every_state() {
    if !dialect("idp_put_answers_the_original_job_in_every_state") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(&put("idp:k", "a"), b"INSERTED 1\r\n");
    c.exchange(&put("idp:k", "b"), b"INSERTED 1 READY\r\n");
    // A deduplicated put uses up no id.
    c.exchange(&put("idp:other", "c"), b"INSERTED 2\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 1 1\r\na\r\n");
    c.exchange(&put("idp:k", "d"), b"INSERTED 1 RESERVED\r\n");
    c.exchange(b"bury 1 0\r\n", b"BURIED\r\n");
    c.exchange(&put("idp:k", "e"), b"INSERTED 1 BURIED\r\n");
    c.exchange(b"kick-job 1\r\n", b"KICKED\r\n");
    c.exchange(&put("idp:k", "f"), b"INSERTED 1 READY\r\n");
    c.exchange(b"peek 1\r\n", b"FOUND 1 1\r\na\r\n");
    c.exchange(b"delete 1\r\n", b"DELETED\r\n");
    // Without a TTL the key is free once its job is deleted.
    c.exchange(&put("idp:k", "g"), b"INSERTED 3\r\n");
    c.exchange(b"put 0 60 30 1 idp:later\r\nh\r\n", b"INSERTED 4\r\n");
    c.exchange(&put("idp:later", "i"), b"INSERTED 4 DELAYED\r\n");
    // An untagged put is never deduplicated.
    c.exchange(b"put 0 0 30 1\r\na\r\n", b"INSERTED 5\r\n");
}

#[test]
fn idp_keys_belong_to_a_tube() {
    if !dialect("idp_keys_belong_to_a_tube") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(&put("idp:k", "a"), b"INSERTED 1\r\n");
    c.exchange(b"use other\r\n", b"USING other\r\n");
    c.exchange(&put("idp:k", "b"), b"INSERTED 2\r\n");
    c.exchange(&put("idp:k", "c"), b"INSERTED 2 READY\r\n");
    c.exchange(b"use default\r\n", b"USING default\r\n");
    c.exchange(&put("idp:k", "d"), b"INSERTED 1 READY\r\n");
}

#[test]
fn idp_put_raises_the_priority_but_never_lowers_it() {
    if !dialect("idp_put_raises_the_priority_but_never_lowers_it") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(b"put 100 0 30 1 idp:k\r\na\r\n", b"INSERTED 1\r\n");
    c.exchange(b"put 60 0 30 1\r\nb\r\n", b"INSERTED 2\r\n");
    c.exchange(b"put 50 0 30 1 idp:k\r\nc\r\n", b"INSERTED 1 READY 50\r\n");
    c.exchange(b"put 200 0 30 1 idp:k\r\nd\r\n", b"INSERTED 1 READY\r\n");
    c.exchange(b"put 50 0 30 1 idp:k\r\nd\r\n", b"INSERTED 1 READY\r\n");
    // Job 1 now comes before job 2.
    c.exchange(b"peek-ready\r\n", b"FOUND 1 1\r\na\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 1 1\r\na\r\n");
    c.exchange(b"put 7 0 30 1 idp:k\r\nc\r\n", b"INSERTED 1 RESERVED 7\r\n");
}

#[test]
fn idp_ttl_keeps_deduplicating_after_the_delete() {
    if !dialect("idp_ttl_keeps_deduplicating_after_the_delete") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(&put("idp:k:1", "a"), b"INSERTED 1\r\n");
    c.exchange(&put("idp:k:1", "b"), b"INSERTED 1 READY\r\n");
    c.exchange(b"delete 1\r\n", b"DELETED\r\n");
    c.exchange(&put("idp:k:1", "c"), b"INSERTED 1 DELETED\r\n");
    c.exchange(&put("idp:k", "c"), b"INSERTED 1 DELETED\r\n");
    std::thread::sleep(Duration::from_millis(2100));
    c.exchange(&put("idp:k:1", "d"), b"INSERTED 2\r\n");
    c.exchange(b"peek 2\r\n", b"FOUND 2 1\r\nd\r\n");
}

#[test]
fn malformed_tags_are_bad_format_and_the_body_is_read_as_a_command() {
    if !dialect("malformed_tags_are_bad_format_and_the_body_is_read_as_a_command") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    for tags in [
        "idp:",
        "idp:a:b",
        "idp:a:-1",
        "idp:-a",
        "idp:a:1:2",
        "con:a:0",
        "grp:a:1",
        "foo:bar",
        "IDP:a",
        "idp:a x",
    ] {
        let line = format!("put 0 0 30 14 {tags}\r\nlist-tube-used\r\n");
        c.exchange(line.as_bytes(), b"BAD_FORMAT\r\nUSING default\r\n");
    }
    c.exchange(&put("idp:ok", "x"), b"INSERTED 1\r\n");
}

#[test]
fn reserve_batch_takes_what_is_ready_without_waiting() {
    if !dialect("reserve_batch_takes_what_is_ready_without_waiting") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(b"put 5 0 30 1\r\na\r\n", b"INSERTED 1\r\n");
    c.exchange(b"put 1 0 30 2\r\nbb\r\n", b"INSERTED 2\r\n");
    c.exchange(b"put 9 0 30 1\r\nc\r\n", b"INSERTED 3\r\n");
    c.exchange(
        b"reserve-batch 2\r\n",
        b"RESERVED_BATCH 2\r\nRESERVED 2 2\r\nbb\r\nRESERVED 1 1\r\na\r\n",
    );
    c.exchange(
        b"reserve-batch 5\r\n",
        b"RESERVED_BATCH 1\r\nRESERVED 3 1\r\nc\r\n",
    );
    c.exchange(b"reserve-batch 1000\r\n", b"RESERVED_BATCH 0\r\n");
    // They are reserved, by this connection.
    c.exchange(b"release 1 0 0\r\n", b"RELEASED\r\n");
    c.exchange(b"delete 2\r\n", b"DELETED\r\n");
    for bad in [
        &b"reserve-batch 0\r\n"[..],
        b"reserve-batch 1001\r\n",
        b"reserve-batch x\r\n",
        b"reserve-batch -1\r\n",
    ] {
        c.exchange(bad, b"BAD_FORMAT\r\n");
    }
}

#[test]
fn delete_batch_counts_deleted_and_not_found() {
    if !dialect("delete_batch_counts_deleted_and_not_found") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut owner = s.connect();
    let mut c = s.connect();
    for id in 1..=4 {
        c.exchange(
            b"put 0 0 30 1\r\nx\r\n",
            format!("INSERTED {id}\r\n").as_bytes(),
        );
    }
    owner.exchange(b"reserve-job 1\r\n", b"RESERVED 1 1\r\nx\r\n");
    // 1 is someone else's, 99 does not exist, 2 comes twice.
    c.exchange(b"delete-batch 1 2 3 99 2\r\n", b"DELETED_BATCH 2 3\r\n");
    c.exchange(b"peek 2\r\n", b"NOT_FOUND\r\n");
    owner.exchange(b"delete-batch 1\r\n", b"DELETED_BATCH 1 0\r\n");
    c.exchange(b"delete-batch x\r\n", b"BAD_FORMAT\r\n");
    c.exchange(b"delete-batch 4 x\r\n", b"BAD_FORMAT\r\n");
    c.exchange(b"peek 4\r\n", b"FOUND 4 1\r\nx\r\n");
}

#[test]
fn flush_tube_deletes_every_job_of_the_tube_in_every_state() {
    if !dialect("flush_tube_deletes_every_job_of_the_tube_in_every_state") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut worker = s.connect();
    let mut c = s.connect();
    c.exchange(b"use t\r\n", b"USING t\r\n");
    worker.exchange(b"watch t\r\n", b"WATCHING 2\r\n");
    worker.exchange(b"ignore default\r\n", b"WATCHING 1\r\n");
    c.exchange(b"put 0 0 30 1\r\na\r\n", b"INSERTED 1\r\n");
    worker.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 1 1\r\na\r\n");
    c.exchange(b"put 0 0 30 1\r\nb\r\n", b"INSERTED 2\r\n");
    worker.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 2 1\r\nb\r\n");
    worker.exchange(b"bury 2 0\r\n", b"BURIED\r\n");
    c.exchange(b"put 0 100 30 1\r\nc\r\n", b"INSERTED 3\r\n");
    c.exchange(b"put 0 0 30 1\r\nd\r\n", b"INSERTED 4\r\n");
    c.exchange(b"use default\r\n", b"USING default\r\n");
    c.exchange(b"put 0 0 30 1\r\ne\r\n", b"INSERTED 5\r\n");
    c.exchange(b"flush-tube t\r\n", b"FLUSHED 4\r\n");
    for id in 1..=4 {
        c.exchange(format!("peek {id}\r\n").as_bytes(), b"NOT_FOUND\r\n");
    }
    c.exchange(b"peek 5\r\n", b"FOUND 5 1\r\ne\r\n");
    worker.exchange(b"delete 1\r\n", b"NOT_FOUND\r\n");
    worker.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    c.exchange(b"flush-tube t\r\n", b"FLUSHED 0\r\n");
    c.exchange(b"flush-tube nosuchtube\r\n", b"NOT_FOUND\r\n");
    c.exchange(b"flush-tube -x\r\n", b"BAD_FORMAT\r\n");
}

#[test]
fn flush_tube_ends_idp_cooldowns() {
    if !dialect("flush_tube_ends_idp_cooldowns") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(&put("idp:a:100", "a"), b"INSERTED 1\r\n");
    c.exchange(&put("idp:b:100", "b"), b"INSERTED 2\r\n");
    c.exchange(b"delete 2\r\n", b"DELETED\r\n");
    c.exchange(b"flush-tube default\r\n", b"FLUSHED 1\r\n");
    c.exchange(&put("idp:a:100", "c"), b"INSERTED 3\r\n");
    c.exchange(&put("idp:b:100", "d"), b"INSERTED 4\r\n");
}

#[test]
fn peek_reserved_shows_the_lowest_reserved_id_of_the_used_tube() {
    if !dialect("peek_reserved_shows_the_lowest_reserved_id_of_the_used_tube") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut a = s.connect();
    let mut b = s.connect();
    let mut c = s.connect();
    c.exchange(b"peek-reserved\r\n", b"NOT_FOUND\r\n");
    c.exchange(b"put 9 0 30 1\r\nx\r\n", b"INSERTED 1\r\n");
    c.exchange(b"put 1 0 30 1\r\ny\r\n", b"INSERTED 2\r\n");
    a.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 2 1\r\ny\r\n");
    c.exchange(b"peek-reserved\r\n", b"FOUND 2 1\r\ny\r\n");
    b.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 1 1\r\nx\r\n");
    c.exchange(b"peek-reserved\r\n", b"FOUND 1 1\r\nx\r\n");
    c.exchange(b"use other\r\n", b"USING other\r\n");
    c.exchange(b"peek-reserved\r\n", b"NOT_FOUND\r\n");
}

/// tuber reads lines up to 21 KB; sprout keeps beanstalkd's 224 bytes
/// except for `delete-batch`, whose 1000 ids need that much.
#[test]
fn delete_batch_takes_a_thousand_ids() {
    if !dialect("delete_batch_takes_a_thousand_ids") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    for id in 1..=3 {
        c.exchange(
            b"put 0 0 30 1\r\nx\r\n",
            format!("INSERTED {id}\r\n").as_bytes(),
        );
    }
    let ids: String = (1..=1000u64)
        .map(|i| format!(" {}", i * 1_000_000_007))
        .collect();
    let line = format!("delete-batch 1 2 3{ids}\r\n");
    // 1003 ids: too many.
    c.exchange(line.as_bytes(), b"BAD_FORMAT\r\n");
    let ids: String = (4..=1000u64)
        .map(|i| format!(" {}", i * 1_000_000_007))
        .collect();
    let line = format!("delete-batch 1 2 3{ids}\r\n");
    c.exchange(line.as_bytes(), b"DELETED_BATCH 3 997\r\n");
}

/// A flush of more jobs than one step of sprout's takes (1000) counts
/// them all, and what was sent after it comes after its answer.
#[test]
fn a_flush_of_many_steps_counts_every_job() {
    if !dialect("a_flush_of_many_steps_counts_every_job") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    let mut other = s.connect();
    c.exchange(b"use t\r\n", b"USING t\r\n");
    let mut puts = Vec::new();
    for _ in 0..5000 {
        puts.extend_from_slice(b"put 0 0 30 1\r\nx\r\n");
    }
    c.send(&puts);
    for id in 1..=5000 {
        c.expect(format!("INSERTED {id}\r\n").as_bytes());
    }
    c.send(b"flush-tube t\r\nlist-tube-used\r\n");
    other.exchange(b"list-tube-used\r\n", b"USING default\r\n");
    c.expect(b"FLUSHED 5000\r\nUSING t\r\n");
    c.exchange(b"peek-ready\r\n", b"NOT_FOUND\r\n");
}

/// sprout only (tuber's WAL has no kill -9 test harness here): after a
/// kill -9 no acknowledged idempotent put is duplicated, and a key's
/// cooldown survives.
#[test]
fn idp_keys_and_cooldowns_survive_kill_9() {
    if !sprout_only("idp_keys_and_cooldowns_survive_kill_9") {
        return;
    }
    let dir = TempDir::new();
    let mut s = TestServer::start_with_store(dir.path(), &[]);
    let mut c = s.connect();
    c.exchange(&put("idp:k", "a"), b"INSERTED 1\r\n");
    c.exchange(&put("idp:cool:3600", "b"), b"INSERTED 2\r\n");
    c.exchange(b"delete 2\r\n", b"DELETED\r\n");
    c.exchange(b"put 0 0 30 1 idp:k\r\nz\r\n", b"INSERTED 1 READY\r\n");
    // Many keys in flight when the server dies.
    let mut puts = Vec::new();
    for key in 0..2000 {
        puts.extend_from_slice(&put(&format!("idp:n{key}"), "x"));
    }
    c.send(&puts);
    let mut acked = Vec::new();
    for _ in 0..500 {
        let line = c.expect_line();
        let id: u64 = line.strip_prefix("INSERTED ").unwrap().parse().unwrap();
        acked.push(id);
    }
    s.kill9();
    let s = TestServer::start_with_store(dir.path(), &[]);
    let mut c = s.connect();
    c.exchange(&put("idp:k", "c"), b"INSERTED 1 READY\r\n");
    c.exchange(&put("idp:cool:3600", "d"), b"INSERTED 2 DELETED\r\n");
    for (key, id) in acked.iter().enumerate() {
        let reply = format!("INSERTED {id} READY\r\n");
        c.exchange(&put(&format!("idp:n{key}"), "y"), reply.as_bytes());
    }
    // The rest: each key once, whether its first put survived or not.
    for key in acked.len()..2000 {
        c.send(&put(&format!("idp:n{key}"), "y"));
        let line = c.expect_line();
        assert!(line.starts_with("INSERTED "), "{line}");
    }
    let ready: u64 = c.stat("current-jobs-ready").parse().unwrap();
    assert_eq!(ready, 2001, "one job per key, and job 1");
}

/// `--max-jobs-size`: a put that would hold more body bytes than the
/// budget answers OUT_OF_MEMORY; deletes make room again; `stats` counts.
#[test]
fn max_jobs_size_refuses_puts_over_the_budget_until_the_queue_drains() {
    if !dialect("max_jobs_size_refuses_puts_over_the_budget_until_the_queue_drains") {
        return;
    }
    // tuber also counts a fixed overhead per job; 10 bytes of bodies fit
    // in sprout's budget of 10 but not in tuber's, so sprout only.
    if !sprout_only("max_jobs_size_refuses_puts_over_the_budget_until_the_queue_drains") {
        return;
    }
    let s = TestServer::start(&["--max-jobs-size", "10"]);
    let mut c = s.connect();
    c.exchange(b"put 0 0 30 6\r\naaaaaa\r\n", b"INSERTED 1\r\n");
    c.exchange(b"put 0 0 30 5\r\nbbbbb\r\n", b"OUT_OF_MEMORY\r\n");
    c.exchange(b"put 0 0 30 4\r\ncccc\r\n", b"INSERTED 3\r\n");
    c.exchange(b"put 0 0 30 0\r\n\r\n", b"INSERTED 4\r\n");
    c.exchange(b"put 0 0 30 1 idp:k\r\nd\r\n", b"OUT_OF_MEMORY\r\n");
    // Work goes on at the limit.
    c.exchange(b"reserve\r\n", b"RESERVED 1 6\r\naaaaaa\r\n");
    c.exchange(b"release 1 0 0\r\n", b"RELEASED\r\n");
    assert_eq!(c.stat("current-jobs-size"), "10");
    assert_eq!(c.stat("max-jobs-size"), "10");
    assert_eq!(c.stat("total-puts-over-budget"), "2");
    c.exchange(b"delete 1\r\n", b"DELETED\r\n");
    c.exchange(b"put 0 0 30 5\r\nbbbbb\r\n", b"INSERTED 6\r\n");
    assert_eq!(c.stat("current-jobs-size"), "9");
}

#[test]
fn without_max_jobs_size_stats_has_beanstalkds_keys_only() {
    if !sprout_only("without_max_jobs_size_stats_has_beanstalkds_keys_only") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    let stats = c.stats_of("stats");
    assert!(stats
        .iter()
        .all(|(k, _)| k != "max-jobs-size" && k != "current-jobs-size"));
}

#[test]
fn con_key_allows_one_reservation_at_a_time_by_default() {
    if !dialect("con_key_allows_one_reservation_at_a_time_by_default") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut a = s.connect();
    let mut b = s.connect();
    let mut c = s.connect();
    c.exchange(&put("con:u", "1"), b"INSERTED 1\r\n");
    c.exchange(&put("con:u", "2"), b"INSERTED 2\r\n");
    c.exchange(b"put 0 0 30 1\r\n3\r\n", b"INSERTED 3\r\n");
    a.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 1 1\r\n1\r\n");
    // Job 2 is ready but held back: its key is taken.
    b.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 3 1\r\n3\r\n");
    b.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    b.exchange(b"reserve-job 2\r\n", b"NOT_FOUND\r\n");
    b.exchange(b"reserve-batch 10\r\n", b"RESERVED_BATCH 0\r\n");
    a.exchange(b"delete 1\r\n", b"DELETED\r\n");
    b.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 2 1\r\n2\r\n");
    // Burying frees the key.
    c.exchange(&put("con:u", "4"), b"INSERTED 4\r\n");
    a.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    b.exchange(b"bury 2 0\r\n", b"BURIED\r\n");
    a.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 4 1\r\n4\r\n");
}

#[test]
fn con_key_with_a_limit_and_a_waiting_reserver() {
    if !dialect("con_key_with_a_limit_and_a_waiting_reserver") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut a = s.connect();
    let mut b = s.connect();
    let mut w = s.connect();
    let mut c = s.connect();
    for id in 1..=3 {
        let reply = format!("INSERTED {id}\r\n");
        c.exchange(&put("con:api:2", "x"), reply.as_bytes());
    }
    a.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 1 1\r\nx\r\n");
    b.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 2 1\r\nx\r\n");
    w.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    w.send(b"reserve-with-timeout 5\r\n");
    w.expect_silence(Duration::from_millis(100));
    // A release with a delay frees the slot; the waiter gets job 3.
    a.exchange(b"release 1 0 60\r\n", b"RELEASED\r\n");
    w.expect(b"RESERVED 3 1\r\nx\r\n");
}

/// sprout only (kill -9): a restart brings every job back ready, with no
/// key's limit exceeded.
#[test]
fn con_limits_hold_after_kill_9() {
    if !sprout_only("con_limits_hold_after_kill_9") {
        return;
    }
    let dir = TempDir::new();
    let mut s = TestServer::start_with_store(dir.path(), &[]);
    let mut c = s.connect();
    c.exchange(&put("con:k", "a"), b"INSERTED 1\r\n");
    c.exchange(&put("con:k", "b"), b"INSERTED 2\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 1 1\r\na\r\n");
    s.kill9();
    let s = TestServer::start_with_store(dir.path(), &[]);
    let mut a = s.connect();
    let mut b = s.connect();
    a.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 1 1\r\na\r\n");
    b.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    a.exchange(b"delete 1\r\n", b"DELETED\r\n");
    b.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 2 1\r\nb\r\n");
}

fn group_stats(pending: u32, buried: u32, waiting: u32) -> Vec<u8> {
    let doc = format!(
        "---\nname: \"imp\"\npending: {pending}\nburied: {buried}\ncomplete: {}\nwaiting-jobs: {waiting}\n",
        pending == 0
    );
    format!("OK {}\r\n{doc}\r\n", doc.len()).into_bytes()
}

#[test]
fn aft_job_is_held_until_every_job_of_its_group_is_deleted() {
    if !dialect("aft_job_is_held_until_every_job_of_its_group_is_deleted") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    let mut w = s.connect();
    c.exchange(b"stats-group imp\r\n", b"NOT_FOUND\r\n");
    c.exchange(&put("grp:imp", "r1"), b"INSERTED 1\r\n");
    c.exchange(&put("grp:imp", "r2"), b"INSERTED 2\r\n");
    c.exchange(&put("aft:imp", "sum"), b"INSERTED 3\r\n");
    c.exchange(b"stats-group imp\r\n", &group_stats(2, 0, 1));
    w.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 1 2\r\nr1\r\n");
    w.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 2 2\r\nr2\r\n");
    w.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    w.exchange(b"reserve-job 3\r\n", b"NOT_FOUND\r\n");
    w.exchange(b"bury 2 0\r\n", b"BURIED\r\n");
    w.exchange(b"delete 1\r\n", b"DELETED\r\n");
    // A buried member still holds the group back.
    c.exchange(b"stats-group imp\r\n", &group_stats(1, 1, 1));
    w.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    c.exchange(b"kick 10\r\n", b"KICKED 1\r\n");
    w.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 2 2\r\nr2\r\n");
    let mut waiter = s.connect();
    waiter.send(b"reserve-with-timeout 5\r\n");
    waiter.expect_silence(Duration::from_millis(100));
    c.exchange(b"stats-group imp\r\n", &group_stats(1, 0, 1));
    // The last member's delete hands the held job to the waiter.
    w.exchange(b"delete 2\r\n", b"DELETED\r\n");
    waiter.expect(b"RESERVED 3 3\r\nsum\r\n");
    c.exchange(b"stats-group imp\r\n", b"NOT_FOUND\r\n");
}

#[test]
fn groups_chain_and_an_unknown_group_holds_nothing() {
    if !dialect("groups_chain_and_an_unknown_group_holds_nothing") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(&put("aft:nobody", "free"), b"INSERTED 1\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 1 4\r\nfree\r\n");
    c.exchange(b"delete 1\r\n", b"DELETED\r\n");
    c.exchange(&put("grp:extract", "e"), b"INSERTED 2\r\n");
    c.exchange(&put("aft:extract grp:transform", "t"), b"INSERTED 3\r\n");
    c.exchange(&put("aft:transform", "l"), b"INSERTED 4\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 2 1\r\ne\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    c.exchange(b"delete 2\r\n", b"DELETED\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 3 1\r\nt\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    c.exchange(b"delete 3\r\n", b"DELETED\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 4 1\r\nl\r\n");
}

/// sprout only (kill -9): a held `aft:` job stays held after a restart
/// while its group has members, and is released once it has none, also
/// when the group emptied before the crash.
#[test]
fn aft_holds_survive_kill_9() {
    if !sprout_only("aft_holds_survive_kill_9") {
        return;
    }
    let dir = TempDir::new();
    let mut s = TestServer::start_with_store(dir.path(), &[]);
    let mut c = s.connect();
    c.exchange(&put("grp:g", "m1"), b"INSERTED 1\r\n");
    c.exchange(&put("grp:g", "m2"), b"INSERTED 2\r\n");
    c.exchange(&put("aft:g", "a"), b"INSERTED 3\r\n");
    c.exchange(&put("grp:h", "m3"), b"INSERTED 4\r\n");
    c.exchange(&put("aft:h", "b"), b"INSERTED 5\r\n");
    c.exchange(b"delete 4\r\n", b"DELETED\r\n");
    c.exchange(b"delete 1\r\n", b"DELETED\r\n");
    s.kill9();
    let s = TestServer::start_with_store(dir.path(), &[]);
    let mut c = s.connect();
    // Job 5's group emptied before the crash; job 3's still has job 2.
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 2 2\r\nm2\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 5 1\r\nb\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    c.exchange(b"delete 2\r\n", b"DELETED\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 3 1\r\na\r\n");
}

/// sprout has no `reserve-mode` and no weighted `watch` (README
/// "Extensions": beanstalkd's cross-tube priority order is kept): both
/// are what beanstalkd answers, so this runs on beanstalkd too, not on
/// tuber.
#[test]
fn no_reserve_mode_or_weighted_watch() {
    if std::env::var_os("SPROUT_TEST_TUBER").is_some() {
        eprintln!("skipping no_reserve_mode_or_weighted_watch: tuber has both");
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    // Found by prefix, as beanstalkd finds commands: `reserve` with
    // trailing text.
    c.exchange(b"reserve-mode weighted\r\n", b"BAD_FORMAT\r\n");
    c.exchange(b"reserve-mode fifo\r\n", b"BAD_FORMAT\r\n");
    c.exchange(b"watch t 5\r\n", b"BAD_FORMAT\r\n");
    c.exchange(b"list-tubes-watched\r\n", b"OK 14\r\n---\n- default\n\r\n");
}

/// sprout only (tuber lists the tag keys, empty, for every job, and adds
/// `time-reserved`): a tagged job's `stats-job` ends with its tags, an
/// untagged one's is beanstalkd's document.
#[test]
fn stats_job_shows_the_tags() {
    if !sprout_only("stats_job_shows_the_tags") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(b"put 0 0 30 1\r\nx\r\n", b"INSERTED 1\r\n");
    c.exchange(
        b"put 0 0 30 1 idp:k:9 grp:g con:c:2\r\nx\r\n",
        b"INSERTED 2\r\n",
    );
    let plain = c.ok_body(b"stats-job 1\r\n");
    assert!(plain.ends_with("kicks: 0\n"), "{plain}");
    let tagged = c.ok_body(b"stats-job 2\r\n");
    assert!(
        tagged.ends_with(
            "kicks: 0\nidempotency-key: k\nidempotency-ttl: 9\ngroup: g\nafter-group: \n\
             concurrency-key: c\nconcurrency-limit: 2\n"
        ),
        "{tagged}"
    );
}

/// Issue 32: an `aft:` job put with a delay is held, not ready, when its
/// delay ends while its group has members; a release of the group makes a
/// held job ready, and leaves a job whose delay has not ended delayed.
#[test]
fn a_delayed_aft_job_is_held_when_its_delay_ends() {
    if !dialect("a_delayed_aft_job_is_held_when_its_delay_ends") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    let mut w = s.connect();
    c.exchange(&put("grp:imp", "r1"), b"INSERTED 1\r\n");
    c.exchange(b"put 0 1 30 3 aft:imp\r\nsum\r\n", b"INSERTED 2\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 1 2\r\nr1\r\n");
    // The delay ends a second later; the job is held, not handed over.
    w.send(b"reserve-with-timeout 5\r\n");
    w.expect_silence(MS(1500));
    c.exchange(b"stats-group imp\r\n", &group_stats(1, 0, 1));
    c.exchange(b"delete 1\r\n", b"DELETED\r\n");
    w.expect(b"RESERVED 2 3\r\nsum\r\n");
    // Released while its delay runs: it stays delayed until then.
    c.exchange(&put("grp:imp", "r3"), b"INSERTED 3\r\n");
    c.exchange(b"put 0 60 30 1 aft:imp\r\nd\r\n", b"INSERTED 4\r\n");
    c.exchange(b"delete 3\r\n", b"DELETED\r\n");
    c.exchange(b"peek-delayed\r\n", b"FOUND 4 1\r\nd\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
}

/// sprout only (issue 32; tuber 0.5.6 kicks both, against its own docs):
/// `kick` passes over a held `aft:` job and over a delayed one whose group
/// has members, counting only the jobs it moved; `kick-job` answers
/// NOT_FOUND for both, as `reserve-job` does.
#[test]
fn kicks_leave_an_aft_job_whose_group_has_members() {
    if !sprout_only("kicks_leave_an_aft_job_whose_group_has_members") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(&put("grp:g", "m"), b"INSERTED 1\r\n");
    c.exchange(b"put 0 60 30 1 aft:g\r\nd\r\n", b"INSERTED 2\r\n");
    c.exchange(&put("aft:g", "h"), b"INSERTED 3\r\n");
    c.exchange(b"put 0 60 30 1\r\nx\r\n", b"INSERTED 4\r\n");
    c.exchange(b"kick 10\r\n", b"KICKED 1\r\n");
    c.exchange(b"kick 10\r\n", b"KICKED 0\r\n");
    c.exchange(b"kick-job 2\r\n", b"NOT_FOUND\r\n");
    c.exchange(b"kick-job 3\r\n", b"NOT_FOUND\r\n");
    c.exchange(b"reserve-job 3\r\n", b"NOT_FOUND\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 1 1\r\nm\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 4 1\r\nx\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    // The group's release: the held job is ready, the delayed one kickable.
    c.exchange(b"delete 1\r\n", b"DELETED\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 3 1\r\nh\r\n");
    c.exchange(b"peek-delayed\r\n", b"FOUND 2 1\r\nd\r\n");
    c.exchange(b"kick-job 2\r\n", b"KICKED\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 2 1\r\nd\r\n");
}

/// sprout only (kill -9): a delayed `aft:` job held when its delay ended
/// stays held after a restart, and one whose delay ends while the server
/// is down comes back held too; each is ready once its group empties.
#[test]
fn delayed_aft_holds_survive_kill_9() {
    if !sprout_only("delayed_aft_holds_survive_kill_9") {
        return;
    }
    let dir = TempDir::new();
    let mut s = TestServer::start_with_store(dir.path(), &[]);
    let mut c = s.connect();
    c.exchange(&put("grp:g", "m1"), b"INSERTED 1\r\n");
    c.exchange(b"put 0 0.2 30 1 aft:g\r\na\r\n", b"INSERTED 2\r\n");
    std::thread::sleep(MS(400));
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 1 2\r\nm1\r\n");
    c.exchange(b"release 1 0 0\r\n", b"RELEASED\r\n");
    c.exchange(&put("grp:h", "m2"), b"INSERTED 3\r\n");
    c.exchange(b"put 0 0.3 30 1 aft:h\r\nb\r\n", b"INSERTED 4\r\n");
    s.kill9();
    std::thread::sleep(MS(400));
    let s = TestServer::start_with_store(dir.path(), &[]);
    let mut c = s.connect();
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 1 2\r\nm1\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 3 2\r\nm2\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    c.exchange(b"kick 10\r\n", b"KICKED 0\r\n");
    c.exchange(b"delete 3\r\n", b"DELETED\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 4 1\r\nb\r\n");
    c.exchange(b"delete 1\r\n", b"DELETED\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 2 1\r\na\r\n");
}

/// Runs `sprout admin --http ADDR --token ops ARGS…`: (success, stdout +
/// stderr).
fn sprout_admin(addr: &str, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(common::binary())
        .args(["admin", "--http", addr, "--token", "ops-token"])
        .args(args)
        .output()
        .expect("sprout admin runs");
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text.into_owned())
}

/// `sprout hash-token` of `token`.
fn hash(token: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new(common::binary())
        .arg("hash-token")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sprout hash-token runs");
    let mut stdin = child.stdin.take().expect("piped");
    stdin.write_all(token.as_bytes()).expect("written");
    drop(stdin);
    let out = child.wait_with_output().expect("it ends");
    String::from_utf8(out.stdout)
        .expect("UTF-8")
        .trim()
        .to_owned()
}

/// A server under `--auth`: `ops` may do everything, `worker` may only
/// produce and consume.
fn start_with_policy(dir: &TempDir, extra: &[&str]) -> TestServer {
    let policy = format!(
        "[[principal]]\nname = \"ops\"\ntokens = [\"{}\"]\n\
         grants = [{{ tubes = [\"*\"], actions = [\"produce\", \"consume\", \"inspect\", \"admin\"] }}]\n\n\
         [[principal]]\nname = \"worker\"\ntokens = [\"{}\"]\n\
         grants = [{{ tubes = [\"*\"], actions = [\"produce\", \"consume\"] }}]\n",
        hash("ops-token"),
        hash("worker-token")
    );
    let file = dir.path().join("policy.toml");
    std::fs::write(&file, policy).expect("policy written");
    let mut args = vec!["--auth", file.to_str().expect("UTF-8")];
    args.extend_from_slice(extra);
    TestServer::start(&args)
}

/// sprout only (issue 32): the admin API's kick leaves a held job too;
/// its release of the hold (`sprout admin release-hold`) is the override,
/// in the audit trail like every change through the port.
#[test]
fn an_admin_releases_a_hold_and_the_audit_trail_says_so() {
    if !sprout_only("an_admin_releases_a_hold_and_the_audit_trail_says_so") {
        return;
    }
    let dir = TempDir::new();
    let addr = format!("127.0.0.1:{}", TestServer::free_port());
    let s = start_with_policy(&dir, &["--http", &addr]);
    let mut c = s.connect();
    c.exchange(b"auth worker-token\r\n", b"AUTHENTICATED\r\n");
    c.exchange(&put("grp:g", "m"), b"INSERTED 1\r\n");
    c.exchange(&put("aft:g", "h"), b"INSERTED 2\r\n");
    c.exchange(&put("aft:g", "k"), b"INSERTED 3\r\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sprout_admin(&addr, &["server"]).0 && Instant::now() < deadline {
        std::thread::sleep(MS(50));
    }
    let (ok, out) = sprout_admin(&addr, &["kick-job", "2"]);
    assert!(!ok && out.contains("aft: group"), "{out}");
    let (ok, out) = sprout_admin(&addr, &["release-hold", "1"]);
    assert!(!ok && out.contains("not held"), "{out}");
    let (ok, out) = sprout_admin(&addr, &["release-hold", "2"]);
    assert!(ok, "{out}");
    c.exchange(b"reserve-job 2\r\n", b"RESERVED 2 1\r\nh\r\n");
    c.exchange(b"reserve-job 3\r\n", b"NOT_FOUND\r\n");
    let seen = |log: &str| log.contains("POST /api/jobs/2/release-hold");
    while !seen(&s.stderr()) && Instant::now() < deadline {
        std::thread::sleep(MS(20));
    }
    let log = s.stderr();
    let line = log
        .lines()
        .find(|l| seen(l))
        .unwrap_or_else(|| panic!("no audit line: {log}"));
    assert!(
        line.contains("sprout::audit") && line.contains("200"),
        "{line}"
    );
    assert!(line.contains("ops"), "{line}");
}

/// Under `--auth`, `drain` and `undrain` need `admin` on every tube.
#[test]
fn drain_is_for_admins() {
    if !sprout_only("drain_is_for_admins") {
        return;
    }
    let dir = TempDir::new();
    let s = start_with_policy(&dir, &[]);
    let mut worker = s.connect();
    worker.exchange(b"auth worker-token\r\n", b"AUTHENTICATED\r\n");
    worker.exchange(b"drain\r\n", b"FORBIDDEN\r\n");
    let mut ops = s.connect();
    ops.exchange(b"auth ops-token\r\n", b"AUTHENTICATED\r\n");
    ops.exchange(b"drain\r\n", b"DRAINING\r\n");
    worker.exchange(b"undrain\r\n", b"FORBIDDEN\r\n");
    worker.exchange(b"put 0 0 30 1\r\nx\r\n", b"DRAINING\r\n");
    ops.exchange(b"undrain\r\n", b"NOT_DRAINING\r\n");
}

/// tuber's `drain` and `undrain`: what SIGUSR1 does, and its undoing.
#[test]
fn drain_and_undrain() {
    if !dialect("drain_and_undrain") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(b"put 0 0 30 1\r\na\r\n", b"INSERTED 1\r\n");
    c.exchange(b"drain\r\n", b"DRAINING\r\n");
    c.exchange(b"drain\r\n", b"DRAINING\r\n");
    c.exchange(b"put 0 0 30 1\r\nb\r\n", b"DRAINING\r\n");
    // Workers still finish what is queued.
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 1 1\r\na\r\n");
    c.exchange(b"delete 1\r\n", b"DELETED\r\n");
    c.exchange(b"undrain\r\n", b"NOT_DRAINING\r\n");
    c.exchange(b"undrain\r\n", b"NOT_DRAINING\r\n");
    c.send(b"put 0 0 30 1\r\nc\r\n");
    assert!(c.expect_line().starts_with("INSERTED "));
}

/// tuber 0.9's `flush-buried <tube>` (sprout only here: tuber 0.5.6 has
/// none): the tube's buried jobs are deleted as `delete` deletes them (an
/// `idp:` TTL cools down, a group's last member releases its held jobs);
/// the others stay; a tube that does not exist flushes nothing (0.9.1).
#[test]
fn flush_buried_deletes_the_buried_jobs_only() {
    if !sprout_only("flush_buried_deletes_the_buried_jobs_only") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(b"use t\r\n", b"USING t\r\n");
    c.exchange(b"watch t\r\n", b"WATCHING 2\r\n");
    c.exchange(&put("idp:k:3600", "a"), b"INSERTED 1\r\n");
    c.exchange(&put("grp:g", "b"), b"INSERTED 2\r\n");
    c.exchange(&put("aft:g", "c"), b"INSERTED 3\r\n");
    c.exchange(b"put 0 0 30 1\r\nd\r\n", b"INSERTED 4\r\n");
    c.exchange(b"put 0 60 30 1\r\ne\r\n", b"INSERTED 5\r\n");
    for (id, body) in [(1, "a"), (2, "b")] {
        let reserved = format!("RESERVED {id} 1\r\n{body}\r\n");
        c.exchange(b"reserve-with-timeout 0\r\n", reserved.as_bytes());
        c.exchange(format!("bury {id} 0\r\n").as_bytes(), b"BURIED\r\n");
    }
    c.exchange(b"flush-buried t\r\n", b"FLUSHED 2\r\n");
    c.exchange(b"peek-buried\r\n", b"NOT_FOUND\r\n");
    c.exchange(&put("idp:k:3600", "z"), b"INSERTED 1 DELETED\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 3 1\r\nc\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 4 1\r\nd\r\n");
    c.exchange(b"peek-delayed\r\n", b"FOUND 5 1\r\ne\r\n");
    c.exchange(b"flush-buried t\r\n", b"FLUSHED 0\r\n");
    c.exchange(b"flush-buried nothing\r\n", b"FLUSHED 0\r\n");
    c.exchange(b"flush-buried\r\n", b"UNKNOWN_COMMAND\r\n");
}

/// tuber 0.8's `reserve-batch <n> <timeout>` (sprout only here: tuber
/// 0.5.6 reads no timeout): with nothing ready it waits, woken by a put, a
/// kick, a delay's end and a group's release, and then takes what is
/// ready; at the timeout it answers `RESERVED_BATCH 0`, never TIMED_OUT;
/// a timeout of 0 never waits.
#[test]
fn reserve_batch_with_a_timeout_waits_for_the_first_job() {
    if !sprout_only("reserve_batch_with_a_timeout_waits_for_the_first_job") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    let mut w = s.connect();
    w.exchange(b"reserve-batch 5 0\r\n", b"RESERVED_BATCH 0\r\n");
    let started = Instant::now();
    w.exchange(b"reserve-batch 5 0.2\r\n", b"RESERVED_BATCH 0\r\n");
    assert_between(started.elapsed(), MS(200), MS(1500));
    // A put.
    w.send(b"reserve-batch 5 10\r\n");
    w.expect_silence(MS(100));
    c.exchange(b"put 0 0 30 1\r\na\r\n", b"INSERTED 1\r\n");
    w.expect(b"RESERVED_BATCH 1\r\nRESERVED 1 1\r\na\r\n");
    // A kick.
    c.exchange(b"put 0 0 30 1\r\nb\r\n", b"INSERTED 2\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 2 1\r\nb\r\n");
    c.exchange(b"bury 2 0\r\n", b"BURIED\r\n");
    w.send(b"reserve-batch 5 10\r\n");
    w.expect_silence(MS(100));
    c.exchange(b"kick 1\r\n", b"KICKED 1\r\n");
    w.expect(b"RESERVED_BATCH 1\r\nRESERVED 2 1\r\nb\r\n");
    // A delay's end.
    c.exchange(b"put 0 0.3 30 1\r\nc\r\n", b"INSERTED 3\r\n");
    w.send(b"reserve-batch 5 10\r\n");
    w.expect_silence(MS(100));
    w.expect(b"RESERVED_BATCH 1\r\nRESERVED 3 1\r\nc\r\n");
    // A group's release.
    c.exchange(&put("grp:g", "m"), b"INSERTED 4\r\n");
    c.exchange(&put("aft:g", "d"), b"INSERTED 5\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 4 1\r\nm\r\n");
    w.send(b"reserve-batch 5 10\r\n");
    w.expect_silence(MS(100));
    c.exchange(b"delete 4\r\n", b"DELETED\r\n");
    w.expect(b"RESERVED_BATCH 1\r\nRESERVED 5 1\r\nd\r\n");
    // Once woken it takes every ready job, up to n.
    w.send(b"reserve-batch 2 10\r\n");
    w.expect_silence(MS(100));
    c.send(b"use t\r\nput 0 0 30 1\r\ne\r\n");
    c.expect(b"USING t\r\nINSERTED 6\r\n");
    // (Not in a tube it watches.)
    w.expect_silence(MS(100));
    c.exchange(b"use default\r\n", b"USING default\r\n");
    c.exchange(b"put 0 0 30 1\r\nf\r\n", b"INSERTED 7\r\n");
    w.expect(b"RESERVED_BATCH 1\r\nRESERVED 7 1\r\nf\r\n");
    c.exchange(b"watch t\r\n", b"WATCHING 2\r\n");
    c.exchange(b"put 0 0 30 1\r\ng\r\n", b"INSERTED 8\r\n");
    c.exchange(b"put 0 0 30 1\r\nh\r\n", b"INSERTED 9\r\n");
    c.exchange(
        b"reserve-batch 2 10\r\n",
        b"RESERVED_BATCH 2\r\nRESERVED 6 1\r\ne\r\nRESERVED 8 1\r\ng\r\n",
    );
    for bad in [
        &b"reserve-batch 5 \r\n"[..],
        b"reserve-batch 5 x\r\n",
        b"reserve-batch 5 1 1\r\n",
    ] {
        c.exchange(bad, b"BAD_FORMAT\r\n");
    }
}

/// The long poll, like `reserve-with-timeout`, answers DEADLINE_SOON when
/// a job the client holds is about to run out of time (tuber 0.8.1).
#[test]
fn reserve_batch_with_a_timeout_answers_deadline_soon() {
    if !sprout_only("reserve_batch_with_a_timeout_answers_deadline_soon") {
        return;
    }
    let s = TestServer::start(&[]);
    let mut w = s.connect();
    w.exchange(b"put 0 0 1 1\r\na\r\n", b"INSERTED 1\r\n");
    w.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 1 1\r\na\r\n");
    w.exchange(b"reserve-batch 5 10\r\n", b"DEADLINE_SOON\r\n");
    w.exchange(b"reserve-batch 5\r\n", b"RESERVED_BATCH 0\r\n");
}

/// sprout only (cluster mode, real nats-server): held `aft:` jobs, one
/// held when its delay ended, stay held on the new leader after a kill -9
/// of the old one, although their group's member was reserved and
/// released meanwhile (each a record the standbys apply by replacing the
/// job); the member's delete releases them there.
#[test]
fn aft_holds_survive_failover() {
    if !sprout_only("aft_holds_survive_failover") {
        return;
    }
    let Some(nats) = common::nats::NatsCluster::start(3, "aft_holds_survive_failover") else {
        return;
    };
    let mut sprouts = common::sprouts::Sprouts::start(&nats, "aft", 3);
    let old = sprouts.wait_leader(Duration::from_secs(30));
    let mut c = common::Client::tcp(sprouts.ports[old]);
    c.exchange(&put("grp:g", "m"), b"INSERTED 1\r\n");
    c.exchange(&put("aft:g", "a"), b"INSERTED 2\r\n");
    c.exchange(b"put 0 0.2 30 1 aft:g\r\nb\r\n", b"INSERTED 3\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 1 1\r\nm\r\n");
    c.exchange(b"release 1 0 0\r\n", b"RELEASED\r\n");
    std::thread::sleep(MS(500));
    c.exchange(b"stats-group g\r\n", &{
        let doc = "---\nname: \"g\"\npending: 1\nburied: 0\ncomplete: false\nwaiting-jobs: 2\n";
        format!("OK {}\r\n{doc}\r\n", doc.len()).into_bytes()
    });
    sprouts.kill9(old);
    let new = sprouts.wait_leader(Duration::from_secs(30));
    let mut c = common::Client::tcp(sprouts.ports[new]);
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 1 1\r\nm\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    c.exchange(b"kick 10\r\n", b"KICKED 0\r\n");
    c.exchange(b"delete 1\r\n", b"DELETED\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 2 1\r\na\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 3 1\r\nb\r\n");
}
