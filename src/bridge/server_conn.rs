//! A connection of the bridge to the job server, over whichever stream
//! reaches it (TCP, TLS or an in-process pipe).

use tokio::io::{AsyncRead, AsyncWrite};

use crate::client::Client;

/// A byte stream to the server, whatever its kind.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

pub type ServerConn = Client<Box<dyn Stream>>;
