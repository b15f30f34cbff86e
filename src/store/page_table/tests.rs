use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn page(slot: Slot, bytes: u64) -> Page {
    Page { slot, bytes }
}

#[test]
fn a_run_of_pages_added_at_the_end_and_removed_oldest_first() {
    let mut table = PageTable::default();
    assert_eq!(table.first(), None);
    for seq in 10..14 {
        assert_eq!(table.insert(seq, page(seq as Slot - 10, 100)), None);
    }
    assert_eq!(table.get(12), Some(page(2, 100)));
    assert_eq!(table.get(9), None);
    assert_eq!(table.get(14), None);
    assert_eq!(table.pop_first(), Some((10, page(0, 100))));
    assert_eq!(table.first(), Some((11, page(1, 100))));
    assert_eq!(table.slots().collect::<Vec<_>>(), [1, 2, 3]);
}

#[test]
fn holes_inside_are_skipped_and_trimmed_at_the_ends() {
    let mut table = PageTable::default();
    table.insert(5, page(1, 10));
    table.insert(8, page(2, 20));
    assert_eq!(table.get(6), None);
    assert_eq!(table.slots().collect::<Vec<_>>(), [1, 2]);
    // A page before the first, then the first removed: the hole after it
    // goes too.
    table.insert(3, page(4, 30));
    assert_eq!(table.remove(3), Some(page(4, 30)));
    assert_eq!(table.first(), Some((5, page(1, 10))));
    assert_eq!(table.remove(5), Some(page(1, 10)));
    assert_eq!(table.first(), Some((8, page(2, 20))));
    assert_eq!(table.remove(8), Some(page(2, 20)));
    assert_eq!(table.first(), None);
    // Empty again: the next page starts a new run anywhere.
    table.insert(1 << 40, page(0, 1));
    assert_eq!(table.first(), Some((1 << 40, page(0, 1))));
}

#[test]
fn an_insert_over_a_page_returns_it() {
    let mut table = PageTable::default();
    table.insert(7, page(1, 10));
    assert_eq!(table.insert(7, page(2, 11)), Some(page(1, 10)));
    assert_eq!(table.get(7), Some(page(2, 11)));
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u64, Slot, u64),
    Remove(u64),
    PopFirst,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..40u64, 0..1000 as Slot, 0..(1u64 << 31)).prop_map(|(s, l, b)| Op::Insert(s, l, b)),
        (0..40u64).prop_map(Op::Remove),
        Just(Op::PopFirst),
    ]
}

proptest! {
    /// The table answers as a `BTreeMap` of the same pages would.
    #[test]
    fn it_answers_as_a_map_would(ops in proptest::collection::vec(op(), 0..200)) {
        let mut table = PageTable::default();
        let mut model = BTreeMap::new();
        for op in ops {
            match op {
                Op::Insert(seq, slot, bytes) => {
                    let p = page(slot, bytes);
                    prop_assert_eq!(table.insert(seq, p), model.insert(seq, p));
                }
                Op::Remove(seq) => prop_assert_eq!(table.remove(seq), model.remove(&seq)),
                Op::PopFirst => prop_assert_eq!(table.pop_first(), model.pop_first()),
            }
            prop_assert_eq!(table.first(), model.first_key_value().map(|(&s, &p)| (s, p)));
            for seq in 0..41 {
                prop_assert_eq!(table.get(seq), model.get(&seq).copied());
            }
            let slots: Vec<Slot> = model.values().map(|p| p.slot).collect();
            prop_assert_eq!(table.slots().collect::<Vec<_>>(), slots);
        }
    }
}

#[test]
fn a_burst_leaving_oldest_first_gives_its_room_back() {
    let mut table = PageTable::default();
    for seq in 0..100_000 {
        table.insert(seq, page(seq as Slot, 4096));
    }
    assert!(table.room() >= 100_000);
    for seq in 0..99_990 {
        assert_eq!(table.pop_first(), Some((seq, page(seq as Slot, 4096))));
    }
    assert!(table.room() <= KEEP_ENTRIES, "{}", table.room());
    assert_eq!(table.first(), Some((99_990, page(99_990, 4096))));
    assert_eq!(table.get(99_999), Some(page(99_999, 4096)));
    assert_eq!(table.insert(100_000, page(1, 10)), None);
    assert_eq!(table.slots().count(), 11);
}
