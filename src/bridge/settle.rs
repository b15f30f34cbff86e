//! What becomes of due timers: [`Registry::settle`] and its four steps,
//! each a method below. The decisions are `decide::claim` (from the index
//! alone) and `decide::settle` (from what Redis says now); this file
//! carries them out in the order that makes a batch as safe as one timer.

use std::collections::HashMap;
use std::time::Duration;

use sprout_protocol::{Command, JobId, Response};

use super::decide::{self, Claim, Settle};
use super::expiry::Reading;
use super::failure::{check, Failure, Result};
use super::index::KeyEntry;
use super::keys::KeyRef;
use super::registry::{Arm, Due, Registry, TIMER_PRI};
use super::server_side::Session;
use super::wall_clock::now_ms;

/// A delivery to make: the timer's id, the delivery's body, the key.
struct Delivery<'k> {
    timer: JobId,
    body: Vec<u8>,
    key: KeyRef<'k>,
}

/// A key delivered, and the timer that delivered it.
#[derive(Clone, Copy)]
struct Delivered<'k> {
    key: KeyRef<'k>,
    timer: JobId,
}
/// What the deliveries step delivered, and (if it failed) why.
type Outcome<'k> = std::result::Result<Vec<Delivered<'k>>, (Vec<Delivered<'k>>, Failure)>;

/// A timer to ask Redis about, with its key's entry and whether the index
/// named this very timer (not one adopted after a crash).
type Ask<'d> = (&'d Due, Option<KeyEntry>, bool);

/// What a batch of due timers comes to, gathered by the first two steps
/// and carried out by the last two.
#[derive(Default)]
struct Plan<'k> {
    /// Timers to delete unfired.
    deletes: Vec<JobId>,
    /// Keys to forget once the server has answered.
    unindex: Vec<KeyRef<'k>>,
    deliveries: Vec<Delivery<'k>>,
    releases: Vec<Command>,
    /// Successors to put, and the timers they replace (deleted after).
    rearms: Vec<Arm<'k>>,
    rearmed: Vec<JobId>,
}

impl Registry {
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
        let keys: Vec<KeyRef> = dues.iter().map(|d| d.timer.key_ref()).collect();
        let _guards = self.lock_all(&keys).await;
        let mut plan = Plan::default();
        let asks = self.claim(dues, &mut plan);
        let expiries = self.ask_redis(&asks).await?;
        let now = now_ms();
        self.plan(&asks, expiries, now, &mut plan);
        let (delivered, failure) = match self.deliver(timers, &mut plan).await {
            Ok(delivered) => (delivered, None),
            Err((delivered, failure)) => (delivered, Some(failure)),
        };
        self.record(dues, delivered, now);
        if let Some(failure) = failure {
            return Err(failure);
        }
        for key in plan.unindex {
            self.index.remove(key.node, key.bytes);
        }
        self.rearm(timers, arms, &plan.rearms, plan.rearmed).await
    }

    /// Step 1, from the index alone: superseded, cancelled and adopted
    /// timers; returns the timers to ask Redis about.
    fn claim<'d>(&self, dues: &'d [Due], plan: &mut Plan<'d>) -> Vec<Ask<'d>> {
        let mut asks = Vec::new();
        for due in dues {
            let key = due.timer.key_ref();
            let (id, at) = (due.id, due.timer.expire_at_ms);
            match decide::claim(self.index.get(key.node, key.bytes), id, at) {
                Claim::Delivered | Claim::Superseded => plan.deletes.push(id),
                Claim::Tombstone => {
                    plan.deletes.push(id);
                    plan.unindex.push(key);
                }
                Claim::Adopt { adopted, drop } => {
                    self.index.set(key.node, key.bytes, adopted);
                    plan.deletes.push(drop);
                    asks.push((due, Some(adopted), false));
                }
                Claim::Ask(current) => asks.push((due, current, current.is_some())),
            }
        }
        asks
    }

    /// Step 2: Redis, now, one answer per timer of `asks`. With
    /// `--delete-on-fire`, a key past its deadline is deleted if its
    /// expiry is unchanged (one script call each); a precheck, before the
    /// deadline, only looks.
    async fn ask_redis(&self, asks: &[Ask<'_>]) -> Result<Vec<Reading>> {
        let asked_ms = now_ms();
        let deletes_key = |d: &Due| self.delete_on_fire && asked_ms >= d.timer.expire_at_ms;
        let looks: Vec<KeyRef> = asks
            .iter()
            .filter(|(d, _, _)| !deletes_key(d))
            .map(|(d, _, _)| d.timer.key_ref())
            .collect();
        let mut looked = self.expiries(&looks).await?.into_iter();
        let mut expiries = Vec::with_capacity(asks.len());
        for (due, _, _) in asks {
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
        Ok(expiries)
    }

    /// Each asked timer's decision from Redis's answer, into `plan`:
    /// deliveries, drops, releases and re-arms.
    fn plan<'d>(&self, asks: &[Ask<'d>], expiries: Vec<Reading>, now: i64, plan: &mut Plan<'d>) {
        for (&(due, current, indexed), expiry) in asks.iter().zip(expiries) {
            let (id, timer) = (due.id, &due.timer);
            let key = timer.key_ref();
            match decide::settle(current, expiry, timer.expire_at_ms, now) {
                Settle::Deliver => {
                    // A timer the index did not name was put just before a
                    // crash: the key was not watched since.
                    let uncertain =
                        !indexed || self.triggers.uncertain(timer.node, timer.expire_at_ms);
                    let body = timer.delivery(now, uncertain);
                    plan.deliveries.push(Delivery {
                        timer: id,
                        body,
                        key,
                    });
                }
                Settle::Drop { unindex: known } => {
                    plan.deletes.push(id);
                    if known {
                        plan.unindex.push(key);
                    }
                }
                Settle::Release { until_ms } => plan.releases.push(Command::Release {
                    id,
                    pri: TIMER_PRI,
                    delay: self.flavour.delay(until_ms, now),
                }),
                Settle::Rearm { at } => {
                    plan.rearms.push(Arm {
                        key,
                        at,
                        old: current,
                    });
                    plan.rearmed.push(id);
                }
            }
        }
    }

    /// Step 3: the deliveries, then what is left of the timers (deletes
    /// and releases), the way the server allows.
    async fn deliver<'k>(&self, timers: &mut Session, plan: &mut Plan<'k>) -> Outcome<'k> {
        let deliveries = std::mem::take(&mut plan.deliveries);
        let deletes = std::mem::take(&mut plan.deletes);
        let releases = std::mem::take(&mut plan.releases);
        match self.fires {
            true => self.fire_each(timers, deliveries, deletes, releases).await,
            false => {
                self.put_then_delete(timers, deliveries, deletes, releases)
                    .await
            }
        }
    }

    /// Step 4, once the server answered: each key `delivered` gets its
    /// delivered mark (made at `now`), and counts in the punctuality
    /// figures.
    fn record(&self, dues: &[Due], delivered: Vec<Delivered<'_>>, now: i64) {
        self.measure(dues, &delivered, now);
        for Delivered { key, timer } in delivered {
            let mark = KeyEntry::delivered(now, timer);
            self.index.set(key.node, key.bytes, mark);
        }
    }

    /// Re-armed timers: the successors put and recorded (through `arms`),
    /// then the timers they replace deleted (through `timers`).
    async fn rearm(
        &self,
        timers: &mut Session,
        arms: &mut Session,
        rearms: &[Arm<'_>],
        rearmed: Vec<JobId>,
    ) -> Result<()> {
        if rearms.is_empty() {
            return Ok(());
        }
        self.arm(arms, rearms).await?;
        let deletes: Vec<Command> = rearmed.into_iter().map(Command::Delete).collect();
        check(timers.pipeline(&deletes).await?, |r| {
            matches!(r, Response::Deleted | Response::NotFound)
        })
    }

    /// Counts `delivered` (of `dues`, fired at `fired_ms`, put just now)
    /// in the punctuality figures.
    fn measure(&self, dues: &[Due], delivered: &[Delivered<'_>], fired_ms: i64) {
        if delivered.is_empty() {
            return;
        }
        let put_ms = now_ms();
        let expiries: HashMap<JobId, i64> =
            dues.iter().map(|d| (d.id, d.timer.expire_at_ms)).collect();
        let measured = delivered
            .iter()
            .filter_map(|d| Some((d.key, *expiries.get(&d.timer)?)));
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
    ) -> Outcome<'k> {
        let fired = deliveries.len();
        let mut commands = Vec::with_capacity(fired + deletes.len() + releases.len());
        let mut keys = Vec::with_capacity(fired);
        for Delivery { timer, body, key } in deliveries {
            commands.push(Command::Fire {
                id: timer,
                pri: self.pri,
                ttr: self.ttr,
                body: body.into(),
            });
            keys.push(Delivered { key, timer });
        }
        commands.extend(deletes.into_iter().map(Command::Delete));
        commands.extend(releases);
        let replies = timers
            .pipeline(&commands)
            .await
            .map_err(|e| (Vec::new(), e.into()))?;
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
                failure.get_or_insert(Failure::reply(reply));
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
    ) -> Outcome<'k> {
        let mut puts = Vec::with_capacity(deliveries.len());
        let mut delivered = Vec::with_capacity(deliveries.len());
        for Delivery { timer, body, key } in deliveries {
            puts.push(Command::Put {
                pri: self.pri,
                delay: Duration::ZERO,
                ttr: self.ttr,
                body: body.into(),
                tags: None,
            });
            deletes.push(timer);
            delivered.push(Delivered { key, timer });
        }
        let put = timers.pipeline(&puts).await.map_err(Failure::from);
        put.and_then(|replies| {
            check(replies, |r| {
                matches!(r, Response::Inserted(_) | Response::BuriedId(_))
            })
        })
        .map_err(|f| (Vec::new(), f))?;
        let mut commands: Vec<Command> = deletes.into_iter().map(Command::Delete).collect();
        commands.extend(releases);
        let done = timers.pipeline(&commands).await.map_err(Failure::from);
        let done = done.and_then(|replies| {
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
}
