//! Flush and move: changes to a whole state of a tube, made a batch per
//! engine lock, so clients of the beanstalk port wait at most one batch
//! (a flush of a million jobs is a thousand short locks, not one long one).
//!
//! Each batch's records are handed to the store before the next batch
//! starts, and the next waits until the store has taken them (durable
//! under `-f 0`), so a flush neither runs ahead of the disk nor piles a
//! million records into the store's queue.

use std::sync::Arc;

use crate::engine::{AdminError, Engine};
use crate::shared::Shared;

use super::app::stored;
use super::error::ApiError;

/// Jobs changed per lock. Measured: a batch of buried jobs flushes in
/// well under a millisecond on this project's 2-core machine.
pub const BATCH: usize = 1000;

/// How far a batched change got.
pub struct Done {
    pub jobs: u64,
    /// Some batch's records failed to reach the store.
    pub unstored: bool,
}

/// Runs `step` (which changes at most `BATCH` jobs and says how many)
/// until it changes fewer than a batch, or `limit` jobs are done.
pub async fn run(
    shared: &Arc<Shared>,
    limit: Option<u64>,
    mut step: impl FnMut(&mut Engine, usize, u64) -> Result<u64, AdminError>,
) -> Result<Done, ApiError> {
    let mut done = Done {
        jobs: 0,
        unstored: false,
    };
    let mut longest = std::time::Duration::ZERO;
    let finish = |done: Done, longest: std::time::Duration| {
        tracing::info!(
            jobs = done.jobs,
            ?longest,
            "batched admin change done (longest lock held)"
        );
        Ok(done)
    };
    loop {
        let left = limit.map_or(BATCH as u64, |l| l - done.jobs);
        let batch = left.min(BATCH as u64) as usize;
        if batch == 0 {
            return finish(done, longest);
        }
        let (n, seq) = {
            let now = shared.clock.now();
            let mut state = shared.lock();
            let locked = std::time::Instant::now();
            let n = step(&mut state.engine, batch, now);
            let seq = state.submit();
            drop(state);
            longest = longest.max(locked.elapsed());
            (n, seq)
        };
        let n = match n {
            Ok(n) => n,
            // A refusal after some batches succeeded still reports them.
            Err(_) if done.jobs > 0 => return finish(done, longest),
            Err(e) => return Err(e.into()),
        };
        done.jobs += n;
        if !stored(shared, seq).await? {
            done.unstored = true;
        }
        if n < batch as u64 {
            return finish(done, longest);
        }
        tokio::task::yield_now().await;
    }
}
