//! sprout as a service: several `-l`, flags from `SPROUT_*` variables,
//! systemd's readiness protocol (a real unix datagram `NOTIFY_SOCKET`),
//! socket activation (the real `systemd-socket-activate`) and the shipped
//! unit files (`systemd-analyze verify` and `security`).
//!
//! All of it is sprout's own (beanstalkd has no readiness, one `-l`, no
//! variables), so every test here is skipped under `SPROUT_TEST_BINARY`.
//! A missing systemd tool skips its test with a note, and fails it under
//! `CI=true`.

mod common;

use std::collections::HashMap;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{binary, sprout_only, tool_available, Client, TempDir, TestServer};

/// A server process started with its own environment; killed on drop.
struct Service {
    child: Child,
    dir: TempDir,
}

impl Service {
    /// Runs `program args` with `env` added to an environment cleared of
    /// every variable sprout or systemd would read.
    fn spawn(program: &Path, args: &[&str], env: &[(&str, &str)]) -> Service {
        let dir = TempDir::new();
        Service::spawn_in(dir, program, args, env)
    }

    fn spawn_in(dir: TempDir, program: &Path, args: &[&str], env: &[(&str, &str)]) -> Service {
        let stderr = std::fs::File::create(dir.path().join("stderr")).expect("stderr file");
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        for (key, _) in std::env::vars_os() {
            let key = key.to_string_lossy().into_owned();
            if key.starts_with("SPROUT_")
                || key.starts_with("LISTEN_")
                || key == "NOTIFY_SOCKET"
                || key == "RUST_LOG"
            {
                cmd.env_remove(key);
            }
        }
        cmd.envs(env.iter().copied());
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()));
        Service { child, dir }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    /// Waits until `connect` succeeds, failing if the process exits first.
    fn wait_until<T>(&mut self, what: &str, mut connect: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(t) = connect() {
                return t;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("exited ({status}) before {what}; stderr: {}", self.stderr());
            }
            assert!(
                Instant::now() < deadline,
                "no {what} within 10 s; stderr: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn tcp(&mut self, port: u16) -> Client {
        self.wait_until(&format!("TCP port {port}"), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        Client::tcp(port)
    }

    fn unix(&mut self, path: &Path) -> Client {
        self.wait_until(&format!("socket {}", path.display()), || {
            std::os::unix::net::UnixStream::connect(path).ok()
        });
        Client::unix(path)
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own child.
        let r = unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        assert_eq!(r, 0, "kill {}", self.child.id());
    }

    fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "still running after {timeout:?}; stderr: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The service manager's end of `NOTIFY_SOCKET`: a bound unix datagram socket.
struct Notifications {
    socket: UnixDatagram,
    path: PathBuf,
    /// Every message so far, in order, each as its `KEY=VALUE` lines.
    seen: Vec<Vec<String>>,
}

impl Notifications {
    fn bind(dir: &Path) -> Notifications {
        let path = dir.join("notify");
        let socket = UnixDatagram::bind(&path).expect("bind NOTIFY_SOCKET");
        Notifications {
            socket,
            path,
            seen: Vec::new(),
        }
    }

    fn env(&self) -> (&'static str, &str) {
        ("NOTIFY_SOCKET", self.path.to_str().expect("UTF-8 path"))
    }

    /// Waits up to `timeout` for a message holding `line`; returns it.
    fn wait_for(&mut self, line: &str, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        let mut buf = [0u8; 4096];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "no {line} within {timeout:?}; got {:?}",
                self.seen
            );
            self.socket
                .set_read_timeout(Some(left))
                .expect("set_read_timeout");
            let n = match self.socket.recv(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => panic!("recv on NOTIFY_SOCKET: {e}"),
            };
            let text = String::from_utf8(buf[..n].to_vec()).expect("UTF-8 notification");
            let lines: Vec<String> = text.lines().map(str::to_owned).collect();
            self.seen.push(lines.clone());
            if lines.iter().any(|l| l == line) {
                return lines;
            }
        }
    }
}

#[test]
fn several_listen_addresses_serve_one_queue() {
    if !sprout_only("several_listen_addresses_serve_one_queue") {
        return;
    }
    let dir = TempDir::new();
    let sock = dir.path().join("sock");
    let listen_unix = format!("unix:{}", sock.display());
    let port = TestServer::free_port().to_string();
    let args = ["-l", "127.0.0.1", "-l", &listen_unix, "-p", &port];
    let mut s = Service::spawn(&binary(), &args, &[]);
    let mut tcp = s.tcp(port.parse().unwrap());
    let mut unix = s.unix(&sock);
    tcp.put(b"from tcp");
    unix.send(b"reserve-with-timeout 0\r\n");
    unix.expect_reserved(b"from tcp");
    s.signal(libc::SIGTERM);
    assert!(s.wait_exit(Duration::from_secs(5)).success());
    assert!(!sock.exists(), "sprout leaves the socket file it made");
}

#[test]
fn every_flag_reads_its_sprout_variable() {
    if !sprout_only("every_flag_reads_its_sprout_variable") {
        return;
    }
    let dir = TempDir::new();
    let sock = dir.path().join("sock");
    let store = dir.path().join("store");
    let port = TestServer::free_port();
    let env = [
        // A repeatable flag: its values separated by whitespace.
        (
            "SPROUT_LISTEN",
            format!(" 127.0.0.1\tunix:{} ", sock.display()),
        ),
        ("SPROUT_PORT", port.to_string()),
        ("SPROUT_MAX_JOB_SIZE", "100".to_owned()),
        ("SPROUT_BINLOG_DIR", store.display().to_string()),
        ("SPROUT_FSYNC_MS", "0".to_owned()),
        // A switch reads 1/0, yes/no, true/false, on/off.
        ("SPROUT_NO_FSYNC", "no".to_owned()),
        // Empty is unset: an empty user would fail to start.
        ("SPROUT_USER", String::new()),
        ("SPROUT_VERBOSE", "1".to_owned()),
        ("SPROUT_LOG_FORMAT", "json".to_owned()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut s = Service::spawn(&binary(), &[], &env);
    let mut tcp = s.tcp(port);
    assert_eq!(tcp.stat("max-job-size"), "100");
    let mut unix = s.unix(&sock);
    unix.put(b"kept");
    s.signal(libc::SIGTERM);
    assert!(s.wait_exit(Duration::from_secs(5)).success());
    assert!(store.is_dir(), "SPROUT_BINLOG_DIR was not used");
    // -V and --log-format json: one JSON object a line, info included.
    let log = s.stderr();
    let listening: Vec<&str> = log.lines().filter(|l| l.contains("listening on")).collect();
    assert_eq!(listening.len(), 2, "{log}");
    for line in &listening {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON log line");
        assert_eq!(v["level"], "INFO", "{line}");
    }
    // -V logs each connection's open and close, with the client's address.
    let events: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON log line"))
        .filter(|v: &serde_json::Value| {
            v["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("connection "))
        })
        .collect();
    let peers: Vec<(&str, &str)> = events
        .iter()
        .map(|v| {
            let peer = v["span"]["peer"].as_str().unwrap_or("?");
            let what = v["fields"]["message"].as_str().unwrap();
            let kind = match peer {
                "unix" => "unix",
                p if p.starts_with("127.0.0.1:") => "tcp",
                _ => "?",
            };
            (what, kind)
        })
        .collect();
    for event in ["connection opened", "connection closed"] {
        for peer in ["tcp", "unix"] {
            assert!(peers.contains(&(event, peer)), "{event} {peer}: {log}");
        }
    }
}

#[test]
fn a_flag_wins_over_its_variable() {
    if !sprout_only("a_flag_wins_over_its_variable") {
        return;
    }
    let dir = TempDir::new();
    let sock = dir.path().join("sock");
    let env_port = TestServer::free_port();
    let flag_port = TestServer::free_port();
    let listen = format!("unix:{} 127.0.0.1", sock.display());
    let env = [
        ("SPROUT_LISTEN", listen.as_str()),
        ("SPROUT_PORT", &env_port.to_string()),
        ("SPROUT_MAX_JOB_SIZE", "100"),
    ];
    let args = ["-l", "127.0.0.1", "-p", &flag_port.to_string(), "-z", "200"];
    let mut s = Service::spawn(&binary(), &args, &env);
    let mut c = s.tcp(flag_port);
    assert_eq!(c.stat("max-job-size"), "200");
    // -l replaced the whole list: neither the env port nor its socket.
    assert!(std::net::TcpStream::connect(("127.0.0.1", env_port)).is_err());
    assert!(!sock.exists());
}

#[test]
fn a_bad_variable_is_refused_like_a_bad_flag() {
    if !sprout_only("a_bad_variable_is_refused_like_a_bad_flag") {
        return;
    }
    for (key, value) in [
        ("SPROUT_PORT", "notaport"),
        ("SPROUT_NO_FSYNC", "maybe"),
        ("SPROUT_LOG_FORMAT", "xml"),
    ] {
        let mut s = Service::spawn(&binary(), &[], &[(key, value)]);
        let status = s.wait_exit(Duration::from_secs(5));
        assert_eq!(status.code(), Some(2), "{key}={value}: {status}");
        assert!(s.stderr().contains(value), "{key}: {}", s.stderr());
    }
}

/// Jobs in the store for the readiness test (more by hand:
/// `SPROUT_READY_JOBS=1000000 cargo test --release --test service ready`).
fn ready_jobs() -> usize {
    std::env::var("SPROUT_READY_JOBS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000)
}

#[test]
fn ready_is_sent_after_recovery_and_stopping_at_shutdown() {
    if !sprout_only("ready_is_sent_after_recovery_and_stopping_at_shutdown") {
        return;
    }
    let dir = TempDir::new();
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let jobs = ready_jobs();
    {
        let mut s = TestServer::start_with_store(&store, &[]);
        let mut c = s.connect();
        for chunk in (0..jobs).collect::<Vec<_>>().chunks(1000) {
            let batch: Vec<u8> = chunk
                .iter()
                .flat_map(|i| format!("put 0 0 60 8\r\n{i:08}\r\n").into_bytes())
                .collect();
            c.send(&batch);
            for _ in chunk {
                let line = c.expect_line();
                assert!(line.starts_with("INSERTED "), "{line}");
            }
        }
        s.terminate();
    }

    let mut notify = Notifications::bind(dir.path());
    let port = TestServer::free_port();
    let store_s = store.display().to_string();
    let args = [
        "-l",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-b",
        &store_s,
        "-V",
    ];
    let started = Instant::now();
    let mut s = Service::spawn(&binary(), &args, &[notify.env()]);
    let ready = notify.wait_for("READY=1", Duration::from_secs(120));
    let to_ready = started.elapsed();
    // Recovery was announced first and had finished (and logged so) by READY.
    let recovering = notify.seen.iter().position(|m| {
        m.iter()
            .any(|l| l.starts_with("STATUS=recovering jobs from"))
    });
    assert_eq!(recovering, Some(0), "{:?}", notify.seen);
    assert!(s.stderr().contains("recovered from"), "{}", s.stderr());
    let status = format!("STATUS=serving on 127.0.0.1:{port}");
    assert!(ready.contains(&status), "{ready:?}");
    let mut c = Client::tcp(port);
    let answered = Instant::now();
    assert_eq!(c.stat("current-jobs-ready"), jobs.to_string());
    eprintln!(
        "READY=1 {to_ready:?} after start with {jobs} jobs in the store; \
         first stats answered {:?} after READY",
        answered.elapsed()
    );

    s.signal(libc::SIGTERM);
    let stopping = notify.wait_for("STOPPING=1", Duration::from_secs(5));
    assert!(stopping.contains(&"STATUS=stopping".to_owned()));
    assert!(s.wait_exit(Duration::from_secs(10)).success());
}

#[test]
fn socket_activation_serves_the_sockets_systemd_passes() {
    let test = "socket_activation_serves_the_sockets_systemd_passes";
    if !sprout_only(test) || !tool_available("systemd-socket-activate", test) {
        return;
    }
    let dir = TempDir::new();
    let sock = dir.path().join("activated.sock");
    let mut notify = Notifications::bind(dir.path());
    let port = TestServer::free_port();
    let unused = TestServer::free_port();
    let tcp_addr = format!("127.0.0.1:{port}");
    let sock_s = sock.display().to_string();
    let notify_env = format!("NOTIFY_SOCKET={}", notify.env().1);
    let bin = binary().display().to_string();
    // -l/-p name a port sprout must not use: the passed sockets replace them.
    let unused_s = unused.to_string();
    let args = [
        "-l",
        &tcp_addr,
        "-l",
        &sock_s,
        "-E",
        &notify_env,
        "--",
        &bin,
        "-l",
        "127.0.0.1",
        "-p",
        &unused_s,
        "-V",
    ];
    let mut s = Service::spawn(Path::new("systemd-socket-activate"), &args, &[]);
    // systemd-socket-activate starts sprout at the first connection.
    let mut tcp = s.tcp(port);
    tcp.put(b"activated");
    let ready = notify.wait_for("READY=1", Duration::from_secs(10));
    let status = format!("STATUS=serving on {tcp_addr}, unix:{sock_s}");
    assert!(ready.contains(&status), "{ready:?}");
    let mut unix = s.unix(&sock);
    unix.send(b"reserve-with-timeout 0\r\n");
    unix.expect_reserved(b"activated");
    assert!(std::net::TcpStream::connect(("127.0.0.1", unused)).is_err());
    assert!(s.stderr().contains("serving the sockets systemd passed"));

    // systemd-socket-activate execs sprout: this is sprout's pid.
    s.signal(libc::SIGTERM);
    notify.wait_for("STOPPING=1", Duration::from_secs(5));
    assert!(s.wait_exit(Duration::from_secs(5)).success());
    assert!(sock.exists(), "sprout removed the socket systemd owns");
}

#[test]
fn a_passed_socket_that_is_not_a_stream_is_refused() {
    let test = "a_passed_socket_that_is_not_a_stream_is_refused";
    if !sprout_only(test) || !tool_available("systemd-socket-activate", test) {
        return;
    }
    let port = TestServer::free_port();
    let addr = format!("127.0.0.1:{port}");
    let bin = binary().display().to_string();
    let args = ["--datagram", "-l", &addr, "--", &bin];
    let mut s = Service::spawn(Path::new("systemd-socket-activate"), &args, &[]);
    // A datagram starts it; retry until systemd-socket-activate is bound.
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let status = loop {
        udp.send_to(b"x", &addr).ok();
        std::thread::sleep(Duration::from_millis(50));
        if let Some(status) = s.child.try_wait().unwrap() {
            break status;
        }
    };
    assert!(!status.success());
    assert!(s.stderr().contains("not a stream socket"), "{}", s.stderr());
}

/// The shipped units with ExecStart pointing at the binary under test (so
/// `verify` can check it is executable), in a scratch directory.
fn units_under_test(dir: &Path) -> Vec<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("dist/systemd");
    let mut units = Vec::new();
    for name in ["sprout.service", "sprout.socket"] {
        let text = std::fs::read_to_string(src.join(name)).expect("read unit");
        let text = text.replace("/usr/bin/sprout", &binary().display().to_string());
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        units.push(path);
    }
    units
}

#[test]
fn the_units_pass_systemd_analyze() {
    let test = "the_units_pass_systemd_analyze";
    if !sprout_only(test) || !tool_available("systemd-analyze", test) {
        return;
    }
    let dir = TempDir::new();
    let units = units_under_test(dir.path());
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .args(&units)
        .output()
        .expect("systemd-analyze verify");
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.trim().is_empty(),
        "verify: {said}"
    );

    // The hardening, as systemd scores it (0 = locked down, 10 = exposed).
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(&units[0])
        .output()
        .expect("systemd-analyze security");
    let report = String::from_utf8_lossy(&out.stdout);
    let exposure: f64 = report
        .lines()
        .find_map(|l| l.split_once("Overall exposure level for sprout.service: "))
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in: {report}"));
    eprintln!("systemd-analyze security: exposure {exposure}");
    assert!(exposure <= 2.0, "exposure {exposure}: {report}");
}

/// `/etc/default/sprout` as systemd's EnvironmentFile= reads it: KEY=VALUE
/// lines, `#` comments, one level of double quotes.
fn default_file() -> (HashMap<String, String>, Vec<String>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("dist/default");
    let text = std::fs::read_to_string(path).expect("dist/default");
    let mut set = HashMap::new();
    let mut mentioned = Vec::new();
    for line in text.lines() {
        let (line, commented) = match line.strip_prefix('#') {
            Some(rest) => (rest, true),
            None => (line, false),
        };
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if !key.starts_with("SPROUT_") || key.contains(' ') {
            continue;
        }
        mentioned.push(key.to_owned());
        if !commented {
            let value = value.trim_matches('"');
            set.insert(key.to_owned(), value.to_owned());
        }
    }
    (set, mentioned)
}

#[test]
fn the_default_file_names_real_variables_and_starts_sprout() {
    if !sprout_only("the_default_file_names_real_variables_and_starts_sprout") {
        return;
    }
    let help = Command::new(binary()).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let (mut env, mentioned) = default_file();
    assert!(mentioned.len() >= 8, "{mentioned:?}");
    for key in &mentioned {
        assert!(
            help.contains(&format!("[env: {key}]")),
            "{key} is no flag's variable"
        );
    }
    // As packaged, apart from where: a free port and a scratch store.
    let dir = TempDir::new();
    let port = TestServer::free_port();
    env.insert("SPROUT_PORT".into(), port.to_string());
    env.insert(
        "SPROUT_BINLOG_DIR".into(),
        dir.path().join("store").display().to_string(),
    );
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut s = Service::spawn(&binary(), &[], &env);
    let mut c = s.tcp(port);
    c.put(b"packaged");
    assert!(dir.path().join("store").is_dir());
}
