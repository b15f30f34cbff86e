//! What the server calls: connections coming and going, a command run
//! (`execute`: what is due fires first), the timer's `tick`, the store's
//! room, restoring jobs at startup, and the cluster's hand-over of jobs
//! held for a departed leader's workers.

use sprout_protocol::{Command, JobId, Op, ProtocolError, Rejected, Response};

use super::admission::Room;
use super::bodies::Body;
use super::clock::Time;
use super::conn::{Conn, Wait};
use super::conn::{ConnId, DEPARTED};
use super::dispatch;
use super::job::State;
use super::machine::{Engine, Outcome};
use super::records::{JobImage, Record, Stored};
use super::stats::ClusterStats;
use super::timers::TimerKey;

impl Engine {
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
        self.on_disconnected(conn);
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
        self.on_settled();
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
    pub(super) fn run(
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
        self.on_tick();
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
        self.on_settled();
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

    /// What the store can take now, the journal file it writes to and the
    /// oldest it still keeps (see `admission.rs`, and `stats-job`'s
    /// `file`): changes it could not keep answer OUT_OF_MEMORY instead of
    /// being acknowledged.
    pub fn set_store(&mut self, room: Room, file: u32, oldest_file: u64) {
        self.room = room;
        self.file = file;
        self.oldest_file = oldest_file;
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
        self.restore_with(image, None);
    }

    /// A standby's change that carries no body (`cluster/follow.rs`):
    /// job `image.id` is now as `image` says, its body the one it has,
    /// whose handle moves over (the bytes are not copied, and a body only
    /// the store keeps stays there). False if there is no such job.
    pub fn update(&mut self, image: &JobImage) -> bool {
        let Some(slot) = self.jobs.find(image.id) else {
            return false;
        };
        let body = self.jobs.take_body(slot);
        self.forget(image.id);
        self.restore_with(image, Some(body));
        true
    }

    /// [`Engine::restore`], with `body` the job's body if given (else
    /// `image`'s).
    fn restore_with(&mut self, image: &JobImage, body: Option<Body>) {
        self.next_job_id = self.next_job_id.max(image.id + 1);
        if self.on_restoring(image) {
            if let Some(body) = body {
                self.jobs.free_body(body);
            }
            return;
        }
        let t = self.tubes.find_or_make(&image.tube);
        let (id, pri, created) = (image.id, image.pri, image.created);
        let slot = match body {
            Some(body) => self
                .jobs
                .insert_with(id, pri, image.profile(t), created, body),
            None => self
                .jobs
                .insert(id, pri, image.profile(t), created, &image.body),
        };
        self.jobs.set_counts(slot, image.counts);
        if self.on_restored(slot, image) {
            return;
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

    /// The length of job `id`'s body if only the store keeps it (`-b`): a
    /// reply naming the job carries an empty body, which the connection
    /// fills from the store outside the engine lock. `None` if the engine
    /// holds the body (or has no such job).
    pub fn stored_len(&self, id: JobId) -> Option<usize> {
        self.jobs.stored_len(self.jobs.find(id)?)
    }

    /// Whether the engine holds job `id`.
    pub fn holds(&self, id: JobId) -> bool {
        self.jobs.find(id).is_some()
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
        self.on_dropped(slot);
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
}
