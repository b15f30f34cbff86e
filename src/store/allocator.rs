//! The allocator: keeps journal files allocated ahead of the room they give
//! (`room.rs`), removes spares no longer needed, measures how much of the
//! disk the journal may still take, and keeps the ballast in place
//! (`ballast.rs`). A thread of its own: making a file takes syncs, and no
//! reply's sync should wait behind them. It looks every [`TICK`], and at
//! once when the writer takes a spare into use.

use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ballast::Ballast;
use super::bells::{Call, Calls};
use super::journal::Journal;
use super::segment;

/// How often the allocator looks.
const TICK: Duration = Duration::from_millis(100);
/// How long a failed allocation waits before it is tried again.
const RETRY: Duration = Duration::from_secs(1);
/// Journal files allocated in one look, at most.
const ALLOCATIONS_PER_LOOK: usize = 16;

pub struct Allocator {
    journal: Arc<Journal>,
    ballast: Ballast,
    retry_at: Option<Instant>,
}

impl Allocator {
    pub fn new(journal: Arc<Journal>, ballast: Ballast) -> Allocator {
        Allocator {
            journal,
            ballast,
            retry_at: None,
        }
    }

    pub fn run(mut self, calls: Calls) {
        loop {
            self.look();
            match calls.0.recv_timeout(TICK) {
                Ok(Call::Look) | Err(RecvTimeoutError::Timeout) => {}
                Ok(Call::Stop) | Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// Measures the disk (leaving the ballast what it lacks), allocates
    /// journal files while the capacity is below what the room wants,
    /// removes a spare when there are more than three files too many, and
    /// keeps the ballast.
    pub fn look(&mut self) {
        let journal = &self.journal;
        journal.set_ballast_missing(self.ballast.missing());
        if let Err(e) = journal.measure_disk() {
            tracing::warn!("cannot measure the disk's free space: {e}");
        }
        if self.retry_at.is_none_or(|at| Instant::now() >= at) {
            self.keep_room();
        }
        self.ballast.keep(2 * self.journal.file_size);
    }

    fn keep_room(&mut self) {
        let journal = &self.journal;
        for _ in 0..ALLOCATIONS_PER_LOOK {
            let (wanted, capacity) = journal.capacity();
            if capacity >= wanted {
                if capacity > wanted + 3 * journal.file_size as i64 {
                    if let Some(spare) = journal.take_spare() {
                        if let Err(e) = segment::remove(&journal.dir, spare.number) {
                            tracing::warn!("cannot remove spare journal file: {e}");
                        }
                    }
                }
                return;
            }
            match journal.allocate_spare() {
                Ok(()) => {
                    if self.retry_at.take().is_some() {
                        tracing::info!("journal files can be allocated again");
                    }
                }
                Err(e) => {
                    if self.retry_at.is_none() {
                        tracing::warn!(
                            "cannot allocate a journal file ({e}): new jobs are refused \
                             once the room left runs out; deletes still work"
                        );
                    }
                    self.retry_at = Some(Instant::now() + RETRY);
                    return;
                }
            }
        }
    }
}
