//! Error replies and framing, byte for byte: `UNKNOWN_COMMAND`,
//! `BAD_FORMAT` (bad numbers, overflow, trailing garbage, prefix quirks),
//! `EXPECTED_CRLF`, `JOB_TOO_BIG` with `-z`, the 224-byte line limit,
//! `quit`, jobs released when their client disconnects, and pipelining.

mod common;

use common::TestServer;

#[test]
fn unknown_commands() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    for cmd in [
        &b"foo\r\n"[..],
        b"\r\n",
        b" reserve\r\n",
        b"PUT 0 0 1 1\r\n",
        b"Reserve\r\n",
        // Commands taking arguments need the space after the name.
        b"use\r\n",
        b"peek\r\n",
        b"delete\r\n",
        b"put\r\n",
        b"watch\r\n",
        b"kick\r\n",
        b"kick-job\r\n",
        b"list\r\n",
    ] {
        c.exchange(cmd, b"UNKNOWN_COMMAND\r\n");
    }
    c.exchange(b"list-tube-used\r\n", b"USING default\r\n");
}

#[test]
fn prefix_quirks() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    // Commands are matched by prefix; what follows must then parse.
    for cmd in [
        &b"reserve-foo\r\n"[..],
        b"reserve \r\n",
        b"reserves\r\n",
        b"statsx\r\n",
        b"stats \r\n",
        b"stats-tubes\r\n",
        b"list-tubes-foo\r\n",
        b"list-tube-used \r\n",
        b"peek-readyx\r\n",
        b"peek-delayed \r\n",
        b"peek-buried 1\r\n",
        b"list-tubesx\r\n",
        // Without their space these fall back to `reserve` and `stats`.
        b"reserve-with-timeout\r\n",
        b"reserve-job\r\n",
        b"stats-job\r\n",
        b"stats-tube\r\n",
    ] {
        c.exchange(cmd, b"BAD_FORMAT\r\n");
    }
    // `pause-tube` has no space in its prefix: the tube name may follow at once.
    c.exchange(b"pause-tubedefault 0\r\n", b"PAUSED\r\n");
    // `quit` is a prefix too.
    c.exchange(b"quitxyz\r\n", b"");
    c.expect_closed();
}

#[test]
fn quit_closes_and_ignores_pipelined_commands() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.send(b"list-tube-used\r\nquit\r\nlist-tube-used\r\n");
    c.expect(b"USING default\r\n");
    c.expect_closed();
}

#[test]
fn bad_numbers() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    for cmd in [
        &b"delete x\r\n"[..],
        b"delete \r\n",
        b"delete -1\r\n",
        b"delete +1\r\n",
        b"delete 1 \r\n",
        b"delete 1 2\r\n",
        b"delete 1x\r\n",
        b"delete 0x10\r\n",
        b"delete 18446744073709551616\r\n",
        b"peek 99999999999999999999999\r\n",
        b"touch 1.0\r\n",
        b"kick-job a\r\n",
        b"stats-job -5\r\n",
        b"reserve-job  \r\n",
        b"bury 1\r\n",
        b"bury 1 4294967296\r\n",
        b"bury 1 -1\r\n",
        b"bury 1 2 3\r\n",
        b"release 1 0\r\n",
        b"release 1 0 4294967296\r\n",
        b"release 1 4294967296 0\r\n",
        b"release 1 0 0 0\r\n",
        b"reserve-with-timeout -1\r\n",
        b"reserve-with-timeout x\r\n",
        b"reserve-with-timeout 2147483648\r\n",
        b"reserve-with-timeout 4294967296\r\n",
        b"pause-tube default\r\n",
        b"pause-tube default x\r\n",
        b"pause-tube default 4294967296\r\n",
        b"pause-tube default 1 2\r\n",
        b"pause-tube -x 1\r\n",
        b"kick x\r\n",
        b"kick 18446744073709551616\r\n",
        b"kick \r\n",
    ] {
        c.exchange(cmd, b"BAD_FORMAT\r\n");
    }
    // The largest values that fit are fine; leading spaces are skipped.
    c.exchange(b"delete 18446744073709551615\r\n", b"NOT_FOUND\r\n");
    c.exchange(b"delete 0\r\n", b"NOT_FOUND\r\n");
    c.exchange(b"delete    007\r\n", b"NOT_FOUND\r\n");
    c.exchange(b"peek  1\r\n", b"NOT_FOUND\r\n");
    c.exchange(b"reserve-with-timeout 0\r\n", b"TIMED_OUT\r\n");
    c.exchange(b"pause-tube default 4294967295\r\n", b"PAUSED\r\n");
    c.exchange(b"pause-tube  default  0\r\n", b"PAUSED\r\n");
}

#[test]
fn strtoul_leniency_of_kick_and_reserve_with_timeout() {
    // beanstalkd reads the kick count with strtoul and does not check what
    // follows it; reserve-with-timeout does not check for trailing bytes.
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(b"kick 5 junk\r\n", b"KICKED 0\r\n");
    c.exchange(b"kick 1x\r\n", b"KICKED 0\r\n");
    c.exchange(b"kick  3\r\n", b"KICKED 0\r\n");
    c.exchange(b"reserve-with-timeout 0 junk\r\n", b"TIMED_OUT\r\n");
    c.exchange(b"reserve-with-timeout 0x\r\n", b"TIMED_OUT\r\n");
}

#[test]
fn put_format_errors() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    for cmd in [
        &b"put 0 0 60\r\n"[..],
        b"put 0 0 60 \r\n",
        b"put x 0 60 1\r\n",
        b"put -1 0 60 1\r\n",
        b"put 4294967296 0 60 1\r\n",
        b"put 0 4294967296 60 1\r\n",
        b"put 0 0 4294967296 1\r\n",
        b"put 0 0 60 4294967296\r\n",
        b"put 0 0 60 -1\r\n",
        b"put 0 0 60 1.0\r\n",
        b"put 0.5 0 60 1\r\n",
        b"put 0 0 0.5 1\r\n",
    ] {
        c.exchange(cmd, b"BAD_FORMAT\r\n");
    }
    c.exchange(b"stats-job 1\r\n", b"NOT_FOUND\r\n");
    // Extra spaces between the numbers are skipped.
    c.exchange(b"put  1  0  60  2\r\nok\r\n", b"INSERTED 1\r\n");
}

#[test]
fn put_with_trailing_garbage_then_reads_body_as_a_command() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    // BAD_FORMAT leaves the body unread, so it is taken as the next command.
    c.send(b"put 0 0 60 5 x\r\nhello\r\n");
    c.expect(b"BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n");
    c.send(b"put 0 0 60 5 \r\nhello\r\n");
    c.expect(b"BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n");
    c.exchange(b"peek-ready\r\n", b"NOT_FOUND\r\n");
}

#[test]
fn body_without_crlf_is_expected_crlf() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    // Body longer than declared: the 5+2 bytes "hello\r\n" are read for a
    // 3-byte body, then the rest is a new (empty) command line.
    c.send(b"put 0 0 60 3\r\nhello\r\n");
    c.expect(b"EXPECTED_CRLF\r\nUNKNOWN_COMMAND\r\n");
    // Body shorter than declared: the server waits for more bytes.
    c.send(b"put 0 0 60 6\r\nhello\r\n");
    c.expect_silence(std::time::Duration::from_millis(50));
    c.send(b"x");
    c.expect(b"EXPECTED_CRLF\r\n");
    // Only "\r\n" ends a body.
    c.send(b"put 0 0 60 1\r\nx\n\r");
    c.expect(b"EXPECTED_CRLF\r\n");
    c.exchange(b"peek-ready\r\n", b"NOT_FOUND\r\n");
    c.exchange(b"put 0 0 60 1\r\nx\r\n", b"INSERTED 4\r\n");
}

#[test]
fn job_too_big_discards_the_body() {
    let s = TestServer::start(&["-z", "10"]);
    let mut c = s.connect();
    c.exchange(b"put 0 0 60 10\r\n0123456789\r\n", b"INSERTED 1\r\n");
    // The body is skipped, CRLF included, whatever it contains.
    c.send(b"put 0 0 60 11\r\n01234\r\n6789\r\nlist-tube-used\r\n");
    c.expect(b"JOB_TOO_BIG\r\nUSING default\r\n");
    // Body arriving in pieces.
    c.send(b"put 0 0 60 100\r\n");
    c.send(&[b'z'; 60]);
    std::thread::sleep(std::time::Duration::from_millis(20));
    c.send(&[b'z'; 40]);
    c.send(b"\r\nlist-tube-used\r\n");
    c.expect(b"JOB_TOO_BIG\r\nUSING default\r\n");
    // JOB_TOO_BIG is decided before trailing garbage is noticed.
    c.send(b"put 0 0 60 11 junk\r\n0123456789A\r\n");
    c.expect(b"JOB_TOO_BIG\r\n");
    // A put that fails JOB_TOO_BIG still counts as a put, and made no job.
    assert_eq!(c.stat("cmd-put"), "4");
    assert_eq!(c.stat("total-jobs"), "1");
    c.exchange(b"put 0 0 60 1\r\nx\r\n", b"INSERTED 2\r\n");
}

#[test]
fn nul_byte_in_a_command_line() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.exchange(b"use a\x00b\r\n", b"BAD_FORMAT\r\n");
    c.exchange(b"list-tube-used\x00\r\n", b"BAD_FORMAT\r\n");
    c.exchange(b"\x00\r\n", b"BAD_FORMAT\r\n");
    c.exchange(b"list-tube-used\r\n", b"USING default\r\n");
}

#[test]
fn line_of_exactly_224_bytes_is_accepted() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    // "peek" + spaces + "1" + CRLF = 224 bytes.
    let mut line = b"peek".to_vec();
    line.resize(221, b' ');
    line.extend_from_slice(b"1\r\n");
    assert_eq!(line.len(), 224);
    c.exchange(&line, b"NOT_FOUND\r\n");
}

#[test]
fn over_long_lines_are_bad_format_and_skipped() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    // The CRLF wholly past the 224-byte buffer.
    let mut long = b"peek".to_vec();
    long.resize(300, b' ');
    long.extend_from_slice(b"1\r\nlist-tube-used\r\n");
    c.exchange(&long, b"BAD_FORMAT\r\nUSING default\r\n");
    // Very long, in several writes.
    c.send(&[b'a'; 1000]);
    c.send(&[b'b'; 1000]);
    c.send(b"\r\nlist-tube-used\r\n");
    c.expect(b"BAD_FORMAT\r\nUSING default\r\n");
    // An over-long put line does not read a body.
    let mut put = b"put 0 0 60 1".to_vec();
    put.resize(500, b' ');
    put.extend_from_slice(b"\r\nx\r\n");
    c.send(&put);
    c.expect(b"BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n");
}

#[test]
fn disconnecting_client_releases_its_reserved_jobs() {
    let s = TestServer::start(&[]);
    let mut owner = s.connect();
    let mut other = s.connect();
    owner.put(b"a");
    owner.put(b"b");
    owner.exchange(b"reserve\r\n", b"RESERVED 1 1\r\na\r\n");
    owner.exchange(b"reserve\r\n", b"RESERVED 2 1\r\nb\r\n");
    other.send(b"reserve-with-timeout 2\r\n");
    s.connect().wait_stat("current-waiting", "1");
    drop(owner);
    other.expect(b"RESERVED 1 1\r\na\r\n");
    other.exchange(b"reserve-with-timeout 0\r\n", b"RESERVED 2 1\r\nb\r\n");
    // Released by disconnect: neither a timeout nor a release.
    assert_eq!(other.job_stat(1, "releases"), "0");
    assert_eq!(other.job_stat(1, "timeouts"), "0");
    assert_eq!(other.job_stat(1, "reserves"), "2");
}

#[test]
fn disconnect_in_the_middle_of_a_put_body_creates_nothing() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    c.send(b"put 0 0 60 10\r\nhalf");
    drop(c);
    let mut d = s.connect();
    d.wait_stat("current-connections", "1");
    d.exchange(b"peek-ready\r\n", b"NOT_FOUND\r\n");
    assert_eq!(d.stat("total-jobs"), "0");
}

#[test]
fn pipelined_commands_are_all_answered_in_order() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    let mut req = Vec::new();
    let mut want = Vec::new();
    for i in 1..=200u32 {
        let body = format!("job{i}");
        req.extend_from_slice(format!("put {i} 0 60 {}\r\n{body}\r\n", body.len()).as_bytes());
        want.extend_from_slice(format!("INSERTED {i}\r\n").as_bytes());
    }
    req.extend_from_slice(b"use other\r\nbogus\r\nlist-tube-used\r\n");
    want.extend_from_slice(b"USING other\r\nUNKNOWN_COMMAND\r\nUSING other\r\n");
    for i in 1..=200u32 {
        req.extend_from_slice(b"reserve\r\n");
        let body = format!("job{i}");
        want.extend_from_slice(format!("RESERVED {i} {}\r\n{body}\r\n", body.len()).as_bytes());
        req.extend_from_slice(format!("delete {i}\r\n").as_bytes());
        want.extend_from_slice(b"DELETED\r\n");
    }
    req.extend_from_slice(b"reserve-with-timeout 0\r\n");
    want.extend_from_slice(b"TIMED_OUT\r\n");
    c.send(&req);
    c.expect(&want);
}

#[test]
fn command_split_byte_by_byte() {
    let s = TestServer::start(&[]);
    let mut c = s.connect();
    for &b in b"use slow\r\n" {
        c.send(&[b]);
    }
    c.expect(b"USING slow\r\n");
}
