//! Reading the queue for the admin API and `/metrics`: tubes with their
//! figures, one job, and a tube's jobs in one state, a page at a time.
//!
//! Nothing here changes the engine (beyond firing what is due at `now`, as
//! every call does), and nothing is counted as a command. Each call is
//! bounded so the engine's lock is held briefly: a page holds at most
//! [`MAX_PAGE`] jobs, bodies are shared handles (the caller cuts its
//! preview after the lock is gone).

use bytes::Bytes;
use sprout_protocol::{JobId, TubeName};

use crate::binlog_stats::BinlogStats;

use super::clock::Time;
use super::counts::Counts;
use super::heap::HeapEntry;
use super::histogram::Latency;
use super::job::{JobRow, State};
use super::machine::Engine;
use super::stats;
use super::table::JobSlot;
use super::tube_ix::TubeIx;

/// The most jobs one page holds.
pub const MAX_PAGE: usize = 1000;

/// Where a page ends, to start the next one after it: a job's place in its
/// state's order, (priority, id) for ready, (due time, id) for delayed and
/// reserved, (bury sequence, id) for buried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor(pub u64, pub u64);

/// One job as the admin API shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobInfo {
    pub id: JobId,
    pub tube: TubeName,
    pub state: State,
    pub pri: u32,
    /// µs since the put.
    pub age: Time,
    /// Seconds of the last put/release delay.
    pub delay: u32,
    pub ttr: u32,
    /// µs until a delayed job is ready or a reserved job's TTR runs out.
    pub time_left: Time,
    pub counts: Counts,
    pub body: Bytes,
    /// With `-b`, the length of a body the engine leaves to the store:
    /// `body` is empty until the caller fills it (`http/app.rs`).
    pub stored_len: Option<usize>,
    /// Its place in its state's order (see [`Cursor`]).
    pub cursor: Cursor,
}

/// A page of a tube's jobs in one state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    pub jobs: Vec<JobInfo>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<Cursor>,
}

/// A tube's figures: its `stats-tube` document, its latency histograms and
/// the age of its oldest ready job.
#[derive(Clone, Debug)]
pub struct TubeFigures {
    pub name: TubeName,
    /// The `stats-tube` document, exactly as the command answers it.
    pub stats: Bytes,
    pub ready: u64,
    pub reserved: u64,
    pub delayed: u64,
    pub buried: u64,
    pub paused: bool,
    pub latency: Latency,
    /// µs since the put of the oldest ready job (beanstalkd #37).
    pub oldest_ready_age: Option<Time>,
}

impl Engine {
    /// The store's counters (the `binlog-*` keys of `stats`, and more).
    pub fn binlog(&self) -> &BinlogStats {
        &self.config.binlog
    }

    /// The `stats` document at `now`, exactly as the command answers it.
    pub fn stats_at(&mut self, now: Time) -> Bytes {
        self.tick(now);
        self.stats_document()
    }

    /// Every tube's figures, in `list-tubes` order.
    ///
    /// Finding the oldest ready job reads every ready entry of a tube (its
    /// heap is in priority order; ids, which follow put order, are in the
    /// entries, so no job record is read but the oldest's).
    pub fn tube_figures(&mut self, now: Time) -> Vec<TubeFigures> {
        self.tick(now);
        let tubes = self.tubes.list().to_vec();
        tubes.into_iter().map(|t| self.figures_of(t)).collect()
    }

    /// One tube's figures.
    pub fn tube_figures_of(&mut self, name: &TubeName, now: Time) -> Option<TubeFigures> {
        self.tick(now);
        let t = self.tubes.find(name)?;
        Some(self.figures_of(t))
    }

    fn figures_of(&self, t: TubeIx) -> TubeFigures {
        let tube = &self.tubes[t];
        let oldest = tube.ready.entries().iter().min_by_key(|e| e.id);
        TubeFigures {
            name: tube.name.clone(),
            stats: stats::tube(tube, self.now),
            ready: tube.ready.len() as u64,
            reserved: tube.reserved,
            delayed: tube.delayed.len() as u64,
            buried: tube.buried.len() as u64,
            paused: tube.is_paused(),
            latency: tube.latency.clone(),
            oldest_ready_age: oldest.map(|e| self.now.saturating_sub(self.jobs[e.slot].created)),
        }
    }

    /// Job `id`, if it exists.
    pub fn job_info(&mut self, id: JobId, now: Time) -> Option<JobInfo> {
        self.tick(now);
        let slot = self.jobs.find(id)?;
        Some(self.info(slot, self.cursor_of(slot)))
    }

    /// Every job of tube `name` with its body, in any state and no order
    /// (one pass over the tube, not pages): what a new cluster leader's
    /// embedded Redis bridge reads its timers and deliveries from
    /// (`cluster/bridge.rs`).
    pub fn bodies_in(&self, name: &TubeName) -> Vec<(JobId, Bytes)> {
        let Some(t) = self.tubes.find(name) else {
            return Vec::new();
        };
        let tube = &self.tubes[t];
        let held = self
            .conns
            .values()
            .flat_map(|c| c.reserved.iter())
            .map(|&(_, slot)| slot)
            .filter(|&slot| self.jobs.tube(slot) == t);
        let slots = (tube.ready.entries().iter().map(|e| e.slot))
            .chain(tube.delayed.entries().iter().map(|e| e.slot))
            .chain(tube.buried.iter().map(|&(_, slot)| slot))
            .chain(held);
        slots
            .map(|slot| (self.jobs[slot].id, self.jobs.body_bytes(slot)))
            .collect()
    }

    /// Up to `limit` (at most [`MAX_PAGE`]) jobs of tube `name` in `state`,
    /// in that state's order, after `after`; `None` if there is no such
    /// tube. Ready jobs come in reserve order, delayed jobs soonest first,
    /// reserved jobs by TTR deadline, buried jobs in kick order.
    pub fn jobs_page(
        &mut self,
        name: &TubeName,
        state: State,
        after: Option<Cursor>,
        limit: usize,
        now: Time,
    ) -> Option<Page> {
        self.tick(now);
        let t = self.tubes.find(name)?;
        let limit = limit.clamp(1, MAX_PAGE);
        // One more than asked for tells whether there is a next page.
        let slots = self.ordered_slots(t, state, after, limit + 1);
        let more = slots.len() > limit;
        let jobs: Vec<JobInfo> = slots
            .into_iter()
            .take(limit)
            .map(|(cursor, slot)| self.info(slot, cursor))
            .collect();
        let next = if more {
            jobs.last().map(|j| j.cursor)
        } else {
            None
        };
        Some(Page { jobs, next })
    }

    /// The first `n` slots of tube `t` in `state` after `after`, with their
    /// cursors, in order.
    pub(super) fn ordered_slots(
        &self,
        t: TubeIx,
        state: State,
        after: Option<Cursor>,
        n: usize,
    ) -> Vec<(Cursor, JobSlot)> {
        let tube = &self.tubes[t];
        let after_pair = after.map(|Cursor(a, b)| (a, b));
        match state {
            State::Ready => heap_page(&tube.ready.ordered_after(after_pair, n, &self.jobs), self),
            State::Delayed => {
                heap_page(&tube.delayed.ordered_after(after_pair, n, &self.jobs), self)
            }
            State::Buried => {
                let from = after.map_or(0, |Cursor(seq, _)| seq.saturating_add(1));
                tube.buried
                    .range((from, JobSlot::FIRST)..)
                    .take(n)
                    .map(|&(seq, slot)| (Cursor(seq, self.jobs[slot].id), slot))
                    .collect()
            }
            State::Reserved => {
                // Held jobs are spread over the connections holding them;
                // there are as many as there are busy workers.
                let mut held: Vec<(Cursor, JobSlot)> = self
                    .conns
                    .values()
                    .flat_map(|c| c.reserved.iter())
                    .filter(|&&(_, slot)| self.jobs.tube(slot) == t)
                    .map(|&(deadline, slot)| (Cursor(deadline, self.jobs[slot].id), slot))
                    .filter(|&(cursor, _)| after.is_none_or(|after| cursor > after))
                    .collect();
                held.sort_unstable();
                held.truncate(n);
                held
            }
        }
    }

    fn cursor_of(&self, slot: JobSlot) -> Cursor {
        let job = &self.jobs[slot];
        match job.state() {
            State::Ready => Cursor(u64::from(job.pri), job.id),
            State::Delayed | State::Reserved | State::Buried => Cursor(job.deadline, job.id),
        }
    }

    fn info(&self, slot: JobSlot, cursor: Cursor) -> JobInfo {
        let job: &JobRow = &self.jobs[slot];
        let profile = self.jobs.profile(slot);
        let time_left = match job.state() {
            State::Delayed | State::Reserved => job.deadline.saturating_sub(self.now),
            State::Ready | State::Buried => 0,
        };
        JobInfo {
            id: job.id,
            tube: self.tubes[profile.tube].name.clone(),
            state: job.state(),
            pri: job.pri,
            age: self.now.saturating_sub(job.created),
            delay: profile.delay,
            ttr: profile.ttr,
            time_left,
            counts: self.jobs.counts(slot),
            body: self.jobs.body_bytes(slot),
            stored_len: self.jobs.stored_len(slot),
            cursor,
        }
    }
}

fn heap_page<E: HeapEntry>(entries: &[E], engine: &Engine) -> Vec<(Cursor, JobSlot)> {
    entries
        .iter()
        .map(|&e| {
            let (a, b) = e.order(&engine.jobs);
            (Cursor(a, b), e.slot())
        })
        .collect()
}

impl Engine {
    /// The latency histograms of every tube, added up (for the dashboard's
    /// charts: cheaper than [`Engine::tube_figures`], which scans queues).
    pub fn latency_total(&mut self, now: Time) -> Latency {
        self.tick(now);
        let mut total = Latency::default();
        for &t in self.tubes.list() {
            total.add(&self.tubes[t].latency);
        }
        total
    }
}

/// Tubes picked by name, with the connections that use or watch them: how
/// the dashboard sets the Redis bridge's timer tubes and its own
/// connections apart from the user's figures (the bridge's timers would
/// otherwise count as delayed jobs, its sessions as producers and workers).
///
/// The picked tubes' figures, and the connections that use or watch one.
#[derive(Clone, Debug, Default)]
pub struct Apart {
    pub tubes: Vec<TubeFigures>,
    pub connections: u32,
    pub producers: u32,
    pub workers: u32,
}

impl Engine {
    /// The tubes `pick` chooses and their connections (one pass over the
    /// connections; only the picked tubes' queues are read).
    pub fn apart(&mut self, now: Time, pick: impl Fn(&TubeName) -> bool) -> Apart {
        self.tick(now);
        let picked: Vec<_> = (self.tubes.list().iter().copied())
            .filter(|&t| pick(&self.tubes[t].name))
            .collect();
        let mut apart = Apart {
            tubes: picked.iter().map(|&t| self.figures_of(t)).collect(),
            ..Apart::default()
        };
        if picked.is_empty() {
            return apart;
        }
        let held = |t| picked.contains(t);
        for c in self.conns.values() {
            if held(&c.using) || c.watch.iter().any(held) {
                apart.connections += 1;
                apart.producers += u32::from(c.producer);
                apart.workers += u32::from(c.worker);
            }
        }
        apart
    }
}

#[cfg(test)]
mod apart_tests {
    use std::time::Duration;

    use sprout_protocol::Command as C;

    use super::super::tests::{engine_with, name, put_cmd, reply};

    #[test]
    fn picked_tubes_and_the_connections_that_use_or_watch_them() {
        let mut e = engine_with(false);
        let (user, timers, worker) = (e.connect(), e.connect(), e.connect());
        reply(&mut e, user, put_cmd(0, Duration::ZERO, 60, "job"), 0);
        reply(&mut e, timers, C::Use(name("bridge-timers.x")), 0);
        let delayed = put_cmd(0, Duration::from_secs(30), 60, "timer");
        reply(&mut e, timers, delayed, 0);
        reply(&mut e, worker, C::Watch(name("bridge-timers.x")), 0);
        reply(&mut e, worker, C::ReserveWithTimeout(Duration::ZERO), 0);
        let apart = e.apart(0, |t| t.as_str().starts_with("bridge-timers."));
        let names: Vec<_> = apart.tubes.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["bridge-timers.x"]);
        assert_eq!(apart.tubes[0].delayed, 1);
        assert_eq!(
            (apart.connections, apart.producers, apart.workers),
            (2, 1, 1)
        );
        let none = e.apart(0, |_| false);
        assert!(none.tubes.is_empty() && none.connections == 0);
    }
}
