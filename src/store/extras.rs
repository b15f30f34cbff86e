//! How tuber's tags are stored: after a tagged job's tube name, flagged by
//! [`TAGGED`] in its state byte (`record.rs`), so an untagged job's record
//! is byte for byte what it was before tags existed.
//!
//! A flags byte says which parts follow, in this order: the `idp:` key
//! (length byte, name) and TTL (u32 LE), the `grp:` and `aft:` names
//! (length byte, name), the `con:` key (length byte, name) and limit
//! (u32 LE), and the cooldown's end (u64 LE). Names are at most 200 bytes.
//! The length is exactly `Extras::max_len`, which the engine charges.

use sprout_protocol::{TagName, Tags, TubeName};

use super::corrupt::Corrupt;
use super::reader::Reader;
use crate::engine::Extras;

/// The state byte's flag for a record with extras.
pub const TAGGED: u8 = 0x80;

const IDP: u8 = 1;
const GRP: u8 = 2;
const AFT: u8 = 4;
const CON: u8 = 8;
const COOLING: u8 = 16;

pub fn encode(extras: &Extras, out: &mut Vec<u8>) {
    let t = &extras.tags;
    let flags = [
        (t.idp.is_some(), IDP),
        (t.grp.is_some(), GRP),
        (t.aft.is_some(), AFT),
        (t.con.is_some(), CON),
        (extras.cooling_until.is_some(), COOLING),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .fold(0, |flags, (_, bit)| flags | bit);
    out.push(flags);
    let name = |out: &mut Vec<u8>, name: &str| {
        out.push(name.len() as u8);
        out.extend_from_slice(name.as_bytes());
    };
    if let Some((key, ttl)) = &t.idp {
        name(out, key);
        out.extend_from_slice(&ttl.to_le_bytes());
    }
    if let Some(group) = &t.grp {
        name(out, group);
    }
    if let Some(group) = &t.aft {
        name(out, group);
    }
    if let Some((key, limit)) = &t.con {
        name(out, key);
        out.extend_from_slice(&limit.to_le_bytes());
    }
    if let Some(until) = extras.cooling_until {
        out.extend_from_slice(&until.to_le_bytes());
    }
}

/// Reads what [`encode`] wrote from the front of `bytes`; returns the rest.
pub fn decode(bytes: &[u8]) -> Result<(Extras, &[u8]), Corrupt> {
    let mut r = Reader::new(bytes, "truncated tags");
    let flags = r.u8()?;
    if flags & !(IDP | GRP | AFT | CON | COOLING) != 0 {
        return Err(Corrupt("unknown tags"));
    }
    let mut tags = Tags::default();
    if flags & IDP != 0 {
        tags.idp = Some((name(&mut r)?, r.u32()?));
    }
    if flags & GRP != 0 {
        tags.grp = Some(name(&mut r)?);
    }
    if flags & AFT != 0 {
        tags.aft = Some(name(&mut r)?);
    }
    if flags & CON != 0 {
        tags.con = Some((name(&mut r)?, r.u32()?));
    }
    let cooling_until = match flags & COOLING {
        0 => None,
        _ => Some(r.u64()?),
    };
    let extras = Extras {
        tags,
        cooling_until,
    };
    Ok((extras, r.rest))
}

/// A tag's name: its length, then its bytes.
fn name(r: &mut Reader) -> Result<TagName, Corrupt> {
    let len = usize::from(r.u8()?);
    let name = TubeName::new(r.take(len)?).ok_or(Corrupt("an invalid tag name"))?;
    Ok(name.as_str().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tag_round_trips_in_exactly_the_charged_length() {
        let full = Extras {
            tags: Tags {
                idp: Some(("k".repeat(200).into(), 7)),
                grp: Some("g".into()),
                aft: Some("a-b".into()),
                con: Some(("c".into(), 3)),
            },
            cooling_until: Some(1 << 50),
        };
        let idp_only = Extras {
            tags: Tags {
                idp: Some(("key".into(), 0)),
                ..Tags::default()
            },
            cooling_until: None,
        };
        for extras in [full, idp_only, Extras::default()] {
            let mut out = Vec::new();
            encode(&extras, &mut out);
            assert_eq!(out.len(), extras.max_len());
            out.extend_from_slice(b"body");
            let (back, rest) = decode(&out).unwrap();
            assert_eq!((back, rest), (extras, &b"body"[..]));
        }
    }

    #[test]
    fn damage_is_corrupt() {
        assert!(decode(&[]).is_err());
        assert!(decode(&[0x40]).is_err());
        assert!(decode(&[IDP, 3, b'a']).is_err());
        assert!(decode(&[GRP, 1, b' ']).is_err());
    }
}
