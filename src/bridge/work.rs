//! One key to sync, and why: what events and SCAN hand the sync queue,
//! and what [`crate::bridge::registry`] decides from.

use super::keys::KeyRef;

/// What the sync of a key is told about why it runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hint {
    /// Redis announced the key `expired`: leave its timer to fire.
    pub expired: bool,
    /// Check that the indexed timer really exists (after a start or a lost
    /// server connection: a server without `-b` forgets its jobs).
    pub verify: bool,
    /// Something besides `expired` asked (another event, or SCAN): Redis
    /// must be read even if the key's expiry was already delivered.
    pub changed: bool,
}

impl Hint {
    /// The hint of a keyspace event named `event`.
    pub fn event(event: &[u8]) -> Hint {
        let expired = event == b"expired";
        Hint {
            expired,
            verify: false,
            changed: !expired,
        }
    }

    /// The hint of a key SCAN listed (`verify` on a pass that checks timers).
    pub fn scanned(verify: bool) -> Hint {
        Hint {
            expired: false,
            verify,
            changed: true,
        }
    }

    /// Both hints at once: what a key queued twice is synced with.
    pub fn merge(self, other: Hint) -> Hint {
        Hint {
            expired: self.expired | other.expired,
            verify: self.verify | other.verify,
            changed: self.changed | other.changed,
        }
    }
}

/// One key to sync.
pub struct Work {
    pub node: u16,
    pub key: Vec<u8>,
    pub hint: Hint,
}

impl Work {
    pub fn key_ref(&self) -> KeyRef<'_> {
        KeyRef::new(self.node, &self.key)
    }
}
