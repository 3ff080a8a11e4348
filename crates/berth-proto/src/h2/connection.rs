//! One HTTP/2 connection, server side: frames in, requests to the [`Handler`], frames out.
//!
//! The shape is [`http::Session`](crate::http::Session)'s: the driver lends its input and
//! output buffers to [`Connection::process`] with the time, and does what the returned
//! [`Step`] says. What differs is that many streams are in flight at once: a job offloaded for
//! one stream does not stop the connection, which goes on reading, answering other streams
//! and taking replies in any order ([`Connection::complete`] names the stream).
//!
//! ```text
//!   input ──> preface, frames ──> stream states (§5.1) ──> Request ──> Handler::handle
//!                │                    │                                 │ Done: Response
//!                │ SETTINGS, PING     │ WINDOW_UPDATE as the body       │ Offload(job) ──> Step
//!                v                    v is taken                        v
//!   output <── acks, GOAWAY <──── HEADERS + DATA within the peer's windows <── Reply
//! ```
//!
//! Call order for a driver:
//! 1. append bytes read to `input`, call [`Connection::process`] with `now`;
//! 2. write out `output` whatever the step;
//! 3. on [`Step::Offload`], run the job and give its reply to [`Connection::complete`] with
//!    the stream it names, whenever it is done; call `process` again at once (more input may
//!    be waiting: other streams go on meanwhile); on [`Step::Open`], likewise open the file
//!    and give what was found to [`Connection::file`];
//! 4. on [`Step::Flush`], write the output, then call `process` again;
//! 5. on [`Step::Read`], read more (the connection is always read, jobs out or not), or wait
//!    for a reply, a streamed body's producer (the waker given to
//!    [`Connection::set_waker`] says when; then call `process`), or the deadline of
//!    [`Connection::poll_timeout`], then [`Connection::expire`];
//! 6. on [`Step::Close`], write out `output` and close.
//!
//! Errors follow RFC 9113 §5.4: a connection error writes GOAWAY with its code and closes; a
//! stream error writes RST_STREAM and the connection goes on. Abuse ([`Abuse`]) is a
//! connection error with ENHANCE_YOUR_CALM, recorded in [`Connection::counts`].

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use super::answer;
use super::config::{Abuse, Counts, H2Config};
use super::frame::{
    self, flag, setting, ErrorCode, Frame, FrameError, Header, DEFAULT_MAX_FRAME, DEFAULT_WINDOW,
    HEADER_LEN, MAX_WINDOW, PREFACE,
};
use super::head::{check_request, check_trailers, Refusal, ReqHead};
use super::hpack::{Decoder, Encoder, Field, ListLimits};
use crate::http::files::{self, FileError, FileMeta, FileRequest};
use crate::http::response::{write_head, write_response, Head, Stamp};
use crate::http::{BodyEncoder, BodyStream, StreamWriter, Taken};
use crate::http::{Context, Handled, Handler, Reply, Response, Timeouts, Version};

/// What the driver must do next.
#[derive(Debug, PartialEq, Eq)]
pub enum Step<J> {
    /// Write the output, then read more input (or wait for a reply, a waker or the deadline).
    Read,
    /// The output passed the high-water mark: write it, then call `process` again.
    Flush,
    /// Run `job` for `stream` and pass its reply to [`Connection::complete`] with that
    /// stream; call `process` again now, without waiting for it.
    Offload {
        /// The stream the reply answers.
        stream: u32,
        /// The job.
        job: J,
    },
    /// Open the file `request` names (under the server's root, never outside it) and pass
    /// what was found to [`Connection::file`] with `stream`; call `process` again now, as
    /// for a job.
    Open {
        /// The stream the file answers.
        stream: u32,
        /// The file asked for.
        request: FileRequest,
    },
    /// Write the output, then close the connection.
    Close,
}

/// Work a stream hands the driver.
enum Out<J> {
    /// A job to run for the stream.
    Job(u32, J),
    /// A file to open for the stream.
    Open(u32, FileRequest),
}

/// A file the driver opened for a stream, read where it is as the windows allow.
pub trait FileRead: Send {
    /// Reads into `buf` from `offset`; fewer bytes than asked only at the end of the file.
    fn read_at(&mut self, buf: &mut [u8], offset: u64) -> std::io::Result<usize>;
}

impl FileRead for Vec<u8> {
    fn read_at(&mut self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let from = usize::try_from(offset).map_or(self.len(), |o| o.min(self.len()));
        let n = buf.len().min(self.len() - from);
        buf[..n].copy_from_slice(&self[from..from + n]);
        Ok(n)
    }
}

/// Closed streams remembered, to tell a late frame on one from a frame on a stream never
/// opened (they are answered differently, RFC 9113 §5.1).
const REMEMBERED: usize = 64;

/// A streamed reply's bytes are taken from its producer this much at a time.
const TAKE: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading the client's preface (24 bytes).
    Preface,
    /// The preface is in; its SETTINGS frame must come next.
    Settings,
    /// Serving.
    Open,
    /// A GOAWAY for an error was written, or the connection is over.
    Closed,
}

/// Where a stream's answer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// The handler has not been asked (the body is still arriving).
    Pending,
    /// A job is out for it.
    Job,
    /// The head is written; data may remain.
    Sending,
    /// END_STREAM was sent.
    Done,
}

#[derive(Debug)]
struct Stream {
    /// The client sent END_STREAM.
    recv_closed: bool,
    answer: Answer,
    /// Reset (by either side) while its job is out: the reply, when it comes, is dropped.
    reset: bool,
    /// How much more the client may send on it.
    recv_window: i64,
    /// Body bytes taken and not yet granted back with WINDOW_UPDATE.
    grant: u32,
    /// Body bytes pushed to a streaming job and not yet granted (granted once it has room).
    held: u32,
    /// How much more berth may send on it.
    send_window: i64,
    /// The request's head, kept until its body is complete.
    head: Option<Box<ReqHead>>,
    /// The request body as it arrives (for a handler that takes it whole).
    body: Vec<u8>,
    content_length: Option<u64>,
    received: u64,
    /// The body went past the limit: it is read and dropped (the answer is 413).
    discard: bool,
    /// The body goes to a job as it arrives.
    feed: Option<StreamWriter>,
    /// The answer is for HEAD: no body bytes.
    head_only: bool,
    /// Response body bytes waiting for window, from `out_pos`.
    out: Vec<u8>,
    out_pos: usize,
    /// The response ends after `out` (no producer left).
    out_end: bool,
    /// Where the body's bytes come from once `out` is sent, if not all in `out`.
    source: Option<Source>,
    /// Fields that end the answer after its body (the producer's trailers): a HEADERS frame
    /// with END_STREAM instead of the last DATA frame's flag.
    trailers: Vec<(String, Vec<u8>)>,
}

/// Where a response body's bytes come from, a piece at a time as the windows take them.
#[derive(Debug)]
enum Source {
    /// A streamed reply's producer.
    Stream(BodyStream),
    /// A file the driver opened.
    File(Box<FileBody>),
}

/// A file body being sent: `left` bytes from `offset`, encoded on the way if asked.
struct FileBody {
    file: Box<dyn FileRead>,
    offset: u64,
    left: u64,
    encoder: Option<BodyEncoder>,
}

impl std::fmt::Debug for FileBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileBody")
            .field("offset", &self.offset)
            .field("left", &self.left)
            .field("encoder", &self.encoder)
            .finish()
    }
}

impl FileBody {
    /// Appends the next piece (at most `max` plain bytes) to `out`, and the encoder's
    /// trailer once the file is read. `Ok(true)`: the body is complete. A file that ends
    /// early (it shrank since it was opened) is an error: the head promised its length.
    fn take(&mut self, out: &mut Vec<u8>, max: usize) -> std::io::Result<bool> {
        if self.left > 0 {
            let n = usize::try_from(self.left).map_or(max, |l| l.min(max));
            let Some(encoder) = &mut self.encoder else {
                let start = out.len();
                out.resize(start + n, 0);
                if !read_full(&mut *self.file, &mut out[start..], self.offset)? {
                    out.truncate(start);
                    return Err(short());
                }
                self.offset += n as u64;
                self.left -= n as u64;
                return Ok(self.left == 0);
            };
            // An encoder may hold a whole piece back: pieces go in until something comes out
            // (or the file is in), so that a take always has bytes for the window.
            let start = out.len();
            let mut plain = vec![0; n];
            while self.left > 0 && out.len() == start {
                let n = usize::try_from(self.left).map_or(n, |l| l.min(n));
                if !read_full(&mut *self.file, &mut plain[..n], self.offset)? {
                    return Err(short());
                }
                self.offset += n as u64;
                self.left -= n as u64;
                encoder
                    .feed(&plain[..n], out)
                    .map_err(std::io::Error::other)?;
            }
            if self.left > 0 {
                return Ok(false);
            }
        }
        if let Some(encoder) = &mut self.encoder {
            encoder.finish(out).map_err(std::io::Error::other)?;
        }
        Ok(true)
    }
}

/// Fills `buf` from `offset`; false if the file ended first.
fn read_full(file: &mut dyn FileRead, buf: &mut [u8], mut offset: u64) -> std::io::Result<bool> {
    let mut at = 0;
    while at < buf.len() {
        match file.read_at(&mut buf[at..], offset) {
            Ok(0) => return Ok(false),
            Ok(n) => {
                at += n;
                offset += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

fn short() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the file ended early")
}

impl Stream {
    fn new(recv_window: i64, send_window: i64) -> Self {
        Stream {
            recv_closed: false,
            answer: Answer::Pending,
            reset: false,
            recv_window,
            grant: 0,
            held: 0,
            send_window,
            head: None,
            body: Vec::new(),
            content_length: None,
            received: 0,
            discard: false,
            feed: None,
            head_only: false,
            out: Vec::new(),
            out_pos: 0,
            out_end: false,
            source: None,
            trailers: Vec::new(),
        }
    }
}

/// What a header block being received belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockFor {
    /// A new stream's request.
    Request { self_dependent: bool },
    /// An open stream's trailers.
    Trailers,
    /// A stream whose receiving side is closed: STREAM_CLOSED once decoded.
    Closed,
    /// A stream berth reset or will not serve: decoded (HPACK state) and dropped.
    Ignore,
    /// A stream closed long ago or never opened below the highest id: connection error.
    Gone(ErrorCode),
}

#[derive(Debug)]
struct Block {
    stream: u32,
    end_stream: bool,
    for_: BlockFor,
    buf: Vec<u8>,
    continuations: u32,
}

/// A reason to end the connection.
enum Fail {
    /// Connection error (RFC 9113 §5.4.1).
    Conn(ErrorCode, &'static str),
    /// Abuse: ENHANCE_YOUR_CALM.
    Calm(Abuse),
}

impl From<FrameError> for Fail {
    fn from(e: FrameError) -> Self {
        Fail::Conn(e.code, e.reason)
    }
}

/// Counters over [`H2Config::rate_window`].
#[derive(Debug, Default)]
struct Rates {
    since: Option<Instant>,
    resets: u32,
    settings: u32,
    pings: u32,
}

/// One HTTP/2 connection's server state. See the [module docs](self) for the call order.
pub struct Connection {
    config: H2Config,
    /// The client's address, for each request ([`Request::peer`]).
    peer: Option<std::net::SocketAddr>,
    phase: Phase,
    /// Our SETTINGS were written.
    started: bool,
    /// The client acknowledged our SETTINGS.
    acked: bool,
    decoder: Decoder,
    /// Indexes what answers repeat (`server`, `date`, `content-type`).
    encoder: Encoder,
    /// The header block of an answer being written (kept: no allocation per answer).
    answer_block: Vec<u8>,
    streams: BTreeMap<u32, Stream>,
    /// The highest stream id the client used: ids at or below it are no longer idle (§5.1.1).
    highest: u32,
    /// The highest stream id berth took up (served, refused or reset): what GOAWAY names.
    /// After a GOAWAY it no longer moves: later streams are ignored (§6.8).
    last_stream: u32,
    /// Streams closed after END_STREAM both ways (late HEADERS: STREAM_CLOSED).
    closed: VecDeque<u32>,
    /// Streams berth reset (late frames on them are dropped, §5.4.2).
    reset: VecDeque<u32>,
    block: Option<Block>,
    /// The client's SETTINGS_INITIAL_WINDOW_SIZE.
    peer_window: i64,
    /// The client's SETTINGS_MAX_FRAME_SIZE.
    peer_max_frame: usize,
    /// How much more berth may send on the connection.
    send_window: i64,
    /// How much more the client may send on the connection.
    recv_window: i64,
    /// Connection-level bytes taken, not yet granted back.
    conn_grant: u32,
    /// GOAWAY (NO_ERROR) asked for: a drain, or the stream budget spent.
    drain: bool,
    /// The GOAWAY of a drain was written.
    goaway_sent: bool,
    /// The client sent GOAWAY.
    peer_gone: bool,
    counts: Counts,
    rates: Rates,
    /// Frames in a row that carried nothing.
    empty: u32,
    window_updates: u64,
    priorities: u64,
    data_frames_sent: u64,
    /// When the header timeout started (the preface, or a header block, in progress).
    head_since: Option<Instant>,
    /// When data first waited for a window that did not open.
    stall_since: Option<Instant>,
    /// Response data waits for the client to open a window.
    stalled: bool,
    waker: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("phase", &self.phase)
            .field("streams", &self.streams.len())
            .field("last_stream", &self.last_stream)
            .field("counts", &self.counts)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// The address of the connection's peer, which every request of it carries
    /// ([`Request::peer`](crate::http::Request::peer)).
    pub fn set_peer(&mut self, peer: Option<std::net::SocketAddr>) {
        self.peer = peer;
    }

    /// A connection at its start, before the client's preface.
    pub fn new(config: H2Config) -> Self {
        Connection {
            peer: None,
            decoder: Decoder::new(config.header_table_size as usize),
            encoder: Encoder::default(),
            answer_block: Vec::new(),
            config,
            phase: Phase::Preface,
            started: false,
            acked: false,
            streams: BTreeMap::new(),
            highest: 0,
            last_stream: 0,
            closed: VecDeque::new(),
            reset: VecDeque::new(),
            block: None,
            peer_window: i64::from(DEFAULT_WINDOW),
            peer_max_frame: DEFAULT_MAX_FRAME as usize,
            send_window: i64::from(DEFAULT_WINDOW),
            recv_window: i64::from(DEFAULT_WINDOW),
            conn_grant: 0,
            drain: false,
            goaway_sent: false,
            peer_gone: false,
            counts: Counts::default(),
            rates: Rates::default(),
            empty: 0,
            window_updates: 0,
            priorities: 0,
            data_frames_sent: 0,
            head_since: None,
            stall_since: None,
            stalled: false,
            waker: None,
        }
    }

    /// What the connection has counted (requests, resets, refusals, the abuse it was ended
    /// for), for the driver's `/stats`.
    pub fn counts(&self) -> &Counts {
        &self.counts
    }

    /// Streams open (jobs out for reset streams included).
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// The client's preface and SETTINGS are in: the connection serves streams.
    pub fn is_open(&self) -> bool {
        self.phase == Phase::Open
    }

    /// A drain was asked for ([`Connection::close_after_response`]).
    pub fn draining(&self) -> bool {
        self.drain
    }

    /// A drain was asked for ([`Connection::close_after_response`]) and its GOAWAY is not
    /// written yet: the connection has something to say before it closes.
    pub fn goaway_pending(&self) -> bool {
        self.drain && !self.goaway_sent
    }

    /// True once the connection is over (its last output written, it is to be closed).
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    /// Bytes the connection holds for its streams: request bodies being buffered, answers
    /// waiting for window, a header block being received. Bounded by the settings: each body
    /// by [`Limits::max_body_bytes`](crate::http::Limits::max_body_bytes), each answer by what
    /// one reply or one take of a streamed one carries, the block by twice
    /// [`H2Config::max_header_list_size`].
    pub fn buffered(&self) -> usize {
        let streams: usize = self
            .streams
            .values()
            .map(|s| s.body.len() + s.out.len())
            .sum();
        streams + self.block.as_ref().map_or(0, |b| b.buf.len())
    }

    /// The HPACK dynamic table's size in bytes (at most [`H2Config::header_table_size`]).
    pub fn table_size(&self) -> usize {
        self.decoder.table_size()
    }

    /// Jobs out for this connection's streams.
    pub fn jobs_out(&self) -> usize {
        self.streams
            .values()
            .filter(|s| s.answer == Answer::Job)
            .count()
    }

    /// How a streamed reply's producer wakes the driver when it pushes after the connection
    /// found it empty: the driver then calls [`Connection::process`].
    pub fn set_waker(&mut self, wake: Arc<dyn Fn() + Send + Sync>) {
        self.waker = Some(wake);
    }

    /// Winds the connection down (a drain): GOAWAY NO_ERROR with the last stream id at the
    /// next `process`; streams up to it are answered, later ones ignored (the client retries
    /// them elsewhere, RFC 9113 §6.8), and the connection closes once they are done.
    pub fn close_after_response(&mut self) {
        self.drain = true;
    }

    fn local_window(&self) -> i64 {
        if self.acked {
            i64::from(self.config.initial_window)
        } else {
            i64::from(DEFAULT_WINDOW)
        }
    }

    /// The server's connection preface: SETTINGS, and the connection window raised.
    fn start(&mut self, output: &mut Vec<u8>) {
        self.started = true;
        let c = &self.config;
        let mut params = vec![
            (setting::MAX_CONCURRENT_STREAMS, c.max_concurrent_streams),
            (setting::MAX_HEADER_LIST_SIZE, c.max_header_list_size),
            // A server never pushes; saying so is allowed (value 0, RFC 9113 §6.5.2).
            (setting::ENABLE_PUSH, 0),
        ];
        if c.initial_window != DEFAULT_WINDOW {
            params.push((setting::INITIAL_WINDOW_SIZE, c.initial_window));
        }
        if c.max_frame_size != DEFAULT_MAX_FRAME {
            params.push((setting::MAX_FRAME_SIZE, c.max_frame_size));
        }
        if c.header_table_size != 4096 {
            params.push((setting::HEADER_TABLE_SIZE, c.header_table_size));
        }
        frame::write_settings(output, &params);
        if c.connection_window > DEFAULT_WINDOW {
            let more = c.connection_window - DEFAULT_WINDOW;
            frame::write_window_update(output, 0, more);
            self.recv_window += i64::from(more);
        }
    }

    /// Reads what `input` holds, answers what it can and sends what the windows allow.
    /// Bytes used are removed from `input`.
    pub fn process<H: Handler>(
        &mut self,
        now: Instant,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Step<H::Job> {
        if self.phase == Phase::Closed {
            input.clear();
            return Step::Close;
        }
        if !self.started {
            self.start(output);
        }
        let mut used = 0;
        let result = self.read_frames(now, input, &mut used, output, cx, handler);
        input.drain(..used);
        match result {
            Err(fail) => {
                // Answers already made go out first, as far as the windows allow: the
                // client is told as much as it asked for before the error.
                self.send_data(output, cx);
                return self.fail(fail, input, output);
            }
            Ok(Some(Out::Job(stream, job))) => return Step::Offload { stream, job },
            Ok(Some(Out::Open(stream, request))) => return Step::Open { stream, request },
            Ok(None) => {}
        }
        // A drain's GOAWAY names the last stream of what was received before it was written:
        // frames already in hand were sent before the client could hear of it (a request in
        // the input is answered, as HTTP/1.1 answers it with `Connection: close`).
        if self.drain {
            self.goaway_now(output);
        }
        self.settle(output, cx)
    }

    /// Sends what can be sent and says what comes next, once input is read.
    fn settle<J>(&mut self, output: &mut Vec<u8>, cx: &Context<'_>) -> Step<J> {
        self.grant_windows(output);
        let full = self.send_data(output, cx);
        if self.streams.is_empty() {
            // An emptied BTreeMap keeps its leaf node (room for 11 streams, 1.5 KiB): an idle
            // connection gives it back (issue 32: an idle connection costs at most 2 KiB).
            self.streams = BTreeMap::new();
        }
        if self.phase == Phase::Closed {
            return Step::Close;
        }
        if self.peer_gone && self.streams.is_empty() {
            // RFC 9113 §6.8: an endpoint should send GOAWAY before it closes, even after the
            // peer's. The closing is left to the client (or the idle timeout): it may still
            // send PING or SETTINGS, and closing under them would reset the connection.
            self.goaway_now(output);
        }
        if self.goaway_sent && !self.peer_gone && self.streams.is_empty() {
            // Our drain is done.
            self.phase = Phase::Closed;
            return Step::Close;
        }
        if full {
            Step::Flush
        } else {
            Step::Read
        }
    }

    /// Writes the GOAWAY of a drain (NO_ERROR, the last stream taken up), once.
    fn goaway_now(&mut self, output: &mut Vec<u8>) {
        if !self.goaway_sent {
            self.goaway_sent = true;
            frame::write_goaway(output, self.last_stream, ErrorCode::NO_ERROR, b"");
        }
    }

    /// Ends the connection for `fail`: GOAWAY with its code, then close.
    fn fail<J>(&mut self, fail: Fail, input: &mut Vec<u8>, output: &mut Vec<u8>) -> Step<J> {
        let (code, reason) = match fail {
            Fail::Conn(code, reason) => (code, reason),
            Fail::Calm(abuse) => {
                self.counts.abuse = Some(abuse);
                (ErrorCode::ENHANCE_YOUR_CALM, "enhance your calm")
            }
        };
        frame::write_goaway(output, self.last_stream, code, reason.as_bytes());
        self.close_all();
        input.clear();
        Step::Close
    }

    /// Drops every stream: producers and streaming jobs are told the connection went.
    fn close_all(&mut self) {
        for (_, s) in std::mem::take(&mut self.streams) {
            if let Some(feed) = s.feed {
                feed.abort();
            }
        }
        self.phase = Phase::Closed;
    }

    /// Parses frames from `input[*used..]` until it runs out, the output is full, a job is
    /// to be offloaded, or the connection fails.
    #[allow(clippy::type_complexity)]
    fn read_frames<H: Handler>(
        &mut self,
        now: Instant,
        input: &[u8],
        used: &mut usize,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Result<Option<Out<H::Job>>, Fail> {
        loop {
            // A peer that sends and does not read gets no more answers queued: the driver
            // writes (or times the write out) before more is read. Bounds memory against
            // PING and SETTINGS floods from a client that never reads.
            if !output.is_empty() && output.len() >= cx.limits.output_high_water {
                return Ok(None);
            }
            let rest = &input[*used..];
            if self.phase == Phase::Preface {
                let n = rest.len().min(PREFACE.len());
                if rest[..n] != PREFACE[..n] {
                    return Err(Fail::Conn(
                        ErrorCode::PROTOCOL_ERROR,
                        "bad connection preface",
                    ));
                }
                if n < PREFACE.len() {
                    return Ok(None);
                }
                *used += n;
                self.phase = Phase::Settings;
                continue;
            }
            let Some(h) = Header::parse(rest) else {
                return Ok(None);
            };
            if h.len > self.config.max_frame_size {
                return Err(Fail::Conn(ErrorCode::FRAME_SIZE_ERROR, "frame too large"));
            }
            let end = HEADER_LEN + h.len as usize;
            if rest.len() < end {
                return Ok(None);
            }
            *used += end;
            let payload = &rest[HEADER_LEN..end];
            if let Some(job) = self.on_frame(now, &h, payload, output, cx, handler)? {
                return Ok(Some(job));
            }
        }
    }

    /// Handles one whole frame.
    #[allow(clippy::type_complexity)]
    fn on_frame<H: Handler>(
        &mut self,
        now: Instant,
        h: &Header,
        payload: &[u8],
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Result<Option<Out<H::Job>>, Fail> {
        if let Some(b) = &self.block {
            // §6.2: nothing may come between a header block's frames.
            if h.kind != frame::kind::CONTINUATION || h.stream != b.stream {
                return Err(Fail::Conn(
                    ErrorCode::PROTOCOL_ERROR,
                    "frame inside a header block",
                ));
            }
        }
        if self.phase == Phase::Settings && (h.kind != frame::kind::SETTINGS || h.has(flag::ACK)) {
            return Err(Fail::Conn(
                ErrorCode::PROTOCOL_ERROR,
                "preface not followed by SETTINGS",
            ));
        }
        let frame = match Frame::parse(h, payload) {
            Ok(f) => f,
            Err(FrameError {
                stream: Some(id),
                code,
                ..
            }) => {
                self.reset_stream(id, code, output)?;
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        };
        match frame {
            Frame::Data {
                stream,
                end_stream,
                data,
                flow,
            } => self.on_data(stream, end_stream, data, flow, output, cx, handler),
            Frame::Headers {
                stream,
                end_stream,
                end_headers,
                block,
                self_dependent,
            } => {
                self.on_headers(stream, end_stream, block, self_dependent)?;
                self.count_empty(block.is_empty() && !end_headers && !end_stream)?;
                if end_headers {
                    return self.finish_block(output, cx, handler);
                }
                Ok(None)
            }
            Frame::Continuation {
                stream: _,
                end_headers,
                block,
            } => {
                let Some(b) = &mut self.block else {
                    return Err(Fail::Conn(
                        ErrorCode::PROTOCOL_ERROR,
                        "CONTINUATION without a header block",
                    ));
                };
                b.continuations += 1;
                b.buf.extend_from_slice(block);
                if b.continuations > self.config.max_continuations
                    || b.buf.len() > 2 * self.config.max_header_list_size as usize
                {
                    return Err(Fail::Calm(Abuse::ContinuationFlood));
                }
                self.count_empty(block.is_empty() && !end_headers)?;
                if end_headers {
                    return self.finish_block(output, cx, handler);
                }
                Ok(None)
            }
            Frame::Priority { .. } => {
                self.priorities += 1;
                let allowed = u64::from(self.config.priority_allowance) * (1 + self.counts.streams);
                if self.priorities > allowed {
                    return Err(Fail::Calm(Abuse::PriorityFlood));
                }
                Ok(None)
            }
            Frame::RstStream { stream, .. } => {
                self.on_rst(now, stream)?;
                Ok(None)
            }
            Frame::Settings { ack, params } => {
                self.on_settings(now, ack, params, output)?;
                Ok(None)
            }
            Frame::PushPromise => Err(Fail::Conn(
                ErrorCode::PROTOCOL_ERROR,
                "a client sent PUSH_PROMISE",
            )),
            Frame::Ping { ack, data } => {
                if !ack {
                    self.roll(now);
                    self.rates.pings += 1;
                    if self.rates.pings > self.config.max_pings {
                        return Err(Fail::Calm(Abuse::PingFlood));
                    }
                    frame::write_ping_ack(output, data);
                }
                Ok(None)
            }
            Frame::GoAway { .. } => {
                self.peer_gone = true;
                Ok(None)
            }
            Frame::WindowUpdate { stream, increment } => {
                self.on_window_update(stream, increment, output)?;
                Ok(None)
            }
            Frame::Unknown => Ok(None),
        }
    }

    /// A stream the client opened after berth's GOAWAY: its frames are dropped (§6.8).
    fn ignored(&self, id: u32) -> bool {
        self.goaway_sent && id > self.last_stream
    }

    /// Counts a frame that carries nothing (or resets the count).
    fn count_empty(&mut self, empty: bool) -> Result<(), Fail> {
        if !empty {
            self.empty = 0;
            return Ok(());
        }
        self.empty += 1;
        if self.empty > self.config.max_empty_frames {
            return Err(Fail::Calm(Abuse::EmptyFrameFlood));
        }
        Ok(())
    }

    /// Starts the rate window over if it has run out.
    fn roll(&mut self, now: Instant) {
        match self.rates.since {
            Some(since) if now.saturating_duration_since(since) < self.config.rate_window => {}
            _ => {
                self.rates = Rates {
                    since: Some(now),
                    ..Rates::default()
                }
            }
        }
    }

    /// Writes RST_STREAM for a stream error the client caused, and counts it (MadeYouReset).
    fn reset_stream(&mut self, id: u32, code: ErrorCode, output: &mut Vec<u8>) -> Result<(), Fail> {
        frame::write_rst(output, id, code);
        self.counts.provoked_resets += 1;
        self.forget(id);
        if self.counts.provoked_resets > u64::from(self.config.max_provoked_resets) {
            return Err(Fail::Calm(Abuse::MadeYouReset));
        }
        Ok(())
    }

    /// berth reset the stream: it is dropped (or kept as a zombie while its job is out), and
    /// late frames on it are ignored (§5.4.2: they may have been sent before the RST_STREAM
    /// arrived).
    fn forget(&mut self, id: u32) {
        remember(&mut self.reset, id);
        self.drop_stream(id);
    }

    /// The stream is dropped, or kept as a zombie while its job is out.
    fn drop_stream(&mut self, id: u32) {
        if let Some(s) = self.streams.get_mut(&id) {
            if let Some(feed) = s.feed.take() {
                feed.abort();
            }
            s.source = None;
            s.out = Vec::new();
            if s.answer == Answer::Job {
                s.reset = true;
            } else {
                self.streams.remove(&id);
            }
        }
    }

    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn on_data<H: Handler>(
        &mut self,
        id: u32,
        end_stream: bool,
        data: &[u8],
        flow: u32,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Result<Option<Out<H::Job>>, Fail> {
        self.recv_window -= i64::from(flow);
        if self.recv_window < 0 {
            return Err(Fail::Conn(
                ErrorCode::FLOW_CONTROL_ERROR,
                "DATA past the connection window",
            ));
        }
        // Whatever happens to the bytes, the connection has taken them: stream windows
        // bound what is held.
        self.conn_grant += flow;
        self.count_empty(data.is_empty() && !end_stream)?;
        let Some(s) = self.streams.get_mut(&id) else {
            if id > self.highest {
                return Err(Fail::Conn(
                    ErrorCode::PROTOCOL_ERROR,
                    "DATA on an idle stream",
                ));
            }
            if !self.ignored(id) && !self.reset.contains(&id) {
                self.reset_stream(id, ErrorCode::STREAM_CLOSED, output)?;
            }
            return Ok(None);
        };
        if s.reset {
            return Ok(None);
        }
        if s.recv_closed {
            self.reset_stream(id, ErrorCode::STREAM_CLOSED, output)?;
            return Ok(None);
        }
        s.recv_window -= i64::from(flow);
        if s.recv_window < 0 {
            self.reset_stream(id, ErrorCode::FLOW_CONTROL_ERROR, output)?;
            return Ok(None);
        }
        s.received += data.len() as u64;
        let pad = flow - data.len() as u32;
        s.grant += pad;
        if s.content_length.is_some_and(|n| s.received > n)
            || (end_stream && s.content_length.is_some_and(|n| s.received != n))
        {
            // §8.1.1: DATA that disagrees with content-length makes the request malformed.
            self.reset_stream(id, ErrorCode::PROTOCOL_ERROR, output)?;
            return Ok(None);
        }
        // Past the limit (streamed or not): the body is dropped from here on, whatever waits
        // for it is told, and the client is answered 413 at once, not after it sent the rest.
        let too_large = !s.discard && s.received > cx.limits.max_body_bytes as u64;
        if too_large {
            s.discard = true;
            s.body = Vec::new();
            s.head = None;
            if let Some(feed) = s.feed.take() {
                feed.abort();
            }
        }
        if s.discard {
            s.grant += data.len() as u32;
        } else if let Some(feed) = &s.feed {
            if !data.is_empty() && feed.push(data.to_vec()).is_err() {
                // The job stopped reading: the rest is dropped, and granted at once.
                s.feed = None;
                s.discard = true;
                s.grant += data.len() as u32;
            } else {
                // Granted as the job takes it (grant_windows).
                s.held += data.len() as u32;
            }
        } else {
            // Buffered whole for the handler: taking it into the body is consuming it.
            s.grant += data.len() as u32;
            s.body.extend_from_slice(data);
        }
        let answered = matches!(s.answer, Answer::Sending | Answer::Done);
        if end_stream {
            s.recv_closed = true;
        }
        if too_large && !answered {
            self.answer_status(id, 413, "request body too large", output, cx, handler);
        }
        if !end_stream {
            return Ok(None);
        }
        self.end_of_body(id, output, cx, handler)
    }

    /// The request's body is complete: its job is told, or its handler asked.
    #[allow(clippy::type_complexity)]
    fn end_of_body<H: Handler>(
        &mut self,
        id: u32,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Result<Option<Out<H::Job>>, Fail> {
        let Some(s) = self.streams.get_mut(&id) else {
            return Ok(None);
        };
        if let Some(feed) = s.feed.take() {
            feed.end();
        }
        if s.discard && s.answer == Answer::Pending {
            s.head = None;
            self.answer_status(id, 413, "request body too large", output, cx, handler);
            return Ok(None);
        }
        if s.answer == Answer::Done {
            self.streams.remove(&id);
            remember(&mut self.closed, id);
            return Ok(None);
        }
        match s.head.take() {
            Some(head) => {
                let body = std::mem::take(&mut s.body);
                Ok(self.dispatch(id, &head, &body, None, output, cx, handler))
            }
            None => Ok(None),
        }
    }

    /// Classifies a HEADERS frame and starts its block.
    fn on_headers(
        &mut self,
        id: u32,
        end_stream: bool,
        block: &[u8],
        self_dependent: bool,
    ) -> Result<(), Fail> {
        if id % 2 == 0 {
            return Err(Fail::Conn(
                ErrorCode::PROTOCOL_ERROR,
                "even stream id from a client",
            ));
        }
        let for_ = if let Some(s) = self.streams.get(&id) {
            if s.reset {
                BlockFor::Ignore
            } else if s.recv_closed {
                BlockFor::Closed
            } else {
                BlockFor::Trailers
            }
        } else if id > self.highest {
            self.highest = id;
            if self.goaway_sent {
                // §6.8: past the GOAWAY's last stream, the client retries elsewhere.
                BlockFor::Ignore
            } else {
                self.last_stream = id;
                BlockFor::Request { self_dependent }
            }
        } else if self.ignored(id) || self.reset.contains(&id) {
            BlockFor::Ignore
        } else if self.closed.contains(&id) {
            BlockFor::Gone(ErrorCode::STREAM_CLOSED)
        } else {
            BlockFor::Gone(ErrorCode::PROTOCOL_ERROR)
        };
        self.block = Some(Block {
            stream: id,
            end_stream,
            for_,
            buf: block.to_vec(),
            continuations: 0,
        });
        Ok(())
    }

    /// A header block is complete: decode it, and act on it.
    #[allow(clippy::type_complexity)]
    fn finish_block<H: Handler>(
        &mut self,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Result<Option<Out<H::Job>>, Fail> {
        let Some(block) = self.block.take() else {
            return Ok(None);
        };
        let id = block.stream;
        let limits = ListLimits {
            max_size: self.config.max_header_list_size as usize,
            max_fields: self.config.max_header_fields,
        };
        let mut fields = Vec::new();
        let decoded = self
            .decoder
            .decode(&block.buf, limits, &mut fields)
            .map_err(|_| Fail::Conn(ErrorCode::COMPRESSION_ERROR, "bad header block"))?;
        let bomb =
            self.config.max_header_list_size as usize * self.config.hpack_bomb_factor as usize;
        if decoded.size > bomb {
            return Err(Fail::Calm(Abuse::HpackBomb));
        }
        match block.for_ {
            BlockFor::Ignore => Ok(None),
            BlockFor::Gone(code) => Err(Fail::Conn(code, "HEADERS on a closed stream")),
            BlockFor::Closed => {
                self.reset_stream(id, ErrorCode::STREAM_CLOSED, output)?;
                Ok(None)
            }
            BlockFor::Trailers => {
                if !block.end_stream || decoded.over || check_trailers(&fields).is_err() {
                    self.reset_stream(id, ErrorCode::PROTOCOL_ERROR, output)?;
                    return Ok(None);
                }
                // Trailers are checked and dropped: berth's Request has no place for them.
                if let Some(s) = self.streams.get_mut(&id) {
                    if s.content_length.is_some_and(|n| s.received != n) {
                        self.reset_stream(id, ErrorCode::PROTOCOL_ERROR, output)?;
                        return Ok(None);
                    }
                    s.recv_closed = true;
                }
                self.end_of_body(id, output, cx, handler)
            }
            BlockFor::Request { self_dependent } => self.open_stream(
                id,
                block.end_stream,
                self_dependent,
                fields,
                decoded.over,
                output,
                cx,
                handler,
            ),
        }
    }

    /// A new stream's request head is in.
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn open_stream<H: Handler>(
        &mut self,
        id: u32,
        end_stream: bool,
        self_dependent: bool,
        fields: Vec<Field>,
        over: bool,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Result<Option<Out<H::Job>>, Fail> {
        self.counts.streams += 1;
        if self.counts.streams >= u64::from(self.config.max_streams_per_connection) && !self.drain {
            // This stream is the last served: GOAWAY with its id now, so that no stream read
            // after it in the same input is served past the budget.
            self.drain = true;
            self.counts.exhausted = 1;
            self.goaway_now(output);
        }
        if self_dependent {
            self.reset_stream(id, ErrorCode::PROTOCOL_ERROR, output)?;
            return Ok(None);
        }
        if self.streams.len() >= self.config.max_concurrent_streams as usize {
            frame::write_rst(output, id, ErrorCode::REFUSED_STREAM);
            remember(&mut self.reset, id);
            self.counts.refused += 1;
            return Ok(None);
        }
        let mut s = Stream::new(self.local_window(), self.peer_window);
        s.recv_closed = end_stream;
        self.streams.insert(id, s);
        if over {
            self.counts.oversized_heads += 1;
            self.mark_discard(id);
            self.answer_status(
                id,
                431,
                "request header fields too large",
                output,
                cx,
                handler,
            );
            return Ok(None);
        }
        let head = match check_request(fields, cx.limits) {
            Ok(head) => head,
            Err(Refusal::Malformed(_)) => {
                self.reset_stream(id, ErrorCode::PROTOCOL_ERROR, output)?;
                return Ok(None);
            }
            Err(Refusal::Status(status, why)) => {
                self.mark_discard(id);
                self.answer_status(id, status, why, output, cx, handler);
                return Ok(None);
            }
        };
        let mark = (self.local_window() / 2).max(1) as usize;
        let waker = self.waker.clone();
        let Some(s) = self.streams.get_mut(&id) else {
            return Ok(None);
        };
        s.head_only = head.head_only();
        s.content_length = head.content_length;
        if end_stream {
            if head.content_length.is_some_and(|n| n != 0) {
                self.reset_stream(id, ErrorCode::PROTOCOL_ERROR, output)?;
                return Ok(None);
            }
            return Ok(self.dispatch(id, &head, &[], None, output, cx, handler));
        }
        if head
            .content_length
            .is_some_and(|n| n > cx.limits.max_body_bytes as u64)
        {
            s.discard = true;
            self.answer_status(id, 413, "request body too large", output, cx, handler);
            return Ok(None);
        }
        if H::STREAMS_BODY && cx.stream_bodies {
            let (writer, stream) = crate::http::body_stream();
            // The stream window is granted back only for what the job took: the stream is
            // full (its room hook runs, waking the driver) at half a window, the batch
            // grant_windows sends.
            writer.full_at(mark);
            if let Some(wake) = waker {
                writer.on_room(move || wake());
            }
            s.feed = Some(writer);
            return Ok(self.dispatch(id, &head, &[], Some(stream), output, cx, handler));
        }
        s.head = Some(Box::new(head));
        Ok(None)
    }

    fn mark_discard(&mut self, id: u32) {
        if let Some(s) = self.streams.get_mut(&id) {
            s.discard = true;
        }
    }

    /// Asks the handler for a stream's answer.
    #[allow(clippy::too_many_arguments)]
    fn dispatch<H: Handler>(
        &mut self,
        id: u32,
        head: &ReqHead,
        body: &[u8],
        stream: Option<BodyStream>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Option<Out<H::Job>> {
        let head_only = head.head_only();
        let mut scratch = Vec::new();
        let mut res = Response {
            out: &mut scratch,
            stamp: cx.stamp(),
            keep_alive: true,
            head_only,
            version: Version::Http2,
            sent: None,
            head_len: 0,
        };
        let handled = head.with_request(body, self.peer, |req| match stream {
            Some(stream) => handler.handle_streamed(req, stream, &mut res),
            None => handler.handle(req, &mut res),
        });
        let (sent, head_len) = (res.sent, res.head_len);
        match (handled, sent) {
            (Handled::Offload(job), None) => {
                if let Some(s) = self.streams.get_mut(&id) {
                    s.answer = Answer::Job;
                }
                return Some(Out::Job(id, job));
            }
            (Handled::File(request), None) => {
                // The driver opens it (under its root) and hands it back to `file`.
                if let Some(s) = self.streams.get_mut(&id) {
                    s.answer = Answer::Job;
                }
                return Some(Out::Open(id, request));
            }
            (Handled::Upgrade(_), None) => {
                // HTTP/2 has no Upgrade (RFC 9113 §8.6): the request cannot have asked for it.
                self.answer_status(
                    id,
                    400,
                    "this resource must be asked for with an Upgrade",
                    output,
                    cx,
                    handler,
                );
            }
            (_, Some(status)) => {
                self.send_answer(id, status, scratch, head_len, None, output, cx.stamp());
                handler.on_response(status);
            }
            (Handled::Done, None) => {
                self.answer_status(id, 500, "handler sent no response", output, cx, handler);
            }
        }
        None
    }

    /// Answers with a status and a short text body.
    fn answer_status<H: Handler>(
        &mut self,
        id: u32,
        status: u16,
        why: &str,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) {
        let mut body = Vec::with_capacity(why.len() + 1);
        body.extend_from_slice(why.as_bytes());
        body.push(b'\n');
        let head = Head {
            status,
            content_type: "text/plain",
            extra: &[],
            fields: &[],
            keep_alive: true,
            version: Version::Http2,
            stamp: cx.stamp(),
        };
        let mut bytes = Vec::new();
        let head_len = write_response(&mut bytes, &head, &body, false);
        self.send_answer(id, status, bytes, head_len, None, output, cx.stamp());
        handler.on_response(status);
    }

    /// Hands what opening a stream's file found to the connection, which answers it (the
    /// head now; the bytes from the file as the windows open, encoded on the way if the
    /// request asked for that) and goes on as [`Connection::process`] does.
    #[allow(clippy::too_many_arguments)]
    pub fn file<H: Handler>(
        &mut self,
        stream: u32,
        request: &FileRequest,
        found: Result<(&FileMeta, Box<dyn FileRead>), FileError>,
        now: Instant,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Step<H::Job> {
        if self.awaited(stream) {
            self.answer_file(stream, request, found, output, cx, handler);
        }
        self.process(now, input, output, cx, handler)
    }

    /// Whether `stream` still waits for what the driver brings back (a reply, a file); one
    /// reset meanwhile is dropped now.
    fn awaited(&mut self, stream: u32) -> bool {
        match self.streams.get(&stream) {
            Some(s) if s.reset => {
                self.streams.remove(&stream);
                false
            }
            Some(s) => s.answer == Answer::Job,
            None => false,
        }
    }

    /// The same answer HTTP/1.1 gives ([`files::write_answer`]: validators, ranges, 304,
    /// 416, codings), its head made HEADERS.
    fn answer_file<H: Handler>(
        &mut self,
        id: u32,
        request: &FileRequest,
        found: Result<(&FileMeta, Box<dyn FileRead>), FileError>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) {
        let (meta, file) = match found {
            Ok((meta, file)) => (Ok(meta), Some(file)),
            Err(e) => (Err(e), None),
        };
        let mut bytes = Vec::new();
        let (status, send, head_len) =
            files::write_answer(&mut bytes, request, meta, true, Version::Http2, cx.stamp());
        let source = match (send, file) {
            (Some(send), Some(file)) => Some(Source::File(Box::new(FileBody {
                file,
                offset: send.offset,
                left: send.len,
                encoder: send.encode.map(|e| BodyEncoder::new(e, send.len)),
            }))),
            _ => None,
        };
        self.send_answer(id, status, bytes, head_len, source, output, cx.stamp());
        handler.on_response(status);
    }

    /// Writes a stream's HEADERS (`:status`, `stamp`'s fields, then `bytes[..head_len]` as
    /// [`answer::encode_head`] wrote it) and queues its body: the rest of `bytes`, then what
    /// `source` yields.
    #[allow(clippy::too_many_arguments)]
    fn send_answer(
        &mut self,
        id: u32,
        status: u16,
        bytes: Vec<u8>,
        head_len: usize,
        source: Option<Source>,
        output: &mut Vec<u8>,
        stamp: Stamp<'_>,
    ) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        let no_body = s.head_only || status < 200 || status == 204 || status == 304;
        let source = if no_body { None } else { source };
        let end = (no_body || bytes.len() == head_len) && source.is_none();
        self.answer_block.clear();
        answer::begin_block(
            &mut self.encoder,
            status,
            stamp,
            &bytes[..head_len],
            &mut self.answer_block,
        );
        frame::write_headers(output, id, &self.answer_block, end, self.peer_max_frame);
        if let (Some(Source::Stream(src)), Some(wake)) = (&source, &self.waker) {
            let wake = wake.clone();
            src.on_data(move || wake());
        }
        // The body goes out of the same buffer, after the head.
        (s.out, s.out_pos) = if no_body {
            (Vec::new(), 0)
        } else {
            (bytes, head_len)
        };
        s.out_end = source.is_none();
        s.source = source;
        s.answer = if end { Answer::Done } else { Answer::Sending };
        if end {
            self.stream_done(id, output);
        }
    }

    /// The answer is complete: the stream closes, or, while the client is still sending,
    /// is reset with NO_ERROR so it stops (RFC 9113 §8.1).
    fn stream_done(&mut self, id: u32, output: &mut Vec<u8>) {
        let Some(s) = self.streams.get(&id) else {
            return;
        };
        if s.recv_closed {
            self.streams.remove(&id);
            remember(&mut self.closed, id);
        } else {
            frame::write_rst(output, id, ErrorCode::NO_ERROR);
            self.forget(id);
        }
    }

    /// Hands a job's reply for `stream` to the connection, which answers it (if the stream
    /// is still there) and goes on as [`Connection::process`] does.
    #[allow(clippy::too_many_arguments)]
    pub fn complete<H: Handler>(
        &mut self,
        stream: u32,
        reply: Reply,
        now: Instant,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Step<H::Job> {
        if self.awaited(stream) {
            self.answer_reply(stream, reply, output, cx, handler);
        }
        self.process(now, input, output, cx, handler)
    }

    fn answer_reply<H: Handler>(
        &mut self,
        id: u32,
        reply: Reply,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) {
        if reply.switch.is_some() {
            self.answer_status(
                id,
                500,
                "cannot switch protocols over HTTP/2",
                output,
                cx,
                handler,
            );
            return;
        }
        // Written as HTTP/1.1 writes it (`Session::answer`, `Session::stream`): a streamed
        // body's length only if the reply declared one.
        let status = reply.status;
        let mut bytes = Vec::with_capacity(64 + reply.body.len());
        let head = reply.head(true, Version::Http2, cx.stamp());
        let head_len = match reply.stream {
            None => write_response(&mut bytes, &head, &reply.body, false),
            Some(_) => write_head(&mut bytes, &head, reply.length),
        };
        if reply.stream.is_some() {
            bytes.extend_from_slice(&reply.body);
        }
        self.send_answer(
            id,
            status,
            bytes,
            head_len,
            reply.stream.map(Source::Stream),
            output,
            cx.stamp(),
        );
        handler.on_response(status);
    }

    fn on_rst(&mut self, now: Instant, id: u32) -> Result<(), Fail> {
        if id > self.highest {
            return Err(Fail::Conn(
                ErrorCode::PROTOCOL_ERROR,
                "RST_STREAM on an idle stream",
            ));
        }
        let Some(s) = self.streams.get(&id) else {
            return Ok(());
        };
        if s.reset {
            return Ok(());
        }
        if s.answer != Answer::Done {
            self.counts.client_resets += 1;
            self.roll(now);
            self.rates.resets += 1;
            if self.rates.resets > self.config.max_client_resets {
                return Err(Fail::Calm(Abuse::RapidReset));
            }
        }
        // §5.1, "closed": a frame other than PRIORITY after the client's own RST_STREAM is a
        // stream error STREAM_CLOSED (unlike frames after berth's, which crossed it).
        remember(&mut self.closed, id);
        self.drop_stream(id);
        Ok(())
    }

    fn on_settings(
        &mut self,
        now: Instant,
        ack: bool,
        params: &[u8],
        output: &mut Vec<u8>,
    ) -> Result<(), Fail> {
        if ack {
            if !self.acked {
                // Our SETTINGS now apply: open streams' windows move by the difference.
                self.acked = true;
                let delta = i64::from(self.config.initial_window) - i64::from(DEFAULT_WINDOW);
                for s in self.streams.values_mut() {
                    s.recv_window += delta;
                }
            }
            return Ok(());
        }
        self.roll(now);
        self.rates.settings += 1;
        if self.rates.settings > self.config.max_settings {
            return Err(Fail::Calm(Abuse::SettingsFlood));
        }
        for (id, value) in frame::settings(params) {
            match id {
                setting::ENABLE_PUSH if value > 1 => {
                    return Err(Fail::Conn(
                        ErrorCode::PROTOCOL_ERROR,
                        "ENABLE_PUSH not 0 or 1",
                    ));
                }
                setting::INITIAL_WINDOW_SIZE => {
                    if i64::from(value) > MAX_WINDOW {
                        return Err(Fail::Conn(
                            ErrorCode::FLOW_CONTROL_ERROR,
                            "INITIAL_WINDOW_SIZE too large",
                        ));
                    }
                    let delta = i64::from(value) - self.peer_window;
                    self.peer_window = i64::from(value);
                    for s in self.streams.values_mut() {
                        s.send_window += delta;
                        if s.send_window > MAX_WINDOW {
                            return Err(Fail::Conn(
                                ErrorCode::FLOW_CONTROL_ERROR,
                                "stream window overflow",
                            ));
                        }
                    }
                }
                setting::MAX_FRAME_SIZE => {
                    if !(DEFAULT_MAX_FRAME..=frame::MAX_MAX_FRAME).contains(&value) {
                        return Err(Fail::Conn(
                            ErrorCode::PROTOCOL_ERROR,
                            "MAX_FRAME_SIZE out of range",
                        ));
                    }
                    self.peer_max_frame = value as usize;
                }
                // The encoder keeps its table within the client's (RFC 7541 §4.2).
                setting::HEADER_TABLE_SIZE => self.encoder.set_peer_max(value as usize),
                // berth pushes nothing; MAX_HEADER_LIST_SIZE is advisory (§6.5.2).
                _ => {}
            }
        }
        frame::write_settings_ack(output);
        if self.phase == Phase::Settings {
            self.phase = Phase::Open;
        }
        Ok(())
    }

    fn on_window_update(
        &mut self,
        id: u32,
        increment: u32,
        output: &mut Vec<u8>,
    ) -> Result<(), Fail> {
        self.window_updates += 1;
        let allowed = u64::from(self.config.window_update_allowance) + 10 * self.data_frames_sent;
        if self.window_updates > allowed {
            return Err(Fail::Calm(Abuse::WindowUpdateFlood));
        }
        if id == 0 {
            if increment == 0 {
                return Err(Fail::Conn(ErrorCode::PROTOCOL_ERROR, "WINDOW_UPDATE of 0"));
            }
            self.send_window += i64::from(increment);
            if self.send_window > MAX_WINDOW {
                return Err(Fail::Conn(
                    ErrorCode::FLOW_CONTROL_ERROR,
                    "connection window overflow",
                ));
            }
            return Ok(());
        }
        if id > self.highest {
            return Err(Fail::Conn(
                ErrorCode::PROTOCOL_ERROR,
                "WINDOW_UPDATE on an idle stream",
            ));
        }
        let Some(s) = self.streams.get_mut(&id) else {
            return Ok(());
        };
        if s.reset {
            return Ok(());
        }
        if increment == 0 {
            return self.reset_stream(id, ErrorCode::PROTOCOL_ERROR, output);
        }
        s.send_window += i64::from(increment);
        if s.send_window > MAX_WINDOW {
            return self.reset_stream(id, ErrorCode::FLOW_CONTROL_ERROR, output);
        }
        Ok(())
    }

    /// Sends WINDOW_UPDATE for what the application has taken, in batches of half a window.
    fn grant_windows(&mut self, output: &mut Vec<u8>) {
        let half = (self.local_window() / 2).max(1) as u32;
        for (&id, s) in self.streams.iter_mut() {
            if s.held > 0 {
                // What the job took of what it was given is consumed (all of it once the
                // stream is gone: the job dropped it, or the body was refused).
                let queued = s
                    .feed
                    .as_ref()
                    .map_or(0, |f| f.queued())
                    .min(s.held as usize);
                s.grant += s.held - queued as u32;
                s.held = queued as u32;
            }
            if s.grant >= half && !s.recv_closed && !s.reset {
                frame::write_window_update(output, id, s.grant);
                s.recv_window += i64::from(s.grant);
                s.grant = 0;
            }
        }
        let conn_half = (self.config.connection_window.max(DEFAULT_WINDOW) / 2).max(1);
        if self.conn_grant >= conn_half {
            frame::write_window_update(output, 0, self.conn_grant);
            self.recv_window += i64::from(self.conn_grant);
            self.conn_grant = 0;
        }
    }

    /// Sends response bodies within the windows, round-robin across streams, until the
    /// windows close, the bodies run out, or the output is full (true).
    fn send_data(&mut self, output: &mut Vec<u8>, cx: &Context<'_>) -> bool {
        let high = cx.limits.output_high_water.max(1);
        let mut stalled = false;
        let mut sent = false;
        loop {
            let mut progress = false;
            let ids: Vec<u32> = self
                .streams
                .iter()
                .filter(|(_, s)| s.answer == Answer::Sending && !s.reset)
                .map(|(&id, _)| id)
                .collect();
            if ids.is_empty() {
                break;
            }
            for id in ids {
                if output.len() >= high {
                    self.stall_since = None;
                    return true;
                }
                let Some(s) = self.streams.get_mut(&id) else {
                    continue;
                };
                if s.out_pos >= s.out.len() {
                    s.out.clear();
                    s.out_pos = 0;
                    let room = self.send_window.min(s.send_window);
                    let taken = match &mut s.source {
                        Some(Source::Stream(src)) => src.take(&mut s.out, TAKE, false, s.head_only),
                        // A file is read as the windows open, no further: a stream holds at
                        // most one piece, and a client that opens no window has nothing read.
                        Some(Source::File(_)) if room <= 0 => {
                            stalled = true;
                            continue;
                        }
                        Some(Source::File(file)) => {
                            let max = usize::try_from(room).map_or(TAKE, |r| r.min(TAKE));
                            match file.take(&mut s.out, max) {
                                Ok(true) => Taken::Ended,
                                Ok(false) => Taken::Empty,
                                Err(_) => Taken::Aborted,
                            }
                        }
                        None => Taken::Empty,
                    };
                    match taken {
                        Taken::Bytes(_) | Taken::Empty => {}
                        Taken::Ended => {
                            if let Some(Source::Stream(src)) = &s.source {
                                s.trailers = src.take_trailers();
                            }
                            s.source = None;
                            s.out_end = true;
                        }
                        Taken::Aborted => {
                            // The producer failed: the client must not take the body for
                            // complete.
                            frame::write_rst(output, id, ErrorCode::INTERNAL_ERROR);
                            self.forget(id);
                            progress = true;
                            continue;
                        }
                    }
                }
                let left = s.out.len() - s.out_pos;
                if left == 0 {
                    if s.out_end {
                        s.answer = Answer::Done;
                        let trailers = std::mem::take(&mut s.trailers);
                        if trailers.is_empty() {
                            frame::write_data(output, id, &[], true);
                        } else {
                            self.answer_block.clear();
                            answer::trailer_block(
                                &mut self.encoder,
                                &trailers,
                                &mut self.answer_block,
                            );
                            let block = &self.answer_block;
                            frame::write_headers(output, id, block, true, self.peer_max_frame);
                        }
                        self.stream_done(id, output);
                        progress = true;
                    }
                    continue;
                }
                let n = (left as i64)
                    .min(self.send_window)
                    .min(s.send_window)
                    .min(self.peer_max_frame as i64);
                if n <= 0 {
                    stalled = true;
                    continue;
                }
                let n = n as usize;
                // With trailers to follow, the last DATA frame does not end the stream.
                let end = n == left && s.out_end && s.trailers.is_empty();
                frame::write_data(output, id, &s.out[s.out_pos..s.out_pos + n], end);
                self.data_frames_sent += 1;
                sent = true;
                s.out_pos += n;
                s.send_window -= n as i64;
                self.send_window -= n as i64;
                progress = true;
                if end {
                    s.answer = Answer::Done;
                    self.stream_done(id, output);
                }
            }
            if !progress {
                break;
            }
        }
        if !stalled || sent {
            // The write timeout runs from when the windows stopped all progress, not from the
            // first stall: a long answer to a client that keeps opening its window lives.
            self.stall_since = None;
        }
        self.stalled = stalled;
        false
    }
}

/// Remembers `id` in a bounded list.
fn remember(list: &mut VecDeque<u32>, id: u32) {
    if list.len() == REMEMBERED {
        list.pop_front();
    }
    list.push_back(id);
}

impl Connection {
    /// When [`Connection::expire`] is due if nothing happens first (see
    /// [`Session::poll_timeout`](crate::http::Session::poll_timeout) for the rules' names):
    /// the write timeout while output waits or a response waits for a window the client does not
    /// open (counted from the last DATA sent); the header timeout from the first byte of the
    /// preface, of a header block or of any frame other than DATA until it is complete; the
    /// body timeout while a request body is arriving; nothing while only jobs (or streamed
    /// answers' producers) are awaited; else the idle timeout.
    pub fn poll_timeout(
        &mut self,
        input: &[u8],
        output_pending: bool,
        now: Instant,
        t: &Timeouts,
    ) -> Option<Instant> {
        if output_pending || self.phase == Phase::Closed {
            return Some(now + t.write);
        }
        if matches!(self.phase, Phase::Preface | Phase::Settings) || self.block.is_some() {
            return Some(*self.head_since.get_or_insert(now) + t.header);
        }
        // A frame cut short in the input (`process` takes every whole one): a DATA frame is
        // body arriving; any other is held to the header timeout from its first byte, so that
        // a frame dribbled a byte at a time cannot hold the connection forever.
        if !input.is_empty() {
            let data = Header::parse(input).is_some_and(|h| h.kind == frame::kind::DATA);
            if data {
                return Some(now + t.body);
            }
            return Some(*self.head_since.get_or_insert(now) + t.header);
        }
        self.head_since = None;
        if self.stalled {
            return Some(*self.stall_since.get_or_insert(now) + t.write);
        }
        if self
            .streams
            .values()
            .any(|s| !s.recv_closed && !s.reset && s.feed.as_ref().is_none_or(|f| !f.is_full()))
        {
            return Some(now + t.body);
        }
        if !self.streams.is_empty() {
            return None;
        }
        Some(now + t.idle)
    }

    /// The deadline of [`Connection::poll_timeout`] passed. A preface or header block that
    /// never completed, a body that stopped arriving or an idle connection: GOAWAY and close
    /// (bodies that stopped are answered 408 first); a response whose window stayed shut
    /// past the write timeout: GOAWAY and close. Jobs are not timed.
    pub fn expire<H: Handler>(
        &mut self,
        now: Instant,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Step<H::Job> {
        let _ = now;
        if self.phase == Phase::Closed {
            return Step::Close;
        }
        if self.stalled {
            // The client left a window shut past the write timeout: told, and closed.
            frame::write_goaway(output, self.last_stream, ErrorCode::NO_ERROR, b"timeout");
            self.close_all();
            input.clear();
            return Step::Close;
        }
        if self.phase == Phase::Open && self.block.is_none() {
            let slow: Vec<u32> = self
                .streams
                .iter()
                .filter(|(_, s)| !s.recv_closed && !s.reset && s.answer == Answer::Pending)
                .map(|(&id, _)| id)
                .collect();
            if slow.is_empty() && !self.streams.is_empty() {
                return Step::Read;
            }
            for id in slow {
                self.answer_status(
                    id,
                    408,
                    "request body not received in time",
                    output,
                    cx,
                    handler,
                );
            }
            // The 408s go out whole, as far as the windows allow, before the GOAWAY.
            self.send_data(output, cx);
        }
        if self.started {
            frame::write_goaway(output, self.last_stream, ErrorCode::NO_ERROR, b"timeout");
        }
        self.close_all();
        input.clear();
        Step::Close
    }
}
