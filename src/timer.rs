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

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::engine::Time;
use crate::shared::Shared;

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
