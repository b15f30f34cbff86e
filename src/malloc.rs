//! How a long-running process uses glibc's allocator: `sprout bridge`'s
//! own process and the server (process-wide settings, so only the start
//! makes them).
//!
//! * In `sprout bridge`, every allocation of 256 KiB or more is mapped by
//!   itself and unmapped when freed ([`tune`]). By default glibc raises that threshold to the size of the
//!   last mapping freed, so each index shard's table outgrown while keys
//!   arrive (a few MB each with a million keys) stayed behind in the heap:
//!   measured at 300k keys, 145 bytes of RSS per key, half of them old
//!   tables.
//! * Free heap above [`KEEP_FREE`] is handed back to the kernel, checked
//!   every [`TRIM_EVERY`], once RSS has grown by as much since the last
//!   trim. A burst leaves the heap full of small freed
//!   chunks that glibc keeps. In the bridge (events, batches, Redis
//!   replies), measured with 1M keys armed: 130 MB of RSS, 98 MB after one
//!   `malloc_trim` (the index's own ~89 MB, 94 bytes a key against 129);
//!   after their firing, 215 MB. In a durable server (sled's log buffers
//!   and what it takes in), after a fill of 1M 100-byte jobs: ~100 MB of
//!   RSS (docs/durability.md, "Memory while serving"). In any server, the
//!   body pages a drained burst hands back (`engine/bodies.rs`): 200k 1 KiB
//!   jobs put and drained in memory mode left 223 MB resident untrimmed.

use std::time::Duration;

/// Free heap the allocator may keep for the next burst. At 16 MiB a
/// durable server holding 10k 100-byte jobs kept 9 MB of free heap (27 MB
/// of RSS, 20.5 MB once trimmed): a small queue never grew enough to trim.
const KEEP_FREE: usize = 4 << 20;
/// How often the free heap is looked at (`mallinfo2` and `statm`; a
/// `malloc_trim` when [`worth_trimming`] says so). Every second cost the bridge about 1 s
/// of CPU more while firing 1M keys (one run), handing back pages a burst
/// faults in again at once.
const TRIM_EVERY: Duration = Duration::from_secs(5);

/// Maps large allocations by themselves (`sprout bridge`: see the module
/// docs), then trims as [`trim_free`] does.
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets one of the allocator's parameters.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
    }
    trim_free();
}

/// Starts the thread that hands free heap above [`KEEP_FREE`] back to the
/// kernel. The server does only this: the fixed mapping threshold
/// maps each of sled's 512 KiB log buffers afresh, which cost its puts
/// ~0.6 us of CPU each (+15-20%, 2 rounds at 1M jobs).
pub fn trim_free() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let trimmer = std::thread::Builder::new()
            .name("heap-trim".into())
            .spawn(|| {
                // The least seen since the last trim.
                let mut low = Look::default();
                loop {
                    std::thread::sleep(TRIM_EVERY);
                    let now = Look::now();
                    low = match worth_trimming(now, low) {
                        true => {
                            trim();
                            Look::now()
                        }
                        false => low.least(now),
                    };
                }
            });
        if let Err(e) = trimmer {
            tracing::warn!(error = %e, "cannot start the heap trimmer; freed memory stays in the heap");
        }
    }
}

/// The process's resident bytes and the heap's free bytes at one look.
#[derive(Clone, Copy, Debug, Default)]
struct Look {
    rss: usize,
    free: usize,
}

impl Look {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn now() -> Look {
        // SAFETY: mallinfo2 only reads the allocator's figures.
        let free = unsafe { libc::mallinfo2() }.fordblks;
        Look {
            rss: resident(),
            free,
        }
    }

    fn least(self, other: Look) -> Look {
        Look {
            rss: self.rss.min(other.rss),
            free: self.free.min(other.free),
        }
    }
}

/// Whether to trim, given a look `now` and the least seen since the last
/// trim (`low`). Free bytes alone would say yes every time: glibc still
/// counts the chunks a trim handed back as free, so an idle server walked
/// its heap (~1,000 `madvise` calls at 1M jobs, the arena locked
/// meanwhile) every few seconds for nothing. Free heap is resident again
/// once RSS grew by [`KEEP_FREE`] since (chunks handed back were faulted
/// in again), or once the free bytes grew by as much (what was live at the
/// last trim was freed since: a cluster node's pages, cleaned after a
/// drain, kept 270 MB resident when only RSS counted).
fn worth_trimming(now: Look, low: Look) -> bool {
    let grown = |now: usize, low: usize| now > low.saturating_add(KEEP_FREE);
    now.free > KEEP_FREE && (grown(now.rss, low.rss) || grown(now.free, low.free))
}

/// This process's resident bytes (`/proc/self/statm`), 0 if unreadable
/// (then only a rise above [`KEEP_FREE`] triggers the first trim, as ever).
fn resident() -> usize {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<usize>().ok())
        .unwrap_or(0);
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * usize::try_from(page).unwrap_or(4096)
}

/// Hands the heap's free pages back to the kernel now: small chunks, once
/// freed, stay in the heap, counted in RSS, until `malloc_trim`.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases the allocator's own free memory; it
    // takes its locks itself.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::{worth_trimming, Look, KEEP_FREE};

    #[test]
    fn trims_only_free_heap_that_is_resident() {
        const MB: usize = 1 << 20;
        let look = |rss, free| Look { rss, free };
        // (now, the least since the last trim, trim?)
        let table = [
            (look(300 * MB, 100 * MB), Look::default(), true), // the first look after a fill
            (look(260 * MB, 100 * MB), look(260 * MB, 100 * MB), false), // trimmed already: free, but not resident
            (
                look(260 * MB + KEEP_FREE, 100 * MB),
                look(260 * MB, 100 * MB),
                false,
            ), // grown by just the allowance
            (look(300 * MB, 100 * MB), look(260 * MB, 100 * MB), true), // a burst faulted free pages in again
            (look(300 * MB, KEEP_FREE), look(260 * MB, 0), false), // grown, but by live data, not free heap
            (look(260 * MB, 350 * MB), look(260 * MB, 100 * MB), true), // live data freed since the trim
            (
                look(260 * MB, 100 * MB + KEEP_FREE),
                look(260 * MB, 100 * MB),
                false,
            ), // freed just the allowance
            (
                look(300 * MB, 100 * MB),
                look(usize::MAX, usize::MAX),
                false,
            ), // no overflow
        ];
        for (now, low, want) in table {
            assert_eq!(worth_trimming(now, low), want, "{now:?} {low:?}");
        }
    }
}
