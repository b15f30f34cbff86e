//! The client decoder and both encoders, byte for byte.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sprout_protocol::codec::{ClientCodec, ServerCodec};
use sprout_protocol::encode::{encode_command, encode_response};
use sprout_protocol::parse::parse_seconds;
use sprout_protocol::{Command, Response, TubeName};
use tokio_util::codec::{Decoder, Encoder};

fn decode(input: &[u8]) -> Vec<Response> {
    let mut codec = ClientCodec::new();
    let mut buf = BytesMut::from(input);
    let out = std::iter::from_fn(|| codec.decode(&mut buf).unwrap()).collect();
    assert!(buf.is_empty(), "left over: {buf:?}");
    out
}

fn malformed(input: &[u8]) -> bool {
    let mut codec = ClientCodec::new();
    let mut buf = BytesMut::from(input);
    matches!(codec.decode(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::InvalidData)
}

fn tube(name: &str) -> TubeName {
    TubeName::new(name.as_bytes()).unwrap()
}

fn response_bytes(response: &Response) -> BytesMut {
    let mut buf = BytesMut::new();
    encode_response(response, &mut buf);
    buf
}

fn command_bytes(command: &Command) -> BytesMut {
    let mut buf = BytesMut::new();
    encode_command(command, &mut buf);
    buf
}

#[test]
fn every_reply_is_read() {
    let input =
        b"INSERTED 12\r\nBURIED 3\r\nBURIED\r\nEXPECTED_CRLF\r\nJOB_TOO_BIG\r\nDRAINING\r\nNOT_DRAINING\r\n\
USING foo\r\nRESERVED 7 5\r\nhello\r\nDEADLINE_SOON\r\nTIMED_OUT\r\nDELETED\r\nNOT_FOUND\r\n\
RELEASED\r\nTOUCHED\r\nWATCHING 2\r\nNOT_IGNORED\r\nFOUND 8 0\r\n\r\nKICKED\r\nKICKED 4\r\n\
OK 4\r\n---\n\r\nPAUSED\r\nOUT_OF_MEMORY\r\nINTERNAL_ERROR\r\nBAD_FORMAT\r\nUNKNOWN_COMMAND\r\n";
    assert_eq!(
        decode(input),
        [
            Response::Inserted(12),
            Response::BuriedId(3),
            Response::Buried,
            Response::ExpectedCrlf,
            Response::JobTooBig,
            Response::Draining,
            Response::NotDraining,
            Response::Using(tube("foo")),
            Response::Reserved {
                id: 7,
                body: Bytes::from_static(b"hello")
            },
            Response::DeadlineSoon,
            Response::TimedOut,
            Response::Deleted,
            Response::NotFound,
            Response::Released,
            Response::Touched,
            Response::Watching(2),
            Response::NotIgnored,
            Response::Found {
                id: 8,
                body: Bytes::new()
            },
            Response::Kicked,
            Response::KickedCount(4),
            Response::Ok(Bytes::from_static(b"---\n")),
            Response::Paused,
            Response::OutOfMemory,
            Response::InternalError,
            Response::BadFormat,
            Response::UnknownCommand,
        ]
    );
}

#[test]
fn bodies_may_hold_crlf_and_arrive_late() {
    let input = b"RESERVED 1 4\r\n\r\n\r\n\r\nDELETED\r\n";
    for at in 0..=input.len() {
        let mut codec = ClientCodec::new();
        let mut buf = BytesMut::from(&input[..at]);
        let mut got: Vec<Response> =
            std::iter::from_fn(|| codec.decode(&mut buf).unwrap()).collect();
        buf.extend_from_slice(&input[at..]);
        got.extend(std::iter::from_fn(|| codec.decode(&mut buf).unwrap()));
        let body = Bytes::from_static(b"\r\n\r\n");
        assert_eq!(
            got,
            [Response::Reserved { id: 1, body }, Response::Deleted],
            "split at {at}"
        );
    }
}

#[test]
fn malformed_replies_are_errors() {
    for input in [
        &b"HELLO\r\n"[..],
        b"\r\n",
        b"deleted\r\n",
        b"DELETED \r\n",
        b"INSERTED\r\n",
        b"INSERTED x\r\n",
        b"INSERTED  1\r\n",
        b"INSERTED 1 \r\n",
        b"INSERTED +1\r\n",
        b"INSERTED 18446744073709551616\r\n",
        b"WATCHING 4294967296\r\n",
        b"KICKED -1\r\n",
        b"USING -foo\r\n",
        b"USING \r\n",
        b"RESERVED 1\r\n",
        b"RESERVED 1 2 3\r\n",
        b"RESERVED 1 4294967296\r\n",
        b"FOUND x 1\r\nx\r\n",
        b"OK\r\n",
        b"RESERVED 1 2\r\nabXY",
        b"OK 1\r\nab\r\n",
    ] {
        assert!(malformed(input), "{:?}", String::from_utf8_lossy(input));
    }
    let endless = [b'A'; 300];
    assert!(
        malformed(&endless),
        "a reply line has the command line's limit"
    );
}

#[test]
fn truncated_reply_is_an_error_only_at_eof() {
    let mut codec = ClientCodec::new();
    let mut buf = BytesMut::from(&b"FOUND 1 10\r\nabc"[..]);
    assert_eq!(codec.decode(&mut buf).unwrap(), None);
    assert!(codec.decode_eof(&mut buf).is_err());
}

#[test]
fn replies_are_written_byte_for_byte() {
    let cases: [(Response, &[u8]); 9] = [
        (Response::Inserted(42), b"INSERTED 42\r\n"),
        (
            Response::BuriedId(u64::MAX),
            b"BURIED 18446744073709551615\r\n",
        ),
        (Response::Buried, b"BURIED\r\n"),
        (Response::Using(tube("a.b")), b"USING a.b\r\n"),
        (
            Response::Reserved {
                id: 3,
                body: "hi".into(),
            },
            b"RESERVED 3 2\r\nhi\r\n",
        ),
        (
            Response::Found {
                id: 0,
                body: Bytes::new(),
            },
            b"FOUND 0 0\r\n\r\n",
        ),
        (Response::KickedCount(0), b"KICKED 0\r\n"),
        (
            Response::Ok("---\n- default\n".into()),
            b"OK 14\r\n---\n- default\n\r\n",
        ),
        (Response::UnknownCommand, b"UNKNOWN_COMMAND\r\n"),
    ];
    for (response, bytes) in cases {
        assert_eq!(&response_bytes(&response)[..], bytes, "{response:?}");
    }
}

#[test]
fn commands_are_written_byte_for_byte() {
    let cases: [(Command, &[u8]); 10] = [
        (
            Command::Put {
                pri: 1,
                delay: Duration::ZERO,
                ttr: Duration::from_secs(60),
                body: "abc".into(),
                tags: None,
            },
            b"put 1 0 60 3\r\nabc\r\n",
        ),
        (
            Command::Put {
                pri: 0,
                delay: Duration::from_millis(1500),
                ttr: Duration::from_millis(100),
                body: Bytes::new(),
                tags: None,
            },
            b"put 0 1.5 1 0\r\n\r\n",
        ),
        (
            Command::ReserveWithTimeout(Duration::from_nanos(1)),
            b"reserve-with-timeout 0.000000001\r\n",
        ),
        (
            Command::ReserveWithTimeout(Duration::from_micros(250_010)),
            b"reserve-with-timeout 0.25001\r\n",
        ),
        (
            Command::Release {
                id: 5,
                pri: 2,
                delay: Duration::from_secs(3),
            },
            b"release 5 2 3\r\n",
        ),
        (Command::Bury { id: 5, pri: 2 }, b"bury 5 2\r\n"),
        (Command::Kick(u32::MAX), b"kick 4294967295\r\n"),
        (
            Command::PauseTube {
                tube: tube("t"),
                delay: Duration::from_millis(10),
            },
            b"pause-tube t 0.01\r\n",
        ),
        (Command::StatsTube(tube("t")), b"stats-tube t\r\n"),
        (Command::ListTubesWatched, b"list-tubes-watched\r\n"),
    ];
    for (command, bytes) in cases {
        assert_eq!(&command_bytes(&command)[..], bytes, "{command:?}");
    }
}

#[test]
fn fractional_seconds_are_written_so_they_read_back_exactly() {
    for nanos in [1, 10, 999_999_999, 500_000_000, 123_456_789, 100] {
        let d = Duration::new(7, nanos);
        let mut buf = BytesMut::new();
        encode_command(&Command::ReserveWithTimeout(d), &mut buf);
        let text = &buf[b"reserve-with-timeout ".len()..buf.len() - 2];
        assert_eq!(parse_seconds(text), Some(d));
        assert!(!text.ends_with(b"0"), "no trailing zeros: {text:?}");
    }
}

#[test]
fn codecs_encode_by_value_and_by_reference() {
    let mut server = ServerCodec::new(10);
    let mut buf = BytesMut::new();
    server.encode(&Response::Deleted, &mut buf).unwrap();
    server.encode(Response::Touched, &mut buf).unwrap();
    assert_eq!(&buf[..], b"DELETED\r\nTOUCHED\r\n");

    let mut client = ClientCodec::new();
    let mut buf = BytesMut::new();
    client.encode(&Command::Reserve, &mut buf).unwrap();
    client.encode(Command::Quit, &mut buf).unwrap();
    assert_eq!(&buf[..], b"reserve\r\nquit\r\n");
}

#[test]
fn tubers_replies_are_written_and_read_back() {
    use sprout_protocol::DupState;
    let dup = |state, pri| Response::InsertedDup { id: 7, state, pri };
    let cases: [(Response, &[u8]); 6] = [
        (dup(DupState::Ready, None), b"INSERTED 7 READY\r\n"),
        (
            dup(DupState::Reserved, Some(5)),
            b"INSERTED 7 RESERVED 5\r\n",
        ),
        (dup(DupState::Deleted, None), b"INSERTED 7 DELETED\r\n"),
        (
            Response::DeletedBatch {
                deleted: 3,
                not_found: 1,
            },
            b"DELETED_BATCH 3 1\r\n",
        ),
        (Response::Flushed(1_000_000), b"FLUSHED 1000000\r\n"),
        (
            Response::InsertedDup {
                id: 1,
                state: DupState::Buried,
                pri: Some(0),
            },
            b"INSERTED 1 BURIED 0\r\n",
        ),
    ];
    for (response, bytes) in cases {
        assert_eq!(&response_bytes(&response)[..], bytes, "{response:?}");
        let mut codec = ClientCodec::new();
        let mut buf = BytesMut::from(bytes);
        assert_eq!(codec.decode(&mut buf).unwrap(), Some(response));
    }
    let batch = Response::ReservedBatch(vec![(1, "a".into()), (2, Bytes::new())]);
    assert_eq!(
        &response_bytes(&batch)[..],
        b"RESERVED_BATCH 2\r\nRESERVED 1 1\r\na\r\nRESERVED 2 0\r\n\r\n"
    );
    let mut codec = ClientCodec::new();
    for bad in [
        &b"INSERTED 7 SLEEPING\r\n"[..],
        b"INSERTED 7 READY x\r\n",
        b"INSERTED 7 READY 1 2\r\n",
    ] {
        assert!(
            codec.decode(&mut BytesMut::from(bad)).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn tagged_puts_and_the_batch_commands_are_written_byte_for_byte() {
    use sprout_protocol::Tags;
    let tags = Tags {
        idp: Some(("k".into(), 0)),
        grp: Some("g".into()),
        aft: Some("f".into()),
        con: Some(("c".into(), 2)),
    };
    let put = Command::Put {
        pri: 1,
        delay: Duration::ZERO,
        ttr: Duration::from_secs(60),
        body: "abc".into(),
        tags: Some(Box::new(tags)),
    };
    let fire = Command::Fire {
        id: 9,
        pri: 2,
        ttr: Duration::from_secs(30),
        body: "xy".into(),
    };
    let cases: [(Command, &[u8]); 10] = [
        (put, b"put 1 0 60 3 idp:k:0 grp:g aft:f con:c:2\r\nabc\r\n"),
        (fire, b"fire 9 2 30 2\r\nxy\r\n"),
        (Command::ReserveBatch(5), b"reserve-batch 5\r\n"),
        (Command::DeleteBatch(vec![1, 2]), b"delete-batch 1 2\r\n"),
        (Command::FlushTube(tube("t")), b"flush-tube t\r\n"),
        (
            Command::ReserveBatchWait {
                n: 5,
                timeout: Duration::from_secs(30),
            },
            b"reserve-batch 5 30\r\n",
        ),
        (Command::FlushBuried(tube("t")), b"flush-buried t\r\n"),
        (Command::Drain, b"drain\r\n"),
        (Command::Undrain, b"undrain\r\n"),
        (Command::StatsGroup("g".into()), b"stats-group g\r\n"),
    ];
    for (command, bytes) in cases {
        let mut dst = BytesMut::new();
        sprout_protocol::encode::encode_command(&command, &mut dst);
        assert_eq!(&dst[..], bytes, "{command:?}");
    }
}

#[test]
fn a_reserved_batch_is_read_as_one_reply() {
    let mut codec = ClientCodec::new();
    let mut buf = BytesMut::from(
        &b"RESERVED_BATCH 0\r\nRESERVED_BATCH 2\r\nRESERVED 2 2\r\nbb\r\nRESERVED 1 1\r\na"[..],
    );
    assert_eq!(
        codec.decode(&mut buf).unwrap(),
        Some(Response::ReservedBatch(Vec::new()))
    );
    // The last body is still on its way.
    assert_eq!(codec.decode(&mut buf).unwrap(), None);
    buf.extend_from_slice(b"\r\nDELETED\r\n");
    assert_eq!(
        codec.decode(&mut buf).unwrap(),
        Some(Response::ReservedBatch(vec![
            (2, "bb".into()),
            (1, "a".into())
        ]))
    );
    assert_eq!(codec.decode(&mut buf).unwrap(), Some(Response::Deleted));
}

#[test]
fn auth_and_its_replies_are_written_and_read_back() {
    use sprout_protocol::Token;
    assert_eq!(
        &command_bytes(&Command::Auth(Token::new("s3cret")))[..],
        b"auth s3cret\r\n"
    );
    for (response, bytes) in [
        (Response::Authenticated, &b"AUTHENTICATED\r\n"[..]),
        (Response::Unauthorized, b"UNAUTHORIZED\r\n"),
        (Response::AuthRequired, b"AUTH_REQUIRED\r\n"),
        (Response::Forbidden, b"FORBIDDEN\r\n"),
    ] {
        assert_eq!(&response_bytes(&response)[..], bytes);
        assert_eq!(decode(bytes), [response]);
    }
}
