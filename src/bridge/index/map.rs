//! The index's map in shards, and what its writer thread and callers of
//! `Index::flush` share (see the parent module for why it is shaped so).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use hashbrown::hash_table::{Entry as Place, HashTable};

use super::key::Key;
use super::key_entry::KeyEntry;
use super::key_record::{encode, set_len};

/// Shards of the map (each under its own mutex).
pub(super) const SHARDS: usize = 16;

/// One key in a shard's table, with its entry: 40 bytes, the key inline
/// if short (see [`key`]).
pub(super) struct KeyRow {
    pub(super) key: Key,
    pub(super) entry: KeyEntry,
}

const _: () = assert!(std::mem::size_of::<KeyRow>() == 40);

/// One shard of the map, with the records of its changes not yet taken by
/// the writer thread (in the order the changes were made). A flat table
/// keyed by `(node, key)` whose hash is computed once per call (it also
/// picks the shard): a map per node, each hashing again, cost the firing
/// path three SipHash runs per lookup.
#[derive(Default)]
pub(super) struct Shard {
    pub(super) table: HashTable<KeyRow>,
    pub(super) pending: Vec<u8>,
}

impl Shard {
    pub(super) fn get(&self, hash: u64, node: u16, key: &[u8]) -> Option<KeyEntry> {
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
    pub(super) fn entries(&self) -> impl Iterator<Item = (u16, &[u8], KeyEntry)> {
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
pub(super) struct Control {
    /// Flushes asked for, and how many of them are done.
    pub(super) requested: u64,
    pub(super) done: u64,
    pub(super) stop: bool,
    /// Compact at the next round whatever the log's size.
    pub(super) compact: bool,
    /// The last write or sync error, if the last attempt failed.
    pub(super) error: Option<String>,
}

/// The map itself, in shards, with the writer thread's [`Control`]: what
/// the clones of [`Index`] and the writer share.
pub(super) struct KeyMap {
    pub(super) shards: Box<[Mutex<Shard>]>,
    pub(super) hasher: RandomState,
    /// Bytes of the live entries' set records: what a snapshot would take.
    pub(super) live_bytes: AtomicU64,
    pub(super) control: Mutex<Control>,
    pub(super) wake: Condvar,
}

impl KeyMap {
    pub(super) fn new() -> KeyMap {
        KeyMap {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            live_bytes: AtomicU64::new(0),
            control: Mutex::default(),
            wake: Condvar::new(),
        }
    }

    /// The key's hash and its shard, locked. The shard comes from bits the
    /// table does not use for small tables (the low ones pick a bucket, the
    /// top seven tag it), so each shard's keys still spread evenly.
    pub(super) fn shard(&self, node: u16, key: &[u8]) -> (u64, MutexGuard<'_, Shard>) {
        let hash = hash_of(&self.hasher, node, key);
        (hash, lock(&self.shards[(hash >> 32) as usize % SHARDS]))
    }

    /// Applies a change to the map and, with `log` and if it changed
    /// anything, queues its record for the writer (a replay does not).
    pub(super) fn apply(&self, node: u16, key: &[u8], entry: Option<KeyEntry>, log: bool) {
        let (hash, mut shard) = self.shard(node, key);
        let place = (hash, &self.hasher);
        if shard.apply(place, node, key, entry, &self.live_bytes) && log {
            encode(&mut shard.pending, node, key, entry);
        }
    }
}

/// Locks a mutex; a panic elsewhere while holding it left consistent data
/// (every change is a single map operation plus its record).
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
