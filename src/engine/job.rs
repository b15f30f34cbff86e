//! The job record: everything the server keeps about one job besides its
//! place in a queue.
//!
//! A server may hold millions of jobs, so the record is kept small (96 bytes
//! on 64-bit targets, body handle included): durations are `u32` seconds as
//! beanstalkd reads them, and the tube is an index (the job's position in its
//! tube's heap is kept by the job table, not here). One `deadline` field serves
//! every state that needs a moment: when a delayed job becomes ready, when a
//! reserved job's TTR runs out, and the bury order of a buried job.

use bytes::Bytes;
use sprout_protocol::JobId;

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
    pub(super) body: Bytes,
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
    pub(super) reserves: u32,
    pub(super) timeouts: u32,
    pub(super) releases: u32,
    pub(super) buries: u32,
    pub(super) kicks: u32,
}

impl Job {
    pub(super) fn new(
        id: JobId,
        pri: u32,
        ttr: u32,
        delay: u32,
        tube: u32,
        body: Bytes,
        now: Time,
    ) -> Job {
        Job {
            body,
            id,
            created: now,
            deadline: 0,
            pri,
            ttr,
            delay,
            tube,
            state: State::Ready,
            reserves: 0,
            timeouts: 0,
            releases: 0,
            buries: 0,
            kicks: 0,
        }
    }

    pub(super) fn state(&self) -> State {
        self.state
    }

    pub(super) fn set_state(&mut self, state: State) {
        self.state = state;
    }
}
