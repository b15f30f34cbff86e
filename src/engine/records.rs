//! The engine's side of persistence: the records a store must keep so a
//! restart finds every job as it was.
//!
//! When journaling is on (`EngineConfig::journal`), every change that must
//! survive a restart appends a [`Record`] holding the job's whole persistent
//! image (an update's without the body, which never changes), not a delta: a store that applies records in order ends with each
//! job's latest image, whatever interleaving produced it. A job's move from
//! delayed to ready needs no record (its stored deadline says when), nor do
//! reserve and touch, nor does a disconnect returning jobs to ready (a
//! stored job comes back ready unless it was delayed or buried). So a crash
//! may take back the `reserves` counted since the job's last record, as
//! beanstalkd's binlog does. Cluster mode is the exception: there a new
//! leader takes reservations over, so reserve, touch and a disconnect are
//! recorded too (`Engine::set_cluster`).

use bytes::Bytes;
use sprout_protocol::{JobId, Tags, TubeName};

use super::clock::Time;
use super::counts::Counts;
use super::job::{JobRow, State};
use super::profile::Profile;
use super::tube_ix::TubeIx;

/// A job's state as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    Ready,
    /// Reserved until this [`Time`] (its TTR deadline, absolute). Comes
    /// back ready after a restart; in cluster mode a new leader holds it
    /// until then (`Engine::restore`).
    Reserved(Time),
    /// Ready at this [`Time`] (absolute: downtime counts).
    Delayed(Time),
    /// Buried; `seq` orders buried jobs (oldest first).
    Buried(u64),
}

/// Everything about a job that survives a restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobImage {
    pub id: JobId,
    pub tube: TubeName,
    pub pri: u32,
    /// Seconds.
    pub ttr: u32,
    /// Seconds of the last put/release delay (what `stats-job` shows).
    pub delay: u32,
    pub state: Stored,
    pub created: Time,
    /// Its `stats-job` counters.
    pub counts: Counts,
    /// Empty in an update's record ([`Record::Update`]).
    pub body: Bytes,
    /// tuber's tags, for a tagged job (`ext.rs`); `None` for all others.
    pub ext: Option<Box<Extras>>,
}

/// One change for the store, in engine order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// A new job: its image and body.
    Put(JobImage),
    /// A job's image changed, but its body: no command changes a body, so
    /// the record carries none (an empty one) and the store keeps the one
    /// it has (`store/pack.rs`; the journal writes the state alone).
    Update(JobImage),
    Delete(JobId),
}

impl JobImage {
    pub(super) fn of(
        job: &JobRow,
        profile: Profile,
        counts: Counts,
        body: Bytes,
        tube: &TubeName,
    ) -> JobImage {
        let state = match job.state() {
            State::Ready => Stored::Ready,
            State::Reserved => Stored::Reserved(job.deadline),
            State::Delayed => Stored::Delayed(job.deadline),
            State::Buried => Stored::Buried(job.deadline),
        };
        JobImage {
            id: job.id,
            tube: tube.clone(),
            pri: job.pri,
            ttr: profile.ttr,
            delay: profile.delay,
            state,
            created: job.created,
            counts,
            body,
            ext: None,
        }
    }

    /// The profile of the job this image describes, in tube `t`.
    pub(super) fn profile(&self, t: TubeIx) -> Profile {
        Profile {
            tube: t,
            ttr: self.ttr,
            delay: self.delay,
        }
    }
}

/// What a job's records carry beyond beanstalkd's fields.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Extras {
    pub tags: Tags,
    /// The job was deleted under an `idp:` TTL: the record keeps its key
    /// deduplicating until this moment, and is no job any more.
    pub cooling_until: Option<Time>,
}

impl Extras {
    /// The most bytes a store spends on them (`store/extras.rs` is held to
    /// it): a flags byte, each name with a length byte, each number in
    /// 4 bytes, the cooldown in 8.
    pub fn max_len(&self) -> usize {
        let t = &self.tags;
        1 + t.idp.as_ref().map_or(0, |(k, _)| 1 + k.len() + 4)
            + t.grp.as_ref().map_or(0, |g| 1 + g.len())
            + t.aft.as_ref().map_or(0, |g| 1 + g.len())
            + t.con.as_ref().map_or(0, |(k, _)| 1 + k.len() + 4)
            + self.cooling_until.map_or(0, |_| 8)
    }
}
