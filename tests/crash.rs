//! Crash stress: the real binary with `-b DIR` under each fsync policy
//! (`-f 0`, the default `-f 50`, `-F`: all must be kill -9 safe, since a
//! reply waits for its records to be written to the journal) under
//! concurrent producers, consumers and a kicker (each on its own
//! connection), SIGKILLed at a random moment (50–500 ms in), restarted on
//! the same directory, and checked against what the clients were told:
//!
//! - every acknowledged put (INSERTED, or a job seen in RESERVED) is present
//!   with its body and tube, unless its delete was acknowledged;
//! - no acknowledged delete comes back;
//! - a job whose last acknowledged change was BURIED is still buried, unless
//!   a kick that may have run after the bury was in play; buried jobs that
//!   must be buried kick out in their bury order where that order is known;
//! - a job released with a 5 s delay is still delayed, with at most its
//!   remaining delay left, not a fresh one (or ready, if a kick may have
//!   run after the release: `kick` kicks delayed jobs when none is buried);
//! - a job reserved at the crash, or last acknowledged ready, is ready, with
//!   the priority it was last given;
//! - `releases` and `buries` equal the acknowledged ones (one more if such a
//!   command was in flight); `reserves` is at least the count as of the
//!   job's last acknowledged release or bury (a reserve writes no record of
//!   its own, as in beanstalkd) and at most the acknowledged reserves plus
//!   one per reserve in flight; `timeouts` stays 0;
//! - new ids are above every id any client saw.
//!
//! "In flight" means sent without an answer when the server died: such a
//! command may or may not have taken effect, and the checks allow both.
//!
//! 2 iterations per policy by default; `SPROUT_STRESS_ITERATIONS=N` runs N.
//! `SPROUT_STRESS_SEED` fixes the random seed (the interleaving still varies).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{sprout_only, FallibleClient, TempDir, TestServer};
use sprout_testkit::Rng;

const TUBES: [&str; 2] = ["default", "stress"];
/// Delay of a delayed release: long enough to outlast the whole check.
const RELEASE_DELAY: u64 = 5;
const TTR: u32 = 120;

/// What a job was last acknowledged as.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Last {
    Ready,
    Reserved,
    /// Buried; the event clock when the bury was sent and answered.
    Buried {
        sent: u64,
        acked: u64,
    },
    /// Released with [`RELEASE_DELAY`]; the event clock when the release
    /// was sent, and when it was acknowledged.
    Delayed {
        sent: u64,
        acked: Instant,
    },
    Deleted,
}

/// A command on one job sent without an answer yet.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Delete,
    Bury,
    Release,
}

#[derive(Debug)]
struct Job {
    body: Vec<u8>,
    tube: &'static str,
    pri: u32,
    last: Last,
    in_flight: Option<Op>,
    reserves: u32,
    /// `reserves` as of the last acknowledged release or bury: what the
    /// store must have, since a reserve itself writes nothing.
    reserves_recorded: u32,
    releases: u32,
    buries: u32,
}

/// Everything the clients were told, shared by the worker threads.
#[derive(Default)]
struct Log {
    jobs: HashMap<u64, Job>,
    /// Per tube: (sent, acked) event clock of every kick (acked 0 = never).
    kicks: HashMap<&'static str, Vec<(u64, u64)>>,
    /// Reserves sent without an answer (any job may have been reserved).
    reserves_in_flight: u32,
    max_id: u64,
}

struct Shared {
    log: Mutex<Log>,
    /// A logical clock: bumped at every send and every answer.
    clock: AtomicU64,
    stop: AtomicBool,
}

impl Shared {
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst) + 1
    }
    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }
}

type Res<T> = std::io::Result<T>;

fn bad(line: &str) -> std::io::Error {
    std::io::Error::other(format!("unexpected answer {line:?}"))
}

fn connect(port: u16) -> Res<FallibleClient> {
    FallibleClient::connect(port, Duration::from_secs(3))
}

/// Puts jobs into `tube` until stopped or the server dies.
fn producer(port: u16, shared: &Shared, tube: &'static str, seed: u64) -> Res<()> {
    let mut rng = Rng::new(seed);
    let mut c = connect(port)?;
    if c.request(&format!("use {tube}"))? != format!("USING {tube}") {
        return Err(bad("use"));
    }
    let mut n = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        n += 1;
        let pri = rng.below(100) as u32;
        // One body in four is large, so each iteration writes megabytes and
        // the store is cleaning its oldest pages when it is killed.
        let filler = if rng.below(4) == 0 {
            rng.below(60_000)
        } else {
            rng.below(64)
        };
        let body = format!("{tube}/{seed}/{n}/{}", "b".repeat(filler as usize));
        let msg = format!("put {pri} 0 {TTR} {}\r\n{body}\r\n", body.len());
        shared.tick();
        c.send(msg.as_bytes())?;
        let line = c.read_line()?;
        shared.tick();
        let id: u64 = line
            .strip_prefix("INSERTED ")
            .and_then(|i| i.parse().ok())
            .ok_or_else(|| bad(&line))?;
        let mut log = shared.log();
        log.max_id = log.max_id.max(id);
        // A consumer may have reserved it (and logged it) already, without
        // knowing its priority.
        log.jobs
            .entry(id)
            .and_modify(|j| {
                if j.pri == u32::MAX {
                    j.pri = pri;
                }
            })
            .or_insert(Job {
                body: body.into_bytes(),
                tube,
                pri,
                last: Last::Ready,
                in_flight: None,
                reserves: 0,
                reserves_recorded: 0,
                releases: 0,
                buries: 0,
            });
    }
    Ok(())
}

/// Reserves jobs and deletes, buries or releases them.
fn consumer(port: u16, shared: &Shared, seed: u64) -> Res<()> {
    let mut rng = Rng::new(seed);
    let mut c = connect(port)?;
    for tube in TUBES {
        c.request(&format!("watch {tube}"))?;
    }
    while !shared.stop.load(Ordering::Relaxed) {
        shared.log().reserves_in_flight += 1;
        shared.tick();
        let line = c.request("reserve-with-timeout 1")?;
        if line == "TIMED_OUT" {
            shared.log().reserves_in_flight -= 1;
            continue;
        }
        let mut parts = line.split(' ');
        let (Some("RESERVED"), Some(id), Some(len)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad(&line));
        };
        let (id, len): (u64, usize) = (
            id.parse().map_err(|_| bad(&line))?,
            len.parse().map_err(|_| bad(&line))?,
        );
        let body = c.read_body(len)?;
        shared.tick();
        // Which reservation of the job this is: once this consumer's
        // release or bury is answered, another consumer may reserve the job
        // (and even delete it) before this thread logs the answer.
        let reservation = {
            let mut log = shared.log();
            log.reserves_in_flight -= 1;
            log.max_id = log.max_id.max(id);
            // The body names its tube; the producer may not have logged it.
            let tube = if body.starts_with(b"stress/") {
                "stress"
            } else {
                "default"
            };
            let job = log.jobs.entry(id).or_insert(Job {
                body: body.clone(),
                tube,
                pri: u32::MAX, // unknown until the producer logs it
                last: Last::Ready,
                in_flight: None,
                reserves: 0,
                reserves_recorded: 0,
                releases: 0,
                buries: 0,
            });
            assert_eq!(job.body, body, "job {id} reserved with another body");
            // Reserved again while another consumer's release or bury (and
            // a kick) of it waited for its answer: that one took effect,
            // whether or not its answer is ever read (the kill may cut it).
            match job.in_flight.take() {
                Some(Op::Release) => job.releases += 1,
                Some(Op::Bury) => job.buries += 1,
                Some(Op::Delete) => panic!("job {id} reserved after its delete was sent"),
                None => {}
            }
            job.reserves += 1;
            job.last = Last::Reserved;
            job.reserves
        };
        let roll = rng.below(10);
        let pri = rng.below(100) as u32;
        let (op, cmd, want) = match roll {
            0..=4 => (Op::Delete, format!("delete {id}"), "DELETED"),
            5..=6 => (Op::Bury, format!("bury {id} {pri}"), "BURIED"),
            7 => (
                Op::Release,
                format!("release {id} {pri} {RELEASE_DELAY}"),
                "RELEASED",
            ),
            _ => (Op::Release, format!("release {id} {pri} 0"), "RELEASED"),
        };
        let sent = {
            let mut log = shared.log();
            log.jobs.get_mut(&id).unwrap().in_flight = Some(op);
            shared.tick()
        };
        let line = c.request(&cmd)?;
        if line != want {
            return Err(bad(&line));
        }
        let acked = Instant::now();
        let acked_tick = shared.tick();
        let mut log = shared.log();
        let job = log.jobs.get_mut(&id).unwrap();
        job.reserves_recorded = job.reserves_recorded.max(reservation);
        // If the job was reserved again meanwhile, its newer state is logged
        // already, this command counted with it: this answer must not
        // overwrite it.
        if job.reserves != reservation {
            continue;
        }
        match op {
            Op::Bury => job.buries += 1,
            Op::Release => job.releases += 1,
            Op::Delete => {}
        }
        job.in_flight = None;
        match (op, roll) {
            (Op::Delete, _) => job.last = Last::Deleted,
            (Op::Bury, _) => {
                job.last = Last::Buried {
                    sent,
                    acked: acked_tick,
                };
                job.pri = pri;
            }
            (Op::Release, 7) => {
                job.last = Last::Delayed { sent, acked };
                job.pri = pri;
            }
            (Op::Release, _) => {
                job.last = Last::Ready;
                job.pri = pri;
            }
        }
    }
    Ok(())
}

/// Kicks a few buried jobs now and then, in each tube.
fn kicker(port: u16, shared: &Shared, seed: u64) -> Res<()> {
    let mut rng = Rng::new(seed);
    let mut c = connect(port)?;
    while !shared.stop.load(Ordering::Relaxed) {
        thread::sleep(Duration::from_millis(5 + rng.below(30)));
        let tube = TUBES[rng.below(2) as usize];
        c.request(&format!("use {tube}"))?;
        let i = {
            let mut log = shared.log();
            let sent = shared.tick();
            let kicks = log.kicks.entry(tube).or_default();
            kicks.push((sent, 0));
            kicks.len() - 1
        };
        let line = c.request(&format!("kick {}", 1 + rng.below(3)))?;
        if !line.starts_with("KICKED ") {
            return Err(bad(&line));
        }
        let acked = shared.tick();
        shared.log().kicks.get_mut(tube).unwrap()[i].1 = acked;
        // Kicked buried jobs are ready now, but which ones is unknown:
        // the checks treat every bury before an unfinished kick as maybe
        // kicked.
    }
    Ok(())
}

/// Runs a worker; returns its result and when it ended.
fn timed(f: impl FnOnce() -> Res<()>) -> (Res<()>, Instant) {
    let result = f();
    (result, Instant::now())
}

/// One iteration: load, SIGKILL, restart, check. Returns the violations.
fn iteration(n: u64, seed: u64, policy: &[&str]) -> Vec<String> {
    let store = TempDir::new();
    let dir = store.path().join("store");
    let mut server = TestServer::start_with_store(&dir, policy);
    let port = server.port();
    let shared = Arc::new(Shared {
        log: Mutex::new(Log::default()),
        clock: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let mut rng = Rng::new(seed);
    let mut workers = Vec::new();
    for (w, tube) in TUBES.iter().enumerate() {
        let (shared, s) = (shared.clone(), rng.next_u64());
        workers.push(thread::spawn(move || {
            timed(|| producer(port, &shared, tube, s ^ w as u64))
        }));
    }
    for _ in 0..3 {
        let (shared, s) = (shared.clone(), rng.next_u64());
        workers.push(thread::spawn(move || timed(|| consumer(port, &shared, s))));
    }
    {
        let (shared, s) = (shared.clone(), rng.next_u64());
        workers.push(thread::spawn(move || timed(|| kicker(port, &shared, s))));
    }
    let run_for = Duration::from_millis(50 + rng.below(451));
    thread::sleep(run_for);
    let killed_at = Instant::now();
    server.kill9();
    shared.stop.store(true, Ordering::Relaxed);
    for w in workers {
        // Errors are expected once the server died under them, not before.
        let (result, ended) = w.join().expect("worker panicked");
        if let Err(e) = result {
            assert!(ended >= killed_at, "a worker failed before the kill: {e}");
        }
    }
    let log = std::mem::take(&mut *shared.log());
    let server = TestServer::start_with_store(&dir, policy);
    let violations = check(&server, &log);
    let acked = log.jobs.len();
    let deleted = log
        .jobs
        .values()
        .filter(|j| j.last == Last::Deleted)
        .count();
    eprintln!(
        "{policy:?} iteration {n}: seed {seed}, killed after {run_for:?}, {acked} jobs \
         acknowledged, {deleted} deleted, {} violations",
        violations.len()
    );
    violations
}

/// Compares the restarted server with the log.
fn check(server: &TestServer, log: &Log) -> Vec<String> {
    let mut v = Vec::new();
    let mut c = server.connect();
    let mut ids: Vec<&u64> = log.jobs.keys().collect();
    ids.sort();
    // Per tube: jobs that must be buried, with the clocks of their bury.
    let mut must_bury: BTreeMap<&str, Vec<(u64, u64, u64)>> = BTreeMap::new();
    for &id in ids {
        let job = &log.jobs[&id];
        let found = c.peek(id);
        let delete_sent = job.in_flight == Some(Op::Delete);
        match (&found, job.last) {
            (Some(_), Last::Deleted) => {
                v.push(format!("job {id}: acknowledged delete came back"));
                continue;
            }
            (None, Last::Deleted) => continue,
            (None, _) if delete_sent => continue,
            (None, last) => {
                v.push(format!("job {id}: acknowledged job lost (last {last:?})"));
                continue;
            }
            (Some(_), _) => {}
        }
        let body = found.unwrap();
        if body != job.body {
            v.push(format!("job {id}: body changed"));
        }
        let stats: HashMap<String, String> =
            c.stats_of(&format!("stats-job {id}")).into_iter().collect();
        let num = |k: &str| stats[k].parse::<u64>().unwrap();
        let state = stats["state"].as_str();
        if stats["tube"] != format!("\"{}\"", job.tube) {
            v.push(format!("job {id}: tube {} not {}", stats["tube"], job.tube));
        }
        if num("timeouts") != 0 {
            v.push(format!("job {id}: timeouts {}", stats["timeouts"]));
        }
        let extra = |op| u64::from(job.in_flight == Some(op));
        let (releases, buries) = (u64::from(job.releases), u64::from(job.buries));
        if !(releases..=releases + extra(Op::Release)).contains(&num("releases")) {
            v.push(format!(
                "job {id}: releases {} (acknowledged {releases}, in flight {:?})",
                num("releases"),
                job.in_flight
            ));
        }
        if !(buries..=buries + extra(Op::Bury)).contains(&num("buries")) {
            v.push(format!(
                "job {id}: buries {} (acknowledged {buries}, in flight {:?})",
                num("buries"),
                job.in_flight
            ));
        }
        let (recorded, reserves) = (u64::from(job.reserves_recorded), u64::from(job.reserves));
        let may = u64::from(log.reserves_in_flight);
        if !(recorded..=reserves + may).contains(&num("reserves")) {
            v.push(format!(
                "job {id}: reserves {} (recorded {recorded}, acknowledged {reserves}, {may} in flight)",
                num("reserves")
            ));
        }
        if state == "reserved" {
            v.push(format!("job {id}: reserved after a restart"));
        }
        if job.in_flight.is_some() {
            // Its last command may or may not have happened.
            continue;
        }
        // Whether a kick in the job's tube may have run after a command
        // sent at `sent` (a kick with no buried job kicks delayed ones): a
        // kick answered before `sent` ran before it.
        let maybe_kicked = |sent: u64| {
            let kicks = log.kicks.get(job.tube).map(Vec::as_slice).unwrap_or(&[]);
            kicks.iter().any(|&(_, acked)| acked == 0 || acked > sent)
        };
        let pri_known = job.pri != u32::MAX;
        if pri_known && num("pri") != u64::from(job.pri) {
            v.push(format!("job {id}: pri {} not {}", stats["pri"], job.pri));
        }
        match job.last {
            Last::Ready | Last::Reserved => {
                if state != "ready" {
                    v.push(format!(
                        "job {id}: {state}, expected ready ({:?})",
                        job.last
                    ));
                }
            }
            Last::Buried { sent, acked } => {
                if maybe_kicked(sent) {
                    if state != "buried" && state != "ready" {
                        v.push(format!("job {id}: {state}, expected buried or kicked"));
                    }
                } else if state != "buried" {
                    v.push(format!("job {id}: {state}, expected buried"));
                } else {
                    must_bury
                        .entry(job.tube)
                        .or_default()
                        .push((sent, acked, id));
                }
            }
            Last::Delayed { sent, acked } => {
                let left_max = RELEASE_DELAY as f64 - acked.elapsed().as_secs_f64() + 0.1;
                if left_max < 0.5 {
                    // Too close to its deadline to tell (a slow machine).
                    continue;
                }
                let kicked = maybe_kicked(sent);
                if state != "delayed" && !(kicked && state == "ready") {
                    v.push(format!(
                        "job {id}: {state}, expected delayed (kick: {kicked})"
                    ));
                } else if state == "delayed" && num("time-left") as f64 > left_max {
                    v.push(format!(
                        "job {id}: time-left {} but at most {left_max:.2} s remain",
                        stats["time-left"]
                    ));
                }
            }
            Last::Deleted => unreachable!(),
        }
    }
    // Bury order: walk each tube's buried jobs in the order they kick out.
    // A must-bury job whose bury was sent after A's bury was answered must
    // come out after A; buries that overlapped may come out either way.
    for (tube, mut want) in must_bury {
        want.sort();
        c.send(format!("use {tube}\r\n").as_bytes());
        c.expect_line();
        let mut order = Vec::new();
        while let Some((id, _)) = c.peek_cmd("peek-buried") {
            order.push(id);
            c.send(format!("kick-job {id}\r\n").as_bytes());
            c.expect(b"KICKED\r\n");
        }
        let pos: HashMap<u64, usize> = order.iter().enumerate().map(|(i, &id)| (id, i)).collect();
        for (i, &(_, acked_a, a)) in want.iter().enumerate() {
            for &(sent_b, _, b) in &want[i + 1..] {
                if acked_a < sent_b && pos[&a] > pos[&b] {
                    v.push(format!("tube {tube}: buried {a} kicked out after {b}"));
                }
            }
        }
    }
    let id = c.put(b"after the crash");
    if id <= log.max_id {
        v.push(format!(
            "new id {id} not above the highest id seen, {}",
            log.max_id
        ));
    }
    v
}

/// Runs the stress under `policy`, failing with every violation found.
fn stress(name: &str, policy: &[&str]) {
    if !sprout_only(name) {
        return;
    }
    let iterations: u64 = std::env::var("SPROUT_STRESS_ITERATIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2);
    let base_seed: u64 = std::env::var("SPROUT_STRESS_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    let mut failures = Vec::new();
    for n in 0..iterations {
        let seed = base_seed.wrapping_add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let violations = iteration(n, seed, policy);
        if !violations.is_empty() {
            failures.push(format!(
                "iteration {n} (seed {seed}):\n  {}",
                violations.join("\n  ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {iterations} iterations under {policy:?} broke a guarantee:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn acknowledged_work_survives_sigkill_under_f0() {
    stress("acknowledged_work_survives_sigkill_under_f0", &["-f", "0"]);
}

#[test]
fn acknowledged_work_survives_sigkill_under_the_default_policy() {
    stress(
        "acknowledged_work_survives_sigkill_under_the_default_policy",
        &[],
    );
}

#[test]
fn acknowledged_work_survives_sigkill_under_no_fsync() {
    stress("acknowledged_work_survives_sigkill_under_no_fsync", &["-F"]);
}
