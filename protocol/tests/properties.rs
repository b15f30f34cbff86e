//! Properties over generated input: what is encoded is decoded unchanged, no
//! input makes a decoder panic, and decoding does not depend on how the bytes
//! are cut into reads.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use proptest::collection::vec;
use proptest::prelude::*;
use sprout_protocol::codec::{ClientCodec, ServerCodec};
use sprout_protocol::encode::{encode_command, encode_response};
use sprout_protocol::{Command, Request, Response, TubeName, MAX_LINE_LEN, MAX_SECONDS};
use tokio_util::codec::Decoder;

/// Tube names up to `max_len` bytes.
fn tube(max_len: usize) -> impl Strategy<Value = TubeName> {
    let pattern = format!(
        "[A-Za-z0-9+/;.$_()][A-Za-z0-9+/;.$_()-]{{0,{}}}",
        max_len - 1
    );
    proptest::string::string_regex(&pattern)
        .unwrap()
        .prop_map(|name| TubeName::new(name.as_bytes()).unwrap())
}

/// Durations up to `max_secs`, mostly with a fraction of a second.
fn duration(max_secs: u64) -> impl Strategy<Value = Duration> {
    prop_oneof![
        (0..max_secs, 0..1_000_000_000u32).prop_map(|(s, n)| Duration::new(s, n)),
        (0..=max_secs).prop_map(Duration::from_secs),
        Just(Duration::from_secs(max_secs)),
    ]
}

fn body() -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..300).prop_map(Bytes::from)
}

fn command() -> impl Strategy<Value = Command> {
    let id = any::<u64>;
    // `pause-tube`, a 20-byte delay and the CRLF leave 190 bytes for the name.
    prop_oneof![
        (any::<u32>(), duration(MAX_SECONDS), 0..=MAX_SECONDS, body()).prop_map(
            |(pri, delay, ttr, body)| Command::Put {
                pri,
                delay,
                ttr: Duration::from_secs(ttr),
                body,
                tags: None,
            }
        ),
        tube(200).prop_map(Command::Use),
        Just(Command::Reserve),
        duration(i32::MAX as u64).prop_map(Command::ReserveWithTimeout),
        id().prop_map(Command::ReserveJob),
        id().prop_map(Command::Delete),
        (id(), any::<u32>(), duration(MAX_SECONDS)).prop_map(|(id, pri, delay)| Command::Release {
            id,
            pri,
            delay
        }),
        (id(), any::<u32>()).prop_map(|(id, pri)| Command::Bury { id, pri }),
        id().prop_map(Command::Touch),
        tube(200).prop_map(Command::Watch),
        tube(200).prop_map(Command::Ignore),
        id().prop_map(Command::Peek),
        Just(Command::PeekReady),
        Just(Command::PeekDelayed),
        Just(Command::PeekBuried),
        any::<u32>().prop_map(Command::Kick),
        id().prop_map(Command::KickJob),
        Just(Command::Stats),
        id().prop_map(Command::StatsJob),
        tube(200).prop_map(Command::StatsTube),
        Just(Command::ListTubes),
        Just(Command::ListTubeUsed),
        Just(Command::ListTubesWatched),
        (tube(190), duration(MAX_SECONDS))
            .prop_map(|(tube, delay)| Command::PauseTube { tube, delay }),
        Just(Command::Quit),
    ]
}

fn response() -> impl Strategy<Value = Response> {
    let id = any::<u64>;
    prop_oneof![
        id().prop_map(Response::Inserted),
        id().prop_map(Response::BuriedId),
        Just(Response::Buried),
        Just(Response::ExpectedCrlf),
        Just(Response::JobTooBig),
        Just(Response::Draining),
        Just(Response::NotDraining),
        tube(200).prop_map(Response::Using),
        (id(), body()).prop_map(|(id, body)| Response::Reserved { id, body }),
        Just(Response::DeadlineSoon),
        Just(Response::TimedOut),
        Just(Response::Deleted),
        Just(Response::NotFound),
        Just(Response::Released),
        Just(Response::Touched),
        any::<u32>().prop_map(Response::Watching),
        Just(Response::NotIgnored),
        (id(), body()).prop_map(|(id, body)| Response::Found { id, body }),
        Just(Response::Kicked),
        any::<u32>().prop_map(Response::KickedCount),
        body().prop_map(Response::Ok),
        Just(Response::Paused),
        Just(Response::OutOfMemory),
        Just(Response::InternalError),
        Just(Response::BadFormat),
        Just(Response::UnknownCommand),
    ]
}

/// Bytes a client might plausibly send: valid commands, near misses, noise.
fn wire_piece() -> impl Strategy<Value = Vec<u8>> {
    let encoded = command().prop_map(|c| {
        let mut buf = BytesMut::new();
        encode_command(&c, &mut buf);
        buf.to_vec()
    });
    prop_oneof![
        4 => encoded,
        1 => vec(any::<u8>(), 0..40),
        1 => vec(prop_oneof![Just(b'\r'), Just(b'\n'), Just(b' '), Just(b'a')], 0..600),
        1 => (0..40u32, prop_oneof![Just(""), Just(" x")], vec(any::<u8>(), 0..45))
            .prop_map(|(n, tail, body)| {
                let mut piece = format!("put 1 0.5 1 {n}{tail}\r\n").into_bytes();
                piece.extend(body);
                piece
            }),
    ]
}

fn requests(max_job_size: u32, chunks: impl IntoIterator<Item = Vec<u8>>) -> Vec<Request> {
    let mut codec = ServerCodec::new(max_job_size);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(&chunk);
        while let Some(request) = codec.decode(&mut buf).unwrap() {
            out.push(request);
        }
        assert!(
            buf.len() < MAX_LINE_LEN.max(max_job_size as usize + 2),
            "holds {} bytes",
            buf.len()
        );
    }
    out
}

/// Cuts `input` at the given sizes (cycled), the last piece taking the rest.
fn cut(input: &[u8], sizes: &[usize]) -> Vec<Vec<u8>> {
    let mut pieces = Vec::new();
    let mut rest = input;
    for &size in sizes.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (head, tail) = rest.split_at(size.min(rest.len()));
        pieces.push(head.to_vec());
        rest = tail;
    }
    pieces
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn commands_round_trip(command in command()) {
        let mut buf = BytesMut::new();
        encode_command(&command, &mut buf);
        prop_assert_eq!(requests(u32::MAX, [buf.to_vec()]), vec![Ok(command)]);
    }

    #[test]
    fn responses_round_trip(responses in vec(response(), 1..5)) {
        let mut buf = BytesMut::new();
        for response in &responses {
            encode_response(response, &mut buf);
        }
        let mut codec = ClientCodec::new();
        let decoded: Vec<Response> = std::iter::from_fn(|| codec.decode(&mut buf).unwrap()).collect();
        prop_assert_eq!(decoded, responses);
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn server_decoder_takes_any_bytes(input in vec(any::<u8>(), 0..2000), max in 0..100u32) {
        // Never an error, never a panic; `requests` checks the buffer stays bounded.
        requests(max, [input]);
    }

    #[test]
    fn client_decoder_takes_any_bytes(input in vec(any::<u8>(), 0..2000)) {
        let mut codec = ClientCodec::new();
        let mut buf = BytesMut::from(&input[..]);
        while let Ok(Some(_)) = codec.decode(&mut buf) {}
    }

    #[test]
    fn server_decoding_ignores_read_boundaries(
        pieces in vec(wire_piece(), 0..12),
        sizes in vec(1..300usize, 1..20),
        max in 0..64u32,
    ) {
        let input = pieces.concat();
        let whole = requests(max, [input.clone()]);
        prop_assert_eq!(requests(max, cut(&input, &sizes)), whole);
    }

    #[test]
    fn client_decoding_ignores_read_boundaries(
        responses in vec(response(), 0..8),
        sizes in vec(1..300usize, 1..20),
    ) {
        let mut encoded = BytesMut::new();
        for response in &responses {
            encode_response(response, &mut encoded);
        }
        let mut codec = ClientCodec::new();
        let mut buf = BytesMut::new();
        let mut decoded = Vec::new();
        for piece in cut(&encoded, &sizes) {
            buf.extend_from_slice(&piece);
            decoded.extend(std::iter::from_fn(|| codec.decode(&mut buf).unwrap()));
        }
        prop_assert_eq!(decoded, responses);
    }
}
