//! The HTTP port under `--auth`: the policy's principals use it with their
//! tokens (bearer or the dashboard's session) and their grants, a
//! read-only principal sees and is refused changes with 403, and every
//! change lands in the audit trail with its principal. A real server, a
//! real HTTP client.

mod common;
mod http_client;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{TempDir, TestServer};
use http_client::Http;
use serde_json::{json, Value};

/// `sprout hash-token` of `token`.
fn hash(token: &str) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sprout"))
        .arg("hash-token")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(token.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// ops may do everything; viewer may only inspect `orders.*`; producer
/// may only put into `orders.*`.
fn policy() -> String {
    format!(
        r#"[[principal]]
name = "ops"
tokens = ["{}"]
grants = [{{ tubes = ["*"], actions = ["produce", "consume", "inspect", "admin"] }}]

[[principal]]
name = "viewer"
tokens = ["{}"]
grants = [{{ tubes = ["orders.*"], actions = ["inspect"] }}]

[[principal]]
name = "producer"
tokens = ["{}"]
grants = [{{ tubes = ["orders.*"], actions = ["produce"] }}]
"#,
        hash("ops-token"),
        hash("viewer-token"),
        hash("producer-token")
    )
}

fn start(dir: &TempDir, extra: &[&str]) -> (TestServer, Http) {
    let file = dir.path().join("policy.toml");
    std::fs::write(&file, policy()).unwrap();
    let mut args = vec!["--auth", file.to_str().unwrap(), "--log-format", "json"];
    args.extend_from_slice(extra);
    http_client::start(&args)
}

fn as_who(http: &mut Http, token: &str) {
    http.token = Some(token.to_owned());
}

fn put(http: &Http, tube: &str, body: &str) -> (u16, Value) {
    http.post(&format!("/api/tubes/{tube}/jobs"), json!({ "body": body }))
}

#[test]
fn principals_use_the_http_port_with_their_grants() {
    if !common::sprout_only("principals_use_the_http_port_with_their_grants") {
        return;
    }
    let dir = TempDir::new();
    let (server, mut http) = start(&dir, &[]);
    // No credential, a wrong one: 401, and health stays open.
    assert_eq!(http.get("/api/tubes").0, 401);
    assert_eq!(http.raw("GET", "/metrics", &[], None).status, 401);
    assert_eq!(http.get("/healthz").0, 200);
    as_who(&mut http, "wrong");
    assert_eq!(http.get("/api/tubes").0, 401);

    as_who(&mut http, "ops-token");
    let (status, order) = put(&http, "orders.eu", "o1");
    assert_eq!(status, 201, "{order}");
    assert_eq!(put(&http, "payroll", "p1").0, 201);
    let order = order["id"].as_u64().unwrap();
    let payroll_job = order + 1;

    as_who(&mut http, "viewer-token");
    let (status, tubes) = http.get("/api/tubes");
    assert_eq!(status, 200);
    let names: Vec<&str> = tubes["tubes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["orders.eu"], "only what viewer may inspect");
    assert_eq!(http.get("/api/tubes/orders.eu").0, 200);
    assert_eq!(http.get(&format!("/api/jobs/{order}")).0, 200);
    // Reads outside its grants, and every change: 403, nothing changed.
    for path in [
        "/api/tubes/payroll".to_owned(),
        format!("/api/jobs/{payroll_job}"),
        format!("/api/jobs/{payroll_job}/body"),
        "/api/server".to_owned(),
        "/api/history".to_owned(),
    ] {
        assert_eq!(http.get(&path).0, 403, "{path}");
    }
    assert_eq!(http.raw("GET", "/metrics", &[], None).status, 403);
    let (status, body) = http.post("/api/tubes/orders.eu/kick", json!({ "bound": 1 }));
    assert_eq!(status, 403);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("admin on tube orders.eu"),
        "{body}"
    );
    assert_eq!(http.delete(&format!("/api/jobs/{order}")).0, 403);
    assert_eq!(put(&http, "orders.eu", "o2").0, 403);
    // A job that does not exist is a 404 whoever asks.
    assert_eq!(http.get("/api/jobs/999999").0, 404);

    as_who(&mut http, "producer-token");
    assert_eq!(put(&http, "orders.us", "o3").0, 201);
    assert_eq!(put(&http, "payroll", "p2").0, 403);
    assert_eq!(http.get("/api/tubes/orders.eu").0, 403);

    // A move needs admin on both tubes: ops may.
    as_who(&mut http, "ops-token");
    let (status, moved) = http.post(
        "/api/tubes/orders.us/move",
        json!({ "state": "ready", "to": "orders.eu" }),
    );
    assert_eq!((status, &moved["moved"]), (200, &json!(1)));
    assert_eq!(http.get("/api/server").0, 200);
    assert_eq!(http.raw("GET", "/metrics", &[], None).status, 200);
    let form = [("Content-Type", "application/x-www-form-urlencoded")];
    let login = http.raw("POST", "/login", &form, Some("token=viewer-token"));
    assert_eq!(login.status, 303);
    assert_eq!(http.delete(&format!("/api/jobs/{payroll_job}")).0, 200);

    // The trail: each change with its principal; the refusals; a sign-in;
    // no token.
    let log = wait_for(&server, "DELETE /api/jobs/");
    let events: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["target"] == "sprout::audit")
        .collect();
    let seen = |principal: &str, command: &str, outcome: &str| {
        events.iter().any(|e| {
            e["fields"]["principal"] == principal
                && e["fields"]["command"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with(command)
                && e["fields"]["outcome"] == outcome
        })
    };
    assert!(
        seen("ops", "POST /api/tubes/orders.eu/jobs", "201"),
        "{log}"
    );
    assert!(
        seen("viewer", "POST /api/tubes/orders.eu/kick", "forbidden"),
        "{log}"
    );
    assert!(
        seen("producer", "POST /api/tubes/payroll/jobs", "forbidden"),
        "{log}"
    );
    assert!(
        seen("ops", "POST /api/tubes/orders.us/move", "200"),
        "{log}"
    );
    assert!(seen("unauthenticated", "auth", "unauthorized"), "{log}");
    assert!(seen("viewer", "auth", "authenticated"), "{log}");
    for token in ["ops-token", "viewer-token", "producer-token"] {
        assert!(!log.contains(token), "a token in the log");
    }
}

#[test]
fn a_read_only_principal_signs_in_to_the_dashboard_and_is_refused_changes() {
    if !common::sprout_only("a_read_only_principal_signs_in_to_the_dashboard") {
        return;
    }
    let dir = TempDir::new();
    let (_server, http) = start(&dir, &[]);
    assert_eq!(
        http.raw("GET", "/", &[], None).location,
        "/login",
        "signed out: the login page"
    );
    let form = [("Content-Type", "application/x-www-form-urlencoded")];
    let refused = http.raw("POST", "/login", &form, Some("token=nope"));
    assert_eq!((refused.status, refused.set_cookie.as_str()), (401, ""));
    let login = http.raw("POST", "/login", &form, Some("token=viewer-token"));
    assert_eq!(login.status, 303);
    let cookie = login.set_cookie.split(';').next().unwrap().to_owned();
    assert!(!cookie.contains("viewer-token"));
    let with = [("Cookie", cookie.as_str())];
    assert_eq!(http.raw("GET", "/", &with, None).status, 200);
    assert_eq!(http.raw("GET", "/api/tubes", &with, None).status, 200);
    let json = [
        ("Cookie", cookie.as_str()),
        ("Content-Type", "application/json"),
    ];
    let kick = http.raw(
        "POST",
        "/api/tubes/orders.eu/kick",
        &json,
        Some(r#"{"bound": 1}"#),
    );
    assert_eq!(kick.status, 403);
    // Signing out ends the session on the server.
    assert_eq!(http.raw("POST", "/logout", &with, None).status, 303);
    assert_eq!(http.raw("GET", "/api/tubes", &with, None).status, 401);
}

#[test]
fn the_http_token_still_works_beside_the_policy() {
    if !common::sprout_only("the_http_token_still_works_beside_the_policy") {
        return;
    }
    let dir = TempDir::new();
    let (_server, mut http) = start(&dir, &["--http-token", "legacy"]);
    as_who(&mut http, "legacy");
    assert_eq!(put(&http, "anything", "x").0, 201);
    assert_eq!(http.get("/api/server").0, 200);
    as_who(&mut http, "viewer-token");
    assert_eq!(http.get("/api/server").0, 403);
}

/// The server's stderr once it holds `text` (log lines are written as
/// they happen, so wait a little for the last).
fn wait_for(server: &TestServer, text: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let log = server.stderr();
        if log.contains(text) || std::time::Instant::now() > deadline {
            return log;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
