//! Where stored jobs are, shared with readers on other threads (issue 33,
//! step 2): the page log's map from job ids to their page (`places.rs`)
//! and from pages to the slots that hold them, under one lock.
//!
//! The page log (`log.rs`) is owned by the thread that writes pages (the
//! absorber); a connection that needs a body neither the engine nor the
//! body cache holds reads it from the job's page (`body_read.rs`), on a
//! blocking thread of its own. It takes the lock for one lookup, never
//! across a read. What it finds may be stale by the time it reads: the
//! writer moves images when it cleans old pages, and a freed slot may hold
//! another page by then. So the writer brackets each change with
//! [`Directory::change`]: the epoch is odd while a batch is packed and
//! written, and a read that did not check out looks again only if the
//! epoch moved (anything else is damage, not a race).
//!
//! The writer takes the lock once per batch (`Log::hold`, for `pack.rs`),
//! not once a job: an uncontended lock costs ~20-25 ns here, a few per
//! job, on the thread that takes the journal in. Readers wait out a batch
//! anyway ([`Directory::settled`]), woken as it ends: they polled every
//! 200 us, and a drain of 1M 1 KiB jobs past the cache spent 5.5% of its
//! samples in those sleeps (session 26).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use sprout_protocol::JobId;

use super::page_table::PageTable;
use super::places::{Place, Places};
use super::slots::Slot;

/// What the lock guards.
#[derive(Default)]
pub struct Map {
    /// Every stored job: the page holding its latest image.
    pub jobs: Places,
    /// Stored pages by sequence number.
    pub pages: PageTable,
}

/// Where a job's latest image was, at one lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    /// The page's sequence number, which its value carries (`page.rs`).
    pub seq: u64,
    pub slot: Slot,
    /// The entry's stored length.
    pub len: u32,
}

#[derive(Default)]
pub struct Directory {
    map: Mutex<Map>,
    /// Odd while the writer changes pages (see the module docs).
    epoch: AtomicU64,
    /// Readers waiting for the epoch to be even: the lock is held to make
    /// it even, so that none misses the wake-up.
    ended: Mutex<()>,
    ended_cv: Condvar,
}

impl Directory {
    pub fn lock(&self) -> MutexGuard<'_, Map> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where job `id`'s image is now: `None` if it has no stored image,
    /// or its page is not yet added (a batch being packed).
    pub fn find(&self, id: JobId) -> Option<Found> {
        let map = self.lock();
        let place = map.jobs.get(id)?;
        let seq = map.seq_of(place)?;
        let page = map.pages.get(seq)?;
        Some(Found {
            seq,
            slot: page.slot,
            len: place.len,
        })
    }

    /// The epoch now: odd while the writer changes pages.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Runs `change` (a batch packed and written) with the epoch odd,
    /// then wakes the readers waiting for it to end.
    pub fn change<T>(&self, change: impl FnOnce() -> T) -> T {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        let result = change();
        {
            let _ended = self.ended.lock().unwrap_or_else(|e| e.into_inner());
            self.epoch.fetch_add(1, Ordering::AcqRel);
        }
        self.ended_cv.notify_all();
        result
    }

    /// The epoch once the writer is not in the middle of a batch, or
    /// after `limit` should it never finish one (odd then).
    pub fn settled(&self, limit: Duration) -> u64 {
        let epoch = self.epoch();
        if epoch.is_multiple_of(2) {
            return epoch;
        }
        let ended = self.ended.lock().unwrap_or_else(|e| e.into_inner());
        let in_batch = |_: &mut ()| !self.epoch().is_multiple_of(2);
        let waited = self.ended_cv.wait_timeout_while(ended, limit, in_batch);
        drop(waited.unwrap_or_else(|e| e.into_inner()));
        self.epoch()
    }
}

impl Map {
    /// The whole sequence number of `place`'s page: the stored pages are a
    /// run of consecutive sequence numbers, and a place keeps its low 32
    /// bits (`places.rs`).
    fn seq_of(&self, place: Place) -> Option<u64> {
        let (first, _) = self.pages.first()?;
        Some(first + u64::from(place.page.wrapping_sub(first as u32)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{mpsc, Arc};
    use std::time::Instant;

    use super::*;
    use crate::store::page_table::Page;

    #[test]
    fn a_reader_waits_for_the_batch_to_end_or_for_its_limit() {
        let dir = Arc::new(Directory::default());
        assert_eq!(dir.settled(Duration::ZERO), 0);
        let (started, batch) = mpsc::channel();
        let (end, ended) = mpsc::channel::<()>();
        let writer = {
            let dir = dir.clone();
            std::thread::spawn(move || {
                dir.change(|| {
                    started.send(()).unwrap();
                    ended.recv().unwrap();
                })
            })
        };
        batch.recv().unwrap();
        // A batch that outlasts the limit: the epoch is still odd.
        assert_eq!(dir.settled(Duration::from_millis(10)), 1);
        let at = Instant::now();
        let reader = {
            let dir = dir.clone();
            std::thread::spawn(move || dir.settled(Duration::from_secs(30)))
        };
        std::thread::sleep(Duration::from_millis(50));
        end.send(()).unwrap();
        // Woken as the batch ends, not at its limit.
        assert_eq!(reader.join().unwrap(), 2);
        assert!(at.elapsed() < Duration::from_secs(20), "{:?}", at.elapsed());
        writer.join().unwrap();
    }

    #[test]
    fn a_place_finds_its_page_by_the_low_bits() {
        let dir = Directory::default();
        {
            let mut map = dir.lock();
            let first = (1u64 << 32) - 2;
            for (i, slot) in [7, 3, 9, 1].into_iter().enumerate() {
                let bytes = 100;
                map.pages.insert(first + i as u64, Page { slot, bytes });
            }
            map.jobs.insert(5, Place::new(first + 3, 40));
            map.jobs.insert(6, Place::new(first, 50));
            map.jobs.insert(8, Place::new(first + 10, 50));
        }
        let first = (1u64 << 32) - 2;
        let five = Found {
            seq: first + 3,
            slot: 1,
            len: 40,
        };
        assert_eq!(dir.find(5), Some(five));
        assert_eq!(dir.find(6).map(|f| (f.seq, f.slot)), Some((first, 7)));
        // A page not added yet, and a job with no place.
        assert_eq!(dir.find(8), None);
        assert_eq!(dir.find(9), None);
        assert_eq!(dir.epoch(), 0);
        let seen = dir.change(|| dir.epoch());
        assert_eq!((seen, dir.epoch()), (1, 2));
    }
}
