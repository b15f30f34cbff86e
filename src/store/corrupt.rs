//! The one error every stored format's decoder returns: a value that does
//! not decode, named by what was wrong with it. A leaf, so the record,
//! page, entry and tag decoders can share it without importing each other.

use std::fmt;

/// A stored value that does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt(pub &'static str);

impl fmt::Display for Corrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}
