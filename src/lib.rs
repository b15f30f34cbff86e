//! sprout: a beanstalkd-compatible job server.
//!
//! The crate is the server as a library (so tests, benches and examples can
//! start one in-process) plus the small async client they share.

pub mod admin;
mod alarm;
pub mod bridge;
pub mod cli;
pub mod client;
pub mod connection;
pub mod engine;
pub mod http;
pub mod server;
pub mod service;
pub mod shared;
pub mod store;
pub mod timer;
pub mod user;
