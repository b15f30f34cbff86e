//! The index log's record format, and its replay at open.
//!
//! The format: the 8 bytes [`MAGIC`], then records, each
//! `len (u32 LE) ++ crc (u32 LE) ++ payload` where `len` is the payload's
//! length and `crc` the CRC-32 of `len ++ payload`; the payload is
//! `op (u8) ++ node (u16 LE) ++ entry ++ key`, where `op` is [`OP_SET`] (and
//! `entry` is `expire_at_ms (i64 LE) ++ timer (u64 LE)`) or [`OP_REMOVE`]
//! (and `entry` is absent).

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

use super::key_entry::KeyEntry;

/// The first bytes of the log (the format's version is its last digit).
pub(super) const MAGIC: &[u8; 8] = b"SPRIDX1\n";
pub(super) const OP_SET: u8 = 1;
pub(super) const OP_REMOVE: u8 = 2;
/// Record header: length and CRC.
pub(super) const HEADER: usize = 8;
/// Payload without the key: op and node.
pub(super) const PAYLOAD_MIN: usize = 3;
/// An encoded [`KeyEntry`].
pub(super) const ENTRY: usize = 16;

/// The size of a set record for a key of `key_len` bytes.
pub(super) fn set_len(key_len: usize) -> u64 {
    (HEADER + PAYLOAD_MIN + ENTRY + key_len) as u64
}

/// Appends a record to `out`: a set with `Some(entry)`, else a remove.
pub(super) fn encode(out: &mut Vec<u8>, node: u16, key: &[u8], entry: Option<KeyEntry>) {
    let start = out.len();
    let len = PAYLOAD_MIN + entry.map_or(0, |_| ENTRY) + key.len();
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    match entry {
        Some(e) => {
            out.push(OP_SET);
            out.extend_from_slice(&node.to_le_bytes());
            out.extend_from_slice(&e.expire_at_ms.to_le_bytes());
            out.extend_from_slice(&e.timer.to_le_bytes());
        }
        None => {
            out.push(OP_REMOVE);
            out.extend_from_slice(&node.to_le_bytes());
        }
    }
    out.extend_from_slice(key);
    let crc = checksum(&out[start..start + 4], &out[start + HEADER..]);
    out[start + 4..start + HEADER].copy_from_slice(&crc.to_le_bytes());
}

pub(super) fn checksum(len: &[u8], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(len);
    h.update(payload);
    h.finalize()
}

/// Decodes a payload whose checksum matched.
pub(super) fn decode(payload: &[u8]) -> Option<(u16, &[u8], Option<KeyEntry>)> {
    let (&op, rest) = payload.split_first()?;
    let (node, rest) = rest.split_at_checked(2)?;
    let node = u16::from_le_bytes(node.try_into().ok()?);
    match op {
        OP_SET => {
            let (entry, key) = rest.split_at_checked(ENTRY)?;
            let (exp, timer) = entry.split_at(8);
            let entry = KeyEntry {
                expire_at_ms: i64::from_le_bytes(exp.try_into().ok()?),
                timer: u64::from_le_bytes(timer.try_into().ok()?),
            };
            Some((node, key, Some(entry)))
        }
        OP_REMOVE => Some((node, rest, None)),
        _ => None,
    }
}

/// Replays the log, handing each change to `apply`; returns its length,
/// after truncating a torn or corrupt tail.
pub(super) fn replay(
    file: &File,
    path: &Path,
    mut apply: impl FnMut(u16, &[u8], Option<KeyEntry>),
) -> io::Result<u64> {
    let size = file.metadata()?.len();
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut magic = [0; MAGIC.len()];
    if reader.read_exact(&mut magic).is_err() || &magic != MAGIC {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a bridge index log", path.display()),
        ));
    }
    let mut good = MAGIC.len() as u64;
    let mut payload = Vec::new();
    let mut records = 0u64;
    let problem = loop {
        let mut header = [0; HEADER];
        match read_full(&mut reader, &mut header)? {
            0 => break None,
            n if n < HEADER => break Some("a torn record"),
            _ => {}
        }
        let (len, crc) = header.split_at(4);
        let n = u32::from_le_bytes(len.try_into().unwrap()) as u64;
        if n < PAYLOAD_MIN as u64 || n > size - good - HEADER as u64 {
            break Some("a torn or corrupt record");
        }
        payload.resize(n as usize, 0);
        if read_full(&mut reader, &mut payload)? < payload.len() {
            break Some("a torn record");
        }
        if checksum(len, &payload) != u32::from_le_bytes(crc.try_into().unwrap()) {
            break Some("a record with a wrong checksum");
        }
        let Some((node, key, entry)) = decode(&payload) else {
            break Some("a record it cannot decode");
        };
        apply(node, key, entry);
        good += HEADER as u64 + n;
        records += 1;
    };
    if let Some(problem) = problem {
        tracing::warn!(
            offset = good,
            dropped_bytes = size - good,
            "bridge index {}: {problem}; the log ends there and is truncated \
             (the index may lag: reconciliation with Redis catches up)",
            path.display()
        );
        file.set_len(good)?;
        file.sync_all()?;
    }
    tracing::debug!(records, bytes = good, "bridge index replayed");
    Ok(good)
}

/// Reads until `buf` is full or the end of the file; returns how much.
pub(super) fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match reader.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
