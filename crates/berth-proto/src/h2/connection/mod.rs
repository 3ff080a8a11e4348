//! One HTTP/2 connection, server side: frames in, requests to the [`Handler`], frames out.
//!
//! The shape is [`http::Session`](crate::http::Session)'s: the driver lends its input and
//! output buffers to [`Connection::process`] with the time, and does what the returned
//! [`Action`] says. What differs is that many streams are in flight at once: a job offloaded for
//! one stream does not stop the connection, which goes on reading, answering other streams
//! and taking replies in any order ([`Connection::complete`] names the stream).
//!
//! ```text
//!   input ──> preface, frames ──> stream states (§5.1) ──> Request ──> Handler::handle
//!                │                    │                                 │ Done: Response
//!                │ SETTINGS, PING     │ WINDOW_UPDATE as the body       │ Offload(job) ──> Action
//!                v                    v is taken                        v
//!   output <── acks, GOAWAY <──── HEADERS + DATA within the peer's windows <── Reply
//! ```
//!
//! Call order for a driver:
//! 1. append bytes read to `input`, call [`Connection::process`] with `now`;
//! 2. write out `output` whatever the step;
//! 3. on [`Action::Offload`], run the job and give its reply to [`Connection::complete`] with
//!    the stream it names, whenever it is done; call `process` again at once (more input may
//!    be waiting: other streams go on meanwhile); on [`Action::Open`], likewise open the file
//!    and give what was found to [`Connection::file`];
//! 4. on [`Action::Body`], keep the file just opened (or the reply's) for the stream as the
//!    source of that range, and call `process` again; on [`Action::Pull`], read (and encode, if
//!    the step says so) at most that many bytes of the stream's source and give them to
//!    [`Connection::pulled`]; drop a held source once [`Connection::pulls`] says its stream no
//!    longer takes it;
//! 5. after each call, carry the request body it passed on ([`Connection::passed`]);
//! 6. on [`Action::Flush`], write the output, then call `process` again;
//! 7. on [`Action::Read`], read more (the connection is always read, jobs out or not), or wait
//!    for a reply, a wake (a kept producer pushed: call [`Connection::wake_bodies`]; a job
//!    took request body: tell the connection its level, [`Connection::feed_level`], and call
//!    `process`), or the deadline of [`Connection::poll_timeout`], then [`Connection::expire`];
//! 8. on [`Action::Close`], write out `output` and close.
//!
//! Errors follow RFC 9113 §5.4: a connection error writes GOAWAY with its code and closes; a
//! stream error writes RST_STREAM and the connection goes on. Abuse ([`Abuse`]) is a
//! connection error with ENHANCE_YOUR_CALM, recorded in [`Connection::counts`].

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

mod flow;
mod recv;
mod timeouts;
mod wire;

pub use crate::http::Pulled;

use super::answer::{self, Hpack};
use super::config::{Abuse, Counts, H2Config};
use super::frame::{
    self, flag, setting, ErrorCode, Frame, FrameError, Header, DEFAULT_MAX_FRAME, DEFAULT_WINDOW,
    HEADER_LEN, MAX_WINDOW, PREFACE,
};
use super::head::{check_request, check_trailers, Refusal};
use super::hpack::{Decoder, Encoder, Field, ListLimits};
use crate::http::feed::Feeding;
use crate::http::files::{FileError, FileMeta, FileRequest};
use crate::http::hand_off::{self, GivenUp, Source, Stage, Streams, Turn};
use crate::http::intake::{self, Malformed, Next, Took, WholeBodies};
use crate::http::Passed;
use crate::http::{Action, Context, Handler, Reply, Timeouts};

/// Closed streams remembered, to tell a late frame on one from a frame on a stream never
/// opened (they are answered differently, RFC 9113 §5.1).
const REMEMBERED: usize = 64;

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

#[derive(Debug)]
struct Stream {
    /// The client sent END_STREAM.
    recv_closed: bool,
    /// Its part in the hand-off: where its answer stands, where the body comes from.
    turn: Turn,
    /// How much more the client may send on it.
    recv_window: i64,
    /// Body bytes taken and not yet granted back with WINDOW_UPDATE.
    grant: u32,
    /// Body bytes pushed to a streaming job and not yet granted (granted once it has room).
    held: u32,
    /// How much more berth may send on it.
    send_window: i64,
    /// Response body bytes waiting for window, from `out_pos`.
    out: Vec<u8>,
    out_pos: usize,
    /// The response ends after `out` (no producer left).
    out_end: bool,
}

impl Stream {
    fn new(recv_window: i64, send_window: i64) -> Self {
        Stream {
            recv_closed: false,
            turn: Turn::new(),
            recv_window,
            grant: 0,
            held: 0,
            send_window,
            out: Vec::new(),
            out_pos: 0,
            out_end: false,
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
    /// Pieces of request bodies for the driver to carry to their jobs
    /// ([`Connection::passed`]).
    passed: Passed,
    /// Streams waiting their turn ([`Stage::Queued`], [`Stage::FileQueued`]): none on the
    /// fast path, which then looks for none.
    waiting: usize,
    /// Streams reset while their job was out, not yet told to the driver
    /// ([`Connection::take_cancelled`]).
    cancelled: Vec<u32>,
    /// The stream last asked to pull its body: the next pull goes to a later one, so that
    /// files share the windows round-robin.
    last_pull: u32,
    /// A stream found waiting for its body's next bytes while sending ([`Action::Pull`]).
    pull: Option<(u32, u32)>,
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
            passed: Passed::default(),
            waiting: 0,
            cancelled: Vec::new(),
            last_pull: 0,
            pull: None,
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
            .map(|s| s.turn.intake.body.len() + s.out.len())
            .sum();
        streams + self.block.as_ref().map_or(0, |b| b.buf.len())
    }

    /// The HPACK dynamic table's size in bytes (at most [`H2Config::header_table_size`]).
    pub fn table_size(&self) -> usize {
        self.decoder.table_size()
    }

    /// Jobs out for this connection's streams (those of streams reset meanwhile included:
    /// they hold their worker until they return).
    pub fn jobs_out(&self) -> usize {
        hand_off::jobs_out(self.streams.values().map(|s| &s.turn))
    }

    /// Streams whose job was given up (the client reset them while it was out) since the
    /// last call, for the driver to drop the job if it has not started: it names each
    /// stream once.
    pub fn take_cancelled(&mut self) -> impl Iterator<Item = u64> + '_ {
        self.cancelled.drain(..).map(u64::from)
    }

    /// Winds the connection down (a drain): GOAWAY NO_ERROR with the last stream id at the
    /// next `process`; streams up to it are answered, later ones ignored (the client retries
    /// them elsewhere, RFC 9113 §6.8), and the connection closes once they are done.
    pub fn close_after_response(&mut self) {
        self.drain = true;
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
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        let now = cx.now;
        if self.phase == Phase::Closed {
            input.clear();
            return Action::Close;
        }
        if !self.started {
            self.start(output);
        }
        let mut used = 0;
        // Streams whose turn has come go first: they were received before what is in the input.
        let result = match hand_off::unpark(&mut self.wire(output), cx, handler) {
            Some(out) => Ok(Some(out)),
            None => self.read_frames(now, input, &mut used, output, cx, handler),
        };
        input.drain(..used);
        match result {
            Err(fail) => {
                // Answers already made go out first, as far as the windows allow: the
                // client is told as much as it asked for before the error.
                self.send_data(output, cx);
                return self.fail(fail, input, output);
            }
            Ok(Some(action)) => return action,
            Ok(None) => {}
        }
        // A drain's GOAWAY names the last stream of what was received before it was written:
        // frames already in hand were sent before the client could hear of it (a request in
        // the input is answered, as HTTP/1.1 answers it with `Connection: close`).
        if self.drain {
            self.goaway_now(output);
        }
        let step = self.settle(output, cx);
        // Sending may have finished a file (or the input opened a window): a stream that waited
        // for that goes on now.
        if matches!(step, Action::Read | Action::Flush | Action::Pull { .. }) {
            if let Some(action) = hand_off::unpark(&mut self.wire(output), cx, handler) {
                return action;
            }
        }
        step
    }

    /// Sends what can be sent and says what comes next, once input is read.
    fn settle<J>(&mut self, output: &mut Vec<u8>, cx: &Context<'_>) -> Action<J> {
        self.grant_windows(output, cx.limits.max_body_bytes);
        let full = self.send_data(output, cx);
        if self.streams.is_empty() {
            // An emptied BTreeMap keeps its leaf node (room for 11 streams, 1.5 KiB): an idle
            // connection gives it back (issue 32: an idle connection costs at most 2 KiB).
            self.streams = BTreeMap::new();
        }
        if self.phase == Phase::Closed {
            return Action::Close;
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
            return Action::Close;
        }
        if full {
            Action::Flush
        } else if let Some((stream, max)) = self.pull.take() {
            self.last_pull = stream;
            Action::Pull {
                stream: stream.into(),
                max: max as usize,
            }
        } else {
            Action::Read
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
    fn fail<J>(&mut self, fail: Fail, input: &mut Vec<u8>, output: &mut Vec<u8>) -> Action<J> {
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
        Action::Close
    }

    /// Drops every stream: producers and streaming jobs are told the connection went.
    fn close_all(&mut self) {
        for (id, mut s) in std::mem::take(&mut self.streams) {
            if s.turn.give_up(&mut self.passed) == (GivenUp::Kept { cancel: true }) {
                self.cancelled.push(id);
            }
        }
        self.waiting = 0;
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
    ) -> Result<Option<Action<H::Job>>, Fail> {
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
    ) -> Result<Option<Action<H::Job>>, Fail> {
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

    /// The peer closed its side of the connection (the transport's EOF): a request still
    /// arriving can never be whole, so its stream is given up as if reset (its job hears its
    /// body cut short, and is dropped unrun if it has not started); streams whose requests
    /// are whole go on being answered. True if any stream was given up.
    pub fn peer_closed(&mut self) -> bool {
        let cut: Vec<u32> = self
            .streams
            .iter()
            .filter(|(_, s)| !s.recv_closed && !s.turn.reset)
            .map(|(&id, _)| id)
            .collect();
        for &id in &cut {
            self.drop_stream(id);
        }
        !cut.is_empty()
    }

    /// The stream is dropped, or kept as a zombie while its job or file open is out.
    fn drop_stream(&mut self, id: u32) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        s.out = Vec::new();
        if s.turn
            .drop_out(id, &mut self.cancelled, &mut self.waiting, &mut self.passed)
        {
            self.streams.remove(&id);
        }
    }

    fn on_rst(&mut self, now: Instant, id: u32) -> Result<(), Fail> {
        if id > self.highest {
            return Err(Fail::Conn(
                ErrorCode::PROTOCOL_ERROR,
                "RST_STREAM on an idle stream",
            ));
        }
        let Some(s) = self.streams.get(&id).filter(|s| !s.turn.reset) else {
            // Gone or reset already. If berth reset it (its RST_STREAM, NO_ERROR after a
            // complete answer included), frames the client sends after its own RST_STREAM
            // did not cross berth's: they are on a stream the client closed itself (§5.1).
            if let Some(at) = self.reset.iter().position(|&r| r == id) {
                self.reset.remove(at);
                remember(&mut self.closed, id);
            }
            return Ok(());
        };
        if s.turn.stage != Stage::Done {
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
}

/// Remembers `id` in a bounded list.
fn remember(list: &mut VecDeque<u32>, id: u32) {
    if list.len() == REMEMBERED {
        list.pop_front();
    }
    list.push_back(id);
}

impl Feeding for Connection {
    /// Pieces of request bodies going to their jobs as they arrive, for the driver to carry
    /// ([`Taps::exchange`](crate::http::Taps::exchange)) after every call that may pass some on.
    fn passed(&mut self) -> &mut Passed {
        &mut self.passed
    }

    /// The driver's word on stream `stream`'s body ([`Taps::exchange`](crate::http::Taps::exchange)):
    /// its job has `queued` bytes yet to take (the connection grants the client window for
    /// the rest), or is `gone`. False once the stream keeps no account of it.
    fn feed_level(&mut self, stream: u64, queued: usize, gone: bool) -> bool {
        let feed = u32::try_from(stream)
            .ok()
            .and_then(|id| self.streams.get_mut(&id))
            .and_then(|s| s.turn.feed.as_mut());
        match feed {
            Some(feed) => {
                feed.level(queued, gone);
                true
            }
            None => false,
        }
    }
}
