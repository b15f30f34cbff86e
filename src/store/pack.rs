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

use std::io;

use rustc_hash::FxHashMap;
use sprout_protocol::JobId;

use super::corrupt::Corrupt;
use super::log::{self, Log};
use super::page::{self, PageBuilder};
use super::slots::Slot;
use crate::engine::{JobImage, Record};

/// What one batch changes in the page log.
#[derive(Debug, Default)]
pub struct Packed {
    /// New pages, sealed, and the slots they go to.
    pub pages: Vec<(Slot, Vec<u8>)>,
    /// Slots cleaned and now free.
    pub freed: Vec<Slot>,
    /// Live images copied out of cleaned pages.
    pub moved: u64,
}

/// Packs `records` (in order) into pages in `log`, cleaning at most
/// `clean_pages` of its oldest pages while it is over its bound (a
/// cluster's batch holds a bounded number of messages). `old_page` reads a
/// stored page by slot; `None` means it cannot be had now, and cleaning
/// stops there.
pub fn pack<'a>(
    log: &mut Log,
    records: impl IntoIterator<Item = &'a Record>,
    clean_pages: usize,
    mut old_page: impl FnMut(Slot) -> io::Result<Option<Vec<u8>>>,
) -> io::Result<Packed> {
    // The directory's lock, once for the batch: readers wait out a batch
    // anyway (`directory.rs`).
    let mut log = log.hold();
    let mut order = Vec::new();
    let mut last: FxHashMap<JobId, Option<&JobImage>> = FxHashMap::default();
    for record in records {
        let (id, image) = match record {
            Record::Put(image) | Record::Update(image) => (image.id, Some(image)),
            Record::Delete(id) => (*id, None),
        };
        if last.insert(id, image).is_none() {
            order.push(id);
        }
    }
    let first_seq = log.next_seq();
    let mut pages = PageBuilder::default();
    for id in order {
        let stored = log.forget(id);
        match last[&id] {
            Some(image) => {
                let (page, len) = pages.image(image);
                log.place(first_seq + page as u64, id, len);
            }
            None if stored => pages.tombstone(id),
            None => {}
        }
    }
    let mut packed = Packed::default();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::entry::tests::image;
    use std::collections::HashMap;

    /// Keeps pages in a map, as a store would.
    fn apply(store: &mut HashMap<Slot, Vec<u8>>, packed: Packed) {
        for slot in packed.freed {
            store.remove(&slot);
        }
        for (slot, value) in packed.pages {
            store.insert(slot, value);
        }
    }

    fn live(store: &HashMap<Slot, Vec<u8>>) -> Vec<JobId> {
        let pages: Vec<(Slot, &[u8])> = store.iter().map(|(&s, v)| (s, v.as_slice())).collect();
        let replayed = Log::replay(&pages, false).unwrap();
        let mut ids: Vec<JobId> = replayed
            .images
            .iter()
            .map(|image| crate::store::record::decode_job(image.bytes).unwrap().id)
            .collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn the_last_word_on_each_job_is_packed_and_old_pages_are_cleaned() {
        let mut log = Log::default();
        let mut store = HashMap::new();
        let none = |_: Slot| Ok(None);
        // A job put and deleted in one batch leaves nothing at all.
        let records = [Record::Put(image(1, 10)), Record::Delete(1)];
        let packed = pack(&mut log, &records, usize::MAX, none).unwrap();
        assert!(packed.pages.is_empty() && packed.freed.is_empty());
        // 300 jobs of 10 KB, then all but two deleted, batch by batch:
        // the log goes over its bound and cleaning frees old slots.
        for id in 1..=300 {
            let packed = pack(
                &mut log,
                &[Record::Put(image(id, 10_000))],
                usize::MAX,
                none,
            )
            .unwrap();
            apply(&mut store, packed);
        }
        let mut freed = 0;
        for id in 3..=300 {
            let copy = store.clone();
            let old = |slot: Slot| Ok(copy.get(&slot).cloned());
            let packed = pack(&mut log, &[Record::Delete(id)], usize::MAX, old).unwrap();
            freed += packed.freed.len();
            apply(&mut store, packed);
        }
        // With nothing to write, cleaning goes on by itself (as the store
        // does when idle) until the log is within its bound.
        for _ in 0..10 {
            if !log.over_bound() {
                break;
            }
            let copy = store.clone();
            let old = |slot: Slot| Ok(copy.get(&slot).cloned());
            let packed = pack(&mut log, &[], usize::MAX, old).unwrap();
            freed += packed.freed.len();
            apply(&mut store, packed);
        }
        assert_eq!(live(&store), [1, 2]);
        assert!(freed > 150, "only {freed} slots freed");
        let (stored, live_bytes) = log.sizes();
        assert!(
            stored <= 2 * live_bytes + log::SLACK,
            "{stored} for {live_bytes}"
        );
        // A store that cannot read an old page now only stops cleaning.
        let packed = pack(&mut log, &[Record::Put(image(400, 10))], usize::MAX, none).unwrap();
        assert!(packed.freed.is_empty());
        apply(&mut store, packed);
        assert_eq!(live(&store), [1, 2, 400]);
    }
}
