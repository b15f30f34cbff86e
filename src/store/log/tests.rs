use super::*;

/// An empty page numbered `seq`, as `page.rs` lays one out.
fn empty_page(seq: u64) -> Vec<u8> {
    let mut value = vec![1];
    value.extend_from_slice(&seq.to_le_bytes());
    value
}

fn replay(seqs: &[u64], salvage: bool) -> Result<(Log, usize), Corrupt> {
    let mut replay = Replay::new(salvage);
    for (slot, &seq) in seqs.iter().enumerate() {
        replay.page(slot as Slot, &empty_page(seq)).unwrap();
    }
    replay.finish()
}

#[test]
fn a_page_numbered_far_outside_the_run_is_damage() {
    let run = [7, 5, 6, 8];
    let (log, skipped) = replay(&run, false).unwrap();
    assert_eq!((log.next_seq(), skipped), (9, 0));
    // A gap a salvaged page may leave is no stray.
    let (log, _) = replay(&[5, 6, 9, 10], false).unwrap();
    assert_eq!(log.next_seq(), 11);

    let stray = [5, 6, 1 << 40, 7, 8];
    assert!(replay(&stray, false).is_err());
    let (log, skipped) = replay(&stray, true).unwrap();
    assert_eq!((log.next_seq(), skipped), (9, 1));
    let (stored, _) = log.sizes();
    assert_eq!(stored, 4 * 9, "the four pages of the run, 9 bytes each");
}

#[test]
fn a_followed_page_is_stray_far_from_the_run() {
    let s = STRAY_SLACK;
    // (page, run of stored pages first..next, stray)
    for (seq, run, is) in [
        (1 << 40, None, false),
        (10, Some((5, 10)), false),
        (10 + 5 + s, Some((5, 10)), false),
        (10 + 5 + s + 1, Some((5, 10)), true),
        (u64::MAX, Some((5, 10)), true),
        (0, Some((5, 10)), false),
        (2000, Some((5000, 5010)), true),
        (5000 - 10 - s, Some((5000, 5010)), false),
    ] {
        assert_eq!(stray(seq, run), is, "{seq} {run:?}");
    }
    let (mut log, _) = replay(&[5, 6, 7], false).unwrap();
    assert!(!log.is_stray(8) && log.is_stray(1 << 40));
    log.follow_page(8, 9, 9);
    assert!(!log.is_stray(9));
}
