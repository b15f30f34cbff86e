//! Latency histograms the engine keeps per tube, for `/metrics`: how long
//! jobs wait ready before a reserve, how old they are when reserved, and how
//! long a worker holds one before deleting it. beanstalkd has no such
//! figures (its users asked for job age and latency for years).
//!
//! Fixed buckets, counted in place: an observation is a search over 16
//! bounds and three additions, cheap enough for every reserve and delete.

use super::Time;

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

    /// Cumulative counts per bound, as Prometheus wants them (the +Inf
    /// bucket is [`Histogram::count`]).
    pub fn cumulative(&self) -> impl Iterator<Item = (Time, u64)> + '_ {
        let per_bound = BOUNDS_MICROS.iter().zip(&self.buckets);
        per_bound.scan(0, |total, (&bound, &n)| {
            *total += n;
            Some((bound, *total))
        })
    }
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
    fn cumulative_counts_grow_to_all_observations_below_infinity() {
        let mut h = Histogram::default();
        for micros in [500, 2_000, 2_000, 7_000_000, u64::MAX] {
            h.observe(micros);
        }
        let cumulative: Vec<u64> = h.cumulative().map(|(_, n)| n).collect();
        assert_eq!(&cumulative[..3], &[1, 3, 3]);
        assert_eq!(cumulative[7], 3, "at 5 s");
        assert_eq!(cumulative[8], 4, "at 10 s");
        assert_eq!(*cumulative.last().unwrap(), 4, "u64::MAX is only in +Inf");
        assert_eq!(h.count, 5);
        assert_eq!(h.sum_micros, u64::MAX, "the sum saturates");
    }
}
