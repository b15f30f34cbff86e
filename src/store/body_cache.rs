//! The body cache (issue 33): recently used job bodies, bounded by bytes,
//! for a store that keeps bodies only on disk.
//!
//! Once the engine holds a stored body's length instead of its bytes
//! (docs/durability.md, "Next: bodies kept only on disk", step 3), the
//! bodies a reply needs come from here, or else from one read of the
//! job's page (`body_read.rs`). The cache is a map from job id to the
//! body's `Bytes` (shared, never copied) under a lock of its own, never
//! the engine's, so a connection filling its answer after the engine lock
//! is released waits for no other connection's command.
//!
//! Eviction is CLOCK over a ring of slots: a hit sets the slot's bit, the
//! hand clears set bits and evicts the first clear one, until the unpinned
//! bytes are within the bound. CLOCK rather than LRU because a hit then
//! costs a bit set, not a list splice under the lock. Every entry is
//! charged its body plus [`ENTRY_CHARGE`] (the slot and the map's share),
//! so the bound holds for the cache's own memory, small bodies included.
//!
//! A *pinned* body is not evictable: a put whose record sled has not taken
//! in yet can be read nowhere else without reading the journal. The
//! absorber unpins what each batch committed, so pinned bytes stay bounded
//! by its lag. The bound therefore holds for the unpinned bytes: the cache
//! never holds more than `max + pinned` (the model test at the end checks
//! it, and that a lookup never returns another job's body).
//!
//! Only bodies the engine does not hold enter it (longer than
//! `engine::INLINE_BODY`): a copy of one the engine holds would be held
//! twice. Its figures are in `stats` (`body-cache-*`), with `-b`.
//!
//! A body read back is held as a slice of its page ([`PageKey`]), not a
//! copy, and so is a put's once the store is quiet (`share.rs`): sled
//! keeps the pages it wrote or read in its own cache, so a copy held every
//! such body twice (issue 33: 10k 1 KiB jobs, ~9 MB). A page is charged
//! once, in full, while any of its bodies is held, so the bound still
//! holds for what the cache alone keeps alive once sled lets the page go.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use rustc_hash::FxHashMap;
use sprout_protocol::JobId;

use crate::binlog_stats::BinlogStats;

mod index;
use index::Index;

/// What an entry costs beyond its body: its slot (id, `Bytes`, page,
/// bits: 64 bytes), its map entry and the map's slack.
pub const ENTRY_CHARGE: u64 = 112;

/// How many changes [`BodyCache::settle`] makes per hold of the lock.
const SETTLE_AT_ONCE: usize = 256;

/// `--body-cache`'s default.
pub const DEFAULT_BYTES: u64 = 64 << 20;

/// What sled taking a record in means for the cache
/// ([`BodyCache::settle`]).
pub enum Settle {
    /// A put's body may be evicted now.
    Unpin(JobId),
    /// A deleted job's body goes.
    Remove(JobId),
}

/// The page a held body is a slice of: where its bytes start (the page is
/// alive while the cache holds a slice of it, so no other page starts
/// there meanwhile) and what it is charged.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct PageKey {
    at: NonZeroUsize,
    charge: u32,
}

impl PageKey {
    /// The key of `page`, charged `charge` bytes: what keeping it alive
    /// costs (its allocation, which may be longer than the page).
    pub fn new(page: &Bytes, charge: usize) -> PageKey {
        PageKey {
            at: NonZeroUsize::new(page.as_ptr() as usize).unwrap_or(NonZeroUsize::MIN),
            charge: charge.try_into().unwrap_or(u32::MAX),
        }
    }
}

struct Slot {
    id: JobId,
    body: Bytes,
    /// The page `body` is a slice of; `None`: a copy of its own (a put's,
    /// until sled takes it in).
    page: Option<PageKey>,
    /// CLOCK's bit: used since the hand last passed.
    referenced: bool,
    pinned: bool,
    /// Marked by a read-ahead (`read_ahead.rs`): the first body of a page
    /// it read, whose first hit asks for the pages after it.
    ahead: bool,
}

impl Slot {
    /// Its own charge; its page's is the ring's ([`Ring::hold`]).
    fn charge(&self) -> u64 {
        match self.page {
            None => charge(&self.body),
            Some(_) => ENTRY_CHARGE,
        }
    }
}

fn charge(body: &Bytes) -> u64 {
    body.len() as u64 + ENTRY_CHARGE
}

/// The ring, under the cache's lock.
#[derive(Default)]
struct Ring {
    index: Index,
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    hand: usize,
    /// How many held bodies each page has.
    pages: FxHashMap<PageKey, u32>,
    /// Charged bytes of every entry and page, and of the pinned entries.
    bytes: u64,
    pinned: u64,
    max: u64,
}

/// The body cache; see the module docs.
pub struct BodyCache {
    ring: Mutex<Ring>,
    stats: Arc<BinlogStats>,
}

impl BodyCache {
    /// A cache of at most `max` charged bytes (pinned ones aside), whose
    /// figures go to `stats.body_cache`.
    pub fn new(max: u64, stats: Arc<BinlogStats>) -> BodyCache {
        let figures = &stats.body_cache;
        figures.max_bytes.store(max, RELAXED);
        figures.bytes.store(0, RELAXED);
        figures.present.store(true, RELAXED);
        BodyCache {
            ring: Mutex::new(Ring {
                max,
                ..Ring::default()
            }),
            stats,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The body of `id`, if held (counted as a hit or a miss; a mark goes
    /// unheeded): the tests' lookup. The store's is [`BodyCache::find`].
    #[cfg(test)]
    pub fn get(&self, id: JobId) -> Option<Bytes> {
        let body = self.find(id).map(|(body, _)| body);
        if body.is_none() {
            self.missed();
        }
        body
    }

    /// The body of `id`, if held, and whether this is the first hit on it
    /// since an [`offer`](BodyCache::offer) marked it: counted as a hit,
    /// but a miss is the caller's to count ([`BodyCache::missed`]), if it
    /// was one.
    pub fn find(&self, id: JobId) -> Option<(Bytes, bool)> {
        let found = self.lock().get(id);
        if found.is_some() {
            self.stats.body_cache.hits.fetch_add(1, RELAXED);
        }
        found
    }

    /// Counts a miss.
    pub fn missed(&self) {
        self.stats.body_cache.misses.fetch_add(1, RELAXED);
    }

    /// The body of `id`, if held, for the store's own use: not counted as
    /// a reply's hit or miss, and no use for CLOCK.
    pub fn peek(&self, id: JobId) -> Option<Bytes> {
        let ring = self.lock();
        let at = ring.index.get(id)?;
        ring.slots[at as usize]
            .as_ref()
            .map(|slot| slot.body.clone())
    }

    /// Holds `body` as job `id`'s, pinned if `pin` (a pinned entry stays
    /// pinned until [`Settle::Unpin`]); evicts what the bound asks. The
    /// store holds bodies by the batch ([`BodyCache::pin`],
    /// [`BodyCache::offer`]); the model tests one at a time.
    #[cfg(test)]
    pub fn put(&self, id: JobId, body: Bytes, pin: bool) {
        let mut ring = self.lock();
        ring.put(id, body, pin, None);
        self.publish(&mut ring);
    }

    /// Holds each of `bodies`, slices of `page`, it does not hold already,
    /// unpinned, under one hold of the lock: a cold read's page
    /// (`body_read.rs`), a page read ahead (`read_ahead.rs`). Marks
    /// `mark`'s entry, if held then (see [`BodyCache::find`]). Returns the
    /// ids it put in: their jobs' deletes may have been settled meanwhile
    /// (`read_ahead::keep`).
    pub fn offer(
        &self,
        page: PageKey,
        bodies: impl IntoIterator<Item = (JobId, Bytes)>,
        mark: Option<JobId>,
    ) -> Vec<JobId> {
        let mut ring = self.lock();
        let mut new = Vec::new();
        for (id, body) in bodies {
            if !ring.index.contains(id) && ring.put(id, body, false, Some(page)) {
                new.push(id);
            }
        }
        if let Some(at) = mark.and_then(|id| ring.index.get(id)) {
            ring.slots[at as usize]
                .as_mut()
                .expect("indexed slots hold")
                .ahead = true;
        }
        self.publish(&mut ring);
        new
    }

    /// Holds each of `bodies` as its job's, pinned until [`Settle::Unpin`],
    /// under one hold of the lock (a submission's puts).
    pub fn pin(&self, bodies: impl IntoIterator<Item = (JobId, Bytes)>) {
        let mut bodies = bodies.into_iter().peekable();
        if bodies.peek().is_none() {
            return;
        }
        let mut ring = self.lock();
        for (id, body) in bodies {
            ring.put(id, body, true, None);
        }
        self.publish(&mut ring);
    }

    /// Makes the changes sled's taking records in calls for, a few at a
    /// time: the absorber settles a whole batch, and every put takes this
    /// lock under the engine's. The bodies removed are let go of after the
    /// lock is released.
    pub fn settle(&self, changes: impl IntoIterator<Item = Settle>) {
        let mut changes = changes.into_iter().peekable();
        let mut gone = Vec::new();
        while changes.peek().is_some() {
            let mut ring = self.lock();
            for change in changes.by_ref().take(SETTLE_AT_ONCE) {
                match change {
                    Settle::Unpin(id) => ring.unpin(id),
                    Settle::Remove(id) => gone.extend(ring.remove(id)),
                }
            }
            ring.evict();
            self.publish(&mut ring);
            drop(ring);
            gone.clear();
        }
    }

    /// Bodies in a page sled holds, as slices of it (`share.rs`): the
    /// unpinned body held for each job, if as long (a job's body never
    /// changes), becomes its slice. The bodies let go of are freed after
    /// the lock is released.
    pub fn share(&self, page: PageKey, bodies: Vec<(JobId, Bytes)>) {
        let mut gone = Vec::new();
        let mut ring = self.lock();
        ring.share(page, bodies, &mut gone);
        ring.evict();
        self.publish(&mut ring);
        drop(ring);
    }

    /// Drops the body of `id` now: a put the store failed to keep
    /// (`Store::forget`). A delete leaves once absorbed ([`Settle::Remove`]).
    pub fn remove(&self, id: JobId) {
        let mut ring = self.lock();
        ring.remove(id);
        self.publish(&mut ring);
    }

    /// The bound (`--body-cache`).
    pub fn bound(&self) -> u64 {
        self.lock().max
    }

    /// Sets the bound, evicting down to it.
    pub fn resize(&self, max: u64) {
        let mut ring = self.lock();
        ring.max = max;
        ring.evict();
        self.stats.body_cache.max_bytes.store(max, RELAXED);
        self.publish(&mut ring);
    }

    /// Counts a body that could not be read back (`body_read.rs`).
    pub fn read_failed(&self) {
        self.stats.body_cache.read_errors.fetch_add(1, RELAXED);
    }

    /// Charged bytes held, and of those pinned.
    pub fn sizes(&self) -> (u64, u64) {
        let ring = self.lock();
        (ring.bytes, ring.pinned)
    }

    /// After a change: the ring's room given back if most of it is free,
    /// and the figure `stats` shows.
    fn publish(&self, ring: &mut Ring) {
        ring.compact();
        self.stats.body_cache.bytes.store(ring.bytes, RELAXED);
    }
}

const RELAXED: std::sync::atomic::Ordering = std::sync::atomic::Ordering::Relaxed;

impl Ring {
    /// The body of `id`, and whether it was marked (the mark goes).
    fn get(&mut self, id: JobId) -> Option<(Bytes, bool)> {
        let at = self.index.get(id)?;
        let slot = self.slots[at as usize]
            .as_mut()
            .expect("indexed slots hold");
        debug_assert_eq!(slot.id, id);
        slot.referenced = true;
        Some((slot.body.clone(), std::mem::take(&mut slot.ahead)))
    }

    /// Holds `body` as `id`'s (unmarked), a slice of `page` if given (never
    /// pinned then: a pinned body is a put's own); says whether it did (it
    /// may be evicted again before this returns).
    fn put(&mut self, id: JobId, body: Bytes, pin: bool, page: Option<PageKey>) -> bool {
        // Held already only if read back while it was being put again
        // (recovery's tail): rare, so a miss here is the common case.
        let was_pinned = self.index.contains(id) && self.remove(id).is_some_and(|s| s.pinned);
        let pinned = pin || was_pinned;
        debug_assert!(!(pinned && page.is_some()), "a pinned body is a copy");
        // An unpinned body larger than the whole cache would only evict
        // everything else, then itself.
        let cost = page.map_or(charge(&body), |page| ENTRY_CHARGE + u64::from(page.charge));
        if !pinned && cost > self.max {
            return false;
        }
        let slot = Slot {
            id,
            body,
            page: page.filter(|_| !pinned),
            referenced: true,
            pinned,
            ahead: false,
        };
        self.bytes += slot.charge();
        if pinned {
            self.pinned += slot.charge();
        }
        if let Some(page) = slot.page {
            self.hold(page, 1);
        }
        let at = match self.free.pop() {
            Some(at) => {
                self.slots[at as usize] = Some(slot);
                at
            }
            None => {
                self.slots.push(Some(slot));
                (self.slots.len() - 1) as u32
            }
        };
        self.index.insert(id, at);
        self.evict();
        true
    }

    /// Makes each unpinned body held of `bodies`' jobs, if as long, its
    /// slice of `page`; what they held before goes to `gone` (let go of
    /// outside the lock).
    fn share(&mut self, page: PageKey, bodies: Vec<(JobId, Bytes)>, gone: &mut Vec<Bytes>) {
        let mut taken = 0;
        for (id, body) in bodies {
            let Some(at) = self.index.get(id) else {
                continue;
            };
            let slot = self.slots[at as usize]
                .as_mut()
                .expect("indexed slots hold");
            if slot.pinned || slot.body.len() != body.len() || slot.page == Some(page) {
                continue;
            }
            let before = slot.charge();
            let old_page = slot.page.replace(page);
            gone.push(std::mem::replace(&mut slot.body, body));
            self.bytes = self.bytes - before + ENTRY_CHARGE;
            if let Some(old_page) = old_page {
                self.release(old_page);
            }
            taken += 1;
        }
        self.hold(page, taken);
    }

    /// Counts `n` more bodies held of `page`: charged on the first.
    fn hold(&mut self, page: PageKey, n: u32) {
        if n == 0 {
            return;
        }
        let held = self.pages.entry(page).or_insert(0);
        if *held == 0 {
            self.bytes += u64::from(page.charge);
        }
        *held += n;
    }

    /// Counts one body fewer held of `page`: its charge goes with the last.
    fn release(&mut self, page: PageKey) {
        let held = self.pages.get_mut(&page).expect("held pages are counted");
        *held -= 1;
        if *held == 0 {
            self.pages.remove(&page);
            self.bytes -= u64::from(page.charge);
        }
    }

    fn unpin(&mut self, id: JobId) {
        let Some(at) = self.index.get(id) else {
            return;
        };
        let slot = self.slots[at as usize]
            .as_mut()
            .expect("indexed slots hold");
        if slot.pinned {
            slot.pinned = false;
            self.pinned -= slot.charge();
        }
    }

    fn remove(&mut self, id: JobId) -> Option<Slot> {
        let at = self.index.remove(id)?;
        let slot = self.slots[at as usize].take().expect("indexed slots hold");
        self.bytes -= slot.charge();
        if slot.pinned {
            self.pinned -= slot.charge();
        }
        if let Some(page) = slot.page {
            self.release(page);
        }
        self.free.push(at);
        Some(slot)
    }

    /// Evicts until the unpinned bytes are within the bound. Two turns of
    /// the hand clear every bit and pass every unpinned slot, so the loop
    /// ends with the bound kept, however many are pinned.
    fn evict(&mut self) {
        let mut steps = 2 * self.slots.len();
        while self.bytes - self.pinned > self.max && steps > 0 {
            steps -= 1;
            if self.hand >= self.slots.len() {
                self.hand = 0;
            }
            let at = self.hand;
            self.hand += 1;
            let Some(slot) = self.slots[at].as_mut() else {
                continue;
            };
            if slot.pinned {
                continue;
            }
            if std::mem::take(&mut slot.referenced) {
                continue;
            }
            let id = slot.id;
            self.remove(id);
        }
    }

    /// Gives back the ring's room once most slots are free (after a burst,
    /// or a smaller bound): the live slots move to the front, in order.
    fn compact(&mut self) {
        if self.slots.len() < 64 || self.free.len() * 4 < self.slots.len() * 3 {
            return;
        }
        let live: Vec<Slot> = self.slots.drain(..).flatten().collect();
        self.free.clear();
        self.hand = 0;
        for (at, slot) in live.into_iter().enumerate() {
            self.index.insert(slot.id, at as u32);
            self.slots.push(Some(slot));
        }
        self.slots.shrink_to(2 * self.slots.len());
        self.free.shrink_to_fit();
        self.pages.shrink_to_fit();
        self.index.shrink();
    }
}

#[cfg(test)]
mod tests;
