//! Refuse NATS servers too old for cluster mode.
//!
//! Before 2.12 a server lacks what sprout's guarantees stand on:
//! `sync_interval: always` (2.9 acks before fsync), atomic batches
//! (`allow_atomic`), and it silently ignores headers it does not know, so a
//! `Nats-Expected-Last-Sequence` fence would do nothing. The check runs on
//! the version in the server's INFO, before anything is written, and again
//! on every server the client reconnects to ([`watch`]): async-nats
//! reconnects by itself, to any of the URLs or to a server the cluster
//! announced.

use std::time::Duration;

/// How often [`watch`] looks at which server the client is connected to:
/// a refused server is used for at most about this long.
const WATCH_EVERY: Duration = Duration::from_millis(100);

/// The oldest server version accepted.
pub const MINIMUM: (u64, u64, u64) = (2, 12, 0);

/// Why a server version cannot back a cluster.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    #[error(
        "version {0} is older than {major}.{minor}.{patch}, the minimum for \
         cluster mode: it lacks sync_interval (acks before fsync), atomic batches \
         and the Nats-Expected-Last-Sequence fencing headers",
        major = MINIMUM.0,
        minor = MINIMUM.1,
        patch = MINIMUM.2
    )]
    TooOld(String),
    #[error(
        "cannot read the NATS server version {0:?}: cluster mode needs \
         {major}.{minor}.{patch} or newer",
        major = MINIMUM.0,
        minor = MINIMUM.1,
        patch = MINIMUM.2
    )]
    Unreadable(String),
}

/// A NATS server refused for its version.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("NATS server {server}: {why}")]
pub struct Refused {
    pub server: String,
    #[source]
    pub why: Unsupported,
}

/// Checks the server a client is connected to (its INFO's version).
pub fn check(client: &async_nats::Client) -> Result<(), Refused> {
    let info = client.server_info();
    supported(&info.version).map_err(|why| Refused {
        server: info.server_name.clone(),
        why,
    })
}

/// Checks each server the client reconnects to; returns why once one is
/// refused (the node must then stop: `cluster::start` exits).
///
/// async-nats has no hook that runs after a reconnect's INFO is in (its
/// `Connected` event comes just before), so this compares the INFO's
/// `server_id` every [`WATCH_EVERY`]: a watch borrow, nothing on the wire.
pub async fn watch(client: async_nats::Client) -> String {
    let mut seen = client.server_info().server_id;
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        let info = client.server_info();
        if info.server_id == seen {
            continue;
        }
        if let Err(why) = supported(&info.version) {
            return format!("reconnected to NATS server {}: {why}", info.server_name);
        }
        tracing::info!(
            "reconnected to NATS server {} ({})",
            info.server_name,
            info.version
        );
        seen = info.server_id;
    }
}

/// Whether a server reporting `version` (e.g. `2.15.1`, `2.16.0-RC.2`) may
/// back a cluster. A pre-release counts as older than its release (semver),
/// so `2.12.0-RC.1` is refused.
pub fn supported(version: &str) -> Result<(), Unsupported> {
    let parsed = parse(version).ok_or_else(|| Unsupported::Unreadable(version.to_string()))?;
    match parsed {
        (v, false) if v >= MINIMUM => Ok(()),
        (v, true) if v > MINIMUM => Ok(()),
        _ => Err(Unsupported::TooOld(version.to_string())),
    }
}

/// `MAJOR.MINOR.PATCH[-PRE][+BUILD]`, an optional leading `v`: the numbers
/// and whether it is a pre-release.
fn parse(version: &str) -> Option<((u64, u64, u64), bool)> {
    let v = version.trim();
    let v = v.strip_prefix('v').unwrap_or(v);
    let v = v.split_once('+').map_or(v, |(core, _build)| core);
    let (core, pre) = match v.split_once('-') {
        Some((core, pre)) if !pre.is_empty() => (core, true),
        Some(_) => return None,
        None => (v, false),
    };
    let mut parts = core.split('.');
    let mut number = || -> Option<u64> {
        let p = parts.next()?;
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        p.parse().ok()
    };
    let numbers = (number()?, number()?, number()?);
    match parts.next() {
        Some(_) => None,
        None => Some((numbers, pre)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        // (reported version, accepted)
        let table = [
            ("2.12.0", true),
            ("2.12.1", true),
            ("2.15.1", true),
            ("v2.15.1", true),
            ("2.16.0-RC.1", true),
            ("2.16.0-beta", true),
            ("2.14.0+build.5", true),
            ("3.0.0", true),
            ("2.100.0", true),
            ("2.12.0-RC.3", false),
            ("2.11.9", false),
            ("2.10.22", false),
            ("2.9.10", false),
            ("1.99.99", false),
        ];
        for (version, accepted) in table {
            assert_eq!(supported(version).is_ok(), accepted, "{version}");
        }
    }

    /// The words operators and docs/cluster.md know, exactly.
    #[test]
    fn the_messages_word_for_word() {
        let refused = Refused {
            server: "n1".into(),
            why: supported("2.9.10").unwrap_err(),
        };
        assert_eq!(
            refused.to_string(),
            "NATS server n1: version 2.9.10 is older than 2.12.0, the minimum for cluster \
             mode: it lacks sync_interval (acks before fsync), atomic batches and the \
             Nats-Expected-Last-Sequence fencing headers"
        );
        assert_eq!(
            supported("x").unwrap_err().to_string(),
            "cannot read the NATS server version \"x\": cluster mode needs 2.12.0 or newer"
        );
    }

    #[test]
    fn an_old_server_is_told_what_it_lacks() {
        let err = supported("2.9.10").unwrap_err().to_string();
        for needle in [
            "2.9.10",
            "2.12.0",
            "sync_interval",
            "atomic batches",
            "Nats-Expected-Last-Sequence",
        ] {
            assert!(err.contains(needle), "{needle:?} missing from {err:?}");
        }
    }

    #[test]
    fn garbage_is_refused() {
        for version in [
            "",
            "2",
            "2.15",
            "2.15.",
            "2.15.1.4",
            "x.y.z",
            "2.15.1-",
            "2.-1.0",
            " ",
            "2..1",
            "2.15.1 extra",
            "+2.15.1",
        ] {
            let err = supported(version).unwrap_err().to_string();
            assert!(
                err.contains("cannot read") || err.contains("older"),
                "{version:?}: {err}"
            );
            assert!(err.contains("2.12.0"), "{version:?}: {err}");
        }
    }
}
