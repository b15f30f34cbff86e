//! How a job and the store's counters are encoded.
//!
//! In sled, a job's image is stored whole, its id and body included, and
//! rewritten on every change (in a new page: see `page.rs`): sled 0.34's cost
//! is per key, so one self-contained value per change beats a layout that
//! splits out the body. The journal (`frame.rs`) writes a job's body only
//! with its put; a later change writes its *state*: the same fields without
//! the body, which recovery lays over the job's latest image. The store's
//! other sled keys are two counters:
//! - `n`: the id ceiling: no id at or above it was ever handed out, so ids
//!   stay above every id ever issued even when the newest jobs were deleted
//!   before a restart (see `ids.rs`);
//! - `c`: the number of the last journal frame taken into sled.
//!
//! An image starts with a format version, a state with its own tag; anything
//! that does not decode exactly is reported as corrupt, never guessed at.

use bytes::Bytes;
use rustc_hash::FxHashMap;
use sprout_protocol::{JobId, TubeName};

use super::corrupt::Corrupt;
use super::extras;
use super::reader::Reader;
use crate::engine::{Counts, JobImage, Stored};

pub const NEXT_ID_KEY: &[u8] = b"n";
pub const COMMIT_KEY: &[u8] = b"c";

const VERSION: u8 = 1;
/// First byte of a job's state (an image without its body).
pub const STATE_TAG: u8 = 0xD1;
/// Version, id, state tag, state value, pri, ttr, delay, created, five
/// counters, tube name length; then the name.
const FIXED_LEN: usize = 1 + 8 + 1 + 8 + 4 + 4 + 4 + 8 + 5 * 4 + 1;

/// The length of [`encode_job`]'s output.
pub fn encoded_len(image: &JobImage) -> usize {
    state_len(image) + image.body.len()
}

/// The length of [`encode_state`]'s output.
pub fn state_len(image: &JobImage) -> usize {
    FIXED_LEN + image.tube.as_bytes().len() + image.ext.as_ref().map_or(0, |x| x.max_len())
}

/// Appends the stored form of a job to `out`: its fixed fields, its tube
/// name, then its body.
pub fn encode_job(image: &JobImage, out: &mut Vec<u8>) {
    encode_fields(VERSION, image, out);
    out.extend_from_slice(&image.body);
}

/// Appends a job's state to `out`: [`encode_job`] without the body.
pub fn encode_state(image: &JobImage, out: &mut Vec<u8>) {
    encode_fields(STATE_TAG, image, out);
}

fn encode_fields(tag: u8, image: &JobImage, out: &mut Vec<u8>) {
    let name = image.tube.as_bytes();
    let (state_tag, value) = match image.state {
        Stored::Ready => (0u8, 0),
        Stored::Reserved(until) => (1, until),
        Stored::Delayed(at) => (2, at),
        Stored::Buried(seq) => (3, seq),
    };
    out.push(tag);
    out.extend_from_slice(&image.id.to_le_bytes());
    // tuber's tags, if any, follow the tube name (`extras.rs`).
    let tagged = image.ext.as_ref().map_or(0, |_| extras::TAGGED);
    out.push(state_tag | tagged);
    out.extend_from_slice(&value.to_le_bytes());
    for n in [image.pri, image.ttr, image.delay] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out.extend_from_slice(&image.created.to_le_bytes());
    let c = &image.counts;
    for n in [c.reserves, c.timeouts, c.releases, c.buries, c.kicks] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    // Tube names are at most 200 bytes.
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    if let Some(ext) = &image.ext {
        extras::encode(ext, out);
    }
}

/// Reads back what [`encode_job`] wrote.
pub fn decode_job(value: &[u8]) -> Result<JobImage, Corrupt> {
    decode_fields(VERSION, value, tube_name, |body| {
        Ok(Bytes::copy_from_slice(body))
    })
}

/// Reads back what [`encode_state`] wrote: the image, with an empty body.
pub fn decode_state(value: &[u8]) -> Result<JobImage, Corrupt> {
    decode_fields(STATE_TAG, value, tube_name, |rest| match rest.is_empty() {
        true => Ok(Bytes::new()),
        false => Err(Corrupt("trailing bytes after a job's state")),
    })
}

fn tube_name(name: &[u8]) -> Result<TubeName, Corrupt> {
    TubeName::new(name).ok_or(Corrupt("an invalid tube name"))
}

/// Decodes many jobs at once (recovery), sharing what they share: one
/// name per tube, and bodies that point into the pages they were read
/// from instead of a copy each (two allocations fewer per job: at 1M jobs,
/// 2M small allocations).
#[derive(Default)]
pub struct Decoder {
    tubes: FxHashMap<Box<[u8]>, TubeName>,
}

impl Decoder {
    /// What [`decode_job`] reads from `value`, which lies within `within`.
    pub fn job(&mut self, within: &Bytes, value: &[u8]) -> Result<JobImage, Corrupt> {
        let tubes = &mut self.tubes;
        let tube = |name: &[u8]| match tubes.get(name) {
            Some(tube) => Ok(tube.clone()),
            None => {
                let tube = tube_name(name)?;
                tubes.insert(name.into(), tube.clone());
                Ok(tube)
            }
        };
        decode_fields(VERSION, value, tube, |body| Ok(within.slice_ref(body)))
    }
}

/// The fields every image and state has; `tube` makes the tube's name,
/// `rest` whatever follows (the body).
fn decode_fields(
    tag: u8,
    value: &[u8],
    tube: impl FnOnce(&[u8]) -> Result<TubeName, Corrupt>,
    rest: impl FnOnce(&[u8]) -> Result<Bytes, Corrupt>,
) -> Result<JobImage, Corrupt> {
    let mut r = Reader::new(value, "a truncated job record");
    if r.u8()? != tag {
        return Err(Corrupt("an unknown record version"));
    }
    let id: JobId = r.u64()?;
    let tag = r.u8()?;
    let tagged = tag & extras::TAGGED != 0;
    let value = r.u64()?;
    let state = match tag & !extras::TAGGED {
        0 => Stored::Ready,
        1 => Stored::Reserved(value),
        2 => Stored::Delayed(value),
        3 => Stored::Buried(value),
        _ => return Err(Corrupt("an unknown job state")),
    };
    let (pri, ttr, delay) = (r.u32()?, r.u32()?, r.u32()?);
    let created = r.u64()?;
    let counts = Counts {
        reserves: r.u32()?,
        timeouts: r.u32()?,
        releases: r.u32()?,
        buries: r.u32()?,
        kicks: r.u32()?,
    };
    let len = usize::from(r.u8()?);
    let tube = tube(r.take(len)?)?;
    // tuber's tags, if any, before the body (`extras.rs`).
    let ext = match tagged {
        false => None,
        true => {
            let (ext, rest) = extras::decode(r.rest)?;
            r.rest = rest;
            Some(Box::new(ext))
        }
    };
    let body = rest(r.rest)?;
    Ok(JobImage {
        id,
        tube,
        pri,
        ttr,
        delay,
        state,
        created,
        counts,
        body,
        ext,
    })
}

/// Reads the `n` or `c` value.
pub fn decode_u64(value: &[u8]) -> Result<u64, Corrupt> {
    let mut r = Reader::new(value, "a truncated job record");
    let n = r.u64()?;
    if !r.rest.is_empty() {
        return Err(Corrupt("trailing bytes after a counter"));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(state: Stored) -> JobImage {
        JobImage {
            id: 42,
            tube: TubeName::new(b"emails").unwrap(),
            pri: 7,
            ttr: 60,
            delay: 3,
            state,
            created: 1_700_000_000_000_000,
            counts: Counts {
                reserves: 1,
                timeouts: 2,
                releases: 3,
                buries: 4,
                kicks: 5,
            },
            body: Bytes::from_static(b"hello"),
            ext: None,
        }
    }

    /// The stored bytes, field by field: the five counters in their
    /// order (reserves, timeouts, releases, buries, kicks), whatever
    /// struct carries them in memory.
    #[test]
    fn the_stored_bytes_do_not_move() {
        let mut want = vec![VERSION];
        want.extend_from_slice(&42u64.to_le_bytes());
        want.push(2); // delayed, no tags
        want.extend_from_slice(&77u64.to_le_bytes());
        for n in [7u32, 60, 3] {
            want.extend_from_slice(&n.to_le_bytes());
        }
        want.extend_from_slice(&1_700_000_000_000_000u64.to_le_bytes());
        for n in 1u32..=5 {
            want.extend_from_slice(&n.to_le_bytes());
        }
        want.push(6);
        want.extend_from_slice(b"emailshello");
        let mut value = Vec::new();
        encode_job(&image(Stored::Delayed(77)), &mut value);
        assert_eq!(value, want);
    }

    #[test]
    fn every_state_round_trips() {
        for state in [
            Stored::Ready,
            Stored::Reserved(654_321),
            Stored::Delayed(123_456),
            Stored::Buried(9),
        ] {
            let original = image(state);
            let mut value = Vec::new();
            encode_job(&original, &mut value);
            assert_eq!(value.len(), encoded_len(&original));
            let back = decode_job(&value).unwrap();
            assert_eq!(back, original);
        }
    }

    #[test]
    fn a_decoder_shares_tubes_and_points_into_its_page() {
        // Two jobs back to back in one page, as recovery reads them.
        let (first, second) = (image(Stored::Ready), image(Stored::Buried(3)));
        let mut page = Vec::new();
        encode_job(&first, &mut page);
        let split = page.len();
        encode_job(&second, &mut page);
        let page = Bytes::from(page);
        let mut decoder = Decoder::default();
        let a = decoder.job(&page, &page[..split]).unwrap();
        let b = decoder.job(&page, &page[split..]).unwrap();
        assert_eq!((&a, &b), (&first, &second));
        assert!(
            std::ptr::eq(a.tube.as_str(), b.tube.as_str()),
            "one name per tube"
        );
        let within = page.as_ptr_range();
        assert!(within.contains(&b.body.as_ptr()), "the body is not a copy");
        let mut bad = page[..split].to_vec();
        bad[1 + 8] = 9;
        assert_eq!(
            decoder.job(&page, &bad),
            Err(Corrupt("an unknown job state"))
        );
    }

    #[test]
    fn a_state_is_an_image_without_its_body() {
        let original = image(Stored::Delayed(77));
        let mut value = Vec::new();
        encode_state(&original, &mut value);
        assert_eq!(value.len(), state_len(&original));
        let back = decode_state(&value).unwrap();
        assert_eq!(back.body.len(), 0);
        assert_eq!(
            back,
            JobImage {
                body: Bytes::new(),
                ..original.clone()
            }
        );
        // Neither decoder takes the other's bytes.
        assert!(decode_job(&value).is_err());
        let mut job = Vec::new();
        encode_job(&original, &mut job);
        assert!(decode_state(&job).is_err());
        value.push(0);
        assert!(decode_state(&value).is_err());
    }

    #[test]
    fn damaged_records_are_corrupt_not_guessed() {
        let mut value = Vec::new();
        encode_job(&image(Stored::Ready), &mut value);
        let fixed = value.len() - b"hello".len();
        for cut in 0..fixed {
            assert!(decode_job(&value[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad_state = value.clone();
        bad_state[9] = 9;
        assert_eq!(decode_job(&bad_state), Err(Corrupt("an unknown job state")));
        let mut bad_version = value.clone();
        bad_version[0] = 0;
        assert!(decode_job(&bad_version).is_err());
        let mut bad_name = value;
        bad_name[fixed - 6] = b' ';
        assert_eq!(decode_job(&bad_name), Err(Corrupt("an invalid tube name")));
    }
}
