//! Cached bodies made slices of sled's pages, while the store is idle
//! (issue 33).
//!
//! A put's body enters the body cache as the copy its connection read.
//! Once sled holds the put, the page sled wrote holds the body too, and
//! sled keeps the pages it writes in its own cache (docs/durability.md,
//! its cache floor): every such body is held twice, ~9 MB at 10k 1 KiB
//! jobs. Making the cached body a slice of sled's page lets the copy go.
//! Done as each batch was taken in, that cost the store's thread ~0.1 us
//! a body, and freeing copies the connections' threads allocated made
//! them wait on their allocator's locks: durable put fell to 0.74-0.87x
//! (benches/RESULTS.md, session 25). So it is done once the store is
//! quiet (no batch for [`QUIET`]; steps between a burst's batches slowed
//! a fill by ~10%): each batch queues where its bodies are (the pages'
//! slots, not the pages, which would be held after sled let them go), and
//! each quiet step reads back up to [`STEP_PAGES`] of them, newest first
//! (from sled's cache, as a rule), and hands their bodies to the cache.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::body_read::Bodies;
use super::pack::Placed;
use super::page;
use super::page_source::{PageSource, PageValue};
use super::slots::Slot;

/// How many pages the queue remembers: the newest, about as many as sled
/// keeps of what it wrote (16 MiB: its cache floor at 200k 1 KiB jobs).
/// Older ones it would read back from the disk (a copy sled then holds
/// for a while: 16 MB more at the peak with 64k bodies at 1 KiB), to
/// replace a copy of a body with a slice of a page only the cache holds.
const MAX_PAGES: usize = 4096;

/// How many pages a step reads back.
pub const STEP_PAGES: usize = 64;

/// How long after the last batch the steps start.
pub const QUIET: Duration = Duration::from_millis(200);

/// A page written, and the bodies it holds.
struct Written {
    slot: Slot,
    seq: u64,
    bodies: Vec<Placed>,
}

/// The pages whose bodies the cache may still hold as copies.
#[derive(Default)]
pub struct Unshared {
    pages: VecDeque<Written>,
    /// When the last batch was queued.
    last: Option<Instant>,
}

impl Unshared {
    /// Queues the bodies a batch placed at `now` (`Placed::page` indexing
    /// `pages`, the slot and sequence number of each new page), forgetting
    /// the oldest past [`MAX_PAGES`].
    pub fn queue(&mut self, now: Instant, pages: &[(Slot, u64)], placed: &[Placed]) {
        self.last = Some(now);
        for run in placed.chunk_by(|a, b| a.page == b.page) {
            let (slot, seq) = pages[run[0].page as usize];
            let bodies = run.to_vec();
            self.pages.push_back(Written { slot, seq, bodies });
        }
        let over = self.pages.len().saturating_sub(MAX_PAGES);
        self.pages.drain(..over);
    }

    /// When the next step is due: [`QUIET`] after the last batch; `None`
    /// if nothing is queued.
    pub fn due(&self) -> Option<Instant> {
        let last = self.last.filter(|_| !self.pages.is_empty())?;
        Some(last + QUIET)
    }

    /// Reads back up to [`STEP_PAGES`] queued pages from `source` and makes
    /// the cached bodies they hold slices of them. A slot that holds
    /// another page by now (cleaning freed it) is passed over, as is one
    /// that cannot be read: its bodies stay copies.
    pub fn step(&mut self, source: &dyn PageSource, bodies: &Bodies) {
        for _ in 0..STEP_PAGES {
            let Some(written) = self.pages.pop_back() else {
                return;
            };
            let Ok(Some(value)) = source.page(written.slot) else {
                continue;
            };
            if matches!(page::read(value.as_ref()), Ok((seq, _)) if seq == written.seq) {
                share(bodies, value, &written.bodies);
            }
        }
    }
}

/// Makes each body `placed` in `page` (a page sled holds, as it holds it)
/// that the cache holds a slice of it, so that sled's is the only copy. A
/// place past the page's end (a damaged page) is passed over.
fn share(bodies: &Bodies, page: PageValue, placed: &[Placed]) {
    let (page, key) = page.shared();
    let within = |body: &&Placed| body.start <= body.end && body.range().end <= page.len();
    let slices = (placed.iter().filter(within)).map(|body| (body.id, page.slice(body.range())));
    bodies.cache.share(key, slices.collect());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placed(page: u32, n: u64) -> Vec<Placed> {
        (0..n)
            .map(|i| Placed {
                id: u64::from(page) * 1000 + i,
                page,
                start: 50,
                end: 100,
            })
            .collect()
    }

    /// The queue keeps the newest pages with bodies, within its bound.
    #[test]
    fn the_queue_forgets_the_oldest_pages_past_its_bound() {
        let mut unshared = Unshared::default();
        let batches = MAX_PAGES as u64 / 2 + 3;
        for batch in 0..batches {
            // Three new pages, the middle one without bodies.
            let pages = [(0, batch), (1, batch), (2, batch)];
            let mut bodies = placed(0, 2);
            bodies.extend(placed(2, 3));
            unshared.queue(Instant::now(), &pages, &bodies);
        }
        assert_eq!(unshared.pages.len(), MAX_PAGES);
        let oldest = &unshared.pages[0];
        assert_eq!((oldest.slot, oldest.seq), (0, 3));
        let newest = unshared.pages.back().unwrap();
        assert_eq!(
            (newest.slot, newest.seq, newest.bodies.len()),
            (2, batches - 1, 3)
        );
    }

    /// Steps are due a quiet spell after the last batch, and not at all
    /// with nothing queued.
    #[test]
    fn steps_are_due_once_the_batches_stop() {
        let mut unshared = Unshared::default();
        let now = Instant::now();
        assert_eq!(unshared.due(), None);
        unshared.queue(now, &[(1, 1)], &placed(0, 1));
        assert_eq!(unshared.due(), Some(now + QUIET));
        let later = now + Duration::from_millis(50);
        unshared.queue(later, &[(2, 2)], &[]);
        assert_eq!(unshared.due(), Some(later + QUIET));
        unshared.pages.clear();
        assert_eq!(unshared.due(), None);
    }
}
