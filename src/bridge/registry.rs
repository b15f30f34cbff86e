//! One pending timer per key: the two decisions the bridge makes, each
//! taken under the key's lock, from what Redis says *now*.
//!
//! * [`Registry::sync`] (after any event on a key, or when SCAN lists it):
//!   a TTL that differs from the index's puts a new timer, then records it,
//!   then deletes the old one; no TTL, or a key gone before its deadline
//!   (DEL, RENAME away, MOVE, eviction), cancels. A key gone at or after
//!   its deadline is left to its timer, which delivers it.
//! * [`Registry::fire`] (a timer came due): a superseded timer (see below)
//!   is dropped; otherwise Redis is asked again. Gone: the
//!   delivery job is put, *then* the timer deleted (a crash in between
//!   duplicates, never loses). Expiry moved: a new timer. TTL cleared:
//!   cancelled. Still there at its time (Redis's clock behind ours):
//!   released to try again a few ms later, never fired early.
//!
//! Which timer is current: the server issues job ids in increasing order
//! and a new timer is always put before it is recorded, so a timer with an
//! id *below* the index's is superseded (dropped without firing), and one
//! with an id *above* it, or with no entry at all, was put just before a
//! crash lost the index's last write: it is adopted and Redis decides.
//! (Dropping every timer the index does not name would lose the expiry of
//! a key refreshed just before a bridge crash that expired while the
//! bridge was down: SCAN cannot list it any more.)

use std::hash::{Hash, Hasher};
use std::time::Duration;

use sprout_protocol::{Command, JobId, Response};
use tokio::sync::{Mutex, MutexGuard};

use super::body::Timer;
use super::index::{Entry, Index, CANCELLED};
use super::now_ms;
use super::redis_side::{Expiry, Redis};
use super::server_side::{Flavour, Session};
use crate::client;

/// How long a firing worker may hold a timer before the server hands it to
/// another (it only holds it across a few round trips, or retries).
const TIMER_TTR: Duration = Duration::from_secs(300);
/// Timers are the most urgent jobs of their tube, so due ones go in order.
const TIMER_PRI: u32 = 0;
/// When Redis still has a key at its deadline, look again this many ms
/// later (rounded up to a second for a classic beanstalkd).
const RECHECK_MS: i64 = 2;
/// A key gone this close to its deadline counts as expired, not deleted
/// (Redis's clock may run slightly ahead of ours).
const EXPIRY_SLACK_MS: i64 = 50;
const LOCK_STRIPES: usize = 1024;

/// Why a decision could not be completed; the caller retries.
#[derive(Debug)]
pub enum Failure {
    Server(client::Error),
    Redis(redis::RedisError),
    Index(std::io::Error),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Server(e) => write!(f, "job server: {e}"),
            Failure::Redis(e) => write!(f, "redis: {e}"),
            Failure::Index(e) => write!(f, "{e}"),
        }
    }
}

impl From<client::Error> for Failure {
    fn from(e: client::Error) -> Failure {
        Failure::Server(e)
    }
}

impl From<redis::RedisError> for Failure {
    fn from(e: redis::RedisError) -> Failure {
        Failure::Redis(e)
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Failure {
        Failure::Index(e)
    }
}

type Result<T> = std::result::Result<T, Failure>;

/// What the sync of a key is told about why it runs.
#[derive(Clone, Copy, Debug, Default)]
pub struct Hint {
    /// Redis announced the key `expired`: leave its timer to fire.
    pub expired: bool,
    /// Check that the indexed timer really exists (after a start or a lost
    /// server connection: a server without `-b` forgets its jobs).
    pub verify: bool,
}

/// A reserved timer job.
pub struct Due {
    pub id: JobId,
    pub timer: Timer,
}

/// What firing needs besides the key state.
pub struct Delivery {
    pub pri: u32,
    pub ttr: Duration,
}

pub struct Registry {
    pub index: Index,
    redis: Vec<Redis>,
    dbs: Vec<i64>,
    flavour: Flavour,
    with_value: bool,
    delete_on_fire: bool,
    delivery: Delivery,
    locks: Vec<Mutex<()>>,
}

impl Registry {
    pub fn new(
        index: Index,
        redis: Vec<Redis>,
        dbs: Vec<i64>,
        flavour: Flavour,
        with_value: bool,
        delete_on_fire: bool,
        delivery: Delivery,
    ) -> Registry {
        Registry {
            index,
            redis,
            dbs,
            flavour,
            with_value,
            delete_on_fire,
            delivery,
            locks: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
        }
    }

    async fn lock(&self, node: u16, key: &[u8]) -> MutexGuard<'_, ()> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (node, key).hash(&mut h);
        self.locks[h.finish() as usize % LOCK_STRIPES].lock().await
    }

    fn redis(&self, node: u16) -> Redis {
        self.redis[usize::from(node)].clone()
    }

    /// Brings the key's timer in line with its TTL in Redis. `session`
    /// puts into the timer tube.
    pub async fn sync(
        &self,
        session: &mut Session,
        node: u16,
        key: &[u8],
        hint: Hint,
    ) -> Result<()> {
        let _guard = self.lock(node, key).await;
        let expiry = self.redis(node).expiry(key).await?;
        let current = self.index.get(node, key)?;
        match (expiry, current) {
            (Expiry::At(at), Some(cur)) if cur.expire_at_ms == at => {
                if hint.verify && !self.timer_exists(session, node, key, cur).await? {
                    tracing::info!(key = %String::from_utf8_lossy(key), "timer lost by the server; re-arming");
                    self.arm(session, node, key, at, None).await?;
                }
                Ok(())
            }
            (Expiry::At(at), _) => self.arm(session, node, key, at, current).await,
            (Expiry::Gone, Some(cur))
                if hint.expired || cur.expire_at_ms - EXPIRY_SLACK_MS <= now_ms() =>
            {
                Ok(())
            }
            (Expiry::Gone | Expiry::Persistent, Some(cur)) if cur.expire_at_ms != CANCELLED => {
                self.cancel(session, node, key, cur).await
            }
            _ => Ok(()),
        }
    }

    /// Handles a due timer reserved on `timers`; delivers through `out`.
    pub async fn fire(&self, timers: &mut Session, out: &mut Session, due: &Due) -> Result<()> {
        let Due { id, timer } = due;
        let (node, key) = (timer.node, timer.key.as_slice());
        let _guard = self.lock(node, key).await;
        let mut current = self.index.get(node, key)?;
        match current {
            Some(cur) if cur.timer > *id => return delete(timers, *id).await,
            Some(cur) if cur.timer == *id && cur.expire_at_ms == CANCELLED => {
                delete(timers, *id).await?;
                return Ok(self.index.remove(node, key)?);
            }
            Some(cur) if cur.timer < *id => {
                // Newer than the index: a crash lost the index's last write.
                let adopted = Entry {
                    expire_at_ms: timer.expire_at_ms,
                    timer: *id,
                };
                self.index.set(node, key, adopted)?;
                delete(timers, cur.timer).await?;
                current = Some(adopted);
            }
            _ => {}
        }
        let mut redis = self.redis(node);
        let expiry = if self.delete_on_fire {
            redis.delete_if_due(key, timer.expire_at_ms).await?
        } else {
            redis.expiry(key).await?
        };
        match expiry {
            Expiry::Gone => {
                let body = timer.delivery(now_ms());
                let d = &self.delivery;
                out.conn()
                    .await
                    .put(d.pri, Duration::ZERO, d.ttr, body)
                    .await?;
                delete(timers, *id).await?;
                if current.is_some() {
                    self.index.remove(node, key)?;
                }
            }
            Expiry::Persistent => {
                delete(timers, *id).await?;
                if current.is_some() {
                    self.index.remove(node, key)?;
                }
            }
            Expiry::At(at) if at == timer.expire_at_ms => {
                let now = now_ms();
                let delay = self.flavour.delay(at.max(now + RECHECK_MS), now);
                timers.conn().await.release(*id, TIMER_PRI, delay).await?;
            }
            Expiry::At(at) => {
                self.arm(timers, node, key, at, current).await?;
                delete(timers, *id).await?;
            }
        }
        Ok(())
    }

    /// Puts a timer for `at`, records it, then drops `old`'s timer.
    async fn arm(
        &self,
        session: &mut Session,
        node: u16,
        key: &[u8],
        at: i64,
        old: Option<Entry>,
    ) -> Result<()> {
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
        let delay = self.flavour.delay(at, now_ms());
        let put = session
            .conn()
            .await
            .put(TIMER_PRI, delay, TIMER_TTR, timer.encode())
            .await?;
        let id = match put {
            client::Put::Inserted(id) => id,
            client::Put::Buried(id) => {
                // The server could not queue it; a buried timer never fires.
                delete(session, id).await?;
                return Err(Failure::Server(client::Error::Reply(Response::BuriedId(
                    id,
                ))));
            }
        };
        self.index.set(
            node,
            key,
            Entry {
                expire_at_ms: at,
                timer: id,
            },
        )?;
        if let Some(old) = old {
            delete(session, old.timer).await?;
        }
        Ok(())
    }

    /// Drops the key's timer; leaves a tombstone if a firing worker holds it.
    async fn cancel(&self, session: &mut Session, node: u16, key: &[u8], cur: Entry) -> Result<()> {
        match session.conn().await.delete(cur.timer).await {
            Ok(()) => Ok(self.index.remove(node, key)?),
            Err(client::Error::Reply(Response::NotFound)) => {
                let tombstone = Entry {
                    expire_at_ms: CANCELLED,
                    timer: cur.timer,
                };
                Ok(self.index.set(node, key, tombstone)?)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Does the server still hold the timer `cur` names, for this key?
    async fn timer_exists(
        &self,
        session: &mut Session,
        node: u16,
        key: &[u8],
        cur: Entry,
    ) -> Result<bool> {
        let job = session.conn().await.peek(&Command::Peek(cur.timer)).await?;
        Ok(job
            .and_then(|job| Timer::decode(&job.body))
            .is_some_and(|t| t.node == node && t.key == key && t.expire_at_ms == cur.expire_at_ms))
    }
}

/// Deletes job `id`; one that is already gone is fine.
async fn delete(session: &mut Session, id: JobId) -> Result<()> {
    match session.conn().await.delete(id).await {
        Ok(()) | Err(client::Error::Reply(Response::NotFound)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
