//! The embedded Redis bridge (`--redis-bridge` and its kin) in a cluster
//! node: it runs on whichever node leads, and nowhere else.
//!
//! Its pending expiries are timer jobs (`bridge-timers.TUBE`), so they
//! live in the replicated job state like every job: a failover neither
//! loses them nor moves their deadlines. Its index (`--bridge-state-dir`,
//! key → current timer) is the node's own: on a new leader it is empty, or
//! stale from when this node last led. Left so, it would double expiries:
//! reconciliation at start puts a second timer for every live key (the
//! index names none), and whichever of the two fires second finds the key
//! gone and delivers again. So a new leader rebuilds its index from the
//! cluster's timers before the bridge starts (`bridge::adopt_timers`: the
//! newest timer of each key is current, as ids only grow across leaders).
//!
//! What needs care is what the old leader's bridge was doing when it died.
//! A firing worker reserves due timers, asks Redis, puts each delivery and
//! only then deletes its timer. On the new leader those timers are held
//! for the dead connection (`DEPARTED`) until their TTR runs out, 300 s
//! for a timer. So before the bridge starts here, [`hand_over`] ends each
//! such hold at once: a timer whose delivery is in the delivery tube
//! already (put and acknowledged, its delete never made) is deleted, the
//! rest go back to ready and fire afresh. Neither lost, nor doubled, nor
//! late by a TTR.
//!
//! One window stays: a consumer that reserves *and deletes* the delivery
//! before the old leader's bridge got its timer's delete in (it sends it
//! right after the put's answer, in-process), and the leader dying in
//! between. The timer is then fired again. A bridge that turns a timer
//! into its delivery in one step (one record) closes it.
//!
//! Stopping: a node stops leading only by exiting (fail-stop, `node.rs`),
//! and the bridge goes with the process. Should the role ever change
//! otherwise, [`run`] returns why, and the server stops too (`side.rs`):
//! the bridge's workers must not go on putting into a replica.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::watch;

use super::role::Role;
use crate::bridge::{self, config::Config};
use crate::fill;
use crate::shared::Shared;
use crate::store;

/// Why a new leader could not take the old leader's bridge work over.
#[derive(Debug, thiserror::Error)]
enum HandOverError {
    #[error("the store stopped: {0}")]
    Store(#[source] std::io::Error),
    #[error("the stream refused the hand-over of the old leader's timers")]
    Refused,
    #[error("rebuilding the bridge index: {0}")]
    Index(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("reading the timers back from this node's copy of the pages: {0}")]
    Bodies(String),
}

impl From<String> for HandOverError {
    fn from(why: String) -> HandOverError {
        HandOverError::Bodies(why)
    }
}

/// Completes when this node stops leading.
pub type SteppedDown = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// Waits until this node leads, hands the old leader's bridge work over
/// and runs the bridge (`bridge`, see `Side::run_bridge`) for as long as
/// this node leads. Returns why the node must stop (the bridge is never
/// to end while it serves), or `None` if it stops first.
pub async fn run<F, Fut>(
    mut role: watch::Receiver<Role>,
    shared: Arc<Shared>,
    config: Config,
    bridge: F,
) -> Option<String>
where
    F: FnOnce(Config, SteppedDown) -> Fut,
    Fut: Future<Output = std::io::Result<()>>,
{
    role.wait_for(|r| *r == Role::Leader).await.ok()?;
    if let Err(e) = hand_over(&shared, &config).await {
        return Some(format!("embedded Redis bridge: {e}"));
    }
    let stepped_down = Box::pin(async move {
        let _ = role.wait_for(|r| *r != Role::Leader).await;
    });
    Some(match bridge(config, stepped_down).await {
        Ok(()) => "this node stopped leading: the embedded Redis bridge stops".into(),
        Err(e) => format!("the embedded Redis bridge stopped: {e}"),
    })
}

/// Ends the holds of the old leader's bridge on its timers (see the module
/// docs), waits until the stream has the changes, and makes this node's
/// bridge index name the timers the cluster holds.
async fn hand_over(shared: &Shared, config: &Config) -> Result<(), HandOverError> {
    let started = Instant::now();
    let bodies = shared.store.bodies();
    // Bodies only the store keeps (`-b`) are read with no lock held.
    let (mut held, mut deliveries, stored_held, stored_deliveries) = {
        let state = shared.lock();
        let held = state.engine.departed_in(&config.timer_tube);
        let mut deliveries = Vec::new();
        if let Some(&(first, _)) = held.first() {
            // A timer's delivery is put after the timer: only later jobs.
            deliveries = state.engine.bodies_in(&config.tube);
            deliveries.retain(|(id, _)| *id > first);
        }
        let stored_held = fill::stored_among(&state.engine, &held);
        let stored_deliveries = fill::stored_among(&state.engine, &deliveries);
        (held, deliveries, stored_held, stored_deliveries)
    };
    fill::read_stored(bodies, &mut held, stored_held).await?;
    fill::read_stored(bodies, &mut deliveries, stored_deliveries).await?;
    let (submission, fired, mut timers, stored) = {
        let now = shared.clock.now();
        let mut state = shared.lock();
        let deliveries: Vec<Bytes> = deliveries.into_iter().map(|(_, body)| body).collect();
        let fired = bridge::fired_already(&held, &deliveries);
        for (id, _) in &held {
            state.engine.end_departed(*id, fired.contains(id), now);
        }
        let timers = state.engine.bodies_in(&config.timer_tube);
        let stored = fill::stored_among(&state.engine, &timers);
        (state.submit(), fired, timers, stored)
    };
    fill::read_stored(bodies, &mut timers, stored).await?;
    let (held, fired) = (held.len(), fired.len());
    // Only what the hand-over wrote can be refused: with no timer held it
    // wrote nothing, and the latest submission it would wait behind may
    // be one the replica failed as a standby.
    if submission.own {
        let mut progress = shared.store.progress();
        let kept = store::acknowledged(&*shared.store, &mut progress, submission.seq, 0)
            .await
            .map_err(HandOverError::Store)?;
        if submission.failed(&kept) {
            return Err(HandOverError::Refused);
        }
    }
    let config = config.clone();
    let count = timers.len();
    let keys = tokio::task::spawn_blocking(move || bridge::adopt_timers(&config, &timers))
        .await
        .map_err(|e| HandOverError::Index(e.into()))?
        .map_err(|e| HandOverError::Index(e.into()))?;
    tracing::info!(
        held,
        delivered_already = fired,
        timers = count,
        keys,
        took = ?started.elapsed(),
        "took over the old leader's bridge: its firing timers ended, the index rebuilt from the cluster's timers"
    );
    Ok(())
}
