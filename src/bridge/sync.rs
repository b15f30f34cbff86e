//! The sync queue: keys to bring in line with Redis, from events and SCAN,
//! spread over a few workers by key hash (so one key's syncs stay in
//! order, and different keys proceed in parallel).

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::registry::{Failure, Hint, Registry};
use super::server_side::Session;

/// Workers that sync keys in parallel.
pub const WORKERS: usize = 16;
/// Keys queued per worker before events and SCAN wait.
const QUEUE: usize = 4096;
/// Pause before retrying after Redis or the index failed.
pub const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// One key to sync.
pub struct Work {
    pub node: u16,
    pub key: Vec<u8>,
    pub hint: Hint,
}

/// Where events and SCAN send keys.
#[derive(Clone)]
pub struct Queue(Arc<Vec<mpsc::Sender<Work>>>);

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
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (work.node, &work.key).hash(&mut h);
        let tx = &self.0[h.finish() as usize % self.0.len()];
        // The workers run as long as the bridge: a send cannot fail.
        let _ = tx.send(work).await;
    }
}

async fn work(registry: Arc<Registry>, mut session: Session, mut rx: mpsc::Receiver<Work>) {
    while let Some(w) = rx.recv().await {
        while let Err(failure) = registry.sync(&mut session, w.node, &w.key, w.hint).await {
            recover(&mut session, failure).await;
        }
    }
}

/// Logs a failed decision and gets ready to retry it: a lost server
/// connection is dropped (the next use reconnects with backoff); anything
/// else waits a little.
pub async fn recover(session: &mut Session, failure: Failure) {
    match failure {
        Failure::Server(e) if session.failed(&e) => {}
        other => {
            tracing::warn!(error = %other, "retrying");
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
}
