//! The step loop's shared half, and the whole loop in memory.
//!
//! [`Core`] is what every pump of an HTTP connection does the same, wherever the bytes come
//! from: it holds what the connection speaks — the HTTP [`Session`], or the [`Upgraded`]
//! protocol HTTP handed it to — routes input, timeouts and the peer's end to whichever it is,
//! and turns each session [`Step`] into an [`Action`] for the pump. An upgrade is settled
//! inside (the new protocol is kept, the pump is only told [`Action::Switched`]), so no pump
//! knows what a connection speaks after HTTP. Two pumps drive it: [`Pump`] here, in memory,
//! and `berth::drive::pump` over real sockets for every concurrency model.
//!
//! [`Pump`] is the loop in memory: a driver with no sockets, no clock and no threads, for the
//! vector tests and the fuzz targets. Bytes go in with [`Pump::feed`]; what the session writes
//! collects in [`Pump::written`]; jobs run inline at once, or are held until [`Pump::finish`]
//! to play a slow worker; a file body comes from a [`FileSource`].
//!
//! It also checks what every driver relies on, and reports a breach as a [`Violation`]
//! instead of going on: nothing is written after `Close`; nothing is answered while a job is
//! out; `Close` means the session is closed, `Offload` that it waits and `Switched` that it was
//! handed over; `Flush` makes progress (no livelock). The socket pump acts on the same actions
//! with real I/O and trusts these rules.
//!
//! ```text
//!   feed(bytes) ─> Core::process ─> Action ─┬─ Read     : wait for more bytes
//!                      ^                     ├─ Flush    : move output to `written`, again
//!                      │                     ├─ Offload  : job.run() (or hold) -> complete
//!                      │                     ├─ Open     : FileSource::open -> Core::file
//!                      ├─────────────────────┼─ Body     : FileSource::read -> `written`, again
//!                      ├─────────────────────┼─ Stream   : Streamed::take -> `written`, again
//!                      └─────────────────────┼─ Switched : the rest is the new protocol's, again
//!                                            └─ Close    : closed; later input ignored
//! ```

use std::fmt;
use std::time::Instant;

use super::files::{FileError, FileMeta, FileRequest};
use super::handler::{Context, Handler, Job};
use super::limits::Limits;
use super::response::Reply;
use super::session::{Phase, Session, Step, Streamed, Timeouts};
use super::stream::Taken;
use crate::h2;
use crate::upgrade::{Flow, Handover, Upgraded};

/// `Flush` steps in a row with nothing written before the pump calls it a livelock.
const SPIN_LIMIT: usize = 1_000;

/// What a pump does next for a [`Core`]: a session [`Step`] with the upgrade settled inside.
/// Whatever it is, the output is written first (or, for `Offload` and `Open`, meanwhile).
#[derive(Debug, PartialEq, Eq)]
pub enum Action<J> {
    /// Wait for more input (or the deadline, [`Core::poll_timeout`]).
    Read,
    /// The output passed the high-water mark: write it, then call [`Core::process`] again.
    Flush,
    /// Run `job` and pass its reply to [`Core::complete`] with `stream`: 0 for HTTP/1.1's one
    /// request at a time; an HTTP/2 stream's id, of which many may be out at once (the
    /// connection goes on reading and answering meanwhile, [`Core::multiplexed`]).
    Offload {
        /// The stream the reply answers.
        stream: u32,
        /// The job.
        job: J,
    },
    /// Open the file the request names (under the server's root, never outside it) and pass
    /// what was found to [`Core::file`].
    Open(FileRequest),
    /// The response's body is a body source, not output: after the output, send `len` bytes of
    /// the file just passed to [`Core::file`] from `offset`, then call [`Core::process`] again.
    /// How is the pump's choice (`sendfile(2)`, or read and written in bounded chunks).
    Body {
        /// First byte to send.
        offset: u64,
        /// How many bytes.
        len: u64,
        /// Encode them on the way ([`crate::http::BodyEncoder`]): a file compressed on the fly.
        encode: Option<super::files::Encode>,
    },
    /// The response's body is streamed: after the output, send what [`Streamed::take`] yields
    /// until it ends, then call [`Core::process`] again.
    Stream(Streamed),
    /// The connection now speaks another protocol (the output holds the 101): call
    /// [`Core::process`] again, which hands the input left behind the request to it.
    Switched,
    /// Write the output, then close the connection. Later input is ignored.
    Close,
}

/// What a connection speaks, and the rules a pump applies to it whatever moves its bytes: the
/// HTTP session until a handler switches protocol, the [`Upgraded`] session after. Methods
/// take the pump's input and output buffers, as [`Session`]'s do.
pub struct Core {
    session: Session,
    /// HTTP/2, once the connection began with its preface ([`Limits::http2`] allowing it).
    h2: Option<Box<h2::Connection>>,
    /// Whether the connection's first bytes were looked at for HTTP/2's preface.
    sniffed: bool,
    /// The protocol the connection was handed to, once it was.
    upgraded: Option<Box<dyn Upgraded>>,
    /// The upgraded protocol said to close, or its peer left.
    over: bool,
    /// The driver was woken for the upgraded protocol ([`Core::poke`]).
    woken: bool,
    /// Whether the upgraded protocol was told the server is going away.
    leaving: Leaving,
    /// The client's address, for HTTP/2 if the connection turns out to speak it.
    peer: Option<std::net::SocketAddr>,
}

/// A drain, as an upgraded protocol hears of it ([`Upgraded::going_away`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leaving {
    /// No drain.
    Staying,
    /// A drain began; the protocol hears of it at the next [`Core::process`].
    Asked,
    /// The protocol was told.
    Told,
}

impl Default for Core {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Core {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Core")
            .field("session", &self.session)
            .field("h2", &self.h2)
            .field("upgraded", &self.upgraded.is_some())
            .field("over", &self.over)
            .finish()
    }
}

impl Core {
    /// A connection at its start: HTTP, before the first request.
    pub fn new() -> Self {
        Core {
            session: Session::new(),
            h2: None,
            sniffed: false,
            upgraded: None,
            over: false,
            woken: false,
            leaving: Leaving::Staying,
            peer: None,
        }
    }

    /// Tells the session its peer's address, which every request carries
    /// ([`Request::peer`](super::Request::peer)); drivers call it once, at accept.
    pub fn set_peer(&mut self, peer: Option<std::net::SocketAddr>) {
        self.peer = peer;
        self.session.set_peer(peer);
    }

    /// Whether the connection speaks HTTP/2: many requests in flight at once, each a stream,
    /// so that input is read and answered while jobs are out ([`Action::Offload`]'s stream).
    pub fn multiplexed(&self) -> bool {
        self.h2.is_some()
    }

    /// The HTTP/2 connection, once the connection speaks it (for its counts).
    pub fn http2(&self) -> Option<&h2::Connection> {
        self.h2.as_deref()
    }

    /// Looks at a connection's first bytes, once: HTTP/2's preface (RFC 9113 §3.4: a client
    /// that knows the server speaks it, h2c with prior knowledge, or one that agreed on `h2`
    /// by ALPN, which sends the same preface) makes the connection HTTP/2's; anything else
    /// is HTTP/1.1. `None`: too few bytes to tell yet (a prefix of the preface).
    fn sniff(&mut self, input: &[u8], cx: &Context<'_>) -> Option<()> {
        let Some(config) = &cx.limits.http2 else {
            self.sniffed = true;
            return Some(());
        };
        let n = input.len().min(h2::PREFACE.len());
        if config.exclusive {
            self.speak_h2(*config, cx.limits);
            return Some(());
        }
        if input[..n] != h2::PREFACE[..n] {
            self.sniffed = true;
            return Some(());
        }
        if n < h2::PREFACE.len() {
            return None;
        }
        self.speak_h2(*config, cx.limits);
        Some(())
    }

    fn speak_h2(&mut self, config: h2::H2Config, limits: &Limits) {
        self.sniffed = true;
        let mut conn = Box::new(h2::Connection::new(config));
        conn.set_peer(self.peer);
        conn.set_server_header(limits.server_header);
        self.h2 = Some(conn);
    }

    /// Whether the connection's first bytes are still to be looked at for HTTP/2's preface.
    pub fn undecided(&self) -> bool {
        !self.sniffed
    }

    /// The transport agreed on `h2` by ALPN: the connection is HTTP/2's whatever it sends (a
    /// wrong preface is then its connection error, not an HTTP/1.1 request), if `limits`
    /// allow HTTP/2 (a listener that does not offers no `h2`).
    pub fn agreed_h2(&mut self, limits: &Limits) {
        match limits.http2 {
            Some(config) if !self.sniffed => self.speak_h2(config, limits),
            _ => {}
        }
    }

    /// The HTTP session (done with the connection once it was handed over).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// True once HTTP has handed the connection to another protocol.
    pub fn is_upgraded(&self) -> bool {
        self.upgraded.is_some()
    }

    /// How a streamed body's producer, or a job taking a streamed request body, wakes the
    /// driver to call [`Core::process`] (HTTP/2's streams; HTTP/1.1's body is the pump's).
    pub fn set_waker(&mut self, wake: std::sync::Arc<dyn Fn() + Send + Sync>) {
        if let Some(h2) = &mut self.h2 {
            h2.set_waker(wake);
        }
    }

    /// Whether a request body is going to its job as it arrives ([`Session::feeding`]): the
    /// pump should go on calling [`Core::process`] with new input while the job runs.
    pub fn feeding(&self) -> bool {
        self.upgraded.is_none() && self.h2.is_none() && self.session.feeding()
    }

    /// True once the connection is to close after its output: HTTP wrote a final response,
    /// or the upgraded protocol said so (or its peer left).
    pub fn is_closed(&self) -> bool {
        if let Some(h2) = &self.h2 {
            return h2.is_closed();
        }
        match self.upgraded {
            Some(_) => self.over,
            None => self.session.is_closed(),
        }
    }

    /// Between requests with nothing buffered: HTTP, no request begun (`input` is the pump's
    /// unprocessed input). A pump adds its own conditions (no job out, no output waiting).
    pub fn is_idle(&self, input: &[u8]) -> bool {
        if let Some(h2) = &self.h2 {
            // A drain's GOAWAY still to be written is something in flight: the client is told
            // before the connection closes (RFC 9113 §6.8).
            // Nor is a connection whose preface or SETTINGS is still to come: the header
            // timeout applies to it, as to a request begun.
            return input.is_empty()
                && h2.is_open()
                && h2.open_streams() == 0
                && !h2.goaway_pending();
        }
        self.upgraded.is_none() && self.session.phase(input) == Phase::Idle
    }

    /// The server is going away: HTTP makes the response now in the making the connection's
    /// last (see [`Session::close_after_response`]); an upgraded protocol is told at the next
    /// [`Core::process`] ([`Upgraded::going_away`]), once. True if the caller should call
    /// `process` for that (the first time, for an upgraded connection).
    pub fn close_after_response(&mut self) -> bool {
        if let Some(h2) = &mut self.h2 {
            // GOAWAY goes out at the next `process` (asked once).
            let first = !h2.draining();
            h2.close_after_response();
            return first;
        }
        if self.upgraded.is_none() {
            self.session.close_after_response();
            return false;
        }
        if self.leaving != Leaving::Staying || self.over {
            return false;
        }
        self.leaving = Leaving::Asked;
        true
    }

    /// The driver was woken for this connection: an upgraded protocol is asked for what it
    /// has to send ([`Upgraded::wake`]) at the next [`Core::process`]. `false` if the
    /// connection is not upgraded (nothing to do here).
    pub fn poke(&mut self) -> bool {
        self.woken = self.upgraded.is_some();
        // HTTP/2 looks at its streams' producers and consumers at every `process`.
        self.woken || self.h2.is_some()
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
        if !self.sniffed && self.sniff(input, cx).is_none() {
            return Action::Read;
        }
        if let Some(h2) = &mut self.h2 {
            let step = h2.process(cx.now, input, output, cx, handler);
            return Self::h2_act(step);
        }
        if let Some(upgraded) = &mut self.upgraded {
            if self.over {
                input.clear();
                return Action::Close;
            }
            if !input.is_empty() {
                let flow = if output.is_empty() {
                    let (flow, k) = upgraded.receive_in_place(input, output);
                    *skip = k;
                    flow
                } else {
                    upgraded.receive(input, output)
                };
                if flow == Flow::Close {
                    self.over = true;
                    return Action::Close;
                }
            }
            if std::mem::take(&mut self.woken) && upgraded.wake(output) == Flow::Close {
                self.over = true;
                return Action::Close;
            }
            if self.leaving == Leaving::Asked {
                self.leaving = Leaving::Told;
                if upgraded.going_away(output) == Flow::Close {
                    self.over = true;
                    return Action::Close;
                }
            }
            return Action::Read;
        }
        let step = self.session.process(input, output, cx, handler);
        self.act(step)
    }

    /// Hands a finished job's reply to HTTP, which answers it and goes on with pipelined
    /// input ([`Session::complete`]).
    pub fn complete<H: Handler>(
        &mut self,
        stream: u32,
        reply: Reply,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        if let Some(h2) = &mut self.h2 {
            let step = h2.complete(stream, reply, cx.now, input, output, cx, handler);
            return Self::h2_act(step);
        }
        let step = self.session.complete(reply, input, output, cx, handler);
        self.act(step)
    }

    /// Hands what opening a file found to HTTP, which writes the head and says whether a
    /// [`Action::Body`] follows ([`Session::file`]).
    pub fn file<H: Handler>(
        &mut self,
        request: &FileRequest,
        found: Result<&FileMeta, FileError>,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        let step = self
            .session
            .file(request, found, input, output, cx, handler);
        self.act(step)
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
        if let Some(h2) = &mut self.h2 {
            return h2.poll_timeout(input, output_pending, now, t);
        }
        match &mut self.upgraded {
            Some(_) if output_pending => Some(now + t.write),
            Some(upgraded) => upgraded.poll_timeout(now, t),
            None => self.session.poll_timeout(input, output_pending, now, t),
        }
    }

    /// The deadline [`Core::poll_timeout`] gave passed (with nothing left to write): HTTP
    /// answers a request in progress 408 or closes an idle connection ([`Session::expire`]);
    /// an upgraded protocol decides ([`Upgraded::handle_timeout`]).
    pub fn expire<H: Handler>(
        &mut self,
        now: Instant,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        if let Some(h2) = &mut self.h2 {
            return Self::h2_act(h2.expire(now, input, output, cx, handler));
        }
        if let Some(upgraded) = &mut self.upgraded {
            if self.over || upgraded.handle_timeout(now, output) == Flow::Close {
                self.over = true;
                return Action::Close;
            }
            return Action::Read;
        }
        let step = self.session.expire(input, output, cx, handler);
        self.act(step)
    }

    /// The peer will send nothing more. An upgraded protocol adds its last words to `output`
    /// and the connection closes once they are out; HTTP needs no call (the pump closes once
    /// what was received is answered).
    pub fn peer_closed(&mut self, output: &mut Vec<u8>) {
        if let Some(upgraded) = &mut self.upgraded {
            if !self.over {
                upgraded.peer_closed(output);
                self.over = true;
            }
        }
    }

    /// An HTTP/2 step as the pump sees it.
    fn h2_act<J>(step: h2::Step<J>) -> Action<J> {
        match step {
            h2::Step::Read => Action::Read,
            h2::Step::Flush => Action::Flush,
            h2::Step::Offload { stream, job } => Action::Offload { stream, job },
            h2::Step::Close => Action::Close,
        }
    }

    /// A session step as the pump sees it; a handover is kept here.
    fn act<J>(&mut self, step: Step<J>) -> Action<J> {
        match step {
            Step::Read => Action::Read,
            Step::Flush => Action::Flush,
            Step::Offload(job) => Action::Offload { stream: 0, job },
            Step::Open(request) => Action::Open(request),
            Step::SendFile {
                offset,
                len,
                encode,
            } => Action::Body {
                offset,
                len,
                encode,
            },
            Step::Stream(streamed) => Action::Stream(streamed),
            Step::Upgrade(Handover(upgraded)) => {
                self.upgraded = Some(upgraded);
                Action::Switched
            }
            Step::Close => Action::Close,
        }
    }
}

/// Where a pumped session's files come from.
pub trait FileSource {
    /// What opening the file `req` names finds.
    fn open(&mut self, req: &FileRequest) -> Result<FileMeta, FileError>;
    /// Appends `len` bytes of the file last opened, from `offset`, to `out`.
    fn read(&mut self, offset: u64, len: u64, out: &mut Vec<u8>);
}

/// No files at all: every file request finds nothing (404).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFiles;

impl FileSource for NoFiles {
    fn open(&mut self, _: &FileRequest) -> Result<FileMeta, FileError> {
        Err(FileError::NotFound)
    }
    fn read(&mut self, _: u64, _: u64, _: &mut Vec<u8>) {
        unreachable!("no file is ever opened")
    }
}

/// A rule of the step protocol the session broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation(pub String);

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Violation {}

/// One connection's session and handler, driven in memory.
pub struct Pump<H: Handler> {
    core: Core,
    handler: H,
    limits: Limits,
    date: Vec<u8>,
    input: Vec<u8>,
    /// The buffer lent to the session; moved to `written` after every call.
    out: Vec<u8>,
    written: Vec<u8>,
    /// A `Close` action was returned.
    closed: bool,
    /// Hold offloaded jobs until [`Pump::finish`] instead of running them at once.
    hold_jobs: bool,
    held: Option<H::Job>,
}

impl<H: Handler> Pump<H> {
    /// A new connection served by `handler` under `limits`, with `date` as every response's
    /// `Date`. With `hold_jobs`, offloaded jobs wait for [`Pump::finish`].
    pub fn new(handler: H, limits: Limits, date: &[u8], hold_jobs: bool) -> Self {
        Pump {
            core: Core::new(),
            handler,
            limits,
            date: date.to_vec(),
            input: Vec::new(),
            out: Vec::new(),
            written: Vec::new(),
            closed: false,
            hold_jobs,
            held: None,
        }
    }

    /// Everything the session has written so far.
    pub fn written(&self) -> &[u8] {
        &self.written
    }

    /// Takes what the session has written so far.
    pub fn take_written(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.written)
    }

    /// Input received and not yet consumed by the session.
    pub fn unread(&self) -> &[u8] {
        &self.input
    }

    /// A `Close` action was returned: the connection is over.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// The HTTP session itself, for checks on its state.
    pub fn session(&self) -> &Session {
        self.core.session()
    }

    fn process(&mut self) -> Action<H::Job> {
        let cx = Context {
            limits: &self.limits,
            date: &self.date,
            stream_bodies: false,
            now: Instant::now(),
        };
        self.core
            .process(&mut self.input, &mut self.out, &cx, &mut self.handler)
    }

    fn complete(&mut self, job: H::Job) -> Action<H::Job> {
        let reply = job.run();
        let cx = Context {
            limits: &self.limits,
            date: &self.date,
            stream_bodies: false,
            now: Instant::now(),
        };
        self.core.complete(
            0,
            reply,
            &mut self.input,
            &mut self.out,
            &cx,
            &mut self.handler,
        )
    }

    /// Moves what the session wrote to `written`; returns how many bytes that was.
    fn collect(&mut self) -> usize {
        let n = self.out.len();
        self.written.append(&mut self.out);
        n
    }

    /// Bytes arrive from the peer; runs the session until it wants more.
    pub fn feed(&mut self, bytes: &[u8], files: &mut dyn FileSource) -> Result<(), Violation> {
        self.input.extend_from_slice(bytes);
        if self.closed {
            // After `Close` a driver does not read; one that still calls `process` must get
            // `Close` again and no output.
            let action = self.process();
            if self.collect() != 0 || !matches!(action, Action::Close) {
                return Err(Violation(format!(
                    "after Close, process gave {} and wrote bytes",
                    action_name(&action)
                )));
            }
            return Ok(());
        }
        if self.held.is_some() {
            // A job is outstanding: nothing may be answered until it completes.
            let action = self.process();
            let n = self.collect();
            if n != 0 || !matches!(action, Action::Read) || !self.session().is_waiting() {
                return Err(Violation(format!(
                    "while a job was outstanding, process gave {} and wrote {n} byte(s)",
                    action_name(&action)
                )));
            }
            return Ok(());
        }
        let action = self.process();
        self.drive(action, files)
    }

    /// All input is in: runs a held job, if any (and any job its completion leads to).
    pub fn finish(&mut self, files: &mut dyn FileSource) -> Result<(), Violation> {
        self.hold_jobs = false;
        if let Some(job) = self.held.take() {
            let action = self.complete(job);
            self.drive(action, files)?;
        }
        Ok(())
    }

    /// Does what `action` asks, as a driver would, until the connection wants more input.
    fn drive(
        &mut self,
        mut action: Action<H::Job>,
        files: &mut dyn FileSource,
    ) -> Result<(), Violation> {
        let mut spins = 0;
        loop {
            let wrote = self.collect();
            match action {
                Action::Read => return Ok(()),
                Action::Close => {
                    if !self.core.is_closed() {
                        return Err(Violation(
                            "Step::Close but the session is not closed".into(),
                        ));
                    }
                    self.closed = true;
                    return Ok(());
                }
                Action::Flush => {
                    spins = if wrote == 0 { spins + 1 } else { 0 };
                    if spins > SPIN_LIMIT {
                        return Err(Violation(format!(
                            "livelock: {SPIN_LIMIT} Flush steps in a row with no output"
                        )));
                    }
                    action = self.process();
                }
                Action::Open(request) => {
                    let found = files.open(&request);
                    let cx = Context {
                        limits: &self.limits,
                        date: &self.date,
                        stream_bodies: false,
                        now: Instant::now(),
                    };
                    action = self.core.file(
                        &request,
                        found.as_ref().map_err(|e| *e),
                        &mut self.input,
                        &mut self.out,
                        &cx,
                        &mut self.handler,
                    );
                }
                Action::Body {
                    offset,
                    len,
                    encode: None,
                } => {
                    files.read(offset, len, &mut self.written);
                    action = self.process();
                }
                Action::Body {
                    offset,
                    len,
                    encode: Some(encode),
                } => {
                    let mut plain = Vec::new();
                    files.read(offset, len, &mut plain);
                    let mut body = super::encoding::BodyEncoder::new(encode, len);
                    let encoded = body.feed(&plain, &mut self.written);
                    encoded.and_then(|()| body.finish(&mut self.written)).ok();
                    action = self.process();
                }
                Action::Stream(streamed) => {
                    // In memory the producer is a job that already ran: its body is all
                    // pushed, and one that is not has stalled (nothing here waits for a
                    // thread; a blocking driver parks its own, see `berth::drive::blocking`).
                    loop {
                        match streamed.take(&mut self.written, usize::MAX) {
                            Taken::Bytes(_) => {}
                            Taken::Ended => break,
                            Taken::Aborted => {
                                return Err(Violation("a streamed body was aborted".into()));
                            }
                            Taken::Empty => {
                                return Err(Violation("a streamed body stalled".into()));
                            }
                        }
                    }
                    action = self.process();
                }
                Action::Switched => {
                    if !self.session().is_upgraded() {
                        return Err(Violation(
                            "Step::Upgrade but the session was not handed over".into(),
                        ));
                    }
                    action = self.process();
                }
                Action::Offload { job, .. } => {
                    if !self.session().is_waiting() {
                        return Err(Violation(
                            "Step::Offload but the session is not waiting".into(),
                        ));
                    }
                    if self.hold_jobs {
                        self.held = Some(job);
                        return Ok(());
                    }
                    action = self.complete(job);
                }
            }
        }
    }
}

/// An action's name, for violations (jobs need not be `Debug`).
fn action_name<J>(action: &Action<J>) -> &'static str {
    match action {
        Action::Read => "Read",
        Action::Flush => "Flush",
        Action::Offload { .. } => "Offload",
        Action::Open(_) => "Open",
        Action::Body { .. } => "Body",
        Action::Stream(_) => "Stream",
        Action::Switched => "Switched",
        Action::Close => "Close",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::{Handled, Reply, Request, Response};
    use crate::upgrade::{Echo, Switch};

    struct Upgrader;
    struct NoJob;
    impl Job for NoJob {
        fn run(self) -> Reply {
            Reply::failed()
        }
    }
    impl Handler for Upgrader {
        type Job = NoJob;
        fn handle(&mut self, _: &Request<'_>, _: &mut Response<'_>) -> Handled<NoJob> {
            Handled::Upgrade(Switch {
                protocol: "echo",
                headers: vec![("X-Tunnel".into(), "yes".into())],
                session: Box::new(Echo),
            })
        }
    }

    const DATE: &[u8] = b"Sun, 06 Nov 1994 08:49:37 GMT";

    /// The seam in memory: 101, then the bytes behind the request and every later byte go to
    /// the upgraded protocol, whole or split anywhere.
    #[test]
    fn an_upgrade_hands_the_rest_of_the_input_over() {
        let input: &[u8] =
            b"GET /t HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\nUpgrade: h2c, echo\r\n\r\nfirst";
        for split in 1..input.len() {
            let mut p = Pump::new(Upgrader, Limits::default(), DATE, false);
            p.feed(&input[..split], &mut NoFiles).unwrap();
            p.feed(&input[split..], &mut NoFiles).unwrap();
            p.feed(b" then more", &mut NoFiles).unwrap();
            let text = String::from_utf8(p.take_written()).unwrap();
            assert!(
                text.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
                "{text}"
            );
            assert!(
                text.contains("\r\nUpgrade: echo\r\nX-Tunnel: yes\r\n\r\n"),
                "{text}"
            );
            assert!(
                text.ends_with("\r\n\r\nfirst then more"),
                "split {split}: {text}"
            );
            assert!(p.session().is_upgraded());
        }
    }

    /// A handler may only switch a request that asked for it.
    #[test]
    fn an_upgrade_nobody_asked_for_is_400() {
        for head in [
            "GET /t HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET /t HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\n\r\n",
            "GET /t HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
            "GET /t HTTP/1.0\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n",
        ] {
            let mut p = Pump::new(Upgrader, Limits::default(), DATE, false);
            p.feed(head.as_bytes(), &mut NoFiles).unwrap();
            let text = String::from_utf8(p.take_written()).unwrap();
            assert!(text.starts_with("HTTP/1.1 400 "), "{head:?}: {text}");
            assert!(!p.session().is_upgraded());
        }
    }

    struct LateUpgrader;
    struct SwitchJob;
    impl Job for SwitchJob {
        fn run(self) -> Reply {
            Reply::switch(Switch {
                protocol: "echo",
                headers: vec![("X-Late".into(), "yes".into())],
                session: Box::new(Echo),
            })
        }
    }
    impl Handler for LateUpgrader {
        type Job = SwitchJob;
        fn handle(&mut self, _: &Request<'_>, _: &mut Response<'_>) -> Handled<SwitchJob> {
            Handled::Offload(SwitchJob)
        }
    }

    /// A job may switch too (`Reply::switch`): 101 and the handover for a request that asked
    /// to switch, 500 for one that did not (the job's mistake, never a switch by surprise).
    #[test]
    fn a_job_switches_a_request_that_asked_and_only_that() {
        let asked =
            "GET /t HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\nfirst";
        let mut p = Pump::new(LateUpgrader, Limits::default(), DATE, false);
        p.feed(asked.as_bytes(), &mut NoFiles).unwrap();
        p.feed(b" then more", &mut NoFiles).unwrap();
        let text = String::from_utf8(p.take_written()).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
            "{text}"
        );
        assert!(
            text.contains("\r\nUpgrade: echo\r\nX-Late: yes\r\n\r\n"),
            "{text}"
        );
        assert!(text.ends_with("\r\n\r\nfirst then more"), "{text}");
        assert!(p.session().is_upgraded());
        for head in [
            "GET /t HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET /t HTTP/1.0\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n",
            "HEAD /t HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n",
        ] {
            let mut p = Pump::new(LateUpgrader, Limits::default(), DATE, false);
            p.feed(head.as_bytes(), &mut NoFiles).unwrap();
            let text = String::from_utf8(p.take_written()).unwrap();
            assert!(text.starts_with("HTTP/1.1 500 "), "{head:?}: {text}");
            assert!(!p.session().is_upgraded());
        }
    }

    /// A job whose streamed reply declares its length: `/N/TEXT` answers TEXT (its first byte
    /// as the reply's first bytes, the rest pushed) with length N.
    struct Sized;
    struct SizedJob(u64, Vec<u8>);
    impl Job for SizedJob {
        fn run(self) -> Reply {
            let (writer, stream) = crate::http::body_stream();
            let (first, rest) = self.1.split_at(self.1.len().min(1));
            writer.push(rest.to_vec()).unwrap();
            writer.end();
            Reply::streamed(200, first.to_vec(), stream).with_length(self.0)
        }
    }
    impl Handler for Sized {
        type Job = SizedJob;
        fn handle(&mut self, req: &Request<'_>, _: &mut Response<'_>) -> Handled<SizedJob> {
            let mut parts = req.path.trim_start_matches('/').splitn(2, '/');
            let length = parts.next().unwrap().parse().unwrap();
            Handled::Offload(SizedJob(
                length,
                parts.next().unwrap_or("").as_bytes().to_vec(),
            ))
        }
    }

    /// A declared length is the head's Content-Length (no chunked coding) and the connection
    /// goes on; a HEAD gets the head alone; a body that ends short of it is a violation (the
    /// driver closes the connection) after the head and the bytes sent.
    #[test]
    fn a_streamed_reply_of_a_declared_length() {
        let mut p = Pump::new(Sized, Limits::default(), DATE, false);
        p.feed(b"GET /5/hello HTTP/1.1\r\nHost: x\r\n\r\nHEAD /100/hello HTTP/1.1\r\nHost: x\r\n\r\nGET /2/hi HTTP/1.0\r\n\r\n", &mut NoFiles).unwrap();
        let text = String::from_utf8(p.take_written()).unwrap();
        let answers: Vec<_> = text.split("HTTP/1.1 200 OK\r\n").skip(1).collect();
        assert_eq!(answers.len(), 3, "{text}");
        assert!(answers[0].contains("\r\nContent-Length: 5\r\n"), "{text}");
        assert!(answers[0].ends_with("\r\n\r\nhello"), "{text}");
        assert!(answers[1].contains("\r\nContent-Length: 100\r\n"), "{text}");
        assert!(answers[1].ends_with("\r\n\r\n"), "{text}");
        assert!(answers[2].contains("\r\nContent-Length: 2\r\n"), "{text}");
        assert!(answers[2].ends_with("\r\n\r\nhi"), "{text}");
        assert!(!text.contains("chunked"), "{text}");
        let mut p = Pump::new(Sized, Limits::default(), DATE, false);
        assert!(p
            .feed(b"GET /100/hello HTTP/1.1\r\nHost: x\r\n\r\n", &mut NoFiles)
            .is_err());
        let text = String::from_utf8(p.take_written()).unwrap();
        assert!(text.contains("\r\nContent-Length: 100\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\nhello"), "{text}");
    }
}
