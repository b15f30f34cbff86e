//! The index's writer thread: appends the shards' pending records and syncs
//! them every [`SYNC_EVERY`], retries after a failed write, and compacts the
//! log into a snapshot of the map when it has grown well past it.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::key_record::{encode, MAGIC};
use super::map::{lock, KeyMap, Shard};

/// The log's file name in the state dir.
pub const LOG: &str = "index.log";
/// Where a compaction writes the snapshot before renaming it over [`LOG`].
pub(super) const TMP: &str = "index.log.tmp";
/// How often the writer thread appends and syncs what changed.
const SYNC_EVERY: Duration = Duration::from_millis(100);
/// Compaction slack: the log may exceed twice the live entries by this.
const COMPACT_SLACK: u64 = 4 << 20;
/// What the writer keeps to retry while the disk fails; beyond it the
/// queued changes are dropped (the index lags, see above).
const MAX_UNWRITTEN: usize = 256 << 20;

/// Whether a log of `log_bytes` holding `live_bytes` of live records is
/// worth compacting.
pub(super) fn needs_compaction(log_bytes: u64, live_bytes: u64) -> bool {
    log_bytes > 2 * live_bytes + COMPACT_SLACK
}

/// Stops the writer thread (after a last append and sync) when the last
/// clone of the index is dropped.
pub(super) struct WriterHandle {
    map: Arc<KeyMap>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for WriterHandle {
    fn drop(&mut self) {
        lock(&self.map.control).stop = true;
        self.map.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Writes a new log holding the entries of `shards` (one shard locked at a
/// time) and renames it over the old one, durably. Returns the new log,
/// open for writing, and its length.
pub(super) fn write_snapshot(
    dir: &Path,
    dir_file: &File,
    shards: &[Mutex<Shard>],
) -> io::Result<(File, u64)> {
    let tmp = dir.join(TMP);
    let mut out = BufWriter::with_capacity(1 << 20, File::create(&tmp)?);
    out.write_all(MAGIC)?;
    let mut len = MAGIC.len() as u64;
    let mut chunk = Vec::new();
    for shard in shards {
        for (node, key, entry) in lock(shard).entries() {
            encode(&mut chunk, node, key, Some(entry));
        }
        out.write_all(&chunk)?;
        len += chunk.len() as u64;
        chunk.clear();
    }
    let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
    file.sync_all()?;
    std::fs::rename(&tmp, dir.join(LOG))?;
    dir_file.sync_all()?;
    Ok((file, len))
}

/// Starts the writer thread on the log `file` of `log_bytes` in `dir`.
pub(super) fn start(
    map: Arc<KeyMap>,
    dir: &Path,
    dir_file: File,
    file: File,
    log_bytes: u64,
) -> io::Result<WriterHandle> {
    let writer = Writer {
        map: map.clone(),
        dir: dir.to_path_buf(),
        dir_file,
        file,
        log_bytes,
        unwritten: Vec::new(),
    };
    let thread = std::thread::Builder::new()
        .name("bridge-index".into())
        .spawn(move || writer.run())?;
    Ok(WriterHandle {
        map,
        thread: Some(thread),
    })
}

/// The writer thread's state.
struct Writer {
    map: Arc<KeyMap>,
    dir: PathBuf,
    /// Kept open: synced after renames, and locked against a second bridge.
    dir_file: File,
    file: File,
    log_bytes: u64,
    /// Records taken from the shards and not yet written (kept across a
    /// failed write, to retry at the same offset).
    unwritten: Vec<u8>,
}

impl Writer {
    fn run(mut self) {
        loop {
            let (ticket, stop, force) = {
                let mut control = lock(&self.map.control);
                if !control.stop && control.requested == control.done {
                    control = self
                        .map
                        .wake
                        .wait_timeout(control, SYNC_EVERY)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                let force = std::mem::take(&mut control.compact);
                (control.requested, control.stop, force)
            };
            let result = self
                .write_pending()
                .and_then(|()| self.maybe_compact(force));
            if let Err(e) = &result {
                tracing::warn!(error = %e, "cannot write the bridge index (retrying)");
            }
            let mut control = lock(&self.map.control);
            control.done = ticket;
            control.error = result.err().map(|e| e.to_string());
            self.map.wake.notify_all();
            if stop {
                return;
            }
        }
    }

    /// Appends the shards' pending records and syncs them.
    fn write_pending(&mut self) -> io::Result<()> {
        for shard in self.map.shards.iter() {
            self.unwritten.append(&mut lock(shard).pending);
        }
        if self.unwritten.is_empty() {
            return Ok(());
        }
        let written = self
            .file
            .write_all_at(&self.unwritten, self.log_bytes)
            .and_then(|()| self.file.sync_data());
        match written {
            Ok(()) => {
                self.log_bytes += self.unwritten.len() as u64;
                self.unwritten.clear();
                self.unwritten.shrink_to(1 << 20);
            }
            // Cut what a failed write may have left, so that retries and
            // later records follow the last good one.
            Err(_) if self.unwritten.len() > MAX_UNWRITTEN => {
                let _ = self.file.set_len(self.log_bytes);
                tracing::error!(
                    bytes = self.unwritten.len(),
                    "the bridge index cannot be written: dropping its queued changes \
                     (the index lags; reconciliation with Redis catches up)"
                );
                self.unwritten = Vec::new();
            }
            Err(_) => {
                let _ = self.file.set_len(self.log_bytes);
            }
        }
        written
    }

    fn maybe_compact(&mut self, force: bool) -> io::Result<()> {
        let live = self.map.live_bytes.load(Ordering::Relaxed) + MAGIC.len() as u64;
        if !force && !needs_compaction(self.log_bytes, live) {
            return Ok(());
        }
        let before = self.log_bytes;
        let (file, len) = write_snapshot(&self.dir, &self.dir_file, &self.map.shards)?;
        self.file = file;
        self.log_bytes = len;
        tracing::debug!(before, after = len, "bridge index compacted");
        Ok(())
    }
}
