//! The job record: everything the server keeps about one job besides its
//! place in a queue.
//!
//! A server may hold millions of jobs, so the record is kept small (40 bytes
//! on 64-bit targets, where it was 96, then 56): the body lives in the job
//! table's slabs, the tube, TTR and delay are an interned [`Profile`] the
//! jobs put alike share (`profile.rs`), and one word holds the body's
//! handle (`bodies.rs`), the state, the tags flag and the `stats-job`
//! counters while they are small (`counts.rs`). Durations are `u32`
//! seconds as beanstalkd reads them (in the profile), and the job's
//! position in its tube's heap is kept by the job table, not here. One
//! `deadline` field serves every state that needs a moment: when a
//! delayed job becomes ready, when a reserved job's TTR runs out, the bury
//! order of a buried job, and when a ready job became ready.
//!
//! The id, creation time and deadline stay whole `u64`s: `stats-job`'s age
//! is whole seconds of microsecond times, so a creation time kept coarser
//! would print one second more near a boundary.
//!
//! [`Profile`]: super::profile::Profile

use sprout_protocol::JobId;

use super::bodies::Body;
use super::clock::Time;
use super::counts::Packed;
use super::profile::ProfileId;

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

/// One job's row in the job table (not `client::Job`, a job as the client
/// that reserved it sees it).
pub(super) struct JobRow {
    pub(super) id: JobId,
    /// When the job was put.
    pub(super) created: Time,
    /// Delayed: when it becomes ready. Reserved: when its TTR runs out.
    /// Buried: its bury sequence number (buried jobs are kicked in order).
    /// Ready: when it became ready (for the reserve-wait histogram).
    pub(super) deadline: Time,
    pub(super) pri: u32,
    /// Tube, TTR and delay; set and read through the job table.
    pub(super) profile: ProfileId,
    /// From the low bits: the body handle ([`Body::BITS`]), the state (2
    /// bits), the tags flag (1) and the counts ([`Packed::BITS`]).
    word: u64,
}

const STATE_SHIFT: u32 = Body::BITS;
const TAGGED_SHIFT: u32 = STATE_SHIFT + 2;
const COUNTS_SHIFT: u32 = TAGGED_SHIFT + 1;
const _: () = assert!(COUNTS_SHIFT + Packed::BITS <= 64);

impl JobRow {
    /// A ready job with no body, no tags and no counts yet.
    pub(super) fn new(id: JobId, pri: u32, profile: ProfileId, created: Time) -> JobRow {
        let mut job = JobRow {
            id,
            created,
            deadline: 0,
            pri,
            profile,
            word: 0,
        };
        job.set_state(State::Ready);
        job
    }

    /// Set by the job table, which keeps the bytes.
    pub(super) fn body(&self) -> Body {
        Body::from_bits(self.word & ((1 << Body::BITS) - 1))
    }

    pub(super) fn set_body(&mut self, body: Body) {
        self.set_bits(0, Body::BITS, body.bits());
    }

    pub(super) fn state(&self) -> State {
        State::ALL[((self.word >> STATE_SHIFT) & 3) as usize]
    }

    pub(super) fn set_state(&mut self, state: State) {
        self.set_bits(STATE_SHIFT, 2, state as u64);
    }

    /// The job has tuber's tags, kept beside the table (`ext.rs`).
    pub(super) fn tagged(&self) -> bool {
        self.word >> TAGGED_SHIFT & 1 == 1
    }

    pub(super) fn set_tagged(&mut self, tagged: bool) {
        self.set_bits(TAGGED_SHIFT, 1, u64::from(tagged));
    }

    /// Read and bumped through the job table, which keeps the counts
    /// that outgrow these bits.
    pub(super) fn counts(&self) -> Packed {
        Packed::from_bits((self.word >> COUNTS_SHIFT) as u32)
    }

    pub(super) fn set_counts(&mut self, counts: Packed) {
        self.set_bits(COUNTS_SHIFT, Packed::BITS, u64::from(counts.bits()));
    }

    fn set_bits(&mut self, shift: u32, bits: u32, value: u64) {
        let mask = ((1u64 << bits) - 1) << shift;
        self.word = (self.word & !mask) | (value << shift);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::counts::Counter;

    #[test]
    fn the_word_s_fields_are_independent() {
        let mut profiles = crate::engine::profile::Profiles::default();
        let profile = profiles.acquire(crate::engine::profile::Profile {
            tube: crate::engine::tube_ix::DEFAULT_TUBE,
            ttr: 1,
            delay: 0,
        });
        let mut job = JobRow::new(7, 3, profile, 11);
        let mut bodies = crate::engine::bodies::Bodies::new();
        let body = bodies.put(&[1; 5000]);
        let counts = Packed::default()
            .bumped(Counter::Reserves)
            .and_then(|p| p.bumped(Counter::Kicks))
            .expect("fits");
        assert_eq!(job.state(), State::Ready);
        for state in State::ALL {
            job.set_body(body);
            job.set_counts(counts);
            job.set_tagged(true);
            job.set_state(state);
            assert_eq!((job.body(), job.state(), job.tagged()), (body, state, true));
            assert_eq!(job.counts(), counts);
            job.set_counts(Packed::SPILLED);
            job.set_tagged(false);
            assert_eq!(
                (job.body(), job.state(), job.tagged()),
                (body, state, false)
            );
            assert!(job.counts().is_spilled());
            job.set_body(Body::default());
            assert_eq!(job.body(), Body::default());
            assert!(job.counts().is_spilled());
        }
        assert_eq!((job.id, job.pri, job.created), (7, 3, 11));
    }
}
