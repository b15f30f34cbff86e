//! A job's five `stats-job` counters, in 20 bits of the record.
//!
//! beanstalkd counts reserves, timeouts, releases, buries and kicks in 32
//! bits each: 20 bytes of every record, almost always zero for a job that
//! waits ready or delayed. A record holds them as [`Packed`]: reserves in
//! 8 bits and the other four in 3 each (20 bits, sharing a word with the
//! body handle and the state, where 5 bytes made the record 48 bytes
//! instead of 40), while every count is below its field's all-ones value;
//! a job whose count would reach that moves all five, as [`Counts`], into
//! a side table of the job table (see `JobTable::bump`), and its bits say
//! so. No count is ever cut short.

/// The counters in full, as `stats-job` shows them (and a job's image
/// and the admin API's [`JobInfo`](super::JobInfo) carry them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub reserves: u32,
    pub timeouts: u32,
    pub releases: u32,
    pub buries: u32,
    pub kicks: u32,
}

/// Which counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Counter {
    Reserves = 0,
    Timeouts = 1,
    Releases = 2,
    Buries = 3,
    Kicks = 4,
}

/// As a record holds them, in [`Packed::BITS`] bits: each count in a
/// field of [`WIDTHS`] bits while every one is below its field's all-ones
/// value, else all bits set (the counts are in the side table).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Packed(u32);

/// Bits per counter, in [`Counter`] order. Reserves get a byte, as all did
/// before; the others three bits, which a waiting or first-run job never
/// needs (reserves come to about one more than releases, timeouts and
/// kicks together, so a job spills by its releases or timeouts first).
const WIDTHS: [u32; 5] = [8, 3, 3, 3, 3];

/// Where each counter's field starts.
const fn shift(counter: usize) -> u32 {
    let mut at = 0;
    let mut c = 0;
    while c < counter {
        at += WIDTHS[c];
        c += 1;
    }
    at
}

/// A field's all-ones value: the marker, never a count.
fn field_max(counter: usize) -> u32 {
    (1 << WIDTHS[counter]) - 1
}

impl Counts {
    fn as_array(self) -> [u32; 5] {
        [
            self.reserves,
            self.timeouts,
            self.releases,
            self.buries,
            self.kicks,
        ]
    }

    fn from_array([reserves, timeouts, releases, buries, kicks]: [u32; 5]) -> Counts {
        Counts {
            reserves,
            timeouts,
            releases,
            buries,
            kicks,
        }
    }

    /// These counts with `counter` one up (saturating, as it is 32 bits).
    pub(super) fn bumped(self, counter: Counter) -> Counts {
        let mut all = self.as_array();
        let n = &mut all[counter as usize];
        *n = n.saturating_add(1);
        Counts::from_array(all)
    }

    /// The bits for these counts, or `None` if one does not fit its field.
    pub(super) fn pack(self) -> Option<Packed> {
        let mut bits = 0;
        for (c, n) in self.as_array().into_iter().enumerate() {
            if n >= field_max(c) {
                return None;
            }
            bits |= n << shift(c);
        }
        Some(Packed(bits))
    }
}

impl Packed {
    /// The bits a record spends on them.
    pub(super) const BITS: u32 = shift(WIDTHS.len());
    /// The spilled marker: the counts are kept elsewhere.
    pub(super) const SPILLED: Packed = Packed((1 << Packed::BITS) - 1);

    pub(super) fn is_spilled(self) -> bool {
        self == Packed::SPILLED
    }

    /// The counts these bits hold (not spilled ones).
    pub(super) fn unpack(self) -> Counts {
        debug_assert!(!self.is_spilled());
        Counts::from_array(std::array::from_fn(|c| self.field(c)))
    }

    /// These counts with `counter` one up, if they still fit.
    pub(super) fn bumped(self, counter: Counter) -> Option<Packed> {
        let c = counter as usize;
        if self.is_spilled() || self.field(c) + 1 == field_max(c) {
            return None;
        }
        Some(Packed(self.0 + (1 << shift(c))))
    }

    /// The bits as a record stores them (below [`Packed::BITS`]).
    pub(super) fn bits(self) -> u32 {
        self.0
    }

    /// The counts stored as `bits` (from [`Packed::bits`]).
    pub(super) fn from_bits(bits: u32) -> Packed {
        debug_assert!(bits < 1 << Packed::BITS);
        Packed(bits)
    }

    fn field(self, counter: usize) -> u32 {
        (self.0 >> shift(counter)) & field_max(counter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Counter; 5] = [
        Counter::Reserves,
        Counter::Timeouts,
        Counter::Releases,
        Counter::Buries,
        Counter::Kicks,
    ];

    #[test]
    fn counts_pack_while_each_is_below_its_field_max() {
        let cases = [
            (Counts::default(), true),
            (Counts::from_array([254, 6, 3, 6, 1]), true),
            (Counts::from_array([255, 0, 0, 0, 0]), false),
            (Counts::from_array([0, 0, 0, 0, 7]), false),
            (Counts::from_array([0, 0, 7, 0, 0]), false),
            (Counts::from_array([1000, 0, 0, 0, 0]), false),
            (Counts::from_array([0, u32::MAX, 0, 0, 0]), false),
        ];
        for (counts, packs) in cases {
            let packed = counts.pack();
            assert_eq!(packed.is_some(), packs, "{counts:?}");
            if let Some(p) = packed {
                assert!(!p.is_spilled());
                assert_eq!(p.unpack(), counts);
                assert!(p.bits() < 1 << Packed::BITS);
                assert_eq!(Packed::from_bits(p.bits()), p);
            }
        }
        assert_eq!(Packed::BITS, 20);
    }

    #[test]
    fn a_bump_to_the_field_max_does_not_fit() {
        for (counter, max) in ALL.into_iter().zip([255, 7, 7, 7, 7]) {
            let mut packed = Packed::default();
            let mut counts = Counts::default();
            for _ in 0..max - 1 {
                packed = packed.bumped(counter).expect("fits");
                counts = counts.bumped(counter);
                assert_eq!(packed.unpack(), counts);
            }
            assert_eq!(packed.bumped(counter), None, "{counter:?} at {max}");
            assert_eq!(counts.bumped(counter).as_array()[counter as usize], max);
            // The other fields are untouched by a full one.
            for other in ALL.into_iter().filter(|&o| o != counter) {
                let next = packed.bumped(other).expect("fits").unpack();
                assert_eq!(next, counts.bumped(other));
            }
        }
        assert_eq!(Packed::SPILLED.bumped(Counter::Kicks), None);
    }

    #[test]
    fn full_counts_saturate() {
        let top = Counts::from_array([u32::MAX; 5]);
        assert_eq!(top.bumped(Counter::Releases), top);
    }
}
