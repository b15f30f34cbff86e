//! Shared harness for the end-to-end tests: start a real server process on a
//! free port (or a unix socket) and talk to it with a raw byte-level client.
//!
//! The server binary is `sprout` (built by cargo for the tests) unless the
//! environment variable `SPROUT_TEST_BINARY` names another one, e.g.
//! `SPROUT_TEST_BINARY=/tmp/bsd/beanstalkd`, so that the very same tests can
//! be run against the reference beanstalkd 1.13. Tests of documented sprout
//! extensions call [`sprout_only`] and skip themselves in that case.
//!
//! The client never uses the project's codec: it writes the bytes it is given
//! and compares the exact bytes it reads back.

#![allow(dead_code)]

use std::collections::HashSet;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

pub mod nats;

/// How long any single expectation may wait for bytes from the server.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a freshly spawned server may take to accept connections.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(5);

/// The server binary under test.
pub fn binary() -> PathBuf {
    match std::env::var_os("SPROUT_TEST_BINARY") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_sprout")),
    }
}

/// True when the tests run against another binary (beanstalkd) than sprout.
pub fn foreign_binary() -> bool {
    std::env::var_os("SPROUT_TEST_BINARY").is_some_and(|p| !p.is_empty())
}

/// For tests of sprout extensions and bug fixes: returns false (and prints a
/// note) when the tests run against another binary, so the caller returns.
/// `SPROUT_TEST_ALL=1` runs them anyway (to see how another server differs).
pub fn sprout_only(test: &str) -> bool {
    if foreign_binary() && std::env::var_os("SPROUT_TEST_ALL").is_none() {
        eprintln!("skipping {test}: checks a sprout-only behaviour (SPROUT_TEST_BINARY is set)");
        return false;
    }
    true
}

/// Whether the external program `tool` runs here (`tool --version`). If
/// not, prints that `test` is skipped, or panics under CI (`CI=true`),
/// where .ci/run installs every tool the tests need.
pub fn tool_available(tool: &str, test: &str) -> bool {
    let found = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{test}: {tool} is not installed (.ci/run installs it)");
        }
        eprintln!("skipping {test}: {tool} is not installed");
    }
    found
}

/// A scratch directory removed on drop (kept short: unix socket paths are
/// limited to 107 bytes).
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("sprout-t{}-{}", std::process::id(), n));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Default for TempDir {
    fn default() -> Self {
        TempDir::new()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Where a test server listens.
#[derive(Clone, Debug)]
pub enum Addr {
    Tcp(u16),
    Unix(PathBuf),
}

/// A server process, killed (SIGKILL) and reaped on drop.
pub struct TestServer {
    child: Child,
    addr: Addr,
    dir: TempDir,
}

/// Ports handed out by this test process, never handed out twice.
static USED_PORTS: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

fn free_port() -> u16 {
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind 127.0.0.1:0")
            .port();
        let mut used = USED_PORTS.lock().unwrap_or_else(|e| e.into_inner());
        if used.get_or_insert_with(HashSet::new).insert(port) {
            return port;
        }
    }
}

/// Linux: does process `pid` own the socket listening on 127.0.0.1:`port`?
/// (Guards against connecting to some other process that grabbed the port.)
/// Returns true when /proc cannot tell.
fn owns_listen_port(pid: u32, port: u16) -> bool {
    let Ok(tcp) = std::fs::read_to_string("/proc/net/tcp") else {
        return true;
    };
    let want = format!(":{port:04X}");
    let inodes: Vec<String> = tcp
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 9 && f[1].ends_with(&want) && f[3] == "0A").then(|| f[9].to_string())
        })
        .collect();
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return true;
    };
    fds.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .any(|link| {
            let link = link.to_string_lossy().into_owned();
            inodes.iter().any(|i| link == format!("socket:[{i}]"))
        })
}

impl TestServer {
    /// Starts the server on 127.0.0.1 and a free port, with `extra_args`.
    pub fn start(extra_args: &[&str]) -> TestServer {
        let mut last_err = String::new();
        for _ in 0..5 {
            let port = free_port();
            let port_s = port.to_string();
            let mut args = vec!["-l", "127.0.0.1", "-p", &port_s];
            args.extend_from_slice(extra_args);
            match Self::spawn(&args, Addr::Tcp(port)) {
                Ok(s) => return s,
                Err(e) => last_err = e,
            }
        }
        panic!("could not start {}: {last_err}", binary().display());
    }

    /// Starts the server listening on `unix:<tempdir>/sock`, with `extra_args`.
    pub fn start_unix(extra_args: &[&str]) -> TestServer {
        let dir = TempDir::new();
        let sock = dir.path().join("sock");
        Self::start_unix_at(dir, &sock, extra_args)
    }

    /// Starts the server on the unix socket `sock` (inside `dir`, which the
    /// server keeps alive).
    pub fn start_unix_at(dir: TempDir, sock: &Path, extra_args: &[&str]) -> TestServer {
        let listen = format!("unix:{}", sock.display());
        let mut args = vec!["-l", listen.as_str()];
        args.extend_from_slice(extra_args);
        match Self::spawn_in(dir, &args, Addr::Unix(sock.to_path_buf())) {
            Ok(s) => s,
            Err(e) => panic!("could not start {}: {e}", binary().display()),
        }
    }

    /// Spawns the server with exactly `args` (no `-l`/`-p` added) and waits
    /// until `addr` accepts connections.
    pub fn spawn(args: &[&str], addr: Addr) -> Result<TestServer, String> {
        Self::spawn_in(TempDir::new(), args, addr)
    }

    /// A TCP port no other test of this process is given.
    pub fn free_port() -> u16 {
        free_port()
    }

    fn spawn_in(dir: TempDir, args: &[&str], addr: Addr) -> Result<TestServer, String> {
        let stderr_path = dir.path().join("stderr");
        let stderr = std::fs::File::create(&stderr_path).map_err(|e| e.to_string())?;
        let child = Command::new(binary())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", binary().display()))?;
        let mut server = TestServer { child, addr, dir };
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!(
                    "server exited during startup ({status}); stderr: {}",
                    server.stderr()
                ));
            }
            let up = match &server.addr {
                Addr::Tcp(port) => {
                    TcpStream::connect(("127.0.0.1", *port)).is_ok()
                        && owns_listen_port(server.child.id(), *port)
                }
                Addr::Unix(path) => UnixStream::connect(path).is_ok(),
            };
            if up {
                return Ok(server);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "server did not accept connections within {STARTUP_TIMEOUT:?}; stderr: {}",
                    server.stderr()
                ));
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn addr(&self) -> &Addr {
        &self.addr
    }

    /// The TCP port (panics for a unix-socket server).
    pub fn port(&self) -> u16 {
        match self.addr {
            Addr::Tcp(p) => p,
            Addr::Unix(_) => panic!("unix-socket server has no port"),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the server wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.stderr_path()).unwrap_or_default()
    }

    /// The file the server's stderr goes to.
    pub fn stderr_path(&self) -> PathBuf {
        self.dir.path().join("stderr")
    }

    /// Opens a new client connection.
    pub fn connect(&self) -> Client {
        match &self.addr {
            Addr::Tcp(port) => Client::tcp(*port),
            Addr::Unix(path) => Client::unix(path),
        }
    }

    /// Sends `sig` to the server process.
    pub fn signal(&self, sig: libc::c_int) {
        let r = unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        assert_eq!(r, 0, "kill({}, {sig}) failed", self.child.id());
    }

    /// Waits up to `timeout` for the process to exit; returns its status.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Shows bytes readably: printable ASCII as is, the rest escaped.
pub fn show(bytes: &[u8]) -> String {
    let mut s = String::new();
    for &b in bytes {
        match b {
            b'\r' => s.push_str("\\r"),
            b'\n' => s.push_str("\\n"),
            b'\\' => s.push_str("\\\\"),
            0x20..=0x7e => s.push(b as char),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    s
}

trait Stream: Read + Write + Send {
    fn set_timeout(&self, t: Option<Duration>);
    fn shutdown_write(&self);
}

impl Stream for TcpStream {
    fn set_timeout(&self, t: Option<Duration>) {
        self.set_read_timeout(t).expect("set_read_timeout");
    }
    fn shutdown_write(&self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

impl Stream for UnixStream {
    fn set_timeout(&self, t: Option<Duration>) {
        self.set_read_timeout(t).expect("set_read_timeout");
    }
    fn shutdown_write(&self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

/// A raw protocol client: exact bytes out, exact bytes in.
pub struct Client {
    stream: Box<dyn Stream>,
    buf: Vec<u8>,
    eof: bool,
}

/// The outcome of one bounded read.
enum Fill {
    Data,
    Eof,
    Timeout,
}

impl Client {
    pub fn tcp(port: u16) -> Client {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_nodelay(true).expect("nodelay");
        Client::wrap(Box::new(s))
    }

    pub fn unix(path: &Path) -> Client {
        Client::wrap(Box::new(UnixStream::connect(path).expect("connect unix")))
    }

    fn wrap(stream: Box<dyn Stream>) -> Client {
        Client {
            stream,
            buf: Vec::new(),
            eof: false,
        }
    }

    /// Writes `bytes` in one write call.
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write to server");
    }

    /// Half-closes the connection (no more writes from the client).
    pub fn shutdown_write(&self) {
        self.stream.shutdown_write();
    }

    /// One read with the given timeout, appended to the buffer.
    fn fill(&mut self, timeout: Duration) -> Fill {
        if self.eof {
            return Fill::Eof;
        }
        self.stream
            .set_timeout(Some(timeout.max(Duration::from_millis(1))));
        let mut chunk = [0u8; 8192];
        match self.stream.read(&mut chunk) {
            Ok(0) => {
                self.eof = true;
                Fill::Eof
            }
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Fill::Data
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Fill::Timeout
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => Fill::Data,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => {
                self.eof = true;
                Fill::Eof
            }
            Err(e) => panic!("read from server: {e}"),
        }
    }

    /// Reads until `n` bytes are buffered, or the deadline/EOF. Returns
    /// whether `n` bytes are available.
    fn fill_to(&mut self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.buf.len() < n {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            if let Fill::Eof = self.fill(deadline - now) {
                return false;
            }
        }
        true
    }

    /// Reads exactly `expected.len()` bytes (5 s timeout) and asserts they
    /// equal `expected`.
    #[track_caller]
    pub fn expect(&mut self, expected: &[u8]) {
        self.expect_within(expected, IO_TIMEOUT);
    }

    /// Like [`Client::expect`] with another timeout.
    #[track_caller]
    pub fn expect_within(&mut self, expected: &[u8], timeout: Duration) {
        if let Err(e) = self.try_expect(expected, timeout) {
            panic!("{e}");
        }
    }

    fn try_expect(&mut self, expected: &[u8], timeout: Duration) -> Result<(), String> {
        let complete = self.fill_to(expected.len(), timeout);
        let n = expected.len().min(self.buf.len());
        let got: Vec<u8> = self.buf.drain(..n).collect();
        if complete && got == expected {
            return Ok(());
        }
        let why = if complete {
            "mismatch"
        } else if self.eof {
            "connection closed"
        } else {
            "timed out"
        };
        Err(format!(
            "{why}\n  expected: \"{}\"\n       got: \"{}\"",
            show(expected),
            show(&got)
        ))
    }

    /// Reads one line up to and including CRLF; returns it without the CRLF.
    #[track_caller]
    pub fn expect_line(&mut self) -> String {
        self.expect_line_within(IO_TIMEOUT)
    }

    #[track_caller]
    pub fn expect_line_within(&mut self, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line: Vec<u8> = self.buf.drain(..i + 2).collect();
                return String::from_utf8_lossy(&line[..i]).into_owned();
            }
            let now = Instant::now();
            let ended = now >= deadline || matches!(self.fill(deadline - now), Fill::Eof);
            if ended && !self.buf.windows(2).any(|w| w == b"\r\n") {
                panic!(
                    "no complete line ({}); buffered: \"{}\"",
                    if self.eof {
                        "connection closed"
                    } else {
                        "timed out"
                    },
                    show(&self.buf)
                );
            }
        }
    }

    /// Reads exactly `n` bytes.
    #[track_caller]
    pub fn read_exact_bytes(&mut self, n: usize) -> Vec<u8> {
        if !self.fill_to(n, IO_TIMEOUT) {
            panic!("wanted {n} bytes, got \"{}\"", show(&self.buf));
        }
        self.buf.drain(..n).collect()
    }

    /// Asserts the server closes the connection (within 5 s) without sending
    /// anything more.
    #[track_caller]
    pub fn expect_closed(&mut self) {
        let deadline = Instant::now() + IO_TIMEOUT;
        while !self.eof {
            let now = Instant::now();
            if now >= deadline {
                panic!("connection still open; buffered: \"{}\"", show(&self.buf));
            }
            self.fill(deadline - now);
        }
        assert!(
            self.buf.is_empty(),
            "unexpected bytes before close: \"{}\"",
            show(&self.buf)
        );
    }

    /// Asserts nothing arrives for `d` (use sparingly: it always takes `d`).
    #[track_caller]
    pub fn expect_silence(&mut self, d: Duration) {
        let deadline = Instant::now() + d;
        while Instant::now() < deadline && self.buf.is_empty() && !self.eof {
            self.fill(deadline - Instant::now());
        }
        assert!(
            self.buf.is_empty() && !self.eof,
            "expected silence, got \"{}\"{}",
            show(&self.buf),
            if self.eof { " and close" } else { "" }
        );
    }

    /// Sends `cmd` and expects exactly `reply`.
    #[track_caller]
    pub fn exchange(&mut self, cmd: &[u8], reply: &[u8]) {
        self.send(cmd);
        if let Err(e) = self.try_expect(reply, IO_TIMEOUT) {
            panic!("after sending \"{}\": {e}", show(cmd));
        }
    }

    /// `put <pri> <delay> <ttr> <len>` with `body`; returns the new job id.
    #[track_caller]
    pub fn put_with(&mut self, pri: u32, delay: u32, ttr: u32, body: &[u8]) -> u64 {
        let mut msg = format!("put {pri} {delay} {ttr} {}\r\n", body.len()).into_bytes();
        msg.extend_from_slice(body);
        msg.extend_from_slice(b"\r\n");
        self.send(&msg);
        let line = self.expect_line();
        match line.strip_prefix("INSERTED ").map(str::parse::<u64>) {
            Some(Ok(id)) => id,
            _ => panic!("put: expected INSERTED <id>, got \"{line}\""),
        }
    }

    /// `put 0 0 60` with `body`; returns the new job id.
    #[track_caller]
    pub fn put(&mut self, body: &[u8]) -> u64 {
        self.put_with(0, 0, 60, body)
    }

    /// Expects `RESERVED <id> <len>\r\n<body>\r\n`; returns the id.
    #[track_caller]
    pub fn expect_reserved(&mut self, body: &[u8]) -> u64 {
        self.expect_reserved_within(body, IO_TIMEOUT)
    }

    #[track_caller]
    pub fn expect_reserved_within(&mut self, body: &[u8], timeout: Duration) -> u64 {
        let line = self.expect_line_within(timeout);
        let id = line
            .strip_prefix("RESERVED ")
            .and_then(|rest| rest.strip_suffix(&format!(" {}", body.len())))
            .and_then(|id| id.parse::<u64>().ok());
        let Some(id) = id else {
            panic!("expected \"RESERVED <id> {}\", got \"{line}\"", body.len());
        };
        let mut rest = body.to_vec();
        rest.extend_from_slice(b"\r\n");
        self.expect(&rest);
        id
    }

    /// Sends `cmd` and reads an `OK <n>\r\n<n bytes>\r\n` reply; returns the
    /// n bytes (checking the declared length against the body).
    #[track_caller]
    pub fn ok_body(&mut self, cmd: &[u8]) -> String {
        self.send(cmd);
        let line = self.expect_line();
        let n: usize = match line.strip_prefix("OK ").map(str::parse) {
            Some(Ok(n)) => n,
            _ => panic!("{}: expected OK <n>, got \"{line}\"", show(cmd)),
        };
        let body = self.read_exact_bytes(n);
        self.expect(b"\r\n");
        String::from_utf8(body).expect("YAML body is UTF-8")
    }

    /// `stats` / `stats-job <id>` / `stats-tube <t>` as ordered key/value pairs.
    #[track_caller]
    pub fn stats_of(&mut self, cmd: &str) -> Vec<(String, String)> {
        let body = self.ok_body(format!("{cmd}\r\n").as_bytes());
        parse_yaml_map(&body)
    }

    /// The value of `key` in `stats`.
    #[track_caller]
    pub fn stat(&mut self, key: &str) -> String {
        lookup(&self.stats_of("stats"), key)
    }

    /// The value of `key` in `stats-job <id>`.
    #[track_caller]
    pub fn job_stat(&mut self, id: u64, key: &str) -> String {
        lookup(&self.stats_of(&format!("stats-job {id}")), key)
    }

    /// The value of `key` in `stats-tube <tube>`.
    #[track_caller]
    pub fn tube_stat(&mut self, tube: &str, key: &str) -> String {
        lookup(&self.stats_of(&format!("stats-tube {tube}")), key)
    }
}

/// Parses beanstalkd's flat YAML dictionary (`---\nkey: value\n...`).
#[track_caller]
pub fn parse_yaml_map(body: &str) -> Vec<(String, String)> {
    let rest = body
        .strip_prefix("---\n")
        .unwrap_or_else(|| panic!("YAML body must start with ---\\n: {body:?}"));
    assert!(
        rest.ends_with('\n'),
        "YAML body must end with \\n: {body:?}"
    );
    rest.lines()
        .map(|l| match l.split_once(": ") {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => panic!("not a `key: value` line: {l:?}"),
        })
        .collect()
}

/// Parses beanstalkd's YAML list (`---\n- a\n- b\n`).
#[track_caller]
pub fn parse_yaml_list(body: &str) -> Vec<String> {
    let rest = body
        .strip_prefix("---\n")
        .unwrap_or_else(|| panic!("YAML body must start with ---\\n: {body:?}"));
    rest.lines()
        .map(|l| match l.strip_prefix("- ") {
            Some(v) => v.to_string(),
            None => panic!("not a `- item` line: {l:?}"),
        })
        .collect()
}

#[track_caller]
pub fn lookup(map: &[(String, String)], key: &str) -> String {
    map.iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no key {key:?} in {map:?}"))
}

/// Asserts `elapsed` is within `[lo, hi]`.
#[track_caller]
pub fn assert_between(elapsed: Duration, lo: Duration, hi: Duration) {
    assert!(
        elapsed >= lo && elapsed <= hi,
        "took {elapsed:?}, expected between {lo:?} and {hi:?}"
    );
}

impl Client {
    /// Polls `stats` (every 5 ms, up to 3 s) until `key` has `value`: a
    /// way to know the server has processed another connection's command.
    /// Returns how many `stats` commands it sent.
    #[track_caller]
    pub fn wait_stat(&mut self, key: &str, value: &str) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut sent = 0;
        loop {
            let got = self.stat(key);
            sent += 1;
            if got == value {
                return sent;
            }
            assert!(
                Instant::now() < deadline,
                "stats {key}: still {got:?}, wanted {value:?}"
            );
            thread::sleep(Duration::from_millis(5));
        }
    }
}

// Helpers for the durability tests (`-b DIR`): a store directory that
// outlives server processes, kill -9 and restart, and a client whose calls
// return errors instead of panicking (for servers that may die under it).

impl TestServer {
    /// Starts the server on a free port with `-b store` and `extra_args`,
    /// and waits until it has opened the store and answers commands (it
    /// listens before it recovers, so accepting connections is not enough).
    pub fn start_with_store(store: &Path, extra_args: &[&str]) -> TestServer {
        let store = store.to_str().expect("store path is UTF-8");
        let mut args = vec!["-b", store];
        args.extend_from_slice(extra_args);
        let server = TestServer::start(&args);
        let mut c = server.connect();
        c.send(b"stats\r\n");
        let line = c.expect_line();
        assert!(line.starts_with("OK "), "stats: {line}");
        server
    }

    /// SIGKILLs the server and reaps it (the store is left as the crash
    /// left it).
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERMs the server and asserts it exits successfully within 5 s.
    #[track_caller]
    pub fn terminate(&mut self) {
        self.signal(libc::SIGTERM);
        match self.wait_exit(IO_TIMEOUT) {
            Some(status) => assert!(
                status.success(),
                "server exited with {status} after SIGTERM; stderr: {}",
                self.stderr()
            ),
            None => panic!(
                "server still running 5 s after SIGTERM; stderr: {}",
                self.stderr()
            ),
        }
    }
}

/// Copies directory `from` into a new directory `to`, recursively.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create copy dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy file");
        }
    }
}

impl Client {
    /// Sends `cmd` (CRLF added) and returns the first reply line.
    #[track_caller]
    pub fn line(&mut self, cmd: &str) -> String {
        self.send(format!("{cmd}\r\n").as_bytes());
        self.expect_line()
    }

    /// `put` with `body`; returns the reply line (INSERTED <id>, or an
    /// error) instead of insisting on INSERTED.
    #[track_caller]
    pub fn put_line(&mut self, pri: u32, delay: u32, ttr: u32, body: &[u8]) -> String {
        let mut msg = format!("put {pri} {delay} {ttr} {}\r\n", body.len()).into_bytes();
        msg.extend_from_slice(body);
        msg.extend_from_slice(b"\r\n");
        self.send(&msg);
        self.expect_line()
    }

    /// `peek <id>`: the body if the job exists, `None` on NOT_FOUND.
    #[track_caller]
    pub fn peek(&mut self, id: u64) -> Option<Vec<u8>> {
        self.peek_cmd(&format!("peek {id}")).map(|(_, body)| body)
    }

    /// A `peek*` command: `Some((id, body))` on FOUND, `None` on NOT_FOUND.
    #[track_caller]
    pub fn peek_cmd(&mut self, cmd: &str) -> Option<(u64, Vec<u8>)> {
        let line = self.line(cmd);
        if line == "NOT_FOUND" {
            return None;
        }
        let parts: Vec<&str> = line.split(' ').collect();
        let (id, len) = match parts.as_slice() {
            ["FOUND", id, len] => (id.parse().ok(), len.parse::<usize>().ok()),
            _ => (None, None),
        };
        let (Some(id), Some(len)) = (id, len) else {
            panic!("{cmd}: expected FOUND <id> <len> or NOT_FOUND, got \"{line}\"");
        };
        let body = self.read_exact_bytes(len);
        self.expect(b"\r\n");
        Some((id, body))
    }
}

/// A client whose calls return `Err` when the server goes away or stays
/// silent, instead of panicking: for workers racing a SIGKILL.
pub struct FallibleClient {
    reader: std::io::BufReader<TcpStream>,
    writer: TcpStream,
}

impl FallibleClient {
    /// Connects to 127.0.0.1:`port`; reads give up after `timeout`.
    pub fn connect(port: u16, timeout: Duration) -> std::io::Result<FallibleClient> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        Ok(FallibleClient {
            reader: std::io::BufReader::new(stream.try_clone()?),
            writer: stream,
        })
    }

    /// Writes `bytes` in one call.
    pub fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.writer.write_all(bytes)
    }

    /// Reads one line; returns it without its CRLF.
    pub fn read_line(&mut self) -> std::io::Result<String> {
        use std::io::BufRead;
        let mut line = Vec::new();
        self.reader.read_until(b'\n', &mut line)?;
        if !line.ends_with(b"\r\n") {
            return Err(std::io::Error::new(
                ErrorKind::UnexpectedEof,
                format!("incomplete line \"{}\"", show(&line)),
            ));
        }
        line.truncate(line.len() - 2);
        String::from_utf8(line).map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e))
    }

    /// Reads a `<len>`-byte body and its CRLF.
    pub fn read_body(&mut self, len: usize) -> std::io::Result<Vec<u8>> {
        let mut body = vec![0; len + 2];
        self.reader.read_exact(&mut body)?;
        if !body.ends_with(b"\r\n") {
            return Err(std::io::Error::new(
                ErrorKind::InvalidData,
                "body not followed by CRLF",
            ));
        }
        body.truncate(len);
        Ok(body)
    }

    /// Sends `cmd` (CRLF added) and reads the reply line.
    pub fn request(&mut self, cmd: &str) -> std::io::Result<String> {
        self.send(format!("{cmd}\r\n").as_bytes())?;
        self.read_line()
    }
}
