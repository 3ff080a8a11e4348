//! One HTTP/2 load thread (`berth bench --h2`): its share of the connections, each keeping
//! `streams` requests in flight, driven by one mio `Poll`.
//!
//! A connection writes the preface, its SETTINGS (no push; stream and connection windows of
//! 2^30 - 1, h2load's defaults, so a large answer is never held back by the client) and its
//! first streams in one write, as nghttp2 (h2load's library) and browsers do: waiting for the
//! server's SETTINGS would cost a round trip, and a server that lets a connection go while it
//! has nothing to answer (berth's `single` model, when another client waits) would let it go
//! before the first request. Until the server's SETTINGS says how many streams it allows, the
//! client opens at most 100 (RFC 9113 §6.5.2 recommends no fewer); a stream the server refuses
//! before its SETTINGS came (REFUSED_STREAM: not processed) is sent again and not counted as
//! an error, since the haste was the client's. From then on it is h2load's closed loop: each
//! answer that completes opens the next stream, and every HEADERS frame a read made room for
//! goes out in one write.
//!
//! The frame codec and HPACK are berth-proto's (`h2::frame`, `h2::hpack`), the server's own:
//! the request's header block is encoded once (the encoder keeps no dynamic table, so the
//! same bytes serve every request) and each answer's block is decoded with a decoder per
//! connection, keeping only its first field, `:status`.
//!
//! What counts as an error: a stream the server resets (RST_STREAM), a GOAWAY with an error
//! code, a non-2xx status, and the connection-level failures of the HTTP/1.1 loop (connect,
//! read, write, timeout, protocol). A GOAWAY with NO_ERROR is the server winding a long
//! connection down (berth after `--http2-max-requests` streams, nginx after
//! `keepalive_requests`): the streams it did not take go back to the budget and the
//! connection is made again once its last answer is in, as the HTTP/1.1 loop does after a
//! `Connection: close`.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use berth_proto::h2::frame::{self, setting, ErrorCode, Frame, Header, HEADER_LEN};
use berth_proto::h2::hpack::{Decoder, Field, ListLimits};
use mio::event::Event;
use mio::{Poll, Token};

use super::load::{Shared, TlsTarget};
use super::report::Tally;
use crate::poll_loop::{self, EventLoop, LoadStream, ReadSide, Stream};
use berth::net::Transport;

/// How long a connection waits before trying again after its connect failed.
const CONNECT_BACKOFF: Duration = Duration::from_millis(10);

/// The client's stream and connection receive windows: 2^30 - 1, as h2load's `-w 30 -W 30`.
const RECV_WINDOW: u32 = (1 << 30) - 1;

/// Largest frame the client accepts: the RFC's initial SETTINGS_MAX_FRAME_SIZE, which the
/// client does not raise.
const MAX_FRAME: usize = frame::DEFAULT_MAX_FRAME as usize;

/// The dynamic table the server's encoder may use: the RFC's default, which the client does
/// not change.
const HEADER_TABLE: usize = 4096;

/// Streams opened before the server's SETTINGS says how many it allows.
const STREAMS_BEFORE_SETTINGS: usize = 100;

/// Highest stream id a client may open (ids are 31 bits, a client's odd).
const LAST_STREAM_ID: u32 = (1 << 31) - 1;

/// Read buffer per connection: room for several full frames, so a read rarely ends inside one.
const READ_BUFFER: usize = 64 * 1024;

/// What every connection of a run sends, and how.
#[derive(Debug)]
pub(crate) struct Plan {
    /// Where to connect.
    pub addr: std::net::SocketAddr,
    /// `https://`: TLS with ALPN `h2` alone.
    pub tls: Option<TlsTarget>,
    /// Streams kept in flight per connection (fewer if the server allows fewer).
    pub streams: usize,
    /// The request's header block (HPACK), the same for every request.
    pub block: Vec<u8>,
    /// The request's body (empty: HEADERS ends the stream).
    pub body: Vec<u8>,
    /// Longest wait for an answer.
    pub timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No socket: waiting for `retry_at`, or for nothing when the budget is spent.
    Idle,
    Connecting,
    /// Streams open as answers complete.
    Open,
    /// No new stream (a GOAWAY came, or the stream ids ran out): the connection is made
    /// again once the streams in flight are answered.
    Draining,
}

/// A request in flight.
#[derive(Debug)]
struct Inflight {
    /// When its HEADERS was queued.
    began: Instant,
    /// Final status, once its HEADERS came (0 before; 1xx heads are skipped).
    status: u16,
    /// DATA bytes received since the last stream WINDOW_UPDATE.
    unacked: u32,
    /// Request body bytes sent so far.
    sent: usize,
    /// What the server's window for this stream still takes.
    send_window: i64,
}

/// A header block arriving in several frames (HEADERS, then CONTINUATION).
#[derive(Debug, Default)]
struct PartialBlock {
    stream: u32,
    end_stream: bool,
    bytes: Vec<u8>,
}

/// A stream id hasher: ids are distinct odd numbers, and a multiply spreads them over the
/// table's bits (SipHash would cost more than the rest of a lookup).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, id: u32) {
        self.0 = u64::from(id).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type Streams = HashMap<u32, Inflight, BuildHasherDefault<IdHasher>>;

struct Conn {
    stream: Option<Stream>,
    state: State,
    read: ReadSide,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Frames queued, and how much of them the socket has taken.
    out: Vec<u8>,
    out_pos: usize,
    decoder: Decoder,
    /// The decoded first field of a block (reused).
    fields: Vec<Field>,
    block: Option<PartialBlock>,
    inflight: Streams,
    /// Streams whose body waits for the server's windows, oldest first.
    blocked: VecDeque<u32>,
    next_id: u32,
    /// Requests taken from the budget at the connect, for the first streams.
    reserved: usize,
    /// The connect's start, for its timeout.
    began: Instant,
    retry_at: Option<Instant>,
    /// DATA bytes received on the connection since the last WINDOW_UPDATE.
    conn_unacked: u32,
    /// Once the server's SETTINGS has come (its stream cap and windows known): the first
    /// stream id opened after it; 0 before.
    settled_at: u32,
    /// The server's connection window, its initial stream window, frame size and stream cap.
    send_window: i64,
    peer_initial_window: i64,
    peer_max_frame: usize,
    peer_max_streams: usize,
}

impl Conn {
    fn new(now: Instant) -> Conn {
        Conn {
            stream: None,
            state: State::Idle,
            read: ReadSide::default(),
            buf: vec![0; READ_BUFFER],
            start: 0,
            end: 0,
            out: Vec::with_capacity(4096),
            out_pos: 0,
            decoder: Decoder::new(HEADER_TABLE),
            fields: Vec::with_capacity(1),
            block: None,
            inflight: Streams::default(),
            blocked: VecDeque::new(),
            next_id: 1,
            reserved: 0,
            began: now,
            retry_at: Some(now),
            conn_unacked: 0,
            settled_at: 0,
            send_window: i64::from(frame::DEFAULT_WINDOW),
            peer_initial_window: i64::from(frame::DEFAULT_WINDOW),
            peer_max_frame: MAX_FRAME,
            peer_max_streams: STREAMS_BEFORE_SETTINGS,
        }
    }

    /// Fresh protocol state for a new connection (the buffers are kept).
    fn reset(&mut self) {
        self.start = 0;
        self.end = 0;
        self.out.clear();
        self.out_pos = 0;
        self.decoder = Decoder::new(HEADER_TABLE);
        self.block = None;
        self.inflight.clear();
        self.blocked.clear();
        self.next_id = 1;
        self.conn_unacked = 0;
        self.settled_at = 0;
        self.send_window = i64::from(frame::DEFAULT_WINDOW);
        self.peer_initial_window = i64::from(frame::DEFAULT_WINDOW);
        self.peer_max_frame = MAX_FRAME;
        self.peer_max_streams = STREAMS_BEFORE_SETTINGS;
        self.read = ReadSide::default();
    }

    /// Streams this connection keeps in flight.
    fn target(&self, plan: &Plan) -> usize {
        plan.streams.min(self.peer_max_streams)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    Connect,
    Read,
    Write,
    Timeout,
    Protocol,
    /// A GOAWAY with an error code.
    GoAway,
}

struct Loop<'a> {
    plan: &'a Plan,
    shared: &'a Shared,
    poll: Poll,
    conns: Vec<Conn>,
    tally: Tally,
    /// The (responses, errors) counts last added to `shared`.
    published: (u64, u64),
}

/// Runs `connections` HTTP/2 connections until `shared.stop` is set or the budget is spent.
pub(crate) fn run(plan: &Plan, shared: &Shared, connections: usize) -> io::Result<Tally> {
    let now = Instant::now();
    let mut lp = Loop {
        plan,
        shared,
        poll: Poll::new()?,
        conns: (0..connections).map(|_| Conn::new(now)).collect(),
        tally: Tally::default(),
        published: (0, 0),
    };
    poll_loop::drive(&mut lp, &shared.stop, &shared.budget)?;
    Ok(lp.tally)
}

impl EventLoop for Loop<'_> {
    fn poll(&mut self) -> &mut Poll {
        &mut self.poll
    }

    fn publish(&mut self) {
        self.shared.publish(&self.tally, &mut self.published);
    }

    fn tick(&mut self, now: Instant) {
        let timeout = self.plan.timeout;
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            let late = match c.state {
                State::Idle => {
                    if c.retry_at.is_some_and(|t| t <= now) {
                        self.open(i, now);
                    }
                    false
                }
                State::Connecting => now.duration_since(c.began) >= timeout,
                State::Open | State::Draining => c
                    .inflight
                    .values()
                    .any(|s| now.duration_since(s.began) >= timeout),
            };
            if late {
                self.fail(i, Failure::Timeout, now);
            }
        }
    }

    fn all_idle(&self) -> bool {
        self.conns
            .iter()
            .all(|c| c.state == State::Idle && c.retry_at.is_none())
    }

    fn read_side(&mut self, i: usize) -> Option<&mut ReadSide> {
        self.conns.get_mut(i).map(|c| &mut c.read)
    }

    fn on_event(&mut self, i: usize, ev: &Event, now: Instant) {
        let state = self.conns[i].state;
        if state == State::Connecting {
            if !(ev.is_writable() || ev.is_error()) || !self.connected(i, now) {
                return;
            }
        } else if state != State::Idle && ev.is_writable() {
            self.flush(i, now);
        }
        let c = &self.conns[i];
        if c.state != State::Idle && c.read.readable {
            self.receive(i);
        }
    }
}

impl Loop<'_> {
    /// Starts a connection, if the budget has a request for it.
    fn open(&mut self, i: usize, now: Instant) {
        self.conns[i].retry_at = None;
        // As the HTTP/1.1 loop does: requests are taken before connecting, so a count-bounded
        // run opens no connection it has nothing to send on.
        let reserved = self.shared.budget.take(self.plan.streams as u64) as usize;
        if reserved == 0 {
            return;
        }
        let addr = self.plan.addr;
        let tls = self.plan.tls.as_ref();
        let connect = || match tls {
            None => poll_loop::tcp(addr),
            Some(t) => poll_loop::tls(addr, &t.connector, &t.host),
        };
        let stream = match poll_loop::open(self.poll.registry(), Token(i), connect) {
            Ok(s) => s,
            Err(_) => {
                self.conns[i].reserved = reserved;
                return self.fail(i, Failure::Connect, now);
            }
        };
        let c = &mut self.conns[i];
        c.reset();
        c.stream = Some(stream);
        c.reserved = reserved;
        c.state = State::Connecting;
        c.began = now;
    }

    /// Completes a non-blocking connect and sends the preface with the first streams; false if
    /// the connect failed or is not done yet.
    fn connected(&mut self, i: usize, now: Instant) -> bool {
        let Some(stream) = self.conns[i].stream.as_ref() else {
            return false;
        };
        match stream.connect_done() {
            Ok(true) => {}
            Ok(false) => return false,
            Err(_) => {
                self.fail(i, Failure::Connect, now);
                return false;
            }
        }
        self.tally.connects += 1;
        let c = &mut self.conns[i];
        c.out.extend_from_slice(frame::PREFACE);
        frame::write_settings(
            &mut c.out,
            &[
                (setting::ENABLE_PUSH, 0),
                (setting::INITIAL_WINDOW_SIZE, RECV_WINDOW),
            ],
        );
        frame::write_window_update(&mut c.out, 0, RECV_WINDOW - frame::DEFAULT_WINDOW);
        c.state = State::Open;
        // The server may allow fewer streams than were taken for it.
        let keep = c.reserved.min(c.target(self.plan));
        self.shared.budget.give_back((c.reserved - keep) as u64);
        c.reserved = 0;
        for _ in 0..keep {
            self.start_stream(i, now);
        }
        self.flush(i, now)
    }

    /// Writes what is queued; false if the connection failed.
    fn flush(&mut self, i: usize, now: Instant) -> bool {
        let c = &mut self.conns[i];
        let Some(stream) = c.stream.as_mut() else {
            return false;
        };
        while c.out_pos < c.out.len() {
            match stream.write_some(&c.out[c.out_pos..]) {
                Ok(Some(n)) => c.out_pos += n,
                Ok(None) => return true,
                Err(_) => {
                    self.fail(i, Failure::Write, now);
                    return false;
                }
            }
        }
        c.out.clear();
        c.out_pos = 0;
        // A TLS stream may still hold records its socket had no room for.
        if stream.has_pending() {
            match io::Write::flush(stream) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => {
                    self.fail(i, Failure::Write, now);
                    return false;
                }
            }
        }
        true
    }

    fn receive(&mut self, i: usize) {
        loop {
            let c = &mut self.conns[i];
            let Some(stream) = c.stream.as_mut() else {
                return;
            };
            if c.end == c.buf.len() {
                // `parse` leaves at most one unfinished frame, which fits the buffer once
                // moved to its front (frames are at most MAX_FRAME + 9 bytes).
                c.buf.copy_within(c.start..c.end, 0);
                c.end -= c.start;
                c.start = 0;
            }
            let room = c.buf.len() - c.end;
            let n = match stream.read_some(&mut c.buf[c.end..]) {
                Ok(Some(n)) => n,
                Ok(None) => {
                    c.read.readable = false;
                    break;
                }
                Err(_) => return self.fail(i, Failure::Read, Instant::now()),
            };
            let now = Instant::now();
            if n == 0 {
                return self.end_of_stream(i, now);
            }
            self.tally.bytes += n as u64;
            c.end += n;
            if let Err(why) = self.parse(i, now) {
                return self.fail(i, why, now);
            }
            let c = &mut self.conns[i];
            if c.stream.is_none() || c.state == State::Idle {
                return;
            }
            let drains = c.stream.as_ref().is_some_and(|s| s.short_read_drains());
            if drains && c.read.emptied_by(n, room) {
                break;
            }
        }
        // Everything this read made room for goes out in one write.
        let now = Instant::now();
        if self.refill(i, now) {
            self.flush(i, now);
        }
    }

    /// Handles every complete frame in the buffer.
    fn parse(&mut self, i: usize, now: Instant) -> Result<(), Failure> {
        // The buffer is taken out of the connection while its frames are handled, so the
        // handlers may change the rest of the connection.
        let buf = std::mem::take(&mut self.conns[i].buf);
        let mut result = Ok(());
        loop {
            let c = &self.conns[i];
            let (start, end) = (c.start, c.end);
            let Some(h) = Header::parse(&buf[start..end]) else {
                break;
            };
            let len = h.len as usize;
            if len > MAX_FRAME {
                result = Err(Failure::Protocol);
                break;
            }
            if end - start < HEADER_LEN + len {
                break;
            }
            let payload = &buf[start + HEADER_LEN..start + HEADER_LEN + len];
            self.conns[i].start += HEADER_LEN + len;
            result = self.frame(i, &h, payload, now);
            if result.is_err() || self.conns[i].state == State::Idle {
                break;
            }
        }
        let c = &mut self.conns[i];
        c.buf = buf;
        if c.start == c.end {
            c.start = 0;
            c.end = 0;
        }
        result
    }

    /// Acts on one frame.
    fn frame(&mut self, i: usize, h: &Header, payload: &[u8], now: Instant) -> Result<(), Failure> {
        let f = Frame::parse(h, payload).map_err(|_| Failure::Protocol)?;
        let c = &mut self.conns[i];
        // Between a HEADERS without END_HEADERS and its last CONTINUATION, nothing else may
        // come (RFC 9113 §6.10).
        if c.block.is_some() && !matches!(f, Frame::Continuation { .. }) {
            return Err(Failure::Protocol);
        }
        match f {
            Frame::Headers {
                stream,
                end_stream,
                end_headers,
                block,
                ..
            } => {
                if end_headers {
                    return self.head(i, stream, block, end_stream, now);
                }
                c.block = Some(PartialBlock {
                    stream,
                    end_stream,
                    bytes: block.to_vec(),
                });
            }
            Frame::Continuation {
                stream,
                end_headers,
                block,
            } => {
                let Some(partial) = c.block.as_mut() else {
                    return Err(Failure::Protocol);
                };
                if partial.stream != stream {
                    return Err(Failure::Protocol);
                }
                partial.bytes.extend_from_slice(block);
                if end_headers {
                    let whole = c.block.take().expect("a block in progress");
                    return self.head(i, whole.stream, &whole.bytes, whole.end_stream, now);
                }
            }
            Frame::Data {
                stream,
                end_stream,
                flow,
                ..
            } => {
                c.conn_unacked += flow;
                if c.conn_unacked >= RECV_WINDOW / 2 {
                    frame::write_window_update(&mut c.out, 0, c.conn_unacked);
                    c.conn_unacked = 0;
                }
                let Some(s) = c.inflight.get_mut(&stream) else {
                    // A stream the client gave up (after a GOAWAY): its bytes count against
                    // the connection's window only.
                    return Ok(());
                };
                if s.status == 0 {
                    return Err(Failure::Protocol);
                }
                if end_stream {
                    self.complete(i, stream, now);
                } else {
                    s.unacked += flow;
                    if s.unacked >= RECV_WINDOW / 2 {
                        frame::write_window_update(&mut c.out, stream, s.unacked);
                        s.unacked = 0;
                    }
                }
            }
            Frame::RstStream { stream, code } => {
                if c.inflight.remove(&stream).is_some() {
                    c.blocked.retain(|&s| s != stream);
                    let early = c.settled_at == 0 || stream < c.settled_at;
                    if code == ErrorCode::REFUSED_STREAM && early {
                        // Opened before the client knew the server's cap, and not processed:
                        // sent again by the next refill.
                        self.shared.budget.give_back(1);
                    } else {
                        self.tally.errors.reset += 1;
                    }
                    if c.state == State::Draining && c.inflight.is_empty() {
                        self.reopen(i, now);
                    }
                }
            }
            Frame::Settings { ack: false, params } => {
                for (id, value) in frame::settings(params) {
                    match id {
                        setting::MAX_CONCURRENT_STREAMS => {
                            c.peer_max_streams = value as usize;
                        }
                        setting::INITIAL_WINDOW_SIZE => {
                            let delta = i64::from(value) - c.peer_initial_window;
                            c.peer_initial_window = i64::from(value);
                            for s in c.inflight.values_mut() {
                                s.send_window += delta;
                            }
                        }
                        setting::MAX_FRAME_SIZE => c.peer_max_frame = value as usize,
                        _ => {}
                    }
                }
                frame::write_settings_ack(&mut c.out);
                if c.settled_at == 0 {
                    // Over TLS the handshake is done by now, and must have chosen `h2`.
                    if let Some(Stream::Tls(t)) = c.stream.as_ref() {
                        if t.alpn_protocol() != Some(b"h2") {
                            return Err(Failure::Protocol);
                        }
                    }
                    c.settled_at = c.next_id;
                }
                self.send_blocked(i);
            }
            Frame::Settings { ack: true, .. } => {}
            Frame::Ping { ack: false, data } => frame::write_ping_ack(&mut c.out, data),
            Frame::Ping { ack: true, .. } => {}
            Frame::GoAway { last_stream, code } => {
                if code != ErrorCode::NO_ERROR {
                    return Err(Failure::GoAway);
                }
                // The streams the server will not answer go back to the budget, for another
                // connection (or this one, made again) to send.
                let before = c.inflight.len();
                c.inflight.retain(|&id, _| id <= last_stream);
                c.blocked.retain(|&id| id <= last_stream);
                let dropped = before - c.inflight.len();
                self.shared.budget.give_back(dropped as u64);
                self.drain(i, now);
            }
            Frame::WindowUpdate { stream, increment } => {
                if stream == 0 {
                    c.send_window += i64::from(increment);
                } else if let Some(s) = c.inflight.get_mut(&stream) {
                    s.send_window += i64::from(increment);
                }
                self.send_blocked(i);
            }
            // The client said SETTINGS_ENABLE_PUSH 0: a push is the server's protocol error.
            Frame::PushPromise => return Err(Failure::Protocol),
            Frame::Priority { .. } | Frame::Unknown => {}
        }
        Ok(())
    }

    /// A complete header block on `stream`.
    fn head(
        &mut self,
        i: usize,
        stream: u32,
        block: &[u8],
        end_stream: bool,
        now: Instant,
    ) -> Result<(), Failure> {
        let c = &mut self.conns[i];
        c.fields.clear();
        // Every block is decoded, wanted or not, to keep the dynamic table in step with the
        // server's encoder; only the first field is kept, which in an answer's head is
        // `:status` (pseudo-fields come first, RFC 9113 §8.3).
        let limits = ListLimits {
            max_size: usize::MAX,
            max_fields: 1,
        };
        c.decoder
            .decode(block, limits, &mut c.fields)
            .map_err(|_| Failure::Protocol)?;
        let Some(s) = c.inflight.get_mut(&stream) else {
            return Ok(());
        };
        if s.status == 0 {
            let status = match c.fields.first() {
                Some(f) if f.name == b":status" => std::str::from_utf8(&f.value)
                    .ok()
                    .and_then(|v| v.parse::<u16>().ok())
                    .filter(|s| (100..600).contains(s)),
                _ => None,
            };
            let Some(status) = status else {
                return Err(Failure::Protocol);
            };
            // An interim answer (100 Continue, 103 Early Hints): the final head follows.
            if status >= 200 {
                s.status = status;
            } else if end_stream {
                return Err(Failure::Protocol);
            }
        }
        // A block after the final head is the trailers, which end the stream.
        if end_stream {
            self.complete(i, stream, now);
        }
        Ok(())
    }

    /// `stream`'s answer is complete.
    fn complete(&mut self, i: usize, stream: u32, now: Instant) {
        let c = &mut self.conns[i];
        if let Some(s) = c.inflight.remove(&stream) {
            self.tally.response(s.status, now.duration_since(s.began));
            if s.sent < self.plan.body.len() {
                // Answered before its body was all sent (an early 4xx): stop sending it.
                c.blocked.retain(|&id| id != stream);
            }
        }
        if c.state == State::Draining && c.inflight.is_empty() {
            self.reopen(i, now);
        }
    }

    /// Opens streams until the connection has its share in flight or the budget is spent;
    /// false if the connection is gone (closed because nothing is left to send).
    fn refill(&mut self, i: usize, now: Instant) -> bool {
        let c = &self.conns[i];
        if c.state != State::Open {
            return c.state != State::Idle;
        }
        let want = c.target(self.plan).saturating_sub(c.inflight.len());
        if want > 0 && !self.shared.stop.load(Relaxed) {
            let n = self.shared.budget.take(want as u64);
            for _ in 0..n {
                self.start_stream(i, now);
            }
        }
        let c = &self.conns[i];
        if c.inflight.is_empty() && c.state == State::Open {
            // Nothing in flight and nothing left to send: the run is over for this one.
            self.close(i);
            return false;
        }
        true
    }

    /// Queues a new stream's HEADERS (and as much of its body as the windows take).
    fn start_stream(&mut self, i: usize, now: Instant) {
        let c = &mut self.conns[i];
        if c.state != State::Open {
            self.shared.budget.give_back(1);
            return;
        }
        let id = c.next_id;
        let body = &self.plan.body;
        frame::write_headers(
            &mut c.out,
            id,
            &self.plan.block,
            body.is_empty(),
            c.peer_max_frame,
        );
        c.inflight.insert(
            id,
            Inflight {
                began: now,
                status: 0,
                unacked: 0,
                sent: 0,
                send_window: c.peer_initial_window,
            },
        );
        if id >= LAST_STREAM_ID - 1 {
            // No id left for another stream: make the connection again after these answers.
            c.state = State::Draining;
        } else {
            c.next_id = id + 2;
        }
        if !body.is_empty() {
            c.blocked.push_back(id);
            self.send_blocked(i);
        }
    }

    /// Sends request body bytes, oldest stream first, as far as the server's windows allow.
    fn send_blocked(&mut self, i: usize) {
        let c = &mut self.conns[i];
        let body = &self.plan.body;
        while let Some(&id) = c.blocked.front() {
            let Some(s) = c.inflight.get_mut(&id) else {
                c.blocked.pop_front();
                continue;
            };
            while s.sent < body.len() {
                let room = c.send_window.min(s.send_window).max(0) as usize;
                let n = (body.len() - s.sent).min(room).min(c.peer_max_frame);
                if n == 0 {
                    return;
                }
                let last = s.sent + n == body.len();
                frame::write_data(&mut c.out, id, &body[s.sent..s.sent + n], last);
                s.sent += n;
                s.send_window -= n as i64;
                c.send_window -= n as i64;
            }
            c.blocked.pop_front();
        }
    }

    /// No new stream on this connection; it is made again once its answers are in.
    fn drain(&mut self, i: usize, now: Instant) {
        let c = &mut self.conns[i];
        c.state = State::Draining;
        if c.inflight.is_empty() {
            self.reopen(i, now);
        }
    }

    fn end_of_stream(&mut self, i: usize, now: Instant) {
        let c = &self.conns[i];
        if c.inflight.is_empty() {
            // Closed with nothing owed (an idle timeout, the end of a drain): no error.
            self.reopen(i, now);
        } else {
            self.fail(i, Failure::Read, now);
        }
    }

    fn close(&mut self, i: usize) {
        let c = &mut self.conns[i];
        poll_loop::close(self.poll.registry(), &mut c.stream);
        c.state = State::Idle;
        c.inflight.clear();
        c.blocked.clear();
        c.block = None;
        c.reserved = 0;
        c.retry_at = None;
    }

    fn reopen(&mut self, i: usize, now: Instant) {
        self.close(i);
        if !self.shared.stop.load(Relaxed) {
            self.open(i, now);
        }
    }

    fn fail(&mut self, i: usize, why: Failure, now: Instant) {
        // One failure per connection event, as the HTTP/1.1 loop (and wrk) counts them; the
        // other requests in flight or taken for the connection go back to the budget, so a
        // count-bounded run ends after exactly N answers or failures.
        let c = &self.conns[i];
        let owed = c.inflight.len() + c.reserved;
        self.shared.budget.give_back(owed.saturating_sub(1) as u64);
        let e = &mut self.tally.errors;
        match why {
            Failure::Connect => e.connect += 1,
            Failure::Read => e.read += 1,
            Failure::Write => e.write += 1,
            Failure::Timeout => e.timeout += 1,
            Failure::Protocol => e.protocol += 1,
            Failure::GoAway => e.goaway += 1,
        }
        self.close(i);
        // A refused connect is retried after a pause, so a server that is down is not
        // hammered in a tight loop; other failures reconnect at once, as wrk does.
        self.conns[i].retry_at = Some(match why {
            Failure::Connect => now + CONNECT_BACKOFF,
            _ => now,
        });
        if why != Failure::Connect && !self.shared.stop.load(Relaxed) {
            self.open(i, now);
        }
    }
}

/// The connection's first bytes (preface, SETTINGS, WINDOW_UPDATE), for tests of the framing.
#[cfg(test)]
fn opening() -> Vec<u8> {
    let mut out = frame::PREFACE.to_vec();
    frame::write_settings(
        &mut out,
        &[
            (setting::ENABLE_PUSH, 0),
            (setting::INITIAL_WINDOW_SIZE, RECV_WINDOW),
        ],
    );
    frame::write_window_update(&mut out, 0, RECV_WINDOW - frame::DEFAULT_WINDOW);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_proto::h2::frame::{flag, kind};

    #[test]
    fn the_opening_raises_both_windows_and_refuses_push() {
        let out = opening();
        assert!(out.starts_with(frame::PREFACE));
        let rest = &out[frame::PREFACE.len()..];
        let h = Header::parse(rest).unwrap();
        assert_eq!((h.kind, h.stream, h.len), (kind::SETTINGS, 0, 12));
        let params: Vec<_> = frame::settings(&rest[HEADER_LEN..HEADER_LEN + 12]).collect();
        assert_eq!(
            params,
            [
                (setting::ENABLE_PUSH, 0),
                (setting::INITIAL_WINDOW_SIZE, RECV_WINDOW)
            ]
        );
        let wu = &rest[HEADER_LEN + 12..];
        let h = Header::parse(wu).unwrap();
        assert_eq!((h.kind, h.stream, h.flags), (kind::WINDOW_UPDATE, 0, 0));
        let inc = u32::from_be_bytes(wu[HEADER_LEN..HEADER_LEN + 4].try_into().unwrap());
        assert_eq!(inc + frame::DEFAULT_WINDOW, RECV_WINDOW);
        assert_eq!(flag::END_STREAM, 1);
    }

    #[test]
    fn stream_ids_hash_apart() {
        let mut streams = Streams::default();
        for id in (1..20_000).step_by(2) {
            streams.insert(
                id,
                Inflight {
                    began: Instant::now(),
                    status: 0,
                    unacked: 0,
                    sent: 0,
                    send_window: 0,
                },
            );
        }
        assert_eq!(streams.len(), 10_000);
        assert!(streams.contains_key(&19_999) && !streams.contains_key(&2));
    }
}
