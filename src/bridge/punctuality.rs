//! How punctual the bridge is, the figure Redis does not give its users:
//! each delivery's lateness (its `fired_at_ms` minus the key's expiry) and
//! the time from Redis's `expired` event reaching the bridge to the
//! delivery being put. Kept since start for `/metrics` (histograms), and
//! the lateness per [`SLOT_MS`] for the dashboard's quantiles over the
//! last [`WINDOW_MS`].
//!
//! An event and its delivery come in either order: the bridge's own read
//! at the deadline usually makes Redis expire the key, so the event
//! follows the delivery. Each waits for the other (at most `MATCH_MS`);
//! a delivery that came first counts as 0 (never later than Redis).

use std::collections::HashMap;
use std::sync::Mutex;

use super::keys::{KeyName, KeyRef};

use crate::engine::quantile;

/// Upper bounds of the buckets in µs (+Inf implied): from a millisecond,
/// a delivery on the dot, to ten seconds, a bridge far behind.
pub const BOUNDS_MICROS: [u64; 13] = [
    1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000, 2_000_000,
    5_000_000, 10_000_000,
];
/// The dashboard's window: `SLOTS` slots of [`SLOT_MS`].
pub const SLOT_MS: i64 = 30_000;
const SLOTS: usize = 10;
pub const WINDOW_MS: i64 = SLOT_MS * SLOTS as i64;
/// How long an event waits for its delivery, or a delivery for its event.
const MATCH_MS: i64 = 60_000;
/// Events (or deliveries) waiting at most; beyond, the stale are dropped
/// and, if none is, the newcomer is not matched.
const WAITING_MAX: usize = 100_000;

/// Observations per bucket (not cumulative), their sum and count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub buckets: [u64; BOUNDS_MICROS.len() + 1],
    pub sum_micros: u64,
    pub count: u64,
}

impl Counts {
    fn observe(&mut self, micros: u64) {
        let i = BOUNDS_MICROS.partition_point(|&bound| bound < micros);
        self.buckets[i] += 1;
        self.sum_micros = self.sum_micros.saturating_add(micros);
        self.count += 1;
    }

    fn add(&mut self, other: &Counts) {
        for (mine, theirs) in self.buckets.iter_mut().zip(&other.buckets) {
            *mine += theirs;
        }
        self.sum_micros = self.sum_micros.saturating_add(other.sum_micros);
        self.count += other.count;
    }

    /// The `q` quantile in ms, as Prometheus's `histogram_quantile` reads
    /// the buckets; `None` without observations.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        quantile(&BOUNDS_MICROS, &self.buckets, q).map(|us| us / 1e3)
    }
}

/// What the host shows: the histograms since start, and the lateness of
/// the last [`WINDOW_MS`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Figures {
    pub lateness: Counts,
    pub event_to_delivery: Counts,
    pub recent_lateness: Counts,
}

/// The bridge's punctuality, shared by its firing workers and event
/// followers with whoever shows it.
#[derive(Default)]
pub struct Punctuality(Mutex<State>);

#[derive(Default)]
struct State {
    lateness: Counts,
    event_to_delivery: Counts,
    /// Lateness by slot: (slot number, its counts).
    recent: [(i64, Counts); SLOTS],
    /// `expired` events not yet matched with their delivery: when received.
    events: Waiting,
    /// Deliveries not yet matched with their event: when put.
    deliveries: Waiting,
}

type Waiting = HashMap<KeyName, i64>;

impl Punctuality {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Redis's `expired` event of `key` reached the bridge at `at_ms`.
    pub fn expired_event(&self, key: KeyRef<'_>, at_ms: i64) {
        let mut state = self.lock();
        let id = key.to_name();
        match state.deliveries.remove(&id) {
            Some(put_ms) if at_ms - put_ms <= MATCH_MS => state.event_to_delivery.observe(0),
            _ => wait(&mut state.events, id, at_ms),
        }
    }

    /// Deliveries fired at `fired_ms` (their bodies' `fired_at_ms`) and
    /// put by `put_ms`: each `(key, expire_at_ms)`. `events`: whether
    /// Redis's events are followed (else none will come to match).
    pub fn delivered<'k>(
        &self,
        deliveries: impl IntoIterator<Item = (KeyRef<'k>, i64)>,
        fired_ms: i64,
        put_ms: i64,
        events: bool,
    ) {
        let mut state = self.lock();
        let slot = fired_ms.div_euclid(SLOT_MS);
        let at = slot.rem_euclid(SLOTS as i64) as usize;
        if state.recent[at].0 != slot {
            state.recent[at] = (slot, Counts::default());
        }
        for (key, expire_at_ms) in deliveries {
            let late = micros(fired_ms - expire_at_ms);
            state.lateness.observe(late);
            state.recent[at].1.observe(late);
            let id = key.to_name();
            match state.events.remove(&id) {
                Some(event_ms) if put_ms - event_ms <= MATCH_MS => {
                    state.event_to_delivery.observe(micros(put_ms - event_ms));
                }
                _ if events => wait(&mut state.deliveries, id, put_ms),
                _ => {}
            }
        }
    }

    /// The figures now (`now_ms` picks the window).
    pub fn figures(&self, now_ms: i64) -> Figures {
        let state = self.lock();
        let current = now_ms.div_euclid(SLOT_MS);
        let mut recent_lateness = Counts::default();
        let window = current - SLOTS as i64 + 1..=current;
        for (slot, counts) in &state.recent {
            if window.contains(slot) {
                recent_lateness.add(counts);
            }
        }
        Figures {
            lateness: state.lateness.clone(),
            event_to_delivery: state.event_to_delivery.clone(),
            recent_lateness,
        }
    }
}

/// µs of `ms`, 0 for a negative span.
fn micros(ms: i64) -> u64 {
    ms.max(0) as u64 * 1000
}

/// Puts `id` in `waiting`, making room by dropping the stale if full.
/// When most of it is fresh (Redis dropping events under load, so
/// nothing matches), it starts over instead: a scan of the whole map on
/// every newcomer would cost the bridge more than the figure is worth;
/// this way a scan comes at most once per `WAITING_MAX / 2` newcomers.
fn wait(waiting: &mut Waiting, id: KeyName, at_ms: i64) {
    if waiting.len() >= WAITING_MAX {
        waiting.retain(|_, &mut t| at_ms - t <= MATCH_MS);
        if waiting.len() >= WAITING_MAX / 2 {
            waiting.clear();
        }
    }
    waiting.insert(id, at_ms);
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_700_000_000_000;

    fn key(node: u16, bytes: &[u8]) -> KeyRef<'_> {
        KeyRef::new(node, bytes)
    }

    #[test]
    fn lateness_lands_in_the_ms_buckets() {
        let p = Punctuality::default();
        let keys = [
            (key(0, b"a"), T - 3),
            (key(0, b"b"), T),
            (key(0, b"c"), T + 5),
        ];
        p.delivered(keys, T, T + 1, false);
        let f = p.figures(T);
        assert_eq!(f.lateness.count, 3);
        // 3 ms in (2, 5]; on time and "early" (clamped) in the first bucket.
        assert_eq!(f.lateness.buckets[0], 2);
        assert_eq!(f.lateness.buckets[2], 1);
        assert_eq!(f.lateness.sum_micros, 3_000);
        assert_eq!(f.recent_lateness, f.lateness);
        assert_eq!(f.event_to_delivery.count, 0, "no events followed");
    }

    #[test]
    fn events_and_deliveries_match_in_either_order() {
        let p = Punctuality::default();
        // The event first: 7 ms to the put.
        p.expired_event(key(0, b"a"), T);
        p.delivered([(key(0, b"a"), T)], T + 2, T + 7, true);
        // The delivery first: 0.
        p.delivered([(key(1, b"a"), T)], T, T + 1, true);
        p.expired_event(key(1, b"a"), T + 3);
        // Too far apart to be the same expiry: not matched.
        p.expired_event(key(0, b"b"), T);
        p.delivered([(key(0, b"b"), T)], T, T + MATCH_MS + 1, true);
        let f = p.figures(T);
        assert_eq!(f.event_to_delivery.count, 2);
        assert_eq!(f.event_to_delivery.sum_micros, 7_000);
        assert_eq!(f.event_to_delivery.buckets[0], 1);
        assert_eq!(f.event_to_delivery.buckets[3], 1);
    }

    #[test]
    fn a_full_wait_list_is_scanned_once_per_half_of_it() {
        let mut waiting = Waiting::default();
        // Fresh and unmatched: the list fills, then starts over.
        for i in 0..WAITING_MAX {
            wait(&mut waiting, key(0, &i.to_le_bytes()).to_name(), T);
        }
        assert_eq!(waiting.len(), WAITING_MAX);
        wait(&mut waiting, key(0, b"next").to_name(), T);
        assert_eq!(waiting.len(), 1);
        // Mostly stale: the stale go, the fresh stay.
        let mut waiting = Waiting::default();
        for i in 0..WAITING_MAX {
            let at = if i < 10 { T + MATCH_MS } else { T };
            wait(&mut waiting, key(0, &i.to_le_bytes()).to_name(), at);
        }
        wait(&mut waiting, key(0, b"next").to_name(), T + MATCH_MS + 1);
        assert_eq!(waiting.len(), 11);
    }

    #[test]
    fn the_window_forgets_old_slots() {
        let p = Punctuality::default();
        p.delivered([(key(0, b"a"), T - 40)], T, T, false);
        let later = T + WINDOW_MS;
        p.delivered([(key(0, b"b"), later - 1)], later, later, false);
        let f = p.figures(later);
        assert_eq!(f.lateness.count, 2);
        assert_eq!(f.recent_lateness.count, 1);
        assert_eq!(f.recent_lateness.quantile_ms(0.5), Some(0.5));
        assert_eq!(p.figures(later + WINDOW_MS).recent_lateness.count, 0);
        assert_eq!(Counts::default().quantile_ms(0.5), None);
    }
}
