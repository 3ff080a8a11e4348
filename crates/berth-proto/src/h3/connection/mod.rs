//! One HTTP/3 connection, server side: each QUIC stream's bytes in, requests to the
//! exchange, bytes per stream out. QUIC itself (quinn-proto, wired in by the driver) is not
//! here: the connection sits above "QUIC streams".
//!
//! The shape is HTTP/2's ([`h2::Connection`](crate::h2::Connection)): the driver does what
//! the returned [`Action`] says (the one step every codec returns) (run a job, open a file, keep a body source, pull its next
//! bytes), and every request goes through the one exchange
//! (`http::exchange::ask`), its answer written through QPACK's head sink (`h3::answer::Qpack`,
//! static table only: its docs say why). What differs is what QUIC does for HTTP/3: streams
//! are QUIC's, so there are no stream states, windows, PING or WINDOW_UPDATE here; and what
//! goes out is not one byte string but [`Quic`] orders: bytes for a stream, a unidirectional
//! stream to open, a stream to reset or stop, the connection to close.
//!
//! ```text
//!   QUIC stream bytes ──> recv(stream, bytes, fin)
//!       peer's control ──> FrameReader(Control): SETTINGS first, GOAWAY
//!       peer's encoder ──> qpack::Decoder (unblocks request streams)
//!       peer's decoder ──> qpack::Encoder
//!       request      ──> FrameReader(Request): HEADERS ──> qpack::Decoder ──> check_request
//!                          DATA* ──> body (whole, or fed to a job)  [HEADERS trailers] FIN
//!                                          │ Request
//!                                          v
//!                            exchange::ask ──> Outcome ──> Action (Offload, Open, Body, Stream)
//!   poll_quic <── Open(control), Send(HEADERS via Qpack, DATA), Reset, Stop, Close
//! ```
//!
//! Call order for a driver:
//! 1. hand each QUIC stream's bytes, in order, to [`Connection::recv`] (FIN with the last);
//!    a peer's RESET_STREAM to [`Connection::reset`], its STOP_SENDING to
//!    [`Connection::stopped`]; then call [`Connection::process`] with the [`Context`];
//! 2. whatever the step, do every [`Connection::poll_quic`] (open our unidirectional
//!    streams in the order asked: QUIC gives a server's the ids 3, 7, 11 in that order, and
//!    the actions name them so);
//! 3. on [`Action::Offload`], run the job and give its reply to [`Connection::complete`];
//!    on [`Action::Open`], open the file and give what was found to [`Connection::file`]; call
//!    `process` again at once in both cases (other streams go on meanwhile); after each call,
//!    drop the jobs [`Connection::take_cancelled`] names, and carry the request bodies it
//!    passed on to their jobs ([`Taps::exchange`](crate::http::Taps::exchange)), whose
//!    writers wake the owner when their job makes room (then exchange again, and `process`);
//! 4. on [`Action::Body`] or [`Action::Stream`], keep the file or producer for the stream and
//!    call `process` again; on [`Action::Pull`], read at most `max` bytes of the stream's
//!    source **when QUIC says the stream can take more** (the pull may wait: call `process`
//!    meanwhile) and give them to [`Connection::pulled`]; drop a held source once
//!    [`Connection::pulls`] says its stream no longer takes it; a producer's wake is
//!    [`Connection::wake_bodies`] then `process`;
//! 5. on [`Action::Read`], wait for stream bytes, a reply, a pull's room, a wake, or the
//!    deadline of [`Connection::poll_timeout`], then call [`Connection::expire`];
//! 6. on [`Action::Close`], do the orders (the last is [`Quic::Close`]) and close.
//!
//! **Flow control is QUIC's.** A body goes out a piece at a time ([`H3Config::piece`] bytes
//! at most per [`Action::Pull`]), one pull per stream at a time: the driver answers a pull only
//! when the QUIC stream has room, so a client that reads nothing holds one piece per stream
//! in the driver's send buffer, not the body. Request bytes are the driver's to bound in the
//! same way: it reads a QUIC stream while [`Connection::wants_input`] says so (QUIC's stream
//! window then stops the peer), as a request stream blocked on QPACK, or whose job has not
//! taken what it was fed, takes nothing.
//!
//! Errors follow RFC 9114 §8: a connection error closes the connection with its code
//! ([`Quic::Close`]); a stream error resets the request stream and stops reading it
//! ([`Quic::Reset`], [`Quic::Stop`]), and the connection goes on.
//!
//! Timeouts are per request stream ([`Connection::poll_timeout`], [`Connection::expire`]):
//! a head not complete within the header timeout resets its stream, a body that stops
//! arriving is answered 408; an idle connection is QUIC's idle timeout's.
//!
//! What this does **not** do (yet): server push (never sent: RFC 9114 §4.6 lets a server not
//! push), and a dynamic table for answers (see `h3::answer`).

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

mod request;
mod timeouts;
mod uni;
mod wire;

use super::error::{Error, ErrorCode, H3Error};
use super::frame::{FrameReader, StreamKind};
use super::qpack::{Decoder, DecoderConfig, Encoder};
use super::settings::Settings;
use super::stream::{self, PeerStreams, UniStream};
use super::Role;
use crate::http::feed::Feeding;
use crate::http::hand_off::{self, GivenUp, Source, Stage, Turn};
use crate::http::intake::{self, Malformed, Next, WholeBodies};
use crate::http::{Action, Context, Handler, Limits, Passed, Pulled};

/// Settings of an HTTP/3 connection (the rest comes from [`Limits`]:
/// the field section size is [`Limits::max_header_bytes`](crate::http::Limits), the body
/// limit, the jobs and files per connection are HTTP/2's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct H3Config {
    /// SETTINGS_QPACK_MAX_TABLE_CAPACITY: the dynamic table the client's encoder may use.
    /// Default 4096 (HPACK's default; nginx, h2o and quiche allow the same).
    pub qpack_max_table_capacity: u64,
    /// SETTINGS_QPACK_BLOCKED_STREAMS: request streams that may wait for the client's
    /// encoder stream at once; one more closes the connection. Default 16.
    pub qpack_blocked_streams: u64,
    /// The most plain bytes of a body asked for at once ([`Action::Pull`]), and the most request
    /// body fed to a job before its stream is read no further. Default 64 KiB, HTTP/2's.
    pub piece: usize,
}

impl Default for H3Config {
    fn default() -> Self {
        let d = DecoderConfig::default();
        H3Config {
            qpack_max_table_capacity: d.max_table_capacity,
            qpack_blocked_streams: d.max_blocked_streams,
            piece: 64 * 1024,
        }
    }
}

/// What the connection asks of QUIC, in order ([`Connection::poll_quic`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Quic {
    /// Open our next unidirectional stream; QUIC gives it this id (a server's are 3, 7, 11,
    /// ... in the order opened).
    Open {
        /// The id it gets.
        stream: u64,
    },
    /// Write `bytes` on `stream`, then FIN if `fin`.
    Send {
        /// The stream.
        stream: u64,
        /// What to write.
        bytes: Vec<u8>,
        /// The stream's sending side ends after them.
        fin: bool,
    },
    /// Reset our sending side of `stream` (RESET_STREAM) with `code`.
    Reset {
        /// The stream.
        stream: u64,
        /// The application error code.
        code: ErrorCode,
    },
    /// Ask the peer to stop sending on `stream` (STOP_SENDING) with `code`; read no more
    /// of it.
    Stop {
        /// The stream.
        stream: u64,
        /// The application error code.
        code: ErrorCode,
    },
    /// Close the connection (CONNECTION_CLOSE) with `code`.
    Close {
        /// The application error code: H3_NO_ERROR after a drain.
        code: ErrorCode,
        /// Why, for the reason phrase.
        reason: &'static str,
    },
}

/// What the connection counted, for the driver's `/stats`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Request heads received.
    pub requests: u64,
    /// Request streams reset for a stream error the client made (malformed requests).
    pub stream_errors: u64,
    /// Request streams the client reset or stopped before their answer was complete.
    pub client_resets: u64,
    /// Request streams refused after GOAWAY (H3_REQUEST_REJECTED).
    pub rejected: u64,
    /// Requests answered 431 for a field section past the limit.
    pub oversized_heads: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Our control stream is not written yet.
    Start,
    /// Serving.
    Open,
    /// Closed (an error, or the drain done).
    Closed,
}

/// Where a request stream's receiving side is (RFC 9114 §4.1: HEADERS, DATA*, trailing
/// HEADERS).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recv {
    /// Nothing yet: HEADERS must come first.
    Head,
    /// The request's HEADERS came (decoded, or blocked on QPACK): DATA, or trailers.
    Body,
    /// The trailing HEADERS came: only FIN (and unknown frames) may follow.
    Trailers,
    /// FIN was read.
    Closed,
}

/// One request stream.
#[derive(Debug)]
struct Req {
    reader: FrameReader,
    /// Bytes received and not yet read, from `pos`.
    inbox: Vec<u8>,
    pos: usize,
    /// The client's FIN came (after `inbox`).
    fin: bool,
    recv: Recv,
    /// A field section waits for the client's encoder stream: nothing more is read.
    blocked: bool,
    /// Its part in the hand-off: where its answer stands, where the body comes from.
    turn: Turn,
    /// An [`Action::Pull`] is out for it.
    pulling: bool,
    /// The request's head is complete (decoded and checked).
    head_done: bool,
    /// When the header timeout started (the stream's first read), or, once the head is
    /// done, when body bytes last came: the timeouts run from it ([`Connection::poll_timeout`]).
    clock: Option<Instant>,
}

impl Req {
    fn new(max_section: usize) -> Self {
        Req {
            reader: FrameReader::new(StreamKind::Request, Role::Server, max_section),
            inbox: Vec::new(),
            pos: 0,
            fin: false,
            recv: Recv::Head,
            blocked: false,
            turn: Turn::new(),
            pulling: false,
            head_done: false,
            clock: None,
        }
    }
}

/// What a peer's unidirectional stream turned out to be.
#[derive(Debug)]
enum UniKind {
    /// Its type is not read yet.
    Header,
    Control(FrameReader),
    /// The client's QPACK encoder stream, into our decoder.
    Encoder,
    /// The client's QPACK decoder stream, into our encoder.
    Decoder,
    /// A type with no meaning here: its bytes are dropped.
    Ignored,
}

#[derive(Debug)]
struct Uni {
    kind: UniKind,
    ty: Option<UniStream>,
    inbox: Vec<u8>,
    fin: bool,
}

/// A connection error: the code and why.
type Fail = H3Error;

/// A peer error from the QPACK encoder or decoder, or a misuse (a bug here, closed as
/// H3_INTERNAL_ERROR rather than blamed on the peer).
fn qpack_fail(e: Error) -> Fail {
    match e {
        Error::Peer(e) => e,
        Error::Misuse(why) => H3Error::conn(ErrorCode::H3_INTERNAL_ERROR, why),
    }
}

/// The request streams a connection is done with, in little room: every id below `below`,
/// and those above it in `above` (a stream QUIC opened but the client never used holds
/// `below` back; QUIC's stream limit bounds how many can be above it).
#[derive(Debug, Default)]
struct Finished {
    below: u64,
    above: std::collections::BTreeSet<u64>,
}

impl Finished {
    fn insert(&mut self, id: u64) {
        if id < self.below {
            return;
        }
        self.above.insert(id);
        while self.above.remove(&self.below) {
            self.below += 4;
        }
    }

    fn contains(&self, id: u64) -> bool {
        id < self.below || self.above.contains(&id)
    }
}

/// Our control stream (a server's first unidirectional stream).
const CONTROL: u64 = 3;
/// Our QPACK decoder stream (the second).
const DECODER: u64 = 7;

/// One HTTP/3 connection's server state. See the [module docs](self) for the call order.
pub struct Connection {
    config: H3Config,
    peer: Option<std::net::SocketAddr>,
    phase: Phase,
    decoder: Decoder,
    /// Static table only (see `h3::answer`).
    encoder: Encoder,
    /// The field section of an answer being written (kept: no allocation per answer).
    section: Vec<u8>,
    /// The largest field section read from a request stream (twice the announced size).
    max_section: usize,
    peer_streams: PeerStreams,
    uni: BTreeMap<u64, Uni>,
    /// The client's SETTINGS, once its control stream brought them.
    peer_settings: Option<Settings>,
    requests: BTreeMap<u64, Req>,
    /// The lowest request stream id past every one seen.
    next_request: u64,
    /// Request streams done with (answered, reset, refused): late bytes on them are
    /// dropped. QUIC may bring a stream's first bytes after a later stream's, so a stream
    /// below `next_request` that is not here is new.
    finished: Finished,
    actions: VecDeque<Quic>,
    /// A drain was asked for.
    drain: bool,
    /// The stream id our GOAWAY named: requests at or past it are rejected.
    goaway: Option<u64>,
    /// The client sent GOAWAY.
    peer_gone: bool,
    counts: Counts,
    /// Streams waiting their turn ([`Stage::Queued`], [`Stage::FileQueued`]).
    waiting: usize,
    /// Pieces of request bodies for the driver to carry to their jobs
    /// ([`Connection::passed`]).
    passed: Passed,
    cancelled: Vec<u64>,
    /// The stream last asked to pull: the next pull goes to a later one (round-robin).
    last_pull: u64,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("phase", &self.phase)
            .field("requests", &self.requests.len())
            .field("goaway", &self.goaway)
            .field("counts", &self.counts)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// A connection at its start: nothing sent yet (the first `process` opens the control
    /// stream).
    pub fn new(config: H3Config) -> Self {
        Connection {
            config,
            peer: None,
            phase: Phase::Start,
            decoder: Decoder::new(DecoderConfig::default()),
            encoder: Encoder::new(),
            section: Vec::new(),
            max_section: 0,
            peer_streams: PeerStreams::default(),
            uni: BTreeMap::new(),
            peer_settings: None,
            requests: BTreeMap::new(),
            next_request: 0,
            finished: Finished::default(),
            actions: VecDeque::new(),
            drain: false,
            goaway: None,
            peer_gone: false,
            counts: Counts::default(),
            waiting: 0,
            passed: Passed::default(),
            cancelled: Vec::new(),
            last_pull: 0,
        }
    }

    /// The address of the connection's peer, which every request carries.
    pub fn set_peer(&mut self, peer: Option<std::net::SocketAddr>) {
        self.peer = peer;
    }

    /// What the connection has counted.
    pub fn counts(&self) -> &Counts {
        &self.counts
    }

    /// The client's SETTINGS, once they came.
    pub fn peer_settings(&self) -> Option<&Settings> {
        self.peer_settings.as_ref()
    }

    /// Request streams held (jobs out for reset streams included).
    pub fn open_streams(&self) -> usize {
        self.requests.len()
    }

    /// True once the connection is over.
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    /// The client sent GOAWAY: it opens no more requests.
    pub fn peer_gone(&self) -> bool {
        self.peer_gone
    }

    /// Jobs out for this connection's streams.
    pub fn jobs_out(&self) -> usize {
        hand_off::jobs_out(self.requests.values().map(|s| &s.turn))
    }

    /// Streams whose job was given up (reset while it was out) since the last call.
    pub fn take_cancelled(&mut self) -> impl Iterator<Item = u64> + '_ {
        self.cancelled.drain(..)
    }

    /// The next thing to ask of QUIC, in order; `None` when there is none.
    pub fn poll_quic(&mut self) -> Option<Quic> {
        self.actions.pop_front()
    }

    /// Whether the driver should read more of `stream` from QUIC: false while the
    /// connection holds unread bytes of it (blocked on QPACK, or its job has not taken what
    /// it was fed), or holds as much of bodies taken whole as `limits` lets one connection
    /// (the body limit; the lowest such stream goes on while no whole request waits), so that
    /// QUIC's stream window, not memory here, holds the client back.
    pub fn wants_input(&self, stream: u64, limits: &Limits) -> bool {
        if let Some(s) = self.requests.get(&stream) {
            let fed = s
                .turn
                .feed
                .as_ref()
                .is_some_and(|f| f.queued() >= self.config.piece);
            let held = || WholeBodies::of(self.requests.iter().map(|(&id, r)| (id, &r.turn)));
            return s.pos >= s.inbox.len()
                && !s.fin
                && !s.blocked
                && !s.turn.reset
                && !fed
                && (!intake::arriving_whole(&s.turn)
                    || held().may_take(stream, &s.turn, limits.max_body_bytes));
        }
        self.uni.get(&stream).is_none_or(|u| !u.fin)
    }

    /// Winds the connection down: GOAWAY at the next `process` naming the first request
    /// stream not seen; those seen are answered, later ones are rejected
    /// (H3_REQUEST_REJECTED: the client retries them elsewhere, RFC 9114 §5.2), and the
    /// connection closes with H3_NO_ERROR once they are done. (A stream below the GOAWAY's
    /// id that QUIC opened but that has brought no byte when the last one is done is not
    /// waited for: the client learns from the close that it was not served.)
    pub fn close_after_response(&mut self) {
        self.drain = true;
    }

    /// A drain was asked for.
    pub fn draining(&self) -> bool {
        self.drain
    }

    /// Bytes QUIC brought for `stream`, in order; `fin` with the last. Nothing is read
    /// until `process`.
    pub fn recv(&mut self, stream: u64, bytes: &[u8], fin: bool) {
        if self.phase == Phase::Closed {
            return;
        }
        if stream::is_unidirectional(stream) {
            if stream::opened_by(stream, Role::Server) {
                // Our own streams carry nothing back.
                return;
            }
            let u = self.uni.entry(stream).or_insert(Uni {
                kind: UniKind::Header,
                ty: None,
                inbox: Vec::new(),
                fin: false,
            });
            if !matches!(u.kind, UniKind::Ignored) {
                u.inbox.extend_from_slice(bytes);
            }
            u.fin |= fin;
            return;
        }
        if !stream::opened_by(stream, Role::Client) {
            return;
        }
        if !self.requests.contains_key(&stream) {
            if self.finished.contains(stream) {
                // Done with, or refused: late bytes are dropped.
                return;
            }
            self.next_request = self.next_request.max(stream + 4);
            if self.goaway.is_some_and(|g| stream >= g) {
                self.counts.rejected += 1;
                self.stream_error(stream, ErrorCode::H3_REQUEST_REJECTED);
                return;
            }
            self.requests.insert(stream, Req::new(self.max_section));
        }
        let s = self.requests.get_mut(&stream).expect("inserted above");
        if s.turn.reset || s.recv == Recv::Closed {
            // Reset (kept only while its job is out), or past its FIN: nothing more is read.
            return;
        }
        if s.pos >= s.inbox.len() {
            s.inbox.clear();
            s.pos = 0;
        }
        s.inbox.extend_from_slice(bytes);
        s.fin |= fin;
    }

    /// The client reset its sending side of `stream` (RESET_STREAM): a request stream's
    /// request is incomplete and dropped (its job, if out, is cancelled); a critical stream
    /// of the client's closes the connection (H3_CLOSED_CRITICAL_STREAM).
    pub fn reset(&mut self, stream: u64, _code: u64) {
        if let Some(u) = self.uni.get(&stream) {
            if let Some(ty) = u.ty {
                if let Err(e) = self.peer_streams.closed(ty) {
                    self.close(e);
                }
            }
            self.uni.remove(&stream);
            return;
        }
        let Some(s) = self.requests.get(&stream) else {
            return;
        };
        if s.turn.stage == Stage::Done || s.turn.reset {
            return;
        }
        if s.recv == Recv::Closed {
            // The request was whole (its FIN read): a reset of a stream whose data all came
            // changes nothing (RFC 9000 §3.2), and the answer goes on; STOP_SENDING is what
            // stops it (`stopped`).
            return;
        }
        self.counts.client_resets += 1;
        self.decoder.cancel_stream(stream);
        // RFC 9114 §4.1.1: the answer to a request the client abandoned is not wanted.
        self.actions.push_back(Quic::Reset {
            stream,
            code: ErrorCode::H3_REQUEST_CANCELLED,
        });
        self.drop_stream(stream);
    }

    /// The client asked us to stop sending on `stream` (STOP_SENDING): its answer is
    /// reset (RFC 9000 §3.5) and the stream dropped; a job out for it is cancelled.
    pub fn stopped(&mut self, stream: u64, _code: u64) {
        let Some(s) = self.requests.get(&stream) else {
            return;
        };
        if s.turn.stage == Stage::Done || s.turn.reset {
            return;
        }
        self.counts.client_resets += 1;
        self.decoder.cancel_stream(stream);
        self.actions.push_back(Quic::Reset {
            stream,
            code: ErrorCode::H3_REQUEST_CANCELLED,
        });
        self.drop_stream(stream);
    }

    /// The control stream and SETTINGS (RFC 9114 §6.2.1, §7.2.4), and the QPACK decoder
    /// stream if the client may use a dynamic table (RFC 9204 §4.2). No encoder stream:
    /// answers use the static table only.
    fn start(&mut self, cx: &Context<'_>) {
        self.phase = Phase::Open;
        let decoder = DecoderConfig {
            max_table_capacity: self.config.qpack_max_table_capacity,
            max_blocked_streams: self.config.qpack_blocked_streams,
            max_field_section_size: cx.limits.max_header_bytes as u64,
        };
        self.decoder = Decoder::new(decoder);
        // Twice the announced size fits every honest section, Huffman coding included.
        self.max_section = 2 * cx.limits.max_header_bytes;
        for s in self.requests.values_mut() {
            // Streams whose bytes came before the first `process` have read nothing yet:
            // their readers take the limit now known.
            s.reader = FrameReader::new(StreamKind::Request, Role::Server, self.max_section);
        }
        let settings = Settings {
            qpack_max_table_capacity: decoder.max_table_capacity,
            max_field_section_size: Some(decoder.max_field_section_size),
            qpack_blocked_streams: decoder.max_blocked_streams,
        };
        let mut bytes = Vec::new();
        // Writing our own types and settings cannot fail (no reserved type, values in range).
        let _ = UniStream::Control.write(&mut bytes);
        let _ = settings.write_frame(None, &mut bytes);
        self.actions.push_back(Quic::Open { stream: CONTROL });
        self.send(CONTROL, bytes, false);
        if decoder.max_table_capacity > 0 {
            let mut bytes = Vec::new();
            let _ = UniStream::QpackDecoder.write(&mut bytes);
            self.actions.push_back(Quic::Open { stream: DECODER });
            self.send(DECODER, bytes, false);
        }
    }

    /// Queues bytes for a stream, joined to the last action if it wrote the same stream.
    fn send(&mut self, stream: u64, bytes: Vec<u8>, fin: bool) {
        if let Some(Quic::Send {
            stream: last,
            bytes: queued,
            fin: queued_fin,
        }) = self.actions.back_mut()
        {
            if *last == stream && !*queued_fin {
                queued.extend_from_slice(&bytes);
                *queued_fin = fin;
                return;
            }
        }
        self.actions.push_back(Quic::Send { stream, bytes, fin });
    }

    /// Reads what the streams brought, answers what it can, and says what comes next.
    pub fn process<H: Handler>(&mut self, cx: &Context<'_>, handler: &mut H) -> Action<H::Job> {
        match self.phase {
            Phase::Closed => return Action::Close,
            Phase::Start => self.start(cx),
            Phase::Open => {}
        }
        match self.work(cx, handler) {
            Err(fail) => {
                self.close(fail);
                return Action::Close;
            }
            Ok(Some(action)) => return action,
            Ok(None) => {}
        }
        self.flush_decoder();
        if self.drain && self.goaway.is_none() {
            // §5.2: the first request stream not seen; those below it are answered.
            let id = self.next_request;
            self.goaway = Some(id);
            let mut bytes = Vec::new();
            let _ = super::frame::Frame::Goaway(id).write(&mut bytes);
            self.send(CONTROL, bytes, false);
        }
        if self.goaway.is_some() && self.requests.is_empty() {
            self.actions.push_back(Quic::Close {
                code: ErrorCode::H3_NO_ERROR,
                reason: "",
            });
            self.phase = Phase::Closed;
            return Action::Close;
        }
        match self.next_pull() {
            Some((stream, max)) => Action::Pull { stream, max },
            None => Action::Read,
        }
    }

    /// Everything that may be read is read, up to the first piece of work for the driver.
    fn work<H: Handler>(
        &mut self,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Result<Option<Action<H::Job>>, Fail> {
        if let Some(out) = hand_off::unpark(self, cx, handler) {
            return Ok(Some(out));
        }
        let ids: Vec<u64> = self
            .uni
            .iter()
            .filter(|(_, u)| !u.inbox.is_empty() || u.fin)
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            self.read_uni(id)?;
        }
        while let Some((stream, decoded)) = self.decoder.poll_unblocked() {
            if let Some(out) = self.unblocked(stream, decoded, cx, handler)? {
                return Ok(Some(out));
            }
        }
        let ids: Vec<u64> = self
            .requests
            .iter()
            .filter(|(_, s)| s.pos < s.inbox.len() || (s.fin && s.recv != Recv::Closed))
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            if let Some(out) = self.read_request(id, cx, handler)? {
                return Ok(Some(out));
            }
        }
        Ok(None)
    }

    /// What our decoder has to tell the client's encoder goes out on our decoder stream.
    fn flush_decoder(&mut self) {
        if self.decoder.has_decoder_stream_output() {
            let mut bytes = Vec::new();
            self.decoder.write_decoder_stream(&mut bytes);
            if self.config.qpack_max_table_capacity > 0 {
                self.send(DECODER, bytes, false);
            }
        }
    }

    /// Ends the connection for a connection error: CONNECTION_CLOSE with its code.
    fn close(&mut self, fail: Fail) {
        if self.phase == Phase::Closed {
            return;
        }
        self.actions.push_back(Quic::Close {
            code: fail.code,
            reason: fail.reason,
        });
        for (id, mut s) in std::mem::take(&mut self.requests) {
            if s.turn.give_up(&mut self.passed) == (GivenUp::Kept { cancel: true }) {
                self.cancelled.push(id);
            }
        }
        self.waiting = 0;
        self.phase = Phase::Closed;
    }

    /// A stream error (RFC 9114 §8): the stream is reset and no more of it read.
    fn stream_error(&mut self, id: u64, code: ErrorCode) {
        self.actions.push_back(Quic::Stop { stream: id, code });
        self.actions.push_back(Quic::Reset { stream: id, code });
        self.decoder.cancel_stream(id);
        self.drop_stream(id);
        if !self.requests.contains_key(&id) {
            // Refused before it was taken up (after GOAWAY): done with all the same.
            self.finished.insert(id);
        }
    }

    /// The stream is done with: dropped, and late bytes on it ignored.
    fn forget(&mut self, id: u64) {
        self.requests.remove(&id);
        if self.requests.is_empty() {
            // An emptied B-tree keeps its leaf (about 2.8 KB of requests): an idle connection
            // holds nothing of its last request.
            self.requests = BTreeMap::new();
        }
        self.finished.insert(id);
    }

    /// The stream is dropped, or kept as a zombie while its job or file open is out.
    fn drop_stream(&mut self, id: u64) {
        let Some(s) = self.requests.get_mut(&id) else {
            return;
        };
        s.inbox = Vec::new();
        s.pos = 0;
        if s.turn
            .drop_out(id, &mut self.cancelled, &mut self.waiting, &mut self.passed)
        {
            self.forget(id);
        }
    }

    /// The next stream to pull a body piece for: one with a source, no pull out, not
    /// parked; the first after the one pulled last, so that bodies share the connection.
    fn next_pull(&mut self) -> Option<(u64, usize)> {
        let ready = |s: &Req| {
            s.turn.stage == Stage::Sending
                && !s.turn.reset
                && !s.pulling
                && matches!(
                    s.turn.source,
                    Some(Source::File | Source::Stream { parked: false })
                )
        };
        let after = self.last_pull;
        let id = self
            .requests
            .range(after + 1..)
            .chain(self.requests.range(..=after))
            .find(|(_, s)| ready(s))
            .map(|(&id, _)| id)?;
        let s = self.requests.get_mut(&id)?;
        s.pulling = true;
        self.last_pull = id;
        Some((id, self.config.piece))
    }

    /// Whether `stream` still takes its body from the source the driver holds: false once
    /// it is complete, reset or gone (the driver drops the source then).
    pub fn pulls(&self, stream: u64) -> bool {
        self.requests.get(&stream).is_some_and(|s| s.turn.pulls())
    }

    /// The driver was woken (a producer pushed or ended): parked streams are asked again.
    pub fn wake_bodies(&mut self) {
        self.requests.values_mut().for_each(|s| s.turn.wake());
    }

    /// The driver read what [`Action::Pull`] asked for `stream` into `bytes` (taken, the
    /// buffer left empty), and at the end the producer's `trailers`: they go out as DATA
    /// (and a trailing HEADERS, then FIN), and the connection goes on as `process` does.
    pub fn pulled<H: Handler>(
        &mut self,
        stream: u64,
        bytes: &mut Vec<u8>,
        pulled: Pulled,
        trailers: Vec<(String, Vec<u8>)>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        if self.pulls(stream) {
            self.body_piece(stream, bytes, pulled, trailers);
        }
        bytes.clear();
        self.process(cx, handler)
    }
}

impl Feeding for Connection {
    /// Pieces of request bodies going to their jobs as they arrive, for the driver to carry
    /// ([`Taps::exchange`](crate::http::Taps::exchange)) after every call that may pass some on;
    /// each writer wakes the driver when its job makes room, which then tells the
    /// connection ([`Connection::feed_level`]) and calls `process`, which reads the stream on.
    fn passed(&mut self) -> &mut Passed {
        &mut self.passed
    }

    /// The driver's word on stream `stream`'s body ([`Taps::exchange`](crate::http::Taps::exchange)):
    /// its job has `queued` bytes yet to take, or is `gone`. False once the stream keeps no
    /// account of it.
    fn feed_level(&mut self, stream: u64, queued: usize, gone: bool) -> bool {
        match self
            .requests
            .get_mut(&stream)
            .and_then(|s| s.turn.feed.as_mut())
        {
            Some(feed) => {
                feed.level(queued, gone);
                true
            }
            None => false,
        }
    }
}
