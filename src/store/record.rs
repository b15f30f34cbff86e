//! How jobs are laid out in the sled tree.
//!
//! One tree, four kinds of key, so one `sled::Batch` (atomic) can carry a
//! whole group commit:
//! - `j` + slot: a job's image (its id included) without its body,
//!   rewritten on every change (a few dozen bytes);
//! - `b` + slot: the body, written once by the put and removed by the delete;
//! - `n`: the next job id to issue, so ids stay above every id ever issued
//!   even when the newest jobs were deleted before a restart;
//! - `c`: the number of the last batch (see `checkpoint.rs`).
//!
//! Keys are storage slots (see `slots.rs`), not job ids: a queue inserts at
//! ever higher ids and deletes at the low end, and sled 0.34 never merges the
//! tree nodes such deletes empty, so id keys made the store grow without
//! bound under churn (measured: ~15 MiB of disk and ~170 MiB of RSS per
//! 100k put+delete cycles with 1000 jobs live). Reused slots keep the key
//! space as small as the number of live jobs.
//!
//! An image starts with a format version; anything that does not decode
//! exactly is reported as corrupt, never guessed at.

use std::fmt;

use sprout_protocol::{JobId, TubeName};

use crate::engine::{JobImage, Stored};

pub const NEXT_ID_KEY: &[u8] = b"n";
pub const COMMIT_KEY: &[u8] = b"c";
pub const JOB_PREFIX: u8 = b'j';
pub const BODY_PREFIX: u8 = b'b';

const VERSION: u8 = 1;
/// Version, id, state tag, state value, pri, ttr, delay, created, five
/// counters, tube name length; then the name.
const FIXED_LEN: usize = 1 + 8 + 1 + 8 + 4 + 4 + 4 + 8 + 5 * 4 + 1;

/// Where a job is kept in the tree.
pub type Slot = u32;

pub fn job_key(slot: Slot) -> [u8; 5] {
    key(JOB_PREFIX, slot)
}

pub fn body_key(slot: Slot) -> [u8; 5] {
    key(BODY_PREFIX, slot)
}

fn key(prefix: u8, slot: Slot) -> [u8; 5] {
    let mut k = [prefix; 5];
    k[1..].copy_from_slice(&slot.to_be_bytes());
    k
}

/// The slot in a `j`/`b` key.
pub fn key_slot(key: &[u8]) -> Result<Slot, Corrupt> {
    let bytes: [u8; 4] = key
        .get(1..)
        .and_then(|b| b.try_into().ok())
        .ok_or(Corrupt("a job key of the wrong length"))?;
    Ok(Slot::from_be_bytes(bytes))
}

/// A stored value that does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt(pub &'static str);

impl fmt::Display for Corrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// The stored form of an image's metadata (everything but id and body).
pub fn encode_meta(image: &JobImage) -> Vec<u8> {
    let name = image.tube.as_bytes();
    let mut out = Vec::with_capacity(FIXED_LEN + name.len());
    let (tag, value) = match image.state {
        Stored::Ready => (0u8, 0),
        Stored::Reserved => (1, 0),
        Stored::Delayed(at) => (2, at),
        Stored::Buried(seq) => (3, seq),
    };
    out.push(VERSION);
    out.extend_from_slice(&image.id.to_le_bytes());
    out.push(tag);
    out.extend_from_slice(&value.to_le_bytes());
    for n in [image.pri, image.ttr, image.delay] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out.extend_from_slice(&image.created.to_le_bytes());
    for n in [
        image.reserves,
        image.timeouts,
        image.releases,
        image.buries,
        image.kicks,
    ] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    // Tube names are at most 200 bytes.
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out
}

/// Reads back what [`encode_meta`] wrote, for a job with `body`.
pub fn decode_meta(meta: &[u8], body: bytes::Bytes) -> Result<JobImage, Corrupt> {
    let mut r = Reader(meta);
    if r.u8()? != VERSION {
        return Err(Corrupt("an unknown record version"));
    }
    let id: JobId = r.u64()?;
    let tag = r.u8()?;
    let value = r.u64()?;
    let state = match tag {
        0 => Stored::Ready,
        1 => Stored::Reserved,
        2 => Stored::Delayed(value),
        3 => Stored::Buried(value),
        _ => return Err(Corrupt("an unknown job state")),
    };
    let (pri, ttr, delay) = (r.u32()?, r.u32()?, r.u32()?);
    let created = r.u64()?;
    let (reserves, timeouts, releases, buries, kicks) =
        (r.u32()?, r.u32()?, r.u32()?, r.u32()?, r.u32()?);
    let len = usize::from(r.u8()?);
    let tube = TubeName::new(r.take(len)?).ok_or(Corrupt("an invalid tube name"))?;
    if !r.0.is_empty() {
        return Err(Corrupt("trailing bytes after a job record"));
    }
    Ok(JobImage {
        id,
        tube,
        pri,
        ttr,
        delay,
        state,
        created,
        reserves,
        timeouts,
        releases,
        buries,
        kicks,
        body,
    })
}

/// Reads the `n` or `c` value.
pub fn decode_u64(value: &[u8]) -> Result<u64, Corrupt> {
    let mut r = Reader(value);
    let n = r.u64()?;
    if !r.0.is_empty() {
        return Err(Corrupt("trailing bytes after a counter"));
    }
    Ok(n)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Corrupt> {
        if self.0.len() < n {
            return Err(Corrupt("a truncated job record"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, Corrupt> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, Corrupt> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> Result<u64, Corrupt> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(state: Stored) -> JobImage {
        JobImage {
            id: 42,
            tube: TubeName::new(b"emails").unwrap(),
            pri: 7,
            ttr: 60,
            delay: 3,
            state,
            created: 1_700_000_000_000_000,
            reserves: 1,
            timeouts: 2,
            releases: 3,
            buries: 4,
            kicks: 5,
            body: bytes::Bytes::from_static(b"hello"),
        }
    }

    #[test]
    fn every_state_round_trips() {
        for state in [
            Stored::Ready,
            Stored::Reserved,
            Stored::Delayed(123_456),
            Stored::Buried(9),
        ] {
            let original = image(state);
            let meta = encode_meta(&original);
            let back = decode_meta(&meta, original.body.clone()).unwrap();
            assert_eq!(back, original);
        }
    }

    #[test]
    fn damaged_records_are_corrupt_not_guessed() {
        let meta = encode_meta(&image(Stored::Ready));
        let body = bytes::Bytes::new();
        for cut in 0..meta.len() {
            assert!(
                decode_meta(&meta[..cut], body.clone()).is_err(),
                "cut at {cut}"
            );
        }
        let mut longer = meta.clone();
        longer.push(0);
        assert!(decode_meta(&longer, body.clone()).is_err());
        let mut bad_state = meta.clone();
        bad_state[9] = 9;
        assert_eq!(
            decode_meta(&bad_state, body.clone()),
            Err(Corrupt("an unknown job state"))
        );
        let mut bad_version = meta;
        bad_version[0] = 0;
        assert!(decode_meta(&bad_version, body).is_err());
    }

    #[test]
    fn keys_sort_by_slot_and_read_back() {
        assert!(job_key(2) < job_key(256));
        assert_eq!(key_slot(&body_key(77)).unwrap(), 77);
        assert!(key_slot(b"j12").is_err());
    }
}
