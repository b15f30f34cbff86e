//! Change messages: each group commit's records on the stream, framed as
//! the local journal frames them (`store/frame.rs`: the records, the id
//! ceiling, a CRC), on a subject of their own (`sprout.NAME.c.N`).
//!
//! Why: when every group commit rewrote pages, a reserve or a delete wrote
//! its job's whole image (body included) and the batch's open page again,
//! about 6 KB a job in pingpong. A change message is the records alone. The
//! pages stay, as snapshots (`writer.rs`): the records since the last
//! snapshot packed at once, so a job put and deleted in between never
//! reaches a page; once a snapshot is acknowledged, the change messages it
//! covers are purged, and a standby or a cold start reads the pages plus at
//! most one snapshot's worth of changes.
//!
//! Applying the stream in order is right at every message. Every image in a
//! snapshot's pages is its job's state as of the change just before them:
//! one pack of every record since the last snapshot keeps each job's last
//! word, and the images cleaning moves are of jobs untouched since. So a
//! replica that applied the changes finds the pages saying the same, one
//! that starts cold gets each job as of the latest page holding it and then
//! the changes after, and a snapshot cut short by a crash leaves only pages
//! that agree with the changes before them.

use bytes::Bytes;
use sprout_protocol::JobId;

use crate::engine::Record;
use crate::store::{
    frame_of, frame_pushed_len, frame_records, read_frame, Corrupt, FRAME_HEADER_LEN,
};

/// A change message read back.
#[derive(Debug, PartialEq, Eq)]
pub struct ChangeMessage {
    /// Its number (`N` in its subject).
    pub number: u64,
    /// No job id at or above this had been handed out.
    pub ids_below: JobId,
    pub records: Vec<Record>,
}

/// `records` as change messages numbered from `first` on, each under
/// `limit` bytes unless one record alone is longer (the caller keeps a job
/// under the server's largest message); at least one message, which may
/// hold no record.
pub fn encode<'a>(
    records: impl IntoIterator<Item = &'a Record>,
    first: u64,
    ids_below: JobId,
    limit: usize,
) -> Vec<(u64, Bytes)> {
    let mut messages = Vec::new();
    let mut part: Vec<&Record> = Vec::new();
    let mut bytes = FRAME_HEADER_LEN;
    let mut seal = |part: &mut Vec<&Record>| {
        let number = first + messages.len() as u64;
        let frame = frame_of(number, ids_below, part.drain(..));
        messages.push((number, Bytes::from(frame)));
    };
    for record in records {
        let len = frame_pushed_len(record);
        if !part.is_empty() && bytes + len > limit {
            seal(&mut part);
            bytes = FRAME_HEADER_LEN;
        }
        part.push(record);
        bytes += len;
    }
    seal(&mut part);
    messages
}

/// Reads a change message back; anything but one whole frame is corrupt.
pub fn decode(payload: &[u8]) -> Result<ChangeMessage, Corrupt> {
    let frame = read_frame(payload).ok_or(Corrupt("a damaged change message"))?;
    if frame.len != payload.len() {
        return Err(Corrupt("bytes after a change message's frame"));
    }
    Ok(ChangeMessage {
        number: frame.commit,
        ids_below: frame.ids_below,
        records: frame_records(&frame)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_image;

    #[test]
    fn records_split_into_messages_under_the_limit_and_read_back() {
        let records: Vec<Record> = (1..=10)
            .map(|id| Record::Put(test_image(id, 1000)))
            .chain([Record::Delete(3)])
            .collect();
        for (limit, want) in [(1 << 20, 1), (3_000, 5), (10, 11)] {
            let messages = encode(&records, 7, 99, limit);
            assert_eq!(messages.len(), want, "limit {limit}");
            let mut back = Vec::new();
            for (i, (number, payload)) in messages.iter().enumerate() {
                assert!(payload.len() <= limit || decode(payload).unwrap().records.len() == 1);
                let change = decode(payload).unwrap();
                assert_eq!((change.number, change.ids_below), (*number, 99));
                assert_eq!(*number, 7 + i as u64);
                back.extend(change.records);
            }
            assert_eq!(back, records);
        }
        let empty = encode([], 4, 5, 100);
        assert_eq!(empty.len(), 1);
        assert_eq!(decode(&empty[0].1).unwrap().records, []);
    }

    #[test]
    fn a_damaged_or_padded_change_message_is_refused() {
        let (_, payload) = encode(&[Record::Delete(1)], 1, 2, 1 << 20).remove(0);
        let mut padded = payload.to_vec();
        padded.push(0);
        assert!(decode(&padded).is_err());
        let mut flipped = payload.to_vec();
        flipped[30] ^= 1;
        assert!(decode(&flipped).is_err());
        assert!(decode(b"").is_err());
    }
}
