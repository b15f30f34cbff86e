//! Bodies left to the store (`-b`, `EngineConfig::bodies_in_store`): the
//! engine keeps a length, replies carry an empty body the connection fills
//! (`Engine::stored_len`), and the put's record carries the put's bytes.

use super::*;

fn engine_storing() -> Engine {
    let mut e = engine_with(true);
    e.config.bodies_in_store = true;
    e.jobs = JobTable::new();
    e.jobs.leave_bodies_to_store(crate::engine::INLINE_BODY);
    e
}

fn put_body(e: &mut Engine, c: ConnId, body: &[u8]) -> JobId {
    let cmd = C::Put {
        pri: 0,
        delay: Duration::ZERO,
        ttr: secs(60),
        body: Bytes::copy_from_slice(body),
        tags: None,
    };
    match reply(e, c, cmd, 0) {
        R::Inserted(id) => id,
        r => panic!("expected INSERTED, got {r:?}"),
    }
}

#[test]
fn a_long_body_is_the_stores_and_a_short_one_the_engines() {
    let mut e = engine_storing();
    let c = e.connect();
    // (length, kept by the engine)
    let cases = [
        (1, true),
        (32, true),
        (33, false),
        (1000, false),
        (70_000, false),
    ];
    for (len, held) in cases {
        let body = vec![b'x'; len];
        let id = put_body(&mut e, c, &body);
        let put = e.take_journal();
        assert!(
            matches!(&put[..], [Record::Put(image)] if image.body == body),
            "{len}: the put's record carries its body: {put:?}"
        );
        assert_eq!(e.stored_len(id), (!held).then_some(len), "{len}");
        let expected = if held {
            Bytes::from(body)
        } else {
            Bytes::new()
        };
        assert_eq!(
            reply(&mut e, c, C::Peek(id), 0),
            R::Found {
                id,
                body: expected.clone()
            },
            "{len}"
        );
        assert_eq!(
            reply(&mut e, c, C::Reserve, 0),
            R::Reserved { id, body: expected }
        );
        assert_eq!(reply(&mut e, c, C::Delete(id), 0), R::Deleted);
        assert_eq!(e.stored_len(id), None, "{len}: gone");
        assert_eq!(e.take_journal(), [Record::Delete(id)]);
    }
}

#[test]
fn a_stored_body_counts_against_max_jobs_size_and_restores_without_bytes() {
    let mut e = engine_storing();
    e.config.jobs_budget = Some(150);
    let c = e.connect();
    put_body(&mut e, c, &[b'a'; 100]);
    let cmd = C::Put {
        pri: 0,
        delay: Duration::ZERO,
        ttr: secs(60),
        body: Bytes::from_static(&[b'b'; 51]),
        tags: None,
    };
    assert_eq!(reply(&mut e, c, cmd, 0), R::OutOfMemory);
    let image = match &e.take_journal()[..] {
        [Record::Put(image)] => image.clone(),
        other => panic!("{other:?}"),
    };
    let mut restored = engine_storing();
    restored.restore(&image);
    assert_eq!(restored.stored_len(image.id), Some(100));
}
