//! Why a decision could not be completed, and how a worker gets ready to
//! retry it: every decision is re-made from Redis, so retrying is safe.

use std::time::Duration;

use sprout_protocol::Response;

use super::server_side::Session;
use crate::client;

/// Pause before retrying after Redis or the index failed.
pub const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Why a decision could not be completed; the caller retries.
#[derive(Debug)]
pub enum Failure {
    Server(client::Error),
    Redis(redis::RedisError),
}

pub type Result<T> = std::result::Result<T, Failure>;

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Server(e) => write!(f, "job server: {e}"),
            Failure::Redis(e) => write!(f, "redis: {e}"),
        }
    }
}

impl From<client::Error> for Failure {
    fn from(e: client::Error) -> Failure {
        Failure::Server(e)
    }
}

impl From<redis::RedisError> for Failure {
    fn from(e: redis::RedisError) -> Failure {
        Failure::Redis(e)
    }
}

impl Failure {
    /// The server answered something the step cannot go on with.
    pub fn reply(reply: Response) -> Failure {
        Failure::Server(client::Error::Reply(reply))
    }
}

/// Fails with the first answer `ok` refuses.
pub fn check(replies: Vec<Response>, ok: impl Fn(&Response) -> bool) -> Result<()> {
    match replies.into_iter().find(|r| !ok(r)) {
        None => Ok(()),
        Some(reply) => Err(Failure::reply(reply)),
    }
}

/// Logs a failed decision and gets ready to retry it: a lost server
/// connection is dropped (the next use reconnects with backoff); anything
/// else waits a little.
pub async fn recover(session: &mut Session, failure: Failure) {
    match failure {
        Failure::Server(e) if session.failed(&e) => {}
        other => {
            tracing::warn!(error = %other, "retrying");
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
}
