//! Journal files: `DIR/journal/N`, N counting up from 1 (what `stats` calls
//! `binlog-current-index` and `binlog-oldest-index`, and `stats-job` calls
//! `file`).
//!
//! Each file is made under a temporary name (`N.new`), allocated at its
//! full size (`-s`) and synced, then renamed to `N` and the directory
//! synced, all before its first frame: writing a frame into it never needs
//! a block the disk might not have, never changes metadata a reply would
//! have to wait for, and a crash while making it leaves only a `.new` file,
//! which the next start removes. A file is its magic bytes ([`MAGIC`]),
//! then frames (`frame.rs`), then zeroes. One with no frame yet is a spare.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Identifies a journal file and its format.
pub const MAGIC: &[u8; 8] = b"sprout\x00\x01";

/// Where the journal files are, under the store's directory.
pub fn dir(store: &Path) -> PathBuf {
    store.join("journal")
}

pub fn path(dir: &Path, number: u64) -> PathBuf {
    dir.join(number.to_string())
}

/// The numbers of the journal files in `dir`, in order.
pub fn list(dir: &Path) -> io::Result<Vec<u64>> {
    let mut numbers = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        // Anything else (a ballast, a file being made) is not a journal file.
        if let Some(n) = name.to_str().and_then(|n| n.parse::<u64>().ok()) {
            numbers.push(n);
        }
    }
    numbers.sort_unstable();
    Ok(numbers)
}

/// What a journal file being made is called until it is whole.
const MAKING: &str = ".new";

/// Makes journal file `number` of `size` bytes, allocated and durable.
pub fn create(dir: &Path, number: u64, size: u64) -> io::Result<File> {
    let path = path(dir, number);
    if path.exists() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists", path.display()),
        ));
    }
    let making = dir.join(format!("{number}{MAKING}"));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&making)?;
    let made = allocate(&file, size)
        .and_then(|()| file.write_all_at(MAGIC, 0))
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&making, &path))
        .and_then(|()| sync_dir(dir));
    if let Err(e) = made {
        let _ = std::fs::remove_file(&making);
        return Err(e);
    }
    Ok(file)
}

/// Removes what a crash left of files being made.
pub fn remove_unfinished(dir: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().ends_with(MAKING) {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// Opens an existing journal file for reading and writing.
pub fn open(dir: &Path, number: u64) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path(dir, number))
}

/// Reads a whole journal file; checks its magic.
pub fn read(file: &File) -> io::Result<Vec<u8>> {
    let len = file.metadata()?.len() as usize;
    let mut bytes = vec![0; len];
    file.read_exact_at(&mut bytes, 0)?;
    if !bytes.starts_with(MAGIC) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a journal file without sprout's magic bytes (written by another version?)",
        ));
    }
    Ok(bytes)
}

/// Removes journal file `number` and makes that durable.
pub fn remove(dir: &Path, number: u64) -> io::Result<()> {
    std::fs::remove_file(path(dir, number))?;
    sync_dir(dir)
}

/// Reserves `size` bytes for `file` on the disk (and sets its length).
pub fn allocate(file: &File, size: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(size).map_err(|_| io::Error::other("file too large"))?;
    // SAFETY: fallocate on a descriptor we own.
    if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
        return Err(e);
    }
    // A filesystem without fallocate: write the zeroes out.
    let zeroes = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < size {
        let n = zeroes.len().min((size - at) as usize);
        file.write_all_at(&zeroes[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// Overwrites `from..to` of `file` with zeroes (in place: no new blocks).
pub fn zero(file: &File, from: u64, to: u64) -> io::Result<()> {
    let zeroes = vec![0u8; 1 << 20];
    let mut at = from;
    while at < to {
        let n = zeroes.len().min((to - at) as usize);
        file.write_all_at(&zeroes[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// Makes a directory's entries durable (a new or removed file in it).
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The offset just past the last byte of `bytes` that is not zero.
pub fn data_end(bytes: &[u8]) -> usize {
    bytes.iter().rposition(|&b| b != 0).map_or(0, |at| at + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_made_listed_and_removed() {
        let base = std::env::temp_dir().join(format!("sprout-segments-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        for n in [3, 1, 10] {
            create(&base, n, 64 * 1024).unwrap();
        }
        std::fs::write(base.join("ballast"), b"").unwrap();
        std::fs::write(base.join("11.new"), b"").unwrap();
        assert_eq!(list(&base).unwrap(), [1, 3, 10]);
        remove_unfinished(&base).unwrap();
        assert!(!base.join("11.new").exists());
        // Made at full size, starting with the magic bytes.
        let file = open(&base, 3).unwrap();
        let bytes = read(&file).unwrap();
        assert_eq!(bytes.len(), 64 * 1024);
        assert_eq!(data_end(&bytes), MAGIC.len());
        file.write_all_at(b"xyz", 100).unwrap();
        assert_eq!(data_end(&read(&file).unwrap()), 103);
        zero(&file, 50, 200).unwrap();
        assert_eq!(data_end(&read(&file).unwrap()), MAGIC.len());
        // Never made twice.
        assert!(create(&base, 3, 1024).is_err());
        remove(&base, 3).unwrap();
        assert_eq!(list(&base).unwrap(), [1, 10]);
        std::fs::write(path(&base, 4), b"not a journal").unwrap();
        assert!(read(&open(&base, 4).unwrap()).is_err());
        let _ = std::fs::remove_dir_all(&base);
    }
}
