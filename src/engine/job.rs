//! The job record: everything the server keeps about one job besides its
//! place in a queue.
//!
//! A server may hold millions of jobs, so the record is kept small (56 bytes
//! on 64-bit targets, where it was 96): the body lives in the job table's
//! slabs and the record holds an 8-byte handle to it (see `bodies.rs`), the
//! `stats-job` counters take a byte each until they grow (`counts.rs`),
//! durations are `u32` seconds as beanstalkd reads them, and the tube is an
//! index (the job's position in its tube's heap is kept by the job table,
//! not here). One `deadline` field serves
//! every state that needs a moment: when a delayed job becomes ready, when a
//! reserved job's TTR runs out, and the bury order of a buried job.

use sprout_protocol::JobId;

use super::bodies::Body;
use super::counts::Packed;
use super::Time;

/// Where a job is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Ready = 0,
    Delayed = 1,
    Reserved = 2,
    Buried = 3,
}

impl State {
    pub const ALL: [State; 4] = [State::Ready, State::Delayed, State::Reserved, State::Buried];

    /// The name `stats-job` prints.
    pub fn name(self) -> &'static str {
        match self {
            State::Ready => "ready",
            State::Delayed => "delayed",
            State::Reserved => "reserved",
            State::Buried => "buried",
        }
    }

    /// The state called `name` (as [`State::name`] prints it).
    pub fn from_name(name: &str) -> Option<State> {
        State::ALL.into_iter().find(|s| s.name() == name)
    }
}

pub(super) struct Job {
    /// Set by [`JobTable::insert`](super::table::JobTable::insert), which
    /// keeps the bytes.
    pub(super) body: Body,
    pub(super) id: JobId,
    /// When the job was put.
    pub(super) created: Time,
    /// Delayed: when it becomes ready. Reserved: when its TTR runs out.
    /// Buried: its bury sequence number (buried jobs are kicked in order).
    pub(super) deadline: Time,
    pub(super) pri: u32,
    /// Seconds, at least 1.
    pub(super) ttr: u32,
    /// Seconds of the delay given by the last `put` or `release`.
    pub(super) delay: u32,
    pub(super) tube: u32,
    state: State,
    /// Read and bumped through the job table, which keeps the counts
    /// that outgrow these bytes.
    pub(super) counts: Packed,
    /// The job has tuber's tags, kept beside the table (`ext.rs`); in
    /// what was padding, so an untagged job costs no more.
    pub(super) tagged: bool,
}

impl Job {
    pub(super) fn new(id: JobId, pri: u32, ttr: u32, delay: u32, tube: u32, now: Time) -> Job {
        Job {
            body: Body::default(),
            id,
            created: now,
            deadline: 0,
            pri,
            ttr,
            delay,
            tube,
            state: State::Ready,
            counts: Packed::default(),
            tagged: false,
        }
    }

    pub(super) fn state(&self) -> State {
        self.state
    }

    pub(super) fn set_state(&mut self, state: State) {
        self.state = state;
    }
}
