//! Latency histograms the engine keeps per tube, for `/metrics`: how long
//! jobs wait ready before a reserve, how old they are when reserved, and how
//! long a worker holds one before deleting it. beanstalkd has no such
//! figures (its users asked for job age and latency for years).
//!
//! Fixed buckets, counted in place: an observation is a search over 16
//! bounds and three additions, cheap enough for every reserve and delete.

use super::clock::Time;

/// Upper bounds of the buckets, in µs (the last bucket, +Inf, is implied):
/// from a millisecond, where an idle worker picks a job up, to an hour,
/// where a backlog is being worked off.
pub const BOUNDS_MICROS: [Time; 15] = [
    1_000,
    5_000,
    10_000,
    50_000,
    100_000,
    500_000,
    1_000_000,
    5_000_000,
    10_000_000,
    30_000_000,
    60_000_000,
    300_000_000,
    600_000_000,
    1_800_000_000,
    3_600_000_000,
];

/// Counts of observations per bucket (not cumulative), their sum and count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    /// `buckets[i]`: observations in `(BOUNDS[i-1], BOUNDS[i]]`; the last
    /// one counts those above every bound.
    pub buckets: [u64; BOUNDS_MICROS.len() + 1],
    pub sum_micros: u64,
    pub count: u64,
}

impl Histogram {
    pub fn observe(&mut self, micros: Time) {
        let i = BOUNDS_MICROS.partition_point(|&bound| bound < micros);
        self.buckets[i] += 1;
        self.sum_micros = self.sum_micros.saturating_add(micros);
        self.count += 1;
    }

    pub fn add(&mut self, other: &Histogram) {
        for (mine, theirs) in self.buckets.iter_mut().zip(&other.buckets) {
            *mine += theirs;
        }
        self.sum_micros = self.sum_micros.saturating_add(other.sum_micros);
        self.count += other.count;
    }

    /// The observations since `earlier` (an older copy of this histogram).
    pub fn since(&self, earlier: &Histogram) -> Histogram {
        let mut buckets = self.buckets;
        for (b, old) in buckets.iter_mut().zip(&earlier.buckets) {
            *b = b.saturating_sub(*old);
        }
        Histogram {
            buckets,
            sum_micros: self.sum_micros.saturating_sub(earlier.sum_micros),
            count: self.count.saturating_sub(earlier.count),
        }
    }

    /// The `q` quantile (0..=1) in µs (see [`quantile`]).
    pub fn quantile(&self, q: f64) -> Option<f64> {
        quantile(&BOUNDS_MICROS, &self.buckets, q)
    }
}

/// The `q` quantile (0..=1) of per-bucket counts `buckets` (one more than
/// `bounds`, the last above every bound), interpolated within its bucket
/// as Prometheus's `histogram_quantile` does; `None` without observations.
/// Above the last bound it is the last bound. Any histogram's: the
/// bridge's punctuality has bounds of its own.
pub fn quantile(bounds: &[Time], buckets: &[u64], q: f64) -> Option<f64> {
    let count: u64 = buckets.iter().sum();
    let last = *bounds.last()? as f64;
    if count == 0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * count as f64;
    let mut below = 0u64;
    for (i, &n) in buckets.iter().enumerate() {
        if n > 0 && (below + n) as f64 >= rank {
            let Some(&upper) = bounds.get(i) else {
                return Some(last);
            };
            let lower = if i == 0 { 0 } else { bounds[i - 1] };
            let within = (rank - below as f64) / n as f64;
            return Some(lower as f64 + (upper - lower) as f64 * within);
        }
        below += n;
    }
    Some(last)
}

/// A tube's histograms.
#[derive(Clone, Debug, Default)]
pub struct Latency {
    /// From the moment a job became ready (put, delay over, release, kick,
    /// TTR timeout) to its reserve.
    pub reserve_wait: Histogram,
    /// From a job's put to each of its reserves.
    pub age_at_reserve: Histogram,
    /// From a reserve (or the holder's last touch) to the holder's delete.
    pub reserve_to_delete: Histogram,
}

impl Latency {
    pub fn add(&mut self, other: &Latency) {
        self.reserve_wait.add(&other.reserve_wait);
        self.age_at_reserve.add(&other.age_at_reserve);
        self.reserve_to_delete.add(&other.reserve_to_delete);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_bucket_whose_bound_is_the_first_not_below() {
        // (observation µs, bucket index)
        let table: [(Time, usize); 6] = [
            (0, 0),
            (1_000, 0),
            (1_001, 1),
            (5_000, 1),
            (3_600_000_000, 14),
            (3_600_000_001, 15),
        ];
        for (micros, bucket) in table {
            let mut h = Histogram::default();
            h.observe(micros);
            assert_eq!(h.buckets[bucket], 1, "{micros} µs");
            assert_eq!((h.count, h.sum_micros), (1, micros));
        }
    }

    #[test]
    fn quantiles_interpolate_within_the_bucket() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile(0.5), None);
        // Ten observations in (1 ms, 5 ms], ten in (5 ms, 10 ms].
        for _ in 0..10 {
            h.observe(2_000);
            h.observe(7_000);
        }
        // (quantile, expected µs)
        let table = [
            (0.0, 1_000.0),
            (0.25, 3_000.0),
            (0.5, 5_000.0),
            (0.75, 7_500.0),
            (1.0, 10_000.0),
        ];
        for (q, expected) in table {
            assert_eq!(h.quantile(q), Some(expected), "q {q}");
        }
        let mut later = h.clone();
        later.observe(u64::MAX);
        let since = later.since(&h);
        assert_eq!(
            (since.count, since.quantile(0.5)),
            (1, Some(3_600_000_000.0))
        );
        let mut sum = Histogram::default();
        sum.add(&h);
        sum.add(&since);
        assert_eq!(sum, later);
    }
}
