//! Reserving: blocking `reserve`, `reserve-with-timeout` (`TIMED_OUT`),
//! watching several tubes, longest-waiting client first, `DEADLINE_SOON`,
//! TTR expiry and `touch`, delayed jobs becoming ready, and clients that
//! leave while waiting.

mod common;

use std::time::{Duration, Instant};

use common::{assert_between, TestServer};

const MS: fn(u64) -> Duration = Duration::from_millis;

#[test]
fn blocking_reserve_is_answered_by_a_later_put() {
    let s = TestServer::start(&[]);
    let mut worker = s.connect();
    let mut producer = s.connect();
    worker.send(b"reserve\r\n");
    producer.wait_stat("current-waiting", "1");
    worker.expect_silence(MS(50));
    producer.exchange(b"put 0 0 60 3\r\nabc\r\n", b"INSERTED 1\r\n");
    worker.expect(b"RESERVED 1 3\r\nabc\r\n");
    producer.wait_stat("current-waiting", "0");
}

#[test]
fn reserve_with_timeout_zero_answers_at_once() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    let start = Instant::now();
    c.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    assert!(start.elapsed() < MS(500), "took {:?}", start.elapsed());
    c.put(b"x");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 1 1\r\nx\r\n");
}

#[test]
fn reserve_with_timeout_times_out_after_the_timeout() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    let start = Instant::now();
    c.send(b"reserve-with-timeout 1\r\n");
    c.expect(b"TIMED_OUT\r\n");
    assert_between(start.elapsed(), MS(950), MS(2500));
    // The connection is usable afterwards.
    c.exchange(b"list-tube-used\r\n", b"USING default\r\n");
}

#[test]
fn reserve_with_timeout_is_answered_by_a_later_put() {
    let s = TestServer::start(&[]);
    let mut worker = s.connect();
    let mut producer = s.connect();
    worker.send(b"reserve-with-timeout 10\r\n");
    producer.wait_stat("current-waiting", "1");
    let start = Instant::now();
    producer.put(b"late");
    worker.expect(b"RESERVED 1 4\r\nlate\r\n");
    assert!(start.elapsed() < MS(500));
}

#[test]
fn reserve_picks_best_priority_across_watched_tubes() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    for (tube, pri, body) in [
        ("a", 7, "a7"),
        ("b", 3, "b3"),
        ("c", 1, "c1"),
        ("a", 3, "a3"),
    ] {
        c.exchange(
            format!("use {tube}\r\n").as_bytes(),
            format!("USING {tube}\r\n").as_bytes(),
        );
        c.put_with(pri, 0, 60, body.as_bytes());
    }
    c.exchange(b"watch a\r\n", b"WATCHING 2\r\n");
    c.exchange(b"watch b\r\n", b"WATCHING 3\r\n");
    // c1 is in an unwatched tube; b3 and a3 tie on priority, b3 is older.
    c.exchange(b"reserve\r\n", b"RESERVED 2 2\r\nb3\r\n");
    c.exchange(b"reserve\r\n", b"RESERVED 4 2\r\na3\r\n");
    c.exchange(b"reserve\r\n", b"RESERVED 1 2\r\na7\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
}

#[test]
fn waiting_clients_are_served_longest_waiting_first() {
    let s = TestServer::start(&[]);
    let mut first = s.connect();
    let mut second = s.connect();
    let mut third = s.connect();
    let mut producer = s.connect();
    first.send(b"reserve\r\n");
    producer.wait_stat("current-waiting", "1");
    second.send(b"reserve-with-timeout 10\r\n");
    producer.wait_stat("current-waiting", "2");
    third.send(b"reserve\r\n");
    producer.wait_stat("current-waiting", "3");
    producer.put(b"one");
    first.expect(b"RESERVED 1 3\r\none\r\n");
    producer.put(b"two");
    second.expect(b"RESERVED 2 3\r\ntwo\r\n");
    producer.put(b"three");
    third.expect(b"RESERVED 3 5\r\nthree\r\n");
}

#[test]
fn a_waiter_is_woken_only_by_tubes_it_watches() {
    let s = TestServer::start(&[]);
    let mut worker = s.connect();
    let mut producer = s.connect();
    worker.exchange(b"watch w\r\n", b"WATCHING 2\r\n");
    worker.exchange(b"ignore default\r\n", b"WATCHING 1\r\n");
    worker.send(b"reserve\r\n");
    producer.wait_stat("current-waiting", "1");
    producer.put(b"not for you");
    worker.expect_silence(MS(100));
    producer.exchange(b"use w\r\n", b"USING w\r\n");
    producer.put(b"yours");
    worker.expect(b"RESERVED 2 5\r\nyours\r\n");
    assert_eq!(producer.tube_stat("default", "current-jobs-ready"), "1");
}

#[test]
fn delayed_job_becomes_ready_after_its_delay() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    let start = Instant::now();
    c.put_with(0, 1, 60, b"later");
    assert_eq!(c.job_stat(1, "state"), "delayed");
    c.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    c.send(b"reserve-with-timeout 3\r\n");
    c.expect_reserved(b"later");
    assert_between(start.elapsed(), MS(950), MS(2500));
}

#[test]
fn deadline_soon_when_reserved_job_is_within_a_second_of_its_ttr() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.put_with(0, 0, 1, b"x");
    c.exchange(b"reserve\r\n", b"RESERVED 1 1\r\nx\r\n");
    // TTR 1 s: the job is inside the 1 s safety margin at once.
    let start = Instant::now();
    c.exchange(b"reserve\r\n", b"DEADLINE_SOON\r\n");
    c.exchange(b"reserve-with-timeout 5\r\n", b"DEADLINE_SOON\r\n");
    assert!(start.elapsed() < MS(500));
    // DEADLINE_SOON did not release the job.
    c.exchange(b"delete 1\r\n", b"DELETED\r\n");
}

#[test]
fn deadline_soon_ends_a_blocking_reserve() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.put_with(0, 0, 2, b"x");
    let start = Instant::now();
    c.exchange(b"reserve\r\n", b"RESERVED 1 1\r\nx\r\n");
    c.send(b"reserve\r\n");
    c.expect(b"DEADLINE_SOON\r\n");
    // TTR 2 s minus the 1 s margin.
    assert_between(start.elapsed(), MS(900), MS(1900));
    c.exchange(b"touch 1\r\n", b"TOUCHED\r\n");
}

#[test]
fn no_deadline_soon_while_a_watched_job_is_ready() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.put_with(0, 0, 1, b"a");
    c.exchange(b"reserve\r\n", b"RESERVED 1 1\r\na\r\n");
    c.put(b"b");
    c.exchange(b"reserve\r\n", b"RESERVED 2 1\r\nb\r\n");
}

#[test]
fn job_returns_to_ready_when_its_ttr_expires() {
    let s = TestServer::start(&[]);
    let mut owner = s.connect();
    let mut other = s.connect();
    owner.put_with(0, 0, 1, b"x");
    let start = Instant::now();
    owner.exchange(b"reserve\r\n", b"RESERVED 1 1\r\nx\r\n");
    other.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    // The owner stays connected and silent; the job times out.
    other.send(b"reserve-with-timeout 3\r\n");
    other.expect(b"RESERVED 1 1\r\nx\r\n");
    assert_between(start.elapsed(), MS(950), MS(2500));
    assert_eq!(other.job_stat(1, "timeouts"), "1");
    assert_eq!(other.job_stat(1, "reserves"), "2");
    assert_eq!(other.stat("job-timeouts"), "1");
    // The first owner lost it.
    owner.exchange(b"touch 1\r\n", b"NOT_FOUND\r\n");
    owner.exchange(b"delete 1\r\n", b"NOT_FOUND\r\n");
    other.exchange(b"delete 1\r\n", b"DELETED\r\n");
}

#[test]
fn touch_restarts_the_ttr() {
    let s = TestServer::start(&[]);
    let mut owner = s.connect();
    let mut other = s.connect();
    owner.put_with(0, 0, 2, b"x");
    owner.exchange(b"reserve\r\n", b"RESERVED 1 1\r\nx\r\n");
    std::thread::sleep(MS(1000));
    owner.exchange(b"touch 1\r\n", b"TOUCHED\r\n");
    // Untouched, the job would be free at 2 s; touched at 1 s, not before 3 s.
    other.send(b"reserve-with-timeout 1\r\n");
    other.expect(b"TIMED_OUT\r\n");
    owner.exchange(b"delete 1\r\n", b"DELETED\r\n");
}

#[test]
fn a_waiting_client_that_leaves_takes_nothing() {
    let s = TestServer::start(&[]);
    let mut gone = s.connect();
    let mut c = s.connect();
    gone.send(b"reserve\r\n");
    c.wait_stat("current-waiting", "1");
    drop(gone);
    c.wait_stat("current-waiting", "0");
    c.put(b"x");
    c.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 1 1\r\nx\r\n");
}

#[test]
fn half_closed_waiting_client_gets_timed_out() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.send(b"reserve\r\n");
    c.shutdown_write();
    c.expect(b"TIMED_OUT\r\n");
}
