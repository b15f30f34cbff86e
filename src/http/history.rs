//! The last ten minutes of the server's figures, one sample a second, for
//! the dashboard's charts (so a freshly opened dashboard has a past).
//!
//! A sample costs one short engine lock: the `stats` document and the
//! tubes' latency histograms added up (no queue is scanned but the bridge's
//! timer tubes', whose share the samples leave out: see `timers`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::engine::{Histogram, Latency};
use crate::shared::Shared;

use super::bridge_timers;
use super::figures;

/// Samples kept: ten minutes.
const KEPT: usize = 600;

#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    /// Unix time, seconds.
    pub t: f64,
    /// Commands so far (the dashboard turns them into rates).
    pub puts: f64,
    pub reserves: f64,
    pub deletes: f64,
    pub ready: f64,
    pub reserved: f64,
    pub delayed: f64,
    pub buried: f64,
    /// Reserve wait in this second's reserves (seconds), median and 99th
    /// percentile, if any.
    pub wait_p50: Option<f64>,
    pub wait_p99: Option<f64>,
}

#[derive(Default)]
pub struct History {
    samples: Mutex<VecDeque<Sample>>,
}

impl History {
    pub fn samples(&self) -> Vec<Sample> {
        self.lock().iter().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Sample>> {
        self.samples.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, sample: Sample) {
        let mut samples = self.lock();
        if samples.len() == KEPT {
            samples.pop_front();
        }
        samples.push_back(sample);
    }
}

/// Samples `shared` into `history` every second, for ever.
pub async fn sample(history: Arc<History>, shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut last = Histogram::default();
    loop {
        tick.tick().await;
        let now = shared.clock.now();
        let (doc, latency, apart) = {
            let mut state = shared.lock();
            let doc = state.engine.stats_at(now);
            let apart = bridge_timers::apart(&mut state.engine, now);
            (doc, state.engine.latency_total(now), apart)
        };
        // The user's figures: the bridge's timer tubes left out.
        let mut timer_latency = Latency::default();
        apart
            .tubes
            .iter()
            .for_each(|t| timer_latency.add(&t.latency));
        let reserve_wait = latency.reserve_wait.since(&timer_latency.reserve_wait);
        let wait = reserve_wait.since(&last);
        last = reserve_wait;
        let share = bridge_timers::share(&apart);
        let get = |key| figures::get(&doc, key) - bridge_timers::of(&share, key);
        let seconds = |micros: f64| micros / 1e6;
        history.push(Sample {
            t: now as f64 / 1e6,
            puts: figures::get(&doc, "cmd-put") - bridge_timers::of(&share, "total-jobs"),
            reserves: get("cmd-reserve") + get("cmd-reserve-with-timeout"),
            deletes: get("cmd-delete"),
            ready: get("current-jobs-ready"),
            reserved: get("current-jobs-reserved"),
            delayed: get("current-jobs-delayed"),
            buried: get("current-jobs-buried"),
            wait_p50: wait.quantile(0.5).map(seconds),
            wait_p99: wait.quantile(0.99).map(seconds),
        });
    }
}
