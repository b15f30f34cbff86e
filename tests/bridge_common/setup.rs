//! The usual test: one Redis, one server, one bridge, one worker.

use super::bridge::{bridge_args, Bridge};
use super::redis_server::{Redis, Version};
use super::worker::Worker;
use crate::common::{TempDir, TestServer};

/// Everything one bridge test needs: Redis, a sprout server, the bridge,
/// a worker, and the state dir.
pub struct Setup {
    pub redis: Redis,
    pub server: TestServer,
    pub bridge: Bridge,
    pub worker: Worker,
    pub state: TempDir,
    pub tube: String,
}

impl Setup {
    /// Server in memory, bridge on `patterns`, plus `extra` bridge args.
    pub fn start(patterns: &[&str], extra: &[&str]) -> Setup {
        Setup::start_on(Version::V7_0, patterns, extra)
    }

    /// [`Setup::start`] with a Redis of `version`.
    pub fn start_on(version: Version, patterns: &[&str], extra: &[&str]) -> Setup {
        let redis = Redis::start_version(version);
        let server = TestServer::start(&[]);
        Setup::with(redis, server, patterns, extra)
    }

    pub fn with(redis: Redis, server: TestServer, patterns: &[&str], extra: &[&str]) -> Setup {
        let state = TempDir::new();
        let tube = "offline".to_string();
        let mut args = bridge_args(&redis, server.port(), &tube, patterns, state.path());
        args.extend(extra.iter().map(|s| s.to_string()));
        let bridge = Bridge::start(&args);
        let worker = Worker::new(server.port(), &tube);
        Setup {
            redis,
            server,
            bridge,
            worker,
            state,
            tube,
        }
    }

    /// The arguments the bridge was started with (to restart it).
    pub fn bridge_args(&self, patterns: &[&str]) -> Vec<String> {
        bridge_args(
            &self.redis,
            self.server.port(),
            &self.tube,
            patterns,
            self.state.path(),
        )
    }
}
