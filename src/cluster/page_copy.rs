//! A node's copy of the pages its cluster's stream holds (issue 33, step
//! 4): what a leader's cleaning reads old pages from, and, with `-b DIR`,
//! where the bodies the engine leaves to the store are read back from.
//!
//! Without `-b` the copy is in memory, beside the engine that holds every
//! body too. With `-b` it is a sled database in `DIR/cluster-pages`, under
//! the keys the single-node store gives its pages (`store/page.rs`), so
//! the single-node store's readers (`store/body_read.rs`, the read-ahead)
//! read it unchanged. It is written blind and never synced: the stream is
//! the copy of record, and a node reads the whole stream again when it
//! starts, so the copy is emptied first. A lock file keeps two nodes from
//! sharing one directory (each would empty the other's copy).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

use bytes::Bytes;
use rustc_hash::FxHashMap;

use crate::store::{page_key, Slot};

/// Where under `-b DIR` the copy is kept.
pub const SUBDIR: &str = "cluster-pages";
/// sled's cache for the copy: pages are read back only for bodies the
/// body cache misses, and for cleaning, each once in a while.
const SLED_CACHE: u64 = 4 << 20;

pub enum PageCopy {
    /// Without `-b`.
    Memory(FxHashMap<Slot, Bytes>),
    /// With `-b`: the database, and the lock file held while it is open.
    Disk(::sled::Db, File),
}

impl Default for PageCopy {
    fn default() -> PageCopy {
        PageCopy::Memory(FxHashMap::default())
    }
}

impl PageCopy {
    /// An empty copy in `dir`'s [`SUBDIR`], whatever an earlier run left
    /// there, once no other process holds it.
    pub fn open(dir: &Path) -> io::Result<PageCopy> {
        let at = dir.join(SUBDIR);
        let why = |what: &str, e: &dyn std::fmt::Display| {
            io::Error::other(format!("cannot {what} {}: {e}", at.display()))
        };
        std::fs::create_dir_all(dir).map_err(|e| why("create", &e))?;
        let lock = File::create(dir.join(format!("{SUBDIR}.lock"))).map_err(|e| why("lock", &e))?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(io::Error::other(format!(
                "-b {} is in use by another cluster node: give each node its own -b",
                dir.display()
            )));
        }
        if dir.join("db").exists() {
            tracing::warn!(
                "-b {} holds a single-node store too: cluster mode neither serves its jobs \
                 nor changes them",
                dir.display()
            );
        }
        match std::fs::remove_dir_all(&at) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(why("empty", &e)),
            _ => {}
        }
        let db = ::sled::Config::new()
            .path(&at)
            .cache_capacity(SLED_CACHE)
            .flush_every_ms(None)
            .open()
            .map_err(|e| why("open", &e))?;
        Ok(PageCopy::Disk(db, lock))
    }

    /// The database, for a copy on disk.
    pub fn db(&self) -> Option<&::sled::Db> {
        match self {
            PageCopy::Memory(_) => None,
            PageCopy::Disk(db, _) => Some(db),
        }
    }

    /// The page in `slot`, if any.
    pub fn get(&self, slot: Slot) -> io::Result<Option<Vec<u8>>> {
        match self {
            PageCopy::Memory(pages) => Ok(pages.get(&slot).map(|page| page.to_vec())),
            PageCopy::Disk(db, _) => Ok(db.get(page_key(slot))?.map(|page| page.to_vec())),
        }
    }

    /// Makes each slot hold its page, or nothing for an empty one. A page
    /// kept in memory is copied if `copy` (a slice of a larger buffer,
    /// which it would keep whole).
    pub fn write(&mut self, pages: &[(Slot, Bytes)], copy: bool) -> io::Result<()> {
        match self {
            PageCopy::Memory(kept) => {
                for (slot, page) in pages {
                    match page.is_empty() {
                        true => kept.remove(slot),
                        false if copy => kept.insert(*slot, Bytes::copy_from_slice(page)),
                        false => kept.insert(*slot, page.clone()),
                    };
                }
            }
            PageCopy::Disk(db, _) => {
                let mut batch = ::sled::Batch::default();
                for (slot, page) in pages {
                    match page.is_empty() {
                        true => batch.remove(&page_key(*slot)),
                        false => batch.insert(&page_key(*slot), &page[..]),
                    }
                }
                db.apply_batch(batch)?;
            }
        }
        Ok(())
    }

    /// Every page, by slot (tests compare copies).
    #[cfg(test)]
    pub fn all(&self) -> std::collections::BTreeMap<Slot, Vec<u8>> {
        match self {
            PageCopy::Memory(pages) => pages.iter().map(|(s, p)| (*s, p.to_vec())).collect(),
            PageCopy::Disk(db, _) => db
                .iter()
                .map(|kv| {
                    let (k, v) = kv.expect("a readable copy");
                    let slot = Slot::from_be_bytes(k[1..].try_into().expect("a page key"));
                    (slot, v.to_vec())
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_on_disk_holds_what_one_in_memory_does() {
        let dir = std::env::temp_dir().join(format!("sprout-page-copy-{}", std::process::id()));
        let mut disk = PageCopy::open(&dir).unwrap();
        let mut memory = PageCopy::default();
        let page = |n: u8| Bytes::from(vec![n; 100]);
        // (slot, page; empty: the slot freed)
        let writes = [
            vec![(1, page(1)), (2, page(2)), (7, page(7))],
            vec![(2, Bytes::new()), (1, page(11))],
            vec![(9, Bytes::new()), (3, page(3))],
        ];
        for (n, batch) in writes.iter().enumerate() {
            disk.write(batch, false).unwrap();
            memory.write(batch, n % 2 == 0).unwrap();
            assert_eq!(disk.all(), memory.all(), "after batch {n}");
        }
        assert_eq!(disk.get(1).unwrap(), Some(vec![11; 100]));
        assert_eq!(disk.get(2).unwrap(), None);
        assert_eq!(memory.get(7).unwrap(), Some(vec![7; 100]));
        // Another node on the same directory is refused; once this one is
        // gone, the next starts empty.
        let taken = PageCopy::open(&dir).err().expect("refused");
        assert!(taken.to_string().contains("in use by another"), "{taken}");
        drop(disk);
        let again = PageCopy::open(&dir).unwrap();
        assert!(again.all().is_empty());
        drop(again);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
