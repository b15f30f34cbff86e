//! The bridge's flags as the command line parses them: `sprout bridge
//! ...` and the embedded `--bridge-*` / `--redis-bridge` flags build the
//! same [`Config`], and bad combinations are named. Here rather than in
//! `bridge/config.rs` so the bridge never imports the command line.

use std::path::PathBuf;

use crate::bridge::config::{Config, Front, Kind};

/// A directory of its own under the system's temporary one, removed on
/// drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "sprout-config-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn parse(words: &[&str]) -> Result<super::Args, clap::Error> {
    use clap::Parser;
    super::Args::try_parse_from(std::iter::once("sprout").chain(words.iter().copied()))
}

/// `sprout bridge WORDS`.
fn subcommand(words: &[&str]) -> Result<Config, String> {
    let mut argv = vec!["bridge"];
    argv.extend_from_slice(words);
    match parse(&argv).map_err(|e| e.to_string())?.command {
        Some(super::Mode::Bridge(args)) => Config::from_args(&args).map_err(|e| e.to_string()),
        other => panic!("not the bridge subcommand: {other:?}"),
    }
}

/// `sprout WORDS`, the server with the embedded bridge.
fn embedded(words: &[&str]) -> Result<Config, String> {
    let args = parse(words).map_err(|e| e.to_string())?;
    Config::from_embedded(&args.bridge, args.binlog_dir.as_deref())
        .map(|config| config.map_err(|e| e.to_string()))
        .unwrap_or_else(|| Err("no embedded bridge".into()))
}

/// Each source, alone and together, and every option: the embedded
/// flags mean what the subcommand's mean, down to the nodes' order.
#[test]
fn embedded_flags_make_the_subcommands_config() {
    let dir = Scratch::new("same");
    let yaml = dir.0.join("nutcracker.yml");
    std::fs::write(
        &yaml,
        "alpha:\n  listen: 127.0.0.1:22121\n  redis: true\n  redis_db: 2\n  servers:\n   \
         - 127.0.0.1:7001:1 a\n   - 127.0.0.1:7002:1 b\n",
    )
    .unwrap();
    let yaml = yaml.to_str().unwrap();
    let state = dir.0.join("state");
    let state = state.to_str().unwrap();
    let binlog = dir.0.join("binlog");
    let binlog = binlog.to_str().unwrap();
    let default_state = format!("{binlog}/bridge");
    let common = |state: &str| -> Vec<String> {
        [
            "--tube",
            "offline",
            "--match",
            "dev:*",
            "--match",
            "x:?",
            "--state-dir",
            state,
        ]
        .map(String::from)
        .to_vec()
    };
    let options = [
        "--no-pubsub",
        "--scan-interval",
        "2.5",
        "--with-value",
        "--delete-on-fire",
        "--precheck-ms",
        "250",
        "--pri",
        "7",
        "--ttr",
        "9",
    ];
    let table: &[(&str, &[&str], &[&str])] = &[
        ("redis", &["--redis", "redis://127.0.0.1:6379/1"], &[]),
        (
            "several redis",
            &[
                "--redis",
                "redis://127.0.0.1:6379/1",
                "--redis",
                "redis://h:1/0",
            ],
            &[],
        ),
        ("twemproxy", &["--twemproxy-config", yaml], &[]),
        (
            "sentinels",
            &[
                "--redis-sentinel",
                "redis://127.0.0.1:26379,127.0.0.1:26380/mymaster",
                "--redis-sentinel",
                "redis://s:26379/other",
            ],
            &[],
        ),
        (
            "clusters",
            &[
                "--redis-cluster",
                "redis://127.0.0.1:7000",
                "--redis-cluster",
                "redis://c:1",
            ],
            &[],
        ),
        (
            "all four, with every option",
            &[
                "--redis-sentinel",
                "redis://s:26379/m",
                "--redis-cluster",
                "redis://c:7000",
                "--twemproxy-config",
                yaml,
                "--redis",
                "redis://r:6379/4",
            ],
            &options,
        ),
    ];
    for (what, sources, opts) in table {
        for state_dir in [Some(state), None] {
            // The subcommand's words: sources, then the rest.
            let sub_state = state_dir.unwrap_or(&default_state);
            let mut sub: Vec<String> = sources.iter().map(|s| s.to_string()).collect();
            sub.extend(common(sub_state));
            sub.extend(opts.iter().map(|s| s.to_string()));
            // The same with the embedded spelling; without
            // --bridge-state-dir, -b's DIR/bridge.
            let mut emb: Vec<String> = vec!["-b".into(), binlog.into()];
            let mut given = sub.iter();
            while let Some(word) = given.next() {
                match word.strip_prefix("--") {
                    Some("state-dir") if state_dir.is_none() => {
                        given.next();
                    }
                    Some(name) => emb.push(Front::Embedded.flag(name)),
                    None => emb.push(word.clone()),
                }
            }
            fn words(v: &[String]) -> Vec<&str> {
                v.iter().map(String::as_str).collect()
            }
            let want = subcommand(&words(&sub)).unwrap_or_else(|e| panic!("{what}: {e}"));
            let got = embedded(&words(&emb)).unwrap_or_else(|e| panic!("{what}: {emb:?}: {e}"));
            assert_eq!(format!("{got:?}"), format!("{want:?}"), "{what}: {emb:?}");
        }
    }
    // The order timers name nodes by, whatever the order of the flags.
    let all = subcommand(
        &[
            table[5].1,
            &common(state).iter().map(String::as_str).collect::<Vec<_>>(),
        ]
        .concat(),
    )
    .unwrap();
    let kinds: Vec<_> = all
        .nodes
        .iter()
        .map(|n| (n.url.as_str(), n.kind, n.sentinel.is_some()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("redis://r:6379/4", Kind::Standalone, false),
            ("redis://127.0.0.1:7001/2", Kind::Twemproxy, false),
            ("redis://127.0.0.1:7002/2", Kind::Twemproxy, false),
            ("redis://c:7000", Kind::RedisCluster, false),
            ("redis://s:26379/m", Kind::Sentinel, true),
        ]
    );
}

/// What each bad combination of embedded flags is told, naming the
/// flags as given.
#[test]
fn bad_embedded_flags_are_named() {
    let dir = Scratch::new("bad");
    let b = dir.0.to_str().unwrap();
    let missing = dir.0.join("missing.yml");
    let missing = missing.to_str().unwrap();
    let table: &[(&[&str], &str)] = &[
        // No source: clap refuses the others.
        (
            &["-b", b, "--bridge-tube", "t", "--bridge-match", "*"],
            "--redis-bridge",
        ),
        (&["-b", b, "--bridge-match", "*"], "--bridge-redis-cluster"),
        (
            &["-b", b, "--bridge-no-pubsub"],
            "--bridge-twemproxy-config",
        ),
        // A source without its tube or its home.
        (
            &["-b", b, "--bridge-redis-cluster", "redis://c:1"],
            "--bridge-redis-cluster needs --bridge-tube",
        ),
        (
            &["-b", b, "--redis-bridge", "redis://r:1"],
            "--redis-bridge needs --bridge-tube",
        ),
        (
            &[
                "--bridge-redis-sentinel",
                "redis://s:1/m",
                "--bridge-tube",
                "t",
                "--bridge-match",
                "*",
            ],
            "--bridge-redis-sentinel needs -b DIR (or --bridge-state-dir)",
        ),
        (
            &[
                "-b",
                b,
                "--bridge-twemproxy-config",
                missing,
                "--bridge-tube",
                "t",
            ],
            "give at least one key pattern to match (--bridge-match)",
        ),
        // A source or an option the bridge cannot read.
        (
            &[
                "-b",
                b,
                "--bridge-twemproxy-config",
                missing,
                "--bridge-tube",
                "t",
                "--bridge-match",
                "*",
            ],
            "cannot read --bridge-twemproxy-config",
        ),
        (
            &[
                "-b",
                b,
                "--bridge-redis-sentinel",
                "redis://s/m",
                "--bridge-tube",
                "t",
                "--bridge-match",
                "*",
            ],
            "bad --bridge-redis-sentinel \"redis://s/m\"",
        ),
        (
            &[
                "-b",
                b,
                "--bridge-redis-cluster",
                "nope://",
                "--bridge-tube",
                "t",
                "--bridge-match",
                "*",
            ],
            "bad Redis URL \"nope://\"",
        ),
        (
            &[
                "-b",
                b,
                "--redis-bridge",
                "redis://r:1",
                "--bridge-tube",
                "t",
                "--bridge-match",
                "*",
                "--bridge-scan-interval",
                "0",
            ],
            "--bridge-scan-interval must be positive",
        ),
    ];
    for (words, want) in table {
        let err = embedded(words).expect_err(want);
        assert!(err.contains(want), "{words:?}: {err}");
    }
    // None of the sources: no embedded bridge, and no error.
    let args = parse(&["-b", b]).unwrap();
    assert!(Config::from_embedded(&args.bridge, args.binlog_dir.as_deref()).is_none());
    // The subcommand names its own flags.
    let err = subcommand(&[
        "--redis-sentinel",
        "redis://s/m",
        "--tube",
        "t",
        "--match",
        "*",
        "--state-dir",
        b,
    ])
    .unwrap_err();
    assert!(err.contains("bad --redis-sentinel"), "{err}");
    let err = subcommand(&["--tube", "t", "--match", "*", "--state-dir", b]).unwrap_err();
    assert!(err.contains("--redis"), "{err}");
}
