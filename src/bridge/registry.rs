//! One pending timer per key: the bridge's two decisions (made by the pure
//! functions of [`crate::bridge::decide`]) carried out, each under the
//! key's lock, from what Redis says *now*.
//!
//! * [`Registry::sync`] (after any event on a key, or when SCAN lists it):
//!   a TTL that differs from the index's puts a new timer, then records it,
//!   then deletes the old one; no TTL, or a key gone before its deadline
//!   (DEL, RENAME away, MOVE, eviction), cancels. A key gone at or after
//!   its deadline is left to its timer, which delivers it. A key Redis
//!   announced `expired` that has no timer (its events reached the bridge
//!   only after it expired, e.g. under a backlog) gets a timer due at once,
//!   so it is delivered, with the moment the bridge learnt of it as
//!   `expire_at_ms`, rather than lost; a key whose expiry was already
//!   delivered carries a mark (see `index`) and is left alone.
//! * [`Registry::settle`] (a timer came due): a superseded timer (see below)
//!   is dropped; otherwise Redis is asked again. Gone at or after its
//!   deadline: the timer becomes its delivery job in one step on a sprout
//!   (`fire`: journaled once, so a crash leaves the timer or the delivery,
//!   never both, never neither); on a classic beanstalkd the delivery is
//!   put, *then* the timer deleted (a crash in between duplicates, never
//!   loses); marked uncertain when the bridge
//!   could not have seen a deletion (see `gaps`, and a timer the index did
//!   not name). Gone well before it (a `--precheck-ms` look): deleted, the
//!   timer dropped. Expiry moved: a new timer. TTL cleared: cancelled.
//!   Still there at its time (Redis's clock behind ours), or at a
//!   precheck: released to look again at the deadline, never fired early.
//!
//! Which timer is current: the server issues job ids in increasing order
//! and a new timer is always put before it is recorded, so a timer with an
//! id *below* the index's is superseded (dropped without firing), and one
//! with an id *above* it, or with no entry at all, was put just before a
//! crash lost the index's last write: it is adopted and Redis decides.
//! A delivered mark keeps the id of the timer that delivered, so that
//! timer coming back (its delete lost with a connection) or an older one
//! of the same key is dropped, not delivered a second time. (Dropping
//! every timer the index does not name would lose the expiry of a key
//! refreshed just before a bridge crash that expired while the bridge was
//! down: SCAN cannot list it any more.)
//!
//! Here: the registry, its key locks and [`Registry::sync`]. Settling due
//! timers is in `settle`, writing a key's timers (arm, cancel, verify) in
//! `timers`; both are `impl Registry` blocks.

use std::sync::Arc;
use std::time::Duration;

use sprout_protocol::JobId;
use tokio::sync::{Mutex, MutexGuard};

use super::body::Timer;
use super::config::{Config, Node};
use super::decide::{self, Sync};
use super::expiry::{Expiry, Reading};
use super::failure::Result;
use super::index::{Index, KeyEntry};
use super::keys::{key_hash, KeyRef};
use super::punctuality::Punctuality;
use super::redis_cluster::Target;
use super::server_side::{Flavour, Session};
use super::triggers::Triggers;
use super::wall_clock::now_ms;
use super::work::Work;

/// How long a firing worker may hold a timer before the server hands it to
/// another (it only holds it across a few round trips, or retries).
pub(super) const TIMER_TTR: Duration = Duration::from_secs(300);
/// Timers are the most urgent jobs of their tube, so due ones go in order.
pub(super) const TIMER_PRI: u32 = 0;
/// A multiple of [`crate::bridge::sync::WORKERS`], so sync workers never
/// share a stripe.
const LOCK_STRIPES: usize = 1024;

/// A timer to put for `key`, due `at`, and the entry it replaces.
pub(super) struct Arm<'k> {
    pub key: KeyRef<'k>,
    pub at: i64,
    pub old: Option<KeyEntry>,
}

/// A key whose timer `cur` the server should hold: if it does not, a
/// timer for `at` is armed.
pub(super) struct Verify<'k> {
    pub key: KeyRef<'k>,
    pub at: i64,
    pub cur: KeyEntry,
}

/// A key whose timer `cur` is to be dropped.
pub(super) struct Cancel<'k> {
    pub key: KeyRef<'k>,
    pub cur: KeyEntry,
}

/// A reserved timer job.
pub struct Due {
    pub id: JobId,
    pub timer: Timer,
}

pub struct Registry {
    pub index: Index,
    pub(super) redis: Vec<Target>,
    pub(super) dbs: Vec<i64>,
    pub(super) flavour: Flavour,
    /// The server takes `fire` and `reserve-batch` (see `server_side`).
    pub(super) fires: bool,
    pub(super) triggers: Triggers,
    pub(super) with_value: bool,
    pub(super) delete_on_fire: bool,
    pub(super) precheck_ms: i64,
    /// Priority and TTR of delivered jobs.
    pub(super) pri: u32,
    pub(super) ttr: Duration,
    pub(super) locks: Vec<Mutex<()>>,
    /// Each delivery's lateness, and (`events`: followed) its distance to
    /// Redis's `expired` event.
    pub(super) punctuality: Arc<Punctuality>,
    pub(super) events: bool,
}

impl Registry {
    /// `redis` holds one connection per node of `config`; `triggers` says
    /// which deliveries are uncertain.
    pub fn new(
        config: &Config,
        index: Index,
        redis: Vec<Target>,
        flavour: Flavour,
        fires: bool,
        triggers: Triggers,
        punctuality: Arc<Punctuality>,
    ) -> Registry {
        Registry {
            index,
            redis,
            dbs: config.nodes.iter().map(Node::db).collect(),
            flavour,
            fires,
            triggers,
            with_value: config.with_value,
            delete_on_fire: config.delete_on_fire,
            precheck_ms: config.precheck.as_millis() as i64,
            pri: config.pri,
            ttr: config.ttr,
            locks: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            punctuality,
            events: config.pubsub,
        }
    }

    /// Locks the stripes of every key in `keys`, in increasing stripe order
    /// (every caller does, so two batches never deadlock).
    pub(super) async fn lock_all<'a>(&'a self, keys: &[KeyRef<'_>]) -> Vec<MutexGuard<'a, ()>> {
        let mut stripes: Vec<usize> = keys.iter().map(|&k| stripe(k)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        let mut guards = Vec::with_capacity(stripes.len());
        for s in stripes {
            guards.push(self.locks[s].lock().await);
        }
        guards
    }

    /// Whether the server fires timers in one step (and reserves in
    /// batches).
    pub fn fires(&self) -> bool {
        self.fires
    }

    pub(super) fn redis(&self, node: u16) -> &Target {
        &self.redis[usize::from(node)]
    }

    /// What Redis says now about each key, one pipelined read per node
    /// (see `redis_side`); in the order of `keys`.
    pub(super) async fn expiries(&self, keys: &[KeyRef<'_>]) -> Result<Vec<Reading>> {
        let mut out = vec![Reading::from(Expiry::Gone); keys.len()];
        let mut nodes: Vec<u16> = keys.iter().map(|k| k.node).collect();
        nodes.sort_unstable();
        nodes.dedup();
        for node in nodes {
            let at: Vec<usize> = (0..keys.len()).filter(|&i| keys[i].node == node).collect();
            let names: Vec<&[u8]> = at.iter().map(|&i| keys[i].bytes).collect();
            let got = self.redis(node).expiries(&names).await?;
            for (i, e) in at.into_iter().zip(got) {
                out[i] = e;
            }
        }
        Ok(out)
    }

    /// Brings each key's timer in line with its TTL in Redis. `session`
    /// puts into the timer tube. `batch` holds distinct keys (see
    /// [`crate::bridge::sync`]); all of them are locked for the whole batch,
    /// and Redis is read under those locks, so every decision is the one
    /// the key would get alone at that moment.
    pub async fn sync(&self, session: &mut Session, batch: &[Work]) -> Result<()> {
        // An echo needs no lock: what the index holds for a key Redis
        // said expired, a read of Redis would leave as it is, and an entry
        // is only replaced for an event queued behind this one.
        let batch: Vec<&Work> = batch
            .iter()
            .filter(|w| !decide::echo(w.hint, || self.index.get(w.node, &w.key)))
            .collect();
        if batch.is_empty() {
            return Ok(());
        }
        let keys: Vec<KeyRef> = batch.iter().map(|w| w.key_ref()).collect();
        let _guards = self.lock_all(&keys).await;
        let expiries = self.expiries(&keys).await?;
        let now = now_ms();
        let mut arms = Vec::new();
        let mut verifies = Vec::new();
        let mut cancels = Vec::new();
        for ((w, &key), expiry) in batch.iter().zip(&keys).zip(expiries) {
            match decide::sync(w.hint, self.index.get(key.node, key.bytes), expiry, now) {
                Sync::Keep => {}
                Sync::Unmark => self.index.remove(key.node, key.bytes),
                Sync::Arm { at, old } => arms.push(Arm { key, at, old }),
                Sync::Verify { at, cur } => verifies.push(Verify { key, at, cur }),
                Sync::Cancel(cur) => cancels.push(Cancel { key, cur }),
            }
        }
        self.cancel(session, &cancels).await?;
        arms.extend(self.lost_timers(session, &verifies).await?);
        self.arm(session, &arms).await
    }
}

/// The lock stripe of a key (see [`crate::bridge::keys`]).
fn stripe(key: KeyRef<'_>) -> usize {
    key_hash(key) as usize % LOCK_STRIPES
}
