//! Helpers for the durability tests (`-b DIR`): a store directory that
//! outlives server processes, kill -9 and restart, and a client whose calls
//! return errors instead of panicking (for servers that may die under it).

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use super::{show, TestServer, IO_TIMEOUT};

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
        // A server that ends during recovery closes this connection: say why.
        let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.expect_line()));
        let line =
            answered.unwrap_or_else(|_| panic!("no answer; server stderr: {}", server.stderr()));
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
