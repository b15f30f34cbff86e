//! The store in cluster mode: every group commit goes to the stream as
//! change messages (`changes.rs`), and a reply waits until the stream has
//! acknowledged them (a quorum of the NATS servers holds them, synced under
//! `sync_interval: always`).
//!
//! The seam is the single-node store's (`store/mod.rs`): commands queue
//! their records under the engine lock ([`ClusterStore::submit`]); the
//! writer task takes everything queued and sends it as one batch, whose
//! change messages carry the id ceiling (it runs a block ahead of the ids
//! handed out, `store/ids.rs`). While one batch is on its way the next one
//! gathers, so the group grows with the load. Every so often (once the
//! records since the last snapshot would fill [`SNAP_BYTES`] of pages, or
//! after an idle second) the writer packs those records into pages exactly
//! as the absorber packs sled's (`store/pack.rs`) and sends the pages and
//! the slots cleaning freed (empty messages) as a snapshot, ending with a
//! meta message (`meta.rs`) naming the last change it covers; the changes
//! it covers are purged later (`purges.rs`). A batch the stream refuses
//! means this node no longer leads (or the stream is failing): the node
//! stops at once (`node.rs`), and nothing it did not get acknowledged was
//! answered.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::stream::{RawMessageErrorKind, Stream};
use async_nats::jetstream::Context;
use async_nats::Client;
use bytes::Bytes;
use sprout_protocol::JobId;

use super::changes;
use super::cluster_store::ClusterStore;
use super::fence::{Fences, FENCES};
use super::follow::Pages;
use super::meta::Meta;
use super::publish::{self, Chain, Refusal, Sent, MAX_BATCH};
use super::purges::Purges;
use super::subjects::Subjects;
use crate::engine::Record;
use crate::store::{raise_id_ceiling, Seq, PAGE_BYTES};

/// Records since the last snapshot, in page bytes, that make the next.
const SNAP_BYTES: usize = 512 << 10;
/// A snapshot of records of at most this many page bytes cleans the log
/// too, and is still one atomic batch ([`MAX_BATCH`]; asserted below): its
/// records and the live images moved out of the [`CLEAN_PAGES`] cleaned
/// fill pages at least half full on average (`store/page.rs`), beside an
/// empty message per slot freed and the meta message. So a crash cannot
/// leave a slot refilled without the images moved out of it. Bigger
/// snapshots are sent in several batches, uncleaned.
const CLEAN_WITHIN: usize = 1 << 20;
/// Oldest pages cleaned per snapshot at most.
const CLEAN_PAGES: usize = 100;
const _: () = {
    let moved = CLEAN_PAGES * PAGE_BYTES;
    let pages = 2 * (CLEAN_WITHIN + moved) / PAGE_BYTES + 1;
    // The meta message beside them.
    assert!(pages + CLEAN_PAGES < MAX_BATCH);
};
/// Batches on their way to the stream at once (at most [`FENCES`]). One:
/// the NATS servers' CPU follows the batches, not their size, so the
/// fewer and fuller the better, and on this 2-core machine one batch at
/// a time gathered more jobs a second too (pingpong 25+25: 1.11x the jobs
/// a second of two in flight and 0.8x the NATS CPU a job; 8, the default
/// until 2026-12-05, cost 1.3x the NATS CPU of one; put, 50 conns: the
/// same; benches/RESULTS.md "session 21").
const IN_FLIGHT: usize = 1;

/// [`IN_FLIGHT`], or `SPROUT_CLUSTER_IN_FLIGHT` (a benchmark knob, 1 to
/// [`FENCES`]).
fn in_flight() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("SPROUT_CLUSTER_IN_FLIGHT")
            .ok()
            .and_then(|n| n.parse().ok())
            .filter(|n| (1..=FENCES as usize).contains(n))
            .unwrap_or(IN_FLIGHT)
    })
}
/// How long batches are sent again while the stream cannot take them:
/// longer than NATS's own elections (5–9 s measured).
const RETRY_FOR: Duration = Duration::from_secs(30);
const RETRY_PAUSE: Duration = Duration::from_millis(250);
/// How often an idle writer cleans the log by itself.
const IDLE: Duration = Duration::from_secs(1);

/// Why the leader's writer stopped: this node no longer leads, or the
/// stream is failing.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("cannot pack a batch: {0}")]
    Pack(#[source] std::io::Error),
    /// The stream refused a batch for good.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// A batch was fenced off: another node claimed the stream since.
    #[error(
        "node {node} claimed the stream at epoch {epoch}: this node no longer leads ({refusal})"
    )]
    Deposed {
        node: String,
        epoch: u64,
        refusal: Refusal,
    },
    #[error("the stream took no batch for {retry_for:?}: {0}", retry_for = RETRY_FOR)]
    Stalled(Refusal),
}

/// A batch on its way, and what its acknowledgment allows.
struct Flying {
    /// `None` while it waits to be sent again.
    sent: Option<Sent>,
    id: String,
    messages: Vec<(String, Bytes)>,
    /// Where it must land, and the stream sequence it ends at.
    chain: Chain,
    end: u64,
    /// The last submission it holds (in its last part).
    last: Option<Seq>,
    /// The id ceiling its change messages carry.
    ids_below: JobId,
    /// A snapshot's last part: the stream sequence the snapshot starts
    /// at, below which the change messages it covers are.
    snapshot: Option<u64>,
}

impl Flying {
    async fn settled(&mut self) -> Result<(), Refusal> {
        match &mut self.sent {
            Some(sent) => sent.settled().await,
            None => Err(Refusal::Passing(format!("batch {} not sent", self.id))),
        }
    }
}

/// The leader's writer: owns the page log from the claim on.
pub struct Writer {
    pub store: Arc<ClusterStore>,
    pub client: Client,
    pub js: Context,
    pub stream: Stream,
    pub subjects: Subjects,
    pub pages: Pages,
    /// This leader's meta message (its epoch, address, id ceiling).
    pub meta: Meta,
    /// What this leader's claim wrote on the fence subjects.
    pub fences: Fences,
    /// Batches sent fenced on a fence subject so far (each takes the
    /// next).
    pub fenced: u64,
    /// The largest change message sent: under the server's largest.
    pub limit: usize,
    /// The page bytes of the records since the last snapshot
    /// (`self.pages.pending`).
    pub pending_bytes: usize,
    pub purges: Purges,
}

impl Writer {
    /// Starts taking submissions (the claim is made); the stream now ends
    /// at `self.pages.last_seq`.
    pub fn start(&self) {
        self.store
            .progress
            .send_modify(|p| p.ids_below = self.meta.ids_below);
        self.store.leading.store(true, Ordering::Release);
    }

    /// Writes until a batch fails; returns why. Up to [`IN_FLIGHT`]
    /// batches are on their way at once, each chained on the one before.
    pub async fn run(mut self) -> WriteError {
        let mut flying: VecDeque<Flying> = VecDeque::new();
        let mut batches = 0u64;
        let mut idle = false;
        // Whether the last snapshot left fewer bytes in the log.
        let mut freed = true;
        // Since when, and how often, the oldest batch has been sent again.
        let mut retry: Option<(Instant, u32)> = None;
        loop {
            if flying.len() < in_flight() {
                // The queue's lock, then the directory's (`page_bytes`).
                let log = &self.pages.log;
                let (groups, bytes) = match self.pending_bytes >= SNAP_BYTES {
                    true => Default::default(),
                    false => self.store.take(|records| log.page_bytes(records)),
                };
                let due = Due {
                    bytes: self.pending_bytes,
                    queued: !groups.is_empty(),
                    idle,
                    waiting: !self.pages.pending.is_empty(),
                    over: log.over_bound(),
                    freed,
                };
                let snapshot = due.snapshot();
                if snapshot || !groups.is_empty() {
                    idle = false;
                    batches += 1;
                    let stored = self.pages.log.sizes().0;
                    let sent = match snapshot {
                        true => self.snapshot(batches, &mut flying).await,
                        false => self.send(groups, bytes, batches, &mut flying).await,
                    };
                    if snapshot {
                        freed = self.pages.log.sizes().0 < stored;
                    }
                    if let Err(e) = sent {
                        return e;
                    }
                    continue;
                }
            }
            if let Some(below) = self.purges.due(Instant::now()) {
                self.purge(below);
            }
            let room = flying.len() < in_flight();
            let Some(oldest) = flying.front_mut() else {
                let woken = tokio::time::timeout(IDLE, self.store.wake.notified()).await;
                idle = woken.is_err();
                continue;
            };
            tokio::select! {
                settled = oldest.settled() => {
                    match settled {
                        Ok(()) => {}
                        Err(refusal @ Refusal::Fenced(_)) => match self.stored(oldest.end, &oldest.id, &oldest.messages).await {
                            Stored::Yes => {}
                            Stored::No => return refusal.into(),
                            Stored::Claimed(Meta { node, epoch, .. }) => {
                                return WriteError::Deposed { node, epoch, refusal }
                            }
                        },
                        Err(passing @ Refusal::Passing(_)) => {
                            let (since, attempt) = retry.get_or_insert_with(|| {
                                tracing::warn!("{passing}: sending again until the stream takes it");
                                (Instant::now(), 0)
                            });
                            if since.elapsed() > RETRY_FOR {
                                return WriteError::Stalled(passing);
                            }
                            *attempt += 1;
                            let attempt = *attempt;
                            tokio::time::sleep(RETRY_PAUSE).await;
                            if let Err(why) = self.resend(&mut flying, attempt).await {
                                return why;
                            }
                            continue;
                        }
                        Err(failed @ Refusal::Failed(_)) => return failed.into(),
                    }
                    if let Some((since, _)) = retry.take() {
                        tracing::warn!("the stream takes batches again after {:?}", since.elapsed());
                    }
                    let done = flying.pop_front().expect("the oldest batch");
                    if let Some(from) = done.snapshot {
                        self.purges.snapshot(Instant::now(), from);
                    }
                    if let Some(last) = done.last {
                        self.store.queue().acknowledged(last);
                        self.store.progress.send_modify(|p| {
                            p.written = last;
                            p.synced = last;
                            p.ids_below = done.ids_below;
                        });
                    }
                }
                _ = self.store.wake.notified(), if room => {}
            }
        }
    }

    /// Sends `groups`, whose pages would hold about `bytes`, as change
    /// messages; their records wait for the next snapshot.
    async fn send(
        &mut self,
        groups: Vec<(Seq, Vec<Record>)>,
        bytes: usize,
        number: u64,
        flying: &mut VecDeque<Flying>,
    ) -> Result<(), WriteError> {
        let records = || groups.iter().flat_map(|(_, records)| records);
        let highest = records()
            .filter_map(|r| match r {
                Record::Put(image) => Some(image.id),
                _ => None,
            })
            .max();
        if let Some(ceiling) = highest.and_then(|h| raise_id_ceiling(self.meta.ids_below, h)) {
            self.meta.ids_below = ceiling;
        }
        let first = self.pages.last_change + 1;
        let encoded = changes::encode(records(), first, self.meta.ids_below, self.limit);
        self.pages.last_change += encoded.len() as u64;
        let messages: Vec<(String, Bytes)> = encoded
            .into_iter()
            .map(|(n, change)| (self.subjects.change(n), change))
            .collect();
        self.purges
            .changed(messages.iter().map(|(_, m)| m.len()).sum());
        let last = groups.last().map(|(seq, _)| *seq);
        let records = groups.into_iter().flat_map(|(_, records)| records);
        let pending = (self.pages.last_change, records.collect());
        self.pages.pending.push(pending);
        self.pending_bytes += bytes;
        self.dispatch(messages, number, last, None, flying).await
    }

    /// Packs the records since the last snapshot into pages, cleaning the
    /// log if the snapshot stays one batch ([`CLEAN_WITHIN`]), and sends
    /// them, then a meta message naming the last change they cover (see
    /// the module docs).
    async fn snapshot(
        &mut self,
        number: u64,
        flying: &mut VecDeque<Flying>,
    ) -> Result<(), WriteError> {
        let bytes = std::mem::take(&mut self.pending_bytes);
        let clean = if bytes <= CLEAN_WITHIN {
            CLEAN_PAGES
        } else {
            0
        };
        let mut messages: Vec<(String, Bytes)> = self
            .pages
            .snapshot(clean)
            .map_err(WriteError::Pack)?
            .into_iter()
            .map(|(slot, page)| (self.subjects.page(slot), page))
            .collect();
        self.meta.snap = self.pages.last_change;
        messages.push((self.subjects.meta(), Bytes::from(self.meta.encode())));
        let from = self.pages.last_seq + 1;
        self.dispatch(messages, number, None, Some(from), flying)
            .await
    }

    /// Sends `messages` as batch `number`, in parts of at most
    /// [`MAX_BATCH`], each chained on the one before; the last part
    /// carries `last` (the last submission in them) and `snapshot`.
    async fn dispatch(
        &mut self,
        messages: Vec<(String, Bytes)>,
        number: u64,
        last: Option<Seq>,
        snapshot: Option<u64>,
        flying: &mut VecDeque<Flying>,
    ) -> Result<(), WriteError> {
        let parts = messages.len().div_ceil(MAX_BATCH);
        for (part, chunk) in messages.chunks(MAX_BATCH).enumerate() {
            let id = format!("e{}b{number}p{part}", self.meta.epoch);
            // Chained on where a batch in flight will end, a batch needs
            // the fence subject too (`fence.rs`); with none in flight, the
            // stream is known to end where it is chained.
            let fence = (!flying.is_empty()).then(|| {
                self.fenced += 1;
                self.fences.of(&self.subjects, self.fenced - 1)
            });
            let chain = Chain {
                after: self.pages.last_seq,
                fence,
            };
            let end = chain.after + chunk.len() as u64;
            let sent = match publish::send(&self.client, &self.js, id.clone(), chunk, &chain).await
            {
                Ok(sent) => Some(sent),
                // Sent again with the others once the stream is back.
                Err(Refusal::Passing(_)) => None,
                Err(refusal) => return Err(refusal.into()),
            };
            self.pages.last_seq = end;
            let is_last = part + 1 == parts;
            flying.push_back(Flying {
                sent,
                id,
                messages: chunk.to_vec(),
                chain,
                end,
                last: last.filter(|_| is_last),
                ids_below: self.meta.ids_below,
                snapshot: snapshot.filter(|_| is_last),
            });
        }
        Ok(())
    }

    /// Purges the change messages below stream sequence `below`, which a
    /// snapshot covers, without waiting: a purge is not fenced, but all it
    /// removes is in the snapshot, so even a deposed leader's loses
    /// nothing.
    fn purge(&self, below: u64) {
        let (stream, filter) = (self.stream.clone(), self.subjects.changes());
        tokio::spawn(async move {
            let purged = stream.purge().filter(filter).sequence(below).await;
            if let Err(e) = purged {
                tracing::warn!("cannot purge the change messages below {below}: {e}");
            }
        });
    }

    /// The stream could not take the oldest batch now (an election, a lost
    /// connection): every batch on its way is sent again, in order and
    /// chained as before (`attempt` numbers the tries in their ids). Those
    /// the stream cannot take yet wait for the next try; replies wait
    /// meanwhile. A batch that was stored after all is refused as fenced,
    /// and [`Writer::stored`] tells.
    async fn resend(
        &mut self,
        flying: &mut VecDeque<Flying>,
        attempt: u32,
    ) -> Result<(), WriteError> {
        for f in flying.iter_mut() {
            let id = format!("{}r{attempt}", f.id);
            match publish::send(&self.client, &self.js, id, &f.messages, &f.chain).await {
                Ok(sent) => f.sent = Some(sent),
                Err(Refusal::Passing(_)) => f.sent = None,
                Err(refusal) => return Err(refusal.into()),
            }
        }
        Ok(())
    }

    /// Whether batch `id` (its `messages`), refused as fenced and ending at
    /// stream sequence `end`, is in the stream already (sent again after
    /// its first answer was lost): the stream ends at or past `end`, and
    /// then still holds this leader's claim as its latest meta message.
    /// Read in that order: a claim is fenced like any batch and only ever
    /// replaced by a newer one, and after it only this leader's batches
    /// get in (`fence.rs`), so if this leader's is the latest after the
    /// stream's end was read, everything up to that end was written in
    /// this leader's epoch, by this leader. And, not to rest a reply on
    /// that reasoning alone, the message at the batch's end is read back
    /// ([`holds_last`]).
    async fn stored(&self, end: u64, id: &str, messages: &[(String, Bytes)]) -> Stored {
        let last = match self.stream.get_info().await {
            Ok(info) => info.state.last_sequence,
            Err(e) => {
                tracing::warn!("cannot read where the stream ends: {e}");
                return Stored::No;
            }
        };
        let meta = self.subjects.meta();
        let latest = match self.stream.get_last_raw_message_by_subject(&meta).await {
            Ok(m) => Meta::decode(&m.payload),
            Err(e) => {
                tracing::warn!("cannot read the stream's meta message: {e}");
                return Stored::No;
            }
        };
        match latest.ok() {
            Some(m) if (m.epoch, &m.node) != (self.meta.epoch, &self.meta.node) => {
                Stored::Claimed(m)
            }
            Some(_) if last >= end => self.read_back(end, id, messages).await,
            _ => Stored::No,
        }
    }

    /// Whether the message at stream sequence `end` is the last of batch
    /// `id`'s `messages` (see [`holds_last`]).
    async fn read_back(&self, end: u64, id: &str, messages: &[(String, Bytes)]) -> Stored {
        let found = match self.stream.get_raw_message(end).await {
            Ok(m) => Some((m.subject.to_string(), m.payload)),
            Err(e) if e.kind() == RawMessageErrorKind::NoMessageFound => None,
            Err(e) => {
                tracing::warn!("cannot read stream message {end}: {e}");
                return Stored::No;
            }
        };
        let sent = messages.last().expect("a batch has messages");
        let found = found.as_ref().map(|(s, p)| (s.as_str(), &p[..]));
        match holds_last(found, (&sent.0, &sent.1)) {
            true => Stored::Yes,
            false => {
                tracing::error!(
                    "stream message {end} is not batch {id}'s last: another writer got in"
                );
                Stored::No
            }
        }
    }
}

/// What decides whether the writer sends a snapshot next.
struct Due {
    /// Page bytes of the records since the last snapshot.
    bytes: usize,
    /// Submissions are queued (taken, they go out first).
    queued: bool,
    /// A second passed with nothing to send.
    idle: bool,
    /// There are records since the last snapshot.
    waiting: bool,
    /// The log holds more dead bytes than its bound.
    over: bool,
    /// The last snapshot left fewer bytes in the log.
    freed: bool,
}

impl Due {
    /// A snapshot goes once the records since the last would fill
    /// [`SNAP_BYTES`]; or, with nothing queued, to clean a log over its
    /// bound (back to back while each frees bytes, as the absorber cleans
    /// between frames; else once an idle second), or after an idle second
    /// to pack the records waiting. Once a second alone, a log a drain
    /// left over its bound (every job reserved, so rewritten, then
    /// deleted: 250 MB of dead pages at 200k 1 KiB jobs) took 13 minutes
    /// to clean, its pages held meanwhile.
    fn snapshot(&self) -> bool {
        let clean = self.over && (self.idle || self.freed);
        self.bytes >= SNAP_BYTES || !self.queued && (clean || self.idle && self.waiting)
    }
}

/// Whether the stream message at a batch's end, `found` (subject and
/// payload; `None` if it is gone), is the batch's `last` message. Gone
/// counts: only a later message on its subject replaces it (one subject
/// keeps one message), and only this leader's later batches, each chained
/// on this one, write after its claim.
fn holds_last(found: Option<(&str, &[u8])>, last: (&str, &[u8])) -> bool {
    found.is_none_or(|found| found == last)
}

/// What [`Writer::stored`] found of a batch refused as fenced.
enum Stored {
    /// In the stream already.
    Yes,
    /// Not in, for a reason this node cannot name.
    No,
    /// Not in: another node's claim (this one) came since.
    Claimed(Meta),
}

#[cfg(test)]
mod tests;
