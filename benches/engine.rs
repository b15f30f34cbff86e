//! The engine's hot paths with a million jobs present: `put`, `reserve` and
//! `delete` against 1,000,000 ready jobs, and the timer (`tick` promoting
//! delayed jobs, `next_deadline`) against 1,000,000 delayed jobs. It checks
//! that these stay O(log n) or better and shows what a big backlog costs
//! (`engine 0 ready` is the same cycle on an empty engine, for comparison).
//!
//! The engine is driven as `src/connection.rs` and `src/timer.rs` drive it,
//! through `execute` and `tick` with explicit [`Time`] values, with 100-byte
//! bodies in their own allocations as the codec makes them, and no journal (as
//! without `-b`). Each 1M-job engine is built once, untimed, and keeps its
//! size: the refilling and draining happen untimed between timed chunks of
//! about [`CHUNK`] operations. Run with `cargo bench --bench engine`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use sprout::engine::{ConnId, Engine, EngineConfig, Outcome, Time};
use sprout_protocol::{Command, JobId, Response};

/// Jobs present while measuring.
const JOBS: u64 = 1_000_000;
/// Body size of every job.
const BODY: usize = 100;
/// Operations timed between two rounds of untimed upkeep.
const CHUNK: u64 = 1000;
/// When the engine starts: an arbitrary wall-clock moment, in µs.
const T0: Time = 1_700_000_000_000_000;
const SECOND: Time = 1_000_000;
/// Delayed jobs fall due one every `GAP` µs, so 1M of them span 1000 s.
const GAP: Time = 1000;
/// The first delayed job falls due this long after `T0`.
const FIRST_DUE: Time = SECOND;

fn configure(group: &mut BenchmarkGroup<'_, WallTime>) {
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
}

/// A 100-byte body in its own allocation, as the server's codec copies
/// short bodies out of its read buffer.
fn body() -> Bytes {
    Bytes::copy_from_slice(&[b'j'; BODY])
}

/// An engine with one connection that puts, reserves and deletes.
struct Fixture {
    engine: Engine,
    conn: ConnId,
    /// The moment passed to every call.
    now: Time,
    /// Bodies made ready for timed puts.
    pending: Vec<Bytes>,
    /// Ids reserved and not yet deleted.
    held: Vec<JobId>,
}

impl Fixture {
    fn new() -> Fixture {
        let config = EngineConfig {
            max_job_size: 65_535,
            binlog_max_size: 10_485_760,
            journal: false,
            binlog: Default::default(),
            jobs_budget: None,
            bodies_in_store: false,
        };
        let mut engine = Engine::new(config, T0);
        let conn = engine.connect();
        Fixture {
            engine,
            conn,
            now: T0,
            pending: Vec::new(),
            held: Vec::new(),
        }
    }

    fn reply(&mut self, cmd: Command) -> Response {
        match self.engine.execute(self.conn, cmd, self.now) {
            Outcome::Reply(r) => r,
            other => panic!("expected a reply, got {other:?}"),
        }
    }

    fn put(&mut self, body: Bytes, delay: Duration) -> JobId {
        let cmd = Command::Put {
            pri: 1024,
            delay,
            ttr: Duration::from_secs(60),
            body,
            tags: None,
        };
        match self.reply(cmd) {
            Response::Inserted(id) => id,
            r => panic!("expected INSERTED, got {r:?}"),
        }
    }

    fn put_ready(&mut self) -> JobId {
        let body = body();
        self.put(body, Duration::ZERO)
    }

    /// `reserve-with-timeout 0`: the job, or `None` if nothing is ready.
    fn reserve(&mut self) -> Option<JobId> {
        match self.reply(Command::ReserveWithTimeout(Duration::ZERO)) {
            Response::Reserved { id, .. } => Some(id),
            Response::TimedOut => None,
            r => panic!("expected RESERVED or TIMED_OUT, got {r:?}"),
        }
    }

    fn delete(&mut self, id: JobId) {
        match self.reply(Command::Delete(id)) {
            Response::Deleted => {}
            r => panic!("expected DELETED, got {r:?}"),
        }
    }

    fn make_bodies(&mut self, n: u64) {
        for _ in 0..n {
            let body = body();
            self.pending.push(body);
        }
    }

    /// Deletes every job reserved into `held`.
    fn delete_held(&mut self, _n: u64) {
        while let Some(id) = self.held.pop() {
            self.delete(id);
        }
    }

    fn reserve_and_delete(&mut self, n: u64) {
        for _ in 0..n {
            let id = self.reserve().expect("a ready job");
            self.delete(id);
        }
    }
}

/// Times `iters` operations, [`CHUNK`] at a time: `before(n)` and `after(n)`
/// run untimed around each `timed(n)`.
fn chunked<S>(
    state: &mut S,
    iters: u64,
    chunk: u64,
    mut before: impl FnMut(&mut S, u64),
    mut timed: impl FnMut(&mut S, u64),
    mut after: impl FnMut(&mut S, u64),
) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(chunk);
        before(state, n);
        let start = Instant::now();
        timed(state, n);
        total += start.elapsed();
        after(state, n);
        left -= n;
    }
    total
}

/// A FIFO of `jobs` ready jobs (all at priority 1024, so reserve takes the oldest).
fn ready_fixture(jobs: u64) -> Fixture {
    let start = Instant::now();
    let mut f = Fixture::new();
    for _ in 0..jobs {
        f.put_ready();
    }
    if jobs > 0 {
        eprintln!(
            "engine: put {jobs} ready jobs in {:.2?} (untimed setup)",
            start.elapsed()
        );
    }
    f
}

/// One put + reserve + delete per iteration: the queue stays at its size.
fn cycle(f: &mut Fixture, iters: u64) -> Duration {
    chunked(
        f,
        iters,
        CHUNK,
        Fixture::make_bodies,
        |f, n| {
            for _ in 0..n {
                let body = f.pending.pop().expect("a body");
                f.put(body, Duration::ZERO);
                let id = f.reserve().expect("a ready job");
                f.delete(id);
            }
        },
        |_, _| {},
    )
}

fn ready(c: &mut Criterion) {
    let mut empty = ready_fixture(0);
    let mut group = c.benchmark_group("engine 0 ready");
    configure(&mut group);
    group.bench_function("put+reserve+delete", |b| {
        b.iter_custom(|iters| cycle(&mut empty, iters))
    });
    group.finish();
    drop(empty);

    let mut f = ready_fixture(JOBS);
    let mut group = c.benchmark_group("engine 1M ready");
    configure(&mut group);
    group.bench_function("put+reserve+delete", |b| {
        b.iter_custom(|iters| cycle(&mut f, iters))
    });
    group.bench_function("put", |b| {
        b.iter_custom(|iters| {
            chunked(
                &mut f,
                iters,
                CHUNK,
                Fixture::make_bodies,
                |f, n| {
                    for _ in 0..n {
                        let body = f.pending.pop().expect("a body");
                        black_box(f.put(body, Duration::ZERO));
                    }
                },
                Fixture::reserve_and_delete,
            )
        })
    });
    group.bench_function("reserve", |b| {
        b.iter_custom(|iters| {
            chunked(
                &mut f,
                iters,
                CHUNK,
                |f, n| {
                    for _ in 0..n {
                        f.put_ready();
                    }
                },
                |f, n| {
                    for _ in 0..n {
                        let id = f.reserve().expect("a ready job");
                        f.held.push(id);
                    }
                },
                Fixture::delete_held,
            )
        })
    });
    group.bench_function("delete", |b| {
        b.iter_custom(|iters| {
            chunked(
                &mut f,
                iters,
                CHUNK,
                |f, n| {
                    for _ in 0..n {
                        f.put_ready();
                        let id = f.reserve().expect("a ready job");
                        f.held.push(id);
                    }
                },
                Fixture::delete_held,
                |_, _| {},
            )
        })
    });
    group.finish();
}

/// 1M delayed jobs, the `k`th due at `due(k)`, put in a shuffled order.
/// Jobs below `promoted` have been made ready; `next` is the next `k` to put.
struct Delayed {
    f: Fixture,
    promoted: u64,
    next: u64,
}

fn due(k: u64) -> Time {
    T0 + FIRST_DUE + k * GAP
}

/// A fixed pseudo-random sequence (splitmix64), for the put order.
fn shuffled(n: u64) -> Vec<u64> {
    let mut state: u64 = 0x5EED;
    let mut random = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut order: Vec<u64> = (0..n).collect();
    for i in (1..order.len()).rev() {
        let j = (random() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

impl Delayed {
    fn new() -> Delayed {
        let start = Instant::now();
        let mut f = Fixture::new();
        for k in shuffled(JOBS) {
            let body = body();
            f.put(body, Duration::from_micros(due(k) - f.now));
        }
        eprintln!(
            "engine: put {JOBS} delayed jobs (due over {} s) in {:.2?} (untimed setup)",
            JOBS * GAP / SECOND,
            start.elapsed()
        );
        Delayed {
            f,
            promoted: 0,
            next: JOBS,
        }
    }

    /// One tick that makes exactly the next `batch` jobs ready.
    fn tick(&mut self, batch: u64) {
        self.promoted += batch;
        self.f.now = due(self.promoted - 1);
        self.f.engine.tick(self.f.now);
    }

    /// Reserves and deletes the `n` jobs the ticks made ready (checking there
    /// are exactly `n`), and puts `n` more delayed jobs after the last one.
    fn upkeep(&mut self, n: u64) {
        self.f.reserve_and_delete(n);
        assert_eq!(self.f.reserve(), None, "tick made too many jobs ready");
        for _ in 0..n {
            let body = body();
            let delay = Duration::from_micros(due(self.next) - self.f.now);
            self.f.put(body, delay);
            self.next += 1;
        }
    }
}

fn delayed(c: &mut Criterion) {
    let mut d = Delayed::new();
    let mut group = c.benchmark_group("engine 1M delayed");
    configure(&mut group);
    for batch in [1, 100, 10_000] {
        group.throughput(Throughput::Elements(batch));
        group.bench_function(format!("tick promoting {batch}"), |b| {
            b.iter_custom(|iters| {
                chunked(
                    &mut d,
                    iters,
                    (CHUNK / batch).max(1),
                    |_, _| {},
                    |d, n| {
                        for _ in 0..n {
                            d.tick(batch);
                        }
                    },
                    |d, n| d.upkeep(n * batch),
                )
            })
        });
    }
    group.throughput(Throughput::Elements(1));
    group.bench_function("tick, nothing due", |b| {
        let now = d.f.now;
        assert!(d.f.engine.next_deadline().is_some_and(|at| at > now));
        b.iter(|| d.f.engine.tick(black_box(now)))
    });
    group.bench_function("next_deadline", |b| {
        b.iter(|| black_box(d.f.engine.next_deadline()))
    });
    group.finish();
}

criterion_group!(benches, ready, delayed);
criterion_main!(benches);
