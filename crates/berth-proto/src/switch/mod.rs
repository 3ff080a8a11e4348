//! The protocol switch: what one connection speaks, and the one set of calls every pump makes
//! whatever that is.
//!
//! ```text
//!                      ┌──────────── Core (this module) ────────────┐
//!   first bytes, ALPN ─┤ Undecided ─┬─> Http1 (http::Session) ─────┼─> Upgraded (101: ws, echo…)
//!                      │            └─> Http2 (h2::Connection)     │
//!                      └────────────────────┬───────────────────────┘
//!                                           v
//!               Action: Read | Flush | Offload | Open | Body | Pull | Stream | Switched | Close
//! ```
//!
//! A connection starts undecided: its first bytes (HTTP/2's preface, RFC 9113
//! §3.4) or the transport's ALPN (`h2`) make it HTTP/2's, anything else HTTP/1.1's; a handler
//! may then hand an HTTP/1.1 connection to another protocol ([`Upgraded`]). The pump is never
//! told which: it asks what the connection can do ([`Core::many_jobs_out`],
//! [`Core::wants_waker`]) and acts on [`Action`]s. This module sits above `http` (the exchange
//! and HTTP/1.1), `h2` and `upgrade`, and is the only one that knows all of them.
//!
//! [`memory`] is the pump in memory, for vector tests and fuzzing; `berth::drive::pump` is
//! the one over real sockets for every concurrency model.

pub mod memory;

use std::fmt;
use std::time::Instant;

use crate::h2;
use crate::http::{
    Context, FileError, FileMeta, FileRequest, Handler, Limits, Phase, Reply, Session, Timeouts,
};
use crate::upgrade::{Flow, Handover, Upgraded};

pub use crate::http::Action;
pub use memory::{FileSource, KeptBodies, KeptBody, NoFiles, PulledPiece, Pump, Violation};

/// What a connection speaks: each state of its life, from the first byte to an upgrade.
enum Speaks {
    /// Nothing said yet: the first bytes (or ALPN) decide between HTTP/1.1 and HTTP/2. The
    /// session is HTTP/1.1's, ready if they say so.
    Undecided(Session),
    /// HTTP/1.1.
    Http1(Session),
    /// HTTP/2.
    Http2(Box<h2::Connection>),
    /// HTTP/1.1 handed the connection to another protocol.
    Upgraded(Box<Handed>),
}

/// A protocol an HTTP/1.1 handler switched to, and where its life stands.
struct Handed {
    protocol: Box<dyn Upgraded>,
    life: Life,
    /// The driver was woken for it ([`Core::poke`]): it is asked for news at the next
    /// [`Core::process`].
    woken: bool,
}

/// An upgraded protocol's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    /// Speaking.
    Open,
    /// A drain began; it hears of it at the next [`Core::process`].
    Leaving,
    /// It was told the server is going away.
    Told,
    /// It said to close, or its peer left: the connection ends after its output.
    Over,
}

/// What a connection speaks and the rules a pump applies to it, whatever moves its bytes.
/// Methods take the pump's input and output buffers, as the protocols' own do.
pub struct Core {
    speaks: Speaks,
    /// The client's address, for every request (HTTP/2's too, if the connection turns out to
    /// speak it).
    peer: Option<std::net::SocketAddr>,
}

impl Default for Core {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Core {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let speaks = match &self.speaks {
            Speaks::Undecided(_) => "undecided",
            Speaks::Http1(_) => "HTTP/1.1",
            Speaks::Http2(_) => "HTTP/2",
            Speaks::Upgraded(_) => "upgraded",
        };
        f.debug_struct("Core").field("speaks", &speaks).finish()
    }
}

impl Core {
    /// A connection at its start, before its first byte.
    pub fn new() -> Self {
        Core {
            speaks: Speaks::Undecided(Session::new()),
            peer: None,
        }
    }

    /// Tells the connection its peer's address, which every request carries
    /// ([`Request::peer`](crate::http::Request::peer)); drivers call it once, at accept.
    pub fn set_peer(&mut self, peer: Option<std::net::SocketAddr>) {
        self.peer = peer;
        if let Speaks::Undecided(s) | Speaks::Http1(s) = &mut self.speaks {
            s.set_peer(peer);
        }
    }

    // --- what the connection can do (a pump asks these, never what it speaks) ------------

    /// Many requests may be in flight at once, each a stream: the connection is read, and
    /// other requests answered, while jobs are out ([`Action::Offload`]'s stream), and it
    /// stops at each job it hands out (more input may be behind it).
    pub fn many_jobs_out(&self) -> bool {
        matches!(self.speaks, Speaks::Http2(_))
    }

    /// Its streams' bodies wake the driver (a producer the pump keeps that pushes,
    /// [`Action::Stream`]; a job that takes a streamed request body, [`Core::carry_feeds`]):
    /// the driver needs a way to be woken, then to [`Core::poke`] it.
    pub fn wants_waker(&self) -> bool {
        self.many_jobs_out()
    }

    /// Its file bodies are pulled as its windows open ([`Action::Pull`]), many at once: the
    /// pump keeps each one's file by stream ([`Action::Body`]) until [`Core::pulls`] says the
    /// stream is done with it. Else the one body is the pump's to send after the head, as
    /// the socket takes it.
    pub fn pulls_bodies(&self) -> bool {
        self.many_jobs_out()
    }

    /// Whether `stream` still takes its body from the file the pump keeps for it (see
    /// [`Core::pulls_bodies`]): false once the body is complete or the stream is reset or
    /// gone; the pump then drops the file.
    pub fn pulls(&self, stream: u64) -> bool {
        match &self.speaks {
            Speaks::Http2(h2) => h2.pulls(stream),
            _ => false,
        }
    }

    /// The pump read what [`Action::Pull`] asked for `stream` into `bytes` (given an empty
    /// buffer in return), and at the end a producer's `trailers`
    /// ([`Streamed::take_trailers`](crate::http::Streamed::take_trailers)); the protocol frames and sends them as its windows allow,
    /// and goes on as [`Core::process`] does.
    #[allow(clippy::too_many_arguments)]
    pub fn pulled<H: Handler>(
        &mut self,
        stream: u64,
        bytes: &mut Vec<u8>,
        pulled: h2::Pulled,
        trailers: Vec<(String, Vec<u8>)>,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        match &mut self.speaks {
            Speaks::Http2(h2) => {
                h2.pulled(stream, bytes, pulled, trailers, input, output, cx, handler)
            }
            // Nothing else asks for a pull.
            _ => Action::Read,
        }
    }

    /// The counts a multiplexed connection keeps (streams, resets, the abuse it was ended
    /// for), for the server's `/stats`; `None` for a connection that has none.
    pub fn stream_counts(&self) -> Option<&h2::Counts> {
        match &self.speaks {
            Speaks::Http2(h2) => Some(h2.counts()),
            _ => None,
        }
    }

    /// Streams whose job was given up since the last call (the client reset them while it was
    /// out), each named once: a driver drops such a job if it has not started. A connection
    /// that answers one request at a time gives its job up with the connection, which the
    /// driver sees itself.
    pub fn cancelled_jobs(&mut self, each: impl FnMut(u64)) {
        if let Speaks::Http2(h2) = &mut self.speaks {
            h2.take_cancelled().for_each(each);
        }
    }

    /// The transport agreed on a protocol by ALPN before the first byte: `h2` makes the
    /// connection HTTP/2's whatever it sends (a wrong preface is then its connection error,
    /// not an HTTP/1.1 request), if `limits` allow HTTP/2 (a listener that does not offers no
    /// `h2`). Anything else leaves it to the first bytes. Called before each `process` until
    /// the connection has decided; a no-op after.
    pub fn agreed(&mut self, alpn: Option<&[u8]>, limits: &Limits) {
        if !matches!(self.speaks, Speaks::Undecided(_)) || alpn != Some(b"h2") {
            return;
        }
        if let Some(config) = limits.http2 {
            self.speak_h2(config);
        }
    }

    /// What the connection speaks, in words, for logs (`HTTP/1.1`, `HTTP/2`, `upgraded`, or
    /// `undecided` before its first bytes). Not for decisions: ask what it can do instead.
    pub fn speaks(&self) -> &'static str {
        match &self.speaks {
            Speaks::Undecided(_) => "undecided",
            Speaks::Http1(_) => "HTTP/1.1",
            Speaks::Http2(_) => "HTTP/2",
            Speaks::Upgraded(_) => "upgraded",
        }
    }

    /// Whether the connection's first bytes are still to be looked at.
    pub fn undecided(&self) -> bool {
        matches!(self.speaks, Speaks::Undecided(_))
    }

    /// Looks at a connection's first bytes, once: HTTP/2's preface (a client that knows the
    /// server speaks it, h2c with prior knowledge, or one that agreed on `h2` by ALPN, which
    /// sends the same preface) makes the connection HTTP/2's; anything else is HTTP/1.1.
    /// `None`: too few bytes to tell yet (a prefix of the preface).
    fn sniff(&mut self, input: &[u8], cx: &Context<'_>) -> Option<()> {
        let Speaks::Undecided(_) = &self.speaks else {
            return Some(());
        };
        let Some(config) = &cx.limits.http2 else {
            self.speak_http1();
            return Some(());
        };
        let n = input.len().min(h2::PREFACE.len());
        if config.exclusive {
            self.speak_h2(*config);
            return Some(());
        }
        if input[..n] != h2::PREFACE[..n] {
            self.speak_http1();
            return Some(());
        }
        if n < h2::PREFACE.len() {
            return None;
        }
        self.speak_h2(*config);
        Some(())
    }

    fn speak_http1(&mut self) {
        let speaks = std::mem::replace(&mut self.speaks, Speaks::Http1(Session::new()));
        if let Speaks::Undecided(session) = speaks {
            self.speaks = Speaks::Http1(session);
        }
    }

    fn speak_h2(&mut self, config: h2::H2Config) {
        let mut conn = Box::new(h2::Connection::new(config));
        conn.set_peer(self.peer);
        self.speaks = Speaks::Http2(conn);
    }

    /// The HTTP/1.1 session, while the connection speaks HTTP/1.1 (or has not decided yet),
    /// for checks on its state.
    pub fn session(&self) -> Option<&Session> {
        match &self.speaks {
            Speaks::Undecided(s) | Speaks::Http1(s) => Some(s),
            _ => None,
        }
    }

    /// True once HTTP has handed the connection to another protocol.
    pub fn is_upgraded(&self) -> bool {
        matches!(self.speaks, Speaks::Upgraded(_))
    }

    /// Carries the request bodies the connection passed on to their jobs into the writers
    /// the driver holds (`taps`), then tells the connection how far each job has taken its
    /// body, which paces the client ([`Taps`](crate::http::Taps)). Call it after every call
    /// that may pass body on (`process`, `complete`, `file`, `expire`), and when woken
    /// before `process`. `wake`: the driver's way to be woken, given each new body's writer
    /// to run when its job makes room (then [`Core::poke`]); without one, the driver looks
    /// again when it next runs the connection.
    pub fn carry_feeds(
        &mut self,
        taps: &mut crate::http::Taps,
        wake: Option<&std::sync::Arc<dyn Fn() + Send + Sync>>,
    ) {
        match &mut self.speaks {
            Speaks::Undecided(s) | Speaks::Http1(s) => taps.exchange(s, wake),
            Speaks::Http2(h2) => taps.exchange(&mut **h2, wake),
            _ => {}
        }
    }

    /// Whether a request body is going to its job as it arrives ([`Session::feeding`]): the
    /// pump should go on calling [`Core::process`] with new input while the job runs.
    pub fn feeding(&self) -> bool {
        match &self.speaks {
            Speaks::Http1(s) => s.feeding(),
            _ => false,
        }
    }

    /// True once the connection is to close after its output: HTTP wrote a final response,
    /// HTTP/2 ended, or the upgraded protocol said so (or its peer left).
    pub fn is_closed(&self) -> bool {
        match &self.speaks {
            Speaks::Undecided(s) | Speaks::Http1(s) => s.is_closed(),
            Speaks::Http2(h2) => h2.is_closed(),
            Speaks::Upgraded(u) => u.life == Life::Over,
        }
    }

    /// Between requests with nothing buffered (`input` is the pump's unprocessed input). A
    /// pump adds its own conditions (no job out, no output waiting).
    pub fn is_idle(&self, input: &[u8]) -> bool {
        match &self.speaks {
            Speaks::Undecided(s) | Speaks::Http1(s) => s.phase(input) == Phase::Idle,
            // A drain's GOAWAY still to be written is something in flight: the client is
            // told before the connection closes (RFC 9113 §6.8). Nor is a connection whose
            // preface or SETTINGS is still to come: the header timeout applies to it, as to a
            // request begun.
            Speaks::Http2(h2) => {
                input.is_empty() && h2.is_open() && h2.open_streams() == 0 && !h2.goaway_pending()
            }
            Speaks::Upgraded(_) => false,
        }
    }

    /// The server is going away: HTTP/1.1 makes the response now in the making the
    /// connection's last (see [`Session::close_after_response`]); HTTP/2 says GOAWAY at the
    /// next `process`; an upgraded protocol is told at the next [`Core::process`]
    /// ([`Upgraded::going_away`]), once. True if the caller should call `process` for that.
    pub fn close_after_response(&mut self) -> bool {
        match &mut self.speaks {
            Speaks::Undecided(s) | Speaks::Http1(s) => {
                s.close_after_response();
                false
            }
            Speaks::Http2(h2) => {
                let first = !h2.draining();
                h2.close_after_response();
                first
            }
            Speaks::Upgraded(u) if u.life == Life::Open => {
                u.life = Life::Leaving;
                true
            }
            Speaks::Upgraded(_) => false,
        }
    }

    /// The driver was woken for this connection: an upgraded protocol is asked for what it
    /// has to send ([`Upgraded::wake`]) at the next [`Core::process`]. False if there is
    /// nothing to look at (HTTP/1.1, whose one body is the pump's).
    pub fn poke(&mut self) -> bool {
        match &mut self.speaks {
            Speaks::Upgraded(u) => {
                u.woken = true;
                true
            }
            // A producer pushed (its parked stream is pulled again), or a job took request
            // body (its consumer is looked at in every `process`).
            Speaks::Http2(h2) => {
                h2.wake_bodies();
                true
            }
            _ => false,
        }
    }

    /// Input arrived (appended to `input`): HTTP parses and answers what it can; an upgraded
    /// protocol gets all of it (unless there is none), and is woken if it was poked.
    pub fn process<H: Handler>(
        &mut self,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        self.process_in_place(input, output, &mut 0, cx, handler)
    }

    /// [`Core::process`] for a driver that can send its output from an offset: with the output
    /// empty, an upgraded protocol may answer from the input's own buffer
    /// ([`Upgraded::receive_in_place`]); `skip` is then how many bytes at the front of the
    /// output are not to be sent (0 otherwise).
    pub fn process_in_place<H: Handler>(
        &mut self,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        skip: &mut usize,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        if self.sniff(input, cx).is_none() {
            return Action::Read;
        }
        match &mut self.speaks {
            Speaks::Http2(h2) => h2.process(input, output, cx, handler),
            Speaks::Upgraded(u) => u.process(input, output, skip),
            Speaks::Undecided(s) | Speaks::Http1(s) => {
                let action = s.process(input, output, cx, handler);
                self.act(action)
            }
        }
    }

    /// Hands a finished job's reply to the protocol, which answers it and goes on with the
    /// input behind it.
    pub fn complete<H: Handler>(
        &mut self,
        stream: u64,
        reply: Reply,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        match &mut self.speaks {
            Speaks::Http2(h2) => h2.complete(stream, reply, input, output, cx, handler),
            Speaks::Undecided(s) | Speaks::Http1(s) => {
                let action = s.complete(reply, input, output, cx, handler);
                self.act(action)
            }
            // No job is ever out for an upgraded protocol.
            Speaks::Upgraded(_) => Action::Read,
        }
    }

    /// Hands what opening a file for `stream` found to the protocol, which writes the head
    /// and says whether bytes of the file follow ([`Action::Body`]); the file is the pump's
    /// to keep for that, or to close.
    #[allow(clippy::too_many_arguments)]
    pub fn file<H: Handler>(
        &mut self,
        stream: u64,
        request: &FileRequest,
        found: Result<&FileMeta, FileError>,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        match &mut self.speaks {
            Speaks::Http2(h2) => h2.file(stream, request, found, input, output, cx, handler),
            Speaks::Undecided(s) | Speaks::Http1(s) => {
                let action = s.file(request, found, input, output, cx, handler);
                self.act(action)
            }
            Speaks::Upgraded(_) => Action::Read,
        }
    }

    /// When the connection is next due for [`Core::expire`], given `now`: the write timeout
    /// while the pump has output waiting, else the rule of whatever the connection speaks
    /// ([`Session::poll_timeout`], [`Upgraded::poll_timeout`]). `None`: nothing is timed.
    pub fn poll_timeout(
        &mut self,
        input: &[u8],
        output_pending: bool,
        now: Instant,
        t: &Timeouts,
    ) -> Option<Instant> {
        match &mut self.speaks {
            Speaks::Http2(h2) => h2.poll_timeout(input, output_pending, now, t),
            Speaks::Upgraded(_) if output_pending => Some(now + t.write),
            Speaks::Upgraded(u) => u.protocol.poll_timeout(now, t),
            Speaks::Undecided(s) | Speaks::Http1(s) => {
                s.poll_timeout(input, output_pending, now, t)
            }
        }
    }

    /// The deadline [`Core::poll_timeout`] gave passed (with nothing left to write): HTTP
    /// answers a request in progress 408 or closes an idle connection ([`Session::expire`]);
    /// an upgraded protocol decides ([`Upgraded::handle_timeout`]). The time is `cx.now`, as
    /// for every call.
    pub fn expire<H: Handler>(
        &mut self,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        match &mut self.speaks {
            Speaks::Http2(h2) => h2.expire(input, output, cx, handler),
            Speaks::Upgraded(u) => {
                if u.life == Life::Over || u.protocol.handle_timeout(cx.now, output) == Flow::Close
                {
                    u.life = Life::Over;
                    return Action::Close;
                }
                Action::Read
            }
            Speaks::Undecided(s) | Speaks::Http1(s) => {
                let action = s.expire(input, output, cx, handler);
                self.act(action)
            }
        }
    }

    /// The peer will send nothing more. An upgraded protocol adds its last words to `output`
    /// and the connection closes once they are out. HTTP/1.1 cuts a request body still
    /// arriving short ([`Session::peer_closed`]), HTTP/2 gives up the streams whose requests
    /// are still arriving ([`Connection::peer_closed`](crate::h2::Connection::peer_closed));
    /// otherwise HTTP needs no call (the pump closes once what was received is answered). True
    /// if anything changed: carry the request bodies ([`Core::carry_feeds`]) and pump again.
    pub fn peer_closed(&mut self, output: &mut Vec<u8>) -> bool {
        match &mut self.speaks {
            Speaks::Upgraded(u) if u.life != Life::Over => {
                u.protocol.peer_closed(output);
                u.life = Life::Over;
                true
            }
            Speaks::Undecided(s) | Speaks::Http1(s) => s.peer_closed(),
            Speaks::Http2(h2) => h2.peer_closed(),
            _ => false,
        }
    }

    /// What HTTP/1.1 said, with a handover taken here: the connection speaks the protocol
    /// it was handed to from now on.
    #[inline]
    fn act<J>(&mut self, action: Action<J>) -> Action<J> {
        if matches!(action, Action::Switched) {
            if let Speaks::Undecided(s) | Speaks::Http1(s) = &mut self.speaks {
                if let Some(Handover(protocol)) = s.take_handover() {
                    self.speaks = Speaks::Upgraded(Box::new(Handed {
                        protocol,
                        life: Life::Open,
                        woken: false,
                    }));
                }
            }
        }
        action
    }
}

impl Handed {
    /// Input (or a wake, or a drain) for an upgraded protocol.
    fn process<J>(
        &mut self,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        skip: &mut usize,
    ) -> Action<J> {
        if self.life == Life::Over {
            input.clear();
            return Action::Close;
        }
        if !input.is_empty() {
            let flow = if output.is_empty() {
                let (flow, k) = self.protocol.receive_in_place(input, output);
                *skip = k;
                flow
            } else {
                self.protocol.receive(input, output)
            };
            if flow == Flow::Close {
                self.life = Life::Over;
                return Action::Close;
            }
        }
        if std::mem::take(&mut self.woken) && self.protocol.wake(output) == Flow::Close {
            self.life = Life::Over;
            return Action::Close;
        }
        if self.life == Life::Leaving {
            self.life = Life::Told;
            if self.protocol.going_away(output) == Flow::Close {
                self.life = Life::Over;
                return Action::Close;
            }
        }
        Action::Read
    }
}
