//! The timer thread's alarm (`timer.rs`): what wakes it early, rung by
//! whoever makes an earlier deadline (`shared.rs`'s lock guard). A leaf, so
//! the two import it and not each other.

use std::sync::{Condvar, Mutex};
use std::time::Instant;

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
    pub fn wait(&self, deadline: Option<Instant>) -> bool {
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
