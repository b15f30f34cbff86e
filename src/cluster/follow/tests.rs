use std::collections::BTreeMap;

use super::*;
use crate::cluster::changes;
use crate::cluster::cluster_flags::LocalCopy;
use crate::store::test_image;

type Jobs = BTreeMap<JobId, JobImage>;

/// The engine replica's view: what `changes` do to `jobs`.
fn replay(changes: &mut Vec<Change>, jobs: &mut Jobs) {
    for change in changes.drain(..) {
        match change {
            Change::Job(image) => _ = jobs.insert(image.id, image),
            Change::Unless(image) if jobs.contains_key(&image.id) => {}
            Change::Unless(image) => _ = jobs.insert(image.id, image),
            Change::Update(image) => {
                let body = jobs[&image.id].body.clone();
                jobs.insert(image.id, JobImage { body, ..image });
            }
            Change::Deleted(id) => _ = jobs.remove(&id),
        }
    }
}

/// A reader of the stream: its pages and its replica.
#[derive(Default)]
struct Reader {
    pages: Pages,
    jobs: Jobs,
}

impl Reader {
    /// A reader whose pages are on disk in `dir`, bodies read back from
    /// them (`-b`).
    fn on_disk(dir: &std::path::Path) -> Reader {
        let local = LocalCopy {
            dir: dir.to_path_buf(),
            body_cache: 64 << 10,
        };
        Reader {
            pages: Pages::open(Some(&local), Default::default()).unwrap(),
            jobs: Jobs::new(),
        }
    }

    fn apply(&mut self, seq: u64, subject: Subject, payload: Bytes) -> Result<(), PageError> {
        let mut changes = Vec::new();
        self.pages.apply(seq, subject, payload, &mut changes)?;
        replay(&mut changes, &mut self.jobs);
        Ok(())
    }
}

/// The stream as JetStream keeps it: one message per subject, the change
/// messages a purge leaves.
#[derive(Default)]
struct Stream {
    by_subject: BTreeMap<String, (u64, Subject, Bytes)>,
    last_seq: u64,
}

impl Stream {
    fn name(subject: &Subject) -> String {
        format!("{subject:?}")
    }

    fn publish(&mut self, subject: Subject, payload: Bytes) -> u64 {
        self.last_seq += 1;
        let seq = self.last_seq;
        self.by_subject
            .insert(Stream::name(&subject), (seq, subject, payload));
        seq
    }

    fn purge_changes_below(&mut self, below: u64) {
        self.by_subject
            .retain(|_, (seq, subject, _)| !matches!(subject, Subject::Change(_)) || *seq >= below);
    }

    /// What a node starting now reads, in order.
    fn read(&self) -> Vec<(u64, Subject, Bytes)> {
        let mut all: Vec<_> = self
            .by_subject
            .values()
            .map(|(seq, subject, payload)| (*seq, *subject, payload.clone()))
            .collect();
        all.sort_by_key(|(seq, _, _)| *seq);
        all
    }

    fn cold_reader(&self) -> Result<Reader, PageError> {
        let mut reader = Reader::default();
        for (seq, subject, payload) in self.read() {
            reader.apply(seq, subject, payload)?;
        }
        Ok(reader)
    }
}

/// A leader as `writer.rs` writes: change messages per batch, snapshots
/// every few, with a standby applying each message as it lands.
struct Leader {
    pages: Pages,
    stream: Stream,
    standby: Reader,
    meta: Meta,
    /// Slots cleaning freed (and left empty).
    freed: usize,
}

impl Leader {
    fn new() -> Leader {
        Leader {
            pages: Pages::default(),
            stream: Stream::default(),
            standby: Reader::default(),
            meta: Meta::default(),
            freed: 0,
        }
    }

    fn publish(&mut self, subject: Subject, payload: Bytes) -> u64 {
        let seq = self.stream.publish(subject, payload.clone());
        self.standby.apply(seq, subject, payload).unwrap();
        seq
    }

    fn batch(&mut self, records: Vec<Record>) {
        // As `ClusterStore::submit` does.
        if let Some(bodies) = &self.pages.bodies {
            bodies.submitted(&records);
        }
        let first = self.pages.last_change + 1;
        for (n, payload) in changes::encode(&records, first, 0, 300) {
            self.publish(Subject::Change(n), payload);
            self.pages.last_change = n;
        }
        self.pages.pending.push((self.pages.last_change, records));
    }

    /// Sends a snapshot, or only its first `cut` messages (a crash);
    /// returns the sequence it starts at.
    fn snapshot(&mut self, cut: Option<usize>) -> u64 {
        let mut messages: Vec<(Subject, Bytes)> = self
            .pages
            .snapshot(100)
            .unwrap()
            .into_iter()
            .map(|(slot, page)| (Subject::Page(slot), page))
            .collect();
        self.freed += messages.iter().filter(|(_, page)| page.is_empty()).count();
        self.meta.snap = self.pages.last_change;
        messages.push((Subject::Meta, self.meta.encode().into()));
        let from = self.stream.last_seq + 1;
        let n = cut.unwrap_or(messages.len());
        for (subject, payload) in messages.into_iter().take(n) {
            self.publish(subject, payload);
        }
        from
    }
}

/// Batches of big jobs put, reserved (an update without its body) and
/// deleted, with some kept: the log goes over its bound and cleaning
/// moves images and frees slots.
fn workload(round: u64) -> Vec<Vec<Record>> {
    let base = round * 1000;
    let mut batches = Vec::new();
    for id in base + 1..=base + 60 {
        batches.push(vec![Record::Put(test_image(id, 20_000))]);
    }
    for id in base + 1..=base + 60 {
        let mut reserved = test_image(id, 0);
        reserved.state = Stored::Reserved(7_000_000 + id);
        let delete = (id % 4 != 0).then_some(Record::Delete(id));
        batches.push(
            [Record::Update(reserved)]
                .into_iter()
                .chain(delete)
                .collect(),
        );
    }
    batches
}

#[test]
fn standbys_and_cold_readers_hold_the_leaders_jobs_through_snapshots_and_purges() {
    let mut leader = Leader::new();
    let mut model = Jobs::new();
    let mut snapshots = Vec::new();
    for round in 0..6 {
        for (i, records) in workload(round).into_iter().enumerate() {
            let mut changes = Vec::new();
            for record in &records {
                changes.push(match record {
                    Record::Put(image) => Change::Job(image.clone()),
                    Record::Update(image) => Change::Update(image.clone()),
                    Record::Delete(id) => Change::Deleted(*id),
                });
            }
            replay(&mut changes, &mut model);
            leader.batch(records);
            if i % 25 == 24 {
                snapshots.push(leader.snapshot(None));
            }
            // Purges lag a snapshot behind (`purges.rs`).
            if snapshots.len() > 1 {
                let below = snapshots.remove(0);
                leader.stream.purge_changes_below(below);
            }
        }
        assert_eq!(leader.standby.jobs, model, "standby, round {round}");
        let cold = leader.stream.cold_reader().unwrap();
        assert_eq!(cold.jobs, model, "cold reader, round {round}");
    }
    assert_eq!(model.len(), 6 * 15);
    assert!(leader.freed > 20, "only {} slots freed", leader.freed);
    let cold = leader.stream.cold_reader().unwrap();
    assert_eq!(cold.pages.last_change, leader.pages.last_change);
    // The standby's pages are the leader's, and so are its records since
    // the last snapshot, which it would pack if it took over.
    assert_eq!(leader.standby.pages.copy.all(), leader.pages.copy.all());
    assert_eq!(leader.standby.pages.log.sizes(), leader.pages.log.sizes());
    assert_eq!(leader.standby.pages.pending, leader.pages.pending);
    // The stream keeps the live pages and the changes since the purge.
    let (stored, _) = leader.pages.log.sizes();
    let kept: usize = leader.stream.read().iter().map(|m| m.2.len()).sum();
    assert!(kept < stored as usize + 120 * 21_000, "{kept} bytes kept");
}

#[test]
fn a_snapshot_cut_short_agrees_with_the_changes_before_it() {
    for cut in [1, 2, 5] {
        let mut leader = Leader::new();
        let mut batches = workload(0).into_iter();
        for records in batches.by_ref().take(70) {
            leader.batch(records);
        }
        leader.snapshot(None);
        for records in batches {
            leader.batch(records);
        }
        leader.snapshot(Some(cut));
        let cold = leader.stream.cold_reader().unwrap();
        assert_eq!(cold.jobs, leader.standby.jobs, "cut after {cut}");
        assert_eq!(cold.jobs.len(), 15);
        // A new leader packs what the cut snapshot did not cover, and once
        // its snapshot is in, the changes before go.
        let want = cold.jobs;
        let standby = std::mem::take(&mut leader.standby);
        let mut taken = Leader {
            pages: standby.pages,
            standby: leader.stream.cold_reader().unwrap(),
            ..leader
        };
        taken.pages.log.reslot();
        taken.snapshot(None);
        let below = taken.stream.last_seq;
        taken.stream.purge_changes_below(below);
        assert_eq!(taken.standby.jobs, want, "cut {cut}");
        let cold = taken.stream.cold_reader().unwrap();
        assert_eq!(
            cold.jobs, want,
            "after the new leader's snapshot, cut {cut}"
        );
    }
}

#[test]
fn a_reader_that_missed_purged_changes_stops() {
    let mut leader = Leader::new();
    let mut batches = workload(0).into_iter();
    for records in batches.by_ref().take(10) {
        leader.batch(records);
    }
    // A standby that read up to here, then fell behind.
    let behind = leader.stream.cold_reader().unwrap();
    for records in batches.by_ref().take(10) {
        leader.batch(records);
    }
    let from = leader.snapshot(None);
    leader.stream.purge_changes_below(from);
    let missed: Vec<_> = leader
        .stream
        .read()
        .into_iter()
        .filter(|m| m.0 > behind.pages.last_seq)
        .collect();
    let mut reader = behind;
    let stopped = missed
        .into_iter()
        .try_for_each(|(seq, subject, payload)| reader.apply(seq, subject, payload));
    assert!(
        matches!(stopped, Err(PageError::Behind { .. })),
        "{stopped:?}"
    );
    // The same after the next change instead of the snapshot's meta.
    let mut reader = Reader::default();
    reader
        .apply(
            1,
            Subject::Change(1),
            changes::encode(&[], 1, 0, 100).remove(0).1,
        )
        .unwrap();
    let next = changes::encode(&[], 3, 0, 100).remove(0).1;
    assert!(matches!(
        reader.apply(2, Subject::Change(3), next),
        Err(PageError::Behind { .. })
    ));
}

#[test]
fn a_carried_reservation_lasts_at_most_a_ttr_from_its_arrival() {
    const S: Time = 1_000_000;
    let mut image = test_image(1, 0);
    image.ttr = 5;
    for (until, now, held) in [
        // Clocks agree: the leader's deadline.
        (105 * S, 101 * S, 105 * S),
        // This clock behind by 1000 s: a TTR from now, not 1005 s.
        (1105 * S, 101 * S, 106 * S),
        // Ahead: the leader's deadline, already passed here.
        (105 * S, 200 * S, 105 * S),
        // Written before deadlines were recorded: a TTR from now.
        (0, 101 * S, 106 * S),
    ] {
        image.state = Stored::Reserved(until);
        carry(&mut image, now);
        assert_eq!(image.state, Stored::Reserved(held));
    }
    image.state = Stored::Delayed(7);
    carry(&mut image, 0);
    assert_eq!(image.state, Stored::Delayed(7));
}

#[test]
fn meta_and_junk() {
    let mut standby = Pages::default();
    let meta = Meta {
        epoch: 3,
        ids_below: 201,
        node: "n".into(),
        addr: "a:1".into(),
        snap: 0,
    };
    let mut changes = Vec::new();
    standby
        .apply(1, Subject::Meta, meta.encode().into(), &mut changes)
        .unwrap();
    assert_eq!((standby.meta.clone(), changes.len()), (meta, 0));
    let junk = Bytes::from_static(b"\x09not a page");
    assert!(standby
        .apply(2, Subject::Page(0), junk.clone(), &mut changes)
        .is_err());
    assert!(standby
        .apply(3, Subject::Change(1), junk, &mut changes)
        .is_err());
    // A change message's ceiling raises the meta's.
    let change = changes::encode(&[], 1, 500, 100).remove(0).1;
    standby
        .apply(4, Subject::Change(1), change, &mut changes)
        .unwrap();
    assert_eq!(standby.meta.ids_below, 500);
    // A page numbered far past the others is damage, not a reason to
    // stretch the page table by the gap.
    let page = |seq: u64| {
        let mut value = vec![1];
        value.extend_from_slice(&seq.to_le_bytes());
        Bytes::from(value)
    };
    standby
        .apply(5, Subject::Page(0), page(7), &mut changes)
        .unwrap();
    let stray = standby.apply(6, Subject::Page(1), page(1 << 40), &mut changes);
    let why = stray.expect_err("a stray page refused").to_string();
    assert!(why.contains("far outside"), "{why}");
}

/// The held jobs whose body the store does not give back as the model
/// has it, and the bytes its cache keeps pinned.
fn bodies_read_back(pages: &Pages, jobs: &Jobs) -> (Vec<JobId>, u64) {
    let bodies = pages.bodies.as_ref().expect("pages on disk");
    let wrong = jobs
        .iter()
        .filter(|(&id, job)| bodies.body(id).as_ref() != Ok(&job.body))
        .map(|(&id, _)| id)
        .collect();
    (wrong, bodies.cache.sizes().1)
}

#[test]
fn with_pages_on_disk_every_body_reads_back_and_none_stays_pinned() {
    let dir = std::env::temp_dir().join(format!("sprout-follow-{}", std::process::id()));
    let mut leader = Leader {
        pages: Reader::on_disk(&dir.join("leader")).pages,
        standby: Reader::on_disk(&dir.join("standby")),
        ..Leader::new()
    };
    let mut model = Jobs::new();
    // Bodies of their own per job, so a body read for the wrong job shows.
    let own = |mut image: JobImage| {
        let len = image.body.len() + image.id as usize % 100;
        image.body = (0..len).map(|i| (i as u64 * 7 + image.id) as u8).collect();
        image
    };
    for round in 0..3 {
        for (i, records) in workload(round).into_iter().enumerate() {
            let records: Vec<Record> = records
                .into_iter()
                .map(|r| match r {
                    Record::Put(image) => Record::Put(own(image)),
                    r => r,
                })
                .collect();
            let mut changes: Vec<Change> = records
                .iter()
                .map(|record| match record {
                    Record::Put(image) => Change::Job(image.clone()),
                    Record::Update(image) => Change::Update(image.clone()),
                    Record::Delete(id) => Change::Deleted(*id),
                })
                .collect();
            replay(&mut changes, &mut model);
            leader.batch(records);
            if i % 25 == 24 {
                leader.snapshot(None);
            }
        }
    }
    leader.snapshot(None);
    assert_eq!(model.len(), 3 * 15);
    // Pages the standby applied and pages the leader packed, both read
    // back through a cache far smaller than the bodies (64 KiB, 45 jobs
    // of 20 KB), with nothing left pinned once the snapshot is in.
    assert_eq!(leader.standby.jobs, model);
    assert_eq!(bodies_read_back(&leader.standby.pages, &model), (vec![], 0));
    assert_eq!(bodies_read_back(&leader.pages, &model), (vec![], 0));
    assert_eq!(leader.standby.pages.copy.all(), leader.pages.copy.all());
    drop(leader);
    std::fs::remove_dir_all(&dir).unwrap();
}
