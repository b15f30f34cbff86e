//! The firing workers: each blocks in `reserve` on the timer tube and hands
//! every due timer to [`Registry::fire`]. Several run at once, each with
//! its own connections, so deliveries due together go out in parallel.

use std::sync::Arc;

use super::body::Timer;
use super::registry::{Due, Failure, Registry};
use super::server_side::Session;
use super::sync::{recover, RETRY_PAUSE};

/// Workers reserving due timers.
pub const WORKERS: usize = 16;

/// Runs one worker: `timers` watches and uses the timer tube, `out` uses
/// the delivery tube.
pub async fn work(registry: Arc<Registry>, mut timers: Session, mut out: Session) {
    loop {
        let job = match timers.conn().await.reserve().await {
            Ok(job) => job,
            Err(e) => {
                recover(&mut timers, e.into()).await;
                continue;
            }
        };
        let Some(timer) = Timer::decode(&job.body) else {
            tracing::warn!(id = job.id, "not a bridge timer; burying it");
            if let Err(e) = timers.conn().await.bury(job.id, 0).await {
                recover(&mut timers, e.into()).await;
            }
            continue;
        };
        let due = Due { id: job.id, timer };
        loop {
            match registry.fire(&mut timers, &mut out, &due).await {
                Ok(()) => break,
                Err(Failure::Server(e)) => {
                    // Whichever connection failed, drop both: the
                    // reservation goes with them and the server hands the
                    // timer out again, to be decided afresh.
                    tracing::warn!(error = %e, "firing failed; the timer will come back");
                    timers.reset();
                    out.reset();
                    tokio::time::sleep(RETRY_PAUSE).await;
                    break;
                }
                Err(other) => recover(&mut timers, other).await,
            }
        }
    }
}
