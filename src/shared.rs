//! The state every connection task works on: the engine under one short lock,
//! the store its changes go to, the mailboxes of connections blocked in
//! `reserve`, the timer's alarm, and with `--auth` the access gate.
//!
//! [`Shared::lock`] returns a guard that, when dropped, hands the engine's
//! remaining records to the store, delivers the answers the engine produced
//! for blocked connections, and wakes the timer thread if the earliest deadline
//! moved closer. Every engine call goes through it, so no caller can forget
//! any of the three.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use sprout_protocol::{JobId, Response};
use tokio::sync::mpsc;

use crate::alarm::Alarm;
use crate::auth::Gate;
use crate::engine::{Clock, ConnId, Engine, Time};
use crate::fill::{self, Cold};
use crate::store::{Progress, Seq, Store};

/// An answer not yet written: a connection's own, or a late one for a
/// blocked connection.
#[derive(Debug)]
pub struct Letter {
    pub response: Response,
    /// The store submission it must not overtake (under `-f 0`, a job
    /// handed over by a put is not announced before the put is durable).
    pub after: Submission,
    /// Its jobs whose bodies are still to be read from the store.
    pub cold: Cold,
}

impl Letter {
    /// `response`, after `after`, its bodies filled from the body cache
    /// where the engine has none (`fill.rs`; under the engine lock).
    pub fn new(
        state: &LockedState,
        shared: &Shared,
        mut response: Response,
        after: Submission,
    ) -> Letter {
        let cold = fill::from_cache(&state.engine, shared.store.bodies(), &mut response);
        Letter {
            response,
            after,
            cold,
        }
    }
}

/// The store submission an answer waits for ([`Locked::submit`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Submission {
    /// 0: nothing was ever submitted.
    pub seq: Seq,
    /// `seq` holds the command's own records. Only then does the store
    /// failing it fail the command: an answer that wrote nothing waits
    /// behind the latest submission for order alone, and stands whatever
    /// became of it (another client's put that met a full disk, or, on a
    /// cluster standby, a change the replica made that only a leader may
    /// write).
    pub own: bool,
}

impl Submission {
    /// Waits behind `seq` without owning it.
    pub fn behind(seq: Seq) -> Submission {
        Submission { seq, own: false }
    }

    /// Whether the store failed what this command wrote.
    pub fn failed(&self, progress: &Progress) -> bool {
        self.own && progress.failed(self.seq)
    }
}

/// Where a blocked connection receives its late answer.
pub type Mailbox = mpsc::UnboundedReceiver<Letter>;

pub struct Shared {
    state: Mutex<LockedState>,
    pub clock: Clock,
    pub store: Box<dyn Store>,
    /// Wakes the timer thread early.
    pub alarm: Alarm,
    /// When the timer thread is set to wake ([`Time::MAX`]: not at all).
    alarm_at: AtomicU64,
    /// With `--auth`: set once, before the first connection is accepted.
    auth: OnceLock<Arc<Gate>>,
}

/// What [`Shared::lock`] guards: the engine, and the mailboxes its late
/// answers go to.
pub struct LockedState {
    pub engine: Engine,
    mailboxes: HashMap<ConnId, mpsc::UnboundedSender<Letter>>,
    /// The latest store submission.
    last_seq: Seq,
}

impl Shared {
    pub fn new(engine: Engine, clock: Clock, store: Box<dyn Store>) -> Shared {
        Shared {
            state: Mutex::new(LockedState {
                engine,
                mailboxes: HashMap::new(),
                last_seq: 0,
            }),
            clock,
            store,
            alarm: Alarm::default(),
            alarm_at: AtomicU64::new(Time::MAX),
            auth: OnceLock::new(),
        }
    }

    /// Turns `--auth` on: from now on connections go through `gate`.
    pub fn set_auth(&self, gate: Arc<Gate>) {
        let _ = self.auth.set(gate);
    }

    /// The access gate, with `--auth`.
    pub fn auth(&self) -> Option<&Arc<Gate>> {
        self.auth.get()
    }

    pub fn lock(&self) -> Locked<'_> {
        // A panic while holding the lock is a bug already reported; the
        // engine's state is still the best there is, so keep serving.
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let store = &self.store;
        guard
            .engine
            .set_store(store.room(), store.file(), store.oldest_file());
        Locked {
            guard,
            shared: self,
        }
    }

    /// Registers a new client with the engine and gives it a mailbox.
    pub fn connect(&self) -> (ConnId, Mailbox) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut state = self.lock();
        let id = state.engine.connect();
        state.mailboxes.insert(id, tx);
        (id, rx)
    }

    /// Records when the timer thread will wake next.
    pub(crate) fn set_alarm_at(&self, at: Time) {
        self.alarm_at.store(at, Ordering::Release);
    }

    /// Drops job `id`, whose put the store failed to keep.
    pub fn forget(&self, id: JobId) {
        self.lock().engine.forget(id);
        self.store.forget(id);
    }

    pub fn disconnect(&self, id: ConnId) {
        let now = self.clock.now();
        let mut state = self.lock();
        state.mailboxes.remove(&id);
        state.engine.disconnect(id, now);
    }
}

/// The engine, locked. See the module docs for what dropping it does.
pub struct Locked<'a> {
    guard: MutexGuard<'a, LockedState>,
    shared: &'a Shared,
}

impl Locked<'_> {
    /// Hands the engine's records so far to the store; returns the
    /// submission the answer must wait for: the latest one, even when this
    /// command wrote nothing. A `reserve` writes no record, yet the job it
    /// hands out may come from a put still on its way to the disk; under
    /// `-f 0` no client may see a job (or a count) a crash could take back.
    /// (0 if nothing was ever submitted.)
    pub fn submit(&mut self) -> Submission {
        self.submit_naming(None)
    }

    /// [`Locked::submit`] for an answer that names job `job` (a `reserve`
    /// or `peek` hands it out): when the command wrote nothing and the
    /// store can tell where that job's put is, the answer waits for that
    /// put alone, not for everybody's latest change (in cluster mode a
    /// wait costs a round trip to a quorum).
    pub fn submit_naming(&mut self, job: Option<JobId>) -> Submission {
        let records = self.guard.engine.take_journal();
        if records.is_empty() {
            let last = self.guard.last_seq;
            return Submission::behind(match job.and_then(|id| self.shared.store.put_of(id)) {
                Some(put) => put.min(last),
                None => last,
            });
        }
        let seq = self.shared.store.submit(records);
        self.guard.last_seq = seq;
        Submission { seq, own: true }
    }
}

impl Deref for Locked<'_> {
    type Target = LockedState;
    fn deref(&self) -> &LockedState {
        &self.guard
    }
}

impl DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut LockedState {
        &mut self.guard
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.submit();
        let state = &mut *self.guard;
        let wakeups: Vec<_> = state.engine.take_wakeups().collect();
        let after = Submission::behind(state.last_seq);
        for (id, response) in wakeups {
            // A closed mailbox means the connection is leaving; its
            // disconnect (under this same lock, later) returns the job.
            if let Some(tx) = state.mailboxes.get(&id) {
                let _ = tx.send(Letter::new(state, self.shared, response, after));
            }
        }
        let next = state.engine.next_deadline().unwrap_or(Time::MAX);
        if next < self.shared.alarm_at.load(Ordering::Acquire) {
            self.shared.alarm_at.store(next, Ordering::Release);
            self.shared.alarm.ring();
        }
    }
}
