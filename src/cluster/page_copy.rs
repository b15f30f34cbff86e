//! A node's copy of the pages its cluster's stream holds (issue 33, step
//! 4): what a leader's cleaning reads old pages from, and, with `-b DIR`,
//! where the bodies the engine leaves to the store are read back from.
//!
//! Without `-b` the copy is in memory, beside the engine that holds every
//! body too. With `-b` it is one file, `DIR/cluster-pages/slots`, with a
//! room of [`ROOM`] bytes for each slot: a page is written over its slot's
//! room in place, with its length and checksum, and read back by the
//! single-node store's readers (`store/body_read.rs`, the read-ahead)
//! through `store/page_source.rs`. A page longer than a room (one big
//! image) gets a file of its own, renamed into place. Nothing is synced:
//! the stream is the copy of record, and a node reads the whole stream
//! again when it starts, so the copy is emptied first. A lock file keeps
//! two nodes from sharing one directory (each would empty the other's).
//! The rooms take about twice the pages' bytes on disk: a page of up to
//! 4 KiB and its 8-byte head cross into a room's second block.
//!
//! Why not sled, as the single-node store: a sled 0.34 database whose
//! pages were rewritten this fast deadlocked a standby during a 1M-job
//! fill. Its writer held the segment accountant's lock while it waited for
//! a file truncation queued on sled's thread pool, whose threads all
//! waited for that lock. Nor a file per page: creating and renaming one
//! for each 4 KiB page cost a leader 4 us of kernel CPU a 100-byte job
//! (put 0.62x the jobs a second of a copy in memory). A room rewritten in
//! place costs one `pwrite`.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use rustc_hash::{FxHashMap, FxHashSet};

use crate::store::{PageSource, PageValue, Slot, PAGE_BYTES};

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
        let files = PageFiles::open(at.clone()).map_err(|e| why("create", &e))?;
        Ok(PageCopy::Disk(Arc::new(files), lock))
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
            PageCopy::Disk(files, _) => files.read(slot),
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
            PageCopy::Disk(files, _) => {
                let rooms = files.slots.metadata().expect("the slots file").len() / ROOM as u64;
                (0..=rooms as Slot)
                    .filter_map(|slot| Some((slot, files.read(slot).unwrap()?)))
                    .collect()
            }
        }
    }
}

/// Room for one slot's record in the slots file: the page's length and
/// checksum, then the page, which packing cuts near `PAGE_BYTES` unless
/// one image alone is longer (such a page has a file of its own).
const ROOM: usize = 2 * PAGE_BYTES;
/// A record's length for a page kept in a file of its own.
const BIG: u32 = u32::MAX;

/// Pages by slot: each in its slot's room of one file, written in place.
pub struct PageFiles {
    slots: File,
    /// Where pages longer than a room go, a file each.
    dir: PathBuf,
    /// The slots whose page has a file of its own, to remove once the
    /// slot holds another page or none.
    big: Mutex<FxHashSet<Slot>>,
}

impl PageFiles {
    fn open(dir: PathBuf) -> io::Result<PageFiles> {
        let slots = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.join("slots"))?;
        Ok(PageFiles {
            slots,
            dir,
            big: Mutex::default(),
        })
    }

    fn big(&self, slot: Slot) -> PathBuf {
        self.dir.join(format!("{slot:08x}"))
    }

    fn at(slot: Slot) -> u64 {
        u64::from(slot) * ROOM as u64
    }

    /// Puts `page` in `slot` (empty: frees the slot). The writer is one
    /// thread at a time (the node's follower, then its writer).
    fn write(&self, slot: Slot, page: &[u8]) -> io::Result<()> {
        let in_room = page.len() + 8 <= ROOM;
        let mut record = Vec::with_capacity(8 + page.len().min(ROOM));
        if in_room {
            record.extend_from_slice(&(page.len() as u32).to_le_bytes());
            record.extend_from_slice(&crc32fast::hash(page).to_le_bytes());
            record.extend_from_slice(page);
        } else {
            // Renamed into place: a reader finds the old file or the new.
            let new = self.big(slot).with_extension("new");
            std::fs::write(&new, page)?;
            std::fs::rename(&new, self.big(slot))?;
            self.bigs().insert(slot);
            record.extend_from_slice(&BIG.to_le_bytes());
            record.extend_from_slice(&[0; 4]);
        }
        self.slots.write_all_at(&record, Self::at(slot))?;
        if in_room && self.bigs().remove(&slot) {
            std::fs::remove_file(self.big(slot))?;
        }
        Ok(())
    }

    fn bigs(&self) -> std::sync::MutexGuard<'_, FxHashSet<Slot>> {
        self.big.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The page in `slot`. A record caught while it is rewritten, part old
    /// and part new, fails its checksum and reads as an empty slot: the
    /// readers of bodies look again once the page log's epoch has moved,
    /// as every write to the copy moves it (`follow.rs`), and count the
    /// slot damaged if it has not.
    fn read(&self, slot: Slot) -> io::Result<Option<Vec<u8>>> {
        let mut room = vec![0; ROOM];
        let mut got = 0;
        while got < ROOM {
            match self
                .slots
                .read_at(&mut room[got..], Self::at(slot) + got as u64)?
            {
                0 => break,
                n => got += n,
            }
        }
        let word = |at: usize| u32::from_le_bytes(room[at..at + 4].try_into().expect("4 bytes"));
        if got < 8 {
            return Ok(None);
        }
        let (len, crc) = (word(0), word(4));
        if len == BIG {
            return match std::fs::read(self.big(slot)) {
                Ok(page) => Ok(Some(page)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e),
            };
        }
        let len = len as usize;
        if len == 0 || 8 + len > got || crc32fast::hash(&room[8..8 + len]) != crc {
            return Ok(None);
        }
        room.truncate(8 + len);
        room.drain(..8);
        // The body cache holds slices of it, charged its allocation.
        room.shrink_to_fit();
        Ok(Some(room))
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
        // A page longer than a room, kept in a file of its own.
        let big = |n: u8| Bytes::from(vec![n; ROOM + 1]);
        let writes = [
            vec![(1, page(1)), (2, page(2)), (7, page(7)), (4, big(4))],
            vec![(2, Bytes::new()), (1, page(11)), (5, big(5))],
            vec![
                (9, Bytes::new()),
                (3, page(3)),
                (4, page(44)),
                (5, Bytes::new()),
            ],
        ];
        for (n, batch) in writes.iter().enumerate() {
            disk.write(batch, false).unwrap();
            memory.write(batch, n % 2 == 0).unwrap();
            assert_eq!(disk.all(), memory.all(), "after batch {n}");
        }
        assert_eq!(disk.get(1).unwrap(), Some(vec![11; 100]));
        assert_eq!(disk.get(2).unwrap(), None);
        assert_eq!(memory.get(7).unwrap(), Some(vec![7; 100]));
        // The big pages' files went with them.
        let files = std::fs::read_dir(dir.join(SUBDIR)).unwrap().count();
        assert_eq!(files, 1, "only the slots file is left");
        // A room caught half rewritten fails its checksum: an empty slot.
        let PageCopy::Disk(pages, _) = &disk else {
            unreachable!()
        };
        pages
            .slots
            .write_all_at(&[0xff; 50], ROOM as u64 + 20)
            .unwrap();
        assert_eq!(disk.get(1).unwrap(), None);
        disk.write(&[(1, page(11))], false).unwrap();
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
