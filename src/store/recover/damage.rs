//! How recovery treats damage: a start refused, or with `--salvage` a
//! line in the log and the damaged part skipped.

use std::io;

pub fn corrupt(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// Whether damage stops the start (the default) or is logged and
/// skipped (`--salvage`).
#[derive(Clone, Copy)]
pub struct Damage {
    pub salvage: bool,
}

impl Damage {
    pub fn refuse(self, what: String) -> io::Result<()> {
        if !self.salvage {
            return Err(corrupt(what));
        }
        tracing::error!("salvaging: {what}");
        Ok(())
    }
}
