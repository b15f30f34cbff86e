//! The store in cluster mode: every group commit goes to the stream as an
//! atomic batch, and a reply waits until the stream has acknowledged it
//! (a quorum of the NATS servers holds it, synced under
//! `sync_interval: always`).
//!
//! The seam is the single-node store's (`store/mod.rs`): commands queue
//! their records under the engine lock ([`ClusterStore::submit`]); the
//! writer task takes everything queued, packs it into pages exactly as the
//! absorber packs sled's (`store/pack.rs`), and sends the pages and the
//! slots cleaning freed (empty messages) as one batch, with a meta message
//! (`meta.rs`) when the id ceiling must move: it runs a block ahead of the
//! ids handed out (`store/ids.rs`), so most batches carry none (a message
//! fewer for the NATS servers to replicate and sync). While one batch is on its way the next one gathers, so the
//! group grows with the load. A batch the stream refuses means this node
//! no longer leads (or the stream is failing): the node stops at once
//! (`node.rs`), and nothing it did not get acknowledged was answered.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::stream::{RawMessageErrorKind, Stream};
use async_nats::jetstream::Context;
use async_nats::Client;
use bytes::Bytes;
use rustc_hash::FxHashMap;
use sprout_protocol::JobId;
use tokio::sync::{watch, Notify};

use super::fence::{Fences, FENCES};
use super::follow::Pages;
use super::meta::Meta;
use super::publish::{self, Chain, Refusal, Sent, MAX_BATCH};
use super::subjects::Subjects;
use crate::engine::{Record, Room};
use crate::store::{pack, raise_id_ceiling, Progress, Seq, Store};

/// Records taken into one batch, in the bytes their pages will hold
/// (`Log::page_bytes`: an update counts its body, which it does not carry
/// but its new image holds): with pages of 4 KiB and [`CLEAN_PAGES`]
/// cleaned, a batch stays well inside [`MAX_BATCH`] messages.
const BATCH_BYTES: usize = 1 << 20;
/// Oldest pages cleaned per batch at most.
const CLEAN_PAGES: usize = 200;
/// Batches on their way to the stream at once (at most [`FENCES`]).
const IN_FLIGHT: usize = 8;

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

#[derive(Default)]
struct Queue {
    last: Seq,
    groups: Vec<(Seq, Vec<Record>)>,
    /// Puts not acknowledged yet, by job and in submission order: an
    /// answer that hands such a job out waits for its put alone.
    puts: FxHashMap<JobId, Seq>,
    put_order: VecDeque<(Seq, JobId)>,
}

impl Queue {
    /// Forgets the puts of submissions up to `seq`: the stream has them.
    fn acknowledged(&mut self, seq: Seq) {
        while let Some(&(s, id)) = self.put_order.front() {
            if s > seq {
                break;
            }
            self.put_order.pop_front();
            if self.puts.get(&id) == Some(&s) {
                self.puts.remove(&id);
            }
        }
    }
}

pub struct ClusterStore {
    queue: Mutex<Queue>,
    wake: Notify,
    progress: watch::Sender<Progress>,
    /// Set once this node has claimed the stream; until then (a standby)
    /// every submission fails at once.
    leading: AtomicBool,
}

impl ClusterStore {
    pub fn new() -> Arc<ClusterStore> {
        // Nothing is taken into a store of record behind the stream.
        let mut progress = Progress::default();
        progress.absorbed = Seq::MAX;
        Arc::new(ClusterStore {
            queue: Mutex::default(),
            wake: Notify::new(),
            progress: watch::Sender::new(progress),
            leading: AtomicBool::new(false),
        })
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes queued groups, up to [`BATCH_BYTES`] as `bytes_of` counts a
    /// group's records (at least one group); returns them and their bytes.
    fn take(
        &self,
        mut bytes_of: impl FnMut(&[Record]) -> usize,
    ) -> (Vec<(Seq, Vec<Record>)>, usize) {
        let mut q = self.queue();
        let mut bytes = 0;
        let n = q
            .groups
            .iter()
            .take_while(|(_, records)| {
                let take = bytes < BATCH_BYTES;
                if take {
                    bytes += bytes_of(records);
                }
                take
            })
            .count();
        (q.groups.drain(..n).collect(), bytes)
    }
}

impl Store for ClusterStore {
    fn submit(&self, records: Vec<Record>) -> Seq {
        let mut q = self.queue();
        q.last += 1;
        let seq = q.last;
        if self.leading.load(Ordering::Acquire) {
            for record in &records {
                if let Record::Put(image) = record {
                    q.puts.insert(image.id, seq);
                    q.put_order.push_back((seq, image.id));
                }
            }
            q.groups.push((seq, records));
            drop(q);
            self.wake.notify_one();
        } else {
            drop(q);
            self.progress.send_modify(|p| p.fail(seq, seq));
        }
        seq
    }

    fn progress(&self) -> watch::Receiver<Progress> {
        self.progress.subscribe()
    }

    fn replies_wait_for_sync(&self) -> bool {
        true
    }

    fn write_out(&self) -> bool {
        false
    }

    fn request_sync(&self) {
        self.wake.notify_one();
    }

    fn room(&self) -> Room {
        Room::UNLIMITED
    }

    fn file(&self) -> u32 {
        0
    }

    fn put_of(&self, id: JobId) -> Option<Seq> {
        Some(self.queue().puts.get(&id).copied().unwrap_or(0))
    }

    fn close(&self) {
        let last = self.queue().last;
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.leading.load(Ordering::Acquire)
            && self.progress.borrow().synced < last
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

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
    /// The id ceiling its meta message carries.
    ids_below: JobId,
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
        // Since when, and how often, the oldest batch has been sent again.
        let mut retry: Option<(Instant, u32)> = None;
        loop {
            if flying.len() < in_flight() {
                // The queue's lock, then the directory's (`page_bytes`).
                let log = &self.pages.log;
                let (groups, bytes) = self.store.take(|records| log.page_bytes(records));
                let clean = idle && self.pages.log.over_bound();
                if !groups.is_empty() || clean {
                    idle = false;
                    batches += 1;
                    let sent = self.send(&groups, bytes, batches, &mut flying).await;
                    if let Err(e) = sent {
                        return e;
                    }
                    continue;
                }
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

    /// Packs `groups`, whose pages hold about `bytes`, and sends them (see
    /// the module docs); the last batch sent carries the last group's
    /// submission number.
    async fn send(
        &mut self,
        groups: &[(Seq, Vec<Record>)],
        bytes: usize,
        number: u64,
        flying: &mut VecDeque<Flying>,
    ) -> Result<(), WriteError> {
        let records = || groups.iter().flat_map(|(_, records)| records);
        // A group too big for one batch is sent in several, uncleaned, so
        // that no part of it frees a slot another part still needs.
        let clean = if bytes <= BATCH_BYTES { CLEAN_PAGES } else { 0 };
        let Pages { log, by_slot, .. } = &mut self.pages;
        // Every page is at hand (`by_slot`): no cache to ask first.
        let packed = pack(
            log,
            records(),
            clean,
            |_| None,
            |slot| Ok(by_slot.get(&slot).map(|page| page.to_vec())),
        )
        .map_err(WriteError::Pack)?;
        let mut messages: Vec<(String, Bytes)> = self
            .pages
            .keep(packed)
            .into_iter()
            .map(|(slot, page)| (self.subjects.page(slot), page))
            .collect();
        let highest = records()
            .filter_map(|r| match r {
                Record::Put(image) => Some(image.id),
                _ => None,
            })
            .max();
        let raised = highest.and_then(|h| raise_id_ceiling(self.meta.ids_below, h));
        if let Some(ceiling) = raised {
            self.meta.ids_below = ceiling;
        }
        // The meta message only when the ceiling moves (or the batch would
        // be empty): most batches are then their pages alone.
        if raised.is_some() || messages.is_empty() {
            messages.push((self.subjects.meta(), Bytes::from(self.meta.encode())));
        }
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
            let last = groups
                .last()
                .map(|(seq, _)| *seq)
                .filter(|_| part + 1 == parts);
            flying.push_back(Flying {
                sent,
                id,
                messages: chunk.to_vec(),
                chain,
                end,
                last,
                ids_below: self.meta.ids_below,
            });
        }
        Ok(())
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
