//! The journal's room on the disk: what the engine may still record, and
//! the files made ahead of use (spares), within what the disk can give
//! beside sled's share (see `room.rs` for the figures, `allocator.rs` for
//! the thread that calls these).

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{lock, Journal, Segment};
use crate::engine::Room;
use crate::store::{ballast, room, segment};

impl Journal {
    /// What the engine may still record (see `room.rs`).
    pub fn room(&self) -> Room {
        let bytes = room::room(
            self.capacity.load(Ordering::Relaxed),
            self.pending_bytes.load(Ordering::Relaxed),
            self.live.load(Ordering::Relaxed),
        );
        Room {
            bytes,
            spare: self.allocatable.load(Ordering::Relaxed),
            kept: self.kept,
        }
    }

    /// How much of the free disk the journal may take: all but what sled
    /// needs to take the journal in (twice its files, and a margin), so the
    /// journal never wedges the store by filling the disk itself, and but
    /// what the ballast lacks (emptied for an open on a full disk, it is
    /// the first to get its room back).
    pub fn measure_disk(&self) -> io::Result<i64> {
        let free = ballast::free_space(&self.dir)? as i64;
        let files = self.stats.current_index.load(Ordering::Relaxed) + 1
            - self
                .stats
                .oldest_index
                .load(Ordering::Relaxed)
                .min(self.stats.current_index.load(Ordering::Relaxed));
        let headroom = room::headroom(files, self.file_size);
        let ballast = self.ballast_missing.load(Ordering::Relaxed);
        let allocatable = (free - headroom - ballast).max(0);
        self.allocatable.store(allocatable, Ordering::Relaxed);
        Ok(allocatable)
    }

    /// The allocator's word on the bytes the ballast lacks.
    pub fn set_ballast_missing(&self, bytes: u64) {
        self.ballast_missing.store(bytes as i64, Ordering::Relaxed);
    }

    /// Makes one journal file of at least `size` bytes now, if the disk
    /// has room for it beyond sled's.
    pub(super) fn allocate(&self, size: u64) -> io::Result<Segment> {
        let size = self.file_size.max(size);
        if self.measure_disk()? < size as i64 {
            return Err(io::Error::other(
                "no room on the disk for another journal file",
            ));
        }
        let number = self.take_number();
        let file = segment::create(&self.dir, number, size)?;
        Ok(Segment {
            number,
            file: Arc::new(file),
            size,
            offset: segment::MAGIC.len() as u64,
        })
    }

    /// The capacity the keeper should allocate towards, and what there is.
    pub fn capacity(&self) -> (i64, i64) {
        let wanted = room::wanted(
            self.pending_bytes.load(Ordering::Relaxed),
            self.live.load(Ordering::Relaxed),
            self.kept,
            self.file_size,
        );
        (wanted, self.capacity.load(Ordering::Relaxed))
    }

    pub fn current_file(&self) -> u32 {
        self.current.load(Ordering::Relaxed)
    }

    /// Allocates a spare journal file, if the disk has room for it.
    pub fn allocate_spare(&self) -> io::Result<()> {
        let spare = self.allocate(self.file_size)?;
        self.add_spare(spare);
        Ok(())
    }

    /// A number for a new journal file.
    fn take_number(&self) -> u64 {
        self.next_number.fetch_add(1, Ordering::Relaxed)
    }

    /// Hands a new spare file to the writer.
    fn add_spare(&self, spare: Segment) {
        let usable = spare.usable();
        lock(&self.writer).spares.push_back(spare);
        self.capacity.fetch_add(usable, Ordering::Relaxed);
    }

    /// Takes back a spare file the room no longer needs, if there is one.
    pub fn take_spare(&self) -> Option<Segment> {
        let spare = lock(&self.writer).spares.pop_back()?;
        self.capacity.fetch_sub(spare.usable(), Ordering::Relaxed);
        Some(spare)
    }
}
