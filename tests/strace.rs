//! What the disk sees, checked with strace: the real binary under
//! `strace -f -yy`, with `-b DIR -f 0` and small journal files, driven by
//! one client (so every reply depends on every write before it), then the
//! trace is read back in order. The rules:
//!
//! - every frame written to a journal file (a `pwrite64` past its magic
//!   bytes) is synced (an `fdatasync`/`fsync` of that file, begun after the
//!   write returned) before the next reply is sent;
//! - no reply is sent after a frame went into a journal file whose name is
//!   not durable yet (an `fsync` of the journal directory, begun after the
//!   file was renamed into place);
//! - a journal file is removed only once sled's own file is synced since
//!   its last write (what the journal drops, sled must hold durably).
//!
//! sled's own writes are not required to precede replies: until sled is
//! synced, the journal holds everything (see `store/absorb.rs`).
//!
//! Without strace the test prints a note and passes, except under
//! `CI=true`, where it fails loudly.

mod common;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{sprout_only, Client, TempDir, TestServer};

fn strace_available() -> bool {
    let found = Command::new("strace")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("strace is missing (tests/run.sh installs it)");
        }
        eprintln!("note: skipping the strace test, strace is not installed");
    }
    found
}

/// One syscall event of the trace.
#[derive(Debug)]
enum Event {
    /// A write to `path` at `offset` returned.
    Wrote {
        path: String,
        offset: u64,
    },
    /// A sync of `path` (or of the whole filesystem, `None`) began or ended.
    SyncBegan(Option<String>),
    SyncEnded(Option<String>),
    /// A file was renamed to this path.
    Renamed(String),
    /// A reply began to be sent.
    Reply,
    Unlinked(String),
}

/// The path in an strace `-yy` descriptor, `7</a/b>` → `/a/b`.
fn fd_path(arg: &str) -> Option<String> {
    let start = arg.find('<')? + 1;
    let end = arg[start..].find('>')? + start;
    Some(arg[start..end].to_string())
}

/// Reads the events out of an strace log (`-f`: each line starts with a
/// pid; a call another thread interrupted is split into `<unfinished ...>`
/// and `<... resumed>` lines).
fn events(log: &str) -> Vec<Event> {
    let mut out = Vec::new();
    // Per pid, the call left unfinished.
    let mut open: HashMap<String, String> = HashMap::new();
    for line in log.lines() {
        let Some((pid, rest)) = line.split_once(' ') else {
            continue;
        };
        let rest = rest.trim_start();
        let (call, done) = if let Some(resumed) = rest.strip_prefix("<... ") {
            let Some(begun) = open.remove(pid) else {
                continue;
            };
            let tail = resumed.split_once("resumed>").map_or("", |(_, t)| t);
            (format!("{begun}{tail}"), true)
        } else if let Some(begun) = rest.strip_suffix(" <unfinished ...>") {
            open.insert(pid.to_string(), begun.to_string());
            (begun.to_string(), false)
        } else {
            (rest.to_string(), true)
        };
        let Some((name, args)) = call.split_once('(') else {
            continue;
        };
        let began = rest == call || !done;
        let ok = done && !call.contains("= -1");
        match name {
            "sendto" | "write" | "writev" if began && args.contains("<TCP:") => {
                out.push(Event::Reply)
            }
            "pwrite64" | "write" if ok => {
                if let Some(path) = fd_path(args) {
                    let offset = match name {
                        "pwrite64" => args
                            .rsplit_once(", ")
                            .and_then(|(_, o)| o.split(')').next())
                            .and_then(|o| o.trim().parse().ok())
                            .unwrap_or(0),
                        _ => u64::MAX,
                    };
                    out.push(Event::Wrote { path, offset });
                }
            }
            "fdatasync" | "fsync" => {
                let path = fd_path(args);
                if began {
                    out.push(Event::SyncBegan(path.clone()));
                }
                if ok {
                    out.push(Event::SyncEnded(path));
                }
            }
            "syncfs" => {
                if began {
                    out.push(Event::SyncBegan(None));
                }
                if ok {
                    out.push(Event::SyncEnded(None));
                }
            }
            "rename" | "renameat" | "renameat2" if ok => {
                // The second quoted string is where it went.
                if let Some(path) = args.split('"').nth(3) {
                    out.push(Event::Renamed(path.to_string()));
                }
            }
            "unlink" | "unlinkat" if ok => {
                if let Some(path) = args.split('"').nth(1) {
                    out.push(Event::Unlinked(path.to_string()));
                }
            }
            _ => {}
        }
    }
    out
}

/// Checks the rules of the module docs; returns the violations.
fn check(events: &[Event], store: &str) -> Vec<String> {
    let journal = format!("{store}/journal/");
    let db = format!("{store}/db");
    let is_journal_file = |p: &str| {
        p.strip_prefix(&journal)
            .is_some_and(|n| n.parse::<u64>().is_ok())
    };
    let mut v = Vec::new();
    // Writes not yet covered by a finished sync, by path, as event indexes.
    let mut unsynced: HashMap<String, HashSet<usize>> = HashMap::new();
    // Syncs under way: the path of each, and the writes (path, event) it
    // will cover when it ends.
    type Covered = Vec<(String, usize)>;
    let mut syncing: Vec<(Option<String>, Covered)> = Vec::new();
    // Journal files made whose directory entry is not synced yet.
    let mut undurable: HashSet<String> = HashSet::new();
    let mut dir_syncs: Vec<HashSet<String>> = Vec::new();
    let mut frames_in: HashSet<String> = HashSet::new();
    let (mut replies, mut frames, mut removed, mut made) = (0, 0, 0, 0);
    for (i, event) in events.iter().enumerate() {
        match event {
            Event::Wrote { path, offset } => {
                let frame = is_journal_file(path) && *offset > 0;
                if frame || *path == db {
                    unsynced.entry(path.clone()).or_default().insert(i);
                }
                if frame {
                    frames += 1;
                    frames_in.insert(path.clone());
                }
            }
            Event::SyncBegan(path) => {
                let covered = unsynced
                    .iter()
                    .filter(|(p, _)| path.as_ref().is_none_or(|s| s == *p))
                    .flat_map(|(p, w)| w.iter().map(|&w| (p.clone(), w)))
                    .collect();
                syncing.push((path.clone(), covered));
                if path.as_deref() == Some(journal.trim_end_matches('/')) {
                    dir_syncs.push(undurable.clone());
                }
            }
            Event::SyncEnded(path) => {
                if let Some(at) = syncing.iter().position(|(p, _)| p == path) {
                    let (_, covered) = syncing.remove(at);
                    for (p, w) in covered {
                        if let Some(set) = unsynced.get_mut(&p) {
                            set.remove(&w);
                        }
                    }
                }
                if path.as_deref() == Some(journal.trim_end_matches('/')) && !dir_syncs.is_empty() {
                    for made in dir_syncs.remove(0) {
                        undurable.remove(&made);
                    }
                }
            }
            Event::Renamed(path) if is_journal_file(path) => {
                made += 1;
                undurable.insert(path.clone());
            }
            Event::Renamed(_) => {}
            Event::Reply => {
                replies += 1;
                for (path, writes) in &unsynced {
                    if is_journal_file(path) && !writes.is_empty() {
                        v.push(format!(
                            "event {i}: a reply went out before {} write(s) to {path} were synced",
                            writes.len()
                        ));
                    }
                }
                for path in undurable.intersection(&frames_in) {
                    v.push(format!(
                        "event {i}: a reply went out after a frame in {path}, whose directory \
                         entry is not synced"
                    ));
                }
            }
            Event::Unlinked(path) if is_journal_file(path) => {
                removed += 1;
                if unsynced.get(&db).is_some_and(|w| !w.is_empty()) {
                    v.push(format!(
                        "event {i}: {path} removed before sled's file was synced"
                    ));
                }
            }
            Event::Unlinked(_) => {}
        }
    }
    eprintln!(
        "{} events: {replies} replies, {frames} journal frames, {made} journal files made, \
         {removed} removed",
        events.len()
    );
    if replies < 500 || frames < 500 || made < 3 || removed < 1 {
        v.push(format!(
            "too little traced to tell: {replies} replies, {frames} frames, {made} files \
             made, {removed} removed"
        ));
    }
    v
}

#[test]
fn every_reply_under_f0_follows_the_sync_of_what_it_wrote() {
    if !sprout_only("every_reply_under_f0_follows_the_sync_of_what_it_wrote") || !strace_available()
    {
        return;
    }
    let scratch = TempDir::new();
    let store = scratch.path().join("store");
    let log = scratch.path().join("trace");
    let port = TestServer::free_port();
    let mut child = Command::new("strace")
        .args(["-f", "-yy", "-qq", "-s", "0", "-o"])
        .arg(&log)
        .args([
            "-e",
            "trace=write,writev,pwrite64,fsync,fdatasync,syncfs,sendto,rename,renameat,renameat2,unlink,unlinkat",
            "--",
        ])
        .arg(common::binary())
        .args(["-l", "127.0.0.1", "-p", &port.to_string(), "-b"])
        .arg(&store)
        .args(["-f", "0", "-s", "65536"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn strace");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut c = loop {
        if let Ok(stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            drop(stream);
            break Client::tcp(port);
        }
        assert!(
            Instant::now() < deadline,
            "the traced server never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    // Enough traffic to fill several journal files and have sled take
    // them in and remove them.
    for round in 0..6 {
        let body = vec![b'a' + round as u8; 1000];
        let ids: Vec<u64> = (0..120).map(|_| c.put(&body)).collect();
        for (k, &id) in ids.iter().enumerate() {
            c.send(format!("reserve-job {id}\r\n").as_bytes());
            assert!(c.expect_line().starts_with("RESERVED"));
            c.read_exact_bytes(body.len() + 2);
            match k % 3 {
                0 => c.exchange(format!("release {id} 5 0\r\n").as_bytes(), b"RELEASED\r\n"),
                1 => {
                    c.exchange(format!("bury {id} 5\r\n").as_bytes(), b"BURIED\r\n");
                    c.exchange(format!("kick-job {id}\r\n").as_bytes(), b"KICKED\r\n");
                }
                _ => c.exchange(format!("delete {id}\r\n").as_bytes(), b"DELETED\r\n"),
            }
        }
        // Some pipelined: one batch, one sync for all.
        let mut batch = Vec::new();
        for _ in 0..50 {
            batch.extend_from_slice(b"put 1 0 10 3\r\nabc\r\n");
        }
        c.send(&batch);
        for _ in 0..50 {
            assert!(c.expect_line().starts_with("INSERTED "));
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    let pid: i32 = c.stat("pid").parse().unwrap();
    drop(c);
    // SAFETY: a signal to the process we started (through strace).
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let status = child.wait().expect("wait for strace");
    assert!(status.success(), "strace / sprout exited with {status}");
    let trace = std::fs::read_to_string(&log).expect("read the trace");
    let store = Path::new(&store).canonicalize().unwrap();
    let violations = check(&events(&trace), store.to_str().unwrap());
    assert!(
        violations.is_empty(),
        "{} violations:\n{}",
        violations.len(),
        violations.join("\n")
    );
}
