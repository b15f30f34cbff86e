//! A standby's eye on the lease (`lease.rs`): it watches the key, so each
//! renewal reaches it as it is written, and takes the key over once one
//! revision has stood for a whole TTL on its own clock (`timing.rs`'s
//! [`Observed`]). Why a watch and not a poll: a takeover comes a TTL after
//! the last renewal *seen*, so every poll interval was added to each
//! failover; and an aged-out key announces nothing, so the due time is this
//! node's own timer, not an event.
//!
//! The takeover is one write: the key over the revision last seen, which
//! fails if anyone wrote since. Only when it fails, or the key is free, is
//! the key read. A read that finds a revision the watch never delivered
//! means the watch stalled (its NATS server died): it is started again.

use async_nats::jetstream::kv::{self, Operation};
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::time::Instant;

use super::held::Held;
use super::lease::{encode, Holder, Lease, LeaseError, KEY};
use super::timing::Observed;

impl Lease {
    /// Waits until this node holds the lease: what a standby runs
    /// (`standby.rs`), on its own.
    pub async fn acquire(&self, node: &str, addr: &str) -> Held {
        let mut standby = Standby::new(self, node, addr);
        loop {
            let next_try = standby.next_try();
            tokio::select! {
                _ = standby.seen() => {}
                () = tokio::time::sleep_until(next_try) => {
                    match standby.try_take().await {
                        Ok(Some(held)) => return held,
                        Ok(None) => {}
                        Err(e) => tracing::warn!("lease: {e}"),
                    }
                }
            }
        }
    }
}

/// A standby waiting for the lease.
pub struct Standby {
    lease: Lease,
    /// What this node writes into the key.
    value: Bytes,
    /// The key's changes; started at the first try, again after a stall.
    watch: Option<kv::Watch>,
    observed: Observed,
    /// When to try the key next.
    next: Instant,
}

impl Standby {
    /// A standby for `lease` as node `node` serving at `addr`; its first
    /// try is due at once.
    pub fn new(lease: &Lease, node: &str, addr: &str) -> Standby {
        Standby {
            lease: lease.clone(),
            value: encode(node, addr),
            watch: None,
            observed: Observed::default(),
            next: Instant::now(),
        }
    }

    /// When [`Standby::try_take`] is next due.
    pub fn next_try(&self) -> Instant {
        self.next
    }

    /// Waits for the watch's next change to the key: the holder it names
    /// (to pass clients to), or `None` for a release or a watch that ended
    /// (then the next try is due at once). Never completes without a watch.
    pub async fn seen(&mut self) -> Option<Holder> {
        let Some(watch) = &mut self.watch else {
            return std::future::pending().await;
        };
        let entry = match watch.next().await {
            Some(Ok(entry)) => entry,
            ended => {
                tracing::debug!("the lease's watch ended: {ended:?}");
                self.watch = None;
                self.next = Instant::now();
                return None;
            }
        };
        if entry.operation != Operation::Put {
            self.observed.clear();
            self.next = Instant::now();
            return None;
        }
        let timing = self.lease.timing();
        self.observed.stale(entry.revision, Instant::now(), &timing);
        self.next = self.observed.due(&timing).map_or(self.next, |(_, due)| due);
        let mut holder: Holder = serde_json::from_slice(&entry.value).ok()?;
        holder.revision = entry.revision;
        Some(holder)
    }

    /// Tries to take the key (see the module docs): the lease if taken.
    /// Errors and silences (TTL/2) of NATS are the caller's to retry, at
    /// [`Standby::next_try`].
    pub async fn try_take(&mut self) -> Result<Option<Held>, LeaseError> {
        let timing = self.lease.timing();
        let tried = tokio::time::timeout(timing.ttl / 2, self.attempt()).await;
        let taken = tried.unwrap_or_else(|_| Err(LeaseError::NoAnswer));
        let retry = Instant::now() + timing.poll_every;
        self.next = match self.observed.due(&timing) {
            Some((_, due)) => due.max(retry),
            None => retry,
        };
        taken
    }

    async fn attempt(&mut self) -> Result<Option<Held>, LeaseError> {
        let watching = self.watch.is_some();
        if !watching {
            self.watch().await?;
        }
        let timing = self.lease.timing();
        if let Some((revision, due)) = self.observed.due(&timing) {
            if due <= Instant::now() {
                if let Some(held) = self.lease.take(&self.value, revision).await? {
                    return Ok(Some(held));
                }
            }
        }
        let last = self.observed.due(&timing).map(|(revision, _)| revision);
        match self.lease.latest().await? {
            None => self.lease.take(&self.value, 0).await,
            Some((revision, None)) => self.lease.take(&self.value, revision).await,
            Some((revision, Some(_))) => {
                if watching && last.is_some_and(|last| last < revision) {
                    tracing::debug!("the lease's watch fell behind: starting it again");
                    self.watch().await?;
                }
                if self.observed.stale(revision, Instant::now(), &timing) {
                    self.lease.take(&self.value, revision).await
                } else {
                    Ok(None)
                }
            }
        }
    }

    /// Starts watching the key's changes from now on (what is there now,
    /// a read finds).
    async fn watch(&mut self) -> Result<(), LeaseError> {
        self.watch = Some(self.lease.store().watch(KEY).await?);
        Ok(())
    }
}
