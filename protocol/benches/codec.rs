//! Throughput of the codecs on a realistic mix: producers putting 100-byte
//! jobs, workers reserving and deleting them, and the replies to all three.

use std::hint::black_box;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use sprout_protocol::codec::{ClientCodec, ServerCodec};
use sprout_protocol::encode::{encode_command, encode_response};
use sprout_protocol::{Command, Response, DEFAULT_MAX_JOB_SIZE};
use tokio_util::codec::Decoder;

/// Rounds of put + reserve + delete in one buffer.
const ROUNDS: u64 = 1000;

fn commands() -> Vec<Command> {
    let body = Bytes::from(vec![b'j'; 100]);
    (1..=ROUNDS)
        .flat_map(|id| {
            [
                Command::Put {
                    pri: 1024,
                    delay: Duration::ZERO,
                    ttr: Duration::from_secs(60),
                    body: body.clone(),
                    tags: None,
                },
                Command::Reserve,
                Command::Delete(id),
            ]
        })
        .collect()
}

fn responses() -> Vec<Response> {
    let body = Bytes::from(vec![b'j'; 100]);
    (1..=ROUNDS)
        .flat_map(|id| {
            [
                Response::Inserted(id),
                Response::Reserved {
                    id,
                    body: body.clone(),
                },
                Response::Deleted,
            ]
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let commands = commands();
    let responses = responses();
    let mut wire_commands = BytesMut::new();
    commands
        .iter()
        .for_each(|command| encode_command(command, &mut wire_commands));
    let mut wire_responses = BytesMut::new();
    responses
        .iter()
        .for_each(|response| encode_response(response, &mut wire_responses));

    let mut group = c.benchmark_group("codec");
    group.throughput(Throughput::Elements(3 * ROUNDS));
    group.bench_function("decode commands", |b| {
        b.iter_batched(
            || wire_commands.clone(),
            |mut buf| {
                let mut codec = ServerCodec::new(DEFAULT_MAX_JOB_SIZE);
                while let Some(request) = codec.decode(&mut buf).unwrap() {
                    black_box(request.unwrap());
                }
            },
            BatchSize::SmallInput,
        )
    });
    group.bench_function("encode responses", |b| {
        let mut buf = BytesMut::with_capacity(wire_responses.len());
        b.iter(|| {
            buf.clear();
            responses
                .iter()
                .for_each(|response| encode_response(response, &mut buf));
            black_box(&buf);
        })
    });
    group.bench_function("decode responses", |b| {
        b.iter_batched(
            || wire_responses.clone(),
            |mut buf| {
                let mut codec = ClientCodec::new();
                while let Some(response) = codec.decode(&mut buf).unwrap() {
                    black_box(response);
                }
            },
            BatchSize::SmallInput,
        )
    });
    group.bench_function("encode commands", |b| {
        let mut buf = BytesMut::with_capacity(wire_commands.len());
        b.iter(|| {
            buf.clear();
            commands
                .iter()
                .for_each(|command| encode_command(command, &mut buf));
            black_box(&buf);
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
