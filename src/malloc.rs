//! How a long-running process uses glibc's allocator: `sprout bridge`'s
//! own process, and a server with `-b` (process-wide settings, so only
//! main.rs makes them; a memory-mode server keeps glibc's defaults, which
//! its figures were measured with).
//!
//! * In `sprout bridge`, every allocation of 256 KiB or more is mapped by
//!   itself and unmapped when freed ([`tune`]). By default glibc raises that threshold to the size of the
//!   last mapping freed, so each index shard's table outgrown while keys
//!   arrive (a few MB each with a million keys) stayed behind in the heap:
//!   measured at 300k keys, 145 bytes of RSS per key, half of them old
//!   tables.
//! * Free heap above [`KEEP_FREE`] is handed back to the kernel, checked
//!   every [`TRIM_EVERY`]. A burst leaves the heap full of small freed
//!   chunks that glibc keeps. In the bridge (events, batches, Redis
//!   replies), measured with 1M keys armed: 130 MB of RSS, 98 MB after one
//!   `malloc_trim` (the index's own ~89 MB, 94 bytes a key against 129);
//!   after their firing, 215 MB. In a durable server (sled's log buffers
//!   and what it takes in), after a fill of 1M 100-byte jobs: ~100 MB of
//!   RSS (docs/durability.md, "Memory while serving").

use std::time::Duration;

/// Free heap the allocator may keep for the next burst.
const KEEP_FREE: usize = 16 << 20;
/// How often the free heap is looked at (`mallinfo2` and, when over
/// [`KEEP_FREE`], `malloc_trim`). Every second cost the bridge about 1 s
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
/// kernel. A durable server does only this: the fixed mapping threshold
/// maps each of sled's 512 KiB log buffers afresh, which cost its puts
/// ~0.6 us of CPU each (+15-20%, 2 rounds at 1M jobs).
pub fn trim_free() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let trimmer = std::thread::Builder::new()
            .name("heap-trim".into())
            .spawn(|| loop {
                std::thread::sleep(TRIM_EVERY);
                // SAFETY: mallinfo2 only reads the allocator's figures.
                if unsafe { libc::mallinfo2() }.fordblks > KEEP_FREE {
                    trim();
                }
            });
        if let Err(e) = trimmer {
            tracing::warn!(error = %e, "cannot start the heap trimmer; freed memory stays in the heap");
        }
    }
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
