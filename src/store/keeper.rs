//! The keeper: the journal's sync thread (see `journal.rs`).
//!
//! - It syncs: under `-f 0` as soon as asked (one `fdatasync` answers every
//!   reply waiting by then), under `-f MS` at most MS after a write, and
//!   under every policy when the id ceiling rose (`ids.rs`).
//! - It writes, within a second, what no reply waits for (a TTR running out).
//! - At a clean stop it writes the exact next id, syncs, stops the
//!   allocator (`allocator.rs`) and waits for sled to take in everything
//!   (`absorb.rs`).
//!
//! Allocating journal files takes syncs of its own; it has a thread of its
//! own so that no reply's sync ever waits behind one.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::absorb::Absorb;
use super::bells::Wake;
use super::journal::Journal;
use super::Policy;

/// How often the keeper writes what no reply waits for.
const TICK: Duration = Duration::from_secs(1);
/// How long a clean stop waits for sled.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the keeper does next.
enum Chore {
    Sync,
    Tick,
    Close(mpsc::SyncSender<()>),
}

pub struct Keeper {
    journal: Arc<Journal>,
    absorb: mpsc::Sender<Absorb>,
    allocator: Wake,
    next_tick: Instant,
}

impl Keeper {
    pub fn new(journal: Arc<Journal>, absorb: mpsc::Sender<Absorb>, allocator: Wake) -> Keeper {
        Keeper {
            journal,
            absorb,
            allocator,
            next_tick: Instant::now() + TICK,
        }
    }

    pub fn run(mut self) {
        loop {
            match self.next_chore() {
                Chore::Sync => self.sync(),
                Chore::Tick => self.tick(),
                Chore::Close(done) => {
                    self.close();
                    let _ = done.send(());
                    return;
                }
            }
        }
    }

    fn next_chore(&mut self) -> Chore {
        let bell = &self.journal.bell;
        let mut wants = bell.lock();
        loop {
            if let Some(done) = wants.close.take() {
                return Chore::Close(done);
            }
            let now = Instant::now();
            let sync_due = match (self.journal.policy, wants.dirty_since) {
                (Policy::Every(interval), Some(since)) => Some(since + interval),
                _ => None,
            };
            if wants.sync || sync_due.is_some_and(|due| due <= now) {
                wants.sync = false;
                wants.dirty_since = None;
                return Chore::Sync;
            }
            if self.next_tick <= now {
                self.next_tick = now + TICK;
                return Chore::Tick;
            }
            let until = sync_due.map_or(self.next_tick, |due| due.min(self.next_tick));
            wants = bell
                .cond
                .wait_timeout(wants, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn sync(&self) {
        match self.journal.sync() {
            Ok((written, ids_below)) => self.journal.progress.send_modify(|p| {
                p.synced = p.synced.max(written);
                p.ids_below = p.ids_below.max(ids_below);
            }),
            Err(e) => {
                // After a failed fsync the kernel may have dropped the
                // pages: nothing unsynced can be counted on.
                tracing::error!(
                    "journal sync failed: {e}; refusing every change until sprout is \
                     restarted"
                );
                self.journal.fail_unsynced();
            }
        }
    }

    /// Writes what no reply waits for.
    fn tick(&mut self) {
        self.journal.write_all();
    }

    fn close(&self) {
        let journal = &self.journal;
        if let Err(e) = journal.write_ceiling(journal.exact_ceiling()) {
            tracing::error!("cannot write the last id ceiling: {e}");
        }
        self.sync();
        self.allocator.stop();
        let (done, finished) = mpsc::sync_channel(1);
        let _ = self.absorb.send(Absorb::Close(done));
        // Bounded: a disk that hangs must not keep the process from exiting.
        if finished.recv_timeout(CLOSE_TIMEOUT).is_err() {
            tracing::error!("the store did not finish taking in the journal in {CLOSE_TIMEOUT:?}");
        }
    }
}
