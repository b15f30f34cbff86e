//! Asking for an early reconciliation, and remembering what it leaves
//! uncertain until it is done: whoever notices that changes may have been
//! missed (a lost or resubscribed event connection, a lost job server
//! connection, a wipe no event announces) pulls the trigger of one node,
//! or of all, and opens a window in the node's [`Gaps`]; the node's
//! reconciliation task waits on the trigger between passes and closes the
//! window after a complete pass.

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::gaps::Gaps;
use super::wall_clock::now_ms;

struct Node {
    wake: Notify,
    gaps: Mutex<Gaps>,
}

/// One trigger per node.
#[derive(Clone)]
pub struct Triggers(Arc<Vec<Node>>);

impl Triggers {
    pub fn new(nodes: usize) -> Triggers {
        let node = |_| Node {
            wake: Notify::new(),
            gaps: Mutex::new(Gaps::at_start()),
        };
        Triggers(Arc::new((0..nodes).map(node).collect()))
    }

    fn with(&self, node: u16, change: impl FnOnce(&mut Gaps, i64)) -> Option<&Node> {
        let n = self.0.get(usize::from(node))?;
        change(
            &mut n.gaps.lock().unwrap_or_else(|e| e.into_inner()),
            now_ms(),
        );
        Some(n)
    }

    /// Node `node`'s event connection was lost: deletions from now on go
    /// unannounced until [`Triggers::subscribed`].
    pub fn events_lost(&self, node: u16) {
        self.with(node, |g, now| g.events_lost(now));
    }

    /// Node `node`'s events flow (again): reconcile it, since events sent
    /// meanwhile are gone for good.
    pub fn subscribed(&self, node: u16) {
        if let Some(n) = self.with(node, |g, now| g.events_back(now)) {
            n.wake.notify_one();
        }
    }

    /// Keys of node `node` may have vanished unannounced since `from_ms`
    /// (a flush, a restart): reconcile it.
    pub fn missed(&self, node: u16, from_ms: i64) {
        if let Some(n) = self.with(node, |g, now| g.missed(from_ms, now)) {
            n.wake.notify_one();
        }
    }

    /// The job server was lost: reconcile every node, verifying timers
    /// (timers that came due meanwhile may go before queued events).
    pub fn all(&self) {
        for node in 0..self.0.len() {
            self.missed(node as u16, now_ms());
        }
    }

    /// Waits until node `node`'s trigger is pulled (at once if it was
    /// pulled since the last wait).
    pub async fn wait(&self, node: u16) {
        if let Some(n) = self.0.get(usize::from(node)) {
            n.wake.notified().await;
        }
    }

    /// A complete reconciliation of node `node` that began at `started_ms`
    /// has ended.
    pub fn passed(&self, node: u16, started_ms: i64) {
        self.with(node, |g, now| g.passed(started_ms, now));
    }

    /// Could a key of node `node` gone at its deadline `at_ms` have been
    /// deleted without the bridge seeing it?
    pub fn uncertain(&self, node: u16, at_ms: i64) -> bool {
        self.0.get(usize::from(node)).is_some_and(|n| {
            n.gaps
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .covers(at_ms)
        })
    }
}
