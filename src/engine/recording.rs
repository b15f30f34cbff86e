//! Journaling a job's change for the store: its put, its new image, and
//! the journal file each job's latest record went to (`stats-job`'s
//! `file`). The records themselves are `records.rs`.

use bytes::Bytes;

use super::admission::Change;
use super::machine::Engine;
use super::records::{JobImage, Record};
use super::table::JobSlot;

impl Engine {
    /// Journals job `slot`'s new state if only a new leader needs it (a
    /// reserve, a touch, a job a closed connection gave back): in cluster
    /// mode (see [`Engine::set_cluster`]), and if there is room.
    pub(super) fn record_for_cluster(&mut self, slot: JobSlot) {
        if self.cluster.is_some() && self.room_to_update(slot) {
            self.record_update(slot);
        }
    }

    /// Journals a new job `slot` put with `body`: its put (a no-op unless
    /// journaling is on). The record shares the put's `body` rather than
    /// copying the engine's: with `-b` the engine may not hold it at all.
    pub(super) fn record_put(&mut self, slot: JobSlot, body: &Bytes) {
        if !self.config.journal {
            return;
        }
        let image = self.image(slot, body.clone());
        let body = self.jobs.body_len(slot);
        let change = match &image.ext {
            None => Change::Put {
                body,
                tube: image.tube.as_bytes().len(),
            },
            Some(ext) => self.put_change(self.jobs.tube(slot), body, Some(&ext.tags)),
        };
        self.room.charge(change);
        self.journal.push(Record::Put(image));
        self.written_to_file(slot);
    }

    /// Journals job `slot`'s new state: an update, its whole image again
    /// but its body (a no-op unless journaling is on).
    pub(super) fn record_update(&mut self, slot: JobSlot) {
        if !self.config.journal {
            return;
        }
        let image = self.image(slot, Bytes::new());
        let mut tube = image.tube.as_bytes().len();
        if image.ext.is_some() {
            tube += self.extras_len(slot);
        }
        self.room.charge(Change::Update { tube });
        self.journal.push(Record::Update(image));
        self.written_to_file(slot);
    }

    /// Job `slot` as its records hold it, tags included, with `body`: a
    /// put's, or none for an update (see [`Record::Update`]).
    pub(super) fn image(&self, slot: JobSlot, body: Bytes) -> JobImage {
        let profile = self.jobs.profile(slot);
        let mut image = JobImage::of(
            &self.jobs[slot],
            profile,
            self.jobs.counts(slot),
            body,
            &self.tubes[profile.tube].name,
        );
        image.ext = self.extras(slot);
        image
    }

    /// Job `slot`'s latest record goes to the current journal file.
    pub(super) fn written_to_file(&mut self, slot: JobSlot) {
        self.jobs.set_file(slot, self.file);
    }

    /// Whether the store has room to record a new state of job `slot`.
    pub(super) fn room_to_update(&self, slot: JobSlot) -> bool {
        let mut tube = self.tubes[self.jobs.tube(slot)].name.as_bytes().len();
        if self.jobs[slot].tagged() {
            tube += self.extras_len(slot);
        }
        self.room.admits(Change::Update { tube })
    }

    /// The journal file holding job `slot`'s latest record (`stats-job`'s
    /// `file`): the one it was written to, or, once the store has taken
    /// that file in and removed it, the oldest one still kept (as the
    /// store last said: `set_store`). 0 without a journal.
    pub(super) fn file_of(&self, slot: JobSlot) -> u64 {
        if !self.config.journal {
            return 0;
        }
        u64::from(self.jobs.file(slot)).max(self.oldest_file)
    }
}
