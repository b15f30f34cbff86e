//! What a node knows of its cluster's stream, kept up to date message by
//! message: a standby follows the leader this way, and a new leader starts
//! writing from exactly this state.
//!
//! The stream holds the store's page log (`store/page.rs`, `store/log.rs`)
//! with one subject per slot: a page message replaces the slot's old page,
//! an empty message frees the slot, and a meta message (`meta.rs`) says
//! who leads and the id ceiling. Applying a page is what recovery does for
//! each sled page, one at a time: each image in it is its job's latest
//! (pages arrive in the order they were written), each tombstone a delete.
//! The engine replica gets every image and delete ([`Change`]); the page
//! contents stay here too, since a leader cleans the log by copying the
//! live images out of its oldest pages.

use bytes::Bytes;
use rustc_hash::FxHashMap;

use sprout_protocol::JobId;

use super::meta::Meta;
use super::subjects::Subject;
use crate::engine::JobImage;
use crate::store::{decode_job, page_entries, Corrupt, EntryKind, Log, Slot};

/// What the engine replica must do for a message.
#[derive(Debug, PartialEq, Eq)]
pub enum Change {
    /// The job's latest state (a new job or a changed one).
    Job(JobImage),
    Deleted(JobId),
}

#[derive(Default)]
pub struct Pages {
    pub log: Log,
    /// Every page the stream holds, by slot.
    pub by_slot: FxHashMap<Slot, Bytes>,
    /// The stream sequence of the last message applied.
    pub last_seq: u64,
    /// The last meta message.
    pub meta: Meta,
}

impl Pages {
    /// Applies the message at stream sequence `seq`.
    pub fn apply(
        &mut self,
        seq: u64,
        subject: Subject,
        payload: Bytes,
        changes: &mut Vec<Change>,
    ) -> Result<(), String> {
        self.last_seq = seq;
        let slot = match subject {
            Subject::Meta => {
                self.meta = Meta::decode(&payload)?;
                return Ok(());
            }
            Subject::Page(slot) => slot,
        };
        let bad = |e| format!("the page in slot {slot} (stream sequence {seq}): {e}");
        if let Some(old) = self.by_slot.remove(&slot) {
            let (old_seq, _) = page_entries(&old).map_err(bad)?;
            self.log.unfollow_page(old_seq);
        }
        if payload.is_empty() {
            return Ok(());
        }
        let (page_seq, entries) = page_entries(&payload).map_err(bad)?;
        self.log.follow_page(page_seq, slot, payload.len());
        for entry in entries {
            let entry = entry.map_err(bad)?;
            match entry.kind {
                EntryKind::Image(raw) => {
                    let image = decode_job(raw).map_err(bad)?;
                    self.log.place(page_seq, entry.id, entry.raw.len() as u32);
                    changes.push(Change::Job(image));
                }
                EntryKind::Tombstone => {
                    self.log.forget(entry.id);
                    changes.push(Change::Deleted(entry.id));
                }
                EntryKind::State(_) => return Err(bad(Corrupt("a job's state in a page"))),
            }
        }
        self.by_slot.insert(slot, payload);
        Ok(())
    }
}
