//! What the engine is given at start.

use crate::binlog_stats::BinlogStats;

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
    /// The store keeps every body on disk (`-b`): the engine keeps only
    /// the length of one longer than `bodies.rs`'s `INLINE`, and replies
    /// naming such a job are filled outside it (`Engine::stored_len`).
    pub bodies_in_store: bool,
}
