//! Flush and move: changes to a whole state of a tube, made a batch per
//! engine lock, so clients of the beanstalk port wait at most one batch
//! (a flush of a million jobs is two thousand short locks, not one long one).
//!
//! Each batch's records are handed to the store as the batch ends, and a
//! batch starts only once the store has taken the one before it (durable
//! under `-f 0`): one batch is written while the next is made, and a flush
//! neither runs ahead of the disk nor piles a million records into the
//! store's queue.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::{AdminError, Engine};
use crate::shared::{Shared, Submission};

use super::app::stored;
use super::error::ApiError;

/// Jobs changed per lock. Measured (examples/flush_pause.rs, a million
/// buried jobs on the project's 2-core machine): about a microsecond per
/// job, so a batch holds the lock for about half a millisecond.
pub const BATCH: usize = 500;

/// How far a batched change got.
pub struct Done {
    pub jobs: u64,
    /// Some batch's records failed to reach the store.
    pub unstored: bool,
}

/// Runs `step` (which changes at most the given number of jobs and says
/// how many) until it changes fewer than a batch, or `limit` jobs are done.
pub async fn run(
    shared: &Arc<Shared>,
    limit: Option<u64>,
    mut step: impl FnMut(&mut Engine, usize, u64) -> Result<u64, AdminError>,
) -> Result<Done, ApiError> {
    let mut done = Done {
        jobs: 0,
        unstored: false,
    };
    let mut longest = Duration::ZERO;
    let mut in_flight = Submission::default();
    let refused = loop {
        let left = limit.map_or(BATCH as u64, |l| l - done.jobs);
        let batch = left.min(BATCH as u64) as usize;
        if batch == 0 {
            break None;
        }
        let (n, submission) = {
            let now = shared.clock.now();
            let mut state = shared.lock();
            let locked = Instant::now();
            let n = step(&mut state.engine, batch, now);
            let submission = state.submit();
            drop(state);
            longest = longest.max(locked.elapsed());
            (n, submission)
        };
        let n = match n {
            Ok(n) => n,
            Err(e) => break Some(e),
        };
        done.jobs += n;
        // Wait for the batch before this one: one is in flight at a time.
        let before = std::mem::replace(&mut in_flight, submission);
        done.unstored |= !stored(shared, before, 0).await?;
        if n < batch as u64 {
            break None;
        }
        tokio::task::yield_now().await;
    };
    done.unstored |= !stored(shared, in_flight, 0).await?;
    tracing::info!(
        jobs = done.jobs,
        ?longest,
        "batched admin change done (longest lock held)"
    );
    match refused {
        // A refusal after some batches succeeded still reports them.
        Some(e) if done.jobs == 0 => Err(e.into()),
        _ => Ok(done),
    }
}
