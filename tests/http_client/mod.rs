//! For the HTTP tests: a sprout with `--http` on free ports, and a real
//! HTTP client (ureq) that returns status and JSON without judging either.

#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::TestServer;

pub struct Http {
    pub base: String,
    agent: ureq::Agent,
    /// Sent as a bearer token when set.
    pub token: Option<String>,
}

/// Starts sprout with `--http` on a free port, plus `extra` flags.
pub fn start(extra: &[&str]) -> (TestServer, Http) {
    let port = TestServer::free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut args = vec!["--http", addr.as_str()];
    args.extend_from_slice(extra);
    let server = TestServer::start(&args);
    let http = Http::at(&format!("http://{addr}"));
    http.wait_ready();
    (server, http)
}

impl Http {
    pub fn at(base: &str) -> Http {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .max_redirects(0)
            .build()
            .into();
        Http {
            base: base.to_owned(),
            agent,
            token: None,
        }
    }

    /// Waits until `/readyz` answers 200.
    pub fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(r) = self.agent.get(format!("{}/readyz", self.base)).call() {
                if r.status() == 200 {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{}/readyz never said 200",
                self.base
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A request: (status, headers of interest, body text).
    pub fn raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> Response {
        let url = format!("{}{path}", self.base);
        let mut request = ureq::http::Request::builder().method(method).uri(&url);
        if let Some(token) = &self.token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(body.unwrap_or("").to_owned())
            .expect("a valid request");
        let mut response = self.agent.run(request).expect("the server answers");
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        let content_type = header("content-type");
        let location = header("location");
        let set_cookie = header("set-cookie");
        let status = response.status().as_u16();
        let bytes = response
            .body_mut()
            .with_config()
            .limit(1 << 30)
            .read_to_vec()
            .expect("a whole body");
        Response {
            status,
            content_type,
            location,
            set_cookie,
            text: String::from_utf8_lossy(&bytes).into_owned(),
            bytes,
        }
    }

    pub fn get(&self, path: &str) -> (u16, Value) {
        self.raw("GET", path, &[], None).json()
    }

    pub fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let text = body.to_string();
        let json = [("Content-Type", "application/json")];
        self.raw("POST", path, &json, Some(&text)).json()
    }

    pub fn delete(&self, path: &str) -> (u16, Value) {
        self.raw("DELETE", path, &[], None).json()
    }

    /// GET `path`, asserting 200, as JSON.
    #[track_caller]
    pub fn ok(&self, path: &str) -> Value {
        let (status, value) = self.get(path);
        assert_eq!(status, 200, "GET {path}: {value}");
        value
    }
}

pub struct Response {
    pub status: u16,
    pub content_type: String,
    pub location: String,
    pub set_cookie: String,
    pub text: String,
    pub bytes: Vec<u8>,
}

impl Response {
    /// (status, JSON body); every answer of the API is JSON, errors too.
    #[track_caller]
    pub fn json(self) -> (u16, Value) {
        let value = serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text));
        (self.status, value)
    }
}

/// The external program `name`, if installed. Missing under `CI=true`
/// fails the test; otherwise it prints a note and the caller returns.
pub fn program(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    });
    if found.is_none() {
        let note = format!("{name} is not installed (apt-get install it; .ci/run does)");
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{note}");
        }
        eprintln!("skipping: {note}");
    }
    found
}

/// Runs `promtool check metrics` on `scrape`: (success, its output).
pub fn promtool(promtool: &std::path::Path, scrape: &str) -> (bool, String) {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(scrape.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text.into_owned())
}

/// The value of the sample line `name` (labels included) in `scrape`.
pub fn sample(scrape: &str, name: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}
