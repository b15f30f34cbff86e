//! How the journal's users reach its two threads: the keeper's [`Bell`]
//! (a sync, a write to sync later, a clean stop) and the allocator's
//! [`Wake`] (a spare was taken). A leaf, so the journal and the threads it
//! rings import it and not each other.

use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

/// How the journal's users reach the keeper.
#[derive(Default)]
pub struct Bell {
    wants: Mutex<Wants>,
    pub(super) cond: Condvar,
}

#[derive(Default)]
pub(super) struct Wants {
    pub(super) sync: bool,
    /// Under `-f MS`: when the oldest unsynced write was made.
    pub(super) dirty_since: Option<Instant>,
    pub(super) close: Option<mpsc::SyncSender<()>>,
}

impl Bell {
    /// Asks for a sync as soon as possible.
    pub fn ring_sync(&self) {
        let mut wants = self.lock();
        if !wants.sync {
            wants.sync = true;
            self.cond.notify_one();
        }
    }

    /// Says something was written that is not synced yet.
    pub fn ring_dirty(&self) {
        let mut wants = self.lock();
        if wants.dirty_since.is_none() {
            wants.dirty_since = Some(Instant::now());
            self.cond.notify_one();
        }
    }

    /// Asks for a clean stop; `done` is answered once it is made.
    pub fn ring_close(&self, done: mpsc::SyncSender<()>) {
        self.lock().close = Some(done);
        self.cond.notify_one();
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Wants> {
        self.wants.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(super) enum Call {
    Look,
    Stop,
}

/// How the journal reaches the allocator.
#[derive(Clone)]
pub struct Wake(SyncSender<Call>);

/// What the allocator hears.
pub struct Calls(pub(super) mpsc::Receiver<Call>);

/// The allocator's channel: made before the journal, which holds the
/// [`Wake`].
pub fn channel() -> (Wake, Calls) {
    let (tx, rx) = mpsc::sync_channel(4);
    (Wake(tx), Calls(rx))
}

impl Wake {
    /// Asks for a look now (a spare was taken into use).
    pub fn look(&self) {
        match self.0.try_send(Call::Look) {
            // Already asked, or gone at shutdown: either is fine.
            Ok(()) | Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {}
        }
    }

    /// Stops the allocator (at a clean stop).
    pub fn stop(&self) {
        let _ = self.0.send(Call::Stop);
    }
}
