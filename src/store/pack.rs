//! Packing: a batch of records becomes the pages that replace and clean
//! the page log (`page.rs`, `log.rs`), whoever keeps the pages.
//!
//! The batch's last word on each job it touched goes into new pages (an
//! image, or a tombstone for a stored job deleted); while the log holds
//! more dead bytes than it should, its oldest pages are cleaned: their
//! still-live images are copied into the new pages and their slots freed,
//! at most a few times what the batch wrote (`log::clean_budget`). The
//! caller writes the result as one atomic change: sled's batch
//! (`absorb.rs`), or a cluster's batch of stream messages
//! (`cluster/writer.rs`). The log is updated as if the change were made,
//! so a caller whose write fails must stop writing.
//!
//! An update carries no body (`Record::Update`), but a page holds whole
//! images, so its body comes from the batch (the job's put, earlier in
//! it), else from the caller (the body cache), else from the job's image
//! in its page, read before the batch changes the log, each page once.

use std::io;

use bytes::Bytes;
use rustc_hash::FxHashMap;
use sprout_protocol::JobId;

use super::body_read;
use super::corrupt::Corrupt;
use super::entry;
use super::log::{self, Log};
use super::page::{self, PageBuilder};
use super::record;
use super::slots::Slot;
use crate::engine::{JobImage, Record, INLINE_BODY};

/// What one batch changes in the page log.
#[derive(Debug, Default)]
pub struct Packed {
    /// New pages, sealed, and the slots they go to.
    pub pages: Vec<(Slot, Vec<u8>)>,
    /// Slots cleaned and now free.
    pub freed: Vec<Slot>,
    /// Live images copied out of cleaned pages.
    pub moved: u64,
    /// Where the batch's bodies longer than `INLINE_BODY` lie in `pages`:
    /// the body cache comes to hold them as slices of the pages
    /// (`share.rs`).
    pub bodies: Vec<Placed>,
}

/// A job's body in the new pages (24 bytes: `share.rs` queues thousands;
/// a body, like a page, is shorter than 4 GiB: `-z`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub id: JobId,
    /// Its index in `Packed::pages`.
    pub page: u32,
    /// Where it starts and ends in that page.
    pub start: u32,
    pub end: u32,
}

impl Placed {
    pub fn range(&self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// The batch's last word on a job.
#[derive(Clone, Copy, Default)]
struct Word<'a> {
    /// Its latest image; `None`: deleted.
    image: Option<&'a JobImage>,
    /// Whether that image is a put's, body and all.
    whole: bool,
    /// The body a put in the batch gave it.
    body: Option<&'a Bytes>,
}

/// Packs `records` (in order) into pages in `log`, cleaning at most
/// `clean_pages` of its oldest pages while it is over its bound (a
/// cluster's batch holds a bounded number of messages). An update's body
/// (it carries none) is its put's in the batch, else `cached`'s, else read
/// from its stored image; a job updated with neither is an error.
/// `old_page` reads a stored page by slot; `None` means it cannot be had
/// now, and cleaning stops there (an updated job's page must be had).
pub fn pack<'a>(
    log: &mut Log,
    records: impl IntoIterator<Item = &'a Record>,
    clean_pages: usize,
    mut cached: impl FnMut(JobId) -> Option<Bytes>,
    mut old_page: impl FnMut(Slot) -> io::Result<Option<Vec<u8>>>,
) -> io::Result<Packed> {
    let (order, last, updates) = last_words(records);
    // Before the log forgets where the updated jobs' images are.
    let mut read = FxHashMap::default();
    if updates {
        let bare = last
            .iter()
            .filter(|(_, w)| w.image.is_some() && w.body.is_none());
        read = bodies(log, bare.map(|(&id, _)| id), &mut cached, &mut old_page)?;
    }
    // The directory's lock, once for the batch: readers wait out a batch
    // anyway (`directory.rs`).
    let mut log = log.hold();
    let first_seq = log.next_seq();
    let mut pages = PageBuilder::default();
    let mut bodies = Vec::new();
    for id in order {
        let stored = log.forget(id);
        let word = last[&id];
        match word.image {
            Some(image) => {
                let (page, len, body) = write_image(&mut pages, word, image, || read.remove(&id));
                log.place(first_seq + page as u64, id, len);
                if body > INLINE_BODY {
                    let (page, end) = (page as u32, pages.end() as u32);
                    let start = end - body as u32;
                    bodies.push(Placed {
                        id,
                        page,
                        start,
                        end,
                    });
                }
            }
            None if stored => pages.tombstone(id),
            None => {}
        }
    }
    let mut packed = Packed {
        bodies,
        ..Packed::default()
    };
    let budget = match pages.bytes() {
        0 => log::IDLE_CLEAN_BYTES,
        written => log::clean_budget(written as u64),
    };
    let mut cleaned = 0;
    while let Some((seq, slot)) = log
        .to_clean(budget, cleaned)
        .filter(|_| packed.freed.len() < clean_pages)
    {
        let Some(value) = old_page(slot)? else { break };
        let corrupt = |e: Corrupt| io::Error::other(format!("page {seq}: {e}"));
        let (_, entries) = page::read(&value).map_err(corrupt)?;
        for entry in entries {
            let entry = entry.map_err(corrupt)?;
            if entry.image().is_some() && log.is_live(seq, entry.id) {
                let (page, len) = pages.copy(entry.raw);
                log.place(first_seq + page as u64, entry.id, len);
                packed.moved += 1;
            }
        }
        cleaned += value.len() as u64;
        packed.freed.push(slot);
        log.remove_oldest();
    }
    for entries in pages.finish() {
        let value = page::seal(log.next_seq(), &entries);
        let (_, slot) = log.add_page(value.len());
        packed.pages.push((slot, value));
    }
    Ok(packed)
}

/// Appends the image `word` leaves of a job to `pages`, with its put's
/// body, else `stored()` (an update's image carries none); returns where
/// it went, as [`PageBuilder::image`] does, and the body's length.
fn write_image(
    pages: &mut PageBuilder,
    word: Word<'_>,
    image: &JobImage,
    stored: impl FnOnce() -> Option<Bytes>,
) -> (usize, u32, usize) {
    if word.whole {
        let (page, len) = pages.image(image);
        return (page, len, image.body.len());
    }
    let body = word.body.cloned().or_else(stored);
    let body = body.expect("every updated job's body is found");
    let body_len = body.len();
    let (page, len) = pages.image(&JobImage {
        body,
        ..image.clone()
    });
    (page, len, body_len)
}

/// The batch's last word on each job, the jobs in the order first
/// touched, and whether there are updates.
type Words<'a> = (Vec<JobId>, FxHashMap<JobId, Word<'a>>, bool);

fn last_words<'a>(records: impl IntoIterator<Item = &'a Record>) -> Words<'a> {
    let mut order = Vec::new();
    let mut last: FxHashMap<JobId, Word> = FxHashMap::default();
    let mut updates = false;
    for record in records {
        let id = match record {
            Record::Put(image) | Record::Update(image) => image.id,
            Record::Delete(id) => *id,
        };
        let word = last.entry(id).or_insert_with(|| {
            order.push(id);
            Word::default()
        });
        match record {
            Record::Put(image) => {
                *word = Word {
                    image: Some(image),
                    whole: true,
                    body: Some(&image.body),
                }
            }
            Record::Update(image) => {
                (word.image, word.whole) = (Some(image), false);
                updates = true;
            }
            Record::Delete(_) => word.image = None,
        }
    }
    (order, last, updates)
}

/// The bodies of updated jobs `ids`, whose puts are not in the batch:
/// `cached`'s, else read from their images where `log` says they are
/// (looked up one by one: these are the few a cache would have missed),
/// each page read once. A job with no stored image is an error, naming
/// it: an update of a job never put is a bug, and an empty body in its
/// place would lose the real one for good.
fn bodies(
    log: &Log,
    ids: impl Iterator<Item = JobId>,
    cached: &mut impl FnMut(JobId) -> Option<Bytes>,
    old_page: &mut impl FnMut(Slot) -> io::Result<Option<Vec<u8>>>,
) -> io::Result<FxHashMap<JobId, Bytes>> {
    let dir = log.directory();
    let mut found = FxHashMap::default();
    let mut to_read = Vec::new();
    for id in ids {
        if let Some(body) = cached(id) {
            found.insert(id, body);
            continue;
        }
        let Some(place) = dir.find(id) else {
            return Err(io::Error::other(format!(
                "job {id} is updated, but the store holds no image of it and the \
                 batch no put"
            )));
        };
        to_read.push((place, id));
    }
    to_read.sort_unstable_by_key(|&(place, _)| place.seq);
    for run in to_read.chunk_by(|a, b| a.0.seq == b.0.seq) {
        let (place, _) = run[0];
        let missing = || io::Error::other(format!("the page in slot {} is missing", place.slot));
        let value = old_page(place.slot)?.ok_or_else(missing)?;
        for &(place, id) in run {
            let body = body_read::body_in(&value, place, id)
                .map_err(|why| io::Error::other(format!("job {id}'s stored image: {why}")))?;
            found.insert(id, body);
        }
    }
    Ok(found)
}

impl Log {
    /// About the bytes `records` add to a batch's pages, to bound a batch
    /// before it is packed (sled's window, a cluster's batch). An update
    /// carries no body, but its new image holds the body again: it counts
    /// as its job's stored entry (whose length the directory keeps, the
    /// body the same), or as its fields alone if the job is not stored
    /// yet (its put, earlier in the batch, counted the body: one image is
    /// written for both). Takes the directory's lock once, for updates
    /// only.
    pub fn page_bytes<'a>(&self, records: impl IntoIterator<Item = &'a Record>) -> usize {
        let dir = self.directory();
        let mut map = None;
        let mut bytes = 0;
        for record in records {
            bytes += match record {
                Record::Put(image) => entry::image_len(image),
                Record::Update(image) => {
                    let map = map.get_or_insert_with(|| dir.lock());
                    match map.jobs.get(image.id) {
                        Some(place) => place.len as usize,
                        None => 4 + record::state_len(image),
                    }
                }
                Record::Delete(_) => entry::TOMBSTONE_ENTRY_LEN,
            };
        }
        bytes
    }
}

#[cfg(test)]
mod tests;
