//! The one timer task: it sleeps until the engine's earliest deadline, fires
//! everything due, and sleeps again. Connections wake it early (through
//! [`Shared::lock`]'s guard) when they create an earlier deadline, so there is
//! never a timer per job, however many jobs wait.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::engine::Time;
use crate::shared::Shared;

pub async fn run(shared: Arc<Shared>) {
    loop {
        let next = {
            let mut state = shared.lock();
            state.engine.tick(shared.clock.now());
            let next = state.engine.next_deadline().unwrap_or(Time::MAX);
            // Set while locked, so a connection that moves the deadline
            // closer after this point sees it and raises the alarm.
            shared.alarm_at.store(next, Ordering::Release);
            next
        };
        if next == Time::MAX {
            shared.alarm.notified().await;
        } else {
            let at = tokio::time::Instant::from_std(shared.clock.instant(next));
            tokio::select! {
                _ = tokio::time::sleep_until(at) => {}
                _ = shared.alarm.notified() => {}
            }
        }
    }
}
