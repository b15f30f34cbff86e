//! sled's blob files, which sled itself never syncs.
//!
//! sled 0.34 writes a log message over 128 KiB to a file under `blobs/`,
//! named by its log sequence number, and never syncs it (see
//! docs/durability.md, section 5). So before a commit counts as
//! durable the writer asks whether sled wrote a blob since the last time,
//! and if so syncs the whole filesystem (`syncfs`), which covers the new
//! blobs, their directory and sled's log; otherwise `fdatasync` of the log
//! file is enough.

use std::cell::Cell;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

pub struct Blobs {
    dir: PathBuf,
    /// The newest blob already made durable.
    newest: Cell<u64>,
}

impl Blobs {
    /// Watches `store_dir/blobs`; the first check syncs any blob there.
    pub fn new(store_dir: &std::path::Path) -> Blobs {
        Blobs {
            dir: store_dir.join("blobs"),
            newest: Cell::new(0),
        }
    }

    /// Makes sled's log file `log`, and every blob sled has written, durable.
    pub fn sync(&self, log: &File) -> io::Result<()> {
        let newest = self.newest_on_disk()?;
        if newest <= self.newest.get() {
            return log.sync_data();
        }
        // SAFETY: syncfs on a descriptor we own.
        if unsafe { libc::syncfs(log.as_raw_fd()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        self.newest.set(newest);
        Ok(())
    }

    /// The highest sequence number among the blob files (0 if none).
    fn newest_on_disk(&self) -> io::Result<u64> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        let mut newest = 0;
        for entry in entries {
            let name = entry?.file_name();
            if let Some(lsn) = name.to_str().and_then(|n| n.parse::<u64>().ok()) {
                newest = newest.max(lsn);
            }
        }
        Ok(newest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_blob_is_noticed_once() {
        let dir = std::env::temp_dir().join(format!("sprout-blobs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let blobs = Blobs::new(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let log = File::create(dir.join("db")).unwrap();
        // No blob directory yet, then an empty one: the log alone is synced.
        blobs.sync(&log).unwrap();
        std::fs::create_dir(dir.join("blobs")).unwrap();
        blobs.sync(&log).unwrap();
        assert_eq!(blobs.newest.get(), 0);
        for name in ["160", "75528", "not-a-blob"] {
            std::fs::write(dir.join("blobs").join(name), b"x").unwrap();
        }
        assert_eq!(blobs.newest_on_disk().unwrap(), 75528);
        blobs.sync(&log).unwrap();
        assert_eq!(blobs.newest.get(), 75528);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
