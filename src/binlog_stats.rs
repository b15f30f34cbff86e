//! The store's counters behind `stats`' `binlog-*` keys and the `/metrics`
//! journal figures: written by the store's threads, read by the engine
//! and the HTTP side. A leaf, so the engine can read them without
//! importing the store above it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The store's counters behind the `binlog-*` keys, updated by the store's
/// writer as it works (see docs/durability.md for what each means with sled).
#[derive(Debug, Default)]
pub struct BinlogStats {
    /// The oldest journal file kept.
    pub oldest_index: AtomicU64,
    /// The journal file being written.
    pub current_index: AtomicU64,
    /// Records rewritten by compaction.
    pub records_migrated: AtomicU64,
    /// Records written since startup.
    pub records_written: AtomicU64,
    /// Journal writes (frames) since startup: `records_written` over this
    /// is the mean group size.
    pub frames_written: AtomicU64,
    /// The journal's syncs since startup, by how long each took.
    pub syncs: SyncTimes,
    /// The body cache's figures (`store/body_cache.rs`), with `-b`.
    pub body_cache: BodyCacheStats,
}

/// The body cache's figures behind `stats`' `body-cache-*` keys, written
/// by the cache and its readers.
#[derive(Debug, Default)]
pub struct BodyCacheStats {
    /// Whether there is a body cache (with `-b`; not in memory mode, nor
    /// yet in cluster mode): `stats` leaves the keys out otherwise.
    pub present: AtomicBool,
    /// Bytes of bodies held now.
    pub bytes: AtomicU64,
    /// Its bound (`--body-cache`).
    pub max_bytes: AtomicU64,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    /// Bodies that could not be read back from the store (a damaged one).
    pub read_errors: AtomicU64,
}

/// Upper bounds of [`SyncTimes`]' buckets in µs (+Inf implied): from a
/// fast SSD's flush to a disk that stalls.
pub const SYNC_BOUNDS_MICROS: [u64; 12] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000,
];

/// A histogram of sync times, counted with atomics by the store's threads.
#[derive(Debug, Default)]
pub struct SyncTimes {
    /// Per bucket, not cumulative; the last counts those above every bound.
    pub buckets: [AtomicU64; SYNC_BOUNDS_MICROS.len() + 1],
    pub sum_micros: AtomicU64,
}

impl SyncTimes {
    pub fn observe(&self, micros: u64) {
        let i = SYNC_BOUNDS_MICROS.partition_point(|&bound| bound < micros);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }
}
