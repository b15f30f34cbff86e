//! A connection's standing, request by request.

use std::collections::HashMap;
use std::time::Duration;

use sprout_protocol::{JobId, ProtocolError, Rejected, TubeName};

use super::*;
use crate::auth::policy::Policy;
use crate::auth::token::TokenHash;
use crate::auth::verdict::JobFacts;
use crate::peer::CertIdentity;
use crate::pending::PendingLimit;

fn policy() -> Policy {
    let text = format!(
        r#"
[[principal]]
name = "producer"
tokens = ["{producer}"]
grants = [{{ tubes = ["orders.*"], actions = ["produce"] }}]

[[principal]]
name = "ops"
tokens = ["{ops}"]
certs = ["CN=ops-1"]
grants = [{{ tubes = ["*"], actions = ["inspect", "admin"] }}]

[[principal]]
name = "reader"
grants = [{{ tubes = ["orders.*"], actions = ["inspect"] }}]

[listeners]
"unix:/run/sprout.sock" = "reader"
"#,
        producer = TokenHash::of(b"producer-token"),
        ops = TokenHash::of(b"ops-token"),
    );
    Policy::parse(&text, "test.toml").unwrap()
}

fn gate() -> Arc<Gate> {
    gate_of(1024)
}

/// A gate whose connections may wait `slots` at once to authenticate.
fn gate_of(slots: usize) -> Arc<Gate> {
    let pending = PendingLimit::new(slots, Duration::from_secs(10));
    Arc::new(Gate::new(policy(), Arc::new(pending)))
}

/// Whether `s` is closed 10 s after it was opened, which was after `since`.
fn closes_ten_seconds_after(s: &Session, since: Instant) -> bool {
    let ten = Duration::from_secs(10);
    s.deadline()
        .is_some_and(|d| d >= since + ten && d <= Instant::now() + ten)
}

/// A session for a connection that took no slot in a TLS handshake.
fn open(gate: Arc<Gate>, peer: Peer) -> Session {
    Session::open(gate, peer, None).expect("a free slot")
}

fn peer(addr: &str, listener: &str) -> Peer {
    Peer {
        addr: addr.into(),
        listener: listener.into(),
        cert: None,
        vouched: None,
    }
}

fn tcp(addr: &str) -> Peer {
    peer(addr, "127.0.0.1:11300")
}

struct Known;

impl Facts for Known {
    fn used(&self) -> &str {
        "orders.eu"
    }
    fn watched(&self) -> impl Iterator<Item = &str> {
        ["default"].into_iter()
    }
    fn job(&self, id: JobId) -> Option<JobFacts<'_>> {
        let jobs = HashMap::from([(1, "orders.eu")]);
        jobs.get(&id).map(|&tube| JobFacts { tube, mine: false })
    }
}

fn auth(token: &str) -> Request {
    Ok(Command::Auth(Token::new(token.to_owned())))
}

fn tube(name: &str) -> TubeName {
    TubeName::new(name.as_bytes()).unwrap()
}

fn answer(response: Response) -> Step {
    Step::Answer(response)
}

#[test]
fn before_authenticating() {
    let gate = gate();
    let now = Instant::now();
    let mut s = open(gate.clone(), tcp("10.0.0.1:5000"));
    assert!(!s.authenticated());
    assert!(closes_ten_seconds_after(&s, now));
    let refused = Err(Rejected {
        error: ProtocolError::JobTooBig,
        counted: Some(sprout_protocol::Op::Put),
    });
    for request in [
        Ok(Command::Stats),
        Ok(Command::Use(tube("orders.eu"))),
        Ok(Command::ListTubes),
        refused,
        Err(Rejected {
            error: ProtocolError::UnknownCommand,
            counted: None,
        }),
    ] {
        let shown = format!("{request:?}");
        assert_eq!(
            s.screen(request, &Known, now),
            answer(Response::AuthRequired),
            "{shown}"
        );
    }
    assert_eq!(s.screen(Ok(Command::Quit), &Known, now), Step::Close);
}

#[test]
fn a_good_token_then_the_grants() {
    let gate = gate();
    let now = Instant::now();
    let mut s = open(gate.clone(), tcp("10.0.0.1:5000"));
    assert_eq!(
        s.screen(auth("producer-token"), &Known, now),
        answer(Response::Authenticated)
    );
    assert!(s.authenticated());
    assert_eq!(s.deadline(), None);
    let put = Command::Put {
        pri: 0,
        delay: Duration::ZERO,
        ttr: Duration::from_secs(1),
        body: bytes::Bytes::new(),
        tags: None,
    };
    assert_eq!(s.screen(Ok(put.clone()), &Known, now), Step::Run(Ok(put)));
    assert_eq!(
        s.screen(Ok(Command::Kick(1)), &Known, now),
        answer(Response::Forbidden)
    );
    assert_eq!(
        s.screen(Ok(Command::ListTubes), &Known, now),
        Step::Seeing(Command::ListTubes)
    );
    // A parse error, once someone: the engine's own answer.
    let bad = Err(Rejected {
        error: ProtocolError::BadFormat,
        counted: None,
    });
    assert_eq!(s.screen(bad.clone(), &Known, now), Step::Run(bad));
    // Switching principal.
    assert_eq!(
        s.screen(auth("ops-token"), &Known, now),
        answer(Response::Authenticated)
    );
    assert_eq!(
        s.screen(Ok(Command::Kick(1)), &Known, now),
        Step::Audited(Command::Kick(1))
    );
    assert_eq!(
        s.screen(Ok(Command::Stats), &Known, now),
        Step::Run(Ok(Command::Stats))
    );
    // A wrong token leaves it as it was.
    assert_eq!(
        s.screen(auth("nope"), &Known, now),
        answer(Response::Unauthorized)
    );
    assert_eq!(
        s.screen(Ok(Command::Kick(1)), &Known, now),
        Step::Audited(Command::Kick(1))
    );
}

#[test]
fn the_third_failure_closes() {
    let gate = gate();
    let now = Instant::now();
    let mut s = open(gate.clone(), tcp("10.0.0.1:5000"));
    assert_eq!(
        s.screen(auth("a"), &Known, now),
        answer(Response::Unauthorized)
    );
    assert_eq!(
        s.screen(auth("producer-token"), &Known, now),
        answer(Response::Authenticated)
    );
    assert_eq!(
        s.screen(auth(""), &Known, now),
        answer(Response::Unauthorized)
    );
    assert_eq!(
        s.screen(auth("c"), &Known, now),
        Step::Last(Response::Unauthorized)
    );
    assert_eq!(gate.failures_total(), 3);
}

#[test]
fn ten_failures_from_one_address_lock_it_out() {
    let gate = gate();
    let now = Instant::now();
    let mut sessions: Vec<Session> = (0..4)
        .map(|i| open(gate.clone(), tcp(&format!("10.0.0.1:{}", 5000 + i))))
        .collect();
    for n in 0..10 {
        let s = &mut sessions[n / 3];
        assert!(matches!(
            s.screen(auth("wrong"), &Known, now),
            Step::Answer(Response::Unauthorized) | Step::Last(Response::Unauthorized)
        ));
    }
    // The good token is not even looked at now, from that address.
    assert_eq!(
        sessions[3].screen(auth("ops-token"), &Known, now),
        answer(Response::Unauthorized)
    );
    assert!(!sessions[3].authenticated());
    // Another address is served.
    let mut other = open(gate.clone(), tcp("10.0.0.2:5000"));
    assert_eq!(
        other.screen(auth("ops-token"), &Known, now),
        answer(Response::Authenticated)
    );
    // A minute later, the address may try again.
    let later = now + Duration::from_secs(61);
    assert_eq!(
        sessions[3].screen(auth("ops-token"), &Known, later),
        answer(Response::Authenticated)
    );
    assert_eq!(gate.failures_total(), 11);
}

#[test]
fn who_a_connection_is_at_the_start() {
    let gate = gate();
    let now = Instant::now();
    let by_listener = open(gate.clone(), peer("unix", "unix:/run/sprout.sock"));
    assert!(by_listener.authenticated());
    assert!(by_listener.may_inspect("orders.eu"));
    assert!(!by_listener.may_inspect("default"));
    let mut by_cert = tcp("10.0.0.3:1");
    by_cert.cert = Some(CertIdentity {
        common_name: Some("ops-1".into()),
        sans: vec![],
    });
    let by_cert = open(gate.clone(), by_cert);
    assert!(by_cert.may_inspect("default"));
    assert_eq!(by_cert.deadline(), None);
    // A certificate the policy does not know: the listener decides.
    let mut stranger = peer("unix", "unix:/run/sprout.sock");
    stranger.cert = Some(CertIdentity {
        common_name: Some("stranger".into()),
        sans: vec![],
    });
    assert!(open(gate.clone(), stranger).may_inspect("orders.eu"));
    let mut local = open(gate.clone(), Peer::local());
    assert_eq!(
        local.screen(Ok(Command::Kick(1)), &Known, now),
        Step::Run(Ok(Command::Kick(1)))
    );
    let nobody = open(gate.clone(), tcp("10.0.0.4:1"));
    assert!(!nobody.authenticated());
    let counts: Vec<(&str, i64)> = gate.connections();
    assert_eq!(
        counts,
        [
            ("producer", 0),
            ("ops", 1),
            ("reader", 1),
            ("unauthenticated", 1),
            ("local", 1)
        ]
    );
    drop((by_listener, by_cert, local, nobody));
    assert!(gate.connections().iter().all(|&(_, n)| n == 0));
}

#[test]
fn a_client_another_node_passed_on_is_who_that_node_vouched_for() {
    use crate::peer::Vouch;
    let gate = gate();
    let now = Instant::now();
    // The peer listener: its name is in the policy here, to show that it
    // never decides, nor does a certificate on the same connection.
    let relayed = |principal: Option<&str>| {
        let mut p = peer("203.0.113.7:50122", "unix:/run/sprout.sock");
        p.cert = ops_cert();
        p.vouched = Some(Vouch {
            by: "n2".into(),
            principal: principal.map(Into::into),
        });
        open(gate.clone(), p)
    };
    let ops = relayed(Some("ops"));
    assert!(ops.authenticated() && ops.may_inspect("default"));
    let reader = relayed(Some("reader"));
    assert!(reader.may_inspect("orders.eu") && !reader.may_inspect("default"));
    for nobody in [None, Some("ghost"), Some("local"), Some("unauthenticated")] {
        let s = relayed(nobody);
        assert!(!s.authenticated(), "{nobody:?}");
        assert!(closes_ten_seconds_after(&s, now));
    }
    // What a standby vouches is what the leader finds for its own clients.
    let mut by_cert = tcp("10.0.0.3:1");
    by_cert.cert = ops_cert();
    for (p, want) in [
        (by_cert, Some("ops")),
        (peer("unix", "unix:/run/sprout.sock"), Some("reader")),
        (tcp("10.0.0.4:1"), None),
    ] {
        let found = proven_principal(&gate, &p).map(|id| gate.policy().principal(id).name.as_str());
        assert_eq!(found, want, "{p:?}");
    }
}

fn ops_cert() -> Option<CertIdentity> {
    Some(CertIdentity {
        common_name: Some("ops-1".into()),
        sans: vec![],
    })
}

#[test]
fn strangers_wait_in_the_pending_slots_and_only_they() {
    let gate = gate_of(2);
    let stranger = |port: u16| Session::open(gate.clone(), tcp(&format!("10.0.0.9:{port}")), None);
    let (mut first, _second) = (stranger(1).unwrap(), stranger(2).unwrap());
    assert!(stranger(3).is_none(), "two wait already");
    // Who is someone from the start takes no slot.
    let by_listener = Session::open(gate.clone(), peer("unix", "unix:/run/sprout.sock"), None);
    assert!(by_listener.is_some_and(|s| s.deadline().is_none()));
    assert!(Session::open(gate.clone(), Peer::local(), None).is_some());
    // One that authenticates gives its slot back.
    let now = Instant::now();
    assert_eq!(
        first.screen(auth("producer-token"), &Known, now),
        answer(Response::Authenticated)
    );
    assert_eq!(first.deadline(), None);
    let third = stranger(3).expect("the slot given back");
    assert!(stranger(4).is_none());
    // A TLS connection brings the slot (and deadline) its handshake held.
    drop(third);
    let limit = PendingLimit::new(1, Duration::from_secs(3));
    let held = limit.admit().unwrap();
    let deadline = held.deadline().into_std();
    let tls = Session::open(gate.clone(), tcp("10.0.0.9:5"), Some(held)).unwrap();
    assert_eq!(tls.deadline(), Some(deadline));
    assert!(stranger(6).is_some(), "it took none of the gate's");
}
