//! Every command of the protocol, allowed and refused, for principals of
//! different grants.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use sprout_protocol::{Command, Op, Token, TubeName};

use super::*;
use crate::auth::glob::TubePattern;
use crate::auth::grant::Grant;

struct Known {
    used: &'static str,
    watched: Vec<&'static str>,
    /// id -> (tube, reserved by this connection)
    jobs: HashMap<JobId, (&'static str, bool)>,
}

impl Facts for Known {
    fn used(&self) -> &str {
        self.used
    }
    fn watched(&self) -> impl Iterator<Item = &str> {
        self.watched.iter().copied()
    }
    fn job(&self, id: JobId) -> Option<JobFacts<'_>> {
        self.jobs
            .get(&id)
            .map(|&(tube, mine)| JobFacts { tube, mine })
    }
}

/// Uses `orders.eu`, watches `orders.eu` and `orders.us` (or, with
/// `default_watched`, `default` too, as a connection starts).
fn facts(default_watched: bool) -> Known {
    let mut watched = vec!["orders.eu", "orders.us"];
    if default_watched {
        watched.insert(0, "default");
    }
    Known {
        used: "orders.eu",
        watched,
        jobs: HashMap::from([
            (1, ("orders.eu", true)),
            (2, ("orders.us", false)),
            (3, ("default", false)),
            (4, ("default", true)),
        ]),
    }
}

fn grants(list: &[(&[&str], &[Action])]) -> Grants {
    Grants::new(
        list.iter()
            .map(|(tubes, actions)| {
                let tubes = tubes.iter().map(|t| TubePattern::new(t).unwrap()).collect();
                Grant::new(tubes, actions)
            })
            .collect(),
    )
}

fn principal(name: &str) -> Grants {
    use Action::*;
    match name {
        "producer" => grants(&[(&["orders.*"], &[Produce])]),
        "worker" => grants(&[(&["orders.*"], &[Consume]), (&["orders.eu"], &[Inspect])]),
        "ops" => grants(&[(&["*"], &[Inspect, Admin])]),
        "bridge" => grants(&[(&["orders.*"], &[Produce, Consume])]),
        "nobody" => grants(&[(&["other"], &[Consume])]),
        _ => unreachable!(),
    }
}

fn tube(name: &str) -> TubeName {
    TubeName::new(name.as_bytes()).unwrap()
}

fn put() -> Command {
    Command::Put {
        pri: 0,
        delay: Duration::ZERO,
        ttr: Duration::from_secs(1),
        body: Bytes::from_static(b"x"),
        tags: None,
    }
}

fn fire(id: JobId) -> Command {
    Command::Fire {
        id,
        pri: 0,
        ttr: Duration::from_secs(1),
        body: Bytes::from_static(b"x"),
    }
}

fn shown(decision: Decision) -> String {
    match decision {
        Decision::Allow => "allow".into(),
        Decision::Admin => "admin".into(),
        Decision::Inspectable => "inspectable".into(),
        Decision::Forbidden(need) => format!("forbidden: {need}"),
    }
}

#[test]
fn every_command() {
    use Command as C;
    let secs = Duration::from_secs;
    let table: Vec<(Command, &str, bool, &str)> = vec![
        // (command, principal, watching default too, verdict)
        (C::Use(tube("orders.eu")), "producer", false, "allow"),
        (C::Use(tube("orders.eu")), "worker", false, "allow"),
        (C::Use(tube("orders.us")), "ops", false, "allow"),
        (
            C::Use(tube("orders.us")),
            "worker",
            false,
            "forbidden: produce, inspect or admin on orders.us",
        ),
        (C::Watch(tube("orders.us")), "worker", false, "allow"),
        (
            C::Watch(tube("orders.us")),
            "producer",
            false,
            "forbidden: consume on orders.us",
        ),
        (C::Ignore(tube("default")), "nobody", true, "allow"),
        (put(), "producer", false, "allow"),
        (put(), "worker", false, "forbidden: produce on orders.eu"),
        (C::Reserve, "worker", false, "allow"),
        (C::Reserve, "worker", true, "forbidden: consume on default"),
        (C::Reserve, "ops", false, "forbidden: consume on orders.eu"),
        (C::ReserveWithTimeout(secs(0)), "worker", false, "allow"),
        (
            C::ReserveWithTimeout(secs(0)),
            "producer",
            false,
            "forbidden: consume on orders.eu",
        ),
        (C::ReserveBatch(5), "worker", false, "allow"),
        (
            C::ReserveBatch(5),
            "worker",
            true,
            "forbidden: consume on default",
        ),
        (
            C::ReserveBatchWait {
                n: 5,
                timeout: secs(1),
            },
            "worker",
            true,
            "forbidden: consume on default",
        ),
        (C::ReserveJob(2), "worker", false, "allow"),
        (
            C::ReserveJob(2),
            "producer",
            false,
            "forbidden: consume on orders.us",
        ),
        (C::ReserveJob(99), "producer", false, "allow"),
        (
            C::Release {
                id: 1,
                pri: 0,
                delay: secs(0),
            },
            "worker",
            false,
            "allow",
        ),
        (
            C::Release {
                id: 1,
                pri: 0,
                delay: secs(0),
            },
            "producer",
            false,
            "forbidden: consume on orders.eu",
        ),
        // Not this connection's: the engine's NOT_FOUND.
        (
            C::Release {
                id: 2,
                pri: 0,
                delay: secs(0),
            },
            "producer",
            false,
            "allow",
        ),
        (C::Bury { id: 1, pri: 0 }, "worker", false, "allow"),
        (
            C::Bury { id: 4, pri: 0 },
            "worker",
            false,
            "forbidden: consume on default",
        ),
        (C::Touch(1), "worker", false, "allow"),
        (
            C::Touch(4),
            "worker",
            false,
            "forbidden: consume on default",
        ),
        (C::Touch(3), "nobody", false, "allow"),
        (C::Delete(1), "worker", false, "allow"),
        (
            C::Delete(2),
            "worker",
            false,
            "forbidden: admin on orders.us",
        ),
        (C::Delete(2), "ops", false, "admin"),
        (C::Delete(4), "ops", false, "forbidden: consume on default"),
        (C::Delete(99), "nobody", false, "allow"),
        (C::DeleteBatch(vec![1, 99]), "worker", false, "allow"),
        (
            C::DeleteBatch(vec![1, 2]),
            "worker",
            false,
            "forbidden: admin on orders.us",
        ),
        (C::DeleteBatch(vec![2, 3, 99]), "ops", false, "admin"),
        (C::Peek(1), "worker", false, "allow"),
        (
            C::Peek(2),
            "worker",
            false,
            "forbidden: inspect on orders.us",
        ),
        (C::Peek(99), "nobody", false, "allow"),
        (C::StatsJob(3), "ops", false, "allow"),
        (
            C::StatsJob(3),
            "producer",
            false,
            "forbidden: inspect on default",
        ),
        (C::PeekReady, "worker", false, "allow"),
        (
            C::PeekReady,
            "producer",
            false,
            "forbidden: inspect on orders.eu",
        ),
        (C::PeekDelayed, "ops", false, "allow"),
        (
            C::PeekDelayed,
            "bridge",
            false,
            "forbidden: inspect on orders.eu",
        ),
        (C::PeekBuried, "worker", false, "allow"),
        (
            C::PeekBuried,
            "nobody",
            false,
            "forbidden: inspect on orders.eu",
        ),
        (C::PeekReserved, "ops", false, "allow"),
        (
            C::PeekReserved,
            "producer",
            false,
            "forbidden: inspect on orders.eu",
        ),
        (C::Kick(1), "ops", false, "admin"),
        (C::Kick(1), "worker", false, "forbidden: admin on orders.eu"),
        (C::KickJob(2), "ops", false, "admin"),
        (
            C::KickJob(2),
            "worker",
            false,
            "forbidden: admin on orders.us",
        ),
        (C::KickJob(99), "worker", false, "allow"),
        (C::Stats, "ops", false, "allow"),
        (C::Stats, "worker", false, "inspectable"),
        (
            C::Stats,
            "producer",
            false,
            "forbidden: inspect on some tube",
        ),
        (C::StatsTube(tube("orders.eu")), "worker", false, "allow"),
        (
            C::StatsTube(tube("orders.us")),
            "worker",
            false,
            "forbidden: inspect on orders.us",
        ),
        (C::ListTubes, "ops", false, "allow"),
        (C::ListTubes, "worker", false, "inspectable"),
        (C::ListTubes, "producer", false, "inspectable"),
        (C::ListTubeUsed, "nobody", false, "allow"),
        (C::ListTubesWatched, "nobody", false, "allow"),
        (
            C::PauseTube {
                tube: tube("orders.eu"),
                delay: secs(10),
            },
            "ops",
            false,
            "admin",
        ),
        (
            C::PauseTube {
                tube: tube("orders.eu"),
                delay: secs(10),
            },
            "worker",
            false,
            "forbidden: admin on orders.eu",
        ),
        (C::Quit, "nobody", false, "allow"),
        (C::Auth(Token::new("t")), "nobody", false, "allow"),
        (C::FlushTube(tube("orders.us")), "ops", false, "admin"),
        (
            C::FlushTube(tube("orders.us")),
            "producer",
            false,
            "forbidden: admin on orders.us",
        ),
        (C::FlushBuried(tube("orders.us")), "ops", false, "admin"),
        (
            C::FlushBuried(tube("orders.us")),
            "worker",
            false,
            "forbidden: admin on orders.us",
        ),
        (C::Drain, "ops", false, "admin"),
        (C::Undrain, "ops", false, "admin"),
        (C::Drain, "producer", false, "forbidden: admin on *"),
        (C::Undrain, "worker", false, "forbidden: admin on *"),
        (C::StatsGroup("g".into()), "ops", false, "allow"),
        (
            C::StatsGroup("g".into()),
            "worker",
            false,
            "forbidden: inspect on *",
        ),
        (fire(1), "bridge", false, "allow"),
        (fire(1), "worker", false, "forbidden: produce on orders.eu"),
        (
            fire(1),
            "producer",
            false,
            "forbidden: consume on orders.eu",
        ),
        (fire(2), "producer", false, "allow"),
    ];
    for (command, who, default_watched, want) in &table {
        let got = shown(decide(&principal(who), command, &facts(*default_watched)));
        assert_eq!(&got, want, "{who}: {command:?}");
    }
    // Every command of the protocol is in the table.
    for op in Op::ALL {
        assert!(
            table.iter().any(|(command, ..)| command.op() == op),
            "{} is not in the table",
            op.name()
        );
    }
}
