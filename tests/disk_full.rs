//! A full disk: the store lives on a small tmpfs mounted for the test (we
//! run as root, CI too), jobs are put until the answers turn from INSERTED
//! to OUT_OF_MEMORY, and a filler file takes whatever room is left.
//!
//! What is asserted (the issue "Ack means kept"):
//! - once the store refuses a put, every put is refused while the disk is
//!   full: nothing unstored is acknowledged;
//! - the queue still drains: every job can be reserved and deleted (a put
//!   set aside the room of its delete), release and bury answer RELEASED,
//!   BURIED or OUT_OF_MEMORY, never INTERNAL_ERROR;
//! - a server killed on the full disk starts again on it, serves every
//!   acknowledged job, and drains;
//! - once room appears, puts work again by themselves, without a restart;
//! - after a last kill -9 and restart, every acknowledged change is there:
//!   no acknowledged job lost, no acknowledged delete back.
//!
//! Without permission to mount, the tests print a note and pass, except
//! under `CI=true`, where they fail loudly.

mod common;

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{sprout_only, Client, TempDir, TestServer};

/// A tmpfs mounted on a fresh directory, unmounted on drop.
struct Tmpfs {
    _parent: TempDir,
    path: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (e.g. "4m"); `None` (after a note) when
    /// not permitted outside CI.
    fn mount(size: &str) -> Option<Tmpfs> {
        let parent = TempDir::new();
        let path = parent.path().join("mnt");
        std::fs::create_dir_all(&path).expect("create mount point");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .output();
        let error = match out {
            Ok(out) if out.status.success() => {
                return Some(Tmpfs {
                    _parent: parent,
                    path,
                })
            }
            Ok(out) => String::from_utf8_lossy(&out.stderr).into_owned(),
            Err(e) => e.to_string(),
        };
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("cannot mount a tmpfs (needed in CI): {error}");
        }
        eprintln!("note: skipping the disk-full test, cannot mount a tmpfs: {error}");
        None
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.path)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // Still busy (a server being reaped): detach it.
            let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        }
    }
}

const BODY_LEN: usize = 16 * 1024;
const MAX_PUTS: usize = 4096;
/// Journal files of 256 KiB, so a few megabytes make several.
const FILE_SIZE: &str = "262144";

fn body(n: usize) -> Vec<u8> {
    let mut b = format!("job {n}:").into_bytes();
    b.resize(BODY_LEN, b'a' + (n % 26) as u8);
    b
}

fn start(store: &Path, policy: &[&str]) -> TestServer {
    let mut args = vec!["-z", "65536", "-s", FILE_SIZE];
    args.extend_from_slice(policy);
    TestServer::start_with_store(store, &args)
}

/// Writes zeroes into `path` until the disk is full (or `leave` bytes are
/// left free).
fn fill_disk(path: &Path, leave: u64) {
    let mut file = std::fs::File::create(path).expect("create filler");
    let chunk = vec![0u8; 64 * 1024];
    while free_space(path.parent().unwrap()) > leave + chunk.len() as u64 {
        if file.write_all(&chunk).is_err() {
            break;
        }
    }
    if leave == 0 {
        // The last bytes, a block at a time.
        while file.write_all(&chunk[..4096]).is_ok() {}
        let _ = file.flush();
    }
}

fn free_space(dir: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: statvfs fills the struct we pass; the path is NUL-terminated.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(path.as_ptr(), &mut stat) }, 0);
    stat.f_bavail as u64 * stat.f_frsize as u64
}

/// Puts 16 KiB jobs until the store refuses; checks that a few more are
/// refused too. Returns (id, body number) of every INSERTED.
fn put_until_refused(c: &mut Client, from: usize) -> Vec<(u64, usize)> {
    let mut inserted = Vec::new();
    let mut refused = 0;
    for n in from..from + MAX_PUTS {
        let line = c.put_line(0, 0, 120, &body(n));
        match line.strip_prefix("INSERTED ") {
            Some(id) => {
                assert_eq!(refused, 0, "INSERTED after a refused put, disk still full");
                inserted.push((id.parse().unwrap(), n));
            }
            None => {
                assert_eq!(line, "OUT_OF_MEMORY", "put {n}");
                refused += 1;
                if refused == 5 {
                    return inserted;
                }
            }
        }
    }
    panic!("{MAX_PUTS} puts of {BODY_LEN} bytes all fit on a small tmpfs?");
}

/// Reserves and deletes every job there is; returns how many. Every
/// seventh job is first released or buried (and kicked) once: that may be
/// refused (OUT_OF_MEMORY, the job unchanged), never fail.
fn drain(c: &mut Client) -> usize {
    let mut deleted = 0;
    let mut moved = HashSet::new();
    loop {
        let line = c.line("reserve-with-timeout 0");
        if line == "TIMED_OUT" {
            return deleted;
        }
        let mut parts = line.split(' ');
        assert_eq!(parts.next(), Some("RESERVED"), "{line}");
        let id: u64 = parts.next().unwrap().parse().unwrap();
        let len: usize = parts.next().unwrap().parse().unwrap();
        c.read_exact_bytes(len + 2);
        if deleted % 7 == 3 && moved.insert(id) {
            let cmd = if deleted % 2 == 0 {
                format!("release {id} 0 0")
            } else {
                format!("bury {id} 0")
            };
            let answer = c.line(&cmd);
            assert!(
                ["RELEASED", "BURIED", "OUT_OF_MEMORY"].contains(&answer.as_str()),
                "{cmd}: {answer}"
            );
            let kicked = match answer.as_str() {
                "BURIED" => c.line(&format!("kick-job {id}")),
                _ => answer.clone(),
            };
            assert!(["RELEASED", "KICKED", "OUT_OF_MEMORY"].contains(&kicked.as_str()));
            if answer != "OUT_OF_MEMORY" && kicked != "OUT_OF_MEMORY" {
                // Ready again: reserved again later.
                continue;
            }
        }
        c.exchange(format!("delete {id}\r\n").as_bytes(), b"DELETED\r\n");
        deleted += 1;
    }
}

/// Puts once every 100 ms until one is INSERTED; returns its id.
fn put_when_room(c: &mut Client, n: usize, within: Duration) -> u64 {
    let started = Instant::now();
    loop {
        let line = c.put_line(0, 0, 120, &body(n));
        if let Some(id) = line.strip_prefix("INSERTED ") {
            return id.parse().unwrap();
        }
        assert_eq!(line, "OUT_OF_MEMORY");
        assert!(
            started.elapsed() < within,
            "puts still refused {within:?} after room was freed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_full_disk_drains_and_puts_resume_by_themselves() {
    if !sprout_only("a_full_disk_drains_and_puts_resume_by_themselves") {
        return;
    }
    let Some(fs) = Tmpfs::mount("40m") else {
        return;
    };
    let store = fs.path.join("store");
    let filler = fs.path.join("filler");
    let mut s = start(&store, &[]);
    let mut c = s.connect();
    // Someone else takes most of the disk, then the queue takes the rest.
    fill_disk(&filler, 8 << 20);
    let mut inserted = put_until_refused(&mut c, 0);
    // Then nothing is left. The store may still free a little of its own
    // meanwhile (sled took a journal file in, and it went), which puts may
    // use, as they should: fill that too, until puts stay refused.
    let mut fillers = 0;
    loop {
        fillers += 1;
        fill_disk(&fs.path.join(format!("filler{fillers}")), 0);
        let more = put_until_refused(&mut c, MAX_PUTS * fillers);
        if more.is_empty() {
            break;
        }
        assert!(fillers < 10, "puts keep finding room on a full disk");
        inserted.extend(more);
    }
    // The queue drains on the full disk.
    assert_eq!(drain(&mut c), inserted.len());
    assert!(s.wait_exit(Duration::ZERO).is_none(), "the server died");
    eprintln!("{} jobs put and drained on a full disk", inserted.len());

    // Room appears: puts work again, no restart.
    for n in 1..=fillers {
        std::fs::remove_file(fs.path.join(format!("filler{n}"))).unwrap();
    }
    std::fs::remove_file(&filler).unwrap();
    let after = put_when_room(&mut c, 2 * MAX_PUTS, Duration::from_secs(10));
    s.kill9();
    let s = start(&store, &[]);
    let mut c = s.connect();
    for &(id, _) in &inserted {
        assert_eq!(c.peek(id), None, "acknowledged delete of {id} came back");
    }
    assert_eq!(c.peek(after), Some(body(2 * MAX_PUTS)));
}

#[test]
fn a_server_killed_on_a_full_disk_restarts_and_drains() {
    if !sprout_only("a_server_killed_on_a_full_disk_restarts_and_drains") {
        return;
    }
    let Some(fs) = Tmpfs::mount("40m") else {
        return;
    };
    let store = fs.path.join("store");
    let filler = fs.path.join("filler");
    let mut s = start(&store, &["-f", "0"]);
    let mut c = s.connect();
    fill_disk(&filler, 8 << 20);
    let inserted = put_until_refused(&mut c, 0);
    fill_disk(&fs.path.join("filler2"), 0);
    s.kill9();

    // It starts on the full disk, with every acknowledged job.
    let mut s = start(&store, &["-f", "0"]);
    let mut c = s.connect();
    for &(id, n) in &inserted {
        assert_eq!(c.peek(id), Some(body(n)), "acknowledged job {id} lost");
    }
    assert_eq!(c.put_line(0, 0, 120, &body(MAX_PUTS)), "OUT_OF_MEMORY");
    assert_eq!(drain(&mut c), inserted.len());
    assert_eq!(c.put_line(0, 0, 120, &body(MAX_PUTS)), "OUT_OF_MEMORY");

    std::fs::remove_file(fs.path.join("filler2")).unwrap();
    std::fs::remove_file(&filler).unwrap();
    let after = put_when_room(&mut c, 2 * MAX_PUTS, Duration::from_secs(10));
    s.kill9();
    let s = start(&store, &["-f", "0"]);
    let mut c = s.connect();
    for &(id, _) in &inserted {
        assert_eq!(c.peek(id), None, "acknowledged delete of {id} came back");
    }
    assert_eq!(c.peek(after), Some(body(2 * MAX_PUTS)));
    let id = c.put(b"last");
    assert!(id > after, "new id {id} not above {after}");
}
