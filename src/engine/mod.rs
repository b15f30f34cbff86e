//! The job state machine: every command's effect on jobs, tubes and
//! connections, with beanstalkd 1.13's semantics.
//!
//! Pure and synchronous: no sockets, no tasks, no clock reads (the
//! [`Clock`] the server reads is in `clock.rs`). The caller passes the
//! current [`Time`] in, holds the engine under one short lock,
//! and after each call drains [`Engine::take_wakeups`] to answer connections
//! blocked in `reserve` (their answer comes later, from another connection's
//! command or from [`Engine::tick`]).
//!
//! Timers: [`Engine::next_deadline`] is the earliest moment anything is due
//! (a delayed job, a TTR, a DEADLINE_SOON margin, a pause, a reserve
//! timeout); the server's timer thread sleeps until then and calls
//! [`Engine::tick`].
//!
//! Each beanstalk command is one function in `commands.rs` (tuber's
//! batches in `batch.rs`), picked by `dispatch.rs`; this file holds the
//! engine's state, its calls for the
//! server, and the state transitions every command shares.

use rustc_hash::FxHashMap;
use sprout_protocol::{Command, JobId, Op, ProtocolError, Rejected, Response, URGENT_THRESHOLD};

use crate::binlog_stats::BinlogStats;

mod access;
mod admin;
#[cfg(test)]
mod admin_tests;
mod batch;
mod bodies;
mod browse;
mod clock;
mod commands;
mod conn;
mod counts;
mod dispatch;
mod ext;
#[cfg(test)]
mod ext_tests;
mod fire;
mod heap;
mod histogram;
mod host;
mod job;
mod journal;
mod profile;
mod room;
mod stats;
mod table;
#[cfg(test)]
mod tests;
mod timers;
mod tube;
mod tube_ix;

pub use admin::AdminError;
pub use browse::{Apart, Cursor, JobInfo, Page, TubeFigures, MAX_PAGE};
use clock::{micros, seconds, MICROS_PER_SECOND};
pub use clock::{Clock, Time};
use conn::{Conn, Wait};
use counts::Counter;
pub use histogram::{quantile, Histogram, Latency, BOUNDS_MICROS};
use host::Host;
pub use job::State;
pub use journal::{Extras, JobImage, Record, Stored};
pub use room::{cost, Change, Room, DELETE_ROOM, ENTRY_FIXED_BYTES, FRAME_BYTES, TOMBSTONE_BYTES};
use stats::Stats;
pub use stats::{via_lines, ClusterStats, VIA_NODE, VIA_ROLE};
use table::{JobSlot, JobTable};
use timers::{TimerKey, Timers};
use tube::Tubes;
use tube_ix::TubeIx;

/// A connection, as the engine knows it.
pub type ConnId = u64;

/// The holder of jobs reserved on another node, whose connection died with
/// it (cluster mode): nobody can delete, release, bury or touch them, and
/// each times out (back to ready, `timeouts` one more) when its TTR runs
/// out. Never a client's id (those start at 1).
const DEPARTED: ConnId = 0;

/// What the engine is given at start: the limits of `-z` and
/// `--max-jobs-size`, whether to journal, and facts about the server that
/// `stats` reports but the engine does not own.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// `-z`: the largest job body accepted (reported as `max-job-size`).
    pub max_job_size: u32,
    /// `-s`: reported as `binlog-max-size`.
    pub binlog_max_size: u64,
    /// Keep a [`Record`] of every change for a store ([`Engine::take_journal`]).
    pub journal: bool,
    /// The store's counters, for the `binlog-*` keys of `stats`.
    pub binlog: std::sync::Arc<BinlogStats>,
    /// `--max-jobs-size`: puts that would hold more than this many bytes of
    /// bodies in all answer OUT_OF_MEMORY.
    pub jobs_budget: Option<u64>,
}

/// What a command does to the connection that sent it.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Answer at once.
    Reply(Response),
    /// The connection is now blocked in `reserve`: its answer will come
    /// through [`Engine::take_wakeups`].
    Wait,
    /// `quit`: close the connection without an answer.
    Close,
    /// Not finished: run this command again once others have had the
    /// lock (`flush-tube`'s steps, `batch.rs`).
    Again(Command),
}

/// The whole in-memory state of the server.
pub struct Engine {
    config: EngineConfig,
    host: Host,
    started: Time,
    /// The latest moment any call has passed in (calls may race to the lock
    /// with slightly older clock readings; time never goes back here).
    now: Time,
    jobs: JobTable,
    tubes: Tubes,
    /// By id. Looked up several times per command; ids are handed out
    /// here in sequence, never chosen by a client, so the fast unkeyed
    /// FxHash is safe.
    conns: FxHashMap<ConnId, Conn>,
    timers: Timers,
    stats: Stats,
    wakeups: Vec<(ConnId, Response)>,
    journal: Vec<Record>,
    next_job_id: JobId,
    next_conn: ConnId,
    next_wait_seq: u64,
    next_bury_seq: u64,
    draining: bool,
    /// What the store can still take (see `room.rs`).
    room: Room,
    /// The store's current journal file, and by slot the file each job's
    /// latest record went to (empty without a journal).
    file: u32,
    files: Vec<u32>,
    /// In cluster mode, this node's part in it (`stats` shows it).
    cluster: Option<ClusterStats>,
    /// tuber's tags of tagged jobs (`ext.rs`).
    ext: ext::Ext,
}

impl Engine {
    pub fn new(config: EngineConfig, now: Time) -> Engine {
        Engine {
            config,
            host: Host::read(),
            started: now,
            now,
            jobs: JobTable::new(),
            tubes: Tubes::new(),
            conns: FxHashMap::default(),
            timers: Timers::default(),
            stats: Stats::default(),
            wakeups: Vec::new(),
            journal: Vec::new(),
            next_job_id: 1,
            next_conn: 1,
            next_wait_seq: 0,
            next_bury_seq: 0,
            draining: false,
            room: Room::UNLIMITED,
            file: 0,
            files: Vec::new(),
            cluster: None,
            ext: ext::Ext::default(),
        }
    }

    /// What `stats` says of this node's cluster (`src/cluster/`). From then
    /// on the engine is in cluster mode: a new leader takes reservations
    /// over, so reserves, touches and the jobs a closed connection gives
    /// back are recorded too (see [`Engine::restore`]).
    pub fn set_cluster(&mut self, cluster: ClusterStats) {
        self.cluster = Some(cluster);
    }

    /// This node's cluster as [`Engine::set_cluster`] last set it.
    pub fn cluster(&self) -> Option<&ClusterStats> {
        self.cluster.as_ref()
    }

    /// A new client: it uses and watches `default`.
    pub fn connect(&mut self) -> ConnId {
        let id = self.next_conn;
        self.next_conn += 1;
        let conn = Conn::new();
        let default = &mut self.tubes[conn.using];
        default.using += 1;
        default.watching += 1;
        self.conns.insert(id, conn);
        self.stats.connections += 1;
        self.stats.total_connections += 1;
        id
    }

    /// The client is gone: its reserved jobs return to ready at once, it
    /// stops waiting, its tubes lose a reference.
    pub fn disconnect(&mut self, conn: ConnId, now: Time) {
        self.tick(now);
        if !self.conns.contains_key(&conn) {
            return;
        }
        self.stop_waiting(conn);
        while let Some((_, slot)) = self.conns[&conn].soonest() {
            self.unreserve(conn, slot);
            self.make_ready(slot);
            self.record_for_cluster(slot);
        }
        self.ext_clear_flushing(conn);
        let mut c = self.conns.remove(&conn).expect("known connection");
        self.timers.set(TimerKey::Conn(conn), None);
        self.stats.connections -= 1;
        self.stats.producers -= u32::from(c.producer);
        self.stats.workers -= u32::from(c.worker);
        // beanstalkd empties the watch set by always removing its first
        // item; the order matters because it shapes the global tube list.
        while !c.watch.is_empty() {
            let t = c.watch.swap_remove(0);
            self.tubes[t].watching -= 1;
            self.drop_tube_ref(t);
        }
        self.tubes[c.using].using -= 1;
        self.drop_tube_ref(c.using);
        if self.con_freed() {
            self.con_serve_waiters();
        }
    }

    /// Runs one command for `conn`.
    ///
    /// Everything due at `now` fires first, so a job delayed until `now` is
    /// ready for this command. A connection blocked in `reserve` should not
    /// send commands; if it does, it silently stops waiting.
    pub fn execute(&mut self, conn: ConnId, cmd: Command, now: Time) -> Outcome {
        self.run(conn, cmd, now, dispatch::dispatch)
    }

    /// What every command goes through: what is due fires, the command is
    /// counted and ends a wait, `dispatch` runs it, what became due fires.
    fn run(
        &mut self,
        conn: ConnId,
        cmd: Command,
        now: Time,
        dispatch: impl FnOnce(&mut Engine, ConnId, Command) -> Outcome,
    ) -> Outcome {
        self.tick(now);
        if !self.conns.contains_key(&conn) {
            return Outcome::Close;
        }
        self.stats.count(cmd.op());
        self.stop_waiting(conn);
        let outcome = dispatch(self, conn, cmd);
        self.tick(now);
        outcome
    }

    /// Accounts for a request the parser refused (stats counters and the
    /// producer flag move as in beanstalkd). The caller replies with the error.
    ///
    /// A `put` refused for a missing CRLF also uses up a job id, as in
    /// beanstalkd (which makes the job before it reads the body).
    pub fn reject(&mut self, conn: ConnId, rejected: Rejected) {
        let Some(op) = rejected.counted else { return };
        self.stats.count(op);
        if op == Op::Put
            && rejected.error == ProtocolError::ExpectedCrlf
            && self.conns.contains_key(&conn)
        {
            self.set_producer(conn);
            self.next_job_id += 1;
        }
    }

    /// Fires everything due at `now`.
    pub fn tick(&mut self, now: Time) {
        self.now = self.now.max(now);
        if self.cooling() {
            self.expire_cooling();
        }
        if self.groups_unsettled() {
            self.release_unsettled();
        }
        while let Some(key) = self.timers.pop_due(self.now) {
            match key {
                TimerKey::Delayed(t) => self.delay_ended(t),
                TimerKey::Unpause(t) => {
                    self.tubes[t].pause = 0;
                    self.serve_waiters(t);
                }
                TimerKey::Conn(c) => self.conn_due(c),
            }
        }
        if self.con_freed() {
            self.con_serve_waiters();
        }
    }

    /// The earliest moment [`Engine::tick`] has work, if any.
    pub fn next_deadline(&self) -> Option<Time> {
        self.timers.next()
    }

    /// Answers for blocked connections produced since the last call.
    pub fn take_wakeups(&mut self) -> std::vec::Drain<'_, (ConnId, Response)> {
        self.wakeups.drain(..)
    }

    /// SIGUSR1: refuse new jobs with DRAINING.
    pub fn set_draining(&mut self, on: bool) {
        self.draining = on;
    }

    /// What the store can take now, and the journal file it writes to
    /// (see `room.rs`): changes it could not keep answer OUT_OF_MEMORY
    /// instead of being acknowledged.
    pub fn set_store(&mut self, room: Room, file: u32) {
        self.room = room;
        self.file = file;
    }

    /// The records of every change since the last call, in order.
    pub fn take_journal(&mut self) -> Vec<Record> {
        std::mem::take(&mut self.journal)
    }

    /// Makes room for `jobs` more jobs, before restoring that many.
    pub fn reserve_jobs(&mut self, jobs: usize) {
        self.jobs.reserve(jobs);
    }

    /// Puts back a job from the store at startup, in its stored state: a
    /// reserved job comes back ready, a delayed job whose moment passed
    /// while the server was down comes back ready (an `aft:` job held,
    /// until the first tick finds its group empty: `ext.rs`). Call in bury
    /// order for buried jobs; ids issued later are above every restored
    /// one.
    ///
    /// In cluster mode (a standby following its leader) a reserved job is
    /// held by [`DEPARTED`] until its stored deadline instead, then times
    /// out as any reservation does (`conn_due`): its worker's connection
    /// was to the old leader, and is gone with it.
    pub fn restore(&mut self, image: &JobImage) {
        self.next_job_id = self.next_job_id.max(image.id + 1);
        if image.ext.is_some() && self.restore_cooling(image) {
            return;
        }
        let t = self.tubes.find_or_make(&image.tube);
        let slot = self.jobs.insert(
            image.id,
            image.pri,
            image.profile(t),
            image.created,
            &image.body,
        );
        self.jobs.set_counts(slot, image.counts());
        if let Some(extras) = &image.ext {
            self.attach(slot, Box::new(extras.tags.clone()));
            if self.restores_held(image) {
                self.restore_held(slot);
                return;
            }
        }
        match image.state {
            Stored::Reserved(until) if self.cluster.is_some() => self.hold_departed(slot, until),
            Stored::Ready | Stored::Reserved(_) => self.make_ready(slot),
            Stored::Delayed(until) if until > self.now => self.make_delayed(slot, until),
            Stored::Delayed(_) => self.make_ready(slot),
            Stored::Buried(seq) => {
                self.next_bury_seq = self.next_bury_seq.max(seq + 1);
                self.bury_at(slot, seq);
            }
        }
    }

    /// Ids below `next` were issued before a restart: never issue them again.
    pub fn reserve_ids_below(&mut self, next: JobId) {
        self.next_job_id = self.next_job_id.max(next);
    }

    /// Removes a job whose put the store failed to keep, whatever state it
    /// has reached meanwhile (its put was never acknowledged).
    pub fn forget(&mut self, id: JobId) {
        let Some(slot) = self.jobs.find(id) else {
            return;
        };
        if self.jobs[slot].state() == State::Reserved {
            let deadline = self.jobs[slot].deadline;
            let holder = self.conns.iter().find(|(_, c)| c.holds(deadline, slot));
            if let Some((&conn, _)) = holder {
                self.unreserve(conn, slot);
            }
        } else {
            self.take_out(slot);
        }
        if self.jobs[slot].tagged() {
            self.drop_tags(slot);
        }
        let (_, tube) = self.jobs.remove(slot);
        self.drop_tube_ref(tube);
    }

    /// Ends `conn`'s blocked `reserve` now, as if its time were up: the
    /// answer that gives (TIMED_OUT, or an empty batch), if it was waiting.
    /// For a client that half-closes while waiting, which beanstalkd
    /// answers with TIMED_OUT.
    pub fn cancel_wait(&mut self, conn: ConnId) -> Option<Response> {
        let wait = self.conns.get(&conn)?.wait.as_ref()?;
        let answer = Wait::timed_out(wait.batch);
        self.stop_waiting(conn);
        Some(answer)
    }

    #[cfg(test)]
    fn timers_len(&self) -> usize {
        self.timers.len()
    }

    fn conn_mut(&mut self, conn: ConnId) -> &mut Conn {
        self.conns.get_mut(&conn).expect("known connection")
    }

    /// The tube `conn` uses.
    fn used(&self, conn: ConnId) -> TubeIx {
        self.conns[&conn].using
    }

    /// Removes a job that is in no queue and held by no one, journaling
    /// its delete; its tube goes if nothing else refers to it.
    fn discard(&mut self, slot: JobSlot) {
        // A job cooling down under an `idp:` TTL writes its cooling record
        // instead (`ext.rs`).
        let cooling = self.jobs[slot].tagged() && self.detach(slot);
        let (id, tube) = self.jobs.remove(slot);
        self.drop_tube_ref(tube);
        if self.config.journal && !cooling {
            self.journal.push(Record::Delete(id));
            self.room.charge(Change::Delete);
        }
    }

    /// The slot of job `id` if `conn` holds it reserved.
    fn owned(&self, conn: ConnId, id: JobId) -> Option<JobSlot> {
        let slot = self.jobs.find(id)?;
        let job = &self.jobs[slot];
        let holds = job.state() == State::Reserved && self.conns[&conn].holds(job.deadline, slot);
        holds.then_some(slot)
    }

    fn found(&self, slot: Option<JobSlot>) -> Response {
        match slot {
            Some(slot) => Response::Found {
                id: self.jobs[slot].id,
                body: self.jobs.body_bytes(slot),
            },
            None => Response::NotFound,
        }
    }

    fn reserved_reply(&self, slot: JobSlot) -> Response {
        Response::Reserved {
            id: self.jobs[slot].id,
            body: self.jobs.body_bytes(slot),
        }
    }

    fn set_producer(&mut self, conn: ConnId) {
        let c = self.conn_mut(conn);
        if !std::mem::replace(&mut c.producer, true) {
            self.stats.producers += 1;
        }
    }

    fn set_worker(&mut self, conn: ConnId) {
        let c = self.conn_mut(conn);
        if !std::mem::replace(&mut c.worker, true) {
            self.stats.workers += 1;
        }
    }

    fn drop_tube_ref(&mut self, t: TubeIx) {
        if self.tubes.remove_if_unused(t) {
            self.timers.set(TimerKey::Unpause(t), None);
        }
    }

    // Job state transitions. A job leaves its state through `take_out`
    // (ready, delayed, buried) or `unreserve`, and enters one through
    // `enqueue`/`make_ready`, `make_delayed`, `make_buried` or
    // `make_reserved`; these keep every queue, counter and timer in step.

    /// Takes a ready, delayed or buried job out of its tube's queue.
    fn take_out(&mut self, slot: JobSlot) {
        let job = &self.jobs[slot];
        let (state, pri, deadline) = (job.state(), job.pri, job.deadline);
        let t = self.jobs.tube(slot);
        let tube = &mut self.tubes[t];
        match state {
            State::Ready => {
                tube.ready.remove(slot, &mut self.jobs);
                self.stats.ready -= 1;
                if pri < URGENT_THRESHOLD {
                    self.stats.urgent -= 1;
                    tube.urgent -= 1;
                }
            }
            State::Delayed => {
                tube.delayed.remove(slot, &mut self.jobs);
                self.stats.delayed -= 1;
                self.arm_delayed(t);
            }
            State::Buried => {
                tube.buried.remove(&(deadline, slot));
                self.stats.buried -= 1;
            }
            State::Reserved => unreachable!("reserved jobs leave through unreserve"),
        }
    }

    /// Takes a job out of `conn`'s reservations.
    fn unreserve(&mut self, conn: ConnId, slot: JobSlot) {
        let job = &self.jobs[slot];
        if job.tagged() {
            self.con_release(slot);
        }
        let deadline = self.jobs[slot].deadline;
        let c = self.conns.get_mut(&conn).expect("known connection");
        c.reserved.remove(&(deadline, slot));
        self.tubes[self.jobs.tube(slot)].reserved -= 1;
        self.stats.reserved -= 1;
        self.arm_conn(conn);
    }

    /// Makes a job ready, or delayed for `delay` µs.
    fn enqueue(&mut self, slot: JobSlot, delay: Time) {
        if delay > 0 {
            self.make_delayed(slot, self.now.saturating_add(delay));
        } else {
            self.make_ready(slot);
        }
    }

    /// Makes a job ready and hands it to a waiter if one is watching.
    fn make_ready(&mut self, slot: JobSlot) {
        let job = &mut self.jobs[slot];
        job.set_state(State::Ready);
        // A ready job's deadline is free: it keeps when the job became
        // ready, for the reserve-wait histogram.
        job.deadline = self.now;
        let urgent = job.pri < URGENT_THRESHOLD;
        let t = self.jobs.tube(slot);
        let tube = &mut self.tubes[t];
        tube.ready.push(slot, &mut self.jobs);
        self.stats.ready += 1;
        if urgent {
            self.stats.urgent += 1;
            tube.urgent += 1;
        }
        self.serve_waiters(t);
    }

    fn make_delayed(&mut self, slot: JobSlot, until: Time) {
        let job = &mut self.jobs[slot];
        job.set_state(State::Delayed);
        job.deadline = until;
        let t = self.jobs.tube(slot);
        self.tubes[t].delayed.push(slot, &mut self.jobs);
        self.stats.delayed += 1;
        self.arm_delayed(t);
    }

    fn make_buried(&mut self, slot: JobSlot) {
        let seq = self.next_bury_seq;
        self.next_bury_seq += 1;
        self.jobs.bump(slot, Counter::Buries);
        self.bury_at(slot, seq);
    }

    /// Buries a job at place `seq` in its tube's bury order.
    fn bury_at(&mut self, slot: JobSlot, seq: u64) {
        let job = &mut self.jobs[slot];
        job.set_state(State::Buried);
        job.deadline = seq;
        self.tubes[self.jobs.tube(slot)].buried.insert((seq, slot));
        self.stats.buried += 1;
    }

    /// Holds a restored job reserved for [`DEPARTED`] until `until`.
    fn hold_departed(&mut self, slot: JobSlot, until: Time) {
        let job = &mut self.jobs[slot];
        job.set_state(State::Reserved);
        job.deadline = until;
        self.tubes[self.jobs.tube(slot)].reserved += 1;
        self.stats.reserved += 1;
        let departed = self.conns.entry(DEPARTED).or_insert_with(Conn::departed);
        departed.reserved.insert((until, slot));
        self.arm_conn(DEPARTED);
    }

    /// The jobs of tube `name` held for [`DEPARTED`] (reserved on a leader
    /// that died), with their bodies, lowest id first. A new leader's
    /// embedded Redis bridge looks at its own timers this way
    /// (`cluster/bridge.rs`): their worker died with the old leader.
    pub fn departed_in(&self, name: &sprout_protocol::TubeName) -> Vec<(JobId, bytes::Bytes)> {
        let (Some(t), Some(departed)) = (self.tubes.find(name), self.conns.get(&DEPARTED)) else {
            return Vec::new();
        };
        let mut held: Vec<(JobId, bytes::Bytes)> = departed
            .reserved
            .iter()
            .filter(|&&(_, slot)| self.jobs.tube(slot) == t)
            .map(|&(_, slot)| (self.jobs[slot].id, self.jobs.body_bytes(slot)))
            .collect();
        held.sort_unstable_by_key(|(id, _)| *id);
        held
    }

    /// Ends [`DEPARTED`]'s hold on job `id` now: deleted, or back to ready
    /// as if its TTR had run out (`timeouts` one more). False if
    /// [`DEPARTED`] does not hold it. Journaled as the delete or the
    /// timeout would be.
    pub fn end_departed(&mut self, id: JobId, delete: bool, now: Time) -> bool {
        self.tick(now);
        if !self.conns.contains_key(&DEPARTED) {
            return false;
        }
        let Some(slot) = self.owned(DEPARTED, id) else {
            return false;
        };
        if delete {
            self.unreserve(DEPARTED, slot);
            self.tubes[self.jobs.tube(slot)].deletes += 1;
            self.discard(slot);
        } else {
            self.time_out(DEPARTED, slot);
        }
        true
    }

    /// `conn`'s hold on job `slot` ends as its TTR runs out: ready again,
    /// `timeouts` one more.
    fn time_out(&mut self, conn: ConnId, slot: JobSlot) {
        self.unreserve(conn, slot);
        self.jobs.bump(slot, Counter::Timeouts);
        self.stats.timeouts += 1;
        // It happens anyway; without room only its record is skipped (see
        // `room.rs`).
        let record = self.room_to_update(slot);
        self.make_ready(slot);
        if record {
            self.record_update(slot);
        }
    }

    fn make_reserved(&mut self, conn: ConnId, slot: JobSlot) {
        let t = self.jobs.tube(slot);
        let job = &mut self.jobs[slot];
        let ready_since = (job.state() == State::Ready).then_some(job.deadline);
        job.set_state(State::Reserved);
        let tube = &mut self.tubes[t];
        tube.reserved += 1;
        if let Some(since) = ready_since {
            tube.latency
                .reserve_wait
                .observe(self.now.saturating_sub(since));
        }
        tube.latency
            .age_at_reserve
            .observe(self.now.saturating_sub(job.created));
        self.stats.reserved += 1;
        self.jobs.bump(slot, Counter::Reserves);
        if self.jobs[slot].tagged() {
            self.con_acquire(slot);
        }
        self.start_ttr(conn, slot);
        // No record but in cluster mode: a stored job comes back ready
        // whatever it was doing, so a reserve changes nothing a restart
        // needs. Its count rides on the job's next record (release, bury,
        // timeout), as in beanstalkd, whose binlog is not written on
        // reserve either. A record rewrites the job, body and all, once
        // per delivery: only a new leader needs it.
        self.record_for_cluster(slot);
    }

    /// Journals job `slot`'s new state if only a new leader needs it (a
    /// reserve, a touch, a job a closed connection gave back): in cluster
    /// mode (see [`Engine::set_cluster`]), and if there is room.
    fn record_for_cluster(&mut self, slot: JobSlot) {
        if self.cluster.is_some() && self.room_to_update(slot) {
            self.record_update(slot);
        }
    }

    /// The job a reserve by `conn` gets now: the most urgent ready job of
    /// the unpaused tubes it watches (`con:` limits respected, `ready_top`).
    fn best_ready(&self, conn: ConnId) -> Option<JobSlot> {
        self.conns[&conn]
            .watch
            .iter()
            .filter(|&&t| !self.tubes[t].is_paused())
            .filter_map(|&t| self.ready_top(t))
            .min_by_key(|entry| entry.key())
            .map(|entry| entry.slot)
    }

    /// Starts the TTR of a job `conn` holds (on reserve and on touch).
    fn start_ttr(&mut self, conn: ConnId, slot: JobSlot) {
        let ttr = self.jobs.profile(slot).ttr;
        let deadline = self.now.saturating_add(u64::from(ttr) * MICROS_PER_SECOND);
        self.jobs[slot].deadline = deadline;
        self.conn_mut(conn).reserved.insert((deadline, slot));
        self.arm_conn(conn);
    }

    /// Journals a new job `slot`: its put (a no-op unless journaling is on).
    fn record_put(&mut self, slot: JobSlot) {
        if !self.config.journal {
            return;
        }
        let image = self.image(slot);
        let body = self.jobs.body_len(slot);
        let change = match &image.ext {
            None => Change::Put {
                body,
                tube: image.tube.as_bytes().len(),
            },
            Some(ext) => self.put_change(self.jobs.tube(slot), body, Some(&ext.tags)),
        };
        self.room.charge(change);
        self.journal.push(Record::Put(image));
        self.written_to_file(slot);
    }

    /// Journals job `slot`'s new state: an update, its whole image again (a
    /// no-op unless journaling is on).
    fn record_update(&mut self, slot: JobSlot) {
        if !self.config.journal {
            return;
        }
        let image = self.image(slot);
        let mut tube = image.tube.as_bytes().len();
        if image.ext.is_some() {
            tube += self.extras_len(slot);
        }
        self.room.charge(Change::Update { tube });
        self.journal.push(Record::Update(image));
        self.written_to_file(slot);
    }

    /// Job `slot` as its records hold it, tags included.
    fn image(&self, slot: JobSlot) -> JobImage {
        let profile = self.jobs.profile(slot);
        let mut image = JobImage::of(
            &self.jobs[slot],
            profile,
            self.jobs.counts(slot),
            self.jobs.body_bytes(slot),
            &self.tubes[profile.tube].name,
        );
        image.ext = self.extras(slot);
        image
    }

    /// Job `slot`'s latest record goes to the current journal file.
    fn written_to_file(&mut self, slot: JobSlot) {
        let at = slot.at();
        if self.files.len() <= at {
            self.files.resize(at + 1, 0);
        }
        self.files[at] = self.file;
    }

    /// Whether the store has room to record a new state of job `slot`.
    fn room_to_update(&self, slot: JobSlot) -> bool {
        let mut tube = self.tubes[self.jobs.tube(slot)].name.as_bytes().len();
        if self.jobs[slot].tagged() {
            tube += self.extras_len(slot);
        }
        self.room.admits(Change::Update { tube })
    }

    /// The journal file holding job `slot`'s latest record (`stats-job`'s
    /// `file`): the one it was written to, or, once the store has taken
    /// that file in and removed it, the oldest one still kept. 0 without
    /// a journal.
    fn file_of(&self, slot: JobSlot) -> u64 {
        if !self.config.journal {
            return 0;
        }
        let written = self.files.get(slot.at()).copied().unwrap_or(0);
        let oldest = self
            .config
            .binlog
            .oldest_index
            .load(std::sync::atomic::Ordering::Relaxed);
        u64::from(written).max(oldest)
    }

    // Waiting.

    /// Hands tube `t`'s ready jobs to its waiters, oldest waiter first,
    /// unless the tube is paused.
    fn serve_waiters(&mut self, t: TubeIx) {
        loop {
            let tube = &self.tubes[t];
            if tube.is_paused() {
                return;
            }
            // Waiters first: with none (most puts), no job is looked at.
            let Some((_, &conn)) = tube.waiters.first_key_value() else {
                return;
            };
            if self.ready_top(t).is_none() {
                return;
            }
            let batch = self.conns[&conn].wait.as_ref().and_then(|w| w.batch);
            self.stop_waiting(conn);
            // The tube's top is ready for it, so there is a job to take.
            let reply = self.reserve_now(conn, batch).expect("a ready job");
            self.wakeups.push((conn, reply));
        }
    }

    fn stop_waiting(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let Some(wait) = c.wait.take() else { return };
        for &t in &c.watch {
            self.tubes[t].waiters.remove(&wait.seq);
        }
        self.stats.waiting -= 1;
        self.arm_conn(conn);
    }

    // Timers.

    fn arm_delayed(&mut self, t: TubeIx) {
        let at = self.tubes[t].delayed.peek().map(|e| e.deadline);
        self.timers.set(TimerKey::Delayed(t), at);
    }

    fn arm_conn(&mut self, conn: ConnId) {
        self.timers
            .set(TimerKey::Conn(conn), self.conns[&conn].due());
    }

    /// Tube `t`'s soonest delayed job is due: ready, or held if it is an
    /// `aft:` job whose group has members (`ext.rs`).
    fn delay_ended(&mut self, t: TubeIx) {
        match self.tubes[t].delayed.peek() {
            Some(due) if { due.deadline } <= self.now => {
                let slot = due.slot;
                self.take_out(slot);
                if self.aft_pending(slot) {
                    self.hold(slot);
                } else {
                    self.make_ready(slot);
                }
            }
            _ => self.arm_delayed(t),
        }
    }

    /// Something is due for `conn` (beanstalkd's `conn_timeout`): a waiter
    /// whose job entered the safety margin gets DEADLINE_SOON, its soonest
    /// job goes back to ready if its TTR has run out (whether the client
    /// is active or not), and a waiter whose timeout passed gets TIMED_OUT.
    fn conn_due(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        if c.wait.is_some() && c.deadline_soon(self.now) {
            self.stop_waiting(conn);
            self.wakeups.push((conn, Response::DeadlineSoon));
        }
        if let Some((deadline, slot)) = self.conns[&conn].soonest() {
            if deadline <= self.now {
                self.time_out(conn, slot);
            }
        }
        let timed_out = self.conns[&conn]
            .wait
            .as_ref()
            .filter(|w| w.until.is_some_and(|until| until <= self.now));
        if let Some(wait) = timed_out {
            let answer = Wait::timed_out(wait.batch);
            self.stop_waiting(conn);
            self.wakeups.push((conn, answer));
        }
        self.arm_conn(conn);
    }
}
