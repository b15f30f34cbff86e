//! What sprout's tests (`tests/`) and benchmarks (`benches/`) share, once:
//! a repeatable random sequence, the `/proc` readers for a server's memory
//! and CPU, free loopback ports, and the wall clock in milliseconds. A dev
//! crate of its own, so neither side links the other, and `sprout` itself
//! carries none of it.

use std::collections::HashSet;
use std::net::TcpListener;
use std::sync::Mutex;

/// A small xorshift generator: repeatable runs with no dependency.
pub struct Rng(u64);

impl Rng {
    /// A sequence from `seed` (0 is taken as 1: xorshift stays at 0).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number below `n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Unix time in milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// Ports handed out by this process, never handed out twice.
static USED_PORTS: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A loopback port nothing listened on a moment ago, and that this
/// process has not handed out before.
pub fn free_port() -> u16 {
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

/// A `kB` field of `/proc/PID/status` (`VmRSS`, `VmHWM`, ...), in KiB.
pub fn status_kb(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The user and system CPU seconds every thread of `pid` has used, from
/// `/proc/PID/stat`.
pub fn cpu_seconds(pid: u32) -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold
    // spaces: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map(|(_, rest)| rest)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    let (utime, stime) = (ticks(14 - 3)?, ticks(15 - 3)?);
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1);
    Some((utime as f64 / hz as f64, stime as f64 / hz as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let pid = std::process::id();
        assert!(status_kb(pid, "VmRSS").is_some_and(|kb| kb > 0));
        assert_eq!(status_kb(pid, "NoSuchField"), None);
        let (user, sys) = cpu_seconds(pid).expect("own /proc/PID/stat");
        assert!(user >= 0.0 && sys >= 0.0);
        assert_eq!(cpu_seconds(u32::MAX), None);
    }

    #[test]
    fn ports_are_not_handed_out_twice() {
        let ports: HashSet<u16> = (0..20).map(|_| free_port()).collect();
        assert_eq!(ports.len(), 20);
    }

    #[test]
    fn the_sequence_is_xorshift_and_zero_is_one() {
        let mut a = Rng::new(0);
        let mut b = Rng::new(1);
        assert_eq!(a.next_u64(), b.next_u64());
        // Worked by hand: x = 1; x ^= x << 13 (8193); x ^= x >> 7 (8257);
        // x ^= x << 17 (8257 * 2^17 + 8257).
        assert_eq!(Rng::new(1).next_u64(), 1_082_269_761);
        assert!((0..100).all(|_| a.below(7) < 7));
    }
}
