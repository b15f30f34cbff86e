//! The engine's tables against models: the job record, the job table,
//! the heaps, timers, and time that never goes back.

use super::*;

#[test]
fn job_record_is_compact() {
    assert!(
        std::mem::size_of::<Option<JobRow>>() <= 96,
        "{}",
        std::mem::size_of::<JobRow>()
    );
}

/// One step of a 64-bit linear congruential generator (Knuth's MMIX
/// constants): repeatable randomness for the model tests.
fn lcg(x: u64) -> u64 {
    x.wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
}

#[test]
fn job_table_matches_a_hash_map() {
    // As it starts, and sized up front as recovery sizes it (smaller than
    // it gets, so it also grows from there).
    for reserved in [0, 10_000] {
        job_table_against_a_hash_map(reserved);
    }
}

fn job_table_against_a_hash_map(reserved: usize) {
    let mut table = JobTable::new();
    table.reserve(reserved);
    let mut model: HashMap<JobId, JobSlot> = HashMap::new();
    let mut live: Vec<JobId> = Vec::new();
    let mut next_id = 1;
    let mut rng = 12345u64;
    for _ in 0..50_000 {
        rng = lcg(rng);
        if rng >> 62 != 0 || live.is_empty() {
            let body = table_body(next_id);
            let profile = table_profile(next_id);
            let slot = table.insert(next_id, 0, profile, 0, &body);
            model.insert(next_id, slot);
            live.push(next_id);
            next_id += 1;
        } else {
            let id = live.swap_remove((rng >> 20) as usize % live.len());
            let slot = model.remove(&id).unwrap();
            assert_eq!(table.profile(slot), table_profile(id));
            assert_eq!(table.remove(slot), (id, table_profile(id).tube));
        }
        // Any id, live or gone, also while the index is growing (it grows
        // a few slots per call).
        let id = 1 + (rng >> 24) % next_id;
        assert_eq!(table.find(id), model.get(&id).copied(), "id {id}");
    }
    for id in 1..next_id {
        assert_eq!(table.find(id), model.get(&id).copied(), "id {id}");
        if let Some(slot) = table.find(id) {
            assert_eq!(table.body_bytes(slot), &table_body(id)[..], "body of {id}");
            assert_eq!(table.body_len(slot), table_body(id).len());
            assert_eq!(table.profile(slot), table_profile(id), "profile of {id}");
        }
    }
}

#[test]
fn an_emptied_job_table_gives_back_its_room_and_serves_on() {
    let mut table = JobTable::new();
    let put = |table: &mut JobTable, ids: std::ops::Range<JobId>| -> Vec<(JobId, JobSlot)> {
        let put = |id| {
            (
                id,
                table.insert(id, 0, table_profile(id), 0, &table_body(id)),
            )
        };
        ids.map(put).collect()
    };
    let burst = put(&mut table, 1..20_001);
    for &(_, slot) in &burst {
        table.set_file(slot, 7);
    }
    let (slots, buckets, files) = table.room();
    assert!(slots >= 20_000 && buckets >= 16_384, "{slots} {buckets}");
    assert!(files >= 20_000, "{files}");
    // While a job is left, slots stay put, and so does the room.
    for &(id, slot) in &burst[1..] {
        assert_eq!(table.remove(slot).0, id);
    }
    assert_eq!(table.room(), (slots, buckets, files));
    assert_eq!(table.find(1), Some(burst[0].1));
    assert_eq!(table.file(burst[0].1), 7);
    assert_eq!(table.body_bytes(burst[0].1), &table_body(1)[..]);
    assert_eq!(table.remove(burst[0].1).0, 1);
    assert_eq!(table.room(), JobTable::new().room());
    // Taken up again from nothing.
    let again = put(&mut table, 20_001..20_101);
    for (id, slot) in again {
        assert_eq!(table.find(id), Some(slot));
        assert_eq!(table.body_bytes(slot), &table_body(id)[..]);
    }
    assert_eq!(table.find(1), None);
    assert_eq!(table.find(20_000), None);
}

/// A profile for job `id`: hundreds of them, so unused ones are dropped
/// and made again (`profile.rs`) while others stay in use.
fn table_profile(id: JobId) -> Profile {
    Profile {
        tube: TubeIx::new((id % 3) as usize),
        ttr: 1 + (id % 2) as u32,
        delay: (id % 97) as u32,
    }
}

/// A body of its own for job `id`: lengths from empty to past the size
/// classes, contents that tell jobs apart.
fn table_body(id: JobId) -> Vec<u8> {
    let len = [0, 1, 8, 100, 250, 1024, 3000][id as usize % 7];
    (0..len).map(|i| (id as u8) ^ (i as u8)).collect()
}

#[test]
fn heaps_match_a_sorted_model() {
    // Few priorities and deadlines, so most keys tie on their first part;
    // slots are reused as jobs come and go.
    let mut table = JobTable::new();
    let mut ready: SlotHeap<ByPriority> = SlotHeap::new();
    let mut delayed: SlotHeap<ByDeadline> = SlotHeap::new();
    let mut ready_model: BTreeSet<(u32, JobId, JobSlot)> = BTreeSet::new();
    let mut delayed_model: BTreeSet<(Time, JobId, JobSlot)> = BTreeSet::new();
    let mut next_id = 1;
    let mut rng = 987_654_321u64;
    for round in 0..60_000 {
        rng = lcg(rng);
        let (pick, which, key) = ((rng >> 40) as usize, rng >> 63 == 0, (rng >> 33) % 8);
        // Grow for the first half, then shrink to nothing.
        let grow = (rng >> 20) % 8 < if round < 30_000 { 5 } else { 2 };
        if grow {
            let profile = Profile {
                tube: DEFAULT_TUBE,
                ttr: 1,
                delay: 0,
            };
            let slot = table.insert(next_id, key as u32, profile, 0, b"");
            table[slot].deadline = key;
            if which {
                ready.push(slot, &mut table);
                ready_model.insert((key as u32, next_id, slot));
            } else {
                delayed.push(slot, &mut table);
                delayed_model.insert((key, next_id, slot));
            }
            next_id += 1;
        } else if which && !ready_model.is_empty() {
            let &(pri, id, slot) = ready_model.iter().nth(pick % ready_model.len()).unwrap();
            ready.remove(slot, &mut table);
            ready_model.remove(&(pri, id, slot));
            assert_eq!(table.remove(slot).0, id);
        } else if !which && !delayed_model.is_empty() {
            // Mostly the top, as ticks take them.
            let n = if pick % 2 == 0 {
                0
            } else {
                pick % delayed_model.len()
            };
            let &(at, id, slot) = delayed_model.iter().nth(n).unwrap();
            delayed.remove(slot, &mut table);
            delayed_model.remove(&(at, id, slot));
            assert_eq!(table.remove(slot).0, id);
        }
        assert_eq!(ready.len(), ready_model.len());
        assert_eq!(delayed.len(), delayed_model.len());
        assert_eq!(
            ready.peek().map(|e| (e.pri, e.id, e.slot)),
            ready_model.first().copied()
        );
        assert_eq!(
            delayed
                .peek()
                .map(|e| (e.deadline, table[e.slot].id, e.slot)),
            delayed_model.first().copied()
        );
    }
    assert!(ready.is_empty() && delayed.is_empty());
}

#[test]
fn delayed_jobs_cost_one_timer_entry_per_tube() {
    let mut e = engine();
    let c = e.connect();
    for i in 0..10_000u64 {
        put(&mut e, c, 0, Duration::from_micros(10_000_000 - i), 60, 0);
    }
    assert_eq!(e.next_deadline(), Some(10_000_000 - 9_999));
    // Stale entries from every new minimum were compacted away.
    assert!(e.timers_len() < 100, "{}", e.timers_len());
    e.tick(10 * S);
    assert_eq!(
        server_stat(&mut e, c, "current-jobs-ready", 10 * S),
        "10000"
    );
    assert_eq!(e.next_deadline(), None);
}

#[test]
fn commands_see_timers_due_at_their_moment() {
    let mut e = engine();
    let c = e.connect();
    let id = put(&mut e, c, 0, secs(1), 60, 0);
    assert_eq!(reply(&mut e, c, C::PeekReady, S - 1), R::NotFound);
    assert_eq!(
        reply(&mut e, c, C::PeekReady, S),
        R::Found {
            id,
            body: Bytes::from_static(b"body")
        }
    );
}

#[test]
fn time_never_goes_back() {
    let mut e = engine();
    let c = e.connect();
    put(&mut e, c, 0, secs(1), 60, 0);
    e.tick(2 * S);
    // A call carrying an older clock reading still sees the job ready.
    assert_eq!(reserve(&mut e, c, S / 2), 1);
    assert_eq!(job_stat(&mut e, c, 1, "time-left", 0), "60");
}
