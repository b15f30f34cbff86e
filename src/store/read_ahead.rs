//! Read-ahead: a drain past the body cache finds its bodies cached
//! (issue 33).
//!
//! A reply whose body the cache does not hold waits for a read on a
//! blocking thread (`fill.rs`), and its connection's pipeline waits with
//! it. In a drain of a backlog larger than the cache that was one reserve
//! in ~13 (a 4 KiB page of 256-byte jobs, whose other bodies the read
//! keeps, `body_read.rs`): the drain ran at 0.60x the rate with bodies in
//! RAM, and a cold drain after a restart had a reserve p99 of 2.85 ms,
//! though the reads were 1.5% of the CPU. The cost was the round trip to
//! the blocking thread, once a page, not the read. Jobs are packed into
//! pages in put order and a drain asks for them in that order, so the
//! page after the one a drain reads from is the one it asks for next.
//!
//! So a cold read asks one reader thread to read the [`START`] pages after
//! its job's page (by sequence number: pages are written in put order),
//! off every reply's path. Each page read ahead gives the bodies of its
//! live jobs to the cache, unpinned, and marks the first of them: the
//! first reply served that body from the cache asks for the [`LEAD`]
//! pages after *its* page ([`Bodies::cached`](super::Bodies::cached)).
//! Pages read for recent requests are not read again, so once a drain is
//! under way one page is read per page drained, [`LEAD`] pages ahead of
//! it, and its replies wait for no read but the first. The lead is for
//! the moments the reader does not run (two cores shared by the
//! connections' threads, the absorber and this one) and for pipelined
//! clients: 50 connections with 100 reserves in flight each moved the
//! drain by up to ~8 pages a batch, and with a lead of 2 pages a quarter
//! of the cold replies stayed. A cold read alone reads only [`START`]
//! pages ahead, so a `peek` here and there costs few reads for nothing.
//! If the drain overtakes the reader anyway, its next cold read starts
//! over.
//!
//! One thread with a queue of at most [`QUEUE`] job ids, rather than a
//! task per read (unbounded) or cold reads of several connections batched
//! on one reader (each reply would still wait for it): a read ahead is
//! awaited by nobody, so it needs no runtime. A request past a full
//! queue pushes the oldest out: a drain's latest request is nearest to
//! where it is, an older one may be behind it by now. Most requests come from a
//! cache hit under the engine lock, where waking the thread (a futex call)
//! would hold up every connection: there a request is only queued, and the
//! connection wakes the reader once the lock is released
//! ([`ReadAhead::wake`], from its flush).
//!
//! The cache's bound holds as for any read: bodies go in unpinned and
//! evict only unpinned ones. With a cache of less than [`MIN_CACHE`]
//! nothing is read ahead: it would evict the pages it read before the
//! drain came to them (and `--body-cache 0` keeps each reply a read).
//!
//! Deleted jobs stay out ([`keep`]): only bodies of jobs the directory
//! places are kept, as for a cold read's neighbours. A delete leaves the
//! directory when sled takes it in, then its body leaves the cache
//! (`Settle::Remove`, `absorb.rs`); a body looked up before the first but
//! put in after the second would stay, so each body put in is looked up
//! again after, unless the directory has not changed since the first look.
//! Cold reads keep their page the same way (`Bodies::read`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::Thread;

use bytes::Bytes;
use sprout_protocol::JobId;

use super::body_cache::{BodyCache, PageKey, Settle};
use super::directory::Directory;
use super::entry::Entry;
use super::page;
use super::page_source::Source;
use super::record;
use crate::engine::INLINE_BODY;

/// Pages read after a cold read's page. A page of 256-byte jobs is ~13
/// reserves of a drain.
pub const START: u64 = 2;
/// Pages read after the page of a body a page read ahead brought: a
/// drain's lead (see the module docs), 128 KiB.
pub const LEAD: u64 = 32;
/// Requests waiting, at most.
pub const QUEUE: usize = 4;
/// Pages the reader remembers having read, not to read them again.
const RECENT: usize = 2 * LEAD as usize;
/// No read-ahead with a cache smaller than this: four leads.
pub const MIN_CACHE: u64 = 4 * LEAD * 4096;

/// The bodies of the live jobs whose images `page` holds, by job id in
/// page order, as slices of it: none the engine holds itself
/// (`INLINE_BODY`), none of a deleted job (`dir` places it nowhere), which
/// nothing would ask for. An entry that does not check out is left out.
/// Bodies no job changes, so any image's is its job's.
pub fn live_bodies(dir: &Directory, page: &Bytes) -> Vec<(JobId, Bytes)> {
    let Ok((_, entries)) = page::read(page) else {
        return Vec::new();
    };
    let mut decoder = record::Decoder::default();
    let mut body = |entry: Entry<'_>| {
        let job = decoder.job(page, entry.image()?).ok()?;
        let kept = job.id == entry.id && job.body.len() > INLINE_BODY;
        (kept && dir.find(job.id).is_some()).then_some((job.id, job.body))
    };
    entries
        .map_while(Result::ok)
        .filter_map(&mut body)
        .collect()
}

/// Puts `bodies` (of jobs `dir` placed, looked up after `dir` was at
/// epoch `since`) in the cache, `mark`'s marked, and takes out again
/// those whose jobs `dir` no longer places: a delete settled between the
/// first look and the insert (see the module docs). Either the delete
/// leaves the directory before the second look, or its `Settle::Remove`
/// comes after the insert and removes the body itself. The second look
/// is skipped if the directory's epoch is still `since` (and even): a
/// delete is settled only after the batch that took it out of the
/// directory moved the epoch, and an epoch moved before the settle's
/// hold of the cache's lock is seen after the insert's. Not waiting for
/// a batch's lock spares a cold reply (`Bodies::read`) when it can.
pub fn keep(
    cache: &BodyCache,
    dir: &Directory,
    page: PageKey,
    bodies: impl IntoIterator<Item = (JobId, Bytes)>,
    mark: Option<JobId>,
    since: u64,
) {
    let new = cache.offer(page, bodies, mark);
    if since.is_multiple_of(2) && dir.epoch() == since {
        return;
    }
    let gone = new.into_iter().filter(|&id| dir.find(id).is_none());
    cache.settle(gone.map(Settle::Remove));
}

/// Pages wanted after job `id`'s: [`LEAD`] if `hit` (a body read ahead was
/// served: a drain walks the pages), else [`START`] (a cold read).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Request {
    id: JobId,
    hit: bool,
}

/// The requests, under a lock of their own.
#[derive(Default)]
struct Queue {
    ids: VecDeque<Request>,
    /// The reader waits for a request (parked, or about to be).
    asleep: bool,
    /// The reader is reading for a request it took.
    busy: bool,
    stopped: bool,
}

#[derive(Default)]
struct State {
    queue: Mutex<Queue>,
    /// A request was queued for a sleeping reader: the next
    /// [`ReadAhead::wake`] unparks it.
    nudge: AtomicBool,
    /// Rung when the reader goes to sleep (tests wait for it).
    idle: Condvar,
}

impl State {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The reader thread's handle; see the module docs. Stops it when
/// dropped.
pub struct ReadAhead {
    state: Arc<State>,
    /// `None` if the thread could not be started: nothing is read ahead.
    thread: Option<Thread>,
}

impl ReadAhead {
    /// Starts the reader of pages from `source` where `dir` says, for
    /// `cache`.
    pub fn start(cache: Arc<BodyCache>, dir: Arc<Directory>, source: Source) -> ReadAhead {
        let state = Arc::new(State::default());
        let reader = Reader { cache, dir, source };
        let spawned = std::thread::Builder::new()
            .name("sprout-read-ahead".into())
            .spawn({
                let state = state.clone();
                move || reader.run(&state)
            });
        let thread = match spawned {
            Ok(handle) => Some(handle.thread().clone()),
            Err(e) => {
                tracing::warn!("no read-ahead of bodies: cannot start its thread: {e}");
                None
            }
        };
        ReadAhead { state, thread }
    }

    /// Asks for the pages after job `id`'s, as after a cold read of it or,
    /// if `hit`, after a hit on a body read ahead; queued only (no wake:
    /// this may run under the engine lock). A full queue drops its oldest.
    pub fn ask(&self, id: JobId, hit: bool) {
        if self.thread.is_none() {
            return;
        }
        let request = Request { id, hit };
        let mut queue = self.state.lock();
        if queue.stopped || queue.ids.contains(&request) {
            return;
        }
        if queue.ids.len() >= QUEUE {
            queue.ids.pop_front();
        }
        queue.ids.push_back(request);
        if std::mem::take(&mut queue.asleep) {
            self.state.nudge.store(true, Ordering::Release);
        }
    }

    /// Wakes the reader if a request waits for it (an atomic load
    /// otherwise): called where no lock is held.
    pub fn wake(&self) {
        let nudge = &self.state.nudge;
        if nudge.load(Ordering::Acquire) && nudge.swap(false, Ordering::AcqRel) {
            if let Some(thread) = &self.thread {
                thread.unpark();
            }
        }
    }

    /// Stops the reader (it ends after the page it may be reading).
    pub fn stop(&self) {
        self.state.lock().stopped = true;
        if let Some(thread) = &self.thread {
            thread.unpark();
        }
    }

    /// Waits until the reader has done every request (tests: a drain that
    /// never overtakes it).
    #[cfg(test)]
    pub fn wait_idle(&self) {
        self.wake();
        let mut queue = self.state.lock();
        while self.thread.is_some() && !queue.stopped && (queue.busy || !queue.ids.is_empty()) {
            queue = (self.state.idle.wait(queue)).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the reader thread reads with.
struct Reader {
    cache: Arc<BodyCache>,
    dir: Arc<Directory>,
    source: Source,
}

impl Reader {
    fn run(self, state: &State) {
        let mut recent = VecDeque::with_capacity(RECENT);
        while let Some(request) = next(state) {
            if self.cache.bound() >= MIN_CACHE {
                self.after(request, &mut recent);
            }
        }
    }

    /// Reads the pages `request` wants that it has not read for a recent
    /// one, nearest first.
    fn after(&self, request: Request, recent: &mut VecDeque<u64>) {
        let Some(found) = self.dir.find(request.id) else {
            return;
        };
        let lead = if request.hit { LEAD } else { START };
        for seq in found.seq + 1..=found.seq + lead {
            if recent.contains(&seq) {
                continue;
            }
            if recent.len() == RECENT {
                recent.pop_front();
            }
            recent.push_back(seq);
            if !self.page(seq) {
                return;
            }
        }
    }

    /// Keeps page `seq`'s live bodies, the first marked; `false` if there
    /// is no such page (yet) or the store closed. A page that cannot be
    /// read is passed over: a reply's own read reports a damaged store.
    fn page(&self, seq: u64) -> bool {
        let Some(page) = self.dir.lock().pages.get(seq) else {
            return false;
        };
        let source = self
            .source
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let Some(source) = source else {
            return false;
        };
        let value = match source.page(page.slot) {
            Ok(Some(value)) => value,
            Ok(None) | Err(_) => return true,
        };
        let (value, key) = value.shared();
        // A freed slot may hold a newer page by now, one no drain is at.
        if !matches!(page::read(&value), Ok((stored, _)) if stored == seq) {
            return true;
        }
        let since = self.dir.epoch();
        let bodies = live_bodies(&self.dir, &value);
        let mark = bodies.first().map(|&(id, _)| id);
        keep(&self.cache, &self.dir, key, bodies, mark, since);
        true
    }
}

/// The next request, once there is one; `None` once stopped.
fn next(state: &State) -> Option<Request> {
    let mut queue = state.lock();
    loop {
        if queue.stopped {
            return None;
        }
        if let Some(id) = queue.ids.pop_front() {
            queue.busy = true;
            return Some(id);
        }
        queue.busy = false;
        queue.asleep = true;
        state.idle.notify_all();
        drop(queue);
        // `wake` unparks after `ask` cleared `asleep`; a wake that comes
        // first leaves its token, and park returns at once.
        std::thread::park();
        queue = state.lock();
    }
}

#[cfg(test)]
mod tests;
