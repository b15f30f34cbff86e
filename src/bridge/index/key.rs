//! A key as the index keeps it, with its node: in 24 bytes, the key's
//! bytes inline when it has at most [`INLINE`] of them (most keys:
//! `session:1234567890`), else in a heap allocation of its own. A row of
//! the map is then 40 bytes with its entry, and a short key costs no
//! allocation: a boxed key cost a 16-byte pointer plus a 32-byte malloc
//! chunk, and a cache miss more per lookup.

/// The longest key kept inline.
pub const INLINE: usize = 20;

/// A node and key (see the module docs).
#[derive(Clone, Debug)]
pub enum Key {
    Inline {
        node: u16,
        len: u8,
        bytes: [u8; INLINE],
    },
    Heap {
        node: u16,
        bytes: Box<[u8]>,
    },
}

const _: () = assert!(std::mem::size_of::<Key>() == 24);

impl Key {
    pub fn new(node: u16, key: &[u8]) -> Key {
        if key.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..key.len()].copy_from_slice(key);
            Key::Inline {
                node,
                len: key.len() as u8,
                bytes,
            }
        } else {
            Key::Heap {
                node,
                bytes: key.into(),
            }
        }
    }

    pub fn node(&self) -> u16 {
        match *self {
            Key::Inline { node, .. } | Key::Heap { node, .. } => node,
        }
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            Key::Inline { len, bytes, .. } => &bytes[..usize::from(*len)],
            Key::Heap { bytes, .. } => bytes,
        }
    }

    pub fn is(&self, node: u16, key: &[u8]) -> bool {
        self.node() == node && self.bytes() == key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_are_inline_and_long_ones_boxed() {
        for len in [0, 1, INLINE - 1, INLINE, INLINE + 1, 300] {
            let key: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let k = Key::new(7, &key);
            assert_eq!(matches!(k, Key::Inline { .. }), len <= INLINE, "{len}");
            assert_eq!((k.node(), k.bytes()), (7, &key[..]));
            assert!(k.is(7, &key) && !k.is(6, &key));
            assert!(!k.is(7, b"other key, not this one"));
        }
    }
}
