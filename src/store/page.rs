//! Pages: how the journal's records are packed into sled values.
//!
//! sled 0.34's cost is per key, not per byte: an insert of a 150-byte job
//! costs about as much CPU as one of 30 KiB, and that per-key cost capped
//! `-f 0` at ~100k puts/s when every job had a key of its own. So sled holds
//! a log of pages instead: each batch taken in from the journal appends its
//! records as one or a few pages of up to [`PAGE_BYTES`], a job's latest
//! image lives in whichever page last wrote it, and a delete appends a
//! tombstone. Reading every page in sequence order and applying its entries
//! gives back exactly the live jobs (see `log.rs` for how the log is kept
//! bounded).
//!
//! A page value: version byte, page sequence number (u64 LE), then entries
//! (`entry.rs`): images and tombstones only.

use sprout_protocol::JobId;

use super::corrupt::Corrupt;
use super::entry::{self, Entries};
use super::slots::Slot;
use crate::engine::JobImage;

pub const PAGE_PREFIX: u8 = b'p';

/// Pages are cut near this size: large enough that the per-key cost is
/// spread over ~25 jobs of 100 bytes, small enough for sled's leaves. A
/// sled leaf holds up to 16 values and is rewritten whole after 10 updates,
/// and one over 128 KiB goes to a blob file of its own: with 32 KiB pages
/// that made churn cost ~24 us of CPU per job and 85 MB of disk after 2M
/// put+delete cycles; at 4 KiB -f 0 puts run at ~400-550k/s here and the
/// directory stays under ~45 MB through 4M cycles.
pub const PAGE_BYTES: usize = 4 * 1024;

const PAGE_VERSION: u8 = 1;
const HEADER_LEN: usize = 1 + 8;

pub fn page_key(slot: Slot) -> [u8; 5] {
    let mut k = [PAGE_PREFIX; 5];
    k[1..].copy_from_slice(&slot.to_be_bytes());
    k
}

/// The slot in a page key.
pub fn key_slot(key: &[u8]) -> Result<Slot, Corrupt> {
    let bytes: [u8; 4] = key
        .get(1..)
        .and_then(|b| b.try_into().ok())
        .ok_or(Corrupt("a page key of the wrong length"))?;
    Ok(Slot::from_be_bytes(bytes))
}

/// A page's sequence number and its entries.
pub fn read(value: &[u8]) -> Result<(u64, Entries<'_>), Corrupt> {
    if value.len() < HEADER_LEN || value[0] != PAGE_VERSION {
        return Err(Corrupt("a page with an unknown version or no header"));
    }
    let seq = u64::from_le_bytes(value[1..HEADER_LEN].try_into().expect("8 bytes"));
    Ok((seq, Entries(&value[HEADER_LEN..])))
}

/// Builds the pages of one batch, cutting a new page near [`PAGE_BYTES`].
#[derive(Default)]
pub struct PageBuilder {
    done: Vec<Vec<u8>>,
    current: Vec<u8>,
}

impl PageBuilder {
    /// Appends a job's image; returns the index of the page it went into
    /// and the entry's stored length.
    pub fn image(&mut self, image: &JobImage) -> (usize, u32) {
        let page = self.room_for(entry::image_len(image));
        let len = entry::push_image(&mut self.current, image);
        (page, len as u32)
    }

    /// Appends a tombstone for `id`.
    pub fn tombstone(&mut self, id: JobId) {
        self.room_for(entry::TOMBSTONE_ENTRY_LEN);
        entry::push_tombstone(&mut self.current, id);
    }

    /// Appends an entry copied from another page; returns as
    /// [`PageBuilder::image`].
    pub fn copy(&mut self, raw: &[u8]) -> (usize, u32) {
        let page = self.room_for(raw.len());
        self.current.extend_from_slice(raw);
        (page, raw.len() as u32)
    }

    /// Starts a new page if `len` more bytes would overflow this one;
    /// returns the index of the page the bytes will go into.
    fn room_for(&mut self, len: usize) -> usize {
        if !self.current.is_empty() && self.current.len() + len > PAGE_BYTES {
            self.done.push(std::mem::take(&mut self.current));
        }
        self.done.len()
    }

    /// Where the last entry appended ends in its sealed page: a job's body
    /// is the end of its image's entry.
    pub fn end(&self) -> usize {
        HEADER_LEN + self.current.len()
    }

    /// The entry bytes appended so far.
    pub fn bytes(&self) -> usize {
        self.done.iter().map(Vec::len).sum::<usize>() + self.current.len()
    }

    /// The pages' entry bytes, in order; [`seal`] adds each one's header.
    pub fn finish(mut self) -> Vec<Vec<u8>> {
        if !self.current.is_empty() {
            self.done.push(self.current);
        }
        self.done
    }
}

/// A page value: the header for sequence number `seq`, then `entries`.
pub fn seal(seq: u64, entries: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(HEADER_LEN + entries.len());
    value.push(PAGE_VERSION);
    value.extend_from_slice(&seq.to_le_bytes());
    value.extend_from_slice(entries);
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::store::entry::{Entry, Kind};
    use crate::store::record;

    fn image(id: JobId, body_len: usize) -> JobImage {
        crate::store::entry::tests::image(id, body_len)
    }

    #[test]
    fn entries_read_back_in_order() {
        let mut b = PageBuilder::default();
        let seven = image(7, 3);
        let len = entry::image_len(&seven) as u32;
        assert_eq!(b.image(&seven), (0, len));
        b.tombstone(5);
        assert_eq!(b.bytes(), len as usize + entry::TOMBSTONE_ENTRY_LEN);
        let pages = b.finish();
        assert_eq!(pages.len(), 1);
        let value = seal(42, &pages[0]);
        let (seq, entries) = read(&value).unwrap();
        assert_eq!(seq, 42);
        let entries: Vec<Entry> = entries.map(Result::unwrap).collect();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].id, 7);
        assert_eq!(record::decode_job(entries[0].image().unwrap()), Ok(seven));
        assert_eq!((entries[1].id, entries[1].kind), (5, Kind::Tombstone));
        let mut copy = PageBuilder::default();
        copy.copy(entries[0].raw);
        assert_eq!(copy.finish()[0], entries[0].raw);
    }

    #[test]
    fn pages_are_cut_near_the_limit() {
        let mut b = PageBuilder::default();
        let big = image(1, PAGE_BYTES / 3);
        let placed: Vec<usize> = (0..5).map(|_| b.image(&big).0).collect();
        assert_eq!(placed, [0, 0, 1, 1, 2]);
        // An image larger than a page gets a page of its own.
        assert_eq!(b.image(&image(2, PAGE_BYTES * 2)).0, 3);
        assert_eq!(b.finish().len(), 4);
    }

    #[test]
    fn damage_is_corrupt_and_stops_the_page() {
        let mut b = PageBuilder::default();
        b.image(&image(7, 3));
        b.image(&image(8, 3));
        let value = seal(1, &b.finish()[0]);
        let first_end = HEADER_LEN + entry::image_len(&image(7, 3));
        // A page cut exactly between entries reads as a shorter page; sled's
        // atomic batches are what rule that out.
        for cut in (HEADER_LEN + 1..value.len()).filter(|&c| c != first_end) {
            let (_, entries) = read(&value[..cut]).unwrap();
            let results: Vec<_> = entries.collect();
            assert!(results.last().unwrap().is_err(), "cut at {cut}");
        }
        assert!(read(&value[..HEADER_LEN - 1]).is_err());
        let mut bad = value.clone();
        bad[0] = 9;
        assert!(read(&bad).is_err());
        assert_eq!(key_slot(&page_key(77)).unwrap(), 77);
        assert!(key_slot(b"p12").is_err());
    }
}
