//! The job lifecycle, byte for byte: `put`, `reserve`, `delete`, `release`,
//! `bury`, `kick`, `kick-job`, `touch`, `peek`, `peek-ready`,
//! `peek-delayed`, `peek-buried` and `reserve-job`; priorities, ids, bodies
//! holding CRLF and binary bytes, and who may act on which job.

mod common;

use common::TestServer;

#[test]
fn put_reserve_delete() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(b"put 0 0 60 5\r\nhello\r\n", b"INSERTED 1\r\n");
    c.exchange(b"reserve\r\n", b"RESERVED 1 5\r\nhello\r\n");
    c.exchange(b"delete 1\r\n", b"DELETED\r\n");
    c.exchange(b"delete 1\r\n", b"NOT_FOUND\r\n");
    c.exchange(b"peek 1\r\n", b"NOT_FOUND\r\n");
}

#[test]
fn empty_binary_and_crlf_bodies_round_trip() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(b"put 0 0 60 0\r\n\r\n", b"INSERTED 1\r\n");
    c.exchange(b"put 0 0 60 8\r\na\r\nb\x00\xff\r\n\r\n", b"INSERTED 2\r\n");
    c.exchange(b"reserve\r\n", b"RESERVED 1 0\r\n\r\n");
    c.exchange(b"reserve\r\n", b"RESERVED 2 8\r\na\r\nb\x00\xff\r\n\r\n");
    c.exchange(b"peek 2\r\n", b"FOUND 2 8\r\na\r\nb\x00\xff\r\n\r\n");
}

#[test]
fn body_split_across_many_writes() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    for part in [
        &b"pu"[..],
        b"t 0 0 60 1",
        b"0\r",
        b"\nhello",
        b"world",
        b"\r",
        b"\n",
    ] {
        c.send(part);
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    c.expect(b"INSERTED 1\r\n");
    c.exchange(b"peek 1\r\n", b"FOUND 1 10\r\nhelloworld\r\n");
}

#[test]
fn ids_increase_and_are_never_reused() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(b"put 0 0 60 1\r\na\r\n", b"INSERTED 1\r\n");
    c.exchange(b"put 0 0 60 1\r\nb\r\n", b"INSERTED 2\r\n");
    c.exchange(b"delete 2\r\n", b"DELETED\r\n");
    c.exchange(b"delete 1\r\n", b"DELETED\r\n");
    c.exchange(b"put 0 0 60 1\r\nc\r\n", b"INSERTED 3\r\n");
    // A put in another tube, by another connection, takes the next id too.
    let mut d = s.connect();
    d.exchange(b"use other\r\n", b"USING other\r\n");
    d.exchange(b"put 0 0 60 1\r\nd\r\n", b"INSERTED 4\r\n");
}

#[test]
fn reserve_order_is_priority_then_id() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.put_with(10, 0, 60, b"p10");
    c.put_with(4294967295, 0, 60, b"pmax");
    c.put_with(5, 0, 60, b"p5a");
    c.put_with(5, 0, 60, b"p5b");
    c.put_with(0, 0, 60, b"p0");
    c.exchange(b"reserve\r\n", b"RESERVED 5 2\r\np0\r\n");
    c.exchange(b"reserve\r\n", b"RESERVED 3 3\r\np5a\r\n");
    c.exchange(b"reserve\r\n", b"RESERVED 4 3\r\np5b\r\n");
    c.exchange(b"reserve\r\n", b"RESERVED 1 3\r\np10\r\n");
    c.exchange(b"reserve\r\n", b"RESERVED 2 4\r\npmax\r\n");
}

#[test]
fn release_returns_job_with_new_priority() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.put_with(100, 0, 60, b"a");
    c.put_with(50, 0, 60, b"b");
    c.exchange(b"reserve\r\n", b"RESERVED 2 1\r\nb\r\n");
    c.exchange(b"release 2 200 0\r\n", b"RELEASED\r\n");
    let stats = c.stats_of("stats-job 2");
    assert_eq!(common::lookup(&stats, "state"), "ready");
    assert_eq!(common::lookup(&stats, "pri"), "200");
    assert_eq!(common::lookup(&stats, "releases"), "1");
    // Job 1 (pri 100) now comes first.
    c.exchange(b"reserve\r\n", b"RESERVED 1 1\r\na\r\n");
    c.exchange(b"reserve\r\n", b"RESERVED 2 1\r\nb\r\n");
}

#[test]
fn release_with_delay_makes_job_delayed() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.put(b"x");
    c.exchange(b"reserve\r\n", b"RESERVED 1 1\r\nx\r\n");
    c.exchange(b"release 1 7 100\r\n", b"RELEASED\r\n");
    c.exchange(b"peek-ready\r\n", b"NOT_FOUND\r\n");
    c.exchange(b"peek-delayed\r\n", b"FOUND 1 1\r\nx\r\n");
    assert_eq!(c.job_stat(1, "state"), "delayed");
    assert_eq!(c.job_stat(1, "delay"), "100");
    assert_eq!(c.job_stat(1, "pri"), "7");
    c.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
}

#[test]
fn release_bury_touch_need_the_reserving_connection() {
    let s = TestServer::start(&[]);
    let mut owner = s.connect();
    let mut other = s.connect();
    owner.put(b"x");
    // Not reserved yet: ready jobs cannot be released, buried or touched.
    owner.exchange(b"release 1 0 0\r\n", b"NOT_FOUND\r\n");
    owner.exchange(b"bury 1 0\r\n", b"NOT_FOUND\r\n");
    owner.exchange(b"touch 1\r\n", b"NOT_FOUND\r\n");
    owner.exchange(b"reserve\r\n", b"RESERVED 1 1\r\nx\r\n");
    other.exchange(b"release 1 0 0\r\n", b"NOT_FOUND\r\n");
    other.exchange(b"bury 1 0\r\n", b"NOT_FOUND\r\n");
    other.exchange(b"touch 1\r\n", b"NOT_FOUND\r\n");
    other.exchange(b"delete 1\r\n", b"NOT_FOUND\r\n");
    owner.exchange(b"touch 1\r\n", b"TOUCHED\r\n");
    owner.exchange(b"delete 1\r\n", b"DELETED\r\n");
    // Unknown ids.
    owner.exchange(b"release 99 0 0\r\n", b"NOT_FOUND\r\n");
    owner.exchange(b"bury 99 0\r\n", b"NOT_FOUND\r\n");
    owner.exchange(b"touch 99\r\n", b"NOT_FOUND\r\n");
    owner.exchange(b"kick-job 99\r\n", b"NOT_FOUND\r\n");
    owner.exchange(b"reserve-job 99\r\n", b"NOT_FOUND\r\n");
    owner.exchange(b"stats-job 99\r\n", b"NOT_FOUND\r\n");
}

#[test]
fn delete_works_on_ready_delayed_and_buried_jobs_from_any_connection() {
    let s = TestServer::start(&[]);
    let mut a = s.connect();
    let mut b = s.connect();
    a.put(b"ready");
    a.put_with(0, 100, 60, b"delayed");
    a.put(b"buried");
    a.exchange(b"reserve-job 3\r\n", b"RESERVED 3 6\r\nburied\r\n");
    a.exchange(b"bury 3 0\r\n", b"BURIED\r\n");
    b.exchange(b"delete 1\r\n", b"DELETED\r\n");
    b.exchange(b"delete 2\r\n", b"DELETED\r\n");
    b.exchange(b"delete 3\r\n", b"DELETED\r\n");
    a.exchange(b"stats-job 1\r\n", b"NOT_FOUND\r\n");
    a.exchange(b"peek-ready\r\n", b"NOT_FOUND\r\n");
    a.exchange(b"peek-delayed\r\n", b"NOT_FOUND\r\n");
    a.exchange(b"peek-buried\r\n", b"NOT_FOUND\r\n");
}

#[test]
fn bury_and_kick() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    for body in [b"a", b"b", b"c"] {
        c.put(body);
    }
    for id in 1..=3u64 {
        c.send(b"reserve\r\n");
        assert_eq!(c.expect_reserved(&[b'a' + id as u8 - 1]), id);
        c.exchange(
            format!("bury {id} {}\r\n", 10 - id).as_bytes(),
            b"BURIED\r\n",
        );
    }
    assert_eq!(c.job_stat(2, "state"), "buried");
    assert_eq!(c.job_stat(2, "pri"), "8");
    assert_eq!(c.job_stat(2, "buries"), "1");
    // peek-buried shows the oldest buried job (FIFO, not by priority).
    c.exchange(b"peek-buried\r\n", b"FOUND 1 1\r\na\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    c.exchange(b"kick 2\r\n", b"KICKED 2\r\n");
    c.exchange(b"peek-buried\r\n", b"FOUND 3 1\r\nc\r\n");
    assert_eq!(c.job_stat(1, "kicks"), "1");
    assert_eq!(c.job_stat(1, "state"), "ready");
    c.exchange(b"kick 10\r\n", b"KICKED 1\r\n");
    c.exchange(b"kick 10\r\n", b"KICKED 0\r\n");
    c.exchange(b"kick 0\r\n", b"KICKED 0\r\n");
    // Kicked jobs keep the priority given to bury.
    c.exchange(b"reserve\r\n", b"RESERVED 3 1\r\nc\r\n");
}

#[test]
fn kick_prefers_buried_over_delayed_and_acts_on_used_tube() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.put_with(0, 100, 60, b"d1");
    c.put_with(0, 200, 60, b"d2");
    c.put(b"b");
    c.exchange(b"reserve\r\n", b"RESERVED 3 1\r\nb\r\n");
    c.exchange(b"bury 3 0\r\n", b"BURIED\r\n");
    // Only buried jobs are kicked while any exist.
    c.exchange(b"kick 5\r\n", b"KICKED 1\r\n");
    assert_eq!(c.job_stat(1, "state"), "delayed");
    // Then delayed jobs, soonest first.
    c.exchange(b"kick 1\r\n", b"KICKED 1\r\n");
    assert_eq!(c.job_stat(1, "state"), "ready");
    assert_eq!(c.job_stat(2, "state"), "delayed");
    // kick acts on the used tube only.
    c.exchange(b"use elsewhere\r\n", b"USING elsewhere\r\n");
    c.exchange(b"kick 5\r\n", b"KICKED 0\r\n");
    c.exchange(b"use default\r\n", b"USING default\r\n");
    c.exchange(b"kick 5\r\n", b"KICKED 1\r\n");
    c.exchange(b"kick 5\r\n", b"KICKED 0\r\n");
}

#[test]
fn kick_job_on_each_state() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.put(b"r");
    c.put_with(0, 100, 60, b"d");
    c.put(b"b");
    c.exchange(b"reserve-job 3\r\n", b"RESERVED 3 1\r\nb\r\n");
    c.exchange(b"bury 3 0\r\n", b"BURIED\r\n");
    c.put(b"x");
    c.exchange(b"reserve-job 4\r\n", b"RESERVED 4 1\r\nx\r\n");
    c.exchange(b"kick-job 1\r\n", b"NOT_FOUND\r\n");
    c.exchange(b"kick-job 4\r\n", b"NOT_FOUND\r\n");
    c.exchange(b"kick-job 2\r\n", b"KICKED\r\n");
    c.exchange(b"kick-job 2\r\n", b"NOT_FOUND\r\n");
    // kick-job ignores the used tube.
    c.exchange(b"use elsewhere\r\n", b"USING elsewhere\r\n");
    c.exchange(b"kick-job 3\r\n", b"KICKED\r\n");
    assert_eq!(c.job_stat(2, "state"), "ready");
    assert_eq!(c.job_stat(3, "state"), "ready");
    assert_eq!(c.job_stat(3, "kicks"), "1");
}

#[test]
fn peek_commands_look_at_the_used_tube() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(b"peek-ready\r\n", b"NOT_FOUND\r\n");
    c.exchange(b"peek-delayed\r\n", b"NOT_FOUND\r\n");
    c.exchange(b"peek-buried\r\n", b"NOT_FOUND\r\n");
    c.put_with(5, 0, 60, b"r5");
    c.put_with(1, 0, 60, b"r1");
    c.put_with(0, 200, 60, b"d200");
    c.put_with(0, 100, 60, b"d100");
    c.exchange(b"peek-ready\r\n", b"FOUND 2 2\r\nr1\r\n");
    // The delayed job due soonest.
    c.exchange(b"peek-delayed\r\n", b"FOUND 4 4\r\nd100\r\n");
    c.exchange(b"use other\r\n", b"USING other\r\n");
    c.exchange(b"peek-ready\r\n", b"NOT_FOUND\r\n");
    c.exchange(b"peek-delayed\r\n", b"NOT_FOUND\r\n");
    // peek <id> finds any job, in any tube and state.
    c.exchange(b"peek 3\r\n", b"FOUND 3 4\r\nd200\r\n");
    let mut w = s.connect();
    w.exchange(b"reserve\r\n", b"RESERVED 2 2\r\nr1\r\n");
    c.exchange(b"peek 2\r\n", b"FOUND 2 2\r\nr1\r\n");
}

#[test]
fn reserve_job_takes_ready_delayed_or_buried_jobs() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.put(b"r");
    c.put_with(0, 100, 60, b"d");
    c.exchange(b"reserve-job 2\r\n", b"RESERVED 2 1\r\nd\r\n");
    assert_eq!(c.job_stat(2, "state"), "reserved");
    c.exchange(b"bury 2 0\r\n", b"BURIED\r\n");
    c.exchange(b"reserve-job 2\r\n", b"RESERVED 2 1\r\nd\r\n");
    assert_eq!(c.job_stat(2, "reserves"), "2");
    // Already reserved (by us or anyone): NOT_FOUND.
    c.exchange(b"reserve-job 2\r\n", b"NOT_FOUND\r\n");
    let mut other = s.connect();
    other.exchange(b"reserve-job 2\r\n", b"NOT_FOUND\r\n");
    // reserve-job ignores the watch list.
    other.exchange(b"watch x\r\n", b"WATCHING 2\r\n");
    other.exchange(b"ignore default\r\n", b"WATCHING 1\r\n");
    other.exchange(b"reserve-job 1\r\n", b"RESERVED 1 1\r\nr\r\n");
    other.exchange(b"delete 1\r\n", b"DELETED\r\n");
}

#[test]
fn ttr_below_one_second_becomes_one() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.put_with(0, 0, 0, b"x");
    assert_eq!(c.job_stat(1, "ttr"), "1");
    c.put_with(0, 0, 4294967295, b"y");
    assert_eq!(c.job_stat(2, "ttr"), "4294967295");
}

#[test]
fn largest_body_is_accepted_at_the_default_limit() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    let body = vec![b'z'; 65535];
    assert_eq!(c.put(&body), 1);
    c.send(b"reserve\r\n");
    c.expect_reserved(&body);
}
