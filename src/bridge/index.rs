//! The bridge's durable index: for each watched key, its current timer.
//!
//! An in-memory map, `(node, key)` → `(expire_at_ms, timer job id)`, with a
//! write-behind log under `--state-dir` (the file [`LOG`]). Every change is
//! encoded as a record beside the map, under the same lock, and a writer
//! thread appends the records and `fdatasync`s the file about every
//! `index_writer::SYNC_EVERY`, so callers (async tasks) never wait for the disk. At open
//! the log is replayed into the map.
//!
//! It may lag after a crash: the changes of the last ~100 ms may be lost,
//! and a torn or corrupt tail (detected by each record's length and CRC-32)
//! ends the replay there; the file is truncated to its last good record.
//! That is safe because the bridge never relies on the index alone: startup
//! reconciliation re-registers every key that still has a TTL, a timer the
//! index does not name is adopted and re-checked against Redis before it is
//! dropped or fired (see `registry`), and job ids, which only grow, tell
//! which of two timers is newer. Why not keep it in Redis itself: the bridge
//! must not write to the application's keyspace (it may be a read-only
//! replica or a proxy), and a crash of Redis would take the index with it.
//! Why not a database (it was sled): every write cost a node copy and a
//! background log flusher, about half of the bridge's CPU under load, for
//! an index that fits in memory and need not be transactional.
//!
//! The log only grows, so when it is much larger than the live entries
//! (see `index_writer::needs_compaction`) the writer thread writes a snapshot of the map
//! to a temporary file, syncs it, renames it over the log and syncs the
//! directory. It copies one shard of the map at a time, so callers wait at
//! most for one shard's copy; changes made meanwhile stay queued and are
//! appended after the snapshot (replaying a change already in the snapshot
//! again is harmless: the last record of a key is its current state).
//!
//! The map is split in `map::SHARDS` shards, each under its own mutex, and
//! hashed with std's keyed SipHash: the keys come from the application, so
//! a hash an outsider can predict would let crafted keys degrade it.
//! Callers hold the key's lock (see `registry`) around read-modify-write,
//! so plain gets and sets are enough.
//!
//! A *tombstone* (an entry whose expiry is [`CANCELLED`]) marks a timer that
//! was cancelled while a firing worker held it reserved (the server lets
//! only that worker delete it); the worker drops the timer when it sees it.
//!
//! A *delivered mark* ([`KeyEntry::delivered`]) remembers for a while that a
//! key's expiry was delivered, so Redis's `expired` event for it (which
//! often follows the delivery: the bridge's own check makes Redis delete
//! the key) is not taken for an expiry the bridge never saw. Marks older
//! than [`MARK_KEEP_MS`] are swept.
//!
//! Submodules: [`entry`] (what the index holds for a key), [`key`] (a key
//! and its node in 24 bytes, short keys inline), [`map`] (the sharded map
//! and what the writer shares with callers), [`record`] (the log's format
//! and its replay), [`writer`] (the thread that appends, syncs and
//! compacts). They share nothing through this file, which only declares
//! them and puts the [`Index`] face on the map.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub use index_writer::LOG;
use index_writer::{write_snapshot, WriterHandle, TMP};
pub use key_entry::{KeyEntry, CANCELLED, MARK_KEEP_MS};
use key_record::{encode, replay, set_len};
use map::{lock, KeyMap, Shard};

mod index_writer;
mod key;
mod key_entry;
mod key_record;
mod map;
#[cfg(test)]
mod tests;

/// What the sled index of earlier versions left in the state dir.
const SLED_FILES: [&str; 3] = ["db", "conf", "blobs"];
/// The index, shared by every task of the bridge.
#[derive(Clone)]
pub struct Index {
    map: Arc<KeyMap>,
    _writer: Arc<WriterHandle>,
}

impl Index {
    /// Opens (or creates) the index in `dir`, replaying its log.
    pub fn open(dir: &Path) -> io::Result<Index> {
        let context = |e: io::Error| {
            io::Error::new(e.kind(), format!("bridge index in {}: {e}", dir.display()))
        };
        std::fs::create_dir_all(dir).map_err(context)?;
        let dir_file = File::open(dir).map_err(context)?;
        // SAFETY: flock on a descriptor we own; released when it is closed.
        if unsafe { libc::flock(dir_file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = io::Error::last_os_error();
            return Err(context(io::Error::new(
                e.kind(),
                format!("already in use by another bridge ({e})"),
            )));
        }
        let path = dir.join(LOG);
        match std::fs::remove_file(dir.join(TMP)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(context(e)),
            _ => {}
        }
        if !path.exists() {
            if SLED_FILES.iter().any(|f| dir.join(f).exists()) {
                tracing::warn!(
                    "{} holds a bridge index of an earlier version (sled: db, conf, blobs/); \
                     it is ignored and left in place (reconciliation with Redis rebuilds the \
                     index), and may be deleted",
                    dir.display()
                );
            }
            write_snapshot(dir, &dir_file, &[]).map_err(context)?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(context)?;
        let map = Arc::new(KeyMap::new());
        let replayed = |node, key: &[u8], entry| map.apply(node, key, entry, false);
        let log_bytes = replay(&file, &path, replayed).map_err(context)?;
        let writer =
            index_writer::start(map.clone(), dir, dir_file, file, log_bytes).map_err(context)?;
        Ok(Index {
            map,
            _writer: Arc::new(writer),
        })
    }

    pub fn get(&self, node: u16, key: &[u8]) -> Option<KeyEntry> {
        let (hash, shard) = self.map.shard(node, key);
        shard.get(hash, node, key)
    }

    pub fn set(&self, node: u16, key: &[u8], entry: KeyEntry) {
        self.change(node, key, Some(entry));
    }

    pub fn remove(&self, node: u16, key: &[u8]) {
        self.change(node, key, None);
    }

    fn change(&self, node: u16, key: &[u8], entry: Option<KeyEntry>) {
        self.map.apply(node, key, entry, true);
    }

    /// Removes the delivered marks made before `before_ms`; returns how
    /// many. A mark is only ever replaced by a newer entry, so removing a
    /// stale one without the key's lock is safe.
    pub fn sweep_delivered(&self, before_ms: i64) -> usize {
        let stale = |e: &KeyEntry| e.is_delivered() && -e.expire_at_ms < before_ms;
        let mut swept = 0;
        for shard in self.map.shards.iter() {
            let mut guard = lock(shard);
            let Shard { table, pending } = &mut *guard;
            table.retain(|row| {
                if !stale(&row.entry) {
                    return true;
                }
                encode(pending, row.key.node(), row.key.bytes(), None);
                self.map
                    .live_bytes
                    .fetch_sub(set_len(row.key.bytes().len()), Ordering::Relaxed);
                swept += 1;
                false
            });
        }
        swept
    }

    /// The keys of `node` whose entry `keep` selects, with their entries;
    /// one shard locked at a time (only the selected keys are copied).
    pub fn select(
        &self,
        node: u16,
        mut keep: impl FnMut(&[u8], KeyEntry) -> bool,
    ) -> Vec<(Vec<u8>, KeyEntry)> {
        let mut out = Vec::new();
        for shard in self.map.shards.iter() {
            let shard = lock(shard);
            for (n, key, entry) in shard.entries() {
                if n == node && keep(key, entry) {
                    out.push((key.to_vec(), entry));
                }
            }
        }
        out
    }

    /// How many keys have an entry (pending, tombstone or delivered mark).
    pub fn len(&self) -> usize {
        self.map.shards.iter().map(|s| lock(s).table.len()).sum()
    }

    /// Compacts the log now and waits until done.
    #[cfg(test)]
    fn compact(&self) -> io::Result<()> {
        lock(&self.map.control).compact = true;
        self.flush()
    }

    /// Waits until every change made before the call is written and synced
    /// (at shutdown).
    pub fn flush(&self) -> io::Result<()> {
        let map = &self.map;
        let mut control = lock(&map.control);
        control.requested += 1;
        let ticket = control.requested;
        map.wake.notify_all();
        while control.done < ticket {
            control = map.wake.wait(control).unwrap_or_else(|e| e.into_inner());
        }
        match &control.error {
            Some(e) => Err(io::Error::other(format!("bridge index: {e}"))),
            None => Ok(()),
        }
    }
}
