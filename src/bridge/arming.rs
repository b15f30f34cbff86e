//! Writing a key's timers: [`Registry::arm`] puts a new one (recorded
//! before the old one goes), [`Registry::cancel`] drops one (or leaves a
//! tombstone where a firing worker holds it), and
//! [`Registry::lost_timers`] finds the ones the server no longer holds.

use sprout_protocol::{Command, Response};

use super::body::Timer;
use super::decide;
use super::failure::{Failure, Result};
use super::index::{KeyEntry, CANCELLED};
use super::registry::{Arm, Cancel, Registry, Verify, TIMER_PRI, TIMER_TTR};
use super::server_side::Session;
use super::wall_clock::now_ms;

impl Registry {
    /// For each [`Arm`]: puts a timer for `at`, records it, then drops
    /// `old`'s timer. The puts go out in one pipeline, the
    /// deletes in another, after every new timer is recorded.
    pub(super) async fn arm(&self, session: &mut Session, arms: &[Arm<'_>]) -> Result<()> {
        if arms.is_empty() {
            return Ok(());
        }
        // Connected before the clock is read: a delay counted from before
        // a reconnect (its backoff reaches seconds while the server is
        // down) would make every timer armed meanwhile fire that much late.
        session.conn().await;
        let mut puts = Vec::with_capacity(arms.len());
        let now = now_ms();
        for &Arm { key, at, .. } in arms {
            let value = if self.with_value {
                self.redis(key.node).value(key.bytes).await?
            } else {
                None
            };
            let timer = Timer {
                node: key.node,
                db: self.dbs[usize::from(key.node)],
                key: key.bytes.to_vec(),
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
        let replies = session.pipeline(&puts).await?;
        let mut failure = None;
        let mut cleanup = Vec::new();
        for (&Arm { key, at, old }, reply) in arms.iter().zip(replies) {
            match reply {
                Response::Inserted(id) => {
                    let entry = KeyEntry {
                        expire_at_ms: at,
                        timer: id,
                    };
                    self.index.set(key.node, key.bytes, entry);
                    if let Some(old) = old {
                        cleanup.push(Command::Delete(old.timer));
                    }
                }
                Response::BuriedId(id) => {
                    // The server could not queue it; a buried timer never fires.
                    cleanup.push(Command::Delete(id));
                    failure.get_or_insert(Failure::reply(Response::BuriedId(id)));
                }
                other => {
                    failure.get_or_insert(Failure::reply(other));
                }
            }
        }
        for reply in session.pipeline(&cleanup).await? {
            if !matches!(reply, Response::Deleted | Response::NotFound) {
                failure.get_or_insert(Failure::reply(reply));
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// Drops each key's timer (one pipeline) and forgets the key; leaves a
    /// tombstone where a firing worker holds the timer (the server lets
    /// only that worker delete it: NOT_FOUND, but a `peek` finds it). A
    /// timer that is gone altogether (deleted before a crash the index's
    /// last write did not survive) leaves nothing behind.
    pub(super) async fn cancel(&self, session: &mut Session, cancels: &[Cancel<'_>]) -> Result<()> {
        let deletes: Vec<Command> = cancels
            .iter()
            .map(|c| Command::Delete(c.cur.timer))
            .collect();
        let mut held = Vec::new();
        for (cancel, reply) in cancels.iter().zip(session.pipeline(&deletes).await?) {
            match reply {
                Response::Deleted => self.index.remove(cancel.key.node, cancel.key.bytes),
                Response::NotFound => held.push(cancel),
                other => return Err(Failure::reply(other)),
            }
        }
        let peeks: Vec<Command> = held.iter().map(|c| Command::Peek(c.cur.timer)).collect();
        for (&&Cancel { key, cur }, reply) in held.iter().zip(session.pipeline(&peeks).await?) {
            match reply {
                Response::Found { .. } => {
                    let tombstone = KeyEntry {
                        expire_at_ms: CANCELLED,
                        timer: cur.timer,
                    };
                    self.index.set(key.node, key.bytes, tombstone);
                }
                Response::NotFound => self.index.remove(key.node, key.bytes),
                other => return Err(Failure::reply(other)),
            }
        }
        Ok(())
    }

    /// Of `verifies`, the keys whose timer `cur` the server no longer
    /// holds (one pipeline of peeks), as timers to arm for `at`.
    pub(super) async fn lost_timers<'a>(
        &self,
        session: &mut Session,
        verifies: &[Verify<'a>],
    ) -> Result<Vec<Arm<'a>>> {
        let peeks: Vec<Command> = verifies
            .iter()
            .map(|v| Command::Peek(v.cur.timer))
            .collect();
        let mut lost = Vec::new();
        for (&Verify { key, at, cur }, reply) in
            verifies.iter().zip(session.pipeline(&peeks).await?)
        {
            let exists = match reply {
                Response::Found { body, .. } => {
                    Timer::decode(&body).is_some_and(|t| decide::is_timer_of(&t, key, cur))
                }
                Response::NotFound => false,
                other => return Err(Failure::reply(other)),
            };
            if !exists {
                tracing::info!(key = %key.lossy(), "timer lost by the server; re-arming");
                lost.push(Arm { key, at, old: None });
            }
        }
        Ok(lost)
    }
}
