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
//!
//! A reserved job's image carries its TTR deadline (the leader records
//! every reserve and touch in cluster mode), and the replica holds the job
//! until then ([`carry`]), so a job reserved on a leader that dies is not
//! handed out again before its TTR has run out.

use bytes::Bytes;
use rustc_hash::{FxHashMap, FxHashSet};

use sprout_protocol::JobId;

use super::meta::{Meta, MetaError};
use super::subjects::Subject;
use crate::engine::{JobImage, Stored, Time};
use crate::store::{decode_job, page_entries, Corrupt, EntryKind, Log, Packed, Slot};

/// A stream message this node cannot apply.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    #[error(transparent)]
    Meta(#[from] MetaError),
    #[error("the page in slot {slot} (stream sequence {seq}): {error}")]
    Corrupt {
        slot: Slot,
        seq: u64,
        error: Corrupt,
    },
}

/// What the engine replica must do for a message.
#[derive(Debug, PartialEq, Eq)]
pub enum Change {
    /// The job's latest state (a new job or a changed one).
    Job(JobImage),
    Deleted(JobId),
}

/// A reservation as a standby takes it over at `now` (its clock): held
/// until the leader's absolute deadline, but never for more than one TTR
/// from `now`.
///
/// The deadline is the leader's wall clock, as a delayed job's is, so the
/// nodes' clocks must agree (NTP) for it to mean the same moment here.
/// The cap bounds what a disagreement can do: a standby whose clock is
/// behind would otherwise hold the job for the skew on top of its TTR
/// (and one far behind, for ever); with the cap it holds it for at most a
/// TTR after the record arrived, i.e. about the leader's deadline plus the
/// replication lag. A standby whose clock is ahead gives the job back
/// early by the skew; its worker's connection is gone with the old leader
/// anyway, so nothing but the TTR expiry can end the reservation.
///
/// A deadline of 0 is a record written before reservations carried their
/// deadline (sprout before TTR carry-over, e.g. a leader of a rolling
/// upgrade): its holder's deadline is unknown, so it is held a whole TTR
/// from `now`, never handed out earlier than a known one would be.
pub fn carry(image: &mut JobImage, now: Time) {
    if let Stored::Reserved(until) = image.state {
        let longest = now.saturating_add(u64::from(image.ttr) * 1_000_000);
        let until = if until == 0 {
            longest
        } else {
            until.min(longest)
        };
        image.state = Stored::Reserved(until);
    }
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
    /// A leader's side: keeps what `packed` (made from `self.log`) changes
    /// and returns the messages that make the stream say the same, in
    /// order: the new pages, then an empty message for each slot freed and
    /// not refilled.
    pub fn keep(&mut self, packed: Packed) -> Vec<(Slot, Bytes)> {
        let mut messages = Vec::with_capacity(packed.pages.len() + packed.freed.len());
        let written: FxHashSet<Slot> = packed.pages.iter().map(|(slot, _)| *slot).collect();
        for (slot, page) in packed.pages {
            let page = Bytes::from(page);
            self.by_slot.insert(slot, page.clone());
            messages.push((slot, page));
        }
        for slot in packed.freed.into_iter().filter(|s| !written.contains(s)) {
            self.by_slot.remove(&slot);
            messages.push((slot, Bytes::new()));
        }
        messages
    }

    /// Applies the message at stream sequence `seq`.
    pub fn apply(
        &mut self,
        seq: u64,
        subject: Subject,
        payload: Bytes,
        changes: &mut Vec<Change>,
    ) -> Result<(), PageError> {
        self.last_seq = seq;
        let slot = match subject {
            Subject::Meta => {
                self.meta = Meta::decode(&payload)?;
                return Ok(());
            }
            // Only a claim's own leader reads its fences (`fence.rs`).
            Subject::Fence(_) => return Ok(()),
            Subject::Page(slot) => slot,
        };
        let bad = |error| PageError::Corrupt { slot, seq, error };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Record;
    use crate::store::{pack, test_image};
    use std::collections::BTreeMap;

    /// Applies `messages` as stream messages from sequence `seq` on, and
    /// what they change to `jobs` (the engine replica's view).
    fn follow(
        f: &mut Pages,
        seq: &mut u64,
        messages: Vec<(Slot, Bytes)>,
        jobs: &mut BTreeMap<JobId, JobImage>,
    ) {
        let mut changes = Vec::new();
        for (slot, page) in messages {
            *seq += 1;
            f.apply(*seq, Subject::Page(slot), page, &mut changes)
                .unwrap();
            for change in changes.drain(..) {
                match change {
                    Change::Job(image) => _ = jobs.insert(image.id, image),
                    Change::Deleted(id) => _ = jobs.remove(&id),
                }
            }
        }
    }

    #[test]
    fn a_carried_reservation_lasts_at_most_a_ttr_from_its_arrival() {
        const S: Time = 1_000_000;
        let mut image = test_image(1, 0);
        image.ttr = 5;
        for (until, now, held) in [
            // Clocks agree: the leader's deadline.
            (105 * S, 101 * S, 105 * S),
            // This clock behind by 1000 s: a TTR from now, not 1005 s.
            (1105 * S, 101 * S, 106 * S),
            // Ahead: the leader's deadline, already passed here.
            (105 * S, 200 * S, 105 * S),
            // Written before deadlines were recorded: a TTR from now.
            (0, 101 * S, 106 * S),
        ] {
            image.state = Stored::Reserved(until);
            carry(&mut image, now);
            assert_eq!(image.state, Stored::Reserved(held));
        }
        image.state = Stored::Delayed(7);
        carry(&mut image, 0);
        assert_eq!(image.state, Stored::Delayed(7));
    }

    #[test]
    fn a_standby_following_the_leaders_batches_holds_its_jobs_and_pages() {
        let mut leader = Pages::default();
        let mut standby = Pages::default();
        let mut jobs = BTreeMap::new();
        let mut seq = 0;
        let mut batches: Vec<Vec<Record>> = Vec::new();
        // Big jobs, then most of them deleted one batch at a time: the log
        // goes over its bound, and cleaning moves images and frees slots.
        batches.extend((1..=200).map(|id| vec![Record::Put(test_image(id, 10_000))]));
        batches.extend((3..=200).map(|id| vec![Record::Delete(id)]));
        let mut changed = test_image(2, 10_000);
        changed.pri = 7;
        // An update carries no body: the leader's pack takes it from the
        // job's page, and the standby gets it whole.
        let update = JobImage {
            body: Bytes::new(),
            ..changed.clone()
        };
        batches.push(vec![Record::Update(update)]);
        batches.extend((0..20).map(|_| Vec::new()));
        let mut freed = 0;
        for records in &batches {
            let Pages { log, by_slot, .. } = &mut leader;
            let packed = pack(
                log,
                records,
                200,
                |_| None,
                |slot| Ok(by_slot.get(&slot).map(|p| p.to_vec())),
            )
            .unwrap();
            freed += packed.freed.len();
            let messages = leader.keep(packed);
            follow(&mut standby, &mut seq, messages, &mut jobs);
        }
        assert!(freed > 50, "only {freed} slots freed");
        assert_eq!(jobs.keys().copied().collect::<Vec<_>>(), [1, 2]);
        assert_eq!(jobs[&2], changed);
        assert_eq!(standby.by_slot, leader.by_slot);
        assert_eq!(standby.log.sizes(), leader.log.sizes());
        assert_eq!(standby.last_seq, seq);

        let meta = Meta {
            epoch: 3,
            ids_below: 201,
            node: "n".into(),
            addr: "a:1".into(),
        };
        let mut changes = Vec::new();
        standby
            .apply(seq + 1, Subject::Meta, meta.encode().into(), &mut changes)
            .unwrap();
        assert_eq!((standby.meta.clone(), changes.len()), (meta, 0));
        let junk = Bytes::from_static(b"\x09not a page");
        assert!(standby
            .apply(seq + 2, Subject::Page(0), junk, &mut changes)
            .is_err());
    }
}
