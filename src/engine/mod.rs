//! The job state machine: every command's effect on jobs, tubes and
//! connections, with beanstalkd 1.13's semantics.
//!
//! Pure and synchronous: no sockets, no tasks, no clock reads. The caller
//! passes the current [`Time`] in, holds the engine under one short lock,
//! and after each call drains [`Engine::take_wakeups`] to answer connections
//! blocked in `reserve` (their answer comes later, from another connection's
//! command or from [`Engine::tick`]).
//!
//! Timers: [`Engine::next_deadline`] is the earliest moment anything is due
//! (a delayed job, a TTR, a DEADLINE_SOON margin, a pause, a reserve
//! timeout); one timer task sleeps until then and calls [`Engine::tick`].

use std::time::Duration;

use sprout_protocol::{Command, Rejected, Response};

/// Microseconds on the server's monotonic clock (see [`Clock`]).
pub type Time = u64;

/// A connection, as the engine knows it.
pub type ConnId = u64;

/// Maps `Instant`s to [`Time`].
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    epoch: std::time::Instant,
}

impl Clock {
    pub fn new() -> Clock {
        Clock { epoch: std::time::Instant::now() }
    }

    pub fn now(&self) -> Time {
        self.epoch.elapsed().as_micros() as Time
    }

    /// The `Instant` at which `t` falls, for sleeping until it.
    pub fn instant(&self, t: Time) -> std::time::Instant {
        self.epoch + Duration::from_micros(t)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// Facts about the server that `stats` reports but the engine does not own.
#[derive(Clone, Debug)]
pub struct Config {
    /// `-z`: the largest job body accepted (reported as `max-job-size`).
    pub max_job_size: u32,
    /// `-s`: reported as `binlog-max-size`.
    pub binlog_max_size: u64,
}

/// What a command does to the connection that sent it.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Answer at once.
    Reply(Response),
    /// The connection is now blocked in `reserve`: its answer will come
    /// through [`Engine::take_wakeups`].
    Wait,
    /// `quit`: close the connection without an answer.
    Close,
}

/// The whole in-memory state of the server.
pub struct Engine {}

impl Engine {
    pub fn new(config: Config, now: Time) -> Engine {
        let _ = (config, now);
        todo!()
    }

    /// A new client: it uses and watches `default`.
    pub fn connect(&mut self) -> ConnId {
        todo!()
    }

    /// The client is gone: its reserved jobs return to ready at once, it
    /// stops waiting, its tubes lose a reference.
    pub fn disconnect(&mut self, conn: ConnId, now: Time) {
        let _ = (conn, now);
        todo!()
    }

    /// Runs one command for `conn`.
    pub fn execute(&mut self, conn: ConnId, cmd: Command, now: Time) -> Outcome {
        let _ = (conn, cmd, now);
        todo!()
    }

    /// Accounts for a request the parser refused (stats counters and the
    /// producer flag move as in beanstalkd). The caller replies with the error.
    pub fn reject(&mut self, conn: ConnId, rejected: Rejected) {
        let _ = (conn, rejected);
        todo!()
    }

    /// Fires everything due at `now`.
    pub fn tick(&mut self, now: Time) {
        let _ = now;
        todo!()
    }

    /// The earliest moment [`Engine::tick`] has work, if any.
    pub fn next_deadline(&self) -> Option<Time> {
        todo!()
    }

    /// Answers for blocked connections produced since the last call.
    pub fn take_wakeups(&mut self) -> std::vec::Drain<'_, (ConnId, Response)> {
        todo!()
    }

    /// SIGUSR1: refuse new jobs with DRAINING.
    pub fn set_draining(&mut self, on: bool) {
        let _ = on;
        todo!()
    }
}
