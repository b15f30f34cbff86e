//! Feeds arbitrary bytes, cut into arbitrary chunks, to both decoders.
//!
//! The first bytes of the input choose the server's size limit and the chunk
//! sizes; the rest is the stream. Besides not panicking, the server decoder
//! must yield the same requests whether the stream arrives whole or in chunks,
//! and must never hold more than a line (or the rest of a body) in its buffer.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use sprout_protocol::codec::{ClientCodec, ServerCodec};
use sprout_protocol::{Request, MAX_LINE_LEN};
use tokio_util::codec::Decoder;

fuzz_target!(|data: &[u8]| {
    let Some((&[limit, seed], stream)) = data.split_first_chunk::<2>() else {
        return;
    };
    let max_job_size = u32::from(limit);
    let chunks = chunk_sizes(seed, stream.len());

    let whole = server_requests(max_job_size, &[stream]);
    let pieces = split(stream, &chunks);
    assert_eq!(whole, server_requests(max_job_size, &pieces));

    client_responses(&[stream]);
    client_responses(&pieces);
});

/// Chunk sizes from 1 to 16 bytes, from a small generator seeded by `seed`.
fn chunk_sizes(seed: u8, total: usize) -> Vec<usize> {
    let mut state = u32::from(seed) | 1;
    let mut sizes = Vec::new();
    let mut covered = 0;
    while covered < total {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let size = (state % 16 + 1) as usize;
        sizes.push(size);
        covered += size;
    }
    sizes
}

fn split<'a>(stream: &'a [u8], sizes: &[usize]) -> Vec<&'a [u8]> {
    let mut rest = stream;
    sizes
        .iter()
        .map(|&size| {
            let (head, tail) = rest.split_at(size.min(rest.len()));
            rest = tail;
            head
        })
        .collect()
}

fn server_requests(max_job_size: u32, chunks: &[&[u8]]) -> Vec<Request> {
    let mut codec = ServerCodec::new(max_job_size);
    let mut buf = BytesMut::new();
    let mut requests = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        while let Some(request) = codec
            .decode(&mut buf)
            .expect("the server decoder never fails")
        {
            requests.push(request);
        }
        // Only a line, or a body no bigger than the limit, is ever kept.
        assert!(buf.len() < MAX_LINE_LEN || buf.len() < max_job_size as usize + 2);
    }
    requests
}

fn client_responses(chunks: &[&[u8]]) {
    let mut codec = ClientCodec::new();
    let mut buf = BytesMut::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(_)) => continue,
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
}
