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
//! `sendfile(2)` or bounded pooled chunks, as the transport allows (see `body`).
//!
//! The budget counts socket operations (reads, body sends) per pump. The event loop and the
//! blocking models give an unlimited one; an actor gives a small one and, told [`Fate::Again`],
//! sends itself a message to go on later, so that one busy connection cannot hold a scheduler
//! thread.

use std::fs::File;
use std::io;
use std::marker::PhantomData;
use std::time::Instant;

use berth_proto::http::pump::{Action, Core};
use berth_proto::http::{Context, FileError, FileRequest, Handler, Limits, Reply};

use super::body::{Body, Sent};
use super::clock::DateCache;
use super::files::OpenFile;
use super::Timeouts;
use crate::net::{Acceptor, Stream, Transport};
use crate::rt::BufPool;
use crate::stats::Stats;

/// How a pumped connection's I/O waits (see the module docs). Implemented by [`Readiness`] and
/// [`Blocks`] only; the pump reads the constant, which the compiler folds away.
pub(super) trait Waits {
    /// The socket blocks, with read and write timeouts; a call that would block has timed out.
    const BLOCKING: bool;
}

/// A non-blocking socket whose readiness a poll reports (evloop, prefork, actor).
pub(super) enum Readiness {}

impl Waits for Readiness {
    const BLOCKING: bool = false;
}

/// A blocking socket with `SO_RCVTIMEO` and `SO_SNDTIMEO` (single, threaded, forked).
pub(super) enum Blocks {}

impl Waits for Blocks {
    const BLOCKING: bool = true;
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

/// What a connection needs after [`Conn::pump`].
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Fate<J> {
    /// Keep it; wait for readiness, a job or a file (blocking: for the owner to ask for a read,
    /// or to expire it if [`Conn::timed_out`]).
    Keep,
    /// Keep it, and run this job for it; then [`Conn::complete`].
    Offload(J),
    /// Keep it, and open this file for it; then [`Conn::file_opened`].
    Open(FileRequest),
    /// The budget ran out with more to do at once: pump again soon.
    Again,
    /// Close it and free its slot.
    Close,
}

/// Work a pump handed out, not yet given to the owner.
enum Handoff<J> {
    Job(J),
    Open(FileRequest),
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
    /// May be read now. Readiness: set by events, cleared when a call returns WouldBlock (edge
    /// triggered). Blocking: set by the owner to ask for one read.
    pub readable: bool,
    /// May be written now (always, when blocking).
    pub writable: bool,
    /// The peer has shut down its side (read returned 0).
    peer_closed: bool,
    /// The kernel reported the peer's FIN (EPOLLRDHUP): a short read does not mean "drained".
    pub hup: bool,
    /// A job is running (or a file is being opened) for this connection; its slot must outlive
    /// it.
    pub job_pending: bool,
    /// `input` holds bytes the session has not been shown yet (or asked to see again).
    unprocessed: bool,
    /// The connection is finished but waits for its job before the slot is freed.
    pub dead: bool,

    /// The file just opened for the session, until it asks for its bytes.
    opened: Option<File>,
    /// A body going out after `output`; later responses wait until it is all sent.
    body: Option<Body>,
    /// A streamed body had nothing to send: wait for its producer to wake the owner (any
    /// pump tries again).
    parked: bool,
    /// Blocking: how long to wait for a streamed body's next bytes (the write timeout).
    pub body_wait: std::time::Duration,
    /// The last pump stopped for want of budget.
    cut_short: bool,
    /// Blocking: the last read waited out its timeout.
    timed_out: bool,
    /// Some response bytes have been written.
    answered: bool,
    /// The I/O error that ended the connection, if one did.
    error: Option<io::Error>,
    /// When the transport's handshake was first seen under way (see [`Conn::deadline`]).
    handshake_since: Option<Instant>,
    waits: PhantomData<W>,
}

impl<S: Transport, W: Waits> Conn<Stream<S>, W> {
    /// A connection just accepted on a listener whose transport choice is `acceptor`: where
    /// every model turns an accepted socket into what it serves, so that a new transport is a
    /// new [`Acceptor`] variant and no model changes.
    pub fn accept(socket: S, acceptor: &Acceptor) -> io::Result<Self> {
        Ok(Conn::new(acceptor.accept(socket)?))
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
            readable: false,
            writable: true,
            peer_closed: false,
            hup: false,
            job_pending: false,
            unprocessed: false,
            dead: false,

            opened: None,
            body: None,
            parked: false,
            body_wait: Timeouts::default().write,
            cut_short: false,
            timed_out: false,
            answered: false,
            error: None,
            handshake_since: None,
            waits: PhantomData,
        }
    }

    /// Bytes of the current response not yet handed to the kernel, head or body.
    fn out_pending(&self) -> bool {
        self.written < self.output.len() || self.body.is_some() || self.stream.has_pending()
    }

    /// The last pump stopped for want of budget. If it also handed out a job, nothing pumps the
    /// connection until the job's reply unless the owner does: a peer that resets meanwhile
    /// would go unnoticed, and its job would run.
    pub fn cut_short(&self) -> bool {
        self.cut_short
    }

    /// Blocking: the last read waited out the read timeout the owner set; call
    /// [`Conn::expire`].
    pub fn timed_out(&self) -> bool {
        self.timed_out
    }

    /// Some response bytes have been written on this connection.
    pub fn answered(&self) -> bool {
        self.answered
    }

    /// The peer has shut down its side.
    pub fn peer_closed(&self) -> bool {
        self.peer_closed
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
        // An upgraded protocol's own news (see `Upgraded::wake`) is taken like input.
        if self.core.feeding() || self.core.poke() {
            self.unprocessed = true;
        }
    }

    /// The server is going away: the response now in the making is the connection's last
    /// (`Connection: close`); an upgraded protocol is told at the next pump, which the caller
    /// should run soon when this returns true (a WebSocket says 1001 there).
    pub fn wind_down(&mut self) -> bool {
        let tell = self.core.close_after_response();
        if tell {
            self.unprocessed = true;
        }
        tell
    }

    /// Nothing in flight: no job, no output waiting, no request begun, no transport handshake
    /// under way (a client in the middle of one is about to send its request: a drain must
    /// not cut it off; the handshake has the header timeout to finish).
    pub fn is_idle(&self) -> bool {
        !self.dead
            && !self.job_pending
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
        self.timed_out = false;
        if self.out_pending() {
            // The peer took nothing for the write timeout: give it up (see `Transport::abort`).
            self.stream.abort();
            return Fate::Close;
        }
        if self.core.is_closed() {
            return Fate::Close;
        }
        self.ensure_output(env.pool);
        let cx = Context {
            limits: env.limits,
            date: env.date.get(),
            stream_bodies: !W::BLOCKING,
        };
        let action = self.core.expire(
            Instant::now(),
            &mut self.input,
            &mut self.output,
            &cx,
            env.handler,
        );
        let handoff = self.after(action);
        self.pump_with(env, handoff)
    }

    /// Hands a finished job's reply to the session, then carries on like [`Conn::pump`].
    pub fn complete<H: Handler>(&mut self, reply: Reply, env: &mut Env<'_, H>) -> Fate<H::Job> {
        self.job_pending = false;
        let cx = Context {
            limits: env.limits,
            date: env.date.get(),
            stream_bodies: !W::BLOCKING,
        };
        self.ensure_output(env.pool);
        let action = self
            .core
            .complete(reply, &mut self.input, &mut self.output, &cx, env.handler);
        let handoff = self.after(action);
        self.pump_with(env, handoff)
    }

    /// Hands what opening a file found to the session, then carries on like [`Conn::pump`]
    /// (sending the file's bytes first, if the answer has any).
    pub fn file_opened<H: Handler>(
        &mut self,
        request: &FileRequest,
        found: Result<OpenFile, FileError>,
        env: &mut Env<'_, H>,
    ) -> Fate<H::Job> {
        self.job_pending = false;
        let cx = Context {
            limits: env.limits,
            date: env.date.get(),
            stream_bodies: !W::BLOCKING,
        };
        self.ensure_output(env.pool);
        let meta = found.as_ref().map(|f| &f.meta).map_err(|e| *e);
        let action = self.core.file(
            request,
            meta,
            &mut self.input,
            &mut self.output,
            &cx,
            env.handler,
        );
        self.opened = found.ok().map(|f| f.file);
        let handoff = self.after(action);
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
        self.cut_short = false;
        self.parked = false;
        let keep = self.run(env, &mut handoff);
        match (keep, handoff) {
            (true, Some(Handoff::Job(job))) => Fate::Offload(job),
            (true, Some(Handoff::Open(file))) => Fate::Open(file),
            // A handoff's answer pumps again anyway, and readiness flags persist till then.
            (true, None) if self.cut_short => Fate::Again,
            (true, None) => Fate::Keep,
            (false, handoff) => {
                // Dropping work never handed out: nothing else refers to the slot. A job whose
                // peer left before it could be queued is dropped like a queued one.
                if let Some(Handoff::Job(_)) = handoff {
                    env.stats.job_cancelled();
                }
                if handoff.is_some() {
                    self.job_pending = false;
                }
                Fate::Close
            }
        }
    }

    /// The body of [`Conn::pump`]: false means close.
    fn run<H: Handler>(
        &mut self,
        env: &mut Env<'_, H>,
        handoff: &mut Option<Handoff<H::Job>>,
    ) -> bool {
        loop {
            if self.writable && (self.written < self.output.len() || self.stream.has_pending()) {
                if let Err(e) = self.flush() {
                    return self.write_failed(e);
                }
            }
            if self.writable
                && self.written >= self.output.len()
                && self.body.is_some()
                && !self.parked
            {
                if env.budget == 0 {
                    self.cut_short = true;
                    return true;
                }
                // A file's bytes go to the transport; a streamed body's come from the
                // application, whose failure is not the peer's.
                let to_peer = self.body.as_ref().is_some_and(|b| !b.is_buffered());
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
            // Blocking: a drain reaches an upgraded connection through the model's rule (its
            // thread is on it, not on a loop that could tell it).
            if W::BLOCKING
                && self.core.is_upgraded()
                && env.going.is_some_and(|going| going())
                && self.wind_down()
            {
                continue;
            }
            // An upgraded protocol hears that its peer left once it has taken everything the
            // peer sent before leaving: its last words may answer those bytes.
            if self.peer_closed
                && self.core.is_upgraded()
                && !self.unprocessed
                && !self.core.is_closed()
            {
                self.ensure_output(env.pool);
                self.core.peer_closed(&mut self.output);
                continue;
            }
            let out_pending = self.out_pending();
            let finished = self.core.is_closed()
                || (!self.core.is_upgraded()
                    && self.peer_closed
                    && !self.job_pending
                    && !self.unprocessed);
            if finished {
                return out_pending;
            }

            if self.unprocessed
                && (!self.job_pending || self.core.feeding())
                // Responses to later requests wait until a body is all out.
                && self.body.is_none()
                && self.room_for_output(env.limits)
            {
                self.unprocessed = false;
                self.ensure_output(env.pool);
                if let Some(wind_down) = env.wind_down {
                    if !self.input.is_empty() && !self.core.is_upgraded() && wind_down() {
                        // Tell the client this response is the last, rather than vanish
                        // under it.
                        self.core.close_after_response();
                    }
                }
                if W::BLOCKING {
                    env.date.refresh();
                }
                let cx = Context {
                    limits: env.limits,
                    date: env.date.get(),
                    stream_bodies: !W::BLOCKING,
                };
                // With nothing waiting to be written, an upgraded protocol may answer from the
                // input's own buffer (a WebSocket echo): the first `skip` bytes are not sent.
                let mut skip = 0;
                let action = if self.written == self.output.len() {
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

            if self.readable && !self.peer_closed {
                if env.budget == 0 {
                    self.cut_short = true;
                    return true;
                }
                // The session wants more bytes only when it has seen all it has and is not busy.
                let wants_more = !self.unprocessed && !self.job_pending;
                if self.input.capacity() == 0 {
                    self.input = env.pool.take();
                }
                if self.input.len() == self.input.capacity() {
                    if !wants_more || self.input.capacity() >= env.max_input {
                        // Paused: resumes when the session consumes input or the job ends. A
                        // blocking connection is only read when all its input was consumed, so
                        // nothing would ever resume it: it ends.
                        if W::BLOCKING {
                            self.readable = false;
                            return false;
                        }
                        return true;
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
                    Ok(0) => self.peer_closed = true,
                    Ok(_) => {
                        self.unprocessed = true;
                        // Blocking: one read per request of the owner's. Readiness: a read that
                        // left room in the buffer drained the socket; new bytes will raise a new
                        // edge, so skip the read that would only say WouldBlock.
                        if W::BLOCKING
                            || (self.input.len() < self.input.capacity()
                                && !self.hup
                                && self.stream.short_read_drains())
                        {
                            self.readable = false;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.readable = false;
                        self.timed_out = W::BLOCKING;
                    }
                    // SO_RCVTIMEO may also report itself so.
                    Err(e) if W::BLOCKING && e.kind() == io::ErrorKind::TimedOut => {
                        self.readable = false;
                        self.timed_out = true;
                    }
                    // Blocking: a signal (a stop) interrupted the wait; the owner looks first.
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                        self.readable = !W::BLOCKING;
                    }
                    Err(e) => return self.fail(e),
                }
                continue;
            }

            // An idle connection holds no buffers. A blocking one keeps its two: its thread
            // serves nothing else meanwhile, and the pool would only hand them back.
            if !W::BLOCKING {
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
        match action {
            Action::Offload(job) => {
                self.job_pending = true;
                // A body streaming to the job may already be in the input.
                self.unprocessed = self.core.feeding();
                Some(Handoff::Job(job))
            }
            Action::Open(file) => {
                self.job_pending = true;
                Some(Handoff::Open(file))
            }
            // What the client sent behind a switching request is the new protocol's first
            // input.
            Action::Flush | Action::Switched => {
                self.unprocessed = true;
                None
            }
            Action::Body { offset, len } => {
                let file = self.opened.take();
                debug_assert!(file.is_some(), "a file body without an opened file");
                self.body = file.map(|file| Body::file(file, offset, len));
                None
            }
            Action::Stream(streamed) => {
                self.body = Some(Body::stream(streamed));
                None
            }
            Action::Read | Action::Close => None,
        }
    }

    /// Sends body bytes until the socket is full, the budget is spent or the body is done;
    /// once done, lets the session go on with pipelined requests. A body read into the output
    /// buffer (a transport that cannot `sendfile`) stops after one chunk, which the loop then
    /// writes like any output.
    fn send_body(&mut self, budget: &mut usize, pool: &mut BufPool) -> io::Result<()> {
        let Some(body) = &mut self.body else {
            return Ok(());
        };
        if self.output.capacity() == 0 && (body.is_buffered() || !self.stream.can_send_file()) {
            self.output = pool.take();
        }
        let wait = W::BLOCKING.then_some(self.body_wait);
        while !body.is_done() {
            if *budget == 0 {
                return Ok(());
            }
            *budget -= 1;
            match body.send(&mut self.stream, &mut self.output, wait) {
                Ok(Sent::Direct(_)) => {}
                Ok(Sent::Parked) => {
                    self.parked = true;
                    return Ok(());
                }
                Ok(Sent::Buffered) => {
                    self.written = 0;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && !W::BLOCKING => {
                    self.writable = false;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if body.is_done() {
            // Any last bytes are in the output, ahead of whatever is answered next.
            self.body = None;
            self.unprocessed = true;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        // The connection's last bytes (a TLS stream sends its close_notify with them).
        let last = self.core.is_closed() && self.body.is_none();
        while self.written < self.output.len() {
            let rest = &self.output[self.written..];
            let wrote = if last {
                self.stream.write_last(rest)
            } else {
                self.stream.write(rest)
            };
            match wrote {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.written += n;
                    self.answered = true;
                }
                // Blocking, it means the write timeout passed: an error like any other.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && !W::BLOCKING => {
                    self.writable = false;
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
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && !W::BLOCKING => {
                    self.writable = false;
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
        if W::BLOCKING
            && matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            )
        {
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
            || self.body.as_ref().is_some_and(|b| !b.is_buffered());
        if abandoned {
            self.stream.abort();
        }
        let unread = self.readable || !self.input.is_empty();
        self.opened = None;
        self.body = None;
        self.input.clear();
        self.output.clear();
        self.written = 0;
        self.release_idle_buffers(pool);
        if abandoned || !unread || self.peer_closed {
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
    use crate::drive::{files::Files, Service};
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
            conn.readable = true;
            conn.writable = true;
            let mut fate = conn.pump(&mut env);
            if let Fate::Open(req) = fate {
                let found = files.open(&req);
                fate = conn.file_opened(&req, found, &mut env);
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
        blocking::serve_connection(wrap(s), &Acceptor::Plain, serving, &config, || false, None)
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
