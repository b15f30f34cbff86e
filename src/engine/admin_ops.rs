//! Changes the admin API makes: kick, release an `aft:` job's hold,
//! delete, flush a tube's state, move jobs between tubes, pause and
//! resume, put.
//!
//! They act on jobs by id or on a tube's queues, not through a client
//! connection, and are not counted as beanstalk commands (`cmd-*` stay the
//! protocol's), but they take the very state transitions and journal
//! records the commands take, so the store keeps them under the same
//! policy. A reserved job belongs to the worker holding it: no admin call
//! takes it away.
//!
//! The store's room rules apply as to the commands (`admission.rs`): a kick or a
//! move the store has no room to record is refused; a delete never is.
//!
//! Flush and move work in batches: one call changes at most `max` jobs
//! and the caller drops the lock between calls, so a million jobs flushed
//! never hold up a client for more than one batch.

use std::time::Duration;

use bytes::Bytes;
use sprout_protocol::{JobId, Response, TubeName};

use super::admission::Change;
use super::clock::Time;
use super::job::State;
use super::machine::Engine;
use super::profile::Profile;
use super::table::JobSlot;
use super::tube_ix::TubeIx;

/// Why an admin change was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminError {
    NoSuchTube,
    NoSuchJob,
    /// The job is reserved: its holder decides.
    Reserved,
    /// The job is in a state the call does not apply to: only a kick of a
    /// ready job (the API's message says so).
    WrongState,
    /// An `aft:` job whose group has members: a kick leaves it; only a
    /// release of its hold ([`Engine::release_hold`]) moves it.
    Held,
    /// A release of a hold, for a job that is not held.
    NotHeld,
    /// Drain mode (SIGUSR1): no new jobs.
    Draining,
    /// The job table is full, or the store has no room to record it.
    OutOfMemory,
}

impl Engine {
    /// `kick <bound>` on tube `name`: buried jobs first, else delayed ones.
    pub fn kick_tube(&mut self, name: &TubeName, bound: u32, now: Time) -> Result<u32, AdminError> {
        self.tick(now);
        let t = self.tubes.find(name).ok_or(AdminError::NoSuchTube)?;
        Ok(self.kick(t, bound))
    }

    /// `kick-job <id>`: a buried or delayed job becomes ready (not an
    /// `aft:` job whose group has members: `ext.rs`).
    pub fn kick_one(&mut self, id: JobId, now: Time) -> Result<(), AdminError> {
        self.tick(now);
        let slot = self.jobs.find(id).ok_or(AdminError::NoSuchJob)?;
        match self.jobs[slot].state() {
            State::Delayed if !self.kickable(slot) => Err(AdminError::Held),
            State::Buried | State::Delayed if !self.room_to_update(slot) => {
                Err(AdminError::OutOfMemory)
            }
            State::Buried | State::Delayed => {
                self.kick_job(slot);
                Ok(())
            }
            State::Reserved => Err(AdminError::Reserved),
            State::Ready => Err(AdminError::WrongState),
        }
    }

    /// The operator's override of a dependency: job `id`, an `aft:` job
    /// held (or delayed) while its group has members, becomes ready now.
    /// Journaled as a kick, so a restart keeps it ready.
    pub fn release_hold(&mut self, id: JobId, now: Time) -> Result<(), AdminError> {
        self.tick(now);
        let slot = self.jobs.find(id).ok_or(AdminError::NoSuchJob)?;
        match self.jobs[slot].state() {
            State::Delayed if self.kickable(slot) => Err(AdminError::NotHeld),
            State::Delayed if !self.room_to_update(slot) => Err(AdminError::OutOfMemory),
            State::Delayed => {
                self.kick_job(slot);
                Ok(())
            }
            State::Reserved => Err(AdminError::Reserved),
            State::Ready | State::Buried => Err(AdminError::NotHeld),
        }
    }

    /// Deletes job `id` unless a worker holds it.
    pub fn delete_one(&mut self, id: JobId, now: Time) -> Result<(), AdminError> {
        self.tick(now);
        let slot = self.jobs.find(id).ok_or(AdminError::NoSuchJob)?;
        if self.jobs[slot].state() == State::Reserved {
            return Err(AdminError::Reserved);
        }
        self.take_out(slot);
        self.discard(slot);
        Ok(())
    }

    /// Deletes up to `max` jobs of tube `name` in `state` (first in that
    /// state's order first); returns how many. 0 once there are none left,
    /// or the tube is gone (it goes with its last job if nothing else
    /// refers to it).
    pub fn flush(
        &mut self,
        name: &TubeName,
        state: State,
        max: usize,
        now: Time,
    ) -> Result<u64, AdminError> {
        let Some(t) = self.batch_source(name, state, now)? else {
            return Ok(0);
        };
        // Only the tube's last job can take the tube with it, so counting
        // first lets the loop stop before touching a removed tube.
        let n = self.count_in(t, state).min(max);
        for _ in 0..n {
            let slot = self.first_in(t, state).expect("counted");
            self.take_out(slot);
            self.discard(slot);
        }
        Ok(n as u64)
    }

    /// Moves up to `max` jobs of tube `from` in `state` to tube `to`, each
    /// keeping its state (a delayed job its due time, a buried one its
    /// place in the bury order); returns how many. A ready job moved to a
    /// tube with waiting workers is handed to one at once.
    pub fn move_jobs(
        &mut self,
        from: &TubeName,
        state: State,
        to: &TubeName,
        max: usize,
        now: Time,
    ) -> Result<u64, AdminError> {
        let Some(source) = self.batch_source(from, state, now)? else {
            return Ok(0);
        };
        if from == to {
            return Ok(0);
        }
        let dest = self.tubes.find_or_make(to);
        let moved = Change::Update {
            tube: to.as_bytes().len(),
        };
        let mut done = 0;
        while done < max as u64 {
            let Some(slot) = self.first_in(source, state) else {
                break;
            };
            // Each move is recorded: as many as the store has room for.
            if !self.room.admits(moved) {
                break;
            }
            let seq = self.jobs[slot].deadline;
            self.take_out(slot);
            let profile = self.jobs.profile(slot);
            self.jobs.set_profile(
                slot,
                Profile {
                    tube: dest,
                    ..profile
                },
            );
            match state {
                State::Ready => self.make_ready(slot),
                State::Delayed => self.make_delayed(slot, seq),
                State::Buried => self.bury_at(slot, seq),
                State::Reserved => unreachable!("refused above"),
            }
            self.record_update(slot);
            done += 1;
        }
        self.drop_tube_ref(source);
        self.drop_tube_ref(dest);
        Ok(done)
    }

    /// `pause-tube`: no reserves from tube `name` for `delay`.
    pub fn pause_tube(
        &mut self,
        name: &TubeName,
        delay: Duration,
        now: Time,
    ) -> Result<(), AdminError> {
        self.tick(now);
        let t = self.tubes.find(name).ok_or(AdminError::NoSuchTube)?;
        self.pause(t, delay);
        Ok(())
    }

    /// Ends tube `name`'s pause now (no beanstalk command does).
    pub fn resume_tube(&mut self, name: &TubeName, now: Time) -> Result<(), AdminError> {
        self.tick(now);
        let t = self.tubes.find(name).ok_or(AdminError::NoSuchTube)?;
        self.tubes[t].pause = 0;
        self.tubes[t].unpause_at = 0;
        self.timers.set(super::timers::TimerKey::Unpause(t), None);
        self.serve_waiters(t);
        Ok(())
    }

    /// `put` into tube `name` (made if missing); the body must fit
    /// [`Engine::max_job_size`] (the caller checks, as the parser does).
    pub fn put_into(
        &mut self,
        name: &TubeName,
        pri: u32,
        delay: Duration,
        ttr: Duration,
        body: Bytes,
        now: Time,
    ) -> Result<JobId, AdminError> {
        self.tick(now);
        let t = self.tubes.find_or_make(name);
        let response = self.put_in(t, pri, delay, ttr, body);
        self.drop_tube_ref(t);
        match response {
            Response::Inserted(id) => Ok(id),
            Response::Draining => Err(AdminError::Draining),
            _ => Err(AdminError::OutOfMemory),
        }
    }

    /// `-z`: the largest body a put may carry.
    pub fn max_job_size(&self) -> u32 {
        self.config.max_job_size
    }

    /// Whether drain mode is on.
    pub fn draining(&self) -> bool {
        self.draining
    }

    /// The tube a flush or move takes jobs from, if it exists: never
    /// reserved ones, which belong to their holders.
    fn batch_source(
        &mut self,
        name: &TubeName,
        state: State,
        now: Time,
    ) -> Result<Option<TubeIx>, AdminError> {
        self.tick(now);
        if state == State::Reserved {
            return Err(AdminError::Reserved);
        }
        Ok(self.tubes.find(name))
    }

    /// How many jobs tube `t` holds in `state`.
    fn count_in(&self, t: TubeIx, state: State) -> usize {
        let tube = &self.tubes[t];
        match state {
            State::Ready => tube.ready.len(),
            State::Delayed => tube.delayed.len(),
            State::Buried => tube.buried.len(),
            State::Reserved => tube.reserved as usize,
        }
    }

    /// The first job of tube `t` in `state`, in that state's order.
    fn first_in(&self, t: TubeIx, state: State) -> Option<JobSlot> {
        let tube = &self.tubes[t];
        match state {
            State::Ready => tube.ready.peek().map(|e| e.slot),
            State::Delayed => tube.delayed.peek().map(|e| e.slot),
            State::Buried => tube.buried.first().map(|&(_, slot)| slot),
            State::Reserved => None,
        }
    }
}
