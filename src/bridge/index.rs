//! The bridge's durable index: for each watched key, its current timer.
//!
//! An in-memory map, `(node, key)` → `(expire_at_ms, timer job id)`, with a
//! write-behind log under `--state-dir` (the file [`LOG`]). Every change is
//! encoded as a record beside the map, under the same lock, and a writer
//! thread appends the records and `fdatasync`s the file about every
//! [`SYNC_EVERY`], so callers (async tasks) never wait for the disk. At open
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
//! (see [`writer::needs_compaction`]) the writer thread writes a snapshot of the map
//! to a temporary file, syncs it, renames it over the log and syncs the
//! directory. It copies one shard of the map at a time, so callers wait at
//! most for one shard's copy; changes made meanwhile stay queued and are
//! appended after the snapshot (replaying a change already in the snapshot
//! again is harmless: the last record of a key is its current state).
//!
//! The map is split in [`SHARDS`] shards, each under its own mutex, and
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
//! Submodules: [`key`] (a key and its node in 24 bytes, short keys inline),
//! [`record`] (the log's format and its replay), [`writer`] (the thread
//! that appends, syncs and compacts).

use std::collections::hash_map::RandomState;
use std::fs::{File, OpenOptions};
use std::hash::BuildHasher;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use hashbrown::hash_table::{Entry as Place, HashTable};
use key::Key;
use record::{encode, replay, set_len};
use writer::{write_snapshot, WriterHandle, TMP};

mod key;
mod record;
#[cfg(test)]
mod tests;
mod writer;

/// `expire_at_ms` of a tombstone.
pub const CANCELLED: i64 = -1;
/// How long a delivered mark is kept: far longer than an event can lag.
pub const MARK_KEEP_MS: i64 = 10 * 60 * 1000;

/// The log's file name in the state dir.
pub const LOG: &str = "index.log";
/// What the sled index of earlier versions left in the state dir.
const SLED_FILES: [&str; 3] = ["db", "conf", "blobs"];
/// Shards of the map (each under its own mutex).
const SHARDS: usize = 16;

/// Where a key's pending expiry lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyEntry {
    pub expire_at_ms: i64,
    pub timer: u64,
}

impl KeyEntry {
    /// The mark of an expiry delivered at `at_ms` by `timer`: the delivery
    /// time, negated, as the expiry, and the timer that delivered it, so a
    /// timer of the key no newer than that one (the same timer back after
    /// a lost delete, or an older one a lost delete left behind) is known
    /// for a duplicate. Marks of earlier versions name no timer (0).
    pub fn delivered(at_ms: i64, timer: u64) -> KeyEntry {
        KeyEntry {
            expire_at_ms: -at_ms.max(2),
            timer,
        }
    }

    pub fn is_delivered(self) -> bool {
        self.expire_at_ms < CANCELLED
    }
}

/// One key in a shard's table, with its entry: 40 bytes, the key inline
/// if short (see [`key`]).
struct KeyRow {
    key: Key,
    entry: KeyEntry,
}

const _: () = assert!(std::mem::size_of::<KeyRow>() == 40);

/// One shard of the map, with the records of its changes not yet taken by
/// the writer thread (in the order the changes were made). A flat table
/// keyed by `(node, key)` whose hash is computed once per call (it also
/// picks the shard): a map per node, each hashing again, cost the firing
/// path three SipHash runs per lookup.
#[derive(Default)]
struct Shard {
    table: HashTable<KeyRow>,
    pending: Vec<u8>,
}

impl Shard {
    fn get(&self, hash: u64, node: u16, key: &[u8]) -> Option<KeyEntry> {
        self.table
            .find(hash, |s| s.key.is(node, key))
            .map(|s| s.entry)
    }

    /// Applies a change to the key whose hash is `hash`; returns whether it
    /// changed anything and adjusts `live` (the bytes of the live entries'
    /// set records).
    fn apply(
        &mut self,
        (hash, hasher): (u64, &RandomState),
        node: u16,
        key: &[u8],
        entry: Option<KeyEntry>,
        live: &AtomicU64,
    ) -> bool {
        let size = set_len(key.len());
        let same = |s: &KeyRow| s.key.is(node, key);
        match entry {
            Some(entry) => {
                let rehash = |s: &KeyRow| hash_of(hasher, s.key.node(), s.key.bytes());
                match self.table.entry(hash, same, rehash) {
                    Place::Occupied(mut place) if place.get().entry != entry => {
                        place.get_mut().entry = entry;
                        true
                    }
                    Place::Occupied(_) => false,
                    Place::Vacant(place) => {
                        place.insert(KeyRow {
                            key: Key::new(node, key),
                            entry,
                        });
                        live.fetch_add(size, Ordering::Relaxed);
                        true
                    }
                }
            }
            None => match self.table.find_entry(hash, same) {
                Ok(place) => {
                    place.remove();
                    live.fetch_sub(size, Ordering::Relaxed);
                    true
                }
                Err(_) => false,
            },
        }
    }

    /// Every `(node, key, entry)` in the shard.
    fn entries(&self) -> impl Iterator<Item = (u16, &[u8], KeyEntry)> {
        self.table
            .iter()
            .map(|s| (s.key.node(), s.key.bytes(), s.entry))
    }
}

fn hash_of(hasher: &RandomState, node: u16, key: &[u8]) -> u64 {
    hasher.hash_one((node, key))
}

/// What the writer thread and callers of [`Index::flush`] share.
#[derive(Default)]
struct Control {
    /// Flushes asked for, and how many of them are done.
    requested: u64,
    done: u64,
    stop: bool,
    /// Compact at the next round whatever the log's size.
    compact: bool,
    /// The last write or sync error, if the last attempt failed.
    error: Option<String>,
}

/// The map itself, in shards, with the writer thread's [`Control`]: what
/// the clones of [`Index`] and the writer share.
struct KeyMap {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    /// Bytes of the live entries' set records: what a snapshot would take.
    live_bytes: AtomicU64,
    control: Mutex<Control>,
    wake: Condvar,
}

impl KeyMap {
    /// The key's hash and its shard, locked. The shard comes from bits the
    /// table does not use for small tables (the low ones pick a bucket, the
    /// top seven tag it), so each shard's keys still spread evenly.
    fn shard(&self, node: u16, key: &[u8]) -> (u64, MutexGuard<'_, Shard>) {
        let hash = hash_of(&self.hasher, node, key);
        (hash, lock(&self.shards[(hash >> 32) as usize % SHARDS]))
    }

    /// Applies a change to the map and, with `log` and if it changed
    /// anything, queues its record for the writer (a replay does not).
    fn apply(&self, node: u16, key: &[u8], entry: Option<KeyEntry>, log: bool) {
        let (hash, mut shard) = self.shard(node, key);
        let place = (hash, &self.hasher);
        if shard.apply(place, node, key, entry, &self.live_bytes) && log {
            encode(&mut shard.pending, node, key, entry);
        }
    }
}

/// Locks a mutex; a panic elsewhere while holding it left consistent data
/// (every change is a single map operation plus its record).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

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
        let map = Arc::new(KeyMap {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            live_bytes: AtomicU64::new(0),
            control: Mutex::default(),
            wake: Condvar::new(),
        });
        let log_bytes = replay(&file, &path, &map).map_err(context)?;
        let writer = writer::start(map.clone(), dir, dir_file, file, log_bytes).map_err(context)?;
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
