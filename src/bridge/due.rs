//! The due-timer workers: each takes the timers already due from the timer
//! tube, up to [`BATCH`] (one `reserve-batch` on a sprout; on a classic
//! beanstalkd pipelined `reserve-with-timeout 0`), blocking in `reserve`
//! only when none is, and hands them to [`Registry::settle`] together.
//! Several run at once, each with its own connections, so deliveries due
//! together go out in parallel. A worker's `timers` connection watches the
//! timer tube and uses the delivery tube (a sprout's `fire` puts there),
//! its `arms` connection uses the timer tube (timers re-armed on firing).

use std::sync::Arc;
use std::time::Duration;

use sprout_protocol::{Command, Response};

use super::body::Timer;
use super::failure::{recover, Failure, RETRY_PAUSE};
use super::keys::first_occurrences;
use super::registry::{Due, Registry};
use super::server_side::Session;

/// Workers reserving due timers.
pub const WORKERS: usize = 4;
/// Timers a worker fires together at most.
pub const BATCH: usize = 256;
/// `reserve-with-timeout 0` sent in the first pipeline after a reserve.
const GRAB_FIRST: usize = 2;

/// Runs one worker: `timers` watches the timer tube and uses the delivery
/// tube, `arms` uses the timer tube.
pub async fn work(registry: Arc<Registry>, mut timers: Session, mut arms: Session) {
    let batched = registry.fires();
    loop {
        let mut dues = match reserve(&mut timers, batched).await {
            Ok(dues) => dues,
            Err(e) => {
                recover(&mut timers, e.into()).await;
                continue;
            }
        };
        // One timer per key per call (two timers of one key, a superseded
        // one and its successor, are decided one after the other).
        while !dues.is_empty() {
            let first = first_occurrences(dues.iter().map(|d| d.timer.key_ref()));
            let mut i = 0;
            let (now, later): (Vec<Due>, Vec<Due>) = dues.into_iter().partition(|_| {
                i += 1;
                first[i - 1] == i - 1
            });
            dues = later;
            loop {
                match registry.settle(&mut timers, &mut arms, &now).await {
                    Ok(()) => break,
                    Err(Failure::Server(e)) => {
                        // Whichever connection failed, drop both: the
                        // reservations go with them and the server hands
                        // the timers out again, to be decided afresh.
                        tracing::warn!(error = %e, "firing failed; the timers will come back");
                        timers.reset();
                        arms.reset();
                        tokio::time::sleep(RETRY_PAUSE).await;
                        dues.clear();
                        break;
                    }
                    Err(other) => recover(&mut timers, other).await,
                }
            }
        }
    }
}

/// Takes the timers already due, or waits for one and takes those due
/// with it. `batched`: the server takes `reserve-batch`.
async fn reserve(timers: &mut Session, batched: bool) -> crate::client::Result<Vec<Due>> {
    let conn = timers.conn().await;
    let mut dues = Vec::new();
    let mut foreign = Vec::new();
    let take =
        |id, body: &[u8], dues: &mut Vec<Due>, foreign: &mut Vec<u64>| match Timer::decode(body) {
            Some(timer) => dues.push(Due { id, timer }),
            None => foreign.push(id),
        };
    if batched {
        // Under load the batch is all there is to it: one command.
        let mut waited = false;
        loop {
            let want = BATCH - dues.len() - foreign.len();
            let got = match conn.request(&Command::ReserveBatch(want as u32)).await? {
                Response::ReservedBatch(jobs) => jobs,
                other => return Err(crate::client::Error::Reply(other)),
            };
            let all = got.len() == want;
            for (id, body) in got {
                take(id, &body, &mut dues, &mut foreign);
            }
            if !dues.is_empty() || !foreign.is_empty() || waited {
                if !all || dues.len() + foreign.len() >= BATCH {
                    break;
                }
                continue;
            }
            let first = conn.reserve().await?;
            take(first.id, &first.body, &mut dues, &mut foreign);
            waited = true;
        }
        for id in foreign {
            tracing::warn!(id, "not a bridge timer; burying it");
            conn.bury(id, 0).await?;
        }
        return Ok(dues);
    }
    let first = conn.reserve().await?;
    take(first.id, &first.body, &mut dues, &mut foreign);
    // Ask for a few more, doubling while every one comes back reserved:
    // a lone due timer costs one extra command, a burst a few pipelines.
    let grab_one = Command::ReserveWithTimeout(Duration::ZERO);
    let mut grab = GRAB_FIRST;
    while dues.len() + foreign.len() + grab <= BATCH {
        for _ in 0..grab {
            conn.send(&grab_one).await?;
        }
        conn.flush().await?;
        let mut all = true;
        for _ in 0..grab {
            match conn.recv().await? {
                Response::Reserved { id, body } => take(id, &body, &mut dues, &mut foreign),
                _ => all = false,
            }
        }
        if !all {
            break;
        }
        grab *= 2;
    }
    for id in foreign {
        tracing::warn!(id, "not a bridge timer; burying it");
        conn.bury(id, 0).await?;
    }
    Ok(dues)
}
