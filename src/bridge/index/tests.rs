//! The index against its promises: per-key entries, reopening, torn and
//! corrupt tails, compaction, old sled state dirs, delivered marks, selecting
//! a node's entries.

use std::path::{Path, PathBuf};

use super::index_writer::needs_compaction;
use super::key_record::{set_len, HEADER, MAGIC, PAYLOAD_MIN};
use super::*;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sprout-index-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn entry(expire_at_ms: i64, timer: u64) -> KeyEntry {
    KeyEntry {
        expire_at_ms,
        timer,
    }
}

fn log_len(dir: &Path) -> u64 {
    std::fs::metadata(dir.join(LOG)).unwrap().len()
}

#[test]
fn entries_are_per_node_and_key() {
    let dir = temp_dir("basic");
    let index = Index::open(&dir).unwrap();
    let a = entry(5, 1);
    index.set(0, b"k", a);
    assert_eq!(index.get(0, b"k"), Some(a));
    assert_eq!(index.get(1, b"k"), None);
    assert_eq!(index.len(), 1);
    index.remove(0, b"k");
    assert_eq!(index.len(), 0);
    drop(index);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn select_copies_out_one_nodes_chosen_entries() {
    let dir = temp_dir("select");
    let index = Index::open(&dir).unwrap();
    for i in 0..100u64 {
        index.set(
            (i % 2) as u16,
            format!("k{i}").as_bytes(),
            entry(i as i64, i + 1),
        );
    }
    index.set(0, b"mark", KeyEntry::delivered(7, 3));
    let mut got = index.select(0, |key, e| key != b"k90" && e.expire_at_ms >= 90);
    got.sort_by_key(|(_, e)| e.expire_at_ms);
    let want: Vec<(Vec<u8>, KeyEntry)> = [92, 94, 96, 98]
        .iter()
        .map(|&i| (format!("k{i}").into_bytes(), entry(i, i as u64 + 1)))
        .collect();
    assert_eq!(got, want);
    assert_eq!(index.select(0, |_, _| true).len(), 51);
    assert_eq!(index.select(2, |_, _| true), []);
    drop(index);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_second_open_of_the_same_dir_fails() {
    let dir = temp_dir("locked");
    let index = Index::open(&dir).unwrap();
    assert!(Index::open(&dir).is_err());
    drop(index);
    Index::open(&dir).unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn reopening_after_flush_keeps_every_change() {
    let dir = temp_dir("reopen");
    let index = Index::open(&dir).unwrap();
    for i in 0..1000u64 {
        index.set(
            (i % 3) as u16,
            format!("key:{i}").as_bytes(),
            entry(i as i64, i + 1),
        );
    }
    for i in (0..1000u64).step_by(2) {
        index.remove((i % 3) as u16, format!("key:{i}").as_bytes());
    }
    index.set(1, b"key:1", entry(77, 5000));
    index.flush().unwrap();
    drop(index);
    let index = Index::open(&dir).unwrap();
    assert_eq!(index.len(), 500);
    assert_eq!(index.get(1, b"key:1"), Some(entry(77, 5000)));
    assert_eq!(index.get(0, b"key:0"), None);
    assert_eq!(index.get(0, b"key:3"), Some(entry(3, 4)));
    drop(index);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_torn_tail_is_dropped_and_earlier_records_kept() {
    let dir = temp_dir("torn");
    let index = Index::open(&dir).unwrap();
    index.set(0, b"a", entry(1, 1));
    index.set(0, b"b", entry(2, 2));
    index.flush().unwrap();
    let good = log_len(&dir);
    index.set(0, b"c", entry(3, 3));
    index.flush().unwrap();
    drop(index);
    let file = OpenOptions::new().write(true).open(dir.join(LOG)).unwrap();
    file.set_len(log_len(&dir) - 5).unwrap();
    drop(file);
    let index = Index::open(&dir).unwrap();
    assert_eq!(log_len(&dir), good);
    assert_eq!(index.len(), 2);
    assert_eq!(index.get(0, b"b"), Some(entry(2, 2)));
    assert_eq!(index.get(0, b"c"), None);
    // The log goes on after the truncated tail.
    index.set(0, b"d", entry(4, 4));
    drop(index);
    let index = Index::open(&dir).unwrap();
    assert_eq!(index.len(), 3);
    assert_eq!(index.get(0, b"d"), Some(entry(4, 4)));
    drop(index);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_corrupt_record_ends_the_log() {
    let dir = temp_dir("corrupt");
    let index = Index::open(&dir).unwrap();
    index.set(0, b"a", entry(1, 1));
    index.flush().unwrap();
    let good = log_len(&dir);
    index.set(0, b"b", entry(2, 2));
    index.set(0, b"c", entry(3, 3));
    drop(index);
    // Flip a bit of b's expiry: its length is intact, its CRC is not.
    let path = dir.join(LOG);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[good as usize + HEADER + PAYLOAD_MIN] ^= 1;
    std::fs::write(&path, bytes).unwrap();
    let index = Index::open(&dir).unwrap();
    assert_eq!(log_len(&dir), good);
    assert_eq!(index.len(), 1);
    assert_eq!(index.get(0, b"a"), Some(entry(1, 1)));
    assert_eq!(index.get(0, b"c"), None);
    drop(index);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn compaction_keeps_exactly_the_live_entries() {
    let dir = temp_dir("compact");
    let index = Index::open(&dir).unwrap();
    let key = |i: u64| format!("some:fairly:long:key:{i:08}").into_bytes();
    // Enough churn to pass the slack: ~60 bytes a record, 100k+ records.
    for round in 0..4u64 {
        for i in 0..30_000u64 {
            index.set(0, &key(i), entry((round * 100_000 + i) as i64, round + 1));
        }
    }
    for i in 0..20_000u64 {
        index.remove(0, &key(i));
    }
    index.set(2, b"other node", entry(CANCELLED, 9));
    index.flush().unwrap();
    // The log was compacted as it grew (~7 MB of records were written).
    let live = 10_000 * set_len(key(0).len()) + set_len(10) + MAGIC.len() as u64;
    assert!(!needs_compaction(log_len(&dir), live), "{}", log_len(&dir));
    // Once compacted, it holds exactly one record per entry.
    index.compact().unwrap();
    assert_eq!(log_len(&dir), live);
    assert!(!dir.join(TMP).exists());
    drop(index);
    let index = Index::open(&dir).unwrap();
    assert_eq!(index.len(), 10_001);
    assert_eq!(index.get(0, &key(0)), None);
    assert_eq!(index.get(0, &key(20_000)), Some(entry(320_000, 4)));
    assert_eq!(index.get(0, &key(29_999)), Some(entry(329_999, 4)));
    assert_eq!(index.get(2, b"other node"), Some(entry(CANCELLED, 9)));
    drop(index);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn sled_files_of_an_earlier_version_are_ignored_and_kept() {
    let dir = temp_dir("sled");
    std::fs::create_dir_all(dir.join("blobs")).unwrap();
    std::fs::write(dir.join("db"), b"sled").unwrap();
    std::fs::write(dir.join("conf"), b"sled").unwrap();
    let index = Index::open(&dir).unwrap();
    assert_eq!(index.len(), 0);
    assert!(dir.join("db").exists() && dir.join("blobs").exists());
    drop(index);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn delivered_marks_are_recognised_and_swept_when_old() {
    let dir = temp_dir("marks");
    let index = Index::open(&dir).unwrap();
    let pending = entry(1_000, 7);
    let tombstone = entry(CANCELLED, 8);
    assert!(KeyEntry::delivered(1_000, 3).is_delivered());
    assert!(!pending.is_delivered() && !tombstone.is_delivered());
    index.set(0, b"old", KeyEntry::delivered(1_000, 3));
    index.set(0, b"new", KeyEntry::delivered(5_000, 4));
    index.set(0, b"pending", pending);
    index.set(0, b"tomb", tombstone);
    assert_eq!(index.sweep_delivered(2_000), 1);
    assert_eq!(index.get(0, b"old"), None);
    assert_eq!(index.get(0, b"new"), Some(KeyEntry::delivered(5_000, 4)));
    assert_eq!(index.get(0, b"pending"), Some(pending));
    assert_eq!(index.get(0, b"tomb"), Some(tombstone));
    index.flush().unwrap();
    drop(index);
    // The sweep is in the log too.
    let index = Index::open(&dir).unwrap();
    assert_eq!(index.len(), 3);
    assert_eq!(index.get(0, b"old"), None);
    drop(index);
    let _ = std::fs::remove_dir_all(dir);
}
