//! Persistence behind one small seam.
//!
//! The engine journals every change that must survive a restart
//! ([`crate::engine::Record`]); under the engine lock, the server hands each
//! command's records to the [`Store`] and gets a sequence number back, so
//! records reach the store in engine order. The store reports, through a
//! watch channel, how far it has got. Under `-f 0` a reply waits until its
//! records are durable; otherwise replies go out at once and the store
//! catches up within the fsync interval.
//!
//! Without `-b` there is no store at all ([`Memory`]), and the engine keeps
//! no journal, so memory mode pays nothing for this.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::engine::Record;

mod blobs;
pub mod checkpoint;
mod log;
mod page;
pub mod record;
pub mod sled;
mod slots;

/// A submission's place in the store's order. 0 means "nothing to wait for".
pub type Seq = u64;

/// When records are forced to disk (beanstalkd's `-f`/`-F`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// `-f 0`: before the reply is sent.
    Always,
    /// `-f MS`: at most this long after the reply.
    Every(Duration),
    /// `-F`: never forced (the store's own background writes only).
    Never,
}

/// How far the store has got.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    /// Every submission up to here is done: durable under
    /// [`Policy::Always`], written to the store otherwise.
    pub done: Seq,
    /// Recent submissions the store failed to write, as inclusive ranges.
    failed: Arc<Vec<(Seq, Seq)>>,
}

/// How many failed ranges [`Progress`] remembers; a reply waiting on an
/// older one has long been answered.
const FAILURES_KEPT: usize = 64;

impl Progress {
    /// Whether submission `seq` failed to be stored.
    pub fn failed(&self, seq: Seq) -> bool {
        self.failed.iter().any(|&(a, b)| (a..=b).contains(&seq))
    }

    /// Marks submissions `from..=to` done, and failed if `failed`.
    pub fn advance(&mut self, from: Seq, to: Seq, failed: bool) {
        self.done = to;
        if failed {
            let list = Arc::make_mut(&mut self.failed);
            if list.len() == FAILURES_KEPT {
                list.remove(0);
            }
            list.push((from, to));
        }
    }
}

/// What the server needs from a store.
pub trait Store: Send + Sync {
    /// Queues one command's records; called under the engine lock so
    /// sequence numbers follow engine order.
    fn submit(&self, records: Vec<Record>) -> Seq;

    /// Follows the store's progress.
    fn progress(&self) -> watch::Receiver<Progress>;

    /// Whether replies must wait until their records are durable (`-f 0`).
    fn replies_wait(&self) -> bool;

    /// False while writes fail; the server then refuses new jobs.
    fn healthy(&self) -> bool;

    /// Writes and makes durable everything submitted (at shutdown).
    fn close(&self);
}

/// No persistence: beanstalkd without `-b`.
pub struct Memory {
    progress: watch::Sender<Progress>,
}

impl Memory {
    pub fn new() -> Memory {
        Memory {
            progress: watch::Sender::new(Progress::default()),
        }
    }
}

impl Default for Memory {
    fn default() -> Self {
        Memory::new()
    }
}

impl Store for Memory {
    fn submit(&self, _records: Vec<Record>) -> Seq {
        0
    }

    fn progress(&self) -> watch::Receiver<Progress> {
        self.progress.subscribe()
    }

    fn replies_wait(&self) -> bool {
        false
    }

    fn healthy(&self) -> bool {
        true
    }

    fn close(&self) {}
}
