//! The ballast: disk space held back so sled can open on a full disk.
//!
//! sled 0.34 writes when it opens, and an open that fails on a full disk
//! leaves a file behind that breaks every later open (see
//! docs/durability.md, section 6). So sprout keeps a
//! file of [`size`] bytes allocated in the journal's directory; before it
//! opens sled on a disk with less free space than that, it empties the
//! file, and it removes any leftover `.generating` file (a snapshot sled
//! never finished, so never the one it reads). The keeper allocates the
//! ballast again once the disk has room.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::segment;

const NAME: &str = "ballast";
/// How long a failed allocation waits before it is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// The ballast wanted for a store whose largest sled snapshot is
/// `snapshot` bytes: a sled log segment, twice the snapshot, and a margin.
pub fn size(snapshot: u64) -> u64 {
    (1 << 20) + 2 * snapshot
}

/// Free bytes on the filesystem holding `dir`, for an unprivileged writer.
pub fn free_space(dir: &Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("a path with a NUL byte"))?;
    // SAFETY: statvfs fills the struct we pass; the path is NUL-terminated.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(stat.f_bavail as u64 * stat.f_frsize as u64)
}

pub struct Ballast {
    path: PathBuf,
    size: u64,
    retry_at: Option<Instant>,
}

impl Ballast {
    /// The ballast of the store in `store` (the journal's directory must
    /// exist): sized from sled's snapshot, emptied (and leftover unfinished
    /// snapshots removed) if the disk has less room than it, so sled can
    /// open.
    pub fn prepare(store: &Path) -> io::Result<Ballast> {
        let mut snapshot = 0;
        for entry in std::fs::read_dir(store)? {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("snap.") && name.ends_with(".generating") {
                tracing::warn!("removing sled's unfinished snapshot {name}");
                std::fs::remove_file(entry.path())?;
            } else if name.starts_with("snap.") {
                snapshot = snapshot.max(entry.metadata()?.size());
            }
        }
        let ballast = Ballast {
            path: segment::dir(store).join(NAME),
            size: size(snapshot),
            retry_at: None,
        };
        if free_space(store)? < ballast.size {
            let file = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&ballast.path)?;
            drop(file);
            tracing::warn!(
                "the disk holding {} is nearly full: emptied the ballast so the \
                 store can open",
                store.display()
            );
        }
        Ok(ballast)
    }

    /// The bytes it lacks: all of it once emptied, none when whole.
    pub fn missing(&self) -> u64 {
        let allocated = std::fs::metadata(&self.path).map_or(0, |m| m.blocks() * 512);
        self.size.saturating_sub(allocated)
    }

    /// Allocates the ballast if it is not whole and the disk has room to
    /// spare beyond it (`spare` bytes: sled and the journal come first),
    /// looking at most once a second.
    pub fn keep(&mut self, spare: u64) {
        if self.retry_at.is_some_and(|at| Instant::now() < at) {
            return;
        }
        if self.missing() == 0 {
            return;
        }
        let store = self.path.parent().unwrap_or(Path::new("."));
        if free_space(store).map_or(true, |free| free < self.size + spare) {
            self.retry_at = Some(Instant::now() + RETRY);
            return;
        }
        let made = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)
            .and_then(|file: File| segment::allocate(&file, self.size));
        match made {
            Ok(()) => {
                if self.retry_at.take().is_some() {
                    tracing::info!("the ballast is back in place");
                }
            }
            Err(_) => self.retry_at = Some(Instant::now() + RETRY),
        }
    }
}
