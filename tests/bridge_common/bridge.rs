//! The `sprout bridge` process (and the embedded bridge of a server):
//! its arguments, starting it, waiting for its log lines and its exit.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::redis_server::{wait_numpat, Redis};
use crate::common::{Addr, TempDir, TestServer};

/// A `sprout bridge` process; killed (SIGKILL) on drop.
pub struct Bridge {
    child: Child,
    logs: TempDir,
}

impl Bridge {
    /// Starts `sprout bridge` with `args` (after the subcommand) and waits
    /// until its first reconciliation is done (events are followed by then).
    pub fn start(args: &[String]) -> Bridge {
        let mut bridge = Bridge::spawn(args);
        bridge.wait_log("reconciled");
        bridge
    }

    /// Starts `sprout bridge` with `args`, without waiting for anything.
    pub fn spawn(args: &[String]) -> Bridge {
        Bridge::spawn_logging(args, Some("sprout=info"))
    }

    /// [`Bridge::spawn`] with `RUST_LOG` set to `filter` (unset: the
    /// default level, warnings and status lines).
    pub fn spawn_logging(args: &[String], filter: Option<&str>) -> Bridge {
        let logs = TempDir::new();
        let stderr = std::fs::File::create(logs.path().join("stderr")).expect("stderr file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_sprout"));
        match filter {
            Some(filter) => command.env("RUST_LOG", filter),
            None => command.env_remove("RUST_LOG"),
        };
        let child = command
            .arg("bridge")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn sprout bridge");
        Bridge { child, logs }
    }

    /// Waits (5 s at most) for `needle` in the bridge's log.
    #[track_caller]
    pub fn wait_log(&mut self, needle: &str) {
        wait_for_log(&self.logs.path().join("stderr"), needle, || {
            self.child.try_wait().ok().flatten().map(|s| s.to_string())
        });
    }

    /// What it wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.logs.path().join("stderr")).unwrap_or_default()
    }

    /// Sends `sig` to the bridge process (SIGSTOP: frozen, as on a
    /// machine too loaded to run it; SIGCONT: running again).
    pub fn signal(&self, sig: libc::c_int) {
        let r = unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        assert_eq!(r, 0, "kill({}, {sig}) failed", self.child.id());
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.kill9();
        if thread::panicking() {
            // A failed test shows what the bridge saw (CI keeps no files).
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL)..];
            eprintln!("--- the bridge's log, last {} lines ---", tail.len());
            for line in tail {
                eprintln!("{line}");
            }
        }
    }
}

/// How many lines of a failed test's bridge log are shown.
const LOG_TAIL: usize = 150;

/// Waits up to 5 s for `needle` in the file at `path`; `exited` says
/// whether (and how) the process wrote its last.
#[track_caller]
pub fn wait_for_log(path: &Path, needle: &str, mut exited: impl FnMut() -> Option<String>) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        if log.contains(needle) {
            return;
        }
        if let Some(status) = exited() {
            panic!("process exited ({status}) before logging {needle:?}: {log}");
        }
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in the log within 5 s: {log}"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// The usual bridge arguments.
pub fn bridge_args(
    redis: &Redis,
    server_port: u16,
    tube: &str,
    patterns: &[&str],
    state: &Path,
) -> Vec<String> {
    let mut args = vec![
        "--redis".to_string(),
        redis.url(),
        "--server".into(),
        format!("127.0.0.1:{server_port}"),
        "--tube".into(),
        tube.into(),
        "--state-dir".into(),
        state.display().to_string(),
    ];
    for p in patterns {
        args.push("--match".into());
        args.push((*p).into());
    }
    args
}

/// Starts a sprout on `port` with `-b store -f 0` and the embedded bridge
/// watching `dev:*` of `redis` for the tube `offline`, and waits until its
/// first reconciliation is done.
pub fn start_embedded(redis: &Redis, port: u16, store: &Path) -> TestServer {
    let port_s = port.to_string();
    let store = store.to_str().expect("UTF-8 path");
    let url = redis.url();
    let args = [
        "-V",
        "-l",
        "127.0.0.1",
        "-p",
        &port_s,
        "-b",
        store,
        "-f",
        "0",
        "--redis-bridge",
        &url,
        "--bridge-tube",
        "offline",
        "--bridge-match",
        "dev:*",
    ];
    let server = TestServer::spawn(&args, Addr::Tcp(port)).expect("start the server");
    // Subscribed to the key pattern: the bridge follows events.
    wait_numpat(redis, 1);
    wait_for_log(&server.stderr_path(), "reconciled", || None);
    server
}

/// Kills a child process (and reaps it) on drop.
pub struct Process(pub Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (5 s at most) until something listens on `port`.
#[track_caller]
pub fn wait_port(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not start on {port}");
        thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `sprout bridge args` until it exits (10 s at most): its status and
/// what it wrote to stderr.
pub fn bridge_exit(args: &[String]) -> (std::process::ExitStatus, String) {
    let logs = TempDir::new();
    let path = logs.path().join("stderr");
    let stderr = std::fs::File::create(&path).expect("stderr file");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sprout"))
        .arg("bridge")
        .args(args)
        .env("RUST_LOG", "sprout=info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn sprout bridge");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return (status, std::fs::read_to_string(&path).unwrap_or_default());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(&path).unwrap_or_default();
            panic!("the bridge did not exit within 10 s: {log}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// The arguments of a bridge on `sources` (`--redis URL`, … as words)
/// delivering `dev:*` to `offline` on the server at `server_port`.
pub fn bridge_args_for(sources: &[&str], server_port: u16, state: &Path) -> Vec<String> {
    let mut args: Vec<String> = sources.iter().map(|s| s.to_string()).collect();
    args.extend(
        [
            "--server",
            &format!("127.0.0.1:{server_port}"),
            "--tube",
            "offline",
            "--state-dir",
            &state.display().to_string(),
            "--match",
            "dev:*",
        ]
        .map(String::from),
    );
    args
}
