//! How the bridge tells keys apart: one hash of `(node, key)` spreads keys
//! over the sync workers and over the registry's lock stripes (the same
//! hash, so a sync worker never waits for another's stripe), and batches
//! find a key's repeats by its first occurrence.

use std::hash::{Hash, Hasher};

/// The hash of a key on a node (see the module docs for its two uses).
pub fn key_hash(node: u16, key: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (node, key).hash(&mut h);
    h.finish()
}

/// For each `(node, key)` in order, the position of its first occurrence
/// (its own position if it is the first): how batches find repeated keys
/// without copying them.
pub fn first_occurrences<'a>(keys: impl Iterator<Item = (u16, &'a [u8])>) -> Vec<usize> {
    let mut seen = std::collections::HashMap::new();
    keys.enumerate()
        .map(|(i, key)| *seen.entry(key).or_insert(i))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_point_at_their_first_occurrence() {
        let keys = [(0, "a"), (0, "b"), (1, "a"), (0, "a"), (1, "a")];
        let first = first_occurrences(keys.iter().map(|&(n, k)| (n, k.as_bytes())));
        assert_eq!(first, [0, 1, 2, 0, 2]);
        assert_eq!(key_hash(0, b"a"), key_hash(0, b"a"));
        assert_ne!(key_hash(0, b"a"), key_hash(1, b"a"));
    }
}
