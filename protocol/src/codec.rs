//! `tokio-util` codecs for the two ends of a connection.
//!
//! [`ServerCodec`] turns the bytes a client sends into [`Request`]s and writes
//! [`Response`]s; [`ClientCodec`] does the reverse. Decoding is built for a
//! server that calls `decode` in a loop until it returns `Ok(None)`: each call
//! yields at most one message and looks at each byte about once, a body is
//! taken off the read buffer (copied when short, split off when long: see
//! [`COPY_BODIES_BELOW`]), and the state that outlives a call (an over-long line being
//! discarded, a too-big body being skipped, a body being waited for) lives in
//! the codec, so the buffer never has to hold more than one line or one body.
//!
//! Both encoders accept a message by value or by reference.

use std::io;

use bytes::{Buf, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use crate::encode::{encode_command, encode_response};
use crate::parse::{
    find_line_end, parse_auth_line, parse_command_line, parse_response_line, BodyKind, CommandLine,
    LineEnd, PutHeader, ResponseHead,
};
use crate::{Command, JobId, Op, ProtocolError, Rejected, Request, Response, Tags, MAX_LINE_LEN};

/// The most a decoder reserves at once for a body still on its way.
const MAX_RESERVE: usize = 1 << 20;

/// Bodies shorter than this are copied out of the read buffer rather than
/// split off it. A split body shares the buffer's allocation and keeps all
/// of it alive as long as the job lives: a client that sends one command
/// per read left ~4.5 KB of buffer behind every 100-byte job. Longer bodies
/// arrive in allocations reserved mostly for themselves, so sharing is cheap.
pub const COPY_BODIES_BELOW: usize = 16 * 1024;

/// The server's end: decodes requests, encodes replies.
#[derive(Debug)]
pub struct ServerCodec {
    max_job_size: u32,
    /// Reads `auth <token>` (a server with `--auth`).
    auth: bool,
    state: ServerState,
}

#[derive(Debug)]
enum ServerState {
    /// Expecting a command line.
    Line,
    /// Dropping an over-long line up to its CRLF.
    Discard,
    /// Dropping this many more bytes of a too-big body (of a `put`, or a
    /// `fire`: the command the refusal counts as).
    Skip(u64, Op),
    /// Waiting for the body of a `put`, or of a `fire` of the job given.
    Body(PutHeader, Option<Box<Tags>>, Option<JobId>),
}

impl ServerCodec {
    /// A codec refusing `put` bodies longer than `max_job_size` (`-z`).
    pub fn new(max_job_size: u32) -> ServerCodec {
        ServerCodec {
            max_job_size,
            auth: false,
            state: ServerState::Line,
        }
    }

    /// A codec that also reads `auth <token>` lines (a server with
    /// `--auth`); [`ServerCodec::new`] answers them `UNKNOWN_COMMAND`,
    /// as beanstalkd does.
    pub fn with_auth(max_job_size: u32) -> ServerCodec {
        ServerCodec {
            auth: true,
            ..ServerCodec::new(max_job_size)
        }
    }

    /// Changes the largest body accepted from the next command line on
    /// (a body being read keeps the limit its line was read under). A
    /// server sets 0 while a client has not authenticated, so the body of
    /// its `put` is skipped as it arrives rather than held.
    pub fn set_max_job_size(&mut self, max_job_size: u32) {
        self.max_job_size = max_job_size;
    }
}

impl Decoder for ServerCodec {
    type Item = Request;
    type Error = io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> io::Result<Option<Request>> {
        loop {
            match &mut self.state {
                ServerState::Line => match find_line_end(buf) {
                    LineEnd::NeedMore => return Ok(None),
                    LineEnd::TooLong => {
                        // Keep the last byte: it may be the `\r` of a CRLF.
                        buf.advance(MAX_LINE_LEN - 1);
                        self.state = ServerState::Discard;
                    }
                    LineEnd::Found(len) => {
                        let line = &buf[..len - 2];
                        let parsed = match self.auth.then(|| parse_auth_line(line)).flatten() {
                            Some(auth) => CommandLine::Command(auth),
                            None => parse_command_line(line, self.max_job_size),
                        };
                        let op = match buf.starts_with(b"fire ") {
                            true => Op::Fire,
                            false => Op::Put,
                        };
                        buf.advance(len);
                        match parsed {
                            CommandLine::Command(command) => return Ok(Some(Ok(command))),
                            CommandLine::Rejected(rejected) => return Ok(Some(Err(rejected))),
                            CommandLine::Put(header, tags) => {
                                self.state = ServerState::Body(header, tags, None)
                            }
                            CommandLine::Fire(id, header) => {
                                self.state = ServerState::Body(header, None, Some(id))
                            }
                            CommandLine::TooBig { bytes } => {
                                self.state = ServerState::Skip(u64::from(bytes) + 2, op)
                            }
                        }
                    }
                },
                ServerState::Discard => {
                    let Some(at) = buf.windows(2).position(|w| w == b"\r\n") else {
                        let keep = usize::from(buf.last() == Some(&b'\r'));
                        buf.advance(buf.len() - keep);
                        return Ok(None);
                    };
                    buf.advance(at + 2);
                    self.state = ServerState::Line;
                    return Ok(Some(Err(Rejected {
                        error: ProtocolError::BadFormat,
                        counted: None,
                    })));
                }
                ServerState::Skip(left, op) => {
                    let (left, op) = (*left, *op);
                    let n = left.min(buf.len() as u64);
                    buf.advance(n as usize);
                    if n < left {
                        self.state = ServerState::Skip(left - n, op);
                        return Ok(None);
                    }
                    self.state = ServerState::Line;
                    return Ok(Some(Err(body_error(ProtocolError::JobTooBig, op))));
                }
                ServerState::Body(header, tags, fire) => {
                    let request = match take_body(buf, header.bytes) {
                        Body::Waiting => return Ok(None),
                        Body::Complete(body) => {
                            let PutHeader {
                                pri, delay, ttr, ..
                            } = *header;
                            Ok(match *fire {
                                Some(id) => Command::Fire { id, pri, ttr, body },
                                None => Command::Put {
                                    pri,
                                    delay,
                                    ttr,
                                    body,
                                    tags: tags.take(),
                                },
                            })
                        }
                        Body::NoCrlf => {
                            let op = if fire.is_some() { Op::Fire } else { Op::Put };
                            Err(body_error(ProtocolError::ExpectedCrlf, op))
                        }
                    };
                    self.state = ServerState::Line;
                    return Ok(Some(request));
                }
            }
        }
    }

    /// At end of input an unfinished request is dropped, as beanstalkd drops
    /// it when the client hangs up.
    fn decode_eof(&mut self, buf: &mut BytesMut) -> io::Result<Option<Request>> {
        let request = self.decode(buf)?;
        if request.is_none() {
            buf.clear();
        }
        Ok(request)
    }
}

/// A refused `put` (or `fire`) that still counts as one.
fn body_error(error: ProtocolError, op: Op) -> Rejected {
    Rejected {
        error,
        counted: Some(op),
    }
}

/// The state of a body and its CRLF at the front of a buffer.
enum Body {
    /// Not all there yet.
    Waiting,
    /// Split off the buffer, CRLF removed.
    Complete(Bytes),
    /// The two bytes after the body were not a CRLF (all were consumed).
    NoCrlf,
}

/// Takes a body of `len` bytes and its CRLF off `buf` (copied when short:
/// see [`COPY_BODIES_BELOW`]), or reserves room for them (a bounded amount
/// at a time) if they have not all arrived.
fn take_body(buf: &mut BytesMut, len: u32) -> Body {
    let len = len as usize;
    if buf.len() < len + 2 {
        buf.reserve((len + 2 - buf.len()).min(MAX_RESERVE));
        return Body::Waiting;
    }
    if buf[len..len + 2] != *b"\r\n" {
        buf.advance(len + 2);
        return Body::NoCrlf;
    }
    let body = if len < COPY_BODIES_BELOW {
        let body = Bytes::copy_from_slice(&buf[..len]);
        buf.advance(len);
        body
    } else {
        buf.split_to(len).freeze()
    };
    buf.advance(2);
    Body::Complete(body)
}

impl Encoder<&Response> for ServerCodec {
    type Error = io::Error;

    fn encode(&mut self, response: &Response, dst: &mut BytesMut) -> io::Result<()> {
        encode_response(response, dst);
        Ok(())
    }
}

impl Encoder<Response> for ServerCodec {
    type Error = io::Error;

    fn encode(&mut self, response: Response, dst: &mut BytesMut) -> io::Result<()> {
        self.encode(&response, dst)
    }
}

/// The client's end: encodes commands, decodes replies. A reply the client
/// cannot read is an `InvalidData` error, after which the stream is lost.
#[derive(Debug, Default)]
pub struct ClientCodec {
    /// A reply line already read, whose body is still on its way.
    pending: Option<(BodyKind, u32)>,
    /// A `RESERVED_BATCH` being read: the jobs still to come, and those
    /// read so far.
    batch: Option<(u32, Vec<(JobId, Bytes)>)>,
}

impl ClientCodec {
    pub fn new() -> ClientCodec {
        ClientCodec::default()
    }
}

fn malformed() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, crate::parse::MalformedResponse)
}

impl Decoder for ClientCodec {
    type Item = Response;
    type Error = io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> io::Result<Option<Response>> {
        loop {
            let one = self.decode_one(buf)?;
            let Some((left, jobs)) = &mut self.batch else {
                return match one {
                    Some(Batched::Whole(response)) => Ok(Some(response)),
                    Some(Batched::Start(0)) => Ok(Some(Response::ReservedBatch(Vec::new()))),
                    Some(Batched::Start(n)) => {
                        self.batch = Some((n, Vec::with_capacity(n.min(1000) as usize)));
                        continue;
                    }
                    None => Ok(None),
                };
            };
            match one {
                None => return Ok(None),
                Some(Batched::Whole(Response::Reserved { id, body })) => {
                    jobs.push((id, body));
                    *left -= 1;
                    if *left == 0 {
                        let (_, jobs) = self.batch.take().expect("a batch");
                        return Ok(Some(Response::ReservedBatch(jobs)));
                    }
                }
                Some(_) => return Err(malformed()),
            }
        }
    }
}

/// One reply as read alone: a whole reply, or the start of a batch.
enum Batched {
    Whole(Response),
    Start(u32),
}

impl ClientCodec {
    fn decode_one(&mut self, buf: &mut BytesMut) -> io::Result<Option<Batched>> {
        let (kind, bytes) = match self.pending {
            Some(pending) => pending,
            None => {
                let len = match find_line_end(buf) {
                    LineEnd::NeedMore => return Ok(None),
                    LineEnd::TooLong => return Err(malformed()),
                    LineEnd::Found(len) => len,
                };
                let head = parse_response_line(&buf[..len - 2]).map_err(|_| malformed())?;
                buf.advance(len);
                match head {
                    ResponseHead::Line(response) => return Ok(Some(Batched::Whole(response))),
                    ResponseHead::Batch(n) => return Ok(Some(Batched::Start(n))),
                    ResponseHead::WithBody { kind, bytes } => *self.pending.insert((kind, bytes)),
                }
            }
        };
        let response = match take_body(buf, bytes) {
            Body::Waiting => return Ok(None),
            Body::Complete(body) => kind.with_body(body),
            Body::NoCrlf => return Err(malformed()),
        };
        self.pending = None;
        Ok(Some(Batched::Whole(response)))
    }
}

impl Encoder<&Command> for ClientCodec {
    type Error = io::Error;

    fn encode(&mut self, command: &Command, dst: &mut BytesMut) -> io::Result<()> {
        encode_command(command, dst);
        Ok(())
    }
}

impl Encoder<Command> for ClientCodec {
    type Error = io::Error;

    fn encode(&mut self, command: Command, dst: &mut BytesMut) -> io::Result<()> {
        self.encode(&command, dst)
    }
}
