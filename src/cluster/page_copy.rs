//! A node's copy of the pages its cluster's stream holds (issue 33, step
//! 4): what a leader's cleaning reads old pages from, and, with `-b DIR`,
//! where the bodies the engine leaves to the store are read back from.
//!
//! Without `-b` the copy is in memory, beside the engine that holds every
//! body too. With `-b` each page is a file of its own in
//! `DIR/cluster-pages`, named by its slot, read back by the single-node
//! store's readers (`store/body_read.rs`, the read-ahead) through
//! `store/page_source.rs`. A page is written to a new file renamed over
//! the old one, so a reader finds the old page or the new, never part of
//! one; nothing is synced: the stream is the copy of record, and a node
//! reads the whole stream again when it starts, so the copy is emptied
//! first. A lock file keeps two nodes from sharing one directory (each
//! would empty the other's copy).
//!
//! Why not sled, as the single-node store: a sled 0.34 database whose
//! pages were rewritten this fast deadlocked a standby during a 1M-job
//! fill. Its writer held the segment accountant's lock while it waited for
//! a file truncation queued on sled's thread pool, whose threads all
//! waited for that lock. Files need no such machinery: a slot's page is
//! replaced whole, and the file system finds the room.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use rustc_hash::FxHashMap;

use crate::store::{PageSource, PageValue, Slot};

/// Where under `-b DIR` the copy is kept.
pub const SUBDIR: &str = "cluster-pages";

pub enum PageCopy {
    /// Without `-b`.
    Memory(FxHashMap<Slot, Bytes>),
    /// With `-b`: the files, and the lock file held while they are used.
    Disk(Arc<PageFiles>, File),
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
        std::fs::create_dir(&at).map_err(|e| why("create", &e))?;
        Ok(PageCopy::Disk(Arc::new(PageFiles { dir: at }), lock))
    }

    /// Where readers of bodies find the pages, for a copy on disk.
    pub fn source(&self) -> Option<Arc<dyn PageSource>> {
        match self {
            PageCopy::Memory(_) => None,
            PageCopy::Disk(files, _) => Some(files.clone()),
        }
    }

    /// The page in `slot`, if any.
    pub fn get(&self, slot: Slot) -> io::Result<Option<Vec<u8>>> {
        match self {
            PageCopy::Memory(pages) => Ok(pages.get(&slot).map(|page| page.to_vec())),
            PageCopy::Disk(files, _) => Ok(files.read(slot)?),
        }
    }

    /// Makes each slot hold its page, or nothing for an empty one. A page
    /// kept in memory is copied if `copy` (a slice of a larger buffer,
    /// which it would keep whole).
    pub fn write(&mut self, pages: &[(Slot, Bytes)], copy: bool) -> io::Result<()> {
        for (slot, page) in pages {
            match self {
                PageCopy::Memory(kept) => match page.is_empty() {
                    true => _ = kept.remove(slot),
                    false if copy => _ = kept.insert(*slot, Bytes::copy_from_slice(page)),
                    false => _ = kept.insert(*slot, page.clone()),
                },
                PageCopy::Disk(files, _) => files.write(*slot, page)?,
            }
        }
        Ok(())
    }

    /// Every page, by slot (tests compare copies).
    #[cfg(test)]
    pub fn all(&self) -> std::collections::BTreeMap<Slot, Vec<u8>> {
        match self {
            PageCopy::Memory(pages) => pages.iter().map(|(s, p)| (*s, p.to_vec())).collect(),
            PageCopy::Disk(files, _) => std::fs::read_dir(&files.dir)
                .expect("a readable copy")
                .map(|entry| {
                    let name = entry.expect("an entry").file_name();
                    let name = name.to_str().expect("a slot's name");
                    let slot = Slot::from_str_radix(name, 16).expect("a slot's name");
                    (slot, files.read(slot).unwrap().expect("its page"))
                })
                .collect(),
        }
    }
}

/// Pages in files named by their slot.
pub struct PageFiles {
    dir: PathBuf,
}

impl PageFiles {
    fn path(&self, slot: Slot) -> PathBuf {
        self.dir.join(format!("{slot:08x}"))
    }

    /// Puts `page` in `slot` (empty: frees the slot).
    fn write(&self, slot: Slot, page: &[u8]) -> io::Result<()> {
        let path = self.path(slot);
        if page.is_empty() {
            return match std::fs::remove_file(&path) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                removed => removed,
            };
        }
        let new = path.with_extension("new");
        std::fs::write(&new, page)?;
        std::fs::rename(&new, &path)
    }

    fn read(&self, slot: Slot) -> io::Result<Option<Vec<u8>>> {
        match std::fs::read(self.path(slot)) {
            Ok(page) => Ok(Some(page)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl PageSource for PageFiles {
    fn page(&self, slot: Slot) -> io::Result<Option<PageValue>> {
        Ok(self.read(slot)?.map(PageValue::Owned))
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
        let source = disk.source().expect("a source on disk");
        let read = source.page(3).unwrap().expect("page 3");
        assert_eq!(read.as_ref(), &[3; 100][..]);
        // Another node on the same directory is refused; once this one is
        // gone, the next starts empty.
        let taken = PageCopy::open(&dir).err().expect("refused");
        assert!(taken.to_string().contains("in use by another"), "{taken}");
        drop((disk, source));
        let again = PageCopy::open(&dir).unwrap();
        assert!(again.all().is_empty());
        drop(again);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
