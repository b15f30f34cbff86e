//! The leader's submissions on their way to the stream: the store seam
//! (`store/mod.rs`) in cluster mode. Commands queue their records under
//! the engine lock ([`ClusterStore::submit`]); the writer (`writer.rs`)
//! takes them, and reports back through [`Progress`] once the stream has
//! them. Until this node has claimed the stream (a standby), every
//! submission fails at once.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use sprout_protocol::JobId;
use tokio::sync::{watch, Notify};

use crate::engine::{Record, Room};
use crate::store::{Bodies, Progress, Seq, Store};

/// Records taken into one batch, in the bytes their pages will hold
/// (`Log::page_bytes`: an update counts its body, which it does not carry
/// but its new image holds).
const BATCH_BYTES: usize = 1 << 20;

#[derive(Default)]
pub(super) struct Queue {
    last: Seq,
    groups: Vec<(Seq, Vec<Record>)>,
    /// Puts not acknowledged yet, by job and in submission order: an
    /// answer that hands such a job out waits for its put alone.
    puts: FxHashMap<JobId, Seq>,
    put_order: VecDeque<(Seq, JobId)>,
}

impl Queue {
    /// Forgets the puts of submissions up to `seq`: the stream has them.
    pub(super) fn acknowledged(&mut self, seq: Seq) {
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
    /// Woken by a submission, for the writer.
    pub(super) wake: Notify,
    pub(super) progress: watch::Sender<Progress>,
    /// Set once this node has claimed the stream; until then (a standby)
    /// every submission fails at once.
    pub(super) leading: AtomicBool,
    /// With `-b`, the bodies the engine leaves to the store: read back
    /// from this node's copy of the pages (`page_copy.rs`), each put's
    /// pinned in the cache until a snapshot has written its page.
    bodies: Option<Arc<Bodies>>,
}

impl ClusterStore {
    pub fn new(bodies: Option<Arc<Bodies>>) -> Arc<ClusterStore> {
        // Nothing is taken into a store of record behind the stream.
        let mut progress = Progress::default();
        progress.absorbed = Seq::MAX;
        Arc::new(ClusterStore {
            queue: Mutex::default(),
            wake: Notify::new(),
            progress: watch::Sender::new(progress),
            leading: AtomicBool::new(false),
            bodies,
        })
    }

    pub(super) fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes queued groups, up to [`BATCH_BYTES`] as `bytes_of` counts a
    /// group's records (at least one group); returns them and their bytes.
    pub(super) fn take(
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
            if let Some(bodies) = &self.bodies {
                // The writer's snapshot unpins them (`follow.rs`).
                bodies.submitted(&records);
            }
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

    fn bodies(&self) -> Option<&Arc<Bodies>> {
        self.bodies.as_ref()
    }

    fn forget(&self, id: JobId) {
        if let Some(bodies) = &self.bodies {
            bodies.cache.remove(id);
        }
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
        if let Some(bodies) = &self.bodies {
            bodies.close();
        }
    }
}
