//! Job state transitions. A job leaves its state through `take_out`
//! (ready, delayed, buried) or `unreserve`, and enters one through
//! `enqueue`/`make_ready`, `make_delayed`, `make_buried` or
//! `make_reserved`; these keep every queue, counter and timer in step.

use sprout_protocol::URGENT_THRESHOLD;

use super::admission::Change;
use super::clock::{Time, MICROS_PER_SECOND};
use super::conn::Conn;
use super::conn::{ConnId, DEPARTED};
use super::counts::Counter;
use super::job::State;
use super::machine::Engine;
use super::records::Record;
use super::table::JobSlot;

impl Engine {
    /// Removes a job that is in no queue and held by no one, journaling
    /// its delete; its tube goes if nothing else refers to it.
    pub(super) fn discard(&mut self, slot: JobSlot) {
        // A job cooling down under an `idp:` TTL writes its cooling record
        // instead (`ext.rs`).
        let cooling = self.on_deleted(slot);
        let (id, tube) = self.jobs.remove(slot);
        self.drop_tube_ref(tube);
        if self.config.journal && !cooling {
            self.journal.push(Record::Delete(id));
            self.room.charge(Change::Delete);
        }
    }

    /// Takes a ready, delayed or buried job out of its tube's queue.
    pub(super) fn take_out(&mut self, slot: JobSlot) {
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
    pub(super) fn unreserve(&mut self, conn: ConnId, slot: JobSlot) {
        self.on_unreserved(slot);
        let deadline = self.jobs[slot].deadline;
        let c = self.conns.get_mut(&conn).expect("known connection");
        c.reserved.remove(&(deadline, slot));
        self.tubes[self.jobs.tube(slot)].reserved -= 1;
        self.stats.reserved -= 1;
        self.arm_conn(conn);
    }

    /// Makes a job ready, or delayed for `delay` µs.
    pub(super) fn enqueue(&mut self, slot: JobSlot, delay: Time) {
        if delay > 0 {
            self.make_delayed(slot, self.now.saturating_add(delay));
        } else {
            self.make_ready(slot);
        }
    }

    /// Makes a job ready and hands it to a waiter if one is watching.
    pub(super) fn make_ready(&mut self, slot: JobSlot) {
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

    pub(super) fn make_delayed(&mut self, slot: JobSlot, until: Time) {
        let job = &mut self.jobs[slot];
        job.set_state(State::Delayed);
        job.deadline = until;
        let t = self.jobs.tube(slot);
        self.tubes[t].delayed.push(slot, &mut self.jobs);
        self.stats.delayed += 1;
        self.arm_delayed(t);
    }

    pub(super) fn make_buried(&mut self, slot: JobSlot) {
        let seq = self.next_bury_seq;
        self.next_bury_seq += 1;
        self.jobs.bump(slot, Counter::Buries);
        self.bury_at(slot, seq);
    }

    /// Buries a job at place `seq` in its tube's bury order.
    pub(super) fn bury_at(&mut self, slot: JobSlot, seq: u64) {
        let job = &mut self.jobs[slot];
        job.set_state(State::Buried);
        job.deadline = seq;
        self.tubes[self.jobs.tube(slot)].buried.insert((seq, slot));
        self.stats.buried += 1;
    }

    /// Holds a restored job reserved for [`DEPARTED`] until `until`.
    pub(super) fn hold_departed(&mut self, slot: JobSlot, until: Time) {
        let job = &mut self.jobs[slot];
        job.set_state(State::Reserved);
        job.deadline = until;
        self.tubes[self.jobs.tube(slot)].reserved += 1;
        self.stats.reserved += 1;
        let departed = self.conns.entry(DEPARTED).or_insert_with(Conn::departed);
        departed.reserved.insert((until, slot));
        self.arm_conn(DEPARTED);
    }

    /// `conn`'s hold on job `slot` ends as its TTR runs out: ready again,
    /// `timeouts` one more.
    pub(super) fn time_out(&mut self, conn: ConnId, slot: JobSlot) {
        self.unreserve(conn, slot);
        self.jobs.bump(slot, Counter::Timeouts);
        self.stats.timeouts += 1;
        // It happens anyway; without room only its record is skipped (see
        // `admission.rs`).
        let record = self.room_to_update(slot);
        self.make_ready(slot);
        if record {
            self.record_update(slot);
        }
    }

    pub(super) fn make_reserved(&mut self, conn: ConnId, slot: JobSlot) {
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
        self.on_reserved(slot);
        self.start_ttr(conn, slot);
        // No record but in cluster mode: a stored job comes back ready
        // whatever it was doing, so a reserve changes nothing a restart
        // needs. Its count rides on the job's next record (release, bury,
        // timeout), as in beanstalkd, whose binlog is not written on
        // reserve either. A record rewrites the job, body and all, once
        // per delivery: only a new leader needs it.
        self.record_for_cluster(slot);
    }

    /// The job a reserve by `conn` gets now: the most urgent ready job of
    /// the unpaused tubes it watches (`con:` limits respected, `ready_top`).
    pub(super) fn best_ready(&self, conn: ConnId) -> Option<JobSlot> {
        self.conns[&conn]
            .watch
            .iter()
            .filter(|&&t| !self.tubes[t].is_paused())
            .filter_map(|&t| self.ready_top(t))
            .min_by_key(|entry| entry.key())
            .map(|entry| entry.slot)
    }

    /// Starts the TTR of a job `conn` holds (on reserve and on touch).
    pub(super) fn start_ttr(&mut self, conn: ConnId, slot: JobSlot) {
        let ttr = self.jobs.profile(slot).ttr;
        let deadline = self.now.saturating_add(u64::from(ttr) * MICROS_PER_SECOND);
        self.jobs[slot].deadline = deadline;
        self.conn_mut(conn).reserved.insert((deadline, slot));
        self.arm_conn(conn);
    }
}
