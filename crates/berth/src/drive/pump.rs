//! The session pump over real sockets: one connection — its transport, what it speaks
//! ([`Core`]: the HTTP session, or the protocol an upgrade handed it to), its buffers and the
//! body it is sending — and the one loop that moves its bytes, for every model. [`Conn::pump`]
//! writes, sends body bytes, parses and reads as far as the transport allows (and the caller's
//! budget), then says what the connection needs next as a [`Fate`].
//!
//! ```text
//!              ┌──────────────── Conn::pump (one loop for every model) ──────────────────┐
//!   transport ─┤ read ─> input ─> Core::process ─> output ─> write ─> transport          │
//!              │                        │ Action::Body ─> Body::send (sendfile | chunks) │
//!              │                        │   (or kept for its stream, read at Action::Pull │
//!              │                        │    and handed back with Core::pulled)          │
//!              └────────────────────────┼───────────────────────────────────────────────┘
//!                                       └─> Fate: Keep | Again | Offload(job) | Open(file) | Close
//!   owner:  evloop, actor (Readiness: poll, budget)  ·  blocking.rs (Blocks: SO_RCVTIMEO/SNDTIMEO)
//! ```
//!
//! How I/O waits is the type parameter [`Waits`], and it is all that differs between the two
//! kinds of model inside the loop. With [`Readiness`] (evloop, prefork, actor) the socket is
//! non-blocking: a call that would block clears the readiness flag and the owner waits for the
//! next event. With [`Blocks`] (single, threaded, forked) the socket blocks, with `SO_RCVTIMEO`
//! and `SO_SNDTIMEO` set by the owner: a read that would block means the read timeout passed
//! ([`Conn::timed_out`]; the owner calls [`Conn::expire`]), a write that would block means the
//! write timeout passed (the connection fails), and a read is done only when the owner asked for
//! one (it sets `readable`), so the owner gets control between requests.
//!
//! What a connection cannot do itself it hands to its owner as a [`Fate`]: a job to run, or a
//! file to open. Who runs and opens is the model's choice: the event loop opens files itself, at
//! once (an `openat2` and an `fstat`: microseconds for a file in the page cache, as nginx does
//! without its thread pool), the actor model asks its Files actor, the blocking models open
//! inline; jobs go to workers or run inline. The answer comes back through [`Conn::complete`]
//! or [`Conn::file_opened`]. A file's bytes are a [`Body`] the pump sends after the head:
//! `sendfile(2)` or bounded pooled chunks, as the transport allows (see `body`). Where many
//! bodies go out at once ([`Core::pulls_bodies`]: HTTP/2's streams), each stream's [`Body`] is
//! kept by the pump and read when the protocol pulls it, as far as its windows allow: the
//! same source, read and encoded by the same code, framed by the protocol.
//!
//! The budget counts socket operations (reads, body sends) per pump. The event loop and the
//! blocking models give an unlimited one; an actor gives a small one and, told [`Fate::Again`],
//! sends itself a message to go on later, so that one busy connection cannot hold a scheduler
//! thread.

use std::io;
use std::marker::PhantomData;
use std::time::Instant;

use berth_proto::h2::Pulled;
use berth_proto::http::{
    Context, FileError, FileRequest, FileSource, Handler, Limits, Reply, Taps,
};
use berth_proto::switch::{Action, Core};

use std::sync::Arc;

use super::body::{Body, Sent};
use super::workers::Ticket;
use super::Timeouts;
use crate::files::{BodyFile, OpenFile};
use crate::net::{Acceptor, Stream, Transport};
use crate::rt::BufPool;
use crate::rt::DateCache;
use crate::stats::Stats;

/// How a pumped connection's I/O waits (see the module docs): each question the loop asks
/// where the two kinds of model differ, answered by [`Readiness`] and [`Blocks`] (the only
/// implementations; every answer is a constant the compiler folds away). What a model can do
/// because of it is its registry row's [`Caps`](super::Caps): [`Waits::CAPS`].
pub(super) trait Waits {
    /// What a model whose connections wait this way can do.
    const CAPS: super::Caps;

    /// The read side after a read that would block: waiting for the next readiness event, or
    /// (blocking) timed out, the owner to [`Conn::expire`] it.
    fn after_blocked_read() -> Reading;

    /// The read side after a read a signal interrupted, `current` before it: as it was (read
    /// again), or (blocking: the signal may be a stop) waiting for the owner to look first.
    fn after_interrupted_read(current: Reading) -> Reading;

    /// Whether a read that got bytes may have left more to read now. Blocking: no, one read
    /// per request of the owner's. Readiness: yes, unless the read drained the socket (it left
    /// room in the buffer, the peer's FIN is not known to be waiting and, for this transport,
    /// a short read means drained), so that new bytes will raise a new edge; the read that
    /// would only say WouldBlock is skipped.
    fn read_again(filled: bool, to_the_end: bool, short_read_drains: bool) -> bool;

    /// A write that would block: the socket is full, wait for room (`Ok`); blocking, the write
    /// timeout passed (`Err`).
    fn blocked_write(e: io::Error) -> io::Result<Writing>;

    /// Whether a failed write means the peer took nothing for the write timeout, so that the
    /// connection is given up with a reset (blocking: a write that would block or timed out).
    fn write_timed_out(e: &io::Error) -> bool;

    /// How long to wait for a streamed body's next bytes: not at all (park, the owner is woken
    /// by the producer), or (blocking) up to `write_timeout`.
    fn body_wait(write_timeout: std::time::Duration) -> Option<std::time::Duration>;

    /// What to do when the input buffer is full and may not grow: pause until the session
    /// takes some (`true`: keep the connection), or (blocking: only read once all input was
    /// taken, so nothing would ever resume it) end it.
    fn pause_full_input() -> bool;

    /// Whether an idle connection gives its buffers back to the pool. A blocking one keeps its
    /// two: its thread serves nothing else meanwhile, and the pool would only hand them back.
    fn lends_idle_buffers() -> bool;

    /// Whether the connection itself asks the owner's rule if the server is going away
    /// (blocking: its thread is on it, not on a loop that could tell it), and refreshes the
    /// date before each request (its read may have waited long).
    fn asks_for_itself() -> bool;
}

/// A non-blocking socket whose readiness a poll reports (evloop, prefork, actor, uring).
pub(super) enum Readiness {}

impl Waits for Readiness {
    const CAPS: super::Caps = super::Caps::READINESS;

    fn after_blocked_read() -> Reading {
        Reading::Wait
    }
    fn after_interrupted_read(current: Reading) -> Reading {
        current
    }
    fn read_again(filled: bool, to_the_end: bool, short_read_drains: bool) -> bool {
        filled || to_the_end || !short_read_drains
    }
    fn blocked_write(_: io::Error) -> io::Result<Writing> {
        Ok(Writing::Full)
    }
    fn write_timed_out(_: &io::Error) -> bool {
        false
    }
    fn body_wait(_: std::time::Duration) -> Option<std::time::Duration> {
        None
    }
    fn pause_full_input() -> bool {
        true
    }
    fn lends_idle_buffers() -> bool {
        true
    }
    fn asks_for_itself() -> bool {
        false
    }
}

/// A blocking socket with `SO_RCVTIMEO` and `SO_SNDTIMEO` (single, threaded, forked).
pub(super) enum Blocks {}

impl Waits for Blocks {
    const CAPS: super::Caps = super::Caps::BLOCKING;

    fn after_blocked_read() -> Reading {
        Reading::TimedOut
    }
    fn after_interrupted_read(_: Reading) -> Reading {
        Reading::Wait
    }
    fn read_again(_: bool, _: bool, _: bool) -> bool {
        false
    }
    fn blocked_write(e: io::Error) -> io::Result<Writing> {
        Err(e)
    }
    fn write_timed_out(e: &io::Error) -> bool {
        matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        )
    }
    fn body_wait(write_timeout: std::time::Duration) -> Option<std::time::Duration> {
        Some(write_timeout)
    }
    fn pause_full_input() -> bool {
        false
    }
    fn lends_idle_buffers() -> bool {
        false
    }
    fn asks_for_itself() -> bool {
        true
    }
}

/// The read side of a connection (as hyper's `proto::h1::conn::State` has `Reading`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reading {
    /// Nothing to read until the owner says so: a readiness event, or (blocking) the owner
    /// asking for a read.
    Wait,
    /// A read may find bytes.
    Ready,
    /// The kernel reported the peer's FIN (`EPOLLRDHUP`, a receive of 0): read on until a read
    /// gives 0, a short read does not mean the socket is drained.
    ToTheEnd,
    /// Blocking: the last read waited out the read timeout the owner set; the owner calls
    /// [`Conn::expire`].
    TimedOut,
    /// The peer has shut down its side (a read gave 0): nothing more will come.
    Closed,
}

/// The write side: whether the transport takes bytes now (always, when blocking).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Writing {
    /// Writes may go through.
    Ready,
    /// The socket took no more: wait for the owner to report room.
    Full,
}

/// What goes out after the output buffer.
///
/// A body is boxed: every connection holds a `Sending`, and only one sending a body pays for
/// it (issue 32's idle HTTP/2 connection within 2 KiB, issue 41's pulled bodies).
enum Sending {
    /// Only what is in the output buffer.
    Output,
    /// A body; later responses wait until it is all sent.
    Body(Box<Body>),
    /// A streamed body that had nothing to send: it waits for its producer to wake the owner
    /// (the next pump tries again).
    Parked(Box<Body>),
}

/// Work the connection handed to its owner that has not come back: jobs running or a file
/// being opened (HTTP/1.1 hands out one at a time; HTTP/2 a job per stream). While any is out
/// the slot must outlive it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Handed {
    /// How many.
    out: u32,
    /// The connection is finished but work is still out: the slot is freed when the last
    /// comes back.
    orphan: bool,
}

impl Handed {
    const NOTHING: Handed = Handed {
        out: 0,
        orphan: false,
    };

    fn nothing(self) -> bool {
        self.out == 0
    }
}

/// Whether the session has seen all of the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Input {
    /// It has seen every byte, and nothing asks it to look again.
    Seen,
    /// The input holds bytes it has not been shown, or it has been asked to look again (its
    /// output drained, a job ended, an upgraded protocol was woken).
    Unseen,
}

/// How the last pump ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pumped {
    /// As far as the transport allowed.
    Through,
    /// For want of budget, with more to do at once.
    CutShort,
}

/// A peer's address for a log line (`unix:` for a UNIX socket's client, which has none).
struct Peer(Option<std::net::SocketAddr>);

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(addr) => write!(f, "{addr}"),
            None => f.write_str("unix:"),
        }
    }
}

/// What the owner lends a connection while it runs.
pub(super) struct Env<'a, H: Handler> {
    pub handler: &'a mut H,
    pub pool: &'a mut BufPool,
    pub limits: &'a Limits,
    /// The `Date` of responses. The owner refreshes it when it wakes; a blocking connection,
    /// whose read may have waited long, has it refreshed before each request is answered.
    pub date: &'a mut DateCache,
    /// Largest the input buffer may grow to: a maximal head and body plus one buffer of slack.
    pub max_input: usize,
    /// Socket operations (reads, body sends) this pump may still do.
    pub budget: usize,
    /// Where a job dropped with its departed peer is counted.
    pub stats: &'a Stats,
    /// Asked before each request is answered: true makes that response the connection's last
    /// (`Connection: close`). The blocking models' rule (`single` lets a connection go when
    /// another client waits, `forked` when told to stop); the event-loop models wind down from
    /// outside ([`Conn::wind_down`]) and pass `None`.
    pub wind_down: Option<&'a dyn Fn() -> bool>,
    /// Blocking: whether the server is shutting down, for an upgraded connection to be told
    /// ([`Conn::wind_down`]: a WebSocket's close 1001). The event-loop models tell their
    /// connections from outside and pass `None`.
    pub going: Option<&'a dyn Fn() -> bool>,
}

/// What the session is given with each call: the limits, the `Date`, whether request bodies
/// may stream ([`Caps::streams_bodies`](super::Caps)), and the `Alt-Svc` of the connection's
/// listener (an HTTP/3 twin's: [`Transport::alt_svc`], made once per listener and borrowed
/// here) — made here only, from the owner's [`Env`] (`env.limits`, `env.date`) and the
/// connection's transport.
fn context<'a, W: Waits>(
    limits: &'a Limits,
    date: &'a DateCache,
    alt_svc: Option<&'a [u8]>,
) -> Context<'a> {
    Context {
        limits,
        date: date.get(),
        stream_bodies: W::CAPS.streams_bodies,
        now: date.now(),
        alt_svc,
    }
}

/// The bodies a connection keeps for its streams until the protocol pulls them, and the pull
/// it asked for, done at the next turn of the pump's loop.
#[derive(Default)]
struct Kept {
    bodies: Vec<(u64, Body)>,
    pull: Option<(u64, usize)>,
}

/// What a connection needs after [`Conn::pump`].
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Fate<J> {
    /// Keep it; wait for readiness, a job or a file (blocking: for the owner to ask for a read,
    /// or to expire it if [`Conn::timed_out`]).
    Keep,
    /// Keep it, and run `job` for it; then [`Conn::complete`] with `stream` (see
    /// [`Action::Offload`]).
    Offload {
        /// The stream its reply answers.
        stream: u64,
        /// The job.
        job: J,
        /// An HTTP/2 stream's job: the connection cancels it if the stream is reset first.
        ticket: Option<Arc<Ticket>>,
    },
    /// Keep it, and open this file for it; then [`Conn::file_opened`] with `stream`.
    Open {
        /// The stream the file answers.
        stream: u64,
        /// The file asked for.
        request: FileRequest,
    },
    /// The budget ran out with more to do at once: pump again soon.
    Again,
    /// Close it and free its slot.
    Close,
}

/// Work a pump handed out, not yet given to the owner.
enum Handoff<J> {
    Job(u64, J, Option<Arc<Ticket>>),
    Open(u64, FileRequest),
}

/// One connection over the transport `T` (by default what a listener's [`Acceptor`] makes of
/// a non-blocking socket), waiting for I/O as `W` says.
pub(super) struct Conn<T = Stream<mio::net::TcpStream>, W: Waits = Readiness> {
    pub stream: T,
    core: Core,
    input: Vec<u8>,
    output: Vec<u8>,
    /// Bytes of `output` already written.
    written: usize,
    /// Response bytes written over the connection's life.
    sent: u64,
    /// The read side. Readiness: made ready by events, made to wait when a read would block
    /// (edge triggered). Blocking: made ready by the owner to ask for one read.
    reading: Reading,
    /// The write side.
    writing: Writing,
    /// Whether the session has seen all of `input`.
    seen: Input,
    /// Work handed to the owner and not back.
    handed: Handed,
    /// What goes out after `output`.
    sending: Sending,
    /// How the last pump ended.
    pumped: Pumped,

    /// The file just opened for the session, until it asks for its bytes.
    opened: Option<BodyFile>,
    /// Bodies kept for their streams where the protocol pulls them ([`Core::pulls_bodies`]),
    /// boxed: a connection that never answers that way (HTTP/1.1, an idle HTTP/2 one) pays a
    /// pointer for it (issue 32: an idle HTTP/2 connection costs at most 2 KiB).
    kept: Option<Box<Kept>>,
    /// Blocking: how long to wait for a streamed body's next bytes (the write timeout).
    pub body_wait: std::time::Duration,
    /// The I/O error that ended the connection, if one did.
    error: Option<io::Error>,
    /// When the transport's handshake was first seen under way (see [`Conn::deadline`]).
    handshake_since: Option<Instant>,
    /// The owner gave the connection's HTTP/2 streams a waker.
    waker: Option<Arc<dyn Fn() + Send + Sync>>,
    /// The writers of request bodies going to jobs as they arrive: the protocol passes the
    /// bytes on, the connection carries them (`Core::carry_feeds`).
    taps: Taps,
    /// An HTTP/2 connection's counts went to the server's `/stats` (once, as it closed).
    counted: bool,
    /// The client has sent some bytes of its protocol (past any transport handshake).
    heard: bool,
    /// Its deadline passed (for the log line of its end).
    timed_out: bool,
    /// The tickets of HTTP/2 streams' jobs out, by stream: a stream reset meanwhile cancels
    /// its job (see `Ticket`).
    tickets: Vec<(u64, Arc<Ticket>)>,
    waits: PhantomData<W>,
}

impl<S: Transport, W: Waits> Conn<Stream<S>, W> {
    /// A connection just accepted on a listener whose transport choice is `acceptor`: where
    /// every model turns an accepted socket into what it serves, so that a new transport is a
    /// new [`Acceptor`] variant and no model changes.
    pub fn accept(socket: S, acceptor: &Acceptor) -> io::Result<Self> {
        let mut conn = Conn::new(acceptor.accept(socket)?);
        conn.core.set_peer(conn.stream.peer());
        if log::log_enabled!(log::Level::Debug) {
            let over = if matches!(acceptor, Acceptor::Plain) {
                "plain"
            } else {
                "TLS"
            };
            log::debug!(
                "connection from {} opened ({over})",
                Peer(conn.stream.peer())
            );
        }
        Ok(conn)
    }
}

impl<T: Transport, W: Waits> Conn<T, W> {
    pub fn new(stream: T) -> Self {
        Conn {
            stream,
            core: Core::new(),
            input: Vec::new(),
            output: Vec::new(),
            written: 0,
            sent: 0,
            reading: Reading::Wait,
            writing: Writing::Ready,
            seen: Input::Seen,
            handed: Handed::NOTHING,
            sending: Sending::Output,
            pumped: Pumped::Through,

            opened: None,
            kept: None,
            body_wait: Timeouts::default().write,
            error: None,
            handshake_since: None,
            waker: None,
            taps: Taps::default(),
            counted: false,
            heard: false,
            timed_out: false,
            tickets: Vec::new(),
            waits: PhantomData,
        }
    }

    /// Bytes of the current response not yet handed to the kernel, head or body.
    fn out_pending(&self) -> bool {
        self.written < self.output.len() || self.has_body() || self.stream.has_pending()
    }

    /// A body is going out (or parked) after the output buffer.
    fn has_body(&self) -> bool {
        !matches!(self.sending, Sending::Output)
    }

    /// The body going out, if any.
    fn body(&self) -> Option<&Body> {
        match &self.sending {
            Sending::Output => None,
            Sending::Body(body) | Sending::Parked(body) => Some(body),
        }
    }

    /// The owner heard that the connection may be read (a readiness event; blocking: it asks
    /// for one read).
    pub fn mark_readable(&mut self) {
        if matches!(self.reading, Reading::Wait | Reading::TimedOut) {
            self.reading = Reading::Ready;
        }
    }

    /// The owner heard that the peer has sent its FIN (or the socket failed): reads go on
    /// until one gives 0 (or the error).
    pub fn mark_peer_fin(&mut self) {
        if self.reading != Reading::Closed {
            self.reading = Reading::ToTheEnd;
        }
    }

    /// The owner heard that the transport has room for writes.
    pub fn mark_writable(&mut self) {
        self.writing = Writing::Ready;
    }

    /// Whether writes may go through now.
    pub fn is_writable(&self) -> bool {
        self.writing == Writing::Ready
    }

    /// A job or a file open is out for this connection (and its slot must outlive it).
    pub fn work_out(&self) -> bool {
        !self.handed.nothing()
    }

    /// The connection is finished, its slot kept only until its work comes back.
    pub fn is_orphan(&self) -> bool {
        self.handed.orphan
    }

    /// The connection is finished while its work is out: the slot waits for the work (see
    /// [`Conn::is_orphan`]).
    pub fn orphan(&mut self) {
        debug_assert!(self.work_out(), "an orphan without work out");
        self.handed.orphan = true;
    }

    /// An orphan's work came back (a reply, or word that it was cancelled): true once none is
    /// out, and the slot may be freed.
    pub fn work_back(&mut self) -> bool {
        self.handed.out = self.handed.out.saturating_sub(1);
        self.handed.nothing()
    }

    /// The last pump stopped for want of budget. If it also handed out a job, nothing pumps the
    /// connection until the job's reply unless the owner does: a peer that resets meanwhile
    /// would go unnoticed, and its job would run.
    pub fn cut_short(&self) -> bool {
        self.pumped == Pumped::CutShort
    }

    /// The owner just handed out the job of an HTTP/2 stream: input behind it waits to be
    /// seen, so pump again now rather than wait for an event that may not come.
    pub fn pump_again(&self) -> bool {
        self.core.many_jobs_out() && self.seen == Input::Unseen
    }

    /// The connection began speaking HTTP/2 and has no way yet to wake its owner: the owner
    /// gives it one ([`Conn::set_waker`]) for its streams' bodies (a producer that pushes, a
    /// job that takes a streamed request body).
    pub fn wants_waker(&self) -> bool {
        self.core.wants_waker() && self.waker.is_none()
    }

    /// How the connection's streams wake its owner (see [`Conn::wants_waker`]).
    pub fn set_waker(&mut self, wake: Arc<dyn Fn() + Send + Sync>) {
        self.taps.watch(&wake);
        self.waker = Some(wake);
    }

    /// Carries the request body the protocol passed on to its jobs, and tells it how far
    /// each job has taken its own (which paces the client: HTTP/1.1 reads on, HTTP/2 grants
    /// window). A job that makes room wakes the owner, once it has given a way to.
    fn carry_feeds(&mut self) {
        self.core.carry_feeds(&mut self.taps, self.waker.as_ref());
    }

    /// Blocking: the last read waited out the read timeout the owner set; call
    /// [`Conn::expire`].
    pub fn timed_out(&self) -> bool {
        self.reading == Reading::TimedOut
    }

    /// Some response bytes have been written on this connection.
    pub fn answered(&self) -> bool {
        self.sent > 0
    }

    /// The client has said nothing yet (its transport handshake, if any, is done) and nothing
    /// is owed to it: as far as it can tell, the connection could still be waiting in the
    /// accept queue (`single` sets such a connection aside for a client who came after it).
    pub fn unheard(&self) -> bool {
        !self.heard
            && self.input.is_empty()
            && self.handed.nothing()
            && !self.out_pending()
            && !self.stream.handshaking()
            && !self.stream.holds_input()
    }

    /// The peer has shut down its side.
    pub fn peer_closed(&self) -> bool {
        self.reading == Reading::Closed
    }

    /// Received bytes nobody will read (a request behind the last response): closing should
    /// let the peer read the response before the rest is dropped.
    pub fn unread_input(&self) -> bool {
        !self.input.is_empty()
    }

    /// The I/O error that ended the connection, if one did.
    pub fn take_error(&mut self) -> Option<io::Error> {
        self.error.take()
    }

    /// The owner was woken for this connection (a streamed body has more, or a job took some
    /// of the request body it was held back for, or an upgraded protocol has news): the next
    /// pump looks at the input again.
    pub fn poke(&mut self) {
        self.carry_feeds();
        // An upgraded protocol's own news (see `Upgraded::wake`) is taken like input.
        if self.core.feeding() || self.core.poke() {
            self.seen = Input::Unseen;
        }
    }

    /// The server is going away: the response now in the making is the connection's last
    /// (`Connection: close`); an upgraded protocol is told at the next pump, which the caller
    /// should run soon when this returns true (a WebSocket says 1001 there).
    pub fn wind_down(&mut self) -> bool {
        let tell = self.core.close_after_response();
        if tell {
            self.seen = Input::Unseen;
        }
        tell
    }

    /// Nothing in flight: no job, no output waiting, no request begun, no transport handshake
    /// under way (a client in the middle of one is about to send its request: a drain must
    /// not cut it off; the handshake has the header timeout to finish).
    pub fn is_idle(&self) -> bool {
        self.handed.nothing()
            && !self.out_pending()
            && self.core.is_idle(&self.input)
            && !self.stream.handshaking()
    }

    /// When the connection should be given up on, given what it waits for now (the rule of
    /// what it speaks, see `Core::poll_timeout`).
    pub fn deadline(&mut self, now: Instant, t: &Timeouts) -> Option<Instant> {
        let pending = self.out_pending();
        let rule = self.core.poll_timeout(&self.input, pending, now, t);
        if !self.stream.handshaking() {
            self.handshake_since = None;
            return rule;
        }
        // A transport's own handshake (TLS) comes before the first request byte: it gets the
        // time a request head gets, counted from the first look, so that a client that opens a
        // connection and never finishes the handshake is dropped like a slow request head.
        let handshake = *self.handshake_since.get_or_insert(now) + t.header;
        Some(rule.map_or(handshake, |r| r.min(handshake)))
    }

    /// The deadline passed: a stalled write or an idle connection is closed, a request in
    /// progress is answered 408 first (an upgraded protocol decides for itself).
    pub fn expire<H: Handler>(&mut self, env: &mut Env<'_, H>) -> Fate<H::Job> {
        if self.reading == Reading::TimedOut {
            self.reading = Reading::Wait;
        }
        self.timed_out = true;
        if self.out_pending() {
            // The peer took nothing for the write timeout: give it up (see `Transport::abort`).
            self.stream.abort();
            return Fate::Close;
        }
        if self.core.is_closed() {
            return Fate::Close;
        }
        self.ensure_output(env.pool);
        if W::asks_for_itself() {
            // The time the protocol is told is the date cache's, which a loop refreshes every
            // round; a blocking owner refreshes it for itself.
            env.date.refresh();
        }
        let cx = context::<W>(env.limits, env.date, self.stream.alt_svc());
        let action = self
            .core
            .expire(&mut self.input, &mut self.output, &cx, env.handler);
        let handoff = self.after(action);
        self.pump_with(env, handoff)
    }

    /// Hands a finished job's reply to the session, then carries on like [`Conn::pump`].
    pub fn complete<H: Handler>(
        &mut self,
        stream: u64,
        reply: Reply,
        env: &mut Env<'_, H>,
    ) -> Fate<H::Job> {
        self.handed.out = self.handed.out.saturating_sub(1);
        if !self.tickets.is_empty() {
            self.tickets.retain(|(s, _)| *s != stream);
        }
        self.ensure_output(env.pool);
        let cx = context::<W>(env.limits, env.date, self.stream.alt_svc());
        let mut reply = reply;
        if let Some(file) = &mut reply.file {
            // A body from a file the job opened goes the way a `/files` answer's does: the
            // pump's body (`Action::Body`), sent or pulled.
            if let FileSource::Open(open) = std::mem::replace(&mut file.source, FileSource::Taken) {
                self.opened = Some(BodyFile::unbudgeted(open));
            }
        }
        let action = self.core.complete(
            stream,
            reply,
            &mut self.input,
            &mut self.output,
            &cx,
            env.handler,
        );
        let handoff = self.after(action);
        // A file no body took (a HEAD, a 304, a stream reset meanwhile) is closed now.
        self.opened = None;
        self.pump_with(env, handoff)
    }

    /// Hands what opening a file found to the session, then carries on like [`Conn::pump`]
    /// (sending the file's bytes first, if the answer has any).
    pub fn file_opened<H: Handler>(
        &mut self,
        stream: u64,
        request: &FileRequest,
        found: Result<OpenFile, FileError>,
        env: &mut Env<'_, H>,
    ) -> Fate<H::Job> {
        self.handed.out = self.handed.out.saturating_sub(1);
        self.ensure_output(env.pool);
        let cx = context::<W>(env.limits, env.date, self.stream.alt_svc());
        let (meta, file) = match found {
            Ok(OpenFile { meta, file }) => (Ok(meta), Some(file)),
            Err(e) => (Err(e), None),
        };
        let action = self.core.file(
            stream,
            request,
            meta.as_ref().map_err(|e| *e),
            &mut self.input,
            &mut self.output,
            &cx,
            env.handler,
        );
        // The file is the body the answer asks for next (`Action::Body`), if any.
        self.opened = file;
        let handoff = self.after(action);
        self.opened = None;
        self.pump_with(env, handoff)
    }

    /// Writes, parses and reads until nothing more can happen without a new event.
    pub fn pump<H: Handler>(&mut self, env: &mut Env<'_, H>) -> Fate<H::Job> {
        self.pump_with(env, None)
    }

    /// [`Conn::pump`], carrying a job or file that is not handed out yet. It does not cut the
    /// pump short: responses already written for earlier pipelined requests still go out now
    /// rather than after it, and the socket is still read so a departing peer is noticed.
    fn pump_with<H: Handler>(
        &mut self,
        env: &mut Env<'_, H>,
        mut handoff: Option<Handoff<H::Job>>,
    ) -> Fate<H::Job> {
        self.pumped = Pumped::Through;
        if let Sending::Parked(_) = self.sending {
            // Any pump tries a parked body again.
            if let Sending::Parked(body) = std::mem::replace(&mut self.sending, Sending::Output) {
                self.sending = Sending::Body(body);
            }
        }
        let keep = self.run(env, &mut handoff);
        if let Some(kept) = &mut self.kept {
            // A stream done with its body (complete, reset, gone) gives its file back now: a
            // client that resets streams must not hold descriptors (issue 40).
            let core = &self.core;
            kept.bodies.retain(|(stream, _)| core.pulls(*stream));
        }
        // A job handed out for a stream reset since is dropped if it has not started, and
        // counted cancelled now (issue 40: it must not hold a worker ahead of other clients).
        if !self.tickets.is_empty() {
            let tickets = &self.tickets;
            self.core.cancelled_jobs(|stream| {
                if let Some((_, t)) = tickets.iter().find(|(s, _)| *s == stream) {
                    if t.cancel() {
                        env.stats.job_cancelled();
                    }
                }
            });
        }
        match (keep, handoff) {
            (true, Some(Handoff::Job(stream, job, ticket))) => Fate::Offload {
                stream,
                job,
                ticket,
            },
            (true, Some(Handoff::Open(stream, request))) => Fate::Open { stream, request },
            // A handoff's answer pumps again anyway, and readiness flags persist till then.
            (true, None) if self.pumped == Pumped::CutShort => Fate::Again,
            (true, None) => Fate::Keep,
            (false, handoff) => {
                if log::log_enabled!(log::Level::Debug) {
                    self.log_end();
                }
                if let (Some(counts), false) = (self.core.stream_counts(), self.counted) {
                    self.counted = true;
                    env.stats.http2_ended(counts);
                }
                // Dropping work never handed out: nothing else refers to the slot. A job whose
                // peer left before it could be queued is dropped like a queued one.
                if let Some(Handoff::Job(_, _, ticket)) = &handoff {
                    // Counted once: above, if its stream's ticket was cancelled there.
                    if ticket.as_ref().is_none_or(|t| t.cancel()) {
                        env.stats.job_cancelled();
                    }
                }
                if handoff.is_some() {
                    self.handed.out -= 1;
                }
                Fate::Close
            }
        }
    }

    /// Says at debug level why the connection ends, and what it spoke.
    fn log_end(&self) {
        let cause = match (&self.error, self.timed_out, self.reading) {
            (Some(e), _, _) => format!("error: {e}"),
            (None, true, _) => "timed out".to_owned(),
            (None, false, Reading::Closed) => "the peer closed".to_owned(),
            (None, false, _) if self.core.is_closed() => "done (its protocol ended it)".to_owned(),
            (None, false, _) => "ended".to_owned(),
        };
        log::debug!(
            "connection from {} closed ({}, {} bytes sent): {cause}",
            Peer(self.stream.peer()),
            self.core.speaks(),
            self.sent
        );
    }

    /// The body of [`Conn::pump`]: false means close.
    fn run<H: Handler>(
        &mut self,
        env: &mut Env<'_, H>,
        handoff: &mut Option<Handoff<H::Job>>,
    ) -> bool {
        loop {
            let writable = self.writing == Writing::Ready;
            if writable && (self.written < self.output.len() || self.stream.has_pending()) {
                if let Err(e) = self.flush() {
                    return self.write_failed(e);
                }
            }
            if self.writing == Writing::Ready
                && self.written >= self.output.len()
                && matches!(self.sending, Sending::Body(_))
            {
                if env.budget == 0 {
                    self.pumped = Pumped::CutShort;
                    return true;
                }
                // A file's bytes go to the transport; a streamed body's come from the
                // application, whose failure is not the peer's.
                let to_peer = self.body().is_some_and(|b| !b.is_buffered());
                if let Err(e) = self.send_body(&mut env.budget, env.pool) {
                    return if to_peer {
                        self.write_failed(e)
                    } else {
                        self.fail(e)
                    };
                }
                // Done, socket full, or budget spent: each is settled at the top.
                continue;
            }
            let upgraded = self.core.is_upgraded();
            // Blocking: a drain reaches an upgraded connection through the model's rule (its
            // thread is on it, not on a loop that could tell it).
            // So does it an HTTP/2 connection, which says GOAWAY before it closes.
            if W::asks_for_itself()
                && (upgraded || self.core.many_jobs_out())
                && env.going.is_some_and(|going| going())
                && self.wind_down()
            {
                continue;
            }
            let peer_closed = self.reading == Reading::Closed;
            // An upgraded protocol hears that its peer left once it has taken everything the
            // peer sent before leaving: its last words may answer those bytes. A request body
            // still arriving is cut short then (its job hears it now, rather than when a timer
            // runs out; the connection ends once the jobs are back).
            if peer_closed
                && (upgraded || self.core.feeding() || self.core.many_jobs_out())
                && self.seen == Input::Seen
                && !self.core.is_closed()
            {
                self.ensure_output(env.pool);
                if self.core.peer_closed(&mut self.output) {
                    self.carry_feeds();
                    continue;
                }
            }
            let finished = self.core.is_closed()
                || (!upgraded && peer_closed && self.handed.nothing() && self.seen == Input::Seen);
            if finished {
                return self.out_pending();
            }

            let multiplexed = self.core.many_jobs_out();
            if multiplexed && handoff.is_some() && self.seen == Input::Unseen {
                // HTTP/2 hands out one job per pump: the owner hands it on, then pumps again
                // at once for the streams behind it ([`Conn::pump_again`]).
                return true;
            }
            if self.seen == Input::Unseen
                && (self.handed.nothing() || self.core.feeding() || multiplexed)
                // Responses to later requests wait until a body is all out.
                && !self.has_body()
                && self.room_for_output(env.limits)
            {
                self.seen = Input::Seen;
                self.ensure_output(env.pool);
                if let Some(wind_down) = env.wind_down {
                    if !self.input.is_empty() && !upgraded && wind_down() {
                        // Tell the client this response is the last, rather than vanish
                        // under it.
                        self.core.close_after_response();
                    }
                }
                if W::asks_for_itself() {
                    env.date.refresh();
                }
                if self.core.undecided() {
                    self.core.agreed(self.stream.alpn(), env.limits);
                }
                // With nothing waiting to be written, an upgraded protocol may answer from the
                // input's own buffer (a WebSocket echo): the first `skip` bytes are not sent.
                let mut skip = 0;
                let pull = self.kept.as_mut().and_then(|k| k.pull.take());
                let action = if let Some((stream, max)) = pull {
                    self.pull_body(stream, max, env.limits, env.date, env.handler)
                } else {
                    let cx = context::<W>(env.limits, env.date, self.stream.alt_svc());
                    if self.written == self.output.len() {
                        self.output.clear();
                        self.written = 0;
                        self.core.process_in_place(
                            &mut self.input,
                            &mut self.output,
                            &mut skip,
                            &cx,
                            env.handler,
                        )
                    } else {
                        self.core
                            .process(&mut self.input, &mut self.output, &cx, env.handler)
                    }
                };
                self.written += skip;
                if let Some(new) = self.after(action) {
                    *handoff = Some(new);
                }
                // Back to the top even when nothing was written: a peer that half-closed while
                // this input waited (for a job, a file, or a body going out) is finished now,
                // and only the check up there closes it.
                continue;
            }

            if matches!(self.reading, Reading::Ready | Reading::ToTheEnd) {
                if env.budget == 0 {
                    self.pumped = Pumped::CutShort;
                    return true;
                }
                // The session wants more bytes only when it has seen all it has and is not busy.
                let wants_more = self.seen == Input::Seen
                    && (self.handed.nothing() || self.core.many_jobs_out());
                if self.input.capacity() == 0 {
                    self.input = env.pool.take();
                }
                if self.input.len() == self.input.capacity() {
                    if !wants_more || self.input.capacity() >= env.max_input {
                        // Paused: resumes when the session consumes input or the job ends.
                        if W::pause_full_input() {
                            return true;
                        }
                        self.reading = Reading::Wait;
                        return false;
                    }
                    let grow = self
                        .input
                        .capacity()
                        .min(env.max_input - self.input.capacity());
                    self.input.reserve(grow);
                }
                env.budget -= 1;
                match self.stream.read_spare(&mut self.input) {
                    // An upgraded protocol is told above, once its input is taken, and has
                    // its last words; HTTP closes once what was received is answered.
                    Ok(0) => self.reading = Reading::Closed,
                    Ok(_) => {
                        self.seen = Input::Unseen;
                        self.heard = true;
                        let filled = self.input.len() == self.input.capacity();
                        let to_the_end = self.reading == Reading::ToTheEnd;
                        if !W::read_again(filled, to_the_end, self.stream.short_read_drains()) {
                            self.reading = Reading::Wait;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.reading = W::after_blocked_read();
                    }
                    // SO_RCVTIMEO may also report itself so.
                    Err(e) if W::CAPS.blocking && e.kind() == io::ErrorKind::TimedOut => {
                        self.reading = Reading::TimedOut;
                    }
                    // Blocking: a signal (a stop) interrupted the wait; the owner looks first.
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                        self.reading = W::after_interrupted_read(self.reading);
                    }
                    Err(e) => return self.fail(e),
                }
                continue;
            }

            // An idle connection holds no buffers (see `Waits::lends_idle_buffers`).
            if W::lends_idle_buffers() {
                self.release_idle_buffers(env.pool);
            }
            return true;
        }
    }

    /// Whether the session may be shown input now without the output growing past its bound:
    /// HTTP writes below the high-water mark; an upgraded protocol (which has none) only into
    /// an empty buffer, and only once what it wrote before has left the transport too. A
    /// transport that takes bytes ahead of the socket (`uring`'s queue, TLS records) would
    /// otherwise let a peer that sends and never reads pile up answers there (a ping flood:
    /// megabytes of pongs per connection); this way it meets the write timeout holding one
    /// batch of them.
    fn room_for_output(&self, limits: &Limits) -> bool {
        if self.core.is_upgraded() {
            return self.output.is_empty() && !self.stream.has_pending();
        }
        // An empty buffer is always below the mark, even a mark of 0.
        self.output.is_empty() || self.output.len() < limits.output_high_water
    }

    /// Records what an action asks of the connection; returns work to hand out.
    fn after<J>(&mut self, action: Action<J>) -> Option<Handoff<J>> {
        self.carry_feeds();
        match action {
            Action::Offload { stream, job } => {
                self.handed.out += 1;
                // A body streaming to the job may already be in the input; HTTP/2 stops at
                // each job, with more frames perhaps behind it.
                if self.core.feeding() || self.core.many_jobs_out() {
                    self.seen = Input::Unseen;
                }
                let ticket = self.core.many_jobs_out().then(|| {
                    let ticket = Arc::new(Ticket::default());
                    self.tickets.push((stream, ticket.clone()));
                    ticket
                });
                Some(Handoff::Job(stream, job, ticket))
            }
            Action::Open { stream, request } => {
                self.handed.out += 1;
                if self.core.many_jobs_out() {
                    self.seen = Input::Unseen;
                }
                Some(Handoff::Open(stream, request))
            }
            // What the client sent behind a switching request is the new protocol's first
            // input.
            Action::Flush | Action::Switched => {
                self.seen = Input::Unseen;
                None
            }
            Action::Body {
                stream,
                offset,
                len,
                encode,
            } => {
                let file = self.opened.take();
                debug_assert!(file.is_some(), "a file body without an opened file");
                if let Some(file) = file {
                    let body = match encode {
                        None => Body::file(file, offset, len),
                        Some(encode) => Body::encoded(file, offset, len, encode),
                    };
                    if self.core.pulls_bodies() {
                        // Kept until pulled; the protocol goes on meanwhile.
                        self.kept().bodies.push((stream, body));
                        self.seen = Input::Unseen;
                    } else {
                        self.sending = Sending::Body(Box::new(body));
                    }
                }
                None
            }
            Action::Pull { stream, max } => {
                self.kept().pull = Some((stream, max));
                self.seen = Input::Unseen;
                None
            }
            Action::Stream { stream, streamed } if self.core.pulls_bodies() => {
                // Kept until pulled; a push after a pull found nothing wakes the owner, which
                // pokes the protocol to pull again.
                if let Some(wake) = &self.waker {
                    let wake = wake.clone();
                    streamed.on_data(move || wake());
                }
                self.kept().bodies.push((stream, Body::stream(streamed)));
                self.seen = Input::Unseen;
                None
            }
            Action::Stream { streamed, .. } => {
                self.sending = Sending::Body(Box::new(Body::stream(streamed)));
                None
            }
            Action::Read | Action::Close => None,
        }
    }

    /// The bodies kept for streams (made at the first).
    fn kept(&mut self) -> &mut Kept {
        self.kept.get_or_insert_with(Box::default)
    }

    /// Reads what the protocol pulled for `stream` (at most `max` plain bytes, or one piece of
    /// an encoder's output) from the body kept for it, and hands it back.
    fn pull_body<H: Handler>(
        &mut self,
        stream: u64,
        max: usize,
        limits: &Limits,
        date: &DateCache,
        handler: &mut H,
    ) -> Action<H::Job> {
        let mut bytes = Vec::new();
        let body = self
            .kept
            .as_mut()
            .and_then(|k| k.bodies.iter_mut().find(|(s, _)| *s == stream));
        let (pulled, trailers) = match body {
            Some((_, body)) => match body.pull(&mut bytes, max) {
                Ok(Pulled::Ended) => (Pulled::Ended, body.take_trailers()),
                Ok(pulled) => (pulled, Vec::new()),
                Err(e) => {
                    log::debug!("a body failed in the middle: {e}");
                    (Pulled::Failed, Vec::new())
                }
            },
            None => (Pulled::Failed, Vec::new()),
        };
        let cx = context::<W>(limits, date, self.stream.alt_svc());
        self.core.pulled(
            stream,
            &mut bytes,
            pulled,
            trailers,
            &mut self.input,
            &mut self.output,
            &cx,
            handler,
        )
    }

    /// Sends body bytes until the socket is full, the budget is spent or the body is done;
    /// once done, lets the session go on with pipelined requests. A body read into the output
    /// buffer (a transport that cannot `sendfile`) stops after one chunk, which the loop then
    /// writes like any output.
    fn send_body(&mut self, budget: &mut usize, pool: &mut BufPool) -> io::Result<()> {
        let Sending::Body(body) = &mut self.sending else {
            return Ok(());
        };
        if self.output.capacity() == 0 && (body.is_buffered() || !self.stream.can_send_file()) {
            self.output = pool.take();
        }
        let wait = W::body_wait(self.body_wait);
        while !body.is_done() {
            if *budget == 0 {
                return Ok(());
            }
            *budget -= 1;
            match body.send(&mut self.stream, &mut self.output, wait) {
                Ok(Sent::Direct(_)) => {}
                Ok(Sent::Parked) => {
                    if let Sending::Body(body) =
                        std::mem::replace(&mut self.sending, Sending::Output)
                    {
                        self.sending = Sending::Parked(body);
                    }
                    return Ok(());
                }
                Ok(Sent::Buffered) => {
                    self.written = 0;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.writing = W::blocked_write(e)?;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if body.is_done() {
            // Any last bytes are in the output, ahead of whatever is answered next.
            self.sending = Sending::Output;
            self.seen = Input::Unseen;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        // The connection's last bytes (a TLS stream sends its close_notify with them).
        let last = self.core.is_closed() && !self.has_body();
        while self.written < self.output.len() {
            let rest = &self.output[self.written..];
            let wrote = if last {
                self.stream.write_last(rest)
            } else {
                self.stream.send(rest)
            };
            match wrote {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.written += n;
                    self.sent += n as u64;
                }
                // Blocking, it means the write timeout passed: an error like any other.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.writing = W::blocked_write(e)?;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.output.clear();
        self.written = 0;
        // What the transport still holds (a TLS layer's records the socket did not take).
        if self.stream.has_pending() {
            match self.stream.flush() {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.writing = W::blocked_write(e)?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Records the error that ends the connection; false, for `run` to return.
    fn fail(&mut self, e: io::Error) -> bool {
        self.error = Some(e);
        false
    }

    /// [`Conn::fail`] for a write to the transport. A blocking one that timed out gives the
    /// connection up with bytes the peer did not take: it is aborted (`Transport::abort`).
    fn write_failed(&mut self, e: io::Error) -> bool {
        if W::write_timed_out(&e) {
            self.stream.abort();
        }
        self.fail(e)
    }

    fn ensure_output(&mut self, pool: &mut BufPool) {
        if self.output.capacity() == 0 {
            self.output = pool.take();
        }
    }

    /// Gives empty buffers back to the pool so an idle connection holds none.
    fn release_idle_buffers(&mut self, pool: &mut BufPool) {
        if self.input.is_empty() && self.input.capacity() > 0 {
            pool.put(std::mem::take(&mut self.input));
        }
        if self.output.is_empty() && self.output.capacity() > 0 {
            pool.put(std::mem::take(&mut self.output));
        }
    }
}

impl<T: Transport> Conn<T, Readiness> {
    /// Ends the connection: returns its buffers and, if the peer may have sent bytes we never
    /// read, sends FIN and drains them, so that closing does not turn into a reset that could
    /// destroy the response before the peer reads it. A connection whose last read drained the
    /// socket and whose input was all consumed closes at once (nginx's lingering heuristic).
    /// (The blocking models linger with a timeout instead: `blocking::linger_close`.)
    ///
    /// A connection ended with bytes still waiting for its peer to take them (the pump gave
    /// up on it: its write timeout passed, its peer failed, the server stops) is aborted
    /// instead ([`Transport::abort`]): its close is a reset, so the kernel keeps nothing of
    /// it. Not one whose own side failed (an application that broke off its streamed body):
    /// what was sent is the peer's, and a FIN behind it lets the peer read it. Returns whether
    /// it was aborted.
    pub fn shut(&mut self, pool: &mut BufPool) -> bool {
        let abandoned = self.written < self.output.len()
            || self.stream.has_pending()
            || self.body().is_some_and(|b| !b.is_buffered());
        if abandoned {
            self.stream.abort();
        }
        let unread = match self.reading {
            Reading::Ready | Reading::ToTheEnd => true,
            Reading::Wait | Reading::TimedOut => !self.input.is_empty(),
            // Nothing more will come.
            Reading::Closed => false,
        };
        self.opened = None;
        self.kept = None;
        // Request bodies still going to jobs are cut short (the writers' drop): a job out for
        // this connection must not wait for bytes that will never come, nor keep the slot,
        // and its socket, while it waits.
        self.taps.clear();
        self.sending = Sending::Output;
        self.input.clear();
        self.output.clear();
        self.written = 0;
        self.release_idle_buffers(pool);
        if abandoned || !unread {
            return abandoned;
        }
        let _ = self.stream.shutdown_write();
        // What has arrived, up to a byte budget (not a count of reads: a TLS read gives one
        // record's plaintext, which may be one byte).
        let mut sink = [0u8; 4096];
        let mut dropped = 0;
        while dropped < super::blocking::LINGER_BYTES {
            match io::Read::read(&mut self.stream, &mut sink) {
                Ok(n) if n > 0 => dropped += n,
                _ => break,
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    //! One connection over a real socket pair on 127.0.0.1, served both ways a model serves it
    //! — pumped by hand as an event loop pumps it (non-blocking), and by the blocking models'
    //! `serve_connection` (blocking, with timeouts) — over a plain socket, whose file body goes
    //! out with `sendfile`, and over a transport that cannot `sendfile` (as an encrypting one
    //! cannot), whose file body is read and written in pooled chunks: the same bytes on the
    //! wire all four ways.

    use std::io::{Read, Write};
    use std::sync::Arc;

    use super::*;
    use crate::app::{Demo, DemoConfig};
    use crate::drive::blocking::{self, ConnConfig, Serving};
    use crate::drive::Service;
    use crate::files::Files;
    use crate::net::transport::NoSendFile;
    use crate::net::{Blocking, Evented};
    use crate::stats::Stats;

    const FILE_LEN: usize = (1 << 20) + 123;

    /// Serves `/files/big.bin` then `/hello/world` on one connection, with `serve` given the
    /// server's end and the files, and checks what the client got.
    fn serve_one(name: &str, serve: impl FnOnce(std::net::TcpStream, &Files)) {
        let dir = std::env::temp_dir().join(format!("berth-pump-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let data: Vec<u8> = (0..FILE_LEN).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.join("big.bin"), &data).unwrap();
        let files = Files::new(&dir).unwrap();

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let client = std::thread::spawn(move || {
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            c.write_all(
                b"GET /files/big.bin HTTP/1.1\r\nHost: x\r\n\r\n\
                  GET /hello/world HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            )
            .unwrap();
            let mut got = Vec::new();
            c.read_to_end(&mut got).unwrap();
            got
        });
        let (s, _) = listener.accept().unwrap();
        serve(s, &files);
        let got = client.join().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();

        let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&got[..head_end]);
        assert!(head.starts_with("HTTP/1.1 200"), "{name}: {head}");
        assert!(
            head.contains(&format!("Content-Length: {FILE_LEN}\r\n")),
            "{name}: {head}"
        );
        assert!(
            got[head_end..head_end + FILE_LEN] == data[..],
            "{name}: the file's bytes"
        );
        let rest = String::from_utf8_lossy(&got[head_end + FILE_LEN..]);
        assert!(rest.starts_with("HTTP/1.1 200"), "{name}: {rest}");
        assert!(rest.ends_with("Hello, World!"), "{name}: {rest}");
    }

    fn demo() -> (crate::app::DemoHandler, Arc<Stats>) {
        let stats = Arc::new(Stats::new(1));
        let handler = Demo::new(DemoConfig::default(), stats.clone()).handler(0);
        (handler, stats)
    }

    /// The event loop's way: non-blocking, pumped until it closes.
    fn pump_by_hand<T: Evented>(
        s: std::net::TcpStream,
        files: &Files,
        wrap: fn(mio::net::TcpStream) -> T,
    ) {
        s.set_nonblocking(true).unwrap();
        let mut conn: Conn<T> = Conn::new(wrap(mio::net::TcpStream::from_std(s)));
        let (mut handler, stats) = demo();
        let mut pool = BufPool::new(16 * 1024, 4, 1);
        let limits = Limits::default();
        let mut date = DateCache::default();
        for _ in 0..100_000 {
            let mut env = Env {
                handler: &mut handler,
                pool: &mut pool,
                limits: &limits,
                date: &mut date,
                max_input: 1 << 20,
                budget: usize::MAX,
                stats: &stats,
                wind_down: None,
                going: None,
            };
            // As if every poll said "ready": a call that finds nothing clears the flag.
            conn.mark_readable();
            conn.mark_writable();
            let mut fate = conn.pump(&mut env);
            if let Fate::Open { stream, request } = fate {
                let found = files.open(&request);
                fate = conn.file_opened(stream, &request, found, &mut env);
            }
            match fate {
                Fate::Close => break,
                Fate::Keep | Fate::Again => {
                    std::thread::sleep(std::time::Duration::from_micros(200))
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        let _ = conn.shut(&mut pool);
    }

    /// The blocking models' way: `serve_connection` until it returns.
    fn serve_blocking<T: Blocking>(
        s: std::net::TcpStream,
        files: &Files,
        wrap: fn(std::net::TcpStream) -> T,
    ) {
        let (mut handler, stats) = demo();
        let mut date = DateCache::default();
        let serving = Serving {
            handler: &mut handler,
            files,
            date: &mut date,
            stats: &stats,
            going: &|| false,
        };
        let config = ConnConfig::default();
        blocking::serve_connection(
            wrap(s),
            &Acceptor::Plain,
            serving,
            &config,
            || false,
            None,
            None,
        )
        .unwrap();
    }

    #[test]
    fn a_file_goes_out_with_sendfile_or_in_chunks_alike() {
        // Each checks the head, every byte of the body, and the pipelined answer after it.
        // (The heads differ in ETag and Last-Modified: the file is written anew for each.)
        serve_one("ready-sendfile", |s, f| pump_by_hand(s, f, |s| s));
        serve_one("ready-chunks", |s, f| pump_by_hand(s, f, NoSendFile));
        serve_one("blocking-sendfile", |s, f| serve_blocking(s, f, |s| s));
        serve_one("blocking-chunks", |s, f| serve_blocking(s, f, NoSendFile));
    }
}
