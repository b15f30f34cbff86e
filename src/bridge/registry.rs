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
//! of the same key is dropped, not delivered a second time. (Dropping every timer the index does not name would lose the expiry of
//! a key refreshed just before a bridge crash that expired while the
//! bridge was down: SCAN cannot list it any more.)

use std::sync::Arc;
use std::time::Duration;

use sprout_protocol::{Command, JobId, Response};
use tokio::sync::{Mutex, MutexGuard};

use super::body::Timer;
use super::clock::now_ms;
use super::config::{Config, Node};
use super::decide::{self, Claim, Settle, Sync};
use super::failure::{Failure, Result};
use super::index::{Index, KeyEntry, CANCELLED};
use super::keys::key_hash;
use super::punctuality::Punctuality;
use super::redis_cluster::Target;
use super::redis_side::{Expiry, Reading};
use super::server_side::{Flavour, Session};
use super::triggers::Triggers;
use super::work::Work;
use crate::client;

/// How long a firing worker may hold a timer before the server hands it to
/// another (it only holds it across a few round trips, or retries).
const TIMER_TTR: Duration = Duration::from_secs(300);
/// Timers are the most urgent jobs of their tube, so due ones go in order.
const TIMER_PRI: u32 = 0;
/// A multiple of [`crate::bridge::sync::WORKERS`], so sync workers never
/// share a stripe.
const LOCK_STRIPES: usize = 1024;

/// A timer to put: node, key, expiry, and the entry it replaces.
type Arm<'a> = (u16, &'a [u8], i64, Option<KeyEntry>);

/// A delivery to make: the timer's id, the delivery's body, the key.
type Delivery<'k> = (JobId, Vec<u8>, (u16, &'k [u8]));
/// A key delivered, and the timer that delivered it.
type Delivered<'k> = ((u16, &'k [u8]), JobId);
/// What step 3 of a fire delivered, and (if it failed) why.
type Step3<'k> = std::result::Result<Vec<Delivered<'k>>, (Vec<Delivered<'k>>, Failure)>;

/// A reserved timer job.
pub struct Due {
    pub id: JobId,
    pub timer: Timer,
}

pub struct Registry {
    pub index: Index,
    redis: Vec<Target>,
    dbs: Vec<i64>,
    flavour: Flavour,
    /// The server takes `fire` and `reserve-batch` (see `server_side`).
    fires: bool,
    triggers: Triggers,
    with_value: bool,
    delete_on_fire: bool,
    precheck_ms: i64,
    /// Priority and TTR of delivered jobs.
    pri: u32,
    ttr: Duration,
    locks: Vec<Mutex<()>>,
    /// Each delivery's lateness, and (`events`: followed) its distance to
    /// Redis's `expired` event.
    punctuality: Arc<Punctuality>,
    events: bool,
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
    async fn lock_all<'a>(&'a self, keys: &[(u16, &[u8])]) -> Vec<MutexGuard<'a, ()>> {
        let mut stripes: Vec<usize> = keys.iter().map(|&(n, k)| stripe(n, k)).collect();
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

    fn redis(&self, node: u16) -> &Target {
        &self.redis[usize::from(node)]
    }

    /// What Redis says now about each key, one pipelined read per node
    /// (see `redis_side`); in the order of `keys`.
    async fn expiries(&self, keys: &[(u16, &[u8])]) -> Result<Vec<Reading>> {
        let mut out = vec![Reading::from(Expiry::Gone); keys.len()];
        let mut nodes: Vec<u16> = keys.iter().map(|k| k.0).collect();
        nodes.sort_unstable();
        nodes.dedup();
        for node in nodes {
            let at: Vec<usize> = (0..keys.len()).filter(|&i| keys[i].0 == node).collect();
            let names: Vec<&[u8]> = at.iter().map(|&i| keys[i].1).collect();
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
        let keys: Vec<(u16, &[u8])> = batch.iter().map(|w| (w.node, w.key.as_slice())).collect();
        let _guards = self.lock_all(&keys).await;
        let expiries = self.expiries(&keys).await?;
        let now = now_ms();
        let mut arms = Vec::new();
        let mut verifies = Vec::new();
        let mut cancels = Vec::new();
        for ((w, &(node, key)), expiry) in batch.iter().zip(&keys).zip(expiries) {
            match decide::sync(w.hint, self.index.get(node, key), expiry, now) {
                Sync::Keep => {}
                Sync::Unmark => self.index.remove(node, key),
                Sync::Arm { at, old } => arms.push((node, key, at, old)),
                Sync::Verify { at, cur } => verifies.push((node, key, at, cur)),
                Sync::Cancel(cur) => cancels.push((node, key, cur)),
            }
        }
        self.cancel(session, &cancels).await?;
        arms.extend(self.lost_timers(session, &verifies).await?);
        self.arm(session, &arms).await
    }

    /// Handles due timers reserved on `timers` (distinct keys; the
    /// connection uses the delivery tube); re-arms through `arms` (which
    /// uses the timer tube). All their keys are locked for the whole batch.
    ///
    /// The order of the steps is what makes a batch as safe as one timer at
    /// a time: Redis is asked (one pipeline) under the locks; then on a
    /// sprout each delivery is its timer's `fire` (one step each, all in one
    /// pipeline with the deletes and releases of the timers not delivered);
    /// on a classic beanstalkd every delivery is put (one pipeline, answers
    /// awaited) *before* any timer is deleted (another pipeline). A timer
    /// re-armed is deleted only once its successor is put and recorded. The
    /// index is only changed after the server has answered. A connection
    /// lost anywhere drops every reservation: the timers come back and are
    /// decided afresh (on a classic server, deliveries already put are
    /// duplicated, never lost; a fire either happened, and its timer is
    /// gone, or did not).
    pub async fn settle(
        &self,
        timers: &mut Session,
        arms: &mut Session,
        dues: &[Due],
    ) -> Result<()> {
        let keys: Vec<(u16, &[u8])> = dues
            .iter()
            .map(|d| (d.timer.node, d.timer.key.as_slice()))
            .collect();
        let _guards = self.lock_all(&keys).await;
        // Step 1, from the index alone: superseded, cancelled, adopted.
        let mut deletes: Vec<JobId> = Vec::new();
        let mut unindex: Vec<(u16, &[u8])> = Vec::new();
        // Each timer to ask Redis about, with its key's entry and whether
        // the index named this very timer (not one adopted after a crash).
        let mut ask: Vec<(&Due, Option<KeyEntry>, bool)> = Vec::new();
        for (due, &(node, key)) in dues.iter().zip(&keys) {
            let (id, at) = (due.id, due.timer.expire_at_ms);
            match decide::claim(self.index.get(node, key), id, at) {
                Claim::Delivered | Claim::Superseded => deletes.push(id),
                Claim::Tombstone => {
                    deletes.push(id);
                    unindex.push((node, key));
                }
                Claim::Adopt { adopted, drop } => {
                    self.index.set(node, key, adopted);
                    deletes.push(drop);
                    ask.push((due, Some(adopted), false));
                }
                Claim::Ask(current) => ask.push((due, current, current.is_some())),
            }
        }
        // Step 2: Redis, now. With `--delete-on-fire`, a key past its
        // deadline is deleted if its expiry is unchanged (one script call
        // each); a precheck, before the deadline, only looks.
        let asked_ms = now_ms();
        let deletes_key = |d: &Due| self.delete_on_fire && asked_ms >= d.timer.expire_at_ms;
        let looks: Vec<(u16, &[u8])> = ask
            .iter()
            .filter(|(d, _, _)| !deletes_key(d))
            .map(|(d, _, _)| (d.timer.node, d.timer.key.as_slice()))
            .collect();
        let mut looked = self.expiries(&looks).await?.into_iter();
        let mut expiries = Vec::with_capacity(ask.len());
        for (due, _, _) in &ask {
            let t = &due.timer;
            expiries.push(match deletes_key(due) {
                true => {
                    self.redis(t.node)
                        .delete_if_due(&t.key, t.expire_at_ms, decide::EXPIRY_SLACK_MS)
                        .await?
                }
                false => looked.next().expect("one answer per key asked"),
            });
        }
        let now = now_ms();
        // Deliveries (timer id, body, key), releases, timers to re-arm.
        let mut deliveries = Vec::new();
        let mut releases = Vec::new();
        let mut rearms = Vec::new();
        let mut rearmed = Vec::new();
        for (&(due, current, indexed), expiry) in ask.iter().zip(expiries) {
            let (id, timer) = (due.id, &due.timer);
            let key = (timer.node, timer.key.as_slice());
            match decide::settle(current, expiry, timer.expire_at_ms, now) {
                Settle::Deliver => {
                    // A timer the index did not name was put just before a
                    // crash: the key was not watched since.
                    let uncertain =
                        !indexed || self.triggers.uncertain(timer.node, timer.expire_at_ms);
                    deliveries.push((id, timer.delivery(now, uncertain), key));
                }
                Settle::Drop { unindex: known } => {
                    deletes.push(id);
                    if known {
                        unindex.push(key);
                    }
                }
                Settle::Release { until_ms } => releases.push(Command::Release {
                    id,
                    pri: TIMER_PRI,
                    delay: self.flavour.delay(until_ms, now),
                }),
                Settle::Rearm { at } => {
                    rearms.push((key.0, key.1, at, current));
                    rearmed.push(id);
                }
            }
        }
        // Step 3: the deliveries, then what is left of the timers.
        let outcome = match self.fires {
            true => self.fire_each(timers, deliveries, deletes, releases).await,
            false => {
                self.put_then_delete(timers, deliveries, deletes, releases)
                    .await
            }
        };
        let (delivered, failure) = match outcome {
            Ok(delivered) => (delivered, None),
            Err((delivered, failure)) => (delivered, Some(failure)),
        };
        // Step 4: the index, once the server answered.
        self.measure(dues, &delivered, now);
        for ((node, key), timer) in delivered {
            self.index.set(node, key, KeyEntry::delivered(now, timer));
        }
        if let Some(failure) = failure {
            return Err(failure);
        }
        for (node, key) in unindex {
            self.index.remove(node, key);
        }
        // Re-armed timers: the successor first, then the timer goes.
        if !rearms.is_empty() {
            self.arm(arms, &rearms).await?;
            let deletes: Vec<Command> = rearmed.into_iter().map(Command::Delete).collect();
            check(pipeline(timers, &deletes).await?, |r| {
                matches!(r, Response::Deleted | Response::NotFound)
            })?;
        }
        Ok(())
    }

    /// Counts `delivered` (of `dues`, fired at `fired_ms`, put just now)
    /// in the punctuality figures.
    fn measure(&self, dues: &[Due], delivered: &[Delivered<'_>], fired_ms: i64) {
        if delivered.is_empty() {
            return;
        }
        let put_ms = now_ms();
        let expiries: std::collections::HashMap<JobId, i64> =
            dues.iter().map(|d| (d.id, d.timer.expire_at_ms)).collect();
        let measured = delivered
            .iter()
            .filter_map(|&((node, key), id)| Some((node, key, *expiries.get(&id)?)));
        self.punctuality
            .delivered(measured, fired_ms, put_ms, self.events);
    }

    /// Step 3 on a sprout, in one pipeline: each delivery as its timer's
    /// `fire`, then the deletes and releases. Returns the keys delivered
    /// (also when another answer failed, so the index marks them).
    async fn fire_each<'k>(
        &self,
        timers: &mut Session,
        deliveries: Vec<Delivery<'k>>,
        deletes: Vec<JobId>,
        releases: Vec<Command>,
    ) -> Step3<'k> {
        let fired = deliveries.len();
        let mut commands = Vec::with_capacity(fired + deletes.len() + releases.len());
        let mut keys = Vec::with_capacity(fired);
        for (id, body, key) in deliveries {
            commands.push(Command::Fire {
                id,
                pri: self.pri,
                ttr: self.ttr,
                body: body.into(),
            });
            keys.push((key, id));
        }
        commands.extend(deletes.into_iter().map(Command::Delete));
        commands.extend(releases);
        let replies = pipeline(timers, &commands)
            .await
            .map_err(|f| (Vec::new(), f))?;
        let mut delivered = Vec::with_capacity(fired);
        let mut failure = None;
        for (i, reply) in replies.into_iter().enumerate() {
            let ok = match i < fired {
                // Not found: the reservation was lost (its TTR ran out), so
                // the timer went back to be fired by whoever holds it now.
                true => match reply {
                    Response::Inserted(_) => {
                        delivered.push(keys[i]);
                        true
                    }
                    Response::NotFound => true,
                    _ => false,
                },
                false => matches!(
                    reply,
                    Response::Deleted | Response::NotFound | Response::Released
                ),
            };
            if !ok {
                failure.get_or_insert(Failure::Server(client::Error::Reply(reply)));
            }
        }
        match failure {
            None => Ok(delivered),
            Some(f) => Err((delivered, f)),
        }
    }

    /// Step 3 on a classic beanstalkd: the deliveries put (answers
    /// awaited), then the delivered timers deleted with the others, and the
    /// releases.
    async fn put_then_delete<'k>(
        &self,
        timers: &mut Session,
        deliveries: Vec<Delivery<'k>>,
        mut deletes: Vec<JobId>,
        releases: Vec<Command>,
    ) -> Step3<'k> {
        let mut puts = Vec::with_capacity(deliveries.len());
        let mut delivered = Vec::with_capacity(deliveries.len());
        for (id, body, key) in deliveries {
            puts.push(Command::Put {
                pri: self.pri,
                delay: Duration::ZERO,
                ttr: self.ttr,
                body: body.into(),
                tags: None,
            });
            deletes.push(id);
            delivered.push((key, id));
        }
        let put = pipeline(timers, &puts).await.and_then(|replies| {
            check(replies, |r| {
                matches!(r, Response::Inserted(_) | Response::BuriedId(_))
            })
        });
        put.map_err(|f| (Vec::new(), f))?;
        let mut commands: Vec<Command> = deletes.into_iter().map(Command::Delete).collect();
        commands.extend(releases);
        let done = pipeline(timers, &commands).await.and_then(|replies| {
            check(replies, |r| {
                matches!(
                    r,
                    Response::Deleted | Response::NotFound | Response::Released
                )
            })
        });
        match done {
            Ok(()) => Ok(delivered),
            // The deliveries are out: mark them, so their timers, should
            // they come back, are duplicates the index knows of.
            Err(f) => Err((delivered, f)),
        }
    }

    /// For each `(node, key, at, old)`: puts a timer for `at`, records it,
    /// then drops `old`'s timer. The puts go out in one pipeline, the
    /// deletes in another, after every new timer is recorded.
    async fn arm(&self, session: &mut Session, arms: &[Arm<'_>]) -> Result<()> {
        if arms.is_empty() {
            return Ok(());
        }
        // Connected before the clock is read: a delay counted from before
        // a reconnect (its backoff reaches seconds while the server is
        // down) would make every timer armed meanwhile fire that much late.
        session.conn().await;
        let mut puts = Vec::with_capacity(arms.len());
        let now = now_ms();
        for &(node, key, at, _) in arms {
            let value = if self.with_value {
                self.redis(node).value(key).await?
            } else {
                None
            };
            let timer = Timer {
                node,
                db: self.dbs[usize::from(node)],
                key: key.to_vec(),
                expire_at_ms: at,
                value,
            };
            // `now` was read before the put: the server's clock is later
            // when it computes the ready time, so never early.
            puts.push(Command::Put {
                pri: TIMER_PRI,
                delay: self
                    .flavour
                    .delay(decide::timer_due(at, now, self.precheck_ms), now),
                ttr: TIMER_TTR,
                body: timer.encode().into(),
                tags: None,
            });
        }
        let replies = pipeline(session, &puts).await?;
        let mut failure = None;
        let mut cleanup = Vec::new();
        for (&(node, key, at, old), reply) in arms.iter().zip(replies) {
            match reply {
                Response::Inserted(id) => {
                    let entry = KeyEntry {
                        expire_at_ms: at,
                        timer: id,
                    };
                    self.index.set(node, key, entry);
                    if let Some(old) = old {
                        cleanup.push(Command::Delete(old.timer));
                    }
                }
                Response::BuriedId(id) => {
                    // The server could not queue it; a buried timer never fires.
                    cleanup.push(Command::Delete(id));
                    failure.get_or_insert(Failure::Server(client::Error::Reply(
                        Response::BuriedId(id),
                    )));
                }
                other => {
                    failure.get_or_insert(Failure::Server(client::Error::Reply(other)));
                }
            }
        }
        for reply in pipeline(session, &cleanup).await? {
            if !matches!(reply, Response::Deleted | Response::NotFound) {
                failure.get_or_insert(Failure::Server(client::Error::Reply(reply)));
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// Drops each key's timer (one pipeline) and forgets the key; leaves a
    /// tombstone where a firing worker holds the timer (the server lets
    /// only that worker delete it: NOT_FOUND, but a `peek` finds it). A
    /// timer that is gone altogether (deleted before a crash the index's
    /// last write did not survive) leaves nothing behind.
    async fn cancel(
        &self,
        session: &mut Session,
        cancels: &[(u16, &[u8], KeyEntry)],
    ) -> Result<()> {
        let deletes: Vec<Command> = cancels.iter().map(|c| Command::Delete(c.2.timer)).collect();
        let mut held = Vec::new();
        for (&cancel, reply) in cancels.iter().zip(pipeline(session, &deletes).await?) {
            match reply {
                Response::Deleted => self.index.remove(cancel.0, cancel.1),
                Response::NotFound => held.push(cancel),
                other => return Err(Failure::Server(client::Error::Reply(other))),
            }
        }
        let peeks: Vec<Command> = held.iter().map(|c| Command::Peek(c.2.timer)).collect();
        for (&(node, key, cur), reply) in held.iter().zip(pipeline(session, &peeks).await?) {
            match reply {
                Response::Found { .. } => {
                    let tombstone = KeyEntry {
                        expire_at_ms: CANCELLED,
                        timer: cur.timer,
                    };
                    self.index.set(node, key, tombstone);
                }
                Response::NotFound => self.index.remove(node, key),
                other => return Err(Failure::Server(client::Error::Reply(other))),
            }
        }
        Ok(())
    }

    /// Of `(node, key, at, cur)`, the keys whose timer `cur` the server no
    /// longer holds (one pipeline of peeks), as timers to arm for `at`.
    async fn lost_timers<'a>(
        &self,
        session: &mut Session,
        verifies: &[(u16, &'a [u8], i64, KeyEntry)],
    ) -> Result<Vec<Arm<'a>>> {
        let peeks: Vec<Command> = verifies.iter().map(|v| Command::Peek(v.3.timer)).collect();
        let mut lost = Vec::new();
        for (&(node, key, at, cur), reply) in verifies.iter().zip(pipeline(session, &peeks).await?)
        {
            let exists = match reply {
                Response::Found { body, .. } => {
                    Timer::decode(&body).is_some_and(|t| decide::is_timer_of(&t, node, key, cur))
                }
                Response::NotFound => false,
                other => return Err(Failure::Server(client::Error::Reply(other))),
            };
            if !exists {
                tracing::info!(key = %String::from_utf8_lossy(key), "timer lost by the server; re-arming");
                lost.push((node, key, at, None));
            }
        }
        Ok(lost)
    }
}

/// The lock stripe of a key (see [`crate::bridge::keys`]).
fn stripe(node: u16, key: &[u8]) -> usize {
    key_hash(node, key) as usize % LOCK_STRIPES
}

/// Fails with the first answer `ok` refuses.
fn check(replies: Vec<Response>, ok: impl Fn(&Response) -> bool) -> Result<()> {
    match replies.into_iter().find(|r| !ok(r)) {
        None => Ok(()),
        Some(reply) => Err(Failure::Server(client::Error::Reply(reply))),
    }
}

/// Sends `commands` in one pipeline (one write) and reads their answers,
/// in order.
async fn pipeline(session: &mut Session, commands: &[Command]) -> Result<Vec<Response>> {
    if commands.is_empty() {
        return Ok(Vec::new());
    }
    let conn = session.conn().await;
    for c in commands {
        conn.send(c).await?;
    }
    conn.flush().await?;
    let mut replies = Vec::with_capacity(commands.len());
    for _ in commands {
        replies.push(conn.recv().await?);
    }
    Ok(replies)
}
