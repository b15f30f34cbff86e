//! The byte-level client: exact bytes out, exact bytes in, every wait
//! bounded by [`IO_TIMEOUT`].

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use super::{lookup, parse_yaml_map, IO_TIMEOUT};

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

/// What a [`Client`] talks over: a socket, or a TLS stream on one
/// (`tls.rs`).
pub trait Stream: Read + Write + Send {
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
        Client::over(Box::new(s))
    }

    pub fn unix(path: &Path) -> Client {
        Client::over(Box::new(UnixStream::connect(path).expect("connect unix")))
    }

    /// A client over any [`Stream`].
    pub fn over(stream: Box<dyn Stream>) -> Client {
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
            // UnexpectedEof: a TLS stream that ends without close_notify.
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::ConnectionReset | ErrorKind::UnexpectedEof
                ) =>
            {
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
