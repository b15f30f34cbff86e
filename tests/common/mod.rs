//! Shared harness for the end-to-end tests: start a real server process on a
//! free port (or a unix socket) and talk to it with a raw byte-level client.
//!
//! The server binary is `sprout` (built by cargo for the tests) unless the
//! environment variable `SPROUT_TEST_BINARY` names another one, e.g.
//! `SPROUT_TEST_BINARY=/tmp/bsd/beanstalkd`, so that the very same tests can
//! be run against the reference beanstalkd 1.13. Tests of documented sprout
//! extensions call [`sprout_only`] and skip themselves in that case.
//!
//! The client never uses the project's codec: it writes the bytes it is given
//! and compares the exact bytes it reads back.
//!
//! By concern: `server.rs` starts and stops the server process, `client.rs`
//! is the byte-level client, `yaml.rs` reads `stats` documents, `store.rs`
//! holds what the durability tests add (a store directory that outlives
//! servers, kill -9, a client that survives them), `model.rs` the load and
//! the check of what survived that the crash and failover tests share, and
//! `nats.rs` runs a NATS cluster for the cluster tests (`secure_nats.rs`
//! one closed with TLS and accounts, its certificates from `certs.rs`),
//! `sprouts.rs` the sprout nodes of one, `failover.rs` load through them
//! while leaders die. Everything is re-exported here, so
//! a test names `common::X` whatever file `X` lives in.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

pub mod certs;
mod client;
pub mod failover;
pub mod model;
pub mod nats;
pub mod secure_nats;
mod server;
pub mod sprouts;
mod store;
mod yaml;

// Each test binary uses a part of these.
#[allow(unused_imports)]
pub use client::*;
#[allow(unused_imports)]
pub use server::*;
#[allow(unused_imports)]
pub use store::*;
#[allow(unused_imports)]
pub use yaml::*;

/// How long any single expectation may wait for bytes from the server.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// The server binary under test.
pub fn binary() -> PathBuf {
    match std::env::var_os("SPROUT_TEST_BINARY") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_sprout")),
    }
}

/// True when the tests run against another binary (beanstalkd) than sprout.
pub fn foreign_binary() -> bool {
    std::env::var_os("SPROUT_TEST_BINARY").is_some_and(|p| !p.is_empty())
}

/// For tests of sprout extensions and bug fixes: returns false (and prints a
/// note) when the tests run against another binary, so the caller returns.
/// `SPROUT_TEST_ALL=1` runs them anyway (to see how another server differs).
pub fn sprout_only(test: &str) -> bool {
    if foreign_binary() && std::env::var_os("SPROUT_TEST_ALL").is_none() {
        eprintln!("skipping {test}: checks a sprout-only behaviour (SPROUT_TEST_BINARY is set)");
        return false;
    }
    true
}

/// Whether the external program `tool` runs here (`tool --version`). If
/// not, prints that `test` is skipped, or panics under CI (`CI=true`),
/// where .ci/run installs every tool the tests need.
pub fn tool_available(tool: &str, test: &str) -> bool {
    tool_answers(tool, "--version", test)
}

/// Like [`tool_available`], for a tool that answers `tool VERSION_ARG`
/// (`openssl version`).
pub fn tool_answers(tool: &str, version_arg: &str, test: &str) -> bool {
    let found = Command::new(tool)
        .arg(version_arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{test}: {tool} is not installed (.ci/run installs it)");
        }
        eprintln!("skipping {test}: {tool} is not installed");
    }
    found
}

/// A scratch directory removed on drop (kept short: unix socket paths are
/// limited to 107 bytes).
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("sprout-t{}-{}", std::process::id(), n));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Default for TempDir {
    fn default() -> Self {
        TempDir::new()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Asserts `elapsed` is within `[lo, hi]`.
#[track_caller]
pub fn assert_between(elapsed: Duration, lo: Duration, hi: Duration) {
    assert!(
        elapsed >= lo && elapsed <= hi,
        "took {elapsed:?}, expected between {lo:?} and {hi:?}"
    );
}
