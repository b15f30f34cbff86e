//! How the bridge tells keys apart: a key is a [`KeyRef`], its node and
//! its bytes; one hash of it spreads keys
//! over the sync workers and over the registry's lock stripes (the same
//! hash, so a sync worker never waits for another's stripe), and batches
//! find a key's repeats by its first occurrence.

use std::hash::{Hash, Hasher};

/// A key as the bridge names it: the node it lives on (the position of its
/// source, see `config`; a Redis Cluster is one node) and its bytes,
/// borrowed from the timer or work item that carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyRef<'k> {
    pub node: u16,
    pub bytes: &'k [u8],
}

impl<'k> KeyRef<'k> {
    pub fn new(node: u16, bytes: &'k [u8]) -> KeyRef<'k> {
        KeyRef { node, bytes }
    }

    /// The key, for a log line (not UTF-8: U+FFFD in place of bad bytes).
    pub fn lossy(self) -> std::borrow::Cow<'k, str> {
        String::from_utf8_lossy(self.bytes)
    }
}

/// A [`KeyRef`] that owns its bytes: what a map kept beyond one batch is
/// keyed by.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeyName {
    pub node: u16,
    pub bytes: Vec<u8>,
}

impl KeyRef<'_> {
    pub fn to_name(self) -> KeyName {
        KeyName {
            node: self.node,
            bytes: self.bytes.to_vec(),
        }
    }
}

/// The hash of a key on a node (see the module docs for its two uses).
pub fn key_hash(key: KeyRef<'_>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (key.node, key.bytes).hash(&mut h);
    h.finish()
}

/// For each key in order, the position of its first occurrence
/// (its own position if it is the first): how batches find repeated keys
/// without copying them.
pub fn first_occurrences<'a>(keys: impl Iterator<Item = KeyRef<'a>>) -> Vec<usize> {
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
        let first = first_occurrences(keys.iter().map(|&(n, k)| KeyRef::new(n, k.as_bytes())));
        assert_eq!(first, [0, 1, 2, 0, 2]);
        let (a0, a1) = (KeyRef::new(0, b"a"), KeyRef::new(1, b"a"));
        assert_eq!(key_hash(a0), key_hash(KeyRef::new(0, b"a")));
        assert_ne!(key_hash(a0), key_hash(a1));
    }
}
