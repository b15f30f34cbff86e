//! The journal's frames laid over sled's jobs: the last word on each job
//! they touch.

use std::io;

use bytes::Bytes;
use rustc_hash::FxHashMap;
use sprout_protocol::JobId;

use super::damage::Damage;
use super::files::Journal;
use crate::engine::{JobImage, Record};
use crate::store::corrupt::Corrupt;
use crate::store::entry::{Entry, Kind};
use crate::store::frame;
use crate::store::log::Live;
use crate::store::record::{self, Decoder};
use crate::store::slots::Slot;

/// What sled holds: its commit and the live job images in its pages,
/// sorted by id (the order they are restored in, and how a journal frame
/// finds the image it lays a state over).
pub struct Sled<'p> {
    pub commit: u64,
    pub pages: &'p [(Slot, Bytes)],
    pub images: Vec<Live<'p>>,
}

impl Sled<'_> {
    /// sled's image of job `id`, decoded.
    pub fn image(&self, id: JobId, decoder: &mut Decoder) -> Result<Option<JobImage>, Corrupt> {
        let Ok(at) = self.images.binary_search_by_key(&id, |image| image.id) else {
            return Ok(None);
        };
        self.decode(&self.images[at], decoder).map(Some)
    }

    pub fn decode(&self, image: &Live, decoder: &mut Decoder) -> Result<JobImage, Corrupt> {
        decoder.job(&self.pages[image.page].1, image.bytes)
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
                let old = match self.jobs.get(&entry.id) {
                    Some(old) => old.clone(),
                    None => sled.image(entry.id, decoder)?,
                };
                match old {
                    Some(old) => Some(JobImage {
                        body: old.body,
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
