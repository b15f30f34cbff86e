//! The policy file: what loads, and each refusal with its line.

use super::*;

fn hash(token: &str) -> String {
    TokenHash::of(token.as_bytes()).to_string()
}

fn example() -> String {
    format!(
        r#"# Producers put into orders.*
[[principal]]
name = "orders-producer"
tokens = ["{producer}"]
certs = ["CN=producer-1", "DNS:producer.internal"]
grants = [{{ tubes = ["orders.*"], actions = ["produce"] }}]

[[principal]]
name = "worker"
tokens = ["{worker}", "{worker2}"]
grants = [
  {{ tubes = ["orders.*"], actions = ["consume"] }},
  {{ tubes = ["orders.eu"], actions = ["inspect"] }},
]

[[principal]]
name = "ops"
certs = ["EMAIL:ops@example.com"]
grants = [{{ tubes = ["*"], actions = ["inspect", "admin"] }}]

[listeners]
"unix:/run/sprout/sprout.sock" = "ops"
"127.0.0.1:11300" = "worker"
"[0:0::1]:11300" = "ops"
"#,
        producer = hash("p-secret"),
        worker = hash("w-secret"),
        worker2 = hash("w-secret-2"),
    )
}

#[test]
fn loads_the_example() {
    let policy = Policy::parse(&example(), "policy.toml").unwrap();
    let names: Vec<&str> = policy.names().collect();
    assert_eq!(names, ["orders-producer", "worker", "ops"]);
    assert_eq!(policy.by_token(b"p-secret"), Some(0));
    assert_eq!(policy.by_token(b"w-secret"), Some(1));
    assert_eq!(policy.by_token(b"w-secret-2"), Some(1));
    assert_eq!(policy.by_token(b"w-secret\n"), None);
    assert_eq!(policy.by_token(b""), None);
    assert_eq!(policy.for_listener("unix:/run/sprout/sprout.sock"), Some(2));
    assert_eq!(policy.for_listener("127.0.0.1:11300"), Some(1));
    // Spelled as a bound address prints.
    assert_eq!(policy.for_listener("[::1]:11300"), Some(2));
    assert_eq!(policy.for_listener("127.0.0.1:11301"), None);
    let worker = &policy.principal(1).grants;
    assert!(worker.allows(Action::Consume, "orders.us"));
    assert!(!worker.allows(Action::Inspect, "orders.us"));
}

#[test]
fn certificates() {
    let policy = Policy::parse(&example(), "policy.toml").unwrap();
    let cert = |cn: Option<&str>, sans: &[&str]| CertIdentity {
        common_name: cn.map(Into::into),
        sans: sans.iter().map(|s| s.to_string()).collect(),
    };
    for (cert, want) in [
        (cert(Some("producer-1"), &[]), ByCert::One(0)),
        (cert(Some("x"), &["DNS:Producer.Internal"]), ByCert::One(0)),
        // Two names of one principal.
        (
            cert(Some("producer-1"), &["DNS:producer.internal"]),
            ByCert::One(0),
        ),
        (cert(None, &["EMAIL:OPS@example.com"]), ByCert::One(2)),
        (cert(Some("producer-2"), &["DNS:other"]), ByCert::None),
        (cert(None, &[]), ByCert::None),
        // The CN says one principal, a SAN another.
        (
            cert(Some("producer-1"), &["EMAIL:ops@example.com"]),
            ByCert::Ambiguous,
        ),
    ] {
        assert_eq!(policy.by_cert(&cert), want, "{cert:?}");
    }
}

/// `text` refused at `line` with a message containing `says`.
#[track_caller]
fn refused(text: &str, line: usize, says: &str) {
    let e = Policy::parse(text, "p.toml").unwrap_err();
    assert_eq!(e.file, "p.toml");
    let shown = e.to_string();
    assert!(shown.starts_with(&format!("p.toml:{line}:")), "{shown}");
    assert!(e.message.contains(says), "{shown}");
}

#[test]
fn refusals_name_the_line() {
    let ok_token = hash("secret-token-1");
    let principal = |body: &str| format!("[[principal]]\nname = \"a\"\n{body}\n");
    let with_token = |body: &str| principal(&format!("tokens = [\"{ok_token}\"]\n{body}"));
    // Syntax and shape: the TOML reader's own words.
    refused("[[principal]\n", 1, "");
    refused(&with_token("grant = []"), 4, "unknown field `grant`");
    refused(
        &with_token(r#"grants = [{ tubes = ["a"], actions = ["produce", "delete"] }]"#),
        4,
        "unknown variant `delete`",
    );
    refused(&with_token("[x]"), 4, "unknown field `x`");
    refused("[[principal]]\ntokens = []\n", 1, "missing field `name`");
    // Tokens.
    refused(
        &principal(r#"tokens = ["s3cret"]"#),
        3,
        "sha256:<64 hex digits>",
    );
    refused(
        &principal(&format!("tokens = [\"{ok_token}\", \"{ok_token}\"]")),
        3,
        "lists this token twice",
    );
    refused(
        &format!(
            "{}[[principal]]\nname = \"b\"\ntokens = [\"{ok_token}\"]\n",
            with_token("")
        ),
        7,
        "also principal `a`'s",
    );
    // Certs.
    refused(&with_token(r#"certs = ["producer-1"]"#), 4, "expected CN=");
    refused(
        &format!(
            "{}[[principal]]\nname = \"b\"\ncerts = [\"DNS:X.example\"]\n",
            with_token(r#"certs = ["DNS:x.example"]"#)
        ),
        7,
        "this cert is also principal `a`'s",
    );
    // Grants.
    refused(
        &with_token(r#"grants = [{ tubes = ["orders#"], actions = ["produce"] }]"#),
        4,
        "has `#`",
    );
    refused(
        &with_token(r#"grants = [{ tubes = [], actions = ["produce"] }]"#),
        4,
        "at least one tube pattern",
    );
    // Names.
    refused(
        &format!("{}[[principal]]\nname = \"a\"\n", with_token("")),
        6,
        "two principals are named `a`",
    );
    refused("[[principal]]\nname = \"has space\"\n", 2, "use 1 to 64");
    refused("[[principal]]\nname = \"local\"\n", 2, "reserved");
    refused("[[principal]]\nname = \"unauthenticated\"\n", 2, "reserved");
    // Nothing can act as it.
    refused(&principal(""), 2, "nothing can act as principal `a`");
    refused("", 1, "names no principal");
    // Listeners.
    refused(
        &format!(
            "{}[listeners]\n\"127.0.0.1:11300\" = \"b\"\n",
            with_token("")
        ),
        6,
        "names no principal of this policy: `b`",
    );
    refused(
        &format!(
            "{}[listeners]\n\"localhost:11300\" = \"a\"\n",
            with_token("")
        ),
        6,
        "not ADDR:PORT or unix:PATH",
    );
    refused(
        &format!("{}[listeners]\n\"unix:\" = \"a\"\n", with_token("")),
        6,
        "not ADDR:PORT or unix:PATH",
    );
    refused(
        &format!(
            "{}[listeners]\n\"[::1]:11300\" = \"a\"\n\"[0::1]:11300\" = \"a\"\n",
            with_token("")
        ),
        7,
        "named twice",
    );
}

#[test]
fn a_listener_alone_makes_a_principal_reachable() {
    let text =
        "[[principal]]\nname = \"ops\"\ngrants = [{ tubes = [\"*\"], actions = [\"admin\"] }]\n\
                [listeners]\n\"unix:/run/s.sock\" = \"ops\"\n";
    let policy = Policy::parse(text, "p.toml").unwrap();
    assert_eq!(policy.for_listener("unix:/run/s.sock"), Some(0));
    assert_eq!(policy.listeners().collect::<Vec<_>>(), ["unix:/run/s.sock"]);
}

#[test]
fn unreadable_file() {
    let e = Policy::load(Path::new("/nonexistent/policy.toml")).unwrap_err();
    assert_eq!(e.at, None);
    assert!(
        e.to_string()
            .starts_with("/nonexistent/policy.toml: cannot read it:"),
        "{e}"
    );
}
