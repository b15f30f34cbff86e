//! The Redis bridge's timer tubes (`bridge-timers.*`, whether the bridge is
//! embedded or a `sprout bridge` process) and the bridge's connections,
//! set apart from the user's figures: each timer is a delayed job and each
//! bridge session a producer or worker, which would swell the dashboard's
//! totals with work no user asked for.

use serde_json::{Map, Value};
use sprout_protocol::TubeName;

use crate::bridge::config::TIMER_TUBE_PREFIX;
use crate::engine::{Apart, Engine, Time};

use super::figures;

/// `stats-tube` figures that `stats` adds up over the tubes, under the same
/// key in both documents.
const SUMMED: [&str; 8] = [
    "current-jobs-urgent",
    "current-jobs-ready",
    "current-jobs-reserved",
    "current-jobs-delayed",
    "current-jobs-buried",
    "current-waiting",
    "total-jobs",
    "cmd-delete",
];

/// Is `name` a bridge's timer tube?
pub fn is_timer_tube(name: &TubeName) -> bool {
    name.as_str().starts_with(TIMER_TUBE_PREFIX)
}

/// The timer tubes and the connections that use or watch them.
pub fn apart(engine: &mut Engine, now: Time) -> Apart {
    engine.apart(now, is_timer_tube)
}

/// The share of `stats` figures (by their `stats` key) that belongs to the
/// timer tubes and the bridge's connections: a user figure is the `stats`
/// figure less this.
pub fn share(apart: &Apart) -> Vec<(&'static str, f64)> {
    let sum = |key| {
        (apart.tubes.iter())
            .map(|t| figures::get(&t.stats, key))
            .sum()
    };
    let mut share: Vec<_> = SUMMED.iter().map(|&key| (key, sum(key))).collect();
    share.extend([
        ("current-tubes", apart.tubes.len() as f64),
        ("current-connections", f64::from(apart.connections)),
        ("current-producers", f64::from(apart.producers)),
        ("current-workers", f64::from(apart.workers)),
    ]);
    share
}

/// One figure of a share (0 if it has none).
pub fn of(share: &[(&str, f64)], key: &str) -> f64 {
    share
        .iter()
        .find(|&&(k, _)| k == key)
        .map_or(0.0, |&(_, v)| v)
}

/// The dashboard's `timers` object: the tubes' names and the share, under
/// the API's `stats` keys (`_` for `-`).
pub fn json(apart: &Apart) -> Value {
    let names = apart.tubes.iter().map(|t| t.name.as_str().into()).collect();
    let mut object = Map::from_iter([("tubes".to_owned(), Value::Array(names))]);
    for (key, value) in share(apart) {
        object.insert(key.replace('-', "_"), value.into());
    }
    Value::Object(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_tubes_are_named_by_the_bridge_prefix() {
        // (tube, a timer tube?)
        let table = [
            ("bridge-timers.offline", true),
            ("bridge-timers.", true),
            ("bridge-timers", false),
            ("offline", false),
            ("my-bridge-timers.x", false),
        ];
        for (tube, timer) in table {
            let name = TubeName::new(tube.as_bytes()).unwrap();
            assert_eq!(is_timer_tube(&name), timer, "{tube}");
        }
    }
}
