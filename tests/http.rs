//! The HTTP side port end to end: a real server with `--http`, a real HTTP
//! client, and a beanstalk client beside it to see that both views agree.

mod common;
mod http_client;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

use common::{Client, TempDir, TestServer};
use http_client::{start, Http};
use serde_json::{json, Value};

fn use_tube(c: &mut Client, tube: &str) {
    assert_eq!(c.line(&format!("use {tube}")), format!("USING {tube}"));
}

/// Puts `n` jobs into `tube` in one pipelined write, priority `pri(i)`.
fn put_many(port: u16, tube: &str, n: usize, pri: impl Fn(usize) -> u32) -> Vec<u64> {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut out = format!("use {tube}\r\n").into_bytes();
    for i in 0..n {
        let body = format!("job {i}");
        out.extend(format!("put {} 0 60 {}\r\n{body}\r\n", pri(i), body.len()).bytes());
    }
    let mut writer = stream.try_clone().unwrap();
    let sender = std::thread::spawn(move || writer.write_all(&out).unwrap());
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, format!("USING {tube}\r\n"));
    let ids = (0..n)
        .map(|_| {
            line.clear();
            reader.read_line(&mut line).unwrap();
            let id = line.trim_end().strip_prefix("INSERTED ");
            id.and_then(|id| id.parse().ok())
                .unwrap_or_else(|| panic!("put: {line:?}"))
        })
        .collect();
    sender.join().unwrap();
    ids
}

fn ids(page: &Value) -> Vec<u64> {
    page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect()
}

#[test]
fn health_then_drain_makes_readyz_refuse() {
    if !common::sprout_only("health_then_drain_makes_readyz_refuse") {
        return;
    }
    let (server, http) = start(&[]);
    assert_eq!(http.get("/healthz"), (200, json!({"status": "alive"})));
    assert_eq!(http.get("/readyz"), (200, json!({"status": "ready"})));
    server.signal(libc::SIGUSR1);
    // The signal arrives when it arrives; readiness follows drain mode.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let (status, body) = loop {
        let (status, body) = http.get("/readyz");
        if status != 200 || std::time::Instant::now() > deadline {
            break (status, body);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert_eq!((status, &body["reason"]), (503, &json!("draining")));
    let mut c = server.connect();
    assert_eq!(c.put_line(0, 0, 60, b"x"), "DRAINING");
    assert_eq!(http.get("/healthz").0, 200, "still alive");
}

#[test]
fn tubes_jobs_and_one_job_agree_with_the_beanstalk_port() {
    if !common::sprout_only("tubes_jobs_and_one_job_agree_with_the_beanstalk_port") {
        return;
    }
    let (server, http) = start(&[]);
    let mut c = server.connect();
    use_tube(&mut c, "emails");
    let a = c.put_with(5, 0, 30, b"first");
    let b = c.put_with(1, 100, 60, b"\x00\xffbinary");
    let tubes = http.ok("/api/tubes");
    let emails = tubes["tubes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "emails")
        .expect("emails listed");
    assert_eq!(emails["current_jobs_ready"], 1);
    assert_eq!(emails["current_jobs_delayed"], 1);
    assert_eq!(emails["total_jobs"], 2);
    assert_eq!(emails["current_using"], 1);
    let ready = http.ok("/api/tubes/emails/jobs?state=ready");
    assert_eq!(ids(&ready), vec![a]);
    assert_eq!(ready["jobs"][0]["preview"], "first");
    assert_eq!(ready["next"], Value::Null);
    let delayed = http.ok("/api/tubes/emails/jobs?state=delayed");
    assert_eq!(ids(&delayed), vec![b]);
    let left = delayed["jobs"][0]["time_left"].as_f64().unwrap();
    assert!((98.0..=100.0).contains(&left), "time left {left}");

    let job = http.ok(&format!("/api/jobs/{b}"));
    assert_eq!(job["body_text"], Value::Null, "not UTF-8");
    assert_eq!(job["body_base64"], "AP9iaW5hcnk=");
    assert_eq!(
        (job["pri"].clone(), job["ttr"].clone()),
        (json!(1), json!(60))
    );
    assert_eq!(job["state"], c.job_stat(b, "state"));
    let raw = http.raw("GET", &format!("/api/jobs/{b}/body"), &[], None);
    assert_eq!(raw.content_type, "application/octet-stream");
    assert_eq!(raw.bytes, b"\x00\xffbinary");

    let stats = http.ok("/api/server")["stats"].clone();
    assert_eq!(stats["current_jobs_delayed"], 1);
    assert_eq!(stats["cmd_put"], 2);
    assert_eq!(stats["version"], c.stat("version").trim_matches('"'));
}

#[test]
fn paging_through_100k_jobs_in_reserve_order() {
    if !common::sprout_only("paging_through_100k_jobs_in_reserve_order") {
        return;
    }
    let (server, http) = start(&[]);
    let n = 100_000;
    // Ten priorities interleaved: reserve order is not put order.
    let put = put_many(server.port(), "bulk", n, |i| (i % 10) as u32);
    let mut expected: Vec<(usize, u64)> = put
        .iter()
        .enumerate()
        .map(|(i, &id)| (i % 10, id))
        .collect();
    expected.sort_unstable();
    let expected: Vec<u64> = expected.into_iter().map(|(_, id)| id).collect();
    let mut seen = Vec::with_capacity(n);
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &after {
            None => "/api/tubes/bulk/jobs?state=ready&limit=1000".to_owned(),
            Some(cursor) => format!("/api/tubes/bulk/jobs?state=ready&limit=1000&after={cursor}"),
        };
        let page = http.ok(&path);
        seen.extend(ids(&page));
        pages += 1;
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, 100);
    assert_eq!(seen, expected);
    // The first page is what reserve hands out first.
    let mut c = server.connect();
    c.line("watch bulk");
    c.send(b"reserve\r\n");
    let line = c.expect_line();
    assert!(
        line.starts_with(&format!("RESERVED {} ", expected[0])),
        "{line}"
    );
}

/// Makes `tube` hold 5 jobs in `state` (and one ready job in `other`).
fn five_in(server: &TestServer, tube: &str, state: &str) -> Client {
    let mut c = server.connect();
    use_tube(&mut c, "other");
    c.put(b"keep");
    use_tube(&mut c, tube);
    c.line(&format!("watch {tube}"));
    c.line("ignore default");
    for i in 0..5 {
        let delay = if state == "delayed" { 600 } else { 0 };
        let id = c.put_with(0, delay, 60, format!("{i}").as_bytes());
        if state == "buried" || state == "reserved" {
            c.send(b"reserve-with-timeout 0\r\n");
            assert_eq!(c.expect_reserved(format!("{i}").as_bytes()), id);
            if state == "buried" {
                assert_eq!(c.line(&format!("bury {id} 0")), "BURIED");
            }
        }
    }
    c
}

#[test]
fn flush_empties_each_state_and_only_that_state() {
    if !common::sprout_only("flush_empties_each_state_and_only_that_state") {
        return;
    }
    let (server, http) = start(&[]);
    for (tube, state) in [("r", "ready"), ("d", "delayed"), ("b", "buried")] {
        let mut c = five_in(&server, tube, state);
        c.put(b"one ready job besides");
        let path = format!("/api/tubes/{tube}/flush");
        let (status, body) = http.post(&path, json!({"state": state}));
        assert_eq!(
            (status, body),
            (
                200,
                json!({"deleted": if state == "ready" { 6 } else { 5 }})
            )
        );
        assert_eq!(
            c.tube_stat(tube, &format!("current-jobs-{state}")),
            "0",
            "{state}"
        );
        if state != "ready" {
            assert_eq!(
                c.tube_stat(tube, "current-jobs-ready"),
                "1",
                "{state}: ready kept"
            );
        }
        assert_eq!(
            http.post(&path, json!({"state": state})).1,
            json!({"deleted": 0})
        );
    }
    let c = five_in(&server, "held", "reserved");
    let (status, body) = http.post("/api/tubes/held/flush", json!({"state": "reserved"}));
    assert_eq!(status, 409, "{body}");
    assert!(body["error"].as_str().unwrap().contains("reserved"));
    drop(c);
    assert_eq!(
        server.connect().tube_stat("other", "current-jobs-ready"),
        "4"
    );
}

#[test]
fn a_flush_and_a_move_survive_a_restart() {
    if !common::sprout_only("a_flush_and_a_move_survive_a_restart") {
        return;
    }
    let dir = TempDir::new();
    let store = dir.path().join("store");
    let store_s = store.to_str().unwrap();
    for policy in ["0", "50"] {
        let _ = std::fs::remove_dir_all(&store);
        let (mut server, http) = start(&["-b", store_s, "-f", policy]);
        let c = five_in(&server, "b", "buried");
        drop(c);
        let mut c = server.connect();
        use_tube(&mut c, "m");
        for _ in 0..3 {
            c.put_with(0, 0, 60, b"moved");
        }
        let (status, moved) = http.post(
            "/api/tubes/m/move",
            json!({"state": "ready", "to": "dest", "limit": 2}),
        );
        assert_eq!((status, moved), (200, json!({"moved": 2})));
        assert_eq!(
            http.post("/api/tubes/b/flush", json!({"state": "buried"}))
                .0,
            200
        );
        drop(c);
        server.terminate();
        let server = TestServer::start_with_store(&store, &["-f", policy]);
        let mut c = server.connect();
        assert_eq!(
            c.line("stats-tube b"),
            "NOT_FOUND",
            "-f {policy}: flushed for good"
        );
        assert_eq!(
            c.tube_stat("dest", "current-jobs-ready"),
            "2",
            "-f {policy}"
        );
        assert_eq!(c.tube_stat("m", "current-jobs-ready"), "1", "-f {policy}");
        assert_eq!(
            c.tube_stat("other", "current-jobs-ready"),
            "1",
            "-f {policy}"
        );
    }
}

#[test]
fn kick_delete_move_pause_and_put() {
    if !common::sprout_only("kick_delete_move_pause_and_put") {
        return;
    }
    let (server, http) = start(&[]);
    let mut c = five_in(&server, "t", "buried");
    let buried = ids(&http.ok("/api/tubes/t/jobs?state=buried"));
    assert_eq!(buried.len(), 5);
    // One by id, then two from the tube (oldest first).
    assert_eq!(
        http.post(&format!("/api/jobs/{}/kick", buried[2]), json!({})),
        (200, json!({"kicked": buried[2]}))
    );
    assert_eq!(c.job_stat(buried[2], "state"), "ready");
    assert_eq!(
        http.post("/api/tubes/t/kick", json!({"bound": 2})),
        (200, json!({"kicked": 2}))
    );
    assert_eq!(
        ids(&http.ok("/api/tubes/t/jobs?state=buried")),
        vec![buried[3], buried[4]]
    );
    let (status, _) = http.post(&format!("/api/jobs/{}/kick", buried[0]), json!({}));
    assert_eq!(status, 409, "a ready job has nothing to be kicked from");

    assert_eq!(
        http.delete(&format!("/api/jobs/{}", buried[0])),
        (200, json!({"deleted": buried[0]}))
    );
    assert_eq!(c.line(&format!("peek {}", buried[0])), "NOT_FOUND");
    assert_eq!(http.delete(&format!("/api/jobs/{}", buried[0])).0, 404);

    let (status, moved) = http.post(
        "/api/tubes/t/move",
        json!({"state": "buried", "to": "elsewhere"}),
    );
    assert_eq!((status, moved), (200, json!({"moved": 2})));
    assert_eq!(c.job_stat(buried[3], "tube"), "\"elsewhere\"");
    assert_eq!(c.job_stat(buried[3], "state"), "buried");

    assert_eq!(
        http.post("/api/tubes/t/pause", json!({"delay": 100})).0,
        200
    );
    assert_eq!(c.tube_stat("t", "pause"), "100");
    assert_eq!(http.ok("/api/tubes/t")["paused"], true);
    assert_eq!(http.post("/api/tubes/t/resume", json!({})).0, 200);
    assert_eq!(c.tube_stat("t", "pause"), "0");

    let (status, put) = http.post(
        "/api/tubes/fresh/jobs",
        json!({"body": "from http", "pri": 7, "ttr": 9}),
    );
    assert_eq!(status, 201, "{put}");
    let id = put["id"].as_u64().unwrap();
    assert_eq!(c.peek(id).unwrap(), b"from http");
    assert_eq!(
        (c.job_stat(id, "pri"), c.job_stat(id, "ttr")),
        ("7".into(), "9".into())
    );
    let (status, put) = http.post(
        "/api/tubes/fresh/jobs",
        json!({"body_base64": "AAEC", "delay": 50}),
    );
    assert_eq!(status, 201);
    let id = put["id"].as_u64().unwrap();
    assert_eq!(c.peek(id).unwrap(), b"\x00\x01\x02");
    assert_eq!(c.job_stat(id, "state"), "delayed");
    // A worker waiting on the tube gets a job put over HTTP at once.
    let mut worker = server.connect();
    worker.line("watch waiting");
    worker.send(b"reserve-with-timeout 5\r\n");
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(
        http.post("/api/tubes/waiting/jobs", json!({"body": "hi"}))
            .0,
        201
    );
    worker.expect_reserved(b"hi");
}

#[test]
fn bad_input_gets_a_4xx_with_a_json_error() {
    if !common::sprout_only("bad_input_gets_a_4xx_with_a_json_error") {
        return;
    }
    let (server, http) = start(&["-z", "100"]);
    let mut c = server.connect();
    use_tube(&mut c, "t");
    c.put(b"x");
    let big = "x".repeat(101);
    let json_type = [("Content-Type", "application/json")];
    // (method, path, body, expected status)
    let table: Vec<(&str, String, Option<String>, u16)> = vec![
        ("GET", "/api/tubes/nope".into(), None, 404),
        ("GET", "/api/tubes/nope/jobs".into(), None, 404),
        ("GET", "/api/tubes/-bad/jobs".into(), None, 400),
        ("GET", "/api/tubes/t/jobs?state=sleeping".into(), None, 400),
        ("GET", "/api/tubes/t/jobs?limit=0".into(), None, 400),
        ("GET", "/api/tubes/t/jobs?limit=lots".into(), None, 400),
        ("GET", "/api/tubes/t/jobs?after=1-2".into(), None, 400),
        ("GET", "/api/jobs/abc".into(), None, 400),
        ("GET", "/api/jobs/-1".into(), None, 400),
        ("GET", "/api/jobs/99999".into(), None, 404),
        ("DELETE", "/api/jobs/99999".into(), None, 404),
        (
            "POST",
            "/api/jobs/99999/kick".into(),
            Some("{}".into()),
            404,
        ),
        (
            "POST",
            "/api/tubes/t/flush".into(),
            Some(r#"{"state":"sleeping"}"#.into()),
            400,
        ),
        (
            "POST",
            "/api/tubes/t/flush".into(),
            Some(r#"{"state":"#.into()),
            400,
        ),
        (
            "POST",
            "/api/tubes/t/flush".into(),
            Some(r#"{"stat":"ready"}"#.into()),
            422,
        ),
        (
            "POST",
            "/api/tubes/nope/kick".into(),
            Some(r#"{"bound":1}"#.into()),
            404,
        ),
        (
            "POST",
            "/api/tubes/t/kick".into(),
            Some(r#"{"bound":-1}"#.into()),
            422,
        ),
        (
            "POST",
            "/api/tubes/nope/move".into(),
            Some(r#"{"state":"ready","to":"x"}"#.into()),
            404,
        ),
        (
            "POST",
            "/api/tubes/t/move".into(),
            Some(r#"{"state":"ready","to":"-x"}"#.into()),
            400,
        ),
        (
            "POST",
            "/api/tubes/nope/pause".into(),
            Some(r#"{"delay":1}"#.into()),
            404,
        ),
        (
            "POST",
            "/api/tubes/t/jobs".into(),
            Some(format!(r#"{{"body":"{big}"}}"#)),
            413,
        ),
        (
            "POST",
            "/api/tubes/t/jobs".into(),
            Some(r#"{"body_base64":"!!"}"#.into()),
            400,
        ),
        (
            "POST",
            "/api/tubes/t/jobs".into(),
            Some(r#"{"body":"a","body_base64":"YQ=="}"#.into()),
            400,
        ),
        (
            "POST",
            "/api/tubes/t/jobs".into(),
            Some("x".repeat(70_000)),
            413,
        ),
        ("PUT", "/api/tubes/t".into(), None, 405),
        ("GET", "/api/nothing".into(), None, 404),
    ];
    for (method, path, body, expected) in table {
        let response = http.raw(method, &path, &json_type, body.as_deref());
        let status = response.status;
        let what = format!("{method} {path}: {}", response.text);
        if status != 405 {
            let (_, value) = response.json();
            assert!(value["error"].is_string(), "{what}");
        }
        assert_eq!(status, expected, "{what}");
    }
    // A change without a JSON content type (what a cross-site form sends).
    let form = http.raw(
        "POST",
        "/api/tubes/t/flush",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        Some("state=ready"),
    );
    assert_eq!(form.status, 415);
    assert_eq!(
        c.tube_stat("t", "current-jobs-ready"),
        "1",
        "nothing changed"
    );
}

#[test]
fn the_token_guards_the_api_and_the_dashboard_but_not_health() {
    if !common::sprout_only("the_token_guards_the_api_and_the_dashboard_but_not_health") {
        return;
    }
    let (_server, mut http) = start(&["--http-token", "s3cret"]);
    assert_eq!(http.get("/api/tubes").0, 401);
    assert_eq!(
        http.post("/api/tubes/default/flush", json!({"state": "ready"}))
            .0,
        401
    );
    assert_eq!(http.get("/healthz").0, 200);
    assert_eq!(
        http.raw("GET", "/metrics", &[], None).status,
        200,
        "open without --http-token-metrics"
    );
    let page = http.raw("GET", "/", &[], None);
    assert_eq!((page.status, page.location.as_str()), (303, "/login"));
    assert_eq!(
        http.raw(
            "GET",
            "/api/tubes",
            &[("Authorization", "Bearer wrong")],
            None
        )
        .status,
        401
    );

    let form = [("Content-Type", "application/x-www-form-urlencoded")];
    let refused = http.raw("POST", "/login", &form, Some("token=wrong"));
    assert_eq!((refused.status, refused.set_cookie.as_str()), (401, ""));
    let login = http.raw("POST", "/login", &form, Some("token=s3cret"));
    assert_eq!(login.status, 303);
    let cookie = login.set_cookie.split(';').next().unwrap().to_owned();
    assert!(login.set_cookie.contains("HttpOnly") && login.set_cookie.contains("SameSite=Strict"));
    let with_cookie = [("Cookie", cookie.as_str())];
    assert_eq!(http.raw("GET", "/", &with_cookie, None).status, 200);
    assert_eq!(
        http.raw("GET", "/api/tubes", &with_cookie, None).status,
        200
    );
    // The cookie is a session id, never the token (nor its hex).
    let value = cookie.split_once('=').unwrap().1;
    assert!(!value.contains("s3cret") && !value.contains("733363726574"));
    assert_eq!(value.len(), 64, "{value}");
    // Logging out ends the session on the server: the old cookie is dead.
    let out = http.raw("POST", "/logout", &with_cookie, None);
    assert_eq!((out.status, out.location.as_str()), (303, "/login"));
    assert_eq!(
        http.raw("GET", "/api/tubes", &with_cookie, None).status,
        401
    );

    http.token = Some("s3cret".into());
    assert_eq!(http.get("/api/tubes").0, 200);

    let (_server, mut http) = start(&["--http-token", "s3cret", "--http-token-metrics"]);
    assert_eq!(http.raw("GET", "/metrics", &[], None).status, 401);
    assert_eq!(http.get("/readyz").0, 200);
    http.token = Some("s3cret".into());
    assert_eq!(http.raw("GET", "/metrics", &[], None).status, 200);
}

#[test]
fn bad_http_flags_stop_the_server_with_a_message() {
    if !common::sprout_only("bad_http_flags_stop_the_server_with_a_message") {
        return;
    }
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = format!("127.0.0.1:{}", taken.local_addr().unwrap().port());
    // (flags, part of the message)
    let table: [(&[&str], &str); 4] = [
        (&["--http", "nowhere:port"], "expected ADDR:PORT"),
        (&["--http-token", "t"], "needs --http"),
        (
            &["--http", "127.0.0.1:0", "--http-token-metrics"],
            "needs --http-token",
        ),
        (&["--http", &taken], "cannot listen on --http"),
    ];
    for (flags, message) in table {
        let out = std::process::Command::new(common::binary())
            .args(["-p", "0"])
            .args(flags)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flags:?}");
        assert!(stderr.contains(message), "{flags:?}: {stderr}");
    }
}

#[test]
fn without_http_nothing_listens_beside_the_beanstalk_port() {
    let server = TestServer::start(&[]);
    let http = Http::at("http://127.0.0.1:1");
    drop(http);
    let mut c = server.connect();
    assert_eq!(c.line("list-tube-used"), "USING default");
}
