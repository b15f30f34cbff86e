//! Documented sprout extensions and fixes of beanstalkd bugs; every test is
//! skipped when `SPROUT_TEST_BINARY` points at another server.
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

mod common;

use std::time::{Duration, Instant};

use common::{assert_between, sprout_only, TestServer};

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
