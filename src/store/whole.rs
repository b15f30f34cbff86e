//! Whether sled holds everything its commit key says it does.
//!
//! After a failed write sled 0.34 can keep its commit key `c` and lose
//! pages written before it; laying every frame the journal still holds
//! over sled makes that good, but after a plain crash it is a large part
//! of a restart for nothing (see docs/durability.md, section 6).
//!
//! So the file [`MARKER`] in the store's directory says "sled has not
//! failed a write, nor had the disk nearly full under it, since it was last
//! known whole". Recovery lays only the frames past `c` over sled while it
//! is there, and every frame the journal holds when it is not (and for a
//! store from before it existed). The absorber removes it before its next
//! write to sled once the disk runs low, and as soon as a sled write fails
//! (an unlink and a directory sync, which need no free space); it makes it
//! again after a flush that leaves sled holding everything recovery laid
//! over it, while the disk has room and no write has failed.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use super::segment::sync_dir;

/// The marker's file name in the store's directory.
pub const MARKER: &str = "sled-whole";

/// What the absorber does with the marker after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Keep,
    Make,
    Remove,
}

/// The marker's decision, given whether it is there, whether a sled write
/// has failed, whether the disk is low, and whether sled now durably holds
/// every frame recovery laid over it.
pub fn decide(present: bool, failed: bool, low_disk: bool, caught_up: bool) -> Step {
    match (present, failed || low_disk) {
        (true, true) => Step::Remove,
        (false, false) if caught_up => Step::Make,
        _ => Step::Keep,
    }
}

/// The marker of one store directory, as the absorber keeps it.
pub struct Marker {
    path: PathBuf,
    present: bool,
    /// The frame sled must hold durably before the marker is made again:
    /// the last one recovery laid over sled, or one past a low-disk spell.
    needed: u64,
}

impl Marker {
    /// Reads whether the marker is there.
    pub fn read(dir: &Path) -> io::Result<Marker> {
        let path = dir.join(MARKER);
        let present = path.try_exists()?;
        Ok(Marker {
            path,
            present,
            needed: 0,
        })
    }

    pub fn present(&self) -> bool {
        self.present
    }

    /// Recovery laid frames up to `commit` over sled: made again only once
    /// sled holds them durably.
    pub fn needs(&mut self, commit: u64) {
        self.needed = self.needed.max(commit);
    }

    /// One step of the absorber: the marker made or removed as [`decide`]
    /// says, given whether a sled write failed, whether the disk is low,
    /// and the last frame sled holds durably and at all. A failure to
    /// update it is logged; the next step tries again.
    pub fn tend(&mut self, failed: bool, low_disk: bool, flushed: u64, commit: u64) {
        let step = decide(self.present, failed, low_disk, flushed >= self.needed);
        let result = match step {
            Step::Keep => return,
            Step::Make => self.make(),
            Step::Remove => {
                // Writes made near a full disk are trusted once flushed.
                self.needed = self.needed.max(commit + 1);
                self.remove()
            }
        };
        if let Err(e) = result {
            tracing::warn!("cannot update {}: {e}", self.path.display());
        }
    }

    /// Makes the marker (a new store: nothing to distrust).
    pub fn make(&mut self) -> io::Result<()> {
        File::create(&self.path)?.sync_all()?;
        sync_dir(self.dir())?;
        self.present = true;
        Ok(())
    }

    fn remove(&mut self) -> io::Result<()> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        self.present = false;
        sync_dir(self.dir())
    }

    fn dir(&self) -> &Path {
        self.path.parent().expect("a file in the store's directory")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_becomes_of_the_marker() {
        use Step::*;
        // present, failed, low disk, caught up => step
        let table = [
            (true, false, false, true, Keep),
            (true, false, false, false, Keep),
            (true, true, false, true, Remove),
            (true, false, true, true, Remove),
            (true, true, true, false, Remove),
            (false, false, false, true, Make),
            (false, false, false, false, Keep),
            (false, true, false, true, Keep),
            (false, false, true, true, Keep),
        ];
        for (present, failed, low, caught_up, want) in table {
            assert_eq!(
                decide(present, failed, low, caught_up),
                want,
                "present {present} failed {failed} low {low} caught up {caught_up}"
            );
        }
    }

    #[test]
    fn tended_on_disk() {
        let dir = std::env::temp_dir().join(format!("sprout-whole-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let present = || Marker::read(&dir).unwrap().present();
        let mut marker = Marker::read(&dir).unwrap();
        assert!(!marker.present());
        // Recovery laid frames up to 5 over sled: not whole before they
        // are flushed.
        marker.needs(5);
        marker.tend(false, false, 4, 5);
        assert!(!present());
        marker.tend(false, false, 5, 5);
        assert!(present());
        // A low disk removes it; it comes back after a flush past that.
        marker.tend(false, true, 5, 7);
        assert!(!present());
        marker.tend(false, false, 7, 7);
        assert!(!present());
        marker.tend(false, false, 8, 8);
        assert!(present());
        // A failed write removes it for good.
        marker.tend(true, false, 8, 8);
        assert!(!present());
        marker.tend(true, false, 20, 20);
        assert!(!present());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
