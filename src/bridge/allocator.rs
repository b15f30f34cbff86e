//! How `sprout bridge`'s own process uses glibc's allocator (process-wide
//! settings, so only that process makes them, from main.rs: a server with
//! an embedded bridge keeps glibc's defaults, which its figures were
//! measured with).
//!
//! * Every allocation of 256 KiB or more is mapped by itself and unmapped
//!   when freed. By default glibc raises that threshold to the size of the
//!   last mapping freed, so each index shard's table outgrown while keys
//!   arrive (a few MB each with a million keys) stayed behind in the heap:
//!   measured at 300k keys, 145 bytes of RSS per key, half of them old
//!   tables.
//! * Free heap above [`KEEP_FREE`] is handed back to the kernel, checked
//!   every [`TRIM_EVERY`]. A burst (a million keys registered, or firing)
//!   leaves the heap full of small freed chunks (events, batches, Redis
//!   replies) that glibc keeps: measured with 1M keys armed, 130 MB of RSS,
//!   98 MB after one `malloc_trim` (the index's own ~89 MB, 94 bytes a key
//!   against 129); after their firing, 215 MB.

use std::time::Duration;

/// Free heap the allocator may keep for the next burst.
const KEEP_FREE: usize = 16 << 20;
/// How often the free heap is looked at (`mallinfo2` and, when over
/// [`KEEP_FREE`], `malloc_trim`). Every second cost the bridge about 1 s
/// of CPU more while firing 1M keys (one run), handing back pages a burst
/// faults in again at once.
const TRIM_EVERY: Duration = Duration::from_secs(5);

/// Sets the mapping threshold and starts the thread that trims the heap.
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only sets one of the allocator's parameters.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
        }
        let trimmer = std::thread::Builder::new()
            .name("heap-trim".into())
            .spawn(|| loop {
                std::thread::sleep(TRIM_EVERY);
                // SAFETY: both only read or release the allocator's own
                // free memory; they take its locks themselves.
                unsafe {
                    if libc::mallinfo2().fordblks > KEEP_FREE {
                        libc::malloc_trim(0);
                    }
                }
            });
        if let Err(e) = trimmer {
            tracing::warn!(error = %e, "cannot start the heap trimmer; freed memory stays in the heap");
        }
    }
}
