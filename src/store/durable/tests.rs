//! The page log against a model: random puts, updates and deletes in
//! random groups, with restarts, must always read back exactly the live
//! jobs, and cleaning must keep the log within its bound.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sprout_protocol::TubeName;

use std::path::Path;

use super::{create_failure, holder_in, in_use, DurableStore, Options, Recovered};
use crate::binlog_stats::BinlogStats;
use crate::engine::{JobImage, Record, Stored};
use crate::store::log::SLACK;
use crate::store::{PageValue, Policy, Store};

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn image(id: u64, rng: &mut Rng) -> JobImage {
    let state = match rng.below(4) {
        0 => Stored::Ready,
        1 => Stored::Reserved(rng.below(1 << 40)),
        2 => Stored::Delayed(rng.below(1 << 40)),
        _ => Stored::Buried(rng.below(1000)),
    };
    // Bodies up to 40 KB: pages overflow and cleaning starts within a few
    // hundred jobs.
    let len = rng.below(40_000) as usize;
    JobImage {
        id,
        tube: TubeName::new(if id.is_multiple_of(2) {
            b"even"
        } else {
            b"odd"
        })
        .unwrap(),
        pri: rng.below(1 << 32) as u32,
        ttr: 1 + rng.below(100) as u32,
        delay: rng.below(100) as u32,
        state,
        created: 1_700_000_000_000_000 + id,
        counts: crate::engine::Counts {
            reserves: rng.below(10) as u32,
            timeouts: rng.below(10) as u32,
            releases: rng.below(10) as u32,
            buries: rng.below(10) as u32,
            kicks: rng.below(10) as u32,
        },
        body: vec![(id % 251) as u8; len].into(),
        ext: None,
    }
}

fn open(dir: &std::path::Path) -> (DurableStore, Recovered, Vec<JobImage>) {
    // The default window: records left alone are applied (and the log
    // cleaned) 50 ms after they arrive.
    open_with(dir, Policy::Every(Duration::from_millis(50)))
}

/// Opens the store in `dir`; also returns its jobs, checked to come in
/// the order to restore them in: each once, buried jobs last in bury
/// order.
fn open_with(dir: &std::path::Path, policy: Policy) -> (DurableStore, Recovered, Vec<JobImage>) {
    let options = Options {
        dir: dir.to_path_buf(),
        policy,
        cache_bytes: 16 << 20,
        body_cache_bytes: 1 << 20,
        salvage: false,
        file_size: 1 << 20,
        max_job_size: 65_535,
    };
    // sled's background threads let go of the directory lock a little
    // after a close.
    for _ in 0..100 {
        let mut jobs = Vec::new();
        match DurableStore::open(&options, Arc::new(BinlogStats::default()), &mut jobs) {
            Ok((store, recovered)) => {
                let key = |j: &JobImage| match j.state {
                    Stored::Buried(seq) => (1, seq),
                    _ => (0, 0),
                };
                assert!(jobs.windows(2).all(|w| key(&w[0]) <= key(&w[1])));
                let ids: std::collections::HashSet<_> = jobs.iter().map(|j| j.id).collect();
                assert_eq!(ids.len(), jobs.len(), "a job restored twice");
                assert_eq!(recovered.jobs, jobs.len());
                return (store, recovered, jobs);
            }
            Err(e) if e.to_string().contains("in use by another sprout") => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("open the store: {e}"),
        }
    }
    panic!("the store stayed locked after its close");
}

#[test]
fn pages_read_back_exactly_the_live_jobs() {
    let dir = std::env::temp_dir().join(format!("sprout-pages-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut model: BTreeMap<u64, JobImage> = BTreeMap::new();
    let mut next_id = 1;
    let (mut shrank, mut last_stored) = (false, 0);
    for round in 0..8 {
        let (store, recovered, jobs) = open(&dir);
        let back: BTreeMap<u64, JobImage> = jobs.into_iter().map(|j| (j.id, j)).collect();
        assert_eq!(back, model, "round {round}");
        assert!(recovered.next_id >= next_id);
        let (stored, live) = (recovered.stored_bytes, recovered.live_bytes);
        assert!(
            // Cleaning runs once per commit: the bound may be over by what
            // one commit writes (at most every live job, ~60 x 40 KB).
            stored <= 2 * live + SLACK + 2 * 60 * 40_000,
            "round {round}: {stored} bytes stored for {live} live"
        );
        // Pages only ever leave the log by cleaning.
        shrank |= stored < last_stored;
        last_stored = stored;
        for _ in 0..600 {
            let mut records = Vec::new();
            for _ in 0..=rng.below(8) {
                let live: Vec<u64> = model.keys().copied().collect();
                let pick = |rng: &mut Rng| live[rng.below(live.len() as u64) as usize];
                match rng.below(10) {
                    0..=3 if model.len() < 60 || live.is_empty() => {
                        let job = image(next_id, &mut rng);
                        next_id += 1;
                        model.insert(job.id, job.clone());
                        records.push(Record::Put(job));
                    }
                    0..=5 if !live.is_empty() => {
                        let id = pick(&mut rng);
                        let mut job = image(id, &mut rng);
                        job.body = model[&id].body.clone();
                        model.insert(id, job.clone());
                        records.push(Record::Update(job));
                    }
                    _ if !live.is_empty() => {
                        let id = pick(&mut rng);
                        model.remove(&id);
                        records.push(Record::Delete(id));
                    }
                    _ => {}
                }
            }
            store.submit(records);
        }
        store.close();
    }
    assert!(shrank, "cleaning never ran");

    // Left alone, the writer cleans on its own down to the bound.
    let (store, recovered, _) = open(&dir);
    let mut ids: Vec<u64> = model.keys().copied().collect();
    let gone = ids.split_off(ids.len() / 2);
    for id in &gone {
        model.remove(id);
    }
    let before = recovered.stored_bytes;
    store.submit(gone.iter().map(|&id| Record::Delete(id)).collect());
    assert!(store.write_out());
    std::thread::sleep(Duration::from_millis(500));
    store.close();
    let (_store, recovered, jobs) = open(&dir);
    let back: BTreeMap<u64, JobImage> = jobs.into_iter().map(|j| (j.id, j)).collect();
    assert_eq!(back, model);
    let (stored, live) = (recovered.stored_bytes, recovered.live_bytes);
    assert!(
        stored <= 2 * live + SLACK,
        "idle: {stored} bytes stored for {live} live (before: {before})"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_job_put_and_deleted_within_one_window_never_reaches_sled() {
    let mut rng = Rng(7);
    let mut stored_after = |pause: Duration| {
        let dir = std::env::temp_dir().join(format!(
            "sprout-window-{}-{}",
            std::process::id(),
            pause.as_millis()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let (store, ..) = open_with(&dir, Policy::Always);
        let (kept, gone) = (image(1, &mut rng), image(2, &mut rng));
        // Separate submissions, as from separate commands, each written to
        // the journal as its reply would be.
        for records in [vec![Record::Put(kept.clone())], vec![Record::Put(gone)]] {
            store.submit(records);
            assert!(store.write_out());
        }
        std::thread::sleep(pause);
        store.submit(vec![Record::Delete(2)]);
        assert!(store.write_out());
        store.close();
        let (_store, recovered, jobs) = open_with(&dir, Policy::Always);
        assert_eq!(jobs, vec![kept]);
        let stored = recovered.stored_bytes;
        let _ = std::fs::remove_dir_all(&dir);
        stored
    };
    let windowed = stored_after(Duration::ZERO);
    // Past the window, sled took job 2 in before its delete came: its
    // image and its tombstone are in sled too.
    let apart = stored_after(Duration::from_millis(300));
    assert!(windowed < apart, "{windowed} vs {apart} bytes");
}

/// Once sled holds a put, the body cache holds its body as a slice of the
/// page sled holds, not a copy of its own (issue 33: each such body was
/// held twice, ~9 MB at 10k 1 KiB jobs).
#[test]
fn an_absorbed_body_is_held_once_a_slice_of_sleds_page() {
    let dir = std::env::temp_dir().join(format!("sprout-shared-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (store, ..) = open_with(&dir, Policy::Always);
    let mut job = image(1, &mut Rng(11));
    job.body = vec![7; 1024].into();
    store.submit(vec![Record::Put(job.clone())]);
    assert!(store.write_out());
    let bodies = &store.bodies;
    let source = bodies.source.lock().unwrap().clone().unwrap();
    let in_sleds_page = |held: &bytes::Bytes| {
        let Some(found) = bodies.dir.find(1) else {
            return false;
        };
        let Ok(Some(PageValue::Sled(page))) = source.page(found.slot) else {
            panic!("job 1's page is not in sled");
        };
        let page = page.as_ptr() as usize..page.as_ptr() as usize + page.len();
        page.contains(&(held.as_ptr() as usize))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let held = bodies.cache.peek(1).expect("the cache holds job 1's body");
        assert_eq!(held, job.body);
        if in_sleds_page(&held) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still a copy of its own"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(bodies.cache.sizes().1, 0, "nothing pinned");
    drop(source);
    store.close();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn startup_failures_read_as_sentences() {
    use std::io::{Error, ErrorKind};
    let dir = Path::new("/srv/jobs");
    // (existed, error kind, message start)
    let table = [
        (
            true,
            ErrorKind::PermissionDenied,
            "-b /srv/jobs is not writable: ",
        ),
        (
            true,
            ErrorKind::ReadOnlyFilesystem,
            "-b /srv/jobs is not writable: ",
        ),
        (
            false,
            ErrorKind::PermissionDenied,
            "cannot create /srv/jobs: ",
        ),
        (true, ErrorKind::StorageFull, "cannot create /srv/jobs: "),
    ];
    for (existed, kind, start) in table {
        let message = create_failure(dir, existed, &Error::from(kind));
        assert!(message.starts_with(start), "{existed} {kind:?}: {message}");
    }
    assert!(
        in_use(dir, Some(42)).starts_with("-b /srv/jobs is in use by another sprout (pid 42): ")
    );
    assert!(in_use(dir, None).starts_with("-b /srv/jobs is in use by another sprout: "));
}

#[test]
fn lock_holders_are_read_from_proc_locks() {
    let locks = "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF\n\
                 1: -> FLOCK  ADVISORY  WRITE 7 fd:02:99 0 EOF\n\
                 2: POSIX  ADVISORY  WRITE 77 fd:02:99 0 EOF\n";
    // (major, minor, inode, holder)
    let table = [
        (8, 1, 1234, Some(4242)),
        (0xfd, 2, 99, Some(77)),
        (8, 1, 99, None),
        (8, 2, 1234, None),
    ];
    for (major, minor, inode, holder) in table {
        assert_eq!(
            holder_in(locks, major, minor, inode),
            holder,
            "{major}:{minor}:{inode}"
        );
    }
}
