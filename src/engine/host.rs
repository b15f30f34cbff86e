//! Facts about the machine and process that `stats` reports: read once at
//! startup (pid, `uname`, the random instance id) or on demand (CPU usage).

use std::ffi::CStr;
use std::hash::{BuildHasher, Hasher};
use std::io::Read;

pub(super) struct Host {
    pub(super) pid: u32,
    /// `uname` nodename.
    pub(super) hostname: String,
    /// `uname` version.
    pub(super) os: String,
    /// `uname` machine.
    pub(super) platform: String,
    /// 8 random bytes in hex: tells server instances apart.
    pub(super) instance: String,
}

impl Host {
    pub(super) fn read() -> Host {
        let (hostname, os, platform) = uname();
        let instance = instance_id().iter().map(|b| format!("{b:02x}")).collect();
        Host {
            pid: std::process::id(),
            hostname,
            os,
            platform,
            instance,
        }
    }
}

fn uname() -> (String, String, String) {
    // SAFETY: `utsname` is plain bytes, so all-zero is a valid value, and
    // `uname` only writes NUL-terminated strings into the struct we own.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return Default::default();
    }
    let text = |field: &[libc::c_char]| {
        // SAFETY: `uname` succeeded, so every field is NUL-terminated.
        unsafe { CStr::from_ptr(field.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    };
    (text(&u.nodename), text(&u.version), text(&u.machine))
}

fn instance_id() -> [u8; 8] {
    let mut id = [0u8; 8];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut id));
    if read.is_err() {
        // The standard library seeds its hash keys from the OS.
        let seed = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        id = seed.to_ne_bytes();
    }
    id
}

/// User and system CPU time of this process, as `(seconds, microseconds)`.
pub(super) fn rusage() -> ((i64, i64), (i64, i64)) {
    // SAFETY: `rusage` is plain integers; `getrusage` fills the struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    // `time_t` and `suseconds_t` are not `i64` on every target.
    #[allow(clippy::unnecessary_cast)]
    let tv = |t: libc::timeval| (t.tv_sec as i64, t.tv_usec as i64);
    (tv(ru.ru_utime), tv(ru.ru_stime))
}
