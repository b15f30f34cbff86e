//! Asking for an early reconciliation: whoever notices that changes may
//! have been missed (a resubscribed event connection, a lost job server
//! connection) pulls the trigger of one node, or of all; the node's
//! reconciliation task waits on it between passes.

use std::sync::Arc;

use tokio::sync::Notify;

/// One trigger per node.
#[derive(Clone)]
pub struct Triggers(Arc<Vec<Notify>>);

impl Triggers {
    pub fn new(nodes: usize) -> Triggers {
        Triggers(Arc::new((0..nodes).map(|_| Notify::new()).collect()))
    }

    /// Node `node` lost events: reconcile it.
    pub fn node(&self, node: u16) {
        if let Some(n) = self.0.get(usize::from(node)) {
            n.notify_one();
        }
    }

    /// The job server was lost: reconcile every node, verifying timers.
    pub fn all(&self) {
        self.0.iter().for_each(Notify::notify_one);
    }

    /// Waits until node `node`'s trigger is pulled (at once if it was
    /// pulled since the last wait).
    pub async fn wait(&self, node: u16) {
        if let Some(n) = self.0.get(usize::from(node)) {
            n.notified().await;
        }
    }
}
