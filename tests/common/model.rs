//! A model of what clients were told, and the check of a server against
//! it, for the tests that kill servers under load: `crash.rs` (one server,
//! restarted on its directory) and `cluster.rs` (a leader killed, a standby
//! taking over).
//!
//! Workers, each on its own connection: producers put into two tubes,
//! consumers reserve and delete, bury or release (some with a delay), a
//! kicker kicks. Every answer is logged ([`Log`]); [`check`] then asks the
//! server that survived:
//!
//! - every acknowledged put (INSERTED, or a job seen in RESERVED) is present
//!   with its body and tube, unless its delete was acknowledged;
//! - no acknowledged delete comes back; no id is handed out for two puts;
//! - a job whose last acknowledged change was BURIED is still buried, unless
//!   a kick that may have run after the bury was in play; buried jobs that
//!   must be buried kick out in their bury order where that order is known;
//! - a job released with a 5 s delay is still delayed, with at most its
//!   remaining delay left, not a fresh one (or ready, if a kick may have
//!   run after the release: `kick` kicks delayed jobs when none is buried);
//! - a job last acknowledged ready is ready, with the priority it was last
//!   given;
//! - a job reserved when its server died is ready after a restart
//!   ([`Carry::Released`]); after a failover it is still reserved, with at
//!   most its remaining TTR left ([`Carry::Kept`]), as is at most one other
//!   job per reserve lost in flight;
//! - `releases` and `buries` equal the acknowledged ones (one more if such a
//!   command was in flight); `reserves` is at least the count as of the
//!   job's last acknowledged release or bury (a reserve writes no record of
//!   its own, as in beanstalkd) and at most the acknowledged reserves plus
//!   one per reserve in flight; `timeouts` stays 0;
//! - new ids are above every id any client saw.
//!
//! "In flight" means sent without an answer when a server died: such a
//! command may or may not have taken effect, and the checks allow both.
//!
//! Workers run against [`Nodes`]: one server, whose death ends them, or a
//! cluster's nodes, where a worker whose connection dies with its node
//! goes on through the next one (any other failure ends it).

use std::collections::{BTreeMap, HashMap};
use std::io::ErrorKind;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use super::{Client, FallibleClient};
use sprout_testkit::Rng;

pub const TUBES: [&str; 2] = ["default", "stress"];
/// Delay of a delayed release: long enough to outlast the whole check.
const RELEASE_DELAY: u64 = 5;
/// Longer than any test: no reservation times out.
pub const TTR: u32 = 120;

/// What a job was last acknowledged as.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Last {
    Ready,
    /// Reserved; when the RESERVED answer arrived.
    Reserved(Instant),
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

impl Job {
    /// A job first seen reserved, before its producer logged it.
    fn seen(body: Vec<u8>) -> Job {
        // The body names its tube.
        let tube = if body.starts_with(b"stress/") {
            "stress"
        } else {
            "default"
        };
        Job {
            body,
            tube,
            pri: u32::MAX, // unknown until the producer logs it
            last: Last::Ready,
            in_flight: None,
            reserves: 0,
            reserves_recorded: 0,
            releases: 0,
            buries: 0,
        }
    }
}

/// Everything the clients were told.
#[derive(Default)]
pub struct Log {
    jobs: HashMap<u64, Job>,
    /// Per tube: (sent, acked) event clock of every kick (acked 0 = never).
    kicks: HashMap<&'static str, Vec<(u64, u64)>>,
    /// Reserves sent without an answer (any job may have been reserved).
    reserves_in_flight: u32,
    max_id: u64,
}

impl Log {
    /// How many jobs were acknowledged, and how many of them deleted.
    pub fn counts(&self) -> (usize, usize) {
        let deleted = self.jobs.values().filter(|j| j.last == Last::Deleted);
        (self.jobs.len(), deleted.count())
    }
}

/// Where workers connect.
#[derive(Clone)]
pub struct Nodes {
    pub ports: Vec<u16>,
    /// Whether a worker whose connection dies goes on through the next
    /// node (a cluster) or ends (one server, killed).
    pub follow: bool,
    /// How long a read waits for an answer.
    pub timeout: Duration,
    /// The kicker's least pause between kicks: over a long run, frequent
    /// kicks would leave no job buried to check the bury order of.
    pub kick_pause: Duration,
}

impl Nodes {
    /// One server: its death ends the workers.
    pub fn one(port: u16) -> Nodes {
        Nodes {
            ports: vec![port],
            follow: false,
            timeout: Duration::from_secs(3),
            kick_pause: Duration::from_millis(5),
        }
    }

    /// A cluster's nodes: answers may wait out a takeover or a NATS
    /// election, so reads wait long.
    pub fn cluster(ports: &[u16]) -> Nodes {
        Nodes {
            ports: ports.to_vec(),
            follow: true,
            timeout: Duration::from_secs(30),
            kick_pause: Duration::from_millis(500),
        }
    }

    /// Runs `session` on a connection to node `first`, and, when following,
    /// on the next node's each time a connection dies with its node, until
    /// `session` returns `Ok` (stopped) or fails otherwise.
    fn run(
        &self,
        shared: &Shared,
        first: usize,
        mut session: impl FnMut(&mut FallibleClient) -> Res<()>,
    ) -> Res<()> {
        let mut node = first;
        loop {
            let port = self.ports[node % self.ports.len()];
            let result =
                FallibleClient::connect(port, self.timeout).and_then(|mut c| session(&mut c));
            match result {
                Err(e) if self.follow && node_lost(&e) => {
                    if shared.stop.load(Ordering::Relaxed) {
                        return Ok(());
                    }
                    node += 1;
                    thread::sleep(Duration::from_millis(20));
                }
                other => return other,
            }
        }
    }
}

/// Whether `e` is what a client sees when its node dies (not a timeout,
/// nor an unexpected answer).
fn node_lost(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::UnexpectedEof
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::ConnectionRefused
            | ErrorKind::BrokenPipe
    )
}

/// The log, and what the workers share to write it.
pub struct Shared {
    log: Mutex<Log>,
    /// A logical clock: bumped at every send and every answer.
    clock: AtomicU64,
    pub stop: AtomicBool,
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            log: Mutex::new(Log::default()),
            clock: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        }
    }
}

impl Shared {
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst) + 1
    }
    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// The log so far, taken (once the workers are done).
    pub fn take_log(&self) -> Log {
        std::mem::take(&mut *self.log())
    }
}

pub type Res<T> = std::io::Result<T>;

fn bad(line: &str) -> std::io::Error {
    std::io::Error::new(
        ErrorKind::InvalidData,
        format!("unexpected answer {line:?}"),
    )
}

/// Puts jobs into `tube` until stopped or the server dies.
pub fn producer(nodes: &Nodes, shared: &Shared, tube: &'static str, seed: u64) -> Res<()> {
    let mut rng = Rng::new(seed);
    let mut n = 0u64;
    nodes.run(shared, seed as usize, |c| {
        if c.request(&format!("use {tube}"))? != format!("USING {tube}") {
            return Err(bad("use"));
        }
        while !shared.stop.load(Ordering::Relaxed) {
            n += 1;
            let pri = rng.below(100) as u32;
            // One body in four is large, so each iteration writes megabytes
            // and the store is cleaning its oldest pages when it is killed.
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
            let body = body.into_bytes();
            // A consumer may have reserved it (and logged it) already,
            // without knowing its priority.
            let job = log
                .jobs
                .entry(id)
                .or_insert_with(|| Job::seen(body.clone()));
            assert_eq!(job.body, body, "id {id} handed out for two puts");
            if job.pri == u32::MAX {
                job.pri = pri;
            }
        }
        Ok(())
    })
}

/// Reserves jobs and deletes, buries or releases them.
pub fn consumer(nodes: &Nodes, shared: &Shared, seed: u64) -> Res<()> {
    let mut rng = Rng::new(seed);
    nodes.run(shared, seed as usize, |c| {
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
            let (Some("RESERVED"), Some(id), Some(len)) =
                (parts.next(), parts.next(), parts.next())
            else {
                return Err(bad(&line));
            };
            let (id, len): (u64, usize) = (
                id.parse().map_err(|_| bad(&line))?,
                len.parse().map_err(|_| bad(&line))?,
            );
            let body = c.read_body(len)?;
            let reserved_at = Instant::now();
            shared.tick();
            // Which reservation of the job this is: once this consumer's
            // release or bury is answered, another consumer may reserve the
            // job (and even delete it) before this thread logs the answer.
            let reservation = {
                let mut log = shared.log();
                log.reserves_in_flight -= 1;
                log.max_id = log.max_id.max(id);
                let job = log
                    .jobs
                    .entry(id)
                    .or_insert_with(|| Job::seen(body.clone()));
                assert_eq!(job.body, body, "job {id} reserved with another body");
                // Reserved again while another consumer's release or bury
                // (and a kick) of it waited for its answer: that one took
                // effect, whether or not its answer is ever read (the kill
                // may cut it).
                match job.in_flight.take() {
                    Some(Op::Release) => job.releases += 1,
                    Some(Op::Bury) => job.buries += 1,
                    Some(Op::Delete) => panic!("job {id} reserved after its delete was sent"),
                    None => {}
                }
                job.reserves += 1;
                job.last = Last::Reserved(reserved_at);
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
            // If the job was reserved again meanwhile, its newer state is
            // logged already, this command counted with it: this answer must
            // not overwrite it.
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
    })
}

/// Kicks a few buried jobs now and then, in each tube.
pub fn kicker(nodes: &Nodes, shared: &Shared, seed: u64) -> Res<()> {
    let mut rng = Rng::new(seed);
    nodes.run(shared, seed as usize, |c| {
        while !shared.stop.load(Ordering::Relaxed) {
            thread::sleep(nodes.kick_pause + Duration::from_millis(rng.below(30)));
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
            // the checks treat every bury before an unfinished kick as
            // maybe kicked.
        }
        Ok(())
    })
}

/// What becomes of a job reserved by a connection that died with its
/// server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carry {
    /// Ready: a restarted server holds no reservation.
    Released,
    /// Still reserved until its TTR runs out: a new leader took it over.
    Kept,
}

/// Compares the server behind `c` with the log; returns the violations.
pub fn check(c: &mut Client, log: &Log, carry: Carry) -> Vec<String> {
    let mut v = Vec::new();
    let mut ids: Vec<&u64> = log.jobs.keys().collect();
    ids.sort();
    // Per tube: jobs that must be buried, with the clocks of their bury.
    let mut must_bury: BTreeMap<&str, Vec<(u64, u64, u64)>> = BTreeMap::new();
    // Jobs found reserved that no acknowledged reserve of a dead
    // connection explains: a reserve lost in flight may have taken each.
    let mut unexplained_reserved = Vec::new();
    // How many present jobs were found in each state (and, reserved, held
    // for a connection that died).
    let mut states: BTreeMap<String, usize> = BTreeMap::new();
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
        *states.entry(state.to_string()).or_default() += 1;
        if state == "reserved" && matches!(job.last, Last::Reserved(_)) {
            *states
                .entry("reserved by a dead connection".into())
                .or_default() += 1;
        }
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
            match carry {
                Carry::Released => v.push(format!("job {id}: reserved after a restart")),
                Carry::Kept if num("time-left") > u64::from(TTR) => v.push(format!(
                    "job {id}: reserved, time-left {}",
                    stats["time-left"]
                )),
                Carry::Kept if !matches!(job.last, Last::Reserved(_)) => {
                    unexplained_reserved.push(id)
                }
                Carry::Kept => {}
            }
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
        // A reserve lost in flight may have taken any job that was ready
        // (or became so).
        let lost_reserve = carry == Carry::Kept && may > 0 && state == "reserved";
        match job.last {
            Last::Reserved(at) if carry == Carry::Kept => {
                // Held for its TTR from the reserve, not a fresh one.
                let left_max = f64::from(TTR) - at.elapsed().as_secs_f64() + 1.0;
                if state != "reserved" {
                    v.push(format!("job {id}: {state}, expected still reserved"));
                } else if num("time-left") as f64 > left_max {
                    v.push(format!(
                        "job {id}: time-left {} but at most {left_max:.2} s remain",
                        stats["time-left"]
                    ));
                }
            }
            Last::Ready | Last::Reserved(_) => {
                if state != "ready" && !lost_reserve {
                    v.push(format!(
                        "job {id}: {state}, expected ready ({:?})",
                        job.last
                    ));
                }
            }
            Last::Buried { sent, acked } => {
                if maybe_kicked(sent) {
                    if state != "buried" && state != "ready" && !lost_reserve {
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
                if state != "delayed" && !(kicked && (state == "ready" || lost_reserve)) {
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
    eprintln!("jobs present, by state: {states:?}");
    if unexplained_reserved.len() > log.reserves_in_flight as usize {
        v.push(format!(
            "jobs {unexplained_reserved:?} reserved, but only {} reserves were in flight",
            log.reserves_in_flight
        ));
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
