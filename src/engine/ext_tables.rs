//! What the engine keeps of tagged jobs (`ext.rs` has the rules): their
//! tags, the holders of `idp:` keys and their cooldowns, `con:` counts,
//! the groups of `grp:`/`aft:`, and flushes in progress.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;
use sprout_protocol::{JobId, TagName, Tags, TubeName};

use super::clock::Time;
use super::conn::ConnId;
use super::table::JobSlot;

/// The engine's state for tagged jobs.
#[derive(Default)]
pub(super) struct Ext {
    /// By slot: the tags of every tagged job.
    pub(super) tags: FxHashMap<JobSlot, Box<Tags>>,
    /// By tube name, then key: the job holding an `idp:` key.
    pub(super) keys: FxHashMap<TubeName, FxHashMap<TagName, Key>>,
    /// Keys cooling down, by the moment they are free again.
    pub(super) cooling: BTreeMap<(Time, JobId), (TubeName, TagName)>,
    /// Connections in the middle of a `flush-tube`, and what they flushed
    /// so far (`tuber_batch.rs`).
    pub(super) flushing: FxHashMap<ConnId, u64>,
    /// By `con:` key: how many of its jobs are reserved now.
    pub(super) con: FxHashMap<TagName, u32>,
    /// A reservation of a `con:` job ended: waiters may now get a job
    /// that was held back (`Engine::tick` serves them).
    pub(super) con_freed: bool,
    /// By name: the groups of `grp:` and `aft:`.
    pub(super) groups: FxHashMap<TagName, Group>,
    /// Held `aft:` jobs may have a group with no member left (a restart,
    /// a job forgotten): `Engine::tick` releases them, once every job is
    /// back.
    pub(super) groups_unsettled: bool,
    /// Puts refused for `--max-jobs-size` (`EngineConfig::jobs_budget`).
    pub(super) over_budget: u64,
}

/// A group: its live members, and the `aft:` jobs held until it has none.
#[derive(Default)]
pub(super) struct Group {
    pub(super) members: rustc_hash::FxHashSet<JobSlot>,
    /// `(slot, id)`: a held job may have left meanwhile (deleted, released
    /// by the admin API).
    pub(super) waiting: Vec<(JobSlot, JobId)>,
}

/// Who holds an `idp:` key.
#[derive(Clone, Copy, Debug)]
pub(super) enum Key {
    /// A live job.
    Live(JobId),
    /// A deleted job whose key cools down until this moment.
    Cooling(JobId, Time),
}
