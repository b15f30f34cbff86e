//! The journal's files at recovery: read, found where they end, and
//! readied to go on (see the parent's docs).

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use sprout_protocol::JobId;

use super::damage::Damage;
use crate::store::frame;
use crate::store::journal::Segment;
use crate::store::segment;

/// The full files, each with its last commit (`absorb.rs` removes them
/// once sled holds what they do).
pub type Retired = VecDeque<(u64, u64)>;

/// A journal file as read.
struct Read {
    number: u64,
    file: File,
    bytes: Bytes,
    /// (commit, ids_below, offset, len) of each frame that checks out, up
    /// to the first that does not.
    frames: Vec<(u64, JobId, usize, usize)>,
}

impl Read {
    fn first_commit(&self) -> Option<u64> {
        self.frames.first().map(|f| f.0)
    }
}

fn read_journal(dir: &Path) -> io::Result<Vec<Read>> {
    let mut files = Vec::new();
    for number in segment::list(dir)? {
        let file = segment::open(dir, number)?;
        let bytes = segment::read(&file)
            .map_err(|e| io::Error::new(e.kind(), format!("journal file {number}: {e}")))?;
        let mut frames = Vec::new();
        let mut at = segment::MAGIC.len();
        while let Some(f) = frame::read(&bytes[at..]) {
            frames.push((f.commit, f.ids_below, at, f.len));
            at += f.len;
        }
        files.push(Read {
            number,
            file,
            bytes: Bytes::from(bytes),
            frames,
        });
    }
    Ok(files)
}

/// Where the journal ends: a file (by index into the used files) and the
/// number of its frames that count.
struct End {
    file: usize,
    frames: usize,
}

/// Finds where the journal ends (see the module docs), given sled's commit.
fn find_end(used: &[Read], sled_commit: u64) -> End {
    let mut prev: Option<u64> = None;
    for (i, file) in used.iter().enumerate() {
        for (k, &(commit, ..)) in file.frames.iter().enumerate() {
            if let Some(prev) = prev {
                let next = commit == prev + 1 || (commit > prev + 1 && commit - 1 <= sled_commit);
                if !next {
                    return End { file: i, frames: k };
                }
            }
            prev = Some(commit);
        }
    }
    End {
        file: used.len().saturating_sub(1),
        frames: used.last().map_or(0, |f| f.frames.len()),
    }
}
/// The journal's files as read: those with frames in commit order (up to
/// `end`), the spares, and the number the next new file takes.
pub struct Journal {
    dir: PathBuf,
    used: Vec<Read>,
    unused: Vec<Read>,
    end: End,
    next_number: u64,
}

impl Journal {
    /// Reads the journal's files, refusing one that starts past sled.
    pub fn read(store: &Path, sled_commit: u64, damage: Damage) -> io::Result<Journal> {
        let dir = segment::dir(store);
        std::fs::create_dir_all(&dir)?;
        segment::remove_unfinished(&dir)?;
        let files = read_journal(&dir)?;
        let next_number = files.last().map_or(1, |f| f.number + 1);
        let (mut used, unused): (Vec<Read>, Vec<Read>) =
            files.into_iter().partition(|f| !f.frames.is_empty());
        used.sort_by_key(|f| f.first_commit());
        if let Some(first) = used.first().and_then(Read::first_commit) {
            if first > sled_commit + 1 {
                damage.refuse(format!(
                    "sled ends at commit {sled_commit} but the journal only starts at \
                     {first}: sled's log is damaged or truncated"
                ))?;
            }
        }
        let end = find_end(&used, sled_commit);
        Ok(Journal {
            dir,
            used,
            unused,
            end,
            next_number,
        })
    }

    /// The frames that count, as (the file's bytes, the frame's place).
    pub fn frames(&self) -> impl Iterator<Item = (&Bytes, &(u64, JobId, usize, usize))> {
        let end = &self.end;
        self.used
            .iter()
            .enumerate()
            .take(end.file + 1)
            .flat_map(move |(i, file)| {
                let count = if i == end.file {
                    end.frames
                } else {
                    file.frames.len()
                };
                file.frames[..count].iter().map(move |f| (&file.bytes, f))
            })
    }
}
/// The journal's files once readied to go on: the one written next, the
/// full ones (with their last commit) and the empty spares.
pub struct Readied {
    pub current: Segment,
    pub retired: VecDeque<(u64, u64)>,
    pub spares: VecDeque<Segment>,
    pub next_number: u64,
}

impl Journal {
    /// Readies the journal to go on where it ends: files past the end
    /// removed, the torn tail and the spares zeroed, all of it synced
    /// before anything new goes after it (after a kill -9 some of it may
    /// still be only in the kernel).
    pub fn ready(mut self, file_size: u64) -> io::Result<Readied> {
        let (current, retired) = self.cut_at_end()?;
        let spares = clear_spares(std::mem::take(&mut self.unused))?;
        for file in &self.used {
            file.file.sync_data()?;
        }
        if let Some(current) = &current {
            current.file.sync_data()?;
        }
        let mut spares = spares;
        let current = match current.or_else(|| spares.pop_front()) {
            Some(current) => current,
            None => Segment {
                number: self.next_number,
                file: Arc::new(segment::create(&self.dir, self.next_number, file_size)?),
                size: file_size,
                offset: segment::MAGIC.len() as u64,
            },
        };
        Ok(Readied {
            next_number: self.next_number.max(current.number + 1),
            current,
            retired,
            spares,
        })
    }

    /// Removes the files past the end and zeroes the last one's torn
    /// tail; the last file is the one to write on, the others retired.
    fn cut_at_end(&mut self) -> io::Result<(Option<Segment>, Retired)> {
        let mut retired = VecDeque::new();
        if self.used.is_empty() {
            return Ok((None, retired));
        }
        for dropped in self.used.drain(self.end.file + 1..) {
            tracing::warn!(
                "dropping journal file {} past the end of the journal",
                dropped.number
            );
            std::fs::remove_file(segment::path(&self.dir, dropped.number))?;
        }
        let last = self.used.pop().expect("used files");
        for file in &self.used {
            retired.push_back((file.number, file.frames.last().map_or(0, |f| f.0)));
        }
        let offset = last.frames[..self.end.frames]
            .last()
            .map_or(segment::MAGIC.len(), |&(_, _, at, len)| at + len);
        let data_end = segment::data_end(&last.bytes);
        if data_end > offset {
            tracing::warn!(
                "journal file {}: cutting a torn tail of {} bytes",
                last.number,
                data_end - offset
            );
            segment::zero(&last.file, offset as u64, data_end as u64)?;
            last.file.sync_data()?;
        }
        segment::sync_dir(&self.dir)?;
        let current = Segment {
            number: last.number,
            size: last.bytes.len() as u64,
            file: Arc::new(last.file),
            offset: offset as u64,
        };
        Ok((Some(current), retired))
    }
}

/// Files without a frame become spares; a spare holds nothing but a frame
/// a crash tore at its start, zeroed here.
fn clear_spares(unused: Vec<Read>) -> io::Result<VecDeque<Segment>> {
    let mut spares = VecDeque::new();
    for f in unused {
        let data_end = segment::data_end(&f.bytes);
        if data_end > segment::MAGIC.len() {
            segment::zero(&f.file, segment::MAGIC.len() as u64, data_end as u64)?;
            f.file.sync_data()?;
        }
        spares.push_back(Segment {
            number: f.number,
            size: f.bytes.len() as u64,
            file: Arc::new(f.file),
            offset: segment::MAGIC.len() as u64,
        });
    }
    Ok(spares)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn used(files: &[&[u64]]) -> Vec<Read> {
        files
            .iter()
            .enumerate()
            .map(|(i, commits)| Read {
                number: i as u64 + 1,
                file: tempfile(),
                bytes: Bytes::new(),
                frames: commits.iter().map(|&c| (c, 0, 0, 0)).collect(),
            })
            .collect()
    }

    fn tempfile() -> File {
        File::open("/dev/null").unwrap()
    }

    /// Files of frame commits, sled's commit, (file, frames) that count.
    type Case = (&'static [&'static [u64]], u64, (usize, usize));

    #[test]
    fn where_the_journal_ends() {
        let table: &[Case] = &[
            (&[&[1, 2, 3]], 0, (0, 3)),
            (&[&[1, 2], &[3, 4]], 0, (1, 2)),
            // A gap: the end, wherever it is.
            (&[&[1, 2, 4]], 0, (0, 2)),
            (&[&[1, 2], &[4, 5]], 0, (1, 0)),
            // A number going back: stale, the end.
            (&[&[5, 6, 2]], 4, (0, 2)),
            // The one jump: past what sled holds.
            (&[&[1, 2, 9, 10]], 8, (0, 4)),
            (&[&[1, 2], &[9]], 8, (1, 1)),
            (&[&[1, 2, 9]], 7, (0, 2)),
            (&[], 3, (0, 0)),
        ];
        for &(files, sled, want) in table {
            let end = find_end(&used(files), sled);
            assert_eq!((end.file, end.frames), want, "{files:?} sled at {sled}");
        }
    }
}
