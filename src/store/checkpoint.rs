//! A tiny file beside sled's that remembers the last commit made durable.
//!
//! sled 0.34 reads a damaged log entry as the end of its log, exactly as it
//! reads a tail torn by a crash, and opens without complaint: the jobs after
//! the damage are simply gone. Every batch sprout writes carries a commit
//! number (the `c` key), and after each durable flush this file records that
//! number. At startup a store whose commit number is behind the file has lost
//! acknowledged writes, which a crash alone cannot cause: it is damaged.
//!
//! The file is written but not synced: it is only ever written after sled's
//! data is durable, so whatever value of it survives a crash is at most the
//! store's own (a power loss may roll it back, which only weakens the check,
//! never makes it refuse a sound store), and a sync would add a third disk
//! flush to every `-f 0` commit.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

pub const FILE_NAME: &str = "sprout-commit";

pub struct Checkpoint {
    file: File,
}

impl Checkpoint {
    /// Opens (or creates) the checkpoint in `dir`; returns it and the last
    /// commit it recorded (0 for a new store).
    pub fn open(dir: &Path) -> io::Result<(Checkpoint, u64)> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(FILE_NAME))?;
        let mut bytes = [0u8; 8];
        let last = match file.read_exact_at(&mut bytes, 0) {
            Ok(()) => u64::from_le_bytes(bytes),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => 0,
            Err(e) => return Err(e),
        };
        Ok((Checkpoint { file }, last))
    }

    /// Records that commits up to `commit` are durable.
    pub fn record(&self, commit: u64) -> io::Result<()> {
        self.file.write_all_at(&commit.to_le_bytes(), 0)
    }
}
