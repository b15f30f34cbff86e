//! Journal frames: what one write to the journal appends.
//!
//! A frame is a [`HEADER_LEN`]-byte header, then entries (`entry.rs`):
//! - the length of the rest (u32 LE): commit number, id ceiling, entries;
//! - the CRC-32 of the rest (u32 LE);
//! - the commit number (u64 LE): one up from the frame before (see
//!   `recover.rs` for the one jump allowed);
//! - the id ceiling (u64 LE): no job id at or above it had been handed out
//!   when the frame was written (`ids.rs`);
//! - entries: a put's image, a later change's state (without the body, which
//!   the put wrote), a delete's tombstone.
//!
//! A length of zero is never written: it is the zeroed space after the last
//! frame. A frame that does not check out (a short length, a bad CRC) is
//! where the journal ends: the tail a crash tore, never replayed.

use super::corrupt::Corrupt;
use super::entry::{self, Entries, Kind};
use super::record;
use crate::engine::{Record, FRAME_BYTES};

/// The header's size; the engine charges it to every command.
pub const HEADER_LEN: usize = 24;
const _: () = assert!(HEADER_LEN as i64 == FRAME_BYTES);

/// A frame read back.
pub struct Frame<'a> {
    pub commit: u64,
    pub ids_below: u64,
    pub entries: Entries<'a>,
    /// The frame's whole length, header included.
    pub len: usize,
}

/// Starts a frame at the end of `out`; returns where it starts, for
/// [`finish`].
pub fn begin(out: &mut Vec<u8>, commit: u64, ids_below: u64) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&commit.to_le_bytes());
    out.extend_from_slice(&ids_below.to_le_bytes());
    start
}

/// Appends `record` to the frame being built; returns the bytes appended.
pub fn push(out: &mut Vec<u8>, record: &Record) -> usize {
    match record {
        Record::Put(image) => entry::push_image(out, image),
        Record::Update(image) => entry::push_state(out, image),
        Record::Delete(id) => entry::push_tombstone(out, *id),
    }
}

/// The bytes [`push`] appends for `record`.
pub fn pushed_len(record: &Record) -> usize {
    match record {
        Record::Put(image) => entry::image_len(image),
        Record::Update(image) => 4 + super::record::state_len(image),
        Record::Delete(_) => entry::TOMBSTONE_ENTRY_LEN,
    }
}

/// Seals the frame that [`begin`] started at `start`: its length and CRC.
pub fn finish(out: &mut [u8], start: usize) {
    let rest = &out[start + 8..];
    let len = u32::try_from(rest.len()).expect("frames are far below 4 GiB");
    let crc = crc32fast::hash(rest);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// The frame at the front of `bytes`, or `None` where the journal ends.
pub fn read(bytes: &[u8]) -> Option<Frame<'_>> {
    let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    if bytes.len() < HEADER_LEN {
        return None;
    }
    let len = word(0) as usize;
    if len < HEADER_LEN - 8 || len > bytes.len() - 8 {
        return None;
    }
    let rest = &bytes[8..8 + len];
    if crc32fast::hash(rest) != word(4) {
        return None;
    }
    let long = |at: usize| u64::from_le_bytes(rest[at..at + 8].try_into().expect("8 bytes"));
    Some(Frame {
        commit: long(0),
        ids_below: long(8),
        entries: Entries(&rest[16..]),
        len: 8 + len,
    })
}

/// One whole frame of `records` (a cluster's change message).
pub fn of<'a>(
    commit: u64,
    ids_below: u64,
    records: impl IntoIterator<Item = &'a Record>,
) -> Vec<u8> {
    let mut out = Vec::new();
    let start = begin(&mut out, commit, ids_below);
    for record in records {
        push(&mut out, record);
    }
    finish(&mut out, start);
    out
}

/// The records a frame holds, as [`push`] wrote them: a put's whole
/// image, an update's image without its body, a delete.
pub fn records(frame: &Frame) -> Result<Vec<Record>, Corrupt> {
    let mut records = Vec::new();
    for entry in frame.entries.clone() {
        let entry = entry?;
        records.push(match entry.kind {
            Kind::Image(raw) => Record::Put(record::decode_job(raw)?),
            Kind::State(raw) => Record::Update(record::decode_state(raw)?),
            Kind::Tombstone => Record::Delete(entry.id),
        });
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::entry::{tests::image, Kind};

    fn frame(commit: u64, records: &[Record]) -> Vec<u8> {
        let mut out = Vec::new();
        let start = begin(&mut out, commit, 1000);
        for record in records {
            let len = push(&mut out, record);
            assert_eq!(len, pushed_len(record));
        }
        finish(&mut out, start);
        out
    }

    #[test]
    fn frames_read_back_in_order() {
        let put = Record::Put(image(7, 100));
        let mut bytes = frame(1, &[put.clone(), Record::Update(image(7, 100))]);
        bytes.extend(frame(2, &[Record::Delete(7)]));
        bytes.extend([0; 64]);
        let one = read(&bytes).unwrap();
        assert_eq!((one.commit, one.ids_below), (1, 1000));
        let kinds: Vec<_> = one.entries.map(|e| e.unwrap().kind).collect();
        assert!(matches!(kinds[..], [Kind::Image(_), Kind::State(_)]));
        let two = read(&bytes[one.len..]).unwrap();
        assert_eq!(two.commit, 2);
        assert_eq!(two.entries.count(), 1);
        // The zeroed space after the last frame is the end.
        assert!(read(&bytes[one.len + two.len..]).is_none());
        let empty = frame(3, &[]);
        assert_eq!(empty.len(), HEADER_LEN);
        assert_eq!(read(&empty).unwrap().entries.count(), 0);
    }

    #[test]
    fn a_frames_records_read_back_as_written() {
        let mut bare = image(7, 0);
        bare.pri = 9;
        let written = [
            Record::Put(image(7, 100)),
            Record::Update(bare),
            Record::Delete(7),
        ];
        let bytes = of(12, 500, &written);
        let frame = read(&bytes).unwrap();
        assert_eq!(
            (frame.commit, frame.ids_below, frame.len),
            (12, 500, bytes.len())
        );
        assert_eq!(records(&frame).unwrap(), written);
        let empty = of(1, 1, &[]);
        assert!(records(&read(&empty).unwrap()).unwrap().is_empty());
    }

    #[test]
    fn a_torn_or_damaged_frame_is_the_end() {
        let bytes = frame(5, &[Record::Put(image(1, 300))]);
        for cut in 0..bytes.len() {
            assert!(read(&bytes[..cut]).is_none(), "cut at {cut}");
        }
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            assert!(read(&bad).is_none(), "flipped byte {at}");
        }
    }
}
