//! The link's rule for clear text, its credentials' flags, and which
//! refusals by NATS are final.

use super::*;

fn servers(urls: &str) -> Vec<ServerAddr> {
    parse_servers(urls).unwrap()
}

#[test]
fn clear_text_only_on_this_host_unless_tls_or_insecure() {
    use Transport::*;
    let loopback = "nats://127.0.0.1:4222,localhost:4223,[::1]:4224,127.0.0.2,[::ffff:127.0.0.1]";
    let remote = "nats://10.0.0.5:4222";
    let mixed = "nats://127.0.0.1:4222,nats://nats.internal:4222";
    // (urls, TLS flags, --cluster-insecure, outcome)
    let table: [(&str, bool, bool, Result<Transport, ()>); 14] = [
        (loopback, false, false, Ok(Loopback)),
        (loopback, false, true, Ok(Loopback)),
        (loopback, true, false, Ok(Tls)),
        (remote, false, false, Err(())),
        (remote, false, true, Ok(Insecure)),
        (remote, true, false, Ok(Tls)),
        (mixed, false, false, Err(())),
        (mixed, false, true, Ok(Insecure)),
        ("tls://nats.example:4222", false, false, Ok(Tls)),
        ("tls://a:4222,nats://b:4222", false, false, Ok(Tls)),
        ("wss://nats.example", false, false, Ok(Tls)),
        ("ws://nats.example", false, false, Err(())),
        ("nats://127.0.0.1.example.com", false, false, Err(())),
        ("nats://0.0.0.0:4222", false, false, Err(())),
    ];
    for (urls, tls, insecure, want) in table {
        let got = transport(&servers(urls), tls, insecure);
        match (&got, want) {
            (Ok(t), Ok(w)) => assert_eq!(*t, w, "{urls} tls={tls} insecure={insecure}"),
            (Err(e), Err(())) => {
                let e = e.to_string();
                for needed in ["--cluster-tls-ca", "tls://", "--cluster-insecure"] {
                    assert!(e.contains(needed), "{urls}: {e}");
                }
            }
            _ => panic!("{urls} tls={tls} insecure={insecure}: {got:?}"),
        }
    }
    let e = transport(&servers(mixed), false, false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("nats://nats.internal:4222"), "{e}");
}

fn args() -> LinkArgs {
    LinkArgs::default()
}

#[test]
fn one_kind_of_credentials_and_whole_pairs() {
    let f = |s: &str| Some(PathBuf::from(s));
    let user = |a: LinkArgs| LinkArgs {
        nats_user: Some("u".into()),
        nats_password_file: f("pw"),
        ..a
    };
    let creds = |a: LinkArgs| LinkArgs {
        nats_creds: f("c"),
        ..a
    };
    let nkey = |a: LinkArgs| LinkArgs {
        nats_nkey: f("k"),
        ..a
    };
    let ok: [(LinkArgs, Credentials); 4] = [
        (args(), Credentials::None),
        (creds(args()), Credentials::Creds("c".into())),
        (nkey(args()), Credentials::NKey("k".into())),
        (
            user(args()),
            Credentials::User {
                name: "u".into(),
                password_file: "pw".into(),
            },
        ),
    ];
    for (a, want) in ok {
        let link = Link::from_args("127.0.0.1", &a).unwrap();
        assert_eq!(link.credentials, want);
    }
    let one_of = "give one of --cluster-creds, --cluster-user";
    let bad: [(LinkArgs, &str, &str); 9] = [
        (creds(nkey(args())), "127.0.0.1", one_of),
        (creds(user(args())), "127.0.0.1", one_of),
        (nkey(user(args())), "127.0.0.1", one_of),
        (
            LinkArgs {
                nats_user: Some("u".into()),
                ..args()
            },
            "127.0.0.1",
            "--cluster-user needs --cluster-password-file",
        ),
        (
            LinkArgs {
                nats_password_file: f("pw"),
                ..args()
            },
            "127.0.0.1",
            "--cluster-password-file needs --cluster-user",
        ),
        (
            LinkArgs {
                nats_tls_cert: f("c.pem"),
                ..args()
            },
            "127.0.0.1",
            "--cluster-tls-cert needs --cluster-tls-key",
        ),
        (
            LinkArgs {
                nats_tls_key: f("k.pem"),
                ..args()
            },
            "127.0.0.1",
            "--cluster-tls-key needs --cluster-tls-cert",
        ),
        (
            args(),
            "nats://u:secret@127.0.0.1",
            "--cluster-password-file",
        ),
        (args(), " , ", "no NATS URL"),
    ];
    for (a, urls, why) in bad {
        let e = Link::from_args(urls, &a).unwrap_err().to_string();
        assert!(e.contains(why), "{urls} {a:?}: {e}");
        assert!(!e.contains("secret"), "{e}");
    }
    let cert = LinkArgs {
        nats_tls_cert: f("c.pem"),
        nats_tls_key: f("k.pem"),
        ..args()
    };
    let link = Link::from_args("nats://10.0.0.5", &cert).unwrap();
    assert_eq!(link.transport, Transport::Tls);
}

#[test]
fn refused_credentials_are_final_silence_is_not() {
    use ConnectErrorKind::*;
    let user = Credentials::User {
        name: "u".into(),
        password_file: "pw".into(),
    };
    // (kind, credentials, final, what the message names)
    let table = [
        (
            AuthorizationViolation,
            &user,
            true,
            "--cluster-password-file",
        ),
        (
            AuthorizationViolation,
            &Credentials::None,
            true,
            "no credentials",
        ),
        (
            Authentication,
            &Credentials::NKey("k".into()),
            true,
            "--cluster-nkey",
        ),
        (Tls, &user, true, "TLS"),
        (Io, &user, false, ""),
        (TimedOut, &user, false, ""),
        (Dns, &user, false, ""),
    ];
    for (kind, credentials, last, names) in table {
        let why = refusal(&ConnectError::new(kind), credentials);
        assert_eq!(why.is_some(), last, "{kind:?}");
        assert!(why.unwrap_or_default().contains(names), "{kind:?}");
    }
}
