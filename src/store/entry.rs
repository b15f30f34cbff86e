//! Entries: the unit both sled's pages (`page.rs`) and the journal's frames
//! (`frame.rs`) are made of.
//!
//! An entry is its length (u32 LE), then one of:
//! - a job's image (`record.rs`: its version byte, the id, every field, the
//!   tube name and the body);
//! - a job's state (`record.rs`: [`record::STATE_TAG`], then the image's
//!   fields without the body), which only the journal writes;
//! - a tombstone: [`TOMBSTONE`] and the job id.
//!
//! Every kind carries the job id at the same place, so an entry can be
//! routed without decoding it. Anything that does not split exactly is
//! reported as corrupt, never guessed at.

use sprout_protocol::JobId;

use super::corrupt::Corrupt;
use super::record;
use crate::engine::JobImage;

/// First byte of a tombstone; images start with their version, states with
/// [`record::STATE_TAG`].
const TOMBSTONE: u8 = 0xD0;
const TOMBSTONE_LEN: usize = 1 + 8;

/// What an entry holds, still encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind<'a> {
    Image(&'a [u8]),
    State(&'a [u8]),
    Tombstone,
}

/// One entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry<'a> {
    pub id: JobId,
    pub kind: Kind<'a>,
    /// The whole entry as stored, length prefix included, for copying it
    /// elsewhere unchanged.
    pub raw: &'a [u8],
}

impl<'a> Entry<'a> {
    /// The encoded image, if this is one.
    pub fn image(&self) -> Option<&'a [u8]> {
        match self.kind {
            Kind::Image(image) => Some(image),
            _ => None,
        }
    }
}

/// The entries in `bytes`, in the order they were written.
#[derive(Clone)]
pub struct Entries<'a>(pub &'a [u8]);

impl<'a> Iterator for Entries<'a> {
    type Item = Result<Entry<'a>, Corrupt>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let entry = split(self.0);
        // After a damaged entry the next one cannot be found: stop there.
        self.0 = match entry {
            Ok(e) => &self.0[e.raw.len()..],
            Err(_) => &[],
        };
        Some(entry)
    }
}

fn split(bytes: &[u8]) -> Result<Entry<'_>, Corrupt> {
    let truncated = Corrupt("a truncated entry");
    let len = bytes
        .get(..4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
        .ok_or(truncated)?;
    let payload = bytes.get(4..4 + len).ok_or(truncated)?;
    let id = payload
        .get(1..9)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
        .ok_or(Corrupt("an entry too short for a job id"))?;
    let kind = match payload[0] {
        TOMBSTONE if payload.len() == TOMBSTONE_LEN => Kind::Tombstone,
        TOMBSTONE => return Err(Corrupt("a tombstone of the wrong length")),
        record::STATE_TAG => Kind::State(payload),
        _ => Kind::Image(payload),
    };
    Ok(Entry {
        id,
        kind,
        raw: &bytes[..4 + len],
    })
}

/// Appends a job's image; returns the entry's length.
pub fn push_image(out: &mut Vec<u8>, image: &JobImage) -> usize {
    let len = record::encoded_len(image);
    // Job bodies are limited far below 4 GiB (`-z`).
    out.extend_from_slice(&(len as u32).to_le_bytes());
    record::encode_job(image, out);
    4 + len
}

/// Appends a job's state (its image without the body); returns the entry's
/// length.
pub fn push_state(out: &mut Vec<u8>, image: &JobImage) -> usize {
    let len = record::state_len(image);
    out.extend_from_slice(&(len as u32).to_le_bytes());
    record::encode_state(image, out);
    4 + len
}

/// Appends a tombstone for `id`; returns the entry's length.
pub fn push_tombstone(out: &mut Vec<u8>, id: JobId) -> usize {
    out.extend_from_slice(&(TOMBSTONE_LEN as u32).to_le_bytes());
    out.push(TOMBSTONE);
    out.extend_from_slice(&id.to_le_bytes());
    4 + TOMBSTONE_LEN
}

/// The length [`push_image`] appends.
pub fn image_len(image: &JobImage) -> usize {
    4 + record::encoded_len(image)
}

/// The length [`push_tombstone`] appends.
pub const TOMBSTONE_ENTRY_LEN: usize = 4 + TOMBSTONE_LEN;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::engine::{Stored, ENTRY_FIXED_BYTES, TOMBSTONE_BYTES};
    use sprout_protocol::TubeName;

    pub(crate) fn image(id: JobId, body_len: usize) -> JobImage {
        JobImage {
            id,
            tube: TubeName::new(b"tube").unwrap(),
            pri: 1,
            ttr: 1,
            delay: 0,
            state: Stored::Ready,
            created: 0,
            counts: Default::default(),
            body: vec![0xAB; body_len].into(),
            ext: None,
        }
    }

    #[test]
    fn every_kind_splits_back() {
        let job = image(7, 3);
        let mut bytes = Vec::new();
        let a = push_image(&mut bytes, &job);
        let b = push_state(&mut bytes, &job);
        let c = push_tombstone(&mut bytes, 9);
        assert_eq!(bytes.len(), a + b + c);
        let entries: Vec<Entry> = Entries(&bytes).map(Result::unwrap).collect();
        let kinds: Vec<(JobId, usize)> = entries.iter().map(|e| (e.id, e.raw.len())).collect();
        assert_eq!(kinds, [(7, a), (7, b), (9, c)]);
        assert_eq!(
            record::decode_job(entries[0].image().unwrap()).unwrap(),
            job
        );
        let Kind::State(state) = entries[1].kind else {
            panic!("not a state: {:?}", entries[1].kind)
        };
        assert_eq!(record::decode_state(state).unwrap().pri, job.pri);
        assert_eq!(entries[2].kind, Kind::Tombstone);
    }

    /// The engine charges records by these figures (`engine/admission.rs`); the
    /// encoding must never exceed them.
    #[test]
    fn entries_stay_within_what_the_engine_charges() {
        for (tube, body) in [(&b"t"[..], 0), (&[b'x'; 200][..], 65_535)] {
            let mut job = image(1, body);
            job.tube = TubeName::new(tube).unwrap();
            let fixed = ENTRY_FIXED_BYTES as usize + tube.len();
            assert!(image_len(&job) <= fixed + body);
            assert!(push_state(&mut Vec::new(), &job) <= fixed);
        }
        assert_eq!(TOMBSTONE_ENTRY_LEN as i64, TOMBSTONE_BYTES);
    }

    #[test]
    fn damage_is_corrupt() {
        let mut bytes = Vec::new();
        push_image(&mut bytes, &image(7, 3));
        for cut in 1..bytes.len() {
            let last = Entries(&bytes[..cut]).last().unwrap();
            assert!(last.is_err(), "cut at {cut}");
        }
        let mut bad = Vec::new();
        push_tombstone(&mut bad, 3);
        bad[0] = 10;
        bad.push(0);
        assert_eq!(
            Entries(&bad).next(),
            Some(Err(Corrupt("a tombstone of the wrong length")))
        );
    }
}
