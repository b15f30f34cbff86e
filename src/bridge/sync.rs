//! The sync queue: keys to bring in line with Redis, from events and SCAN,
//! spread over a few workers by key hash (so one key's syncs stay in
//! order, and different keys proceed in parallel).
//!
//! Each worker takes whatever is queued, up to [`BATCH`] keys, and syncs
//! them together (one pipelined expiry read, one pipeline of puts, one
//! of deletes: a few round trips per batch instead of per key). A key
//! queued twice in a batch (a `SET … EX` sends `set` *and* `expire`) is
//! synced once: a sync reads Redis afresh, so the last of several syncs
//! is the only one that counts, and the merged hints (`expired`,
//! `verify` or `changed` from any of them) only ever leave a timer to
//! fire, check one more, or read Redis where an `expired` alone would not.
//!
//! A [`Queue::barrier`] waits until every key queued before it is synced:
//! how a reconciliation knows it is complete (the channels are FIFO, so a
//! worker that reaches the barrier has synced all that came before).

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::failure::recover;
use super::keys::{first_occurrences, key_hash};
use super::registry::Registry;
use super::server_side::Session;
use super::work::Work;

/// Workers that sync keys in parallel (a divisor of the registry's lock
/// stripes, so workers never share a stripe).
pub const WORKERS: usize = 8;
/// Keys a worker syncs together at most.
pub const BATCH: usize = 512;
/// Keys queued per worker before events and SCAN wait.
const QUEUE: usize = 4096;
/// What a worker is sent: a key, or a barrier to answer once every key
/// sent before it is synced.
enum Item {
    Key(Work),
    Barrier(oneshot::Sender<()>),
}

/// Where events and SCAN send keys.
#[derive(Clone)]
pub struct Queue(Arc<Vec<mpsc::Sender<Item>>>);

impl Queue {
    /// Starts the workers; each gets its session from `session`.
    pub fn start(registry: Arc<Registry>, mut session: impl FnMut() -> Session) -> Queue {
        let senders = (0..WORKERS)
            .map(|_| {
                let (tx, rx) = mpsc::channel(QUEUE);
                tokio::spawn(work(registry.clone(), session(), rx));
                tx
            })
            .collect();
        Queue(Arc::new(senders))
    }

    /// Queues a key; waits while its worker is full.
    pub async fn push(&self, work: Work) {
        let h = key_hash(work.key_ref());
        let tx = &self.0[h as usize % self.0.len()];
        // The workers run as long as the bridge: a send cannot fail.
        let _ = tx.send(Item::Key(work)).await;
    }

    /// Waits until every key queued before the call is synced.
    pub async fn barrier(&self) {
        let mut answers = Vec::with_capacity(self.0.len());
        for tx in self.0.iter() {
            let (done, answer) = oneshot::channel();
            let _ = tx.send(Item::Barrier(done)).await;
            answers.push(answer);
        }
        for answer in answers {
            let _ = answer.await;
        }
    }
}

async fn work(registry: Arc<Registry>, mut session: Session, mut rx: mpsc::Receiver<Item>) {
    let mut items = Vec::with_capacity(BATCH);
    let mut batch = Vec::with_capacity(BATCH);
    while rx.recv_many(&mut items, BATCH).await > 0 {
        for item in items.drain(..) {
            match item {
                Item::Key(work) => batch.push(work),
                Item::Barrier(done) => {
                    sync(&registry, &mut session, std::mem::take(&mut batch)).await;
                    let _ = done.send(());
                }
            }
        }
        sync(&registry, &mut session, std::mem::take(&mut batch)).await;
    }
}

/// Syncs `batch` (its repeats once), retrying until it succeeds.
async fn sync(registry: &Registry, session: &mut Session, batch: Vec<Work>) {
    if batch.is_empty() {
        return;
    }
    let keys = coalesce(batch);
    while let Err(failure) = registry.sync(session, &keys).await {
        recover(session, failure).await;
    }
}

/// One [`Work`] per key, in first-seen order, hints merged (keys are
/// borrowed, not copied, to find the repeats).
fn coalesce(mut batch: Vec<Work>) -> Vec<Work> {
    let first = first_occurrences(batch.iter().map(Work::key_ref));
    for (i, &f) in first.iter().enumerate() {
        if f != i {
            batch[f].hint = batch[f].hint.merge(batch[i].hint);
        }
    }
    batch
        .into_iter()
        .zip(first)
        .enumerate()
        .filter_map(|(i, (w, f))| (f == i).then_some(w))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bridge::work::Hint;

    /// A key's work as an event (`verify` false) or SCAN (true) queues it.
    fn work(node: u16, key: &str, expired: bool, verify: bool) -> Work {
        Work {
            node,
            key: key.into(),
            hint: Hint {
                expired,
                verify,
                changed: !expired,
                removed: false,
            },
        }
    }

    #[test]
    fn coalesce_keeps_first_seen_order_and_merges_hints() {
        let out = coalesce(vec![
            work(0, "a", false, false),
            work(0, "b", false, false),
            work(1, "a", false, true),
            work(0, "a", true, false),
            work(0, "b", false, false),
            work(1, "a", false, false),
            work(0, "c", true, false),
            work(0, "c", true, false),
        ]);
        let got: Vec<_> = out
            .iter()
            .map(|w| {
                let h = w.hint;
                (w.node, w.key.as_slice(), h.expired, h.verify, h.changed)
            })
            .collect();
        assert_eq!(
            got,
            [
                (0, &b"a"[..], true, false, true),
                (0, &b"b"[..], false, false, true),
                (1, &b"a"[..], false, true, true),
                (0, &b"c"[..], true, false, false),
            ]
        );
    }
}
