//! Job ids are never handed out twice, even after a power loss.
//!
//! Every journal frame carries an id ceiling: no id at or above it had been
//! handed out when the frame was written. The ceiling runs ahead of the
//! ids in use by up to [`BLOCK`], raised (and synced at once, under every
//! policy) once the highest id handed out comes within half a block of it;
//! and no reply may name an id at or above the ceiling the disk holds (the
//! connection waits for the sync, which in practice happened long before).
//! So whatever a crash keeps of the journal, its last frame's ceiling is
//! above every id any client saw, and a restart hands out ids from there:
//! after a crash, ids jump by less than a block. A clean stop writes the
//! exact next id as its last ceiling, so ids simply continue.

use sprout_protocol::JobId;

/// How far the ceiling runs ahead of the ids in use.
pub const BLOCK: JobId = 100_000;

/// The new ceiling for frames once `highest` has been handed out under
/// `ceiling`, if it must move.
pub fn raise(ceiling: JobId, highest: JobId) -> Option<JobId> {
    (highest.saturating_add(BLOCK / 2) >= ceiling).then(|| highest.saturating_add(1 + BLOCK))
}

/// The ceiling a clean stop leaves: the next id exactly.
pub fn exact(start: JobId, highest: Option<JobId>) -> JobId {
    highest.map_or(start, |h| start.max(h + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_stays_ahead() {
        // (ceiling, highest id handed out, new ceiling)
        let table = [
            (1, 0, Some(1 + BLOCK)),
            (1 + BLOCK, 1, None),
            (1 + BLOCK, BLOCK / 2, None),
            (1 + BLOCK, BLOCK / 2 + 1, Some(BLOCK / 2 + 2 + BLOCK)),
            (500, 700, Some(701 + BLOCK)),
            (JobId::MAX, JobId::MAX - 1, Some(JobId::MAX)),
        ];
        for (ceiling, highest, new) in table {
            assert_eq!(raise(ceiling, highest), new, "{ceiling} {highest}");
            if let Some(new) = new {
                assert!(new > highest);
            }
        }
        assert_eq!(exact(10, None), 10);
        assert_eq!(exact(10, Some(3)), 10);
        assert_eq!(exact(10, Some(30)), 31);
    }
}
