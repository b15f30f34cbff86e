//! What Redis says about a key's expiry ([`Expiry`]), and how far that
//! reading can be off ([`Reading`]): the words `redis_side` reads and
//! `decide` decides with.

/// What Redis says about a key's expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// The key does not exist (`PEXPIRETIME` answered -2).
    Gone,
    /// The key exists without a TTL (-1).
    Persistent,
    /// The key expires at this Unix time in milliseconds.
    At(i64),
}

impl Expiry {
    pub(super) fn from_reply(ms: i64) -> Expiry {
        match ms {
            -2 => Expiry::Gone,
            ms if ms < 0 => Expiry::Persistent,
            ms => Expiry::At(ms),
        }
    }

    /// From a `PTTL` answer read between the clock readings `lo` and `hi`
    /// (ms): the latest the key can expire.
    pub(super) fn from_ttl(ttl: i64, hi: i64) -> Expiry {
        match ttl {
            ttl if ttl < 0 => Expiry::from_reply(ttl),
            ttl => Expiry::At(hi + ttl),
        }
    }
}

/// One answer about a key's expiry: `expiry`, and how much earlier than
/// its `At` the key may really expire (0 with `PEXPIRETIME`; the bracket's
/// width with `PTTL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    pub expiry: Expiry,
    pub err_ms: i64,
}

impl From<Expiry> for Reading {
    fn from(expiry: Expiry) -> Reading {
        Reading { expiry, err_ms: 0 }
    }
}

impl Reading {
    /// From a `PTTL` answer read between the clock readings `lo` and `hi`
    /// (ms).
    pub(super) fn from_ttl(ttl: i64, lo: i64, hi: i64) -> Reading {
        Reading {
            expiry: Expiry::from_ttl(ttl, hi),
            err_ms: hi - lo,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_readings_are_the_latest_possible_expiry() {
        assert_eq!(Expiry::from_ttl(-2, 1_000), Expiry::Gone);
        assert_eq!(Expiry::from_ttl(-1, 1_000), Expiry::Persistent);
        assert_eq!(Expiry::from_ttl(250, 1_000), Expiry::At(1_250));
        assert_eq!(Expiry::from_ttl(0, 1_000), Expiry::At(1_000));
    }
}
