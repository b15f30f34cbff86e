//! The server under test as a child process: started on a free port or a
//! unix socket, waited for until it accepts, killed and reaped on drop.

use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use sprout_testkit::free_port;

use super::{binary, Client, TempDir};

/// How long a freshly spawned server may take to accept connections.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a test server listens.
#[derive(Clone, Debug)]
pub enum Addr {
    Tcp(u16),
    Unix(PathBuf),
}

/// A server process, killed (SIGKILL) and reaped on drop.
pub struct TestServer {
    pub(super) child: Child,
    addr: Addr,
    dir: TempDir,
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
        let mut command = Command::new(binary());
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        // The server starts with SIGHUP's default action, as under systemd
        // or a shell, even when the tests run under `nohup` (which ignores
        // it, and an ignored signal stays ignored across exec).
        unsafe {
            command.pre_exec(|| {
                libc::signal(libc::SIGHUP, libc::SIG_DFL);
                Ok(())
            });
        }
        let child = command
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
