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
    /// Redis announced the key taken away by a command ([`REMOVALS`]): if
    /// it is gone, it did not expire, however near its deadline the bridge
    /// reads it (a bridge lagging behind its events read a key renamed
    /// away 400 ms before its deadline only within the slack, and fired it).
    pub removed: bool,
}

/// The keyspace events of a key taken away by a command, not by its TTL:
/// `RENAME`'s and `MOVE`'s source. Not `del`: a replica announces the
/// expiries its master sends it as `DEL`s with that name (a master just
/// demoted in a Redis Cluster failover did, and due keys were lost).
pub const REMOVALS: [&[u8]; 2] = [b"rename_from", b"move_from"];

impl Hint {
    /// The hint of a keyspace event named `event`.
    pub fn event(event: &[u8]) -> Hint {
        let expired = event == b"expired";
        Hint {
            expired,
            verify: false,
            changed: !expired,
            removed: REMOVALS.contains(&event),
        }
    }

    /// The hint of a key SCAN listed (`verify` on a pass that checks timers).
    pub fn scanned(verify: bool) -> Hint {
        Hint {
            expired: false,
            verify,
            changed: true,
            removed: false,
        }
    }

    /// Both hints at once: what a key queued twice is synced with.
    pub fn merge(self, other: Hint) -> Hint {
        Hint {
            expired: self.expired | other.expired,
            verify: self.verify | other.verify,
            changed: self.changed | other.changed,
            removed: self.removed | other.removed,
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

#[cfg(test)]
mod tests {
    use super::Hint;

    #[test]
    fn only_a_command_that_takes_the_key_away_is_a_removal() {
        #[rustfmt::skip]
        let rows: &[(&str, bool, bool)] = &[
            // (event, expired, removed)
            ("del", false, false),
            ("rename_from", false, true),
            ("move_from", false, true),
            ("rename_to", false, false),
            ("expire", false, false),
            ("set", false, false),
            ("evicted", false, false),
            ("expired", true, false),
        ];
        for &(event, expired, removed) in rows {
            let hint = Hint::event(event.as_bytes());
            assert_eq!((hint.expired, hint.removed), (expired, removed), "{event}");
        }
    }
}
