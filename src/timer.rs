//! The one timer: a thread that sleeps until the engine's earliest deadline,
//! fires everything due, and sleeps again. Connections wake it early
//! (through [`Shared::lock`]'s guard) when they create an earlier deadline,
//! so there is never a timer per job, however many jobs wait.
//!
//! A plain OS thread rather than a tokio task: tokio's timer wheel has
//! millisecond granularity, which alone would make every delayed job about
//! a millisecond late; a condition variable's timed wait is precise to tens
//! of microseconds.
//!
//! [`Shared::lock`]: crate::shared::Shared::lock

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::engine::Time;
use crate::shared::Shared;

/// Wakes the timer thread.
#[derive(Default)]
pub struct Alarm {
    state: Mutex<AlarmState>,
    bell: Condvar,
}

#[derive(Default)]
struct AlarmState {
    rung: bool,
    stopped: bool,
}

impl Alarm {
    /// Makes the timer thread look at the engine again.
    pub fn ring(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).rung = true;
        self.bell.notify_one();
    }

    /// Ends the timer thread.
    pub fn stop(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).stopped = true;
        self.bell.notify_one();
    }

    /// Waits until rung or until `deadline`; false once stopped.
    fn wait(&self, deadline: Option<Instant>) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while !state.rung && !state.stopped {
            match deadline {
                None => state = self.bell.wait(state).unwrap_or_else(|e| e.into_inner()),
                Some(at) => {
                    let Some(left) = at.checked_duration_since(Instant::now()) else {
                        break;
                    };
                    state = self
                        .bell
                        .wait_timeout(state, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
        state.rung = false;
        !state.stopped
    }
}

/// Starts the timer thread; it runs until `shared.alarm.stop()`.
pub fn spawn(shared: Arc<Shared>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("sprout-timer".into())
        .spawn(move || {
            // Linux lets a timed wait overshoot by the thread's "timer
            // slack" (50 µs by default); a timer thread wants none.
            // SAFETY: prctl with PR_SET_TIMERSLACK takes a plain integer.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
            run(&shared)
        })
}

/// The least time between two ticks. Deadlines spread over time (a million
/// delayed jobs, or the bridge's timers) would otherwise wake the thread
/// once per job, each wake a context switch and a lock; with this floor a
/// wake fires everything due in the last 200 µs at once. Jobs are never
/// early, and at most this much later.
const MIN_TICK_GAP: Duration = Duration::from_micros(200);

fn run(shared: &Shared) {
    loop {
        let ticked_at = Instant::now();
        let next = {
            let mut state = shared.lock();
            state.engine.tick(shared.clock.now());
            let next = state.engine.next_deadline().unwrap_or(Time::MAX);
            // Set while locked, so a connection that moves the deadline
            // closer after this point sees it and rings.
            shared.set_alarm_at(next);
            next
        };
        let deadline =
            (next != Time::MAX).then(|| shared.clock.instant(next).max(ticked_at + MIN_TICK_GAP));
        if !shared.alarm.wait(deadline) {
            return;
        }
    }
}
