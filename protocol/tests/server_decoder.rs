//! The server decoder against beanstalkd's rules: every command, every refusal,
//! the quirks kept, the bugs fixed, the fraction extension, and framing under
//! split and pipelined reads.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sprout_protocol::codec::ServerCodec;
use sprout_protocol::{
    Command, Op, ProtocolError, Rejected, Request, TubeName, DEFAULT_MAX_JOB_SIZE, MAX_LINE_LEN,
};
use tokio_util::codec::Decoder;

/// Everything `input` decodes to, fed at once.
fn decode(input: &[u8]) -> Vec<Request> {
    decode_with(DEFAULT_MAX_JOB_SIZE, input)
}

fn decode_with(max_job_size: u32, input: &[u8]) -> Vec<Request> {
    let mut codec = ServerCodec::new(max_job_size);
    let mut buf = BytesMut::from(input);
    std::iter::from_fn(|| codec.decode(&mut buf).unwrap()).collect()
}

/// The single request a complete line decodes to.
fn one(input: &[u8]) -> Request {
    let requests = decode(input);
    assert_eq!(
        requests.len(),
        1,
        "{:?} gave {requests:?}",
        String::from_utf8_lossy(input)
    );
    requests.into_iter().next().unwrap()
}

fn ok(input: &[u8]) -> Command {
    one(input).unwrap_or_else(|e| panic!("{:?}: {e:?}", String::from_utf8_lossy(input)))
}

fn refused(error: ProtocolError) -> Request {
    Err(Rejected {
        error,
        counted: None,
    })
}

fn counted(error: ProtocolError, op: Op) -> Request {
    Err(Rejected {
        error,
        counted: Some(op),
    })
}

const BAD: Request = Err(Rejected {
    error: ProtocolError::BadFormat,
    counted: None,
});
const UNKNOWN: Request = Err(Rejected {
    error: ProtocolError::UnknownCommand,
    counted: None,
});

fn tube(name: &str) -> TubeName {
    TubeName::new(name.as_bytes()).unwrap()
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn put(pri: u32, delay: Duration, ttr: u64, body: &'static [u8]) -> Command {
    Command::Put {
        pri,
        delay,
        ttr: secs(ttr),
        body: Bytes::from_static(body),
        tags: None,
    }
}

#[test]
fn every_command_without_arguments() {
    assert_eq!(ok(b"reserve\r\n"), Command::Reserve);
    assert_eq!(ok(b"peek-ready\r\n"), Command::PeekReady);
    assert_eq!(ok(b"peek-delayed\r\n"), Command::PeekDelayed);
    assert_eq!(ok(b"peek-buried\r\n"), Command::PeekBuried);
    assert_eq!(ok(b"stats\r\n"), Command::Stats);
    assert_eq!(ok(b"list-tubes\r\n"), Command::ListTubes);
    assert_eq!(ok(b"list-tube-used\r\n"), Command::ListTubeUsed);
    assert_eq!(ok(b"list-tubes-watched\r\n"), Command::ListTubesWatched);
    assert_eq!(ok(b"quit\r\n"), Command::Quit);
}

#[test]
fn commands_without_arguments_allow_no_trailing_text() {
    for line in [
        &b"reserve \r\n"[..],
        b"peek-readyx\r\n",
        b"peek-delayed 1\r\n",
        b"peek-buried \r\n",
        b"statsx\r\n",
        b"list-tubes \r\n",
        b"list-tube-used \r\n",
        b"list-tubes-watched \r\n",
    ] {
        assert_eq!(one(line), BAD, "{:?}", String::from_utf8_lossy(line));
    }
}

#[test]
fn commands_taking_a_job_id() {
    assert_eq!(ok(b"peek 1\r\n"), Command::Peek(1));
    assert_eq!(ok(b"reserve-job 2\r\n"), Command::ReserveJob(2));
    assert_eq!(ok(b"delete 3\r\n"), Command::Delete(3));
    assert_eq!(ok(b"touch 4\r\n"), Command::Touch(4));
    assert_eq!(ok(b"kick-job 5\r\n"), Command::KickJob(5));
    assert_eq!(
        ok(b"stats-job 18446744073709551615\r\n"),
        Command::StatsJob(u64::MAX)
    );
    // Extra spaces before the number are skipped, leading zeros are fine.
    assert_eq!(ok(b"delete    007\r\n"), Command::Delete(7));
}

#[test]
fn job_ids_must_be_whole_numbers_and_nothing_else() {
    for word in [
        "peek",
        "reserve-job",
        "delete",
        "touch",
        "kick-job",
        "stats-job",
    ] {
        for args in [
            "",
            "x",
            "-1",
            "+1",
            "1 ",
            "1x",
            "1.5",
            "\t1",
            "18446744073709551616",
        ] {
            let line = format!("{word} {args}\r\n");
            assert_eq!(one(line.as_bytes()), BAD, "{line:?}");
        }
    }
}

#[test]
fn commands_taking_a_tube_name() {
    assert_eq!(ok(b"use foo\r\n"), Command::Use(tube("foo")));
    assert_eq!(
        ok(b"watch a-b+c/d;e.f$g_h(i)\r\n"),
        Command::Watch(tube("a-b+c/d;e.f$g_h(i)"))
    );
    assert_eq!(ok(b"ignore default\r\n"), Command::Ignore(tube("default")));
    assert_eq!(ok(b"stats-tube x\r\n"), Command::StatsTube(tube("x")));
    let longest = format!("use {}\r\n", "n".repeat(200));
    assert_eq!(ok(longest.as_bytes()), Command::Use(tube(&"n".repeat(200))));
}

#[test]
fn tube_names_are_the_whole_rest_of_the_line() {
    for word in ["use", "watch", "ignore", "stats-tube"] {
        for args in [" foo", "foo ", "", "-foo", "fo o", "f*o", "fo\u{e9}"] {
            let line = format!("{word} {args}\r\n");
            assert_eq!(one(line.as_bytes()), BAD, "{line:?}");
        }
        let too_long = format!("{word} {}\r\n", "n".repeat(201));
        assert_eq!(one(too_long.as_bytes()), BAD);
    }
}

#[test]
fn release_and_bury() {
    assert_eq!(
        ok(b"release 1 2 3\r\n"),
        Command::Release {
            id: 1,
            pri: 2,
            delay: secs(3)
        }
    );
    assert_eq!(
        ok(b"release 1  2  3\r\n"),
        Command::Release {
            id: 1,
            pri: 2,
            delay: secs(3)
        }
    );
    assert_eq!(
        ok(b"bury 9 4294967295\r\n"),
        Command::Bury {
            id: 9,
            pri: u32::MAX
        }
    );
    for line in [
        &b"release 1 2\r\n"[..],
        b"release 1 2 3 \r\n",
        b"release 1 2 3x\r\n",
        b"release 1 4294967296 3\r\n",
        b"release 1 2 4294967296\r\n",
        b"bury 1\r\n",
        b"bury 1 2 \r\n",
        b"bury 1 4294967296\r\n",
        b"bury 1 2.5\r\n",
    ] {
        assert_eq!(one(line), BAD, "{:?}", String::from_utf8_lossy(line));
    }
}

#[test]
fn kick_reads_its_count_like_strtoul() {
    assert_eq!(ok(b"kick 10\r\n"), Command::Kick(10));
    assert_eq!(ok(b"kick \t 3x\r\n"), Command::Kick(3));
    assert_eq!(ok(b"kick +4\r\n"), Command::Kick(4));
    assert_eq!(ok(b"kick -1\r\n"), Command::Kick(u32::MAX));
    assert_eq!(ok(b"kick 4294967297\r\n"), Command::Kick(1));
    assert_eq!(one(b"kick \r\n"), BAD);
    assert_eq!(one(b"kick x\r\n"), BAD);
    assert_eq!(one(b"kick 18446744073709551616\r\n"), BAD);
    assert_eq!(one(b"kick\r\n"), UNKNOWN);
}

#[test]
fn reserve_with_timeout_ignores_text_after_the_number() {
    assert_eq!(
        ok(b"reserve-with-timeout 0\r\n"),
        Command::ReserveWithTimeout(Duration::ZERO)
    );
    assert_eq!(
        ok(b"reserve-with-timeout 5abc\r\n"),
        Command::ReserveWithTimeout(secs(5))
    );
    assert_eq!(
        ok(b"reserve-with-timeout   7 8\r\n"),
        Command::ReserveWithTimeout(secs(7))
    );
    assert_eq!(
        ok(b"reserve-with-timeout 2147483647\r\n"),
        Command::ReserveWithTimeout(secs(2147483647))
    );
    assert_eq!(one(b"reserve-with-timeout 2147483648\r\n"), BAD);
    assert_eq!(one(b"reserve-with-timeout -1\r\n"), BAD);
    assert_eq!(one(b"reserve-with-timeout \r\n"), BAD);
    // Without its space it is a `reserve` with trailing text.
    assert_eq!(one(b"reserve-with-timeout\r\n"), BAD);
}

#[test]
fn pause_tube() {
    let paused = |name: &str, delay| Command::PauseTube {
        tube: tube(name),
        delay,
    };
    assert_eq!(ok(b"pause-tube foo 10\r\n"), paused("foo", secs(10)));
    assert_eq!(
        ok(b"pause-tube   foo   0\r\n"),
        paused("foo", Duration::ZERO)
    );
    // beanstalkd needs no space after the command word.
    assert_eq!(ok(b"pause-tubefoo 5\r\n"), paused("foo", secs(5)));
    for line in [
        &b"pause-tube foo\r\n"[..],
        b"pause-tube foo5\r\n",
        b"pause-tube foo 5 \r\n",
        b"pause-tube foo 5x\r\n",
        b"pause-tube foo\t5\r\n",
        b"pause-tube foo 4294967296\r\n",
        b"pause-tube  5\r\n",
        b"pause-tube\r\n",
        b"pause-tube *foo 5\r\n",
    ] {
        assert_eq!(one(line), BAD, "{:?}", String::from_utf8_lossy(line));
    }
}

#[test]
fn pause_tube_counts_names_it_reads_but_refuses() {
    assert_eq!(
        one(b"pause-tube -foo 5\r\n"),
        counted(ProtocolError::BadFormat, Op::PauseTube)
    );
    let long = format!("pause-tube {} 5\r\n", "n".repeat(201));
    assert_eq!(
        one(long.as_bytes()),
        counted(ProtocolError::BadFormat, Op::PauseTube)
    );
}

#[test]
fn prefix_matching_follows_beanstalkd() {
    assert_eq!(one(b"reserve-foo\r\n"), BAD);
    assert_eq!(one(b"stats-jobx\r\n"), BAD);
    assert_eq!(ok(b"quitxyz\r\n"), Command::Quit);
    assert_eq!(ok(b"quit \r\n"), Command::Quit);
    assert_eq!(one(b"list-tube\r\n"), UNKNOWN);
    assert_eq!(one(b"put\r\n"), UNKNOWN);
    assert_eq!(one(b"PUT 0 0 0 0\r\n"), UNKNOWN);
    assert_eq!(one(b"\r\n"), UNKNOWN);
    assert_eq!(one(b" reserve\r\n"), UNKNOWN);
}

#[test]
fn a_nul_byte_is_bad_format_before_anything_else() {
    assert_eq!(one(b"use a\0b\r\n"), BAD);
    assert_eq!(one(b"\0\r\n"), BAD);
    assert_eq!(one(b"quit\0\r\n"), BAD);
    assert_eq!(one(b"nonsense\0\r\n"), BAD);
}

#[test]
fn put_reads_its_body() {
    assert_eq!(
        decode(b"put 1 2 3 5\r\nhello\r\n"),
        [Ok(put(1, secs(2), 3, b"hello"))]
    );
    assert_eq!(
        decode(b"put 0 0 0 0\r\n\r\n"),
        [Ok(put(0, Duration::ZERO, 0, b""))]
    );
    // The body is opaque: CRLFs and NULs inside it are data.
    assert_eq!(
        decode(b"put 1 0 1 6\r\na\r\n\0\r\n\r\n"),
        [Ok(put(1, Duration::ZERO, 1, b"a\r\n\0\r\n"))]
    );
    assert_eq!(
        decode(b"put  4294967295  4294967295  4294967295  1\r\nx\r\n"),
        [Ok(Command::Put {
            pri: u32::MAX,
            delay: secs(4294967295),
            ttr: secs(4294967295),
            body: "x".into(),
            tags: None,
        })]
    );
}

#[test]
fn short_bodies_are_copied_and_long_ones_split_off_the_read_buffer() {
    let long = sprout_protocol::codec::COPY_BODIES_BELOW;
    let mut codec = ServerCodec::new(long as u32 + 10);
    let mut wire = b"put 1 2 3 5\r\nhello\r\n".to_vec();
    wire.extend_from_slice(format!("put 1 2 3 {long}\r\n").as_bytes());
    let long_at = wire.len();
    wire.extend(std::iter::repeat_n(b'x', long));
    wire.extend_from_slice(b"\r\n");
    let mut buf = BytesMut::from(&wire[..]);
    let start = buf.as_ptr() as usize;
    let end = start + buf.capacity();
    let mut bodies = Vec::new();
    while let Some(Ok(Command::Put { body, .. })) = codec.decode(&mut buf).unwrap() {
        bodies.push(body);
    }
    assert!(buf.is_empty());
    let [short, long_body] = &bodies[..] else {
        panic!("{} bodies", bodies.len())
    };
    // A short body must not keep the read buffer alive: it is a copy.
    assert_eq!(&short[..], b"hello");
    assert!(!(start..end).contains(&(short.as_ptr() as usize)));
    assert_eq!(long_body.len(), long);
    assert_eq!(long_body.as_ptr() as usize, start + long_at);
}

#[test]
fn put_with_a_bad_header_consumes_no_body() {
    // The body is then read as the next command line.
    assert_eq!(decode(b"put 1 2 3\r\nquit\r\n"), [BAD, Ok(Command::Quit)]);
    assert_eq!(
        decode(b"put 1 2 3 4294967296\r\nquit\r\n"),
        [BAD, Ok(Command::Quit)]
    );
    for line in [
        &b"put x 2 3 4\r\n"[..],
        b"put 1 2 3.5 4\r\n",
        b"put 1.5 2 3 4\r\n",
        b"put 1 -2 3 4\r\n",
        b"put 1 2 4294967296 4\r\n",
        b"put 4294967296 2 3 4\r\n",
        b"put 1 4294967296 3 4\r\n",
        b"put 1 2 3 \r\n",
    ] {
        assert_eq!(decode(line), [BAD], "{:?}", String::from_utf8_lossy(line));
    }
}

#[test]
fn put_too_big_skips_its_body_even_with_trailing_text() {
    let too_big = || counted(ProtocolError::JobTooBig, Op::Put);
    assert_eq!(
        decode_with(4, b"put 1 2 3 5\r\nhello\r\nquit\r\n"),
        [too_big(), Ok(Command::Quit)]
    );
    assert_eq!(
        decode_with(4, b"put 1 2 3 5 junk\r\nhello\r\nquit\r\n"),
        [too_big(), Ok(Command::Quit)]
    );
    // The skipped bytes need not end in CRLF: exactly bytes + 2 go.
    assert_eq!(
        decode_with(4, b"put 1 2 3 5\r\nhelloXXquit\r\n"),
        [too_big(), Ok(Command::Quit)]
    );
    assert_eq!(
        decode_with(5, b"put 1 2 3 5\r\nhello\r\n"),
        [Ok(put(1, secs(2), 3, b"hello"))]
    );
}

#[test]
fn put_with_trailing_text_is_counted_and_its_body_read_as_commands() {
    assert_eq!(
        decode(b"put 1 2 3 4 x\r\nquit\r\n"),
        [
            counted(ProtocolError::BadFormat, Op::Put),
            Ok(Command::Quit)
        ]
    );
    assert_eq!(
        decode(b"put 1 2 3 4.0\r\n"),
        [counted(ProtocolError::BadFormat, Op::Put)]
    );
    assert_eq!(
        decode(b"put 1 2 3 4 \r\n"),
        [counted(ProtocolError::BadFormat, Op::Put)]
    );
}

#[test]
fn put_without_crlf_after_the_body_consumes_bytes_plus_two() {
    assert_eq!(
        decode(b"put 1 2 3 5\r\nhelloXYlist-tubes\r\n"),
        [
            counted(ProtocolError::ExpectedCrlf, Op::Put),
            Ok(Command::ListTubes)
        ]
    );
    assert_eq!(
        decode(b"put 1 2 3 1\r\nab\r\n"),
        [counted(ProtocolError::ExpectedCrlf, Op::Put)]
    );
}

#[test]
fn too_big_body_is_skipped_as_it_arrives() {
    let mut codec = ServerCodec::new(10);
    let mut buf = BytesMut::from(&b"put 0 0 1 1048576\r\n"[..]);
    assert_eq!(codec.decode(&mut buf).unwrap(), None);
    let chunk = vec![b'x'; 65_536];
    for _ in 0..16 {
        buf.extend_from_slice(&chunk);
        assert_eq!(codec.decode(&mut buf).unwrap(), None);
        assert!(buf.is_empty(), "skipped bytes must not accumulate");
    }
    buf.extend_from_slice(b"\r\nquit\r\n");
    assert_eq!(
        codec.decode(&mut buf).unwrap(),
        Some(Err(Rejected {
            error: ProtocolError::JobTooBig,
            counted: Some(Op::Put)
        }))
    );
    assert_eq!(codec.decode(&mut buf).unwrap(), Some(Ok(Command::Quit)));
}

#[test]
fn waiting_for_a_body_reserves_room_for_it() {
    let mut codec = ServerCodec::new(DEFAULT_MAX_JOB_SIZE);
    let mut buf = BytesMut::from(&b"put 0 0 1 50000\r\n"[..]);
    assert_eq!(codec.decode(&mut buf).unwrap(), None);
    assert!(buf.capacity() >= 50_002);
}

#[test]
fn longest_line_is_accepted() {
    // 224 bytes with the CRLF.
    let name = "n".repeat(MAX_LINE_LEN - "use \r\n".len());
    let line = format!("use {name}\r\n");
    assert_eq!(line.len(), MAX_LINE_LEN);
    // Too long a name for a tube, but read as a line, so BAD_FORMAT comes from the name.
    assert_eq!(decode(line.as_bytes()), [BAD]);
    let line = format!("{}\r\nquit\r\n", "a".repeat(MAX_LINE_LEN - 2));
    assert_eq!(decode(line.as_bytes()), [UNKNOWN, Ok(Command::Quit)]);
}

#[test]
fn overlong_line_is_discarded_up_to_its_crlf_and_answered_once() {
    let input = format!("{}\r\nquit\r\n", "a".repeat(1000));
    assert_eq!(decode(input.as_bytes()), [BAD, Ok(Command::Quit)]);
    let input = format!(
        "{}\r\nquit\r\n",
        "a".repeat(MAX_LINE_LEN - 1 + MAX_LINE_LEN)
    );
    assert_eq!(decode(input.as_bytes()), [BAD, Ok(Command::Quit)]);
}

#[test]
fn overlong_line_is_discarded_as_it_arrives() {
    let mut codec = ServerCodec::new(DEFAULT_MAX_JOB_SIZE);
    let mut buf = BytesMut::new();
    for _ in 0..100 {
        buf.extend_from_slice(&[b'z'; 1000]);
        assert_eq!(codec.decode(&mut buf).unwrap(), None);
        assert!(buf.len() <= 1);
    }
    buf.extend_from_slice(b"\r");
    assert_eq!(codec.decode(&mut buf).unwrap(), None);
    assert_eq!(
        &buf[..],
        b"\r",
        "a trailing CR is kept: it may start the CRLF"
    );
    buf.extend_from_slice(b"\nstats\r\n");
    assert_eq!(codec.decode(&mut buf).unwrap(), Some(BAD));
    assert_eq!(codec.decode(&mut buf).unwrap(), Some(Ok(Command::Stats)));
}

/// beanstalkd bug (a): its `\r` at byte 224 and `\n` at byte 225 were missed,
/// and the next command was swallowed with the long line.
#[test]
fn crlf_straddling_the_limit_ends_the_line() {
    let input = format!(
        "{}\r\nlist-tube-used\r\nlist-tube-used\r\n",
        "a".repeat(MAX_LINE_LEN - 1)
    );
    assert_eq!(
        decode(input.as_bytes()),
        [BAD, Ok(Command::ListTubeUsed), Ok(Command::ListTubeUsed)]
    );
    // The same while discarding, at a later 224-byte boundary.
    let input = format!("{}\r\nquit\r\n", "a".repeat(2 * MAX_LINE_LEN - 1));
    assert_eq!(decode(input.as_bytes()), [BAD, Ok(Command::Quit)]);
}

/// beanstalkd bug (b): a stray `\r` hid the CRLF after it and the connection hung.
#[test]
fn stray_cr_does_not_hide_the_line_end() {
    assert_eq!(decode(b"use a\rb\r\nquit\r\n"), [BAD, Ok(Command::Quit)]);
    assert_eq!(decode(b"reserve\r\r\n"), [BAD]);
    assert_eq!(decode(b"kick 5\r\r\n"), [Ok(Command::Kick(5))]);
    assert_eq!(
        decode(b"put 0 0 1 1\r\r\nx\r\n"),
        [counted(ProtocolError::BadFormat, Op::Put), UNKNOWN]
    );
    // A stray CR inside an over-long line does not hide its CRLF either.
    let input = format!("{}\r{}\r\nquit\r\n", "a".repeat(100), "b".repeat(300));
    assert_eq!(decode(input.as_bytes()), [BAD, Ok(Command::Quit)]);
}

#[test]
fn fractions_in_the_four_duration_fields() {
    assert_eq!(
        decode(b"put 1 0.5 3 1\r\nx\r\n"),
        [Ok(put(1, ms(500), 3, b"x"))]
    );
    assert_eq!(
        ok(b"release 1 2 1.5\r\n"),
        Command::Release {
            id: 1,
            pri: 2,
            delay: ms(1500)
        }
    );
    assert_eq!(
        ok(b"reserve-with-timeout 0.25\r\n"),
        Command::ReserveWithTimeout(ms(250))
    );
    assert_eq!(
        ok(b"reserve-with-timeout 1.25e-1\r\n"),
        Command::ReserveWithTimeout(ms(125))
    );
    assert_eq!(
        ok(b"pause-tube foo 2.5e0\r\n"),
        Command::PauseTube {
            tube: tube("foo"),
            delay: ms(2500)
        }
    );
}

#[test]
fn fractions_keep_the_integer_bounds() {
    assert_eq!(decode(b"put 1 4294967295.5 3 1\r\nx\r\n"), [BAD, UNKNOWN]);
    assert_eq!(one(b"release 1 2 4294967295.000000001\r\n"), BAD);
    assert_eq!(one(b"reserve-with-timeout 2147483647.5\r\n"), BAD);
    assert_eq!(one(b"pause-tube foo 5e9\r\n"), BAD);
    assert_eq!(
        ok(b"pause-tube foo 4.294967295e9\r\n"),
        Command::PauseTube {
            tube: tube("foo"),
            delay: secs(4294967295)
        }
    );
}

#[test]
fn fractions_are_not_allowed_elsewhere() {
    // TTR, priority, sizes, ids and counts stay integers.
    assert_eq!(decode(b"put 1 2 0.5 1\r\nx\r\n"), [BAD, UNKNOWN]);
    assert_eq!(one(b"release 1 2.5 3\r\n"), BAD);
    assert_eq!(one(b"delete 1.0\r\n"), BAD);
    assert_eq!(
        ok(b"kick 1.5\r\n"),
        Command::Kick(1),
        "strtoul stops at the dot"
    );
    // Nor in odd forms.
    assert_eq!(one(b"release 1 2 1e\r\n"), BAD);
    assert_eq!(one(b"release 1 2 -0.5\r\n"), BAD);
    assert_eq!(one(b"release 1 2 .\r\n"), BAD);
    assert_eq!(one(b"release 1 2 .5\r\n"), BAD);
    // A number starts with a digit, so a fraction cannot glue onto the field before it.
    assert_eq!(decode(b"put 1.5 2 3\r\nabc\r\n"), [BAD, UNKNOWN]);
    assert_eq!(one(b"pause-tube foo .5\r\n"), BAD);
}

#[test]
fn pipelined_commands_in_one_buffer() {
    let input =
        b"use t\r\nput 5 0 60 3\r\nabc\r\nreserve\r\ndelete 1\r\nbogus\r\nwatch t\r\nstats\r\n";
    assert_eq!(
        decode(input),
        [
            Ok(Command::Use(tube("t"))),
            Ok(put(5, Duration::ZERO, 60, b"abc")),
            Ok(Command::Reserve),
            Ok(Command::Delete(1)),
            UNKNOWN,
            Ok(Command::Watch(tube("t"))),
            Ok(Command::Stats),
        ]
    );
}

#[test]
fn a_put_split_at_every_byte_position() {
    let input = b"put 7 1.5 30 12\r\nhello\r\nworld\r\ndelete 3\r\n";
    let expected = [
        Ok(put(7, ms(1500), 30, b"hello\r\nworld")),
        Ok(Command::Delete(3)),
    ];
    for at in 0..=input.len() {
        let mut codec = ServerCodec::new(DEFAULT_MAX_JOB_SIZE);
        let mut buf = BytesMut::from(&input[..at]);
        let mut got: Vec<Request> =
            std::iter::from_fn(|| codec.decode(&mut buf).unwrap()).collect();
        buf.extend_from_slice(&input[at..]);
        got.extend(std::iter::from_fn(|| codec.decode(&mut buf).unwrap()));
        assert_eq!(got, expected, "split at {at}");
        assert!(buf.is_empty());
    }
}

#[test]
fn a_put_fed_one_byte_at_a_time() {
    let input = b"put 7 0 30 5\r\nhello\r\n";
    let mut codec = ServerCodec::new(DEFAULT_MAX_JOB_SIZE);
    let mut buf = BytesMut::new();
    for (i, &b) in input.iter().enumerate() {
        buf.extend_from_slice(&[b]);
        let got = codec.decode(&mut buf).unwrap();
        if i + 1 < input.len() {
            assert_eq!(got, None, "complete after {} bytes", i + 1);
        } else {
            assert_eq!(got, Some(Ok(put(7, Duration::ZERO, 30, b"hello"))));
        }
    }
}

#[test]
fn unfinished_request_at_eof_is_dropped() {
    let mut codec = ServerCodec::new(DEFAULT_MAX_JOB_SIZE);
    let mut buf = BytesMut::from(&b"quit\r\nput 1 2 3 10\r\nhel"[..]);
    assert_eq!(codec.decode_eof(&mut buf).unwrap(), Some(Ok(Command::Quit)));
    assert_eq!(codec.decode_eof(&mut buf).unwrap(), None);
    assert!(buf.is_empty());
}

#[test]
fn refusals_are_not_counted_unless_beanstalkd_counts_them() {
    assert_eq!(one(b"delete x\r\n"), refused(ProtocolError::BadFormat));
    assert_eq!(
        one(b"frobnicate\r\n"),
        refused(ProtocolError::UnknownCommand)
    );
}

fn tagged(tags: sprout_protocol::Tags, body: &'static [u8]) -> Request {
    Ok(Command::Put {
        pri: 1,
        delay: Duration::ZERO,
        ttr: secs(3),
        body: Bytes::from_static(body),
        tags: Some(Box::new(tags)),
    })
}

#[test]
fn well_formed_tags_after_a_put_are_read_in_any_order() {
    use sprout_protocol::Tags;
    let all = Tags {
        idp: Some(("order-7".into(), 60)),
        grp: Some("g".into()),
        aft: Some("f(1)".into()),
        con: Some(("user;42".into(), 3)),
    };
    assert_eq!(
        decode(b"put 1 0 3 1 con:user;42:3  aft:f(1) grp:g idp:order-7:60 \r\nx\r\n"),
        [tagged(all, b"x")]
    );
    let defaults = Tags {
        idp: Some(("k".into(), 0)),
        con: Some(("c".into(), 1)),
        ..Tags::default()
    };
    assert_eq!(
        decode(b"put 1 0 3 1 idp:k con:c\r\nx\r\n"),
        [tagged(defaults, b"x")]
    );
    // A repeated tag: the last one counts, as in tuber.
    let last = Tags {
        grp: Some("b".into()),
        ..Tags::default()
    };
    assert_eq!(
        decode(b"put 1 0 3 1 grp:a grp:b\r\nx\r\n"),
        [tagged(last, b"x")]
    );
}

#[test]
fn anything_but_well_formed_tags_is_still_bad_format_with_the_body_unread() {
    for line in [
        &b"put 1 0 3 1 idp:"[..],
        b"put 1 0 3 1 idp:a:",
        b"put 1 0 3 1 idp:a:b",
        b"put 1 0 3 1 idp:a:-1",
        b"put 1 0 3 1 idp:a:4294967296",
        b"put 1 0 3 1 idp:-a",
        b"put 1 0 3 1 idp:a b",
        b"put 1 0 3 1 idp:a\tgrp:b",
        b"put 1 0 3 1 con:a:0",
        b"put 1 0 3 1 grp:a:1",
        b"put 1 0 3 1 foo:bar",
        b"put 1 0 3 1 IDP:a",
        b"put 1 0 3 1 idp:a:1:2",
        b"put 1 0 3 1idp:a",
        b"put 1 0 3 1 ",
    ] {
        let mut input = line.to_vec();
        input.extend_from_slice(b"\r\nquit\r\n");
        assert_eq!(
            decode(&input),
            [
                counted(ProtocolError::BadFormat, Op::Put),
                Ok(Command::Quit)
            ],
            "{}",
            String::from_utf8_lossy(line)
        );
    }
}

#[test]
fn the_batch_commands_read_like_beanstalkds_own() {
    assert_eq!(
        decode(b"reserve-batch 5\r\n"),
        [Ok(Command::ReserveBatch(5))]
    );
    assert_eq!(
        decode(b"reserve-batch 1000\r\n"),
        [Ok(Command::ReserveBatch(1000))]
    );
    assert_eq!(
        decode(b"delete-batch 1 2  3\r\n"),
        [Ok(Command::DeleteBatch(vec![1, 2, 3]))]
    );
    assert_eq!(
        decode(b"flush-tube foo\r\n"),
        [Ok(Command::FlushTube(TubeName::new(b"foo").unwrap()))]
    );
    assert_eq!(
        decode(b"reserve-batch 5 0.5\r\n"),
        [Ok(Command::ReserveBatchWait {
            n: 5,
            timeout: Duration::from_millis(500)
        })]
    );
    assert_eq!(
        decode(b"flush-buried foo\r\n"),
        [Ok(Command::FlushBuried(TubeName::new(b"foo").unwrap()))]
    );
    assert_eq!(decode(b"drain\r\n"), [Ok(Command::Drain)]);
    assert_eq!(decode(b"undrain\r\n"), [Ok(Command::Undrain)]);
    assert_eq!(decode(b"peek-reserved\r\n"), [Ok(Command::PeekReserved)]);
    assert_eq!(
        decode(b"stats-group g\r\n"),
        [Ok(Command::StatsGroup("g".into()))]
    );
    for bad in [
        &b"reserve-batch 0\r\n"[..],
        b"reserve-batch 1001\r\n",
        b"reserve-batch\r\n",
        b"reserve-batch x\r\n",
        b"reserve-batch 5 \r\n",
        b"reserve-batch 5 x\r\n",
        b"reserve-batch 5 1 2\r\n",
        b"flush-buried -x\r\n",
        b"drain now\r\n",
        b"undrainx\r\n",
        b"delete-batch 1 x\r\n",
        b"delete-batch 1 \r\n",
        b"flush-tube -x\r\n",
        b"peek-reservedx\r\n",
        b"stats-group\r\n",
    ] {
        assert_eq!(
            decode(bad),
            [Err(Rejected {
                error: ProtocolError::BadFormat,
                counted: None
            })],
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    // As for `delete` in beanstalkd, the word needs its space.
    assert_eq!(
        decode(b"delete-batch\r\n"),
        [Err(Rejected {
            error: ProtocolError::UnknownCommand,
            counted: None
        })]
    );
    // 1000 ids outgrow beanstalkd's 224-byte line; 1001 are too many.
    let ids = |n: u64| {
        (1..=n)
            .map(|i| format!(" {}", u64::MAX - i))
            .collect::<String>()
    };
    let line = format!("delete-batch{}\r\n", ids(1000));
    assert!(line.len() > 20_000);
    let [Ok(Command::DeleteBatch(read))] = &decode(line.as_bytes())[..] else {
        panic!("not a delete-batch")
    };
    assert_eq!(read.len(), 1000);
    let line = format!("delete-batch{}\r\n", ids(1001));
    assert!(matches!(&decode(line.as_bytes())[..], [Err(_)]));
}

#[test]
fn fire_reads_like_a_put_without_its_delay() {
    let fire = |id, pri, ttr, body: &'static [u8]| Command::Fire {
        id,
        pri,
        ttr: secs(ttr),
        body: bytes::Bytes::from_static(body),
    };
    assert_eq!(
        decode(b"fire 7 3 60 5\r\nhello\r\nfire 8 0 0 0\r\n\r\n"),
        [Ok(fire(7, 3, 60, b"hello")), Ok(fire(8, 0, 0, b""))]
    );
    // Its refusals count as fires, not puts; a bad header reads no body.
    assert_eq!(
        decode_with(4, b"fire 7 3 60 5\r\nhello\r\n"),
        [counted(ProtocolError::JobTooBig, Op::Fire)]
    );
    assert_eq!(
        decode(b"fire 7 3 60 2\r\nhello\r\n"),
        [counted(ProtocolError::ExpectedCrlf, Op::Fire), UNKNOWN]
    );
    for bad in [
        &b"fire 7 3 60\r\n"[..],
        b"fire 7 3 0.5 1\r\n",
        b"fire 7 3 60 1 idp:k\r\n",
        b"fire x 3 60 1\r\n",
    ] {
        assert_eq!(decode(bad), [BAD], "{:?}", String::from_utf8_lossy(bad));
    }
    assert_eq!(decode(b"fire\r\n"), [UNKNOWN]);
}

/// Everything `input` decodes to with `--auth`'s decoder.
fn decode_auth(input: &[u8]) -> Vec<Request> {
    let mut codec = ServerCodec::with_auth(DEFAULT_MAX_JOB_SIZE);
    let mut buf = BytesMut::from(input);
    std::iter::from_fn(|| codec.decode(&mut buf).unwrap()).collect()
}

#[test]
fn auth_is_an_unknown_command_without_auth() {
    for line in [
        &b"auth s3cret\r\n"[..],
        b"auth \r\n",
        b"auth\r\n",
        b"authx\r\n",
        b"auth a b\r\n",
    ] {
        assert_eq!(decode(line), [UNKNOWN], "{}", String::from_utf8_lossy(line));
    }
}

#[test]
fn auth_lines_with_auth() {
    use sprout_protocol::Token;
    let auth = |token: &str| Ok(Command::Auth(Token::new(token.to_owned())));
    for (line, want) in [
        (&b"auth s3cret\r\n"[..], auth("s3cret")),
        // The token is every byte after the first space.
        (b"auth  a b \r\n", auth(" a b ")),
        (b"auth \r\n", auth("")),
        // No space: not this command.
        (b"auth\r\n", UNKNOWN),
        (b"authx\r\n", UNKNOWN),
        (b"auth a\0b\r\n", BAD),
    ] {
        assert_eq!(
            decode_auth(line),
            [want],
            "{}",
            String::from_utf8_lossy(line)
        );
    }
    // Every other line reads as without `--auth`.
    assert_eq!(
        decode_auth(b"use a\r\nauth t\r\nfoo\r\n"),
        [
            Ok(Command::Use(TubeName::new(b"a").unwrap())),
            auth("t"),
            UNKNOWN
        ]
    );
    // The longest line still bounds it.
    let mut long = b"auth ".to_vec();
    long.extend(std::iter::repeat_n(b'x', MAX_LINE_LEN));
    long.extend_from_slice(b"\r\n");
    assert_eq!(decode_auth(&long), [BAD]);
}

#[test]
fn a_token_never_shows_in_debug_output() {
    let command = Command::Auth(sprout_protocol::Token::new("hunter2-secret"));
    let shown = format!("{command:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
}

#[test]
fn a_zero_size_limit_skips_bodies_as_they_arrive() {
    // A server sets 0 before a client authenticates: a put's body is
    // dropped as it comes, never held, whatever it announces.
    let mut codec = ServerCodec::with_auth(DEFAULT_MAX_JOB_SIZE);
    codec.set_max_job_size(0);
    let mut buf = BytesMut::from(&b"put 0 0 1 1048576\r\n"[..]);
    buf.extend(std::iter::repeat_n(b'x', 64 * 1024));
    assert_eq!(codec.decode(&mut buf).unwrap(), None);
    assert!(buf.is_empty(), "{} bytes held", buf.len());
    buf.extend(std::iter::repeat_n(b'x', 1024 * 1024 - 64 * 1024));
    buf.extend_from_slice(b"\r\nauth t\r\n");
    assert_eq!(
        codec.decode(&mut buf).unwrap(),
        Some(counted(ProtocolError::JobTooBig, Op::Put))
    );
    assert_eq!(
        codec.decode(&mut buf).unwrap(),
        Some(Ok(Command::Auth(sprout_protocol::Token::new("t"))))
    );
    // Once the limit is back, bodies are read again.
    codec.set_max_job_size(DEFAULT_MAX_JOB_SIZE);
    buf.extend_from_slice(b"put 0 0 1 2\r\nhi\r\n");
    assert!(matches!(
        codec.decode(&mut buf).unwrap(),
        Some(Ok(Command::Put { body, .. })) if body == "hi"
    ));
}
