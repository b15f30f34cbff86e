//! A job's five `stats-job` counters, a byte each in the record.
//!
//! beanstalkd counts reserves, timeouts, releases, buries and kicks in 32
//! bits each: 20 bytes of every record, almost always zero for a job that
//! waits ready or delayed. A record holds them as [`Packed`], one byte each
//! (5 bytes, and the record shrinks from 72 to 56 bytes), while every count
//! is below 255; a job whose count would reach 255 moves all five, as
//! [`Counts`], into a side table of the job table (see
//! `JobTable::bump`), and its bytes say so. No count is ever cut short.

/// The counters in full, as `stats-job` shows them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Counts {
    pub(super) reserves: u32,
    pub(super) timeouts: u32,
    pub(super) releases: u32,
    pub(super) buries: u32,
    pub(super) kicks: u32,
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

/// As a record holds them: the counts while all are below [`SPILLED`],
/// else `[SPILLED; 5]` (the counts are in the side table).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Packed([u8; 5]);

const SPILLED: u8 = u8::MAX;

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

    /// The bytes for these counts, or `None` if one does not fit a byte.
    pub(super) fn pack(self) -> Option<Packed> {
        let mut bytes = [0; 5];
        for (b, n) in bytes.iter_mut().zip(self.as_array()) {
            *b = u8::try_from(n).ok().filter(|&b| b != SPILLED)?;
        }
        Some(Packed(bytes))
    }
}

impl Packed {
    /// The spilled marker: the counts are kept elsewhere.
    pub(super) const SPILLED: Packed = Packed([SPILLED; 5]);

    pub(super) fn is_spilled(self) -> bool {
        self == Packed::SPILLED
    }

    /// The counts these bytes hold (not spilled ones).
    pub(super) fn unpack(self) -> Counts {
        debug_assert!(!self.is_spilled());
        Counts::from_array(self.0.map(u32::from))
    }

    /// These counts with `counter` one up, if they still fit.
    pub(super) fn bumped(self, counter: Counter) -> Option<Packed> {
        let mut bytes = self.0;
        let b = &mut bytes[counter as usize];
        if self.is_spilled() || *b + 1 == SPILLED {
            return None;
        }
        *b += 1;
        Some(Packed(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_pack_while_each_is_below_255() {
        let cases = [
            (Counts::default(), true),
            (Counts::from_array([254, 0, 3, 254, 1]), true),
            (Counts::from_array([0, 0, 0, 0, 255]), false),
            (Counts::from_array([1000, 0, 0, 0, 0]), false),
            (Counts::from_array([0, u32::MAX, 0, 0, 0]), false),
        ];
        for (counts, packs) in cases {
            let packed = counts.pack();
            assert_eq!(packed.is_some(), packs, "{counts:?}");
            if let Some(p) = packed {
                assert!(!p.is_spilled());
                assert_eq!(p.unpack(), counts);
            }
        }
    }

    #[test]
    fn a_bump_to_255_does_not_fit() {
        let all = [
            Counter::Reserves,
            Counter::Timeouts,
            Counter::Releases,
            Counter::Buries,
            Counter::Kicks,
        ];
        for counter in all {
            let mut packed = Packed::default();
            let mut counts = Counts::default();
            for _ in 0..254 {
                packed = packed.bumped(counter).expect("fits");
                counts = counts.bumped(counter);
                assert_eq!(packed.unpack(), counts);
            }
            assert_eq!(packed.bumped(counter), None, "{counter:?} at 255");
            assert_eq!(counts.bumped(counter).as_array()[counter as usize], 255);
        }
        assert_eq!(Packed::SPILLED.bumped(Counter::Kicks), None);
    }

    #[test]
    fn full_counts_saturate() {
        let top = Counts::from_array([u32::MAX; 5]);
        assert_eq!(top.bumped(Counter::Releases), top);
    }
}
