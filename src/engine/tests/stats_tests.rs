//! The `stats`, `stats-job` and `stats-tube` documents, and the counters.

use super::*;

#[test]
fn stats_document() {
    let mut e = Engine::new(
        EngineConfig {
            max_job_size: 1234,
            binlog_max_size: 5678,
            journal: false,
            binlog: Default::default(),
            jobs_budget: None,
            bodies_in_store: false,
        },
        7 * S,
    );
    let c = e.connect();
    put_ready(&mut e, c, 1, 7 * S);
    put_ready(&mut e, c, 2000, 7 * S);
    put(&mut e, c, 0, secs(1), 60, 7 * S);
    reply(&mut e, c, C::PeekReady, 7 * S);
    let doc = yaml(reply(&mut e, c, C::Stats, 10 * S + 999_999));
    assert!(doc.starts_with("---\n") && doc.ends_with('\n') && !doc.ends_with("\r\n"));
    let expect = [
        ("current-jobs-urgent", "2"),
        ("current-jobs-ready", "3"),
        ("current-jobs-delayed", "0"),
        ("cmd-put", "3"),
        ("cmd-peek-ready", "1"),
        ("cmd-stats", "1"),
        ("total-jobs", "3"),
        ("max-job-size", "1234"),
        ("binlog-max-size", "5678"),
        ("binlog-records-written", "0"),
        ("current-tubes", "1"),
        ("uptime", "3"),
        ("draining", "false"),
    ];
    for (key, value) in expect {
        assert_eq!(field(&doc, key), value, "{key}");
    }
    assert_eq!(field(&doc, "pid"), std::process::id().to_string());
    assert_eq!(
        field(&doc, "version"),
        format!("\"{}\"", env!("CARGO_PKG_VERSION"))
    );
    let id = field(&doc, "id");
    assert!(
        id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{id}"
    );
    for key in ["rusage-utime", "rusage-stime"] {
        let v = field(&doc, key);
        let (s, us) = v.split_once('.').unwrap();
        assert!(s.parse::<u64>().is_ok() && us.len() == 6, "{key}: {v}");
    }
    for key in ["hostname", "os", "platform"] {
        let v = field(&doc, key);
        assert!(v.starts_with('"') && v.ends_with('"'), "{key}: {v}");
    }
}

#[test]
fn stats_job_document() {
    let mut e = engine();
    let c = e.connect();
    use_tube(&mut e, c, "jobs");
    let id = put(&mut e, c, 42, Duration::from_millis(2500), 30, S);
    let doc = yaml(reply(&mut e, c, C::StatsJob(id), 2 * S + 400_000));
    assert_eq!(
        doc,
        "---\nid: 1\ntube: \"jobs\"\nstate: delayed\npri: 42\nage: 1\ndelay: 2\nttr: 30\ntime-left: 1\n\
         file: 0\nreserves: 0\ntimeouts: 0\nreleases: 0\nburies: 0\nkicks: 0\n"
    );
    reply(&mut e, c, C::Watch(name("jobs")), 4 * S);
    reserve(&mut e, c, 4 * S);
    let doc = yaml(reply(&mut e, c, C::StatsJob(id), 4 * S + 1));
    assert_eq!(field(&doc, "state"), "reserved");
    assert_eq!(field(&doc, "time-left"), "29");
    assert_eq!(field(&doc, "reserves"), "1");
    assert_eq!(reply(&mut e, c, C::StatsJob(99), 0), R::NotFound);
}

#[test]
fn counts_past_a_byte_are_kept_whole() {
    // A record keeps each count in a few bits until one reaches its
    // field's top (255 reserves, 7 of the others); past it every count
    // moves to the table's side map and goes on counting.
    let mut e = engine_with(true);
    let c = e.connect();
    let id = put_ready(&mut e, c, 0, 0);
    for n in 1..=300u32 {
        assert_eq!(reserve(&mut e, c, 0), id);
        let cmd = if n % 3 == 0 {
            C::Bury { id, pri: 0 }
        } else {
            C::Release {
                id,
                pri: 0,
                delay: Duration::ZERO,
            }
        };
        reply(&mut e, c, cmd, 0);
        if n % 3 == 0 {
            assert_eq!(reply(&mut e, c, C::KickJob(id), 0), R::Kicked);
        }
    }
    let doc = yaml(reply(&mut e, c, C::StatsJob(id), 0));
    for (key, n) in [
        ("reserves", "300"),
        ("releases", "200"),
        ("buries", "100"),
        ("kicks", "100"),
    ] {
        assert_eq!(field(&doc, key), n, "{key}");
    }
    // The journal's last image carries them, and a restore brings them back.
    let journal = e.take_journal();
    let Some(super::Record::Update(image)) = journal.last() else {
        panic!("expected an update, got {:?}", journal.last());
    };
    assert_eq!(
        (
            image.counts.reserves,
            image.counts.releases,
            image.counts.buries,
            image.counts.kicks
        ),
        (300, 200, 100, 100)
    );
    let mut again = engine_with(true);
    let image = super::JobImage {
        counts: crate::engine::Counts {
            timeouts: 70_000,
            ..image.counts
        },
        ..image.clone()
    };
    again.restore(&image);
    let c2 = again.connect();
    let doc = yaml(reply(&mut again, c2, C::StatsJob(id), 0));
    assert_eq!(field(&doc, "timeouts"), "70000");
    assert_eq!(field(&doc, "kicks"), "100");
    assert_eq!(reserve(&mut again, c2, 0), id);
    assert_eq!(job_stat(&mut again, c2, id, "reserves", 0), "301");
    // A job whose counts fit again after a restore is back in its bytes.
    let small = super::JobImage {
        id: id + 1,
        counts: crate::engine::Counts {
            reserves: 3,
            timeouts: 0,
            ..image.counts
        },
        ..image
    };
    again.restore(&small);
    assert_eq!(job_stat(&mut again, c2, id + 1, "reserves", 0), "3");
    assert_eq!(reply(&mut again, c2, C::Delete(id), 0), R::Deleted);
    assert_eq!(reply(&mut again, c2, C::Delete(id + 1), 0), R::Deleted);
}

#[test]
fn stats_tube_document() {
    let mut e = engine();
    let (c, w) = (e.connect(), e.connect());
    use_tube(&mut e, c, "t");
    put_ready(&mut e, c, 0, 0);
    put_ready(&mut e, c, 1024, 0);
    put(&mut e, c, 0, secs(5), 60, 0);
    watch_only(&mut e, w, &["t"]);
    reserve(&mut e, w, 0);
    let doc = yaml(reply(&mut e, c, C::StatsTube(name("t")), 0));
    assert_eq!(
        doc,
        "---\nname: \"t\"\ncurrent-jobs-urgent: 0\ncurrent-jobs-ready: 1\ncurrent-jobs-reserved: 1\n\
         current-jobs-delayed: 1\ncurrent-jobs-buried: 0\ntotal-jobs: 3\ncurrent-using: 1\n\
         current-watching: 1\ncurrent-waiting: 0\ncmd-delete: 0\ncmd-pause-tube: 0\npause: 0\n\
         pause-time-left: 0\n"
    );
    assert_eq!(reply(&mut e, c, C::StatsTube(name("none")), 0), R::NotFound);
}

#[test]
fn every_command_counts_once() {
    let mut e = engine();
    let c = e.connect();
    let cmds = [
        (C::PeekReady, "cmd-peek-ready"),
        (C::PeekDelayed, "cmd-peek-delayed"),
        (C::PeekBuried, "cmd-peek-buried"),
        (C::Peek(1), "cmd-peek"),
        (C::Delete(1), "cmd-delete"),
        (
            C::Release {
                id: 1,
                pri: 0,
                delay: Duration::ZERO,
            },
            "cmd-release",
        ),
        (C::Bury { id: 1, pri: 0 }, "cmd-bury"),
        (C::Touch(1), "cmd-touch"),
        (C::Kick(1), "cmd-kick"),
        (C::StatsJob(1), "cmd-stats-job"),
        (C::StatsTube(name("default")), "cmd-stats-tube"),
        (C::ListTubes, "cmd-list-tubes"),
        (C::ListTubeUsed, "cmd-list-tube-used"),
        (C::ListTubesWatched, "cmd-list-tubes-watched"),
        (C::Use(name("default")), "cmd-use"),
        (C::Watch(name("default")), "cmd-watch"),
        (C::Ignore(name("default")), "cmd-ignore"),
        (
            C::ReserveWithTimeout(Duration::ZERO),
            "cmd-reserve-with-timeout",
        ),
    ];
    for (cmd, key) in cmds {
        e.execute(c, cmd, 0);
        assert_eq!(server_stat(&mut e, c, key, 0), "1", "{key}");
    }
    assert_eq!(server_stat(&mut e, c, "cmd-stats", 0), "19");
}

/// `stats-job`'s `file`: the journal file the job's record went to, or,
/// once the store has taken that one in, the oldest it keeps: both as the
/// store said them last (`set_store`), read from no store of its own.
#[test]
fn a_jobs_file_is_the_stores_word() {
    let mut e = engine_with(true);
    let c = e.connect();
    e.set_store(crate::engine::Room::UNLIMITED, 3, 1);
    let id = put_ready(&mut e, c, 0, 0);
    assert_eq!(job_stat(&mut e, c, id, "file", 0), "3");
    e.set_store(crate::engine::Room::UNLIMITED, 6, 5);
    assert_eq!(job_stat(&mut e, c, id, "file", 0), "5");
    let mut none = engine_with(false);
    let c = none.connect();
    none.set_store(crate::engine::Room::UNLIMITED, 6, 5);
    let id = put_ready(&mut none, c, 0, 0);
    assert_eq!(job_stat(&mut none, c, id, "file", 0), "0");
}
