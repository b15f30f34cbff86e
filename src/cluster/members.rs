//! The members a node sees: the claims in the lease bucket (`claim.rs`),
//! read once a lease TTL (a claim of a node killed with -9 ages out within
//! one). A change is told at the default log level (`status.rs`) and kept
//! beside `stats`'s figures for `/api/cluster`.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv;

use super::claim::{self, Claim};
use super::status;
use crate::shared::Shared;

/// Reads the claims every `every` for as long as the node runs.
pub async fn watch(store: kv::Store, every: Duration, shared: Arc<Shared>) {
    let mut said: Option<Vec<(String, Claim)>> = None;
    loop {
        match claim::all(&store).await {
            Ok(now) => {
                if let Some(line) = status::members_line(said.as_deref(), &now) {
                    tracing::info!(target: crate::STATUS, members = now.len(), "{line}");
                    show(&shared, &now);
                    said = Some(now);
                }
            }
            // NATS is electing or away: the node says so elsewhere.
            Err(e) => tracing::debug!("{e}"),
        }
        tokio::time::sleep(every).await;
    }
}

/// Keeps `members` beside `stats`'s figures.
fn show(shared: &Shared, members: &[(String, Claim)]) {
    let mut state = shared.lock();
    if let Some(cluster) = state.engine.cluster() {
        let mut cluster = cluster.clone();
        let each = members.iter().map(|(id, c)| (id.clone(), c.addr.clone()));
        cluster.members = each.collect();
        state.engine.set_cluster(cluster);
    }
}
