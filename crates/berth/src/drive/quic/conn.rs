//! One QUIC connection serving HTTP/3: a `quinn_proto::Connection` (QUIC: streams, flow
//! control, TLS, loss recovery) and a `berth_proto::h3::Connection` (HTTP/3 and the exchange)
//! joined by their stream bytes, in the call order the h3 connection's docs give a driver.
//!
//! - In: QUIC stream events say which streams have bytes; a stream is read (a piece at a time)
//!   only while [`h3::Connection::wants_input`] says so, so that a request whose job has not
//!   taken its body, or one blocked on QPACK, is held back by QUIC's stream window, not by
//!   memory here. A client's RESET_STREAM and STOP_SENDING go to `reset` and `stopped`.
//! - Out: every [`h3::Quic`] becomes a QUIC stream write, open, reset, stop or close. What a
//!   stream's write does not take (flow control, congestion) waits in [`Outbox`] until QUIC
//!   says the stream is writable; a body's next piece is read ([`Action::Pull`]) only when the
//!   stream's outbox is empty, so one piece per stream at most waits here, never a body.
//! - Work: jobs go to the loop's workers, their replies come back through the endpoint's reply
//!   queue ([`Conn::complete`]); files are opened on the loop (as `drive::pump` opens them);
//!   bodies are `drive::body`'s [`Body`], pulled with [`Body::pull`] as HTTP/2's are.
//!
//! [`Conn::drive`] is the one place that acts on an [`Action`] (every codec's step), and
//! `Conn::actions` the one that carries out h3's orders to QUIC ([`h3::Quic`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use berth_proto::h3;
use berth_proto::http::{Action, FileSource, Handler, Pulled, Reply, Taps};
use bytes::Bytes;
use quinn_proto::{Connection as Quic, Dir, Event, ReadError, StreamEvent, StreamId, VarInt};

use super::Env;
use crate::drive::body::Body;
use crate::drive::workers::{self, LoopConn, LoopQueue, Offloaded, Ticket};
use crate::files::{BodyFile, OpenFile};

/// Most bytes read from one stream at a time (HTTP/3's piece: `H3Config::piece`).
const READ_PIECE: usize = 64 * 1024;

/// Requests one connection serves before it is wound down (GOAWAY): a bound on what one
/// connection may ask of the server over its life, far past any honest client's.
const MAX_REQUESTS: u64 = 1 << 30;

fn stream_id(id: u64) -> StreamId {
    // Every id here came from QUIC or from h3, which names only ids QUIC gave: below 2^62.
    StreamId::from(VarInt::from_u64(id).unwrap_or(VarInt::MAX))
}

fn code(c: u64) -> VarInt {
    VarInt::from_u64(c).unwrap_or(VarInt::MAX)
}

/// Bytes h3 asked to write on a stream that QUIC has not taken yet, then FIN if asked.
struct Outbox {
    bytes: Vec<u8>,
    /// Bytes of `bytes` QUIC took.
    pos: usize,
    fin: bool,
    /// When QUIC last took a byte of it (or it was made): the write timeout runs from here.
    moved: Instant,
}

/// One connection.
pub(super) struct Conn {
    pub quic: Quic,
    h3: h3::Connection,
    /// The connection is established and h3 has begun (its control stream).
    started: bool,
    /// What waits for QUIC per stream.
    outbox: HashMap<u64, Outbox>,
    /// The bodies of answers being sent, per stream, until h3 no longer pulls them.
    bodies: HashMap<u64, Body>,
    /// Pulls asked for while their stream's outbox was not empty: done when QUIC says the
    /// stream is writable and the outbox has drained.
    pulls: HashMap<u64, usize>,
    /// Streams QUIC has bytes (or FIN, or a reset) for that are not read yet.
    readable: BTreeSet<u64>,
    /// Streams QUIC said are writable again.
    writable: Vec<u64>,
    /// The file just opened for a stream, until its [`Action::Body`] takes it.
    opened: Option<BodyFile>,
    /// The tickets of jobs out, by stream: a stream reset meanwhile cancels its job.
    tickets: Vec<(u64, Arc<Ticket>)>,
    /// Jobs handed out and not back: the slot outlives the connection until they are.
    pub jobs_out: usize,
    /// Wakes the loop for this connection (a producer pushed, a job made room).
    waker: Arc<dyn Fn() + Send + Sync>,
    /// The writers of request bodies going to jobs as they arrive (h3 passes the bytes on).
    taps: Taps,
    /// QUIC said the connection is lost (or closed): nothing more is served on it.
    lost: bool,
    /// The server asked it to wind down.
    draining: bool,
    /// h3 closed the connection with H3_NO_ERROR (its drain is done): the close waits until
    /// QUIC has delivered every answer's last bytes, which closing would throw away.
    closing: Option<(VarInt, &'static str)>,
    /// Our unidirectional streams (control, QPACK decoder): open for the connection's life,
    /// so QUIC counts them as streams with data in flight until the end.
    own_streams: usize,
    /// Where its jobs' replies go: the endpoint's queue, and this connection's slot in it.
    replies: Arc<Vec<LoopQueue>>,
    key: usize,
    /// When QUIC accepted it: a handshake not done by `Timeouts::header` after is given up.
    born: Instant,
    /// Counted by the endpoint among the handshakes under way (until it is started or closed).
    pub handshaking: bool,
    /// Request streams the client reset (RESET_STREAM) or stopped (STOP_SENDING) in the
    /// current rate window, and when that window began: past HTTP/2's `max_client_resets`
    /// per `rate_window` the connection is closed (H3_EXCESSIVE_LOAD), the Rapid Reset
    /// defence HTTP/2 has (CVE-2023-44487).
    cancels: u32,
    cancels_since: Instant,
    /// Cancels seen since `run` last counted them (QUIC's events come without the limits).
    cancels_new: u32,
    /// The request streams to allow once the client uses the few it was first allowed
    /// ([`IDLE_STREAMS`](super::IDLE_STREAMS)); 0 once allowed, or if no more than those.
    widen_to: u32,
}

impl Conn {
    /// A connection QUIC just accepted, in slot `key` of the endpoint; `replies` is the
    /// endpoint's reply queue.
    /// `max_streams` is `QuicLimits::max_streams`.
    pub fn new(
        quic: Quic,
        key: usize,
        replies: Arc<Vec<LoopQueue>>,
        max_streams: u32,
        now: Instant,
    ) -> Conn {
        let mut h3 = h3::Connection::new(h3::H3Config::default());
        h3.set_peer(Some(quic.remote_address()));
        let to = LoopConn {
            loops: replies.clone(),
            owner: 0,
            conn: key,
            stream: 0,
        };
        Conn {
            quic,
            h3,
            started: false,
            outbox: HashMap::new(),
            bodies: HashMap::new(),
            pulls: HashMap::new(),
            readable: BTreeSet::new(),
            writable: Vec::new(),
            opened: None,
            tickets: Vec::new(),
            jobs_out: 0,
            waker: Arc::new(move || workers::ReplyTo::more(&to)),
            taps: Taps::default(),
            lost: false,
            draining: false,
            closing: None,
            own_streams: 0,
            replies,
            key,
            born: now,
            handshaking: true,
            cancels: 0,
            cancels_since: now,
            cancels_new: 0,
            widen_to: if max_streams > super::IDLE_STREAMS {
                max_streams
            } else {
                0
            },
        }
    }

    /// Allows the client every request stream of `QuicLimits::max_streams` once it has half
    /// of the first [`IDLE_STREAMS`](super::IDLE_STREAMS) open at once (QUIC sends the new
    /// MAX_STREAMS at once).
    fn widen_streams(&mut self) {
        if self.widen_to > 0
            && self.quic.streams().remote_open_streams(Dir::Bi) * 2
                >= u64::from(super::IDLE_STREAMS)
        {
            self.quic
                .set_max_concurrent_streams(Dir::Bi, VarInt::from_u32(self.widen_to));
            self.widen_to = 0;
        }
    }

    /// Notes that the client cancelled request `stream` (reset or stopped it), for
    /// [`Conn::count_cancels`].
    fn cancelled(&mut self, stream: u64) {
        let id = stream_id(stream);
        if id.dir() == Dir::Bi && id.initiator() != self.quic.side() {
            self.cancels_new += 1;
        }
    }

    /// Counts the streams the client cancelled against the rate limit, and closes the
    /// connection past it. The limits are HTTP/2's (`H2Config::max_client_resets` per
    /// `H2Config::rate_window`: `--http2` settings, or their defaults): one setting for the
    /// one abuse under both versions.
    fn count_cancels<H: Handler>(&mut self, env: &Env<'_, H>) {
        if self.cancels_new == 0 {
            return;
        }
        let h2 = env.limits.http2.unwrap_or_default();
        if env.now.saturating_duration_since(self.cancels_since) > h2.rate_window {
            self.cancels = 0;
            self.cancels_since = env.now;
        }
        self.cancels += std::mem::take(&mut self.cancels_new);
        if self.cancels > h2.max_client_resets && !self.quic.is_closed() {
            log::debug!(
                "QUIC connection from {}: {} streams cancelled within {:?}: closed",
                self.quic.remote_address(),
                self.cancels,
                h2.rate_window
            );
            self.quic.close(
                env.now,
                code(h3::error::ErrorCode::H3_EXCESSIVE_LOAD.0),
                Bytes::from_static(b"too many streams cancelled"),
            );
        }
    }

    /// Whether its handshake is done (HTTP/3 has begun).
    pub fn is_started(&self) -> bool {
        self.started
    }

    /// When a handshake still under way is given up: the header timeout after QUIC accepted
    /// it (QUIC's own bound is the idle timeout, a minute by default, which would let a
    /// flood of handshakes that never finish hold their state that long).
    fn handshake_deadline(&self, header: std::time::Duration) -> Option<Instant> {
        (!self.started && !self.quic.is_closed()).then_some(self.born + header)
    }

    /// Whether QUIC is done with it (closed and drained): its slot may go once no job is out.
    pub fn is_drained(&self) -> bool {
        self.quic.is_drained()
    }

    /// The earliest of QUIC's timer, the HTTP/3 streams' header and body deadlines, and the
    /// write timeout of an answer QUIC takes no byte of ([`Conn::stalled`]).
    pub fn deadline<H: Handler>(&mut self, env: &Env<'_, H>) -> Option<Instant> {
        let quic = self.quic.poll_timeout();
        let h3 = (self.started && !self.lost)
            .then(|| self.h3.poll_timeout(env.timeouts))
            .flatten();
        [
            quic,
            h3,
            self.stalled(env.timeouts.write),
            self.handshake_deadline(env.timeouts.header),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// When the write timeout (`write`) of the answer that has waited longest for QUIC to take
    /// a byte passes: a client that grants no flow-control credit (and keeps the connection
    /// alive with ACKs or PINGs, so QUIC's idle timeout never comes) holds its answer's file
    /// and stream only this long, as a TCP peer that stops reading does.
    fn stalled(&self, write: std::time::Duration) -> Option<Instant> {
        if self.lost || self.quic.is_closed() {
            return None;
        }
        self.outbox.values().map(|o| o.moved + write).min()
    }

    /// Takes QUIC's news (after a datagram or a timer): streams opened, readable, writable,
    /// stopped; the connection up or lost.
    pub fn take_events(&mut self) {
        while let Some(event) = self.quic.poll() {
            match event {
                Event::Connected => self.started = true,
                Event::ConnectionLost { reason } => {
                    log::debug!(
                        "QUIC connection from {} ended: {reason}",
                        self.quic.remote_address()
                    );
                    self.lost = true;
                }
                Event::Stream(StreamEvent::Opened { dir }) => {
                    while let Some(id) = self.quic.streams().accept(dir) {
                        self.readable.insert(id.into());
                    }
                    if dir == Dir::Bi {
                        self.widen_streams();
                    }
                }
                Event::Stream(StreamEvent::Readable { id }) => {
                    self.readable.insert(id.into());
                }
                Event::Stream(StreamEvent::Writable { id }) => self.writable.push(id.into()),
                Event::Stream(StreamEvent::Stopped { id, error_code }) => {
                    self.cancelled(id.into());
                    self.stopped(id.into(), error_code.into_inner());
                }
                Event::Stream(StreamEvent::Finished { .. } | StreamEvent::Available { .. })
                | Event::HandshakeDataReady
                | Event::DatagramReceived
                | Event::DatagramsUnblocked => {}
            }
        }
    }

    /// The client stopped `stream` (STOP_SENDING): what waited for it is dropped, h3
    /// resets its answer, and our sending side is reset here too (RFC 9000 §3.5), whatever h3
    /// knows of the stream: a STOP_SENDING that came before the request's bytes were read, or
    /// after h3 handed over the answer's last bytes, leaves h3 nothing to reset, and a sending
    /// side neither finished nor reset keeps the stream, and so the client's stream credit
    /// (MAX_STREAMS), taken for good.
    fn stopped(&mut self, stream: u64, code: u64) {
        self.outbox.remove(&stream);
        self.bodies.remove(&stream);
        self.pulls.remove(&stream);
        self.h3.stopped(stream, code);
        self.cancel_send(stream);
    }

    /// Resets our sending side of the client's request `stream` (H3_REQUEST_CANCELLED), if it
    /// is not reset yet: the client reset or stopped the stream, so QUIC can free it once both
    /// sides are done.
    fn cancel_send(&mut self, stream: u64) {
        let id = stream_id(stream);
        if id.dir() == Dir::Bi && id.initiator() != self.quic.side() {
            let cancelled = code(h3::error::ErrorCode::H3_REQUEST_CANCELLED.0);
            let _ = self.quic.send_stream(id).reset(cancelled);
        }
    }

    /// Winds the connection down for a drain: GOAWAY, the requests begun are answered, then
    /// it closes (h3's drain); a connection still in its handshake is closed at once.
    pub fn drain<H: Handler>(&mut self, env: &mut Env<'_, H>) {
        self.draining = true;
        if !self.started {
            self.quic.close(env.now, code(0x100), Bytes::new());
            return;
        }
        self.h3.close_after_response();
        self.run(env);
    }

    /// Closes the connection now (the server stops): H3_NO_ERROR, as after a drain; streams
    /// still open are cut off.
    pub fn close_now(&mut self, now: Instant) {
        if !self.quic.is_closed() {
            // H3_NO_ERROR (RFC 9114 §8.1): the server is going away, not the client's fault.
            self.quic
                .close(now, code(0x100), Bytes::from_static(b"server stopping"));
        }
    }

    /// QUIC's timer, an h3 deadline or the write timeout passed.
    pub fn expire<H: Handler>(&mut self, env: &mut Env<'_, H>) {
        if self.quic.poll_timeout().is_some_and(|t| t <= env.now) {
            self.quic.handle_timeout(env.now);
            self.take_events();
        }
        if self
            .handshake_deadline(env.timeouts.header)
            .is_some_and(|t| t <= env.now)
        {
            log::debug!(
                "QUIC connection from {}: no handshake within the header timeout",
                self.quic.remote_address()
            );
            // As a drain closes a handshake (QUIC sends a client mid-handshake a transport
            // APPLICATION_ERROR for it, all that it can read then).
            self.quic.close(env.now, code(0x100), Bytes::new());
            return;
        }
        if self
            .stalled(env.timeouts.write)
            .is_some_and(|t| t <= env.now)
        {
            log::debug!(
                "QUIC connection from {}: an answer took no byte for the write timeout",
                self.quic.remote_address()
            );
            self.cancel_jobs(env);
            self.outbox.clear();
            self.bodies.clear();
            self.pulls.clear();
            // H3_NO_ERROR, as a TCP connection past its write timeout is closed: the client
            // broke no rule, it only stopped reading.
            self.quic
                .close(env.now, code(0x100), Bytes::from_static(b"write timeout"));
            return;
        }
        if self.started && !self.lost {
            let due = self.h3.poll_timeout(env.timeouts);
            if due.is_some_and(|t| t <= env.now) {
                let cx = env.cx();
                let step = self.h3.expire(env.timeouts, &cx, env.handler);
                self.drive(step, env);
            }
        }
        self.run(env);
    }

    /// The loop was woken for this connection: a producer has more of its body, or a job took
    /// some of its request body (its stream may be read on).
    pub fn wake<H: Handler>(&mut self, env: &mut Env<'_, H>) {
        if self.started && !self.lost {
            self.h3.wake_bodies();
            // A job that made room: h3 reads its stream on once it knows.
            self.taps.exchange(&mut self.h3, Some(&self.waker));
        }
        self.run(env);
    }

    /// Serves what QUIC brought and what waits: writable streams' outboxes and pulls, stream
    /// bytes h3 wants, h3's steps and actions; until nothing moves.
    pub fn run<H: Handler>(&mut self, env: &mut Env<'_, H>) {
        if !self.started || self.lost {
            return;
        }
        self.count_cancels(env);
        if self.quic.is_closed() {
            return;
        }
        if self.h3.counts().requests >= MAX_REQUESTS && !self.h3.draining() {
            self.h3.close_after_response();
        }
        loop {
            let mut moved = false;
            for stream in std::mem::take(&mut self.writable) {
                if self.flush(stream, env.now) {
                    if let Some(max) = self.pulls.remove(&stream) {
                        let step = self.pull(stream, max, env);
                        self.drive(step, env);
                        moved = true;
                    }
                }
            }
            let ids: Vec<u64> = self.readable.iter().copied().collect();
            for id in ids {
                while self.h3.wants_input(id, env.limits) && self.read(id) {
                    moved = true;
                }
            }
            let cx = env.cx();
            let step = self.h3.process(&cx, env.handler);
            self.drive(step, env);
            if !moved || self.lost || self.quic.is_closed() {
                break;
            }
        }
        self.close_when_delivered(env.now);
    }

    /// Closes the connection h3 is done with once nothing of its answers is left to deliver:
    /// no bytes wait here, and QUIC has every finished stream acknowledged (only our own
    /// unidirectional streams, open for life, count as in flight).
    fn close_when_delivered(&mut self, now: Instant) {
        let Some((c, reason)) = self.closing else {
            return;
        };
        if self.outbox.is_empty() && self.quic.streams().send_streams() <= self.own_streams {
            self.closing = None;
            self.quic
                .close(now, c, Bytes::from_static(reason.as_bytes()));
        }
    }

    /// Reads one piece of `stream` into h3 (its FIN, or its reset). False when there was
    /// nothing to read (the stream waits for QUIC's next `Readable`).
    fn read(&mut self, stream: u64) -> bool {
        let id = stream_id(stream);
        if id.dir() == Dir::Uni && id.initiator() == self.quic.side() {
            self.readable.remove(&stream);
            return false;
        }
        let mut recv = self.quic.recv_stream(id);
        let Ok(mut chunks) = recv.read(true) else {
            // Stopped or done with.
            self.readable.remove(&stream);
            return false;
        };
        let mut reset = false;
        let read = match chunks.next(READ_PIECE) {
            Ok(Some(chunk)) => {
                self.h3.recv(stream, &chunk.bytes, false);
                true
            }
            Ok(None) => {
                self.h3.recv(stream, &[], true);
                self.readable.remove(&stream);
                true
            }
            Err(ReadError::Blocked) => {
                self.readable.remove(&stream);
                false
            }
            Err(ReadError::Reset(c)) => {
                self.h3.reset(stream, c.into_inner());
                self.readable.remove(&stream);
                reset = true;
                true
            }
        };
        // Flow control credit, if any, goes out with the next datagram the endpoint polls.
        let _ = chunks.finalize();
        if reset {
            self.cancelled(stream);
            // A request reset before h3 read its FIN is dropped, its answer with it; one reset
            // before any of its bytes were read (QUIC drops them with the reset) is unknown to
            // h3, which then resets nothing: our side is reset here, or the stream would hold
            // a unit of the client's stream credit for the connection's life (a
            // Rapid-Reset-style flood would then stall its own connection, and an honest
            // client that cancels requests would run out).
            self.outbox.remove(&stream);
            self.bodies.remove(&stream);
            self.pulls.remove(&stream);
            self.cancel_send(stream);
        }
        read
    }

    /// Does what h3 asked of QUIC, in order.
    fn actions(&mut self, now: Instant) {
        while let Some(action) = self.h3.poll_quic() {
            match action {
                h3::Quic::Open { stream } => {
                    let opened = self.quic.streams().open(Dir::Uni).map(u64::from);
                    self.own_streams += usize::from(opened.is_some());
                    if opened != Some(stream) {
                        // RFC 9114 §6.2: a client must let a server open its three
                        // unidirectional streams; one that does not cannot be served.
                        log::debug!("QUIC: the client allows no stream {stream} ({opened:?})");
                        self.quic.close(
                            now,
                            code(h3::error::ErrorCode::H3_STREAM_CREATION_ERROR.0),
                            Bytes::from_static(b"no room for the control stream"),
                        );
                    }
                }
                h3::Quic::Send { stream, bytes, fin } => {
                    let out = self.outbox.entry(stream).or_insert_with(|| Outbox {
                        bytes: Vec::new(),
                        pos: 0,
                        fin: false,
                        moved: now,
                    });
                    if out.bytes.is_empty() {
                        out.bytes = bytes;
                    } else {
                        out.bytes.extend_from_slice(&bytes);
                    }
                    out.fin |= fin;
                    self.flush(stream, now);
                }
                h3::Quic::Reset { stream, code: c } => {
                    self.outbox.remove(&stream);
                    self.bodies.remove(&stream);
                    self.pulls.remove(&stream);
                    let _ = self.quic.send_stream(stream_id(stream)).reset(code(c.0));
                }
                h3::Quic::Stop { stream, code: c } => {
                    self.readable.remove(&stream);
                    let _ = self.quic.recv_stream(stream_id(stream)).stop(code(c.0));
                }
                h3::Quic::Close { code: c, reason } => {
                    if c == h3::error::ErrorCode::H3_NO_ERROR {
                        // The end of a drain: the answers' last bytes go out first.
                        self.closing = Some((code(c.0), reason));
                    } else {
                        self.quic
                            .close(now, code(c.0), Bytes::from_static(reason.as_bytes()));
                    }
                }
            }
        }
    }

    /// Writes what waits for `stream` as far as QUIC takes it (then its FIN). True once nothing
    /// waits (written, or the stream is gone).
    fn flush(&mut self, stream: u64, now: Instant) -> bool {
        let Some(out) = self.outbox.get_mut(&stream) else {
            return true;
        };
        let id = stream_id(stream);
        while out.pos < out.bytes.len() {
            match self.quic.send_stream(id).write(&out.bytes[out.pos..]) {
                Ok(n) => {
                    out.pos += n;
                    out.moved = now;
                }
                Err(quinn_proto::WriteError::Blocked) => return false,
                Err(quinn_proto::WriteError::Stopped(c)) => {
                    self.stopped(stream, c.into_inner());
                    return true;
                }
                Err(quinn_proto::WriteError::ClosedStream) => {
                    // Reset already (`cancel_send`: the client stopped or reset the stream
                    // before h3 knew it): h3 is told, as for a STOP_SENDING, or it would pull
                    // the rest of the answer's body only for each piece to be thrown away here.
                    let cancelled = h3::error::ErrorCode::H3_REQUEST_CANCELLED.0;
                    self.stopped(stream, cancelled);
                    return true;
                }
            }
        }
        if out.fin {
            let _ = self.quic.send_stream(id).finish();
        }
        self.outbox.remove(&stream);
        true
    }

    /// Reads at most `max` bytes of `stream`'s body and gives them to h3.
    fn pull<H: Handler>(
        &mut self,
        stream: u64,
        max: usize,
        env: &mut Env<'_, H>,
    ) -> Action<H::Job> {
        let mut bytes = Vec::new();
        let (pulled, trailers) = match self.bodies.get_mut(&stream) {
            Some(body) => match body.pull(&mut bytes, max) {
                Ok(Pulled::Ended) => (Pulled::Ended, body.take_trailers()),
                Ok(pulled) => (pulled, Vec::new()),
                Err(e) => {
                    log::debug!("a body failed in the middle: {e}");
                    (Pulled::Failed, Vec::new())
                }
            },
            None => (Pulled::Failed, Vec::new()),
        };
        let cx = env.cx();
        let step = self
            .h3
            .pulled(stream, &mut bytes, pulled, trailers, &cx, env.handler);
        if !self.h3.pulls(stream) {
            self.bodies.remove(&stream);
        }
        step
    }

    /// A job's reply for `stream` came back.
    pub fn complete<H: Handler>(&mut self, stream: u64, reply: Reply, env: &mut Env<'_, H>) {
        self.jobs_out = self.jobs_out.saturating_sub(1);
        self.tickets.retain(|(s, _)| *s != stream);
        if self.lost || !self.started {
            return;
        }
        let step = self.answer(stream, reply, env);
        self.drive(step, env);
        self.run(env);
    }

    /// Hands a reply to h3, the file it carries (one its job opened) kept for its body as a
    /// `/files` answer's is.
    fn answer<H: Handler>(
        &mut self,
        stream: u64,
        mut reply: Reply,
        env: &mut Env<'_, H>,
    ) -> Action<H::Job> {
        if let Some(file) = &mut reply.file {
            if let FileSource::Open(open) = std::mem::replace(&mut file.source, FileSource::Taken) {
                self.opened = Some(BodyFile::unbudgeted(open));
            }
        }
        let cx = env.cx();
        self.h3.complete(stream, reply, &cx, env.handler)
    }

    /// Acts on what h3 says until it waits: the one match on [`Action`].
    fn drive<H: Handler>(&mut self, mut step: Action<H::Job>, env: &mut Env<'_, H>) {
        loop {
            self.actions(env.now);
            self.after_call(env);
            let cx = env.cx();
            step = match step {
                // HTTP/3 neither flushes (QUIC takes the bytes) nor switches.
                Action::Read | Action::Close | Action::Flush | Action::Switched => break,
                Action::Offload { stream, job } => {
                    let ticket = Arc::new(Ticket::default());
                    let reply_to = || LoopConn {
                        loops: self.replies.clone(),
                        owner: 0,
                        conn: self.key,
                        stream,
                    };
                    let offloaded =
                        workers::offload(env.queue, job, Some(ticket.clone()), reply_to, env.stats);
                    match offloaded {
                        Offloaded::Queued => {
                            self.jobs_out += 1;
                            self.tickets.push((stream, ticket));
                            self.h3.process(&cx, env.handler)
                        }
                        Offloaded::Answer(reply) => self.answer(stream, reply, env),
                        Offloaded::Gone => {
                            // The workers are gone: the server is stopping.
                            self.close_now(env.now);
                            break;
                        }
                    }
                }
                Action::Open { stream, request } => {
                    let (found, file) = match env.files.open(&request) {
                        Ok(OpenFile { meta, file }) => (Ok(meta), Some(file)),
                        Err(e) => (Err(e), None),
                    };
                    self.opened = file;
                    let step = self.h3.file(
                        stream,
                        &request,
                        found.as_ref().map_err(|e| *e),
                        &cx,
                        env.handler,
                    );
                    // Taken by the step just made if it is the body's; closed now otherwise
                    // (a HEAD, a 304, a range not satisfiable).
                    if !matches!(step, Action::Body { .. }) {
                        self.opened = None;
                    }
                    step
                }
                Action::Body {
                    stream,
                    offset,
                    len,
                    encode,
                } => {
                    if let Some(file) = self.opened.take() {
                        let body = match encode {
                            None => Body::file(file, offset, len),
                            Some(encode) => Body::encoded(file, offset, len, encode),
                        };
                        self.bodies.insert(stream, body);
                    }
                    self.h3.process(&cx, env.handler)
                }
                Action::Stream { stream, streamed } => {
                    let wake = self.waker.clone();
                    streamed.on_data(move || wake());
                    self.bodies.insert(stream, Body::stream(streamed));
                    self.h3.process(&cx, env.handler)
                }
                Action::Pull { stream, max } => {
                    if self.outbox.contains_key(&stream) {
                        // QUIC has not taken the last piece: the next waits for `Writable`.
                        self.pulls.insert(stream, max);
                        self.h3.process(&cx, env.handler)
                    } else {
                        self.pull(stream, max, env)
                    }
                }
            };
        }
        // A reply's file no body took is closed.
        self.opened = None;
        self.bodies.retain(|&s, _| self.h3.pulls(s));
        self.pulls.retain(|&s, _| self.h3.pulls(s));
    }

    /// What every h3 call may leave behind: jobs to cancel (their streams were reset) and new
    /// request bodies streaming to jobs, which wake the loop when their job makes room.
    fn after_call<H: Handler>(&mut self, env: &Env<'_, H>) {
        for stream in self.h3.take_cancelled() {
            if let Some((_, t)) = self.tickets.iter().find(|(s, _)| *s == stream) {
                if t.cancel() {
                    env.stats.job_cancelled();
                }
            }
        }
        self.taps.exchange(&mut self.h3, Some(&self.waker));
    }

    /// The connection is over with jobs out: those not started are cancelled (counted now; the
    /// worker that takes one drops it unrun), and request bodies still going to the others
    /// are cut short (the writers' drop), so that none waits for bytes that will never come.
    pub fn cancel_jobs<H: Handler>(&mut self, env: &Env<'_, H>) {
        for (_, t) in self.tickets.drain(..) {
            if t.cancel() {
                env.stats.job_cancelled();
            }
        }
        self.taps.clear();
    }

    /// Whether the server asked it to wind down.
    pub fn is_draining(&self) -> bool {
        self.draining
    }
}

impl Conn {
    /// What its HTTP/3 connection counted, for `/stats` as it ends (`Stats::http3_ended`).
    pub fn counts(&self) -> &h3::Counts {
        self.h3.counts()
    }

    /// The packets QUIC sent on it and lost, for `/stats` as it ends.
    pub fn packets(&self) -> crate::stats::QuicPackets {
        let path = self.quic.stats().path;
        crate::stats::QuicPackets {
            sent: path.sent_packets,
            lost: path.lost_packets,
        }
    }
}
