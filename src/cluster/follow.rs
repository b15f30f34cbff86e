//! What a node knows of its cluster's stream, kept up to date message by
//! message: a standby follows the leader this way, and a new leader starts
//! writing from exactly this state.
//!
//! The stream holds change messages (`changes.rs`: each group commit's
//! records) and the store's page log (`store/page.rs`, `store/log.rs`) as
//! snapshots, with one subject per slot: a page message replaces the slot's
//! old page, an empty message frees the slot, and a meta message
//! (`meta.rs`) says who leads and the last change the pages cover.
//! Applying a page is what recovery does for each sled page, one at a
//! time: each image in it is its job's latest (pages arrive in the order
//! they were written), each tombstone a delete. The engine replica gets
//! every record and every image and delete ([`Change`]); the pages stay
//! here too (in memory, or with `-b` on this node's disk: `page_copy.rs`),
//! since a leader cleans the log by copying the live images out of its
//! oldest pages and, with `-b`, bodies are read back from them; and so do
//! the records since the last snapshot, which a new leader packs into its
//! first.
//!
//! A reserved job's image carries its TTR deadline (the leader records
//! every reserve and touch in cluster mode), and the replica holds the job
//! until then ([`carry`]), so a job reserved on a leader that dies is not
//! handed out again before its TTR has run out.

use std::io;
use std::sync::Arc;

use bytes::Bytes;
use rustc_hash::{FxHashMap, FxHashSet};

use sprout_protocol::JobId;

use super::changes;
use super::cluster_flags::LocalCopy;
use super::meta::{Meta, MetaError};
use super::page_copy::PageCopy;
use super::subjects::Subject;
use crate::binlog_stats::BinlogStats;
use crate::engine::{JobImage, Record, Stored, Time};
use crate::store::{decode_job, pack, page_entries, Bodies, Corrupt, EntryKind, Log, Packed, Slot};

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
    #[error(
        "this node read change messages up to {last}, and the next it finds is {next}: \
         those between were purged before it read them (it fell too far behind the \
         leader, `purges.rs`); restart it to read the stream anew"
    )]
    Behind { last: u64, next: u64 },
    #[error("cannot keep this node's copy of the pages: {0}")]
    Copy(#[from] io::Error),
    #[error("change message {number} (stream sequence {seq}): {error}")]
    Change {
        number: u64,
        seq: u64,
        error: Corrupt,
    },
}

/// What the engine replica must do for a message.
#[derive(Debug, PartialEq, Eq)]
pub enum Change {
    /// The job's latest state (a new job or a changed one).
    Job(JobImage),
    /// The job's latest state but its body, which is the one it has.
    Update(JobImage),
    /// The job as the changes this node has read left it: taken only if
    /// the replica lacks the job.
    Unless(JobImage),
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
    /// Every page the stream holds (`page_copy.rs`).
    pub copy: PageCopy,
    /// A follower's: the sequence number of the page in each slot (a
    /// leader's pages are its log's, and a leader never follows again).
    seq_by_slot: FxHashMap<Slot, u64>,
    /// With `-b`, the bodies the engine leaves to the store: those of
    /// puts no page this node keeps holds yet are pinned in their cache.
    pub bodies: Option<Arc<Bodies>>,
    /// The stream sequence of the last message applied.
    pub last_seq: u64,
    /// The last meta message; its id ceiling raised by the change
    /// messages since.
    pub meta: Meta,
    /// The records of the change messages since the last snapshot, by
    /// change number: a new leader packs them into its first snapshot.
    pub pending: Vec<(u64, Vec<Record>)>,
    /// The last change message's number.
    pub last_change: u64,
}

impl Pages {
    /// A node's pages before it reads the stream: kept in memory, or with
    /// `local` (`-b`) on its disk, with the body store that reads them
    /// back (its cache's figures in `stats`).
    pub fn open(local: Option<&LocalCopy>, stats: Arc<BinlogStats>) -> io::Result<Pages> {
        let Some(local) = local else {
            return Ok(Pages::default());
        };
        let copy = PageCopy::open(&local.dir)?;
        let source = copy.source().expect("a copy on disk");
        let mut pages = Pages {
            copy,
            ..Pages::default()
        };
        let bodies = Bodies::over(&pages.log, source, local.body_cache, stats);
        pages.bodies = Some(Arc::new(bodies));
        Ok(pages)
    }

    /// A leader's snapshot: packs the records since the last one (the
    /// `clean` oldest pages cleaned too) and keeps the pages that makes;
    /// returns the messages that make the stream say the same, in order:
    /// the new pages, then an empty message for each slot freed and not
    /// refilled.
    pub fn snapshot(&mut self, clean: usize) -> io::Result<Vec<(Slot, Bytes)>> {
        let pending = std::mem::take(&mut self.pending);
        let records = pending.iter().flat_map(|(_, records)| records);
        // Readers of bodies look again if a read does not check out while
        // this runs (`store/directory.rs`).
        let dir = self.log.directory();
        dir.change(|| {
            let bodies = self.bodies.clone();
            let cached = |id| bodies.as_ref().and_then(|b| b.cache.peek(id));
            let copy = &self.copy;
            let packed = pack(&mut self.log, records.clone(), clean, cached, |slot| {
                copy.get(slot)
            })?;
            let messages = self.keep(packed)?;
            if let Some(bodies) = &self.bodies {
                bodies.absorbed(records);
            }
            Ok(messages)
        })
    }

    /// Keeps what `packed` (made from `self.log`) changes; returns the
    /// messages for it, as [`Pages::snapshot`] says.
    fn keep(&mut self, packed: Packed) -> io::Result<Vec<(Slot, Bytes)>> {
        let mut messages = Vec::with_capacity(packed.pages.len() + packed.freed.len());
        let written: FxHashSet<Slot> = packed.pages.iter().map(|(slot, _)| *slot).collect();
        for (slot, page) in packed.pages {
            messages.push((slot, Bytes::from(page)));
        }
        for slot in packed.freed.into_iter().filter(|s| !written.contains(s)) {
            messages.push((slot, Bytes::new()));
        }
        self.copy.write(&messages, false)?;
        Ok(messages)
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
                let meta = Meta::decode(&payload)?;
                self.check_next(meta.snap.max(self.last_change) + 1)?;
                self.pending.retain(|(n, _)| *n > meta.snap);
                let ids_below = self.meta.ids_below.max(meta.ids_below);
                self.meta = Meta { ids_below, ..meta };
                return Ok(());
            }
            // Only a claim's own leader reads its fences (`fence.rs`).
            Subject::Fence(_) => return Ok(()),
            Subject::Change(number) => return self.change(seq, number, &payload, changes),
            Subject::Page(slot) => slot,
        };
        let dir = self.log.directory();
        dir.change(|| self.page(seq, slot, payload, changes))
    }

    /// Applies the page message at stream sequence `seq` to `slot`: what
    /// recovery does for a sled page (see the module docs).
    fn page(
        &mut self,
        seq: u64,
        slot: Slot,
        payload: Bytes,
        changes: &mut Vec<Change>,
    ) -> Result<(), PageError> {
        let bad = |error| PageError::Corrupt { slot, seq, error };
        if let Some(old_seq) = self.seq_by_slot.remove(&slot) {
            self.log.unfollow_page(old_seq);
        }
        if payload.is_empty() {
            self.copy.write(&[(slot, payload)], false)?;
            return Ok(());
        }
        let (page_seq, entries) = page_entries(&payload).map_err(bad)?;
        if self.log.is_stray(page_seq) {
            return Err(bad(Corrupt("a page numbered far outside the others' run")));
        }
        self.log.follow_page(page_seq, slot, payload.len());
        // Once this node has read a change message, a page's image is
        // what the changes before it said of its job (`changes.rs`), unless
        // this node started cold and never had the job: the page that held
        // it before cleaning moved it may have been replaced before this
        // node got there.
        let replica_knows = self.last_change > 0;
        let mut paged = Vec::new();
        for entry in entries {
            let entry = entry.map_err(bad)?;
            match entry.kind {
                EntryKind::Image(raw) => {
                    let image = decode_job(raw).map_err(bad)?;
                    self.log.place(page_seq, entry.id, entry.raw.len() as u32);
                    paged.push((entry.id, true));
                    changes.push(match replica_knows {
                        true => Change::Unless(image),
                        false => Change::Job(image),
                    });
                }
                EntryKind::Tombstone => {
                    self.log.forget(entry.id);
                    paged.push((entry.id, false));
                    changes.push(Change::Deleted(entry.id));
                }
                EntryKind::State(_) => return Err(bad(Corrupt("a job's state in a page"))),
            }
        }
        self.seq_by_slot.insert(slot, page_seq);
        // Copied if kept in memory: the payload is a slice of the NATS
        // client's read buffer, and a page kept for long would keep the
        // whole buffer, change messages and all (1M jobs: 1.45x the
        // leader's RSS).
        self.copy.write(&[(slot, payload)], true)?;
        if let Some(bodies) = &self.bodies {
            bodies.paged(paged);
        }
        Ok(())
    }

    /// Whether change message `next` may come next: once a node has read
    /// one, it must read every later one (`purges.rs`). A node that starts
    /// cold may find its first anywhere, after the pages covering those
    /// before it.
    fn check_next(&self, next: u64) -> Result<(), PageError> {
        match self.last_change {
            0 => Ok(()),
            last if next == last + 1 => Ok(()),
            last => Err(PageError::Behind { last, next }),
        }
    }

    /// Applies change message `number`, at stream sequence `seq`.
    fn change(
        &mut self,
        seq: u64,
        number: u64,
        payload: &[u8],
        changes: &mut Vec<Change>,
    ) -> Result<(), PageError> {
        self.check_next(number)?;
        let bad = |error| PageError::Change { number, seq, error };
        let change = changes::decode(payload).map_err(bad)?;
        if change.number != number {
            return Err(bad(Corrupt("a change message under another's subject")));
        }
        self.meta.ids_below = self.meta.ids_below.max(change.ids_below);
        if let Some(bodies) = &self.bodies {
            // A put's body is this node's only until a page holds it; a
            // job deleted first never gets there.
            bodies.submitted(&change.records);
            let deleted = change.records.iter().filter_map(|record| match record {
                Record::Delete(id) => Some((*id, false)),
                _ => None,
            });
            bodies.paged(deleted);
        }
        changes.extend(change.records.iter().map(|record| match record {
            Record::Put(image) => Change::Job(image.clone()),
            Record::Update(image) => Change::Update(image.clone()),
            Record::Delete(id) => Change::Deleted(*id),
        }));
        self.pending.push((number, change.records));
        self.last_change = number;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
