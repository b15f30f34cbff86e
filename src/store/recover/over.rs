//! The journal's frames laid over sled's jobs: the last word on each job
//! they touch.

use std::io;
use std::sync::Arc;

use bytes::Bytes;
use rustc_hash::FxHashMap;
use sprout_protocol::JobId;

use super::damage::Damage;
use super::files::Journal;
use crate::engine::{JobImage, Record};
use crate::store::body_read;
use crate::store::corrupt::Corrupt;
use crate::store::directory::Directory;
use crate::store::entry::{Entry, Kind};
use crate::store::frame;
use crate::store::page;
use crate::store::record::{self, Decoder};

/// What sled holds: its commit, and where each job's image is (the log
/// recovery's first pass rebuilt), to read the body a journal frame's
/// state goes with.
pub struct Sled<'a> {
    pub commit: u64,
    pub db: &'a ::sled::Db,
    pub dir: Arc<Directory>,
}

impl Sled<'_> {
    /// The body of job `id`'s image in sled, if it has one: a copy, not a
    /// slice that would keep its page.
    pub fn body(&self, id: JobId) -> Result<Option<Bytes>, Corrupt> {
        let Some(found) = self.dir.find(id) else {
            return Ok(None);
        };
        let value = match self.db.get(page::page_key(found.slot)) {
            Ok(Some(value)) => value,
            Ok(None) => return Err(Corrupt("a job's page is missing")),
            Err(_) => return Err(Corrupt("sled could not read a job's page")),
        };
        body_read::body_in(&value, found, id)
            .map(Some)
            .map_err(|_| Corrupt("a job's page does not hold its image"))
    }
}
/// The journal's last word on each job it touched (`None`: deleted), and
/// how far it goes.
#[derive(Default)]
pub struct Over {
    pub jobs: FxHashMap<JobId, Option<JobImage>>,
    pub last_commit: Option<u64>,
    pub last_ceiling: Option<JobId>,
    pub replayed: usize,
    pub skipped: usize,
}

impl Over {
    /// Lays the frames past sled's commit over its jobs, and those it
    /// holds already too unless it is known whole (`whole.rs`): replaying
    /// is idempotent (images and tombstones, the last word wins), and after
    /// a failed write sled 0.34 can miss pages written before its commit
    /// key. The frames touch few jobs next to all sled holds: their last
    /// word is kept apart, and laid over sled's jobs as those are restored.
    pub fn lay(
        journal: &Journal,
        sled: &Sled,
        whole: bool,
        damage: Damage,
        decoder: &mut Decoder,
    ) -> io::Result<Over> {
        let mut over = Over::default();
        for (bytes, &(commit, ids_below, at, len)) in journal.frames() {
            over.last_commit = Some(commit);
            over.last_ceiling = Some(ids_below);
            if whole && commit <= sled.commit {
                continue;
            }
            over.replayed += 1;
            let frame = frame::read(&bytes[at..at + len]).expect("read before");
            for entry in frame.entries {
                let damaged = |e: Corrupt| format!("journal frame {commit}: {e}");
                // A damaged entry ends its frame: what follows cannot be
                // found.
                let entry = match entry {
                    Ok(entry) => entry,
                    Err(e) => {
                        damage.refuse(damaged(e))?;
                        over.skipped += 1;
                        break;
                    }
                };
                if let Err(e) = over.lay_entry(entry, commit, bytes, sled, decoder) {
                    damage.refuse(damaged(e))?;
                    over.skipped += 1;
                }
            }
        }
        Ok(over)
    }

    /// What frame `commit`'s `entry` says of its job.
    pub fn lay_entry(
        &mut self,
        entry: Entry,
        commit: u64,
        bytes: &Bytes,
        sled: &Sled,
        decoder: &mut Decoder,
    ) -> Result<(), Corrupt> {
        let image = match entry.kind {
            Kind::Image(value) => Some(decoder.job(bytes, value)?),
            Kind::State(value) => {
                let body = match self.jobs.get(&entry.id) {
                    Some(old) => old.as_ref().map(|old| old.body.clone()),
                    None => sled.body(entry.id)?,
                };
                match body {
                    Some(body) => Some(JobImage {
                        body,
                        ..record::decode_state(value)?
                    }),
                    // sled is past this frame and the job was deleted
                    // since: a later frame says so.
                    None if commit <= sled.commit => {
                        self.jobs.entry(entry.id).or_insert(None);
                        return Ok(());
                    }
                    None => return Err(Corrupt("a state for a job that is not stored")),
                }
            }
            Kind::Tombstone => None,
        };
        self.jobs.insert(entry.id, image);
        Ok(())
    }

    /// The journal's tail, for sled to take in first: each touched job's
    /// final image or delete, as of the newer of the two commits.
    pub fn tail(&self, sled_commit: u64) -> Option<(u64, Vec<Record>)> {
        let commit = self.last_commit.filter(|_| !self.jobs.is_empty())?;
        let mut ids: Vec<JobId> = self.jobs.keys().copied().collect();
        ids.sort_unstable();
        let records = ids
            .into_iter()
            .map(|id| match &self.jobs[&id] {
                Some(image) => Record::Put(image.clone()),
                None => Record::Delete(id),
            })
            .collect();
        Some((commit.max(sled_commit), records))
    }
}
