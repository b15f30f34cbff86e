//! The bridge's durable index: for each watched key, its current timer.
//!
//! A sled tree under `--state-dir`, mapping `node (u16 BE) ++ key` to
//! `expire_at_ms (i64 BE) ++ timer job id (u64 BE)`. It is small (one entry
//! per key with a pending expiry) and it may lag after a crash: sled writes
//! it back within its flush interval, and the bridge never relies on it
//! alone. A timer the index does not name is re-checked against Redis
//! before it is dropped, and startup reconciliation re-registers every key
//! that still has a TTL. Why not keep it in Redis itself: the bridge must
//! not write to the application's keyspace (it may be a read-only replica
//! or a proxy), and a crash of Redis would take the index with it.
//!
//! Callers hold the key's lock (see `registry`) around read-modify-write,
//! so plain gets and sets are enough.
//!
//! A *tombstone* (an entry whose expiry is [`CANCELLED`]) marks a timer that
//! was cancelled while a firing worker held it reserved (the server lets
//! only that worker delete it); the worker drops the timer when it sees it.
//!
//! A *delivered mark* ([`Entry::delivered`]) remembers for a while that a
//! key's expiry was delivered, so Redis's `expired` event for it (which
//! often follows the delivery: the bridge's own check makes Redis delete
//! the key) is not taken for an expiry the bridge never saw. Marks older
//! than [`MARK_KEEP_MS`] are swept.

use std::io;
use std::path::Path;

/// sled's page cache: enough for about a million keys' pages, so index
/// writes do not read pages back from disk (sled rewrites a page per write).
const CACHE_BYTES: u64 = 128 << 20;

/// `expire_at_ms` of a tombstone.
pub const CANCELLED: i64 = -1;
/// How long a delivered mark is kept: far longer than an event can lag.
pub const MARK_KEEP_MS: i64 = 10 * 60 * 1000;

/// Where a key's pending expiry lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub expire_at_ms: i64,
    pub timer: u64,
}

impl Entry {
    /// The mark of an expiry delivered at `at_ms`: no timer (job ids start
    /// at 1) and the delivery time, negated, as the expiry.
    pub fn delivered(at_ms: i64) -> Entry {
        Entry {
            expire_at_ms: -at_ms.max(2),
            timer: 0,
        }
    }

    pub fn is_delivered(self) -> bool {
        self.timer == 0 && self.expire_at_ms < CANCELLED
    }

    fn encode(self) -> [u8; 16] {
        let mut out = [0; 16];
        out[..8].copy_from_slice(&self.expire_at_ms.to_be_bytes());
        out[8..].copy_from_slice(&self.timer.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Entry> {
        let bytes: &[u8; 16] = bytes.try_into().ok()?;
        let (exp, timer) = bytes.split_at(8);
        Some(Entry {
            expire_at_ms: i64::from_be_bytes(exp.try_into().ok()?),
            timer: u64::from_be_bytes(timer.try_into().ok()?),
        })
    }
}

/// The index, shared by every task of the bridge (sled is thread-safe).
#[derive(Clone)]
pub struct Index {
    db: sled::Db,
    tree: sled::Tree,
}

fn io_error(e: sled::Error) -> io::Error {
    io::Error::other(format!("bridge index: {e}"))
}

fn index_key(node: u16, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + key.len());
    k.extend_from_slice(&node.to_be_bytes());
    k.extend_from_slice(key);
    k
}

impl Index {
    /// Opens (or creates) the index in `dir`.
    pub fn open(dir: &Path) -> io::Result<Index> {
        std::fs::create_dir_all(dir)?;
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(CACHE_BYTES)
            .mode(sled::Mode::HighThroughput)
            .flush_every_ms(Some(100))
            .open()
            .map_err(|e| io::Error::other(format!("cannot open {}: {e}", dir.display())))?;
        let tree = db.open_tree("timers").map_err(io_error)?;
        Ok(Index { db, tree })
    }

    pub fn get(&self, node: u16, key: &[u8]) -> io::Result<Option<Entry>> {
        let raw = self.tree.get(index_key(node, key)).map_err(io_error)?;
        Ok(raw.and_then(|v| Entry::decode(&v)))
    }

    pub fn set(&self, node: u16, key: &[u8], entry: Entry) -> io::Result<()> {
        self.tree
            .insert(index_key(node, key), &entry.encode())
            .map(drop)
            .map_err(io_error)
    }

    pub fn remove(&self, node: u16, key: &[u8]) -> io::Result<()> {
        self.tree
            .remove(index_key(node, key))
            .map(drop)
            .map_err(io_error)
    }

    /// Removes the delivered marks made before `before_ms`; returns how
    /// many. A mark is only ever replaced by a newer entry, so removing a
    /// stale one without the key's lock is safe.
    pub fn sweep_delivered(&self, before_ms: i64) -> io::Result<usize> {
        let mut swept = 0;
        for item in self.tree.iter() {
            let (key, value) = item.map_err(io_error)?;
            let stale = Entry::decode(&value)
                .is_some_and(|e| e.is_delivered() && -e.expire_at_ms < before_ms);
            if stale
                && self
                    .tree
                    .compare_and_swap(&key, Some(value), None::<&[u8]>)
                    .map_err(io_error)?
                    .is_ok()
            {
                swept += 1;
            }
        }
        Ok(swept)
    }

    /// How many keys have an entry (pending, tombstone or delivered mark).
    pub fn len(&self) -> usize {
        self.tree.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tree.is_empty()
    }

    /// Writes everything to disk (at shutdown).
    pub fn flush(&self) -> io::Result<()> {
        self.db.flush().map(drop).map_err(io_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_per_node_and_key() {
        let dir = std::env::temp_dir().join(format!("sprout-index-{}", std::process::id()));
        let index = Index::open(&dir).unwrap();
        let a = Entry {
            expire_at_ms: 5,
            timer: 1,
        };
        index.set(0, b"k", a).unwrap();
        assert_eq!(index.get(0, b"k").unwrap(), Some(a));
        assert_eq!(index.get(1, b"k").unwrap(), None);
        assert_eq!(index.len(), 1);
        index.remove(0, b"k").unwrap();
        assert!(index.is_empty());
        drop(index);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn delivered_marks_are_recognised_and_swept_when_old() {
        let dir = std::env::temp_dir().join(format!("sprout-index-marks-{}", std::process::id()));
        let index = Index::open(&dir).unwrap();
        let pending = Entry {
            expire_at_ms: 1_000,
            timer: 7,
        };
        let tombstone = Entry {
            expire_at_ms: CANCELLED,
            timer: 8,
        };
        assert!(Entry::delivered(1_000).is_delivered());
        assert!(!pending.is_delivered() && !tombstone.is_delivered());
        index.set(0, b"old", Entry::delivered(1_000)).unwrap();
        index.set(0, b"new", Entry::delivered(5_000)).unwrap();
        index.set(0, b"pending", pending).unwrap();
        index.set(0, b"tomb", tombstone).unwrap();
        assert_eq!(index.sweep_delivered(2_000).unwrap(), 1);
        assert_eq!(index.get(0, b"old").unwrap(), None);
        assert_eq!(index.get(0, b"new").unwrap(), Some(Entry::delivered(5_000)));
        assert_eq!(index.get(0, b"pending").unwrap(), Some(pending));
        assert_eq!(index.get(0, b"tomb").unwrap(), Some(tombstone));
        drop(index);
        let _ = std::fs::remove_dir_all(dir);
    }
}
