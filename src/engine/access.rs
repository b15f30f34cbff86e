//! What the access checks of `--auth` read of the engine (`auth/` decides,
//! `connection.rs` asks): the tube a connection uses, the tubes it
//! watches, a job's tube and whether this connection holds it; and
//! `list-tubes` and `stats` as a principal that may inspect only some
//! tubes sees them. Reads only, but for the command's usual counting.
//!
//! The restricted `stats` counts, over the tubes `sees` accepts, what
//! `stats-tube` shows of each: `current-jobs-urgent`, `-ready`,
//! `-reserved`, `-delayed`, `-buried`, `total-jobs` (the sum of those
//! tubes' `total-jobs`, so jobs of tubes since dropped are not counted),
//! and `current-tubes`. Every other key (command counts, connections,
//! `job-timeouts`, the binlog's and the host's figures) is the server's,
//! as without `--auth`: they tell how busy the server is, not what any
//! tube holds.

use bytes::Bytes;
use sprout_protocol::{Command, JobId, Response, TubeName};

use super::clock::Time;
use super::conn::ConnId;
use super::machine::{Engine, Outcome};
use super::{dispatch, stats};

impl Engine {
    /// The tube `conn` uses.
    pub fn used_tube(&self, conn: ConnId) -> &TubeName {
        &self.tubes[self.used(conn)].name
    }

    /// The tubes `conn` watches.
    pub fn watched_tubes(&self, conn: ConnId) -> impl Iterator<Item = &TubeName> {
        self.conns[&conn].watch.iter().map(|&t| &self.tubes[t].name)
    }

    /// Job `id`'s tube, and whether `conn` holds it reserved; `None` if
    /// there is no such job.
    pub fn job_access(&self, conn: ConnId, id: JobId) -> Option<(&TubeName, bool)> {
        let slot = self.jobs.find(id)?;
        let mine = self.owned(conn, id).is_some();
        Some((&self.tubes[self.jobs.tube(slot)].name, mine))
    }

    /// [`Engine::execute`], with `list-tubes` and `stats` covering only the
    /// tubes `sees` accepts (see the module docs).
    pub fn execute_seeing(
        &mut self,
        conn: ConnId,
        cmd: Command,
        now: Time,
        sees: &dyn Fn(&TubeName) -> bool,
    ) -> Outcome {
        self.run(conn, cmd, now, |e, conn, cmd| match cmd {
            Command::ListTubes => Outcome::Reply(Response::Ok(e.tube_list_seeing(sees))),
            Command::Stats => Outcome::Reply(Response::Ok(e.stats_seeing(sees))),
            cmd => dispatch::dispatch(e, conn, cmd),
        })
    }

    fn tube_list_seeing(&self, sees: &dyn Fn(&TubeName) -> bool) -> Bytes {
        let names = self.tubes.list().iter().map(|&t| &self.tubes[t].name);
        stats::tube_list(names.filter(|name| sees(name)))
    }

    fn stats_seeing(&self, sees: &dyn Fn(&TubeName) -> bool) -> Bytes {
        let mut counters = self.stats.clone();
        (counters.urgent, counters.ready, counters.reserved) = (0, 0, 0);
        (counters.delayed, counters.buried, counters.total_jobs) = (0, 0, 0);
        let mut tubes = 0;
        for &t in self.tubes.list() {
            let tube = &self.tubes[t];
            if !sees(&tube.name) {
                continue;
            }
            tubes += 1;
            counters.urgent += tube.urgent;
            counters.ready += tube.ready.len() as u64;
            counters.reserved += tube.reserved;
            counters.delayed += tube.delayed.len() as u64;
            counters.buried += tube.buried.len() as u64;
            counters.total_jobs += tube.total_jobs;
        }
        self.stats_document_of(&counters, tubes)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::tests::{engine_with, name as tube};
    use super::*;

    fn engine() -> Engine {
        engine_with(false)
    }

    fn ok_body(outcome: Outcome) -> String {
        match outcome {
            Outcome::Reply(Response::Ok(body)) => String::from_utf8(body.to_vec()).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    fn put(e: &mut Engine, conn: ConnId, tube_name: &str, delay: u64) {
        e.execute(conn, Command::Use(tube(tube_name)), 0);
        let put = Command::Put {
            pri: 0,
            delay: Duration::from_secs(delay),
            ttr: Duration::from_secs(60),
            body: Bytes::from_static(b"x"),
            tags: None,
        };
        assert!(matches!(
            e.execute(conn, put, 0),
            Outcome::Reply(Response::Inserted(_))
        ));
    }

    #[test]
    fn facts_for_the_access_checks() {
        let mut e = engine();
        let (a, b) = (e.connect(), e.connect());
        put(&mut e, a, "orders", 0);
        put(&mut e, a, "other", 0);
        e.execute(b, Command::Watch(tube("orders")), 0);
        e.execute(b, Command::Ignore(tube("default")), 0);
        assert_eq!(e.used_tube(a).as_str(), "other");
        let watched: Vec<&str> = e.watched_tubes(b).map(TubeName::as_str).collect();
        assert_eq!(watched, ["orders"]);
        assert!(matches!(
            e.execute(b, Command::Reserve, 0),
            Outcome::Reply(Response::Reserved { id: 1, .. })
        ));
        assert_eq!(
            e.job_access(b, 1).map(|(t, m)| (t.as_str(), m)),
            Some(("orders", true))
        );
        assert_eq!(
            e.job_access(a, 1).map(|(t, m)| (t.as_str(), m)),
            Some(("orders", false))
        );
        assert_eq!(
            e.job_access(b, 2).map(|(t, m)| (t.as_str(), m)),
            Some(("other", false))
        );
        assert_eq!(e.job_access(b, 3), None);
    }

    #[test]
    fn list_tubes_and_stats_over_the_tubes_seen() {
        let mut e = engine();
        let a = e.connect();
        put(&mut e, a, "orders.eu", 0);
        put(&mut e, a, "orders.eu", 10);
        put(&mut e, a, "orders.us", 0);
        put(&mut e, a, "billing", 0);
        let orders = |name: &TubeName| name.as_str().starts_with("orders.");
        let listed = e.execute_seeing(a, Command::ListTubes, 0, &orders);
        assert_eq!(ok_body(listed), "---\n- orders.eu\n- orders.us\n");
        let stats = ok_body(e.execute_seeing(a, Command::Stats, 0, &orders));
        for line in [
            "current-jobs-ready: 2\n",
            "current-jobs-delayed: 1\n",
            "total-jobs: 3\n",
            "current-tubes: 2\n",
            // The server's own figures stay whole.
            "cmd-put: 4\n",
            "current-connections: 1\n",
        ] {
            assert!(stats.contains(line), "{line:?} not in\n{stats}");
        }
        // Seeing everything is plain `stats`, and both count as `stats`.
        let all = ok_body(e.execute_seeing(a, Command::Stats, 0, &|_| true));
        let plain = ok_body(e.execute(a, Command::Stats, 0));
        let without = |doc: &str| {
            doc.lines()
                .filter(|l| !l.starts_with("cmd-stats:") && !l.starts_with("rusage"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(without(&all), without(&plain));
        assert!(plain.contains("cmd-stats: 3\n"), "{plain}");
        // Any other command runs as usual.
        let used = e.execute_seeing(a, Command::ListTubeUsed, 0, &orders);
        assert_eq!(used, Outcome::Reply(Response::Using(tube("billing"))));
    }
}
