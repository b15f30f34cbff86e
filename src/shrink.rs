//! When a collection a burst grew gives its room back: half, once it is
//! under a quarter full, never below a floor. A burst's memory goes back
//! as its entries leave (50M delayed jobs left 1.4 GB of empty heaps
//! behind), and between two reallocations a quarter of the capacity is
//! added or removed, so each entry pays O(1) for them. The engine's heaps
//! and the store's page table and job places follow it.

/// The capacity a collection of `len` entries in room for `capacity`
/// shrinks to, if it should: half, once under a quarter full, never below
/// `keep` (giving back less is not worth a reallocation).
pub(crate) fn shrunk(len: usize, capacity: usize, keep: usize) -> Option<usize> {
    (capacity > keep && len < capacity / 4).then_some((capacity / 2).max(keep))
}

#[cfg(test)]
mod tests {
    use super::shrunk;

    #[test]
    fn half_goes_back_once_under_a_quarter_full() {
        const KEEP: usize = 4096;
        let cases = [
            // (len, capacity, shrinks to)
            (0, KEEP, None),
            (10, KEEP, None),
            (KEEP, 4 * KEEP, None),
            (KEEP - 1, 4 * KEEP, Some(2 * KEEP)),
            (KEEP / 2 - 1, 2 * KEEP, Some(KEEP)),
            (0, KEEP + 1, Some(KEEP)),
            (1_000_000, 1 << 24, Some(1 << 23)),
            (1 << 22, 1 << 24, None),
        ];
        for (len, capacity, want) in cases {
            assert_eq!(shrunk(len, capacity, KEEP), want, "{len} of {capacity}");
        }
    }
}
