//! Bodies kept only on disk (`-b`): the design, ahead of the code (issue
//! 33). Nothing here is built yet; each step below lands green on its own.
//!
//! # Why
//!
//! With `-b` every body is held twice: in the engine's slabs
//! (`engine/bodies.rs`) and in sled's cached nodes, which sled 0.34 keeps
//! whatever its `cache_capacity` (docs/durability.md, "Memory while
//! serving": 10 MB of sled at 10k 1 KiB jobs, ~25 MB at 200k 100-byte
//! jobs). A delayed-job server holding 10M jobs of 1 KiB needs 10 GB for
//! that; the target is 64 B of RSS a held job plus a configured cache.
//!
//! # The shape
//!
//! * **The engine keeps a length, not the bytes.** A body longer than
//!   `INLINE` (to be measured: ~16-32 bytes, where a disk read costs more
//!   than the bytes) gets a third kind of `Body` handle, *stored*: the
//!   size field says "stored" and the 30-bit entry field holds the length
//!   less one (`-z` is at most 2^30; `--max-jobs-size` keeps counting it;
//!   an empty body is never stored). Memory
//!   mode never makes one: it has nowhere else to keep bodies.
//! * **Where the bytes are**: the put's journal record, then the job's
//!   image in a sled page, as today (`pack.rs` copies the image, body
//!   included, when cleaning moves it). The job→page map (`places.rs`)
//!   already says which page; it moves from the absorber's thread to a
//!   shared `Mutex` (held for one lookup, never across a read) so readers
//!   on other threads can use it.
//! * **A body cache** (`--body-cache BYTES`, default 64 MiB), a map from
//!   job id to `Bytes` under its own lock (never the engine's), CLOCK
//!   eviction by bytes. The store's `submit` puts each put's body in it
//!   (the record's `Bytes`: no copy); a read that missed puts what it read.
//!   A body whose put sled has not taken in yet is *pinned* (not
//!   evictable): it can be read nowhere else without reading the journal.
//!   The absorber unpins what each batch committed; pinned bytes stay
//!   bounded by the absorber's lag (`MAX_ABSORB_LAG`, which gains a bound
//!   in bytes). A delete drops the entry. Tested against a model (a plain
//!   map plus the pin set) with proptest: random puts, reads, pins,
//!   unpins, deletes and evictions; a lookup never returns another job's
//!   body, and the bytes never exceed the bound plus what is pinned.
//! * **Updates** (release, bury, kick, a TTR running out) carry the body in
//!   `Record::Update` today because sled's image is whole. The engine no
//!   longer has it: the record carries no body, and the absorber takes it
//!   from the cache or, missing there, from the job's current image (its
//!   own page read, as cleaning does). The journal already writes updates
//!   without bodies (`record.rs`), so its format does not change.
//!
//! # Answering with a cold body, outside the engine lock
//!
//! `reserve`, `reserve-with-timeout`, `reserve-job`, tuber's batches and the
//! `peek` family pick the job under the engine lock as today; the answer
//! carries the job id and length with an empty body, and the engine lists
//! it as *to fill* (`Engine::take_cold`, like `take_wakeups`). After the
//! lock is released, the connection fills it: from the cache (a hit), else
//! by one read of the job's page from sled on a blocking thread
//! (`spawn_blocking`), several cold answers of one flush read in order of
//! their pages, each page once. Answers keep their order: the flush waits
//! for the reads as it waits for the journal (`store::acknowledged`), and
//! a parked reserver's letter (`Connection::park`) is filled the same way.
//! No other connection waits: the engine lock is never held across a read.
//!
//! A read verifies what it got: the page's checksum (`page.rs`), then the
//! entry's job id. Cleaning may move the image between the lookup and the
//! read (a freed slot may even hold another job's page by then): a missing
//! or foreign entry means "look the place up again", a few times. What is
//! still wrong after that (a damaged store) answers `INTERNAL_ERROR` for
//! that job and logs its id; it never hands out a wrong body. A reserved
//! job so answered comes back when its TTR runs out. A `peek` whose job
//! was deleted by another connection in between answers `NOT_FOUND`, as
//! the peek would have had it come after the delete.
//!
//! # Recovery
//!
//! `recover.rs` decodes the images' fields and makes stored handles
//! without copying bodies (sled is dropped and reopened after the scan
//! already, so its nodes do not stay). Bodies of puts in the journal's tail
//! (past sled's commit) go into the cache pinned, with the first batch the
//! absorber takes in.
//!
//! # What it reports
//!
//! `stats` gains `body-cache-bytes`, `body-cache-max-bytes`,
//! `body-cache-hits`, `body-cache-misses` and `body-cache-read-errors`, at
//! the end (beanstalkd's keys stay as they are); `/metrics` the same as
//! `sprout_body_cache_*`.
//!
//! # Steps
//!
//! 1. The body cache alone, with its model test; its figures in `stats`.
//! 2. Reads: the shared place map, the page read with its checks, the
//!    connection's fill step (cache always hit: nothing stored yet).
//! 3. Stored handles for puts with `-b`; updates without bodies; recovery
//!    without bodies. Crash suites with bodies from 1 byte to `-z`.
//! 4. Cluster mode: standbys read pages from their own copy.
