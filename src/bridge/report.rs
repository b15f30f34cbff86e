//! What the bridge says at the default log level (the target
//! [`crate::STATUS`]): each source and how it reads expiries, where it
//! delivers, and every Redis setting it changes, old → new. Pure
//! functions from what a line reports to its text; the callers log them.

use std::time::Duration;

use super::config::{Config, Node};
use super::redis_caps::{Caps, Method};
use super::redis_side::Notifications;

/// How a node's expiries are read.
pub fn reading(caps: &Caps) -> &'static str {
    match caps.method {
        Method::ExpireTime => "PEXPIRETIME (exact)",
        Method::TtlServerClock => "PTTL between two TIMEs of one pipeline (no PEXPIRETIME)",
        Method::TtlLocalClock => {
            "PTTL timed by the bridge's clock (no PEXPIRETIME, no TIME): deadlines are \
             rounded up by the round trip"
        }
    }
}

/// How TTLs are learnt.
fn learning(pubsub: bool, scan_interval: Duration) -> String {
    let every = scan_interval.as_secs_f64();
    match pubsub {
        true => format!("keyspace events, and SCAN every {every} s"),
        false => format!("SCAN alone, every {every} s (--no-pubsub)"),
    }
}

/// The line of a node connected to, `at` the address the sentinels named.
pub fn source(node: &Node, at: Option<&str>, caps: &Caps, config: &Config) -> String {
    let at = at.map(|a| {
        format!(
            " {} at {a}",
            node.sentinel.as_ref().map_or("", |s| &s.master)
        )
    });
    format!(
        "bridge source {} ({}{}): Redis {}, expiries read with {}, TTLs learnt from {}",
        node.url,
        node.kind.name(),
        at.unwrap_or_default(),
        version(caps),
        reading(caps),
        learning(config.pubsub, config.scan_interval),
    )
}

/// The line of a Redis Cluster found from `node`.
pub fn redis_cluster(node: &Node, config: &Config) -> String {
    format!(
        "bridge source {} ({}): its masters' TTLs learnt from {}",
        node.url,
        node.kind.name(),
        learning(config.pubsub, config.scan_interval),
    )
}

/// The line of a master of the cluster found from `node`.
pub fn master(node: &Node, addr: &str, caps: &Caps) -> String {
    format!(
        "bridge source {}: following the master {addr}: Redis {}, expiries read with {}",
        node.url,
        version(caps),
        reading(caps),
    )
}

fn version(caps: &Caps) -> &str {
    match caps.version.as_str() {
        "" => "(version not told)",
        v => v,
    }
}

/// The line of a bridge that is running.
pub fn delivering(config: &Config) -> String {
    format!(
        "bridge delivering expiries of keys matching {} to the tube {} (timers in {}), from {} source{}",
        config.patterns.join(" "),
        config.tube.as_str(),
        config.timer_tube.as_str(),
        config.nodes.len(),
        if config.nodes.len() == 1 { "" } else { "s" },
    )
}

/// What switching the node at `addr`'s keyspace events on did, as a
/// line: `(warn, text)`, none when nothing changed.
pub fn notifications(addr: &str, outcome: &Notifications) -> Option<(bool, String)> {
    const LOST: &str = "TTL changes they announce are only seen by SCAN every --scan-interval";
    match outcome {
        Notifications::On => None,
        Notifications::Changed { old, new, missing } if missing.is_empty() => Some((
            false,
            format!("notify-keyspace-events on {addr}: {old:?} -> {new:?}"),
        )),
        Notifications::Changed { old, new, missing } => Some((
            true,
            format!(
                "notify-keyspace-events on {addr}: {old:?} -> {new:?}, still without \
                 the classes {missing:?}: {LOST}"
            ),
        )),
        Notifications::Refused { old, missing, why } => Some((
            true,
            format!(
                "cannot change notify-keyspace-events on {addr} ({}) to add the classes \
                 {missing:?}: {why}; {LOST}",
                old.as_deref()
                    .map_or("unreadable".to_owned(), |o| format!("now {o:?}")),
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notification_lines() {
        let addr = "127.0.0.1:6379";
        let changed = |missing: &str| Notifications::Changed {
            old: "Ex".into(),
            new: "g$xeKE".into(),
            missing: missing.into(),
        };
        let refused = Notifications::Refused {
            old: Some(String::new()),
            missing: "Kg$xe".into(),
            why: "CONFIG SET to \"Kg$xe\": ERR unknown command".into(),
        };
        let unreadable = Notifications::Refused {
            old: None,
            missing: "Kg$xe".into(),
            why: "CONFIG GET: ERR unknown command".into(),
        };
        let lost = "TTL changes they announce are only seen by SCAN every --scan-interval";
        for (outcome, want) in [
            (Notifications::On, None),
            (
                changed(""),
                Some((
                    false,
                    r#"notify-keyspace-events on 127.0.0.1:6379: "Ex" -> "g$xeKE""#.to_owned(),
                )),
            ),
            (
                changed("e"),
                Some((
                    true,
                    format!(
                        r#"notify-keyspace-events on 127.0.0.1:6379: "Ex" -> "g$xeKE", still without the classes "e": {lost}"#
                    ),
                )),
            ),
            (
                refused,
                Some((
                    true,
                    format!(
                        r#"cannot change notify-keyspace-events on 127.0.0.1:6379 (now "") to add the classes "Kg$xe": CONFIG SET to "Kg$xe": ERR unknown command; {lost}"#
                    ),
                )),
            ),
            (
                unreadable,
                Some((
                    true,
                    format!(
                        r#"cannot change notify-keyspace-events on 127.0.0.1:6379 (unreadable) to add the classes "Kg$xe": CONFIG GET: ERR unknown command; {lost}"#
                    ),
                )),
            ),
        ] {
            assert_eq!(notifications(addr, &outcome), want, "{outcome:?}");
        }
    }

    #[test]
    fn learning_says_events_or_scan() {
        let minute = Duration::from_secs(60);
        assert_eq!(
            learning(true, minute),
            "keyspace events, and SCAN every 60 s"
        );
        assert_eq!(
            learning(false, Duration::from_millis(1500)),
            "SCAN alone, every 1.5 s (--no-pubsub)"
        );
    }
}
