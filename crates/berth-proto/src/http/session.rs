//! The per-connection HTTP/1.1 state machine: bytes in, responses and [`Action`]s out (the
//! one step every codec returns, its stream always 0).

use std::mem::MaybeUninit;
use std::time::Instant;

use super::chunked::{Chunked, Progress};
use super::exchange::{self, Outcome, Rest};
use super::feed::{Feed, Feeding, Passed};
use super::files::{self, FileError, FileMeta, FileRequest};
use super::framing::{framing, reject, BodyKind, Framing, Reject};
use super::handler::{Context, Handler};
use super::head::{
    asks_to_switch, asks_upgrade, find_head_end, normalize_version, parse_head, Scan,
};
use super::request::{Method, Request, Version};
use super::response::{write_switching, Reply, Response, Text};
use super::stream::BodyStream;
use super::Action;
use crate::settings::{Limits, Timeouts};
use crate::upgrade::{Handover, Switch};

/// What a connection is waiting for, as far as the protocol knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Between requests, nothing buffered: the keep-alive idle timeout applies.
    Idle,
    /// Part of a request head has arrived: the header timeout applies.
    Head,
    /// The head is in, the body is arriving: the body timeout applies.
    Body,
    /// A job is running for this connection.
    Waiting,
    /// A final response was written; the connection closes once it is sent.
    Closed,
}

#[derive(Debug, Clone, Copy)]
enum State {
    /// Reading a request head. `scan` is how far the search for its end has got.
    Head { scan: usize },
    /// Head of `head_len` bytes parsed; reading its body.
    Body {
        head_len: usize,
        framing: Framing,
        body: BodyState,
        continue_sent: bool,
    },
    /// A job is running for the last request.
    Waiting {
        keep_alive: bool,
        head_only: bool,
        version: Version,
        /// The request asked to switch protocols (HTTP/1.1, `Connection: upgrade`, an
        /// `Upgrade` field, no body): the job may answer with [`Reply::switch`].
        upgradable: bool,
    },
    /// A response with `Connection: close` was written; nothing more is read.
    Closed,
    /// The connection was handed over to another protocol ([`Action::Switched`]); HTTP is done
    /// with it.
    Upgraded,
}

#[derive(Debug, Clone, Copy)]
enum BodyState {
    Fixed { len: usize },
    Chunked(Chunked),
}

/// A request body being passed on as it arrives.
#[derive(Debug)]
struct Streaming {
    /// What the job has yet to take of it (the channel is the driver's: [`Session::passed`]).
    account: Feed,
    /// What is left of it: `Fixed { len }` counts the bytes still to come; a chunked body's
    /// decoder works from the front of the input, which is cut after each pass.
    body: BodyState,
    /// Body bytes passed on so far (a chunked body's limit).
    total: usize,
    /// The job stopped reading (dropped its stream): the rest is read and dropped, so that
    /// the connection can go on.
    discard: bool,
}

/// What [`Session::feed`] got to.
enum Fed {
    /// Wait for more input, or for the job to take what it was given.
    More,
    /// The body is complete.
    Done,
    /// The body is malformed or too large: answer this (the job's stream is aborted; its
    /// answer, when it comes, finds the connection closed).
    Refused(Reject),
}

/// Headers are parsed into this much stack; [`Limits::max_headers`] picks how much is used.
const HEADERS_CEILING: usize = Limits::HEADERS_CEILING;

const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// One connection's HTTP/1.1 server state. See the [module docs](super) for the call order.
#[derive(Debug)]
pub struct Session {
    state: State,
    /// A request body going to its job as it arrives ([`Handler::STREAMS_BODY`]).
    feed: Option<Box<Streaming>>,
    /// Pieces of the request body for the driver to carry to the job.
    passed: Passed,
    /// The driver asked for the connection to end after the next response.
    wind_down: bool,
    /// When the first byte of the request now being read arrived: the header timeout runs
    /// from here, however slowly the rest trickles in.
    request_since: Option<Instant>,
    /// The client's address, given to each request ([`Request::peer`]).
    peer: Option<std::net::SocketAddr>,
    /// What the connection speaks now that HTTP handed it over ([`Action::Switched`]), until
    /// the protocol switch takes it ([`Session::take_handover`]).
    handover: Option<Handover>,
}

impl Default for Session {
    fn default() -> Self {
        Self::new()
    }
}

impl Session {
    /// A session at the start of a connection.
    pub fn new() -> Self {
        Session {
            state: State::Head { scan: 0 },
            feed: None,
            passed: Passed::default(),
            wind_down: false,
            request_since: None,
            peer: None,
            handover: None,
        }
    }

    /// The protocol the connection was handed to, once [`Action::Switched`] said so.
    pub fn take_handover(&mut self) -> Option<Handover> {
        self.handover.take()
    }

    /// The address of the connection's peer, which every request of it carries
    /// ([`Request::peer`]): the driver says it once, when the connection is accepted.
    pub fn set_peer(&mut self, peer: Option<std::net::SocketAddr>) {
        self.peer = peer;
    }

    /// Makes the next response carry `Connection: close` and end the connection, whatever the
    /// request asked: how a driver winds a keep-alive connection down cleanly (the client is
    /// told, instead of finding the connection gone). Used when draining, and by `single` when
    /// other clients are waiting.
    pub fn close_after_response(&mut self) {
        self.wind_down = true;
    }

    /// True while a job is outstanding.
    pub fn is_waiting(&self) -> bool {
        matches!(self.state, State::Waiting { .. })
    }

    /// True once the connection was handed to another protocol ([`Action::Switched`]).
    pub fn is_upgraded(&self) -> bool {
        matches!(self.state, State::Upgraded)
    }

    /// True if the connection is to be closed: a final response was written.
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// Where the connection stands, for choosing which timeout applies. `input` is the
    /// connection's unprocessed input.
    pub fn phase(&self, input: &[u8]) -> Phase {
        match self.state {
            State::Head { .. } if input.is_empty() => Phase::Idle,
            State::Head { .. } => Phase::Head,
            State::Body { .. } => Phase::Body,
            // A body going to its job as it arrives gets the body timeout, unless it waits for
            // the job to take what it has.
            _ if self
                .feed
                .as_ref()
                .is_some_and(|f| f.discard || !f.account.is_full()) =>
            {
                Phase::Body
            }
            // HTTP times nothing once it has handed the connection over.
            State::Waiting { .. } | State::Upgraded => Phase::Waiting,
            State::Closed => Phase::Closed,
        }
    }

    /// When the driver must next call [`Session::expire`] if nothing happens first, given the
    /// time `now` (quinn-proto's `poll_timeout`): the deadline of what the connection waits
    /// for. `output_pending`: the driver still has response bytes to write, so the write
    /// timeout applies. `None`: nothing is timed (a job is running; jobs are not timed out).
    /// Call it whenever the connection goes back to waiting.
    pub fn poll_timeout(
        &mut self,
        input: &[u8],
        output_pending: bool,
        now: Instant,
        t: &Timeouts,
    ) -> Option<Instant> {
        if output_pending {
            return Some(now + t.write);
        }
        match self.phase(input) {
            Phase::Idle => {
                self.request_since = None;
                Some(now + t.idle)
            }
            Phase::Head => Some(*self.request_since.get_or_insert(now) + t.header),
            Phase::Body => Some(now + t.body),
            Phase::Waiting => None,
            Phase::Closed => Some(now + t.write),
        }
    }

    /// The driver's timer for the current [`Phase`] ran out (the deadline
    /// [`Session::poll_timeout`] gave passed). A request in progress is answered
    /// 408 (RFC 9110 §15.5.9) and the connection closed; an idle connection is closed without a
    /// word; a connection waiting for its job is left alone (jobs are not timed out here).
    pub fn expire<H: Handler>(
        &mut self,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        if let Some(feed) = self.feed.take() {
            // A streamed body that stopped arriving: the client is answered 408 now, the job
            // is told (its stream is aborted), and its answer, when it comes, finds the
            // connection closed.
            feed.account.abort(&mut self.passed);
            input.clear();
            return self.refuse(
                reject(408, "request body not received in time"),
                false,
                output,
                cx,
                handler,
            );
        }
        match self.phase(input) {
            Phase::Head | Phase::Body => {
                let head_only = input.starts_with(b"HEAD ");
                input.clear();
                self.refuse(
                    reject(408, "request not received in time"),
                    head_only,
                    output,
                    cx,
                    handler,
                )
            }
            Phase::Idle | Phase::Closed => {
                self.state = State::Closed;
                Action::Close
            }
            Phase::Waiting => Action::Read,
        }
    }

    /// Parses and answers the complete requests at the front of `input`, appending responses to
    /// `output`. Bytes of answered requests are removed from `input`; a partial request stays.
    pub fn process<H: Handler>(
        &mut self,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        let mut consumed = 0;
        let step = loop {
            if self.feed.is_some() {
                match self.feed(input, &mut consumed, cx) {
                    Fed::More => break Action::Read,
                    Fed::Done => {}
                    Fed::Refused(r) => {
                        consumed = input.len();
                        break self.refuse(r, false, output, cx, handler);
                    }
                }
            }
            match self.state {
                State::Closed => {
                    consumed = input.len();
                    break Action::Close;
                }
                State::Waiting { .. } => break Action::Read,
                // The input belongs to the protocol the connection was handed to.
                State::Upgraded => break Action::Read,
                // A non-empty check too, so a high-water mark of 0 cannot ask for endless flushes.
                State::Head { .. }
                    if !output.is_empty() && output.len() >= cx.limits.output_high_water =>
                {
                    break Action::Flush
                }
                State::Head { scan } => {
                    // RFC 9112 §2.2: ignore empty lines before a request-line, including one
                    // whose CR and LF arrived in different reads.
                    let mut scan = scan;
                    while input[consumed..].starts_with(b"\r\n") {
                        consumed += 2;
                        scan = 0;
                    }
                    match self.read_head(&mut input[consumed..], scan, output, cx, handler) {
                        Ok(HeadOutcome::Partial { scan }) => {
                            self.state = State::Head { scan };
                            break Action::Read;
                        }
                        Ok(HeadOutcome::Answered { len, step }) => {
                            consumed += len;
                            if let Some(step) = step {
                                break step;
                            }
                        }
                        // A body already all in (the everyday small POST) is handed over
                        // whole, as it would be without streaming: one message, no stream.
                        Ok(HeadOutcome::Body { head_len, framing })
                            if H::STREAMS_BODY
                                && cx.stream_bodies
                                && !matches!(framing.body, BodyKind::Fixed(n)
                                    if input.len() - consumed >= head_len + n as usize) =>
                        {
                            let step = self.start_feed(
                                &input[consumed..consumed + head_len],
                                framing,
                                output,
                                cx,
                                handler,
                            );
                            consumed += head_len;
                            if let Some(step) = step {
                                break step;
                            }
                        }
                        Ok(HeadOutcome::Body { head_len, framing }) => {
                            let body = match framing.body {
                                // Fixed lengths were checked against max_body, so they fit.
                                BodyKind::Fixed(n) => BodyState::Fixed { len: n as usize },
                                _ => BodyState::Chunked(Chunked::new(head_len)),
                            };
                            self.state = State::Body {
                                head_len,
                                framing,
                                body,
                                continue_sent: false,
                            };
                        }
                        Err(r) => {
                            let head_only = input[consumed..].starts_with(b"HEAD ");
                            break self.refuse(r, head_only, output, cx, handler);
                        }
                    }
                }
                State::Body {
                    head_len,
                    framing,
                    mut body,
                    continue_sent,
                } => {
                    let buf = &mut input[consumed..];
                    let done = match &mut body {
                        BodyState::Fixed { len } => {
                            let end = head_len + *len;
                            (buf.len() >= end).then_some((end, end))
                        }
                        BodyState::Chunked(c) => {
                            match c.advance(
                                buf,
                                head_len,
                                cx.limits.max_body_bytes,
                                cx.limits.max_header_bytes,
                            ) {
                                Ok(Progress::Done { body_end, consumed }) => {
                                    Some((body_end, consumed))
                                }
                                Ok(Progress::Partial) => None,
                                Err(r) => {
                                    let head_only = input[consumed..].starts_with(b"HEAD ");
                                    break self.refuse(r, head_only, output, cx, handler);
                                }
                            }
                        }
                    };
                    let Some((body_end, len)) = done else {
                        if let BodyState::Chunked(c) = &mut body {
                            let gap = c.gap();
                            if !gap.is_empty() {
                                input.drain(consumed + gap.start..consumed + gap.end);
                                c.gap_closed();
                            }
                        }
                        let mut continue_sent = continue_sent;
                        if framing.expect_continue && !continue_sent {
                            output.extend_from_slice(CONTINUE);
                            continue_sent = true;
                        }
                        self.state = State::Body {
                            head_len,
                            framing,
                            body,
                            continue_sent,
                        };
                        break Action::Read;
                    };
                    let req_bytes = &input[consumed..consumed + len];
                    let step =
                        self.dispatch(req_bytes, head_len, body_end, framing, output, cx, handler);
                    consumed += len;
                    if let Some(step) = step {
                        break step;
                    }
                }
            }
        };
        if consumed == input.len() {
            input.clear();
        } else {
            input.drain(..consumed);
        }
        step
    }

    /// Answers the request whose job has finished (through the exchange's one reply path),
    /// then goes on with any pipelined input; or, where the body follows from a file or a
    /// producer, says so ([`Action::Body`], [`Action::Stream`]) and goes on once it is sent.
    pub fn complete<H: Handler>(
        &mut self,
        mut reply: Reply,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        let Some((keep_alive, head_only, version)) = self.outstanding() else {
            debug_assert!(false, "complete() without an outstanding job");
            return Action::Close;
        };
        let upgradable = matches!(
            self.state,
            State::Waiting {
                upgradable: true,
                ..
            }
        );
        if let Some(switch) = reply.switch.take_if(|_| upgradable && !head_only) {
            return self.switched(version, *switch, output, cx, handler);
        }
        // Answered before its streamed body was all in: the rest of the body is not read (the
        // job's stream is aborted), so the connection cannot go on.
        let cut = self.feed.take().map(|f| f.account.abort(&mut self.passed));
        let keep_alive = keep_alive && cut.is_none();
        let replied = exchange::reply(
            output,
            &mut Text(version),
            reply,
            keep_alive,
            head_only,
            cx.stamp(),
        );
        handler.on_response(replied.status);
        self.then(replied.keep_alive, replied.rest, input, output, cx, handler)
    }

    /// Answers the request whose file the driver looked for ([`Action::Open`]): `found` is the
    /// file's metadata or why it could not be opened. Writes the whole head (and the short body
    /// of an error); if file bytes must follow, returns [`Action::Body`], else goes on with
    /// any pipelined input like [`Session::complete`].
    pub fn file<H: Handler>(
        &mut self,
        request: &FileRequest,
        found: Result<&FileMeta, FileError>,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        let Some((keep_alive, _, version)) = self.outstanding() else {
            debug_assert!(false, "file() without an outstanding file request");
            return Action::Close;
        };
        let (status, send, _) = files::write_answer(
            output,
            &mut Text(version),
            request,
            found,
            keep_alive,
            cx.stamp(),
        );
        handler.on_response(status);
        self.then(keep_alive, send.map(Rest::File), input, output, cx, handler)
    }

    /// After a delayed answer: the rest of its body goes out before anything else is read;
    /// then, on a kept connection, the pipelined input; else the close.
    fn then<H: Handler>(
        &mut self,
        keep_alive: bool,
        rest: Option<Rest>,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        match rest {
            Some(rest) => {
                self.state = if keep_alive {
                    State::Head { scan: 0 }
                } else {
                    State::Closed
                };
                rest.action(0)
            }
            None => self.next_request(keep_alive, input, output, cx, handler),
        }
    }

    /// The outstanding request's keep-alive (already denied while winding down), HEAD-ness
    /// and version; `None` if no request is outstanding.
    fn outstanding(&self) -> Option<(bool, bool, Version)> {
        let State::Waiting {
            keep_alive,
            head_only,
            version,
            ..
        } = self.state
        else {
            return None;
        };
        Some((keep_alive && !self.wind_down, head_only, version))
    }

    /// After a delayed answer: on a kept connection, go on with pipelined input; else close.
    fn next_request<H: Handler>(
        &mut self,
        keep_alive: bool,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        if keep_alive {
            self.state = State::Head { scan: 0 };
            self.process(input, output, cx, handler)
        } else {
            self.state = State::Closed;
            input.clear();
            Action::Close
        }
    }

    /// Looks for a complete head at the front of `buf`; answers it at once when it has no body.
    fn read_head<H: Handler>(
        &mut self,
        buf: &mut [u8],
        scan: usize,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Result<HeadOutcome<H::Job>, Reject> {
        if buf.is_empty() {
            return Ok(HeadOutcome::Partial { scan: 0 });
        }
        let limits = cx.limits;
        let window_len = buf.len().min(limits.max_header_bytes);
        let window = &buf[..window_len];
        // Only hand the head to the parser once its end is in sight: re-parsing a head that
        // arrives a byte at a time would cost quadratic time.
        let head_len = match find_head_end(window, scan, limits)? {
            Scan::Complete(n) => n,
            Scan::Partial(_) if window_len == limits.max_header_bytes => {
                return Err(reject(431, "request header section too large"));
            }
            Scan::Partial(scan) => return Ok(HeadOutcome::Partial { scan }),
        };
        normalize_version(&mut buf[..head_len])?;
        let buf = &buf[..];
        let mut storage = [const { MaybeUninit::uninit() }; HEADERS_CEILING];
        let headers = &mut storage[..limits.max_headers.min(HEADERS_CEILING)];
        let head = parse_head(&buf[..head_len], headers, limits)?;
        let framing = framing(head.version, head.headers)?;
        match framing.body {
            BodyKind::Empty => {}
            BodyKind::Fixed(n) if n > limits.max_body_bytes as u64 => {
                return Err(reject(
                    413,
                    "request body too large (over the server's --max-body)",
                ));
            }
            _ => return Ok(HeadOutcome::Body { head_len, framing }),
        }
        let request = head.into_request(&[], self.peer);
        let step = self.answer(&request, framing.keep_alive, output, cx, handler);
        Ok(HeadOutcome::Answered {
            len: head_len,
            step,
        })
    }

    /// Answers a request whose body is complete: `bytes` holds the head and, from `head_len` to
    /// `body_end`, the decoded body.
    #[allow(clippy::too_many_arguments)]
    fn dispatch<H: Handler>(
        &mut self,
        bytes: &[u8],
        head_len: usize,
        body_end: usize,
        framing: Framing,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Option<Action<H::Job>> {
        let mut storage = [const { MaybeUninit::uninit() }; HEADERS_CEILING];
        let headers = &mut storage[..cx.limits.max_headers.min(HEADERS_CEILING)];
        // The head parsed before; parsing it again is cheaper than keeping its offsets around.
        let head = match parse_head(&bytes[..head_len], headers, cx.limits) {
            Ok(head) => head,
            Err(r) => {
                let head_only = bytes.starts_with(b"HEAD ");
                return Some(self.refuse(r, head_only, output, cx, handler));
            }
        };
        let request = head.into_request(&bytes[head_len..body_end], self.peer);
        self.answer(&request, framing.keep_alive, output, cx, handler)
    }

    /// Answers a request whose body will stream ([`Handler::handle_streamed`]): `head` is its
    /// head; the body that follows in the input goes to the job from the next call on.
    fn start_feed<H: Handler>(
        &mut self,
        head: &[u8],
        framing: Framing,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Option<Action<H::Job>> {
        let mut storage = [const { MaybeUninit::uninit() }; HEADERS_CEILING];
        let headers = &mut storage[..cx.limits.max_headers.min(HEADERS_CEILING)];
        let parsed = match parse_head(head, headers, cx.limits) {
            Ok(parsed) => parsed,
            Err(r) => {
                let head_only = head.starts_with(b"HEAD ");
                return Some(self.refuse(r, head_only, output, cx, handler));
            }
        };
        let request = parsed.into_request(&[], self.peer);
        let (account, stream) = Feed::open(&mut self.passed, 0, None);
        let body = match framing.body {
            // Fixed lengths were checked against max_body, so they fit.
            BodyKind::Fixed(n) => BodyState::Fixed { len: n as usize },
            _ => BodyState::Chunked(Chunked::new(0)),
        };
        // Even an answer given at once must not leave the body to be read as requests.
        // Boxed: only a request whose body a job streams has one, and inline it would make
        // every idle connection that much bigger.
        self.feed = Some(Box::new(Streaming {
            account,
            body,
            total: 0,
            discard: false,
        }));
        if framing.expect_continue {
            output.extend_from_slice(CONTINUE);
        }
        let step = self.answer_with(
            &request,
            Some(stream),
            framing.keep_alive,
            output,
            cx,
            handler,
        );
        if !self.is_waiting() {
            // Answered on the spot: the body is read and dropped.
            if let Some(feed) = &mut self.feed {
                feed.discard = true;
            }
        }
        step
    }

    /// Passes what the input holds of a streamed body to its job, from `consumed` on, as far
    /// as the job's window allows. A malformed or oversized body aborts the job's stream and is
    /// answered at once ([`Fed::Refused`]).
    fn feed(&mut self, input: &mut [u8], consumed: &mut usize, cx: &Context<'_>) -> Fed {
        let Some(feed) = &mut self.feed else {
            return Fed::Done;
        };
        if !feed.discard && feed.account.is_full() {
            return Fed::More;
        }
        let buf = &mut input[*consumed..];
        let (data, used, done) = match &mut feed.body {
            BodyState::Fixed { len } => {
                let n = buf.len().min(*len);
                *len -= n;
                (0..n, n, *len == 0)
            }
            BodyState::Chunked(c) => {
                let budget = cx.limits.max_body_bytes.saturating_sub(feed.total);
                match c.advance(buf, 0, budget, cx.limits.max_header_bytes) {
                    Ok(Progress::Done { body_end, consumed }) => (0..body_end, consumed, true),
                    Ok(Progress::Partial) => {
                        let out = (0..c.gap().start, c.spent(), false);
                        c.spent_dropped();
                        out
                    }
                    Err(r) => {
                        // Nothing more can be read as HTTP on this connection: the client is
                        // told why (400, 413), the job that reads the body that it was cut.
                        if let Some(feed) = self.feed.take() {
                            feed.account.abort(&mut self.passed);
                        }
                        return Fed::Refused(r);
                    }
                }
            }
        };
        if !data.is_empty() {
            feed.total += data.len();
            if !feed.discard && !feed.account.push(&mut self.passed, buf[data].to_vec()) {
                // The job stopped reading: the rest goes nowhere.
                feed.discard = true;
            }
        }
        *consumed += used;
        if done {
            if let Some(feed) = self.feed.take() {
                feed.account.end(&mut self.passed);
            }
            return Fed::Done;
        }
        Fed::More
    }

    /// The peer closed its side while a request body was still arriving: the body can never
    /// be whole. Its job sees it cut short now, not at the body timeout, and the connection
    /// ends after the job's answer. False (nothing done) with no such body, or while its job
    /// has yet to take what arrived: input the session holds back is still the body's.
    pub fn peer_closed(&mut self) -> bool {
        if !self
            .feed
            .as_ref()
            .is_some_and(|f| f.discard || !f.account.is_full())
        {
            return false;
        }
        if let Some(feed) = self.feed.take() {
            feed.account.abort(&mut self.passed);
        }
        self.wind_down = true;
        true
    }

    /// Whether a request body is being passed to its job as it arrives: the driver should go
    /// on giving the session input while the job runs.
    pub fn feeding(&self) -> bool {
        self.feed.is_some()
    }

    /// Runs the handler. `None` means: go on with the next request.
    fn answer<H: Handler>(
        &mut self,
        request: &Request<'_>,
        keep_alive: bool,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Option<Action<H::Job>> {
        self.answer_with(request, None, keep_alive, output, cx, handler)
    }

    /// [`Session::answer`], with the body streamed to the handler if `body` is given; what it
    /// makes of the request is the exchange's ([`exchange::ask`]).
    #[allow(clippy::too_many_arguments)]
    fn answer_with<H: Handler>(
        &mut self,
        request: &Request<'_>,
        body: Option<BodyStream>,
        keep_alive: bool,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Option<Action<H::Job>> {
        let head_only = request.method == Method::Head;
        let mut sink = Text(request.version);
        let mut res = Response {
            out: output,
            sink: &mut sink,
            stamp: cx.stamp(),
            keep_alive: keep_alive && !self.wind_down,
            head_only,
            sent: None,
        };
        let outcome = exchange::ask(handler, request, body, &mut res);
        let keep_alive = res.keep_alive;
        match outcome {
            Outcome::Job(job) => {
                self.state = State::Waiting {
                    keep_alive,
                    head_only,
                    version: request.version,
                    upgradable: asks_upgrade(request) && self.feed.is_none(),
                };
                return Some(Action::Offload { stream: 0, job });
            }
            Outcome::File(file) => {
                self.state = State::Waiting {
                    keep_alive,
                    head_only,
                    version: request.version,
                    upgradable: false,
                };
                return Some(Action::Open {
                    stream: 0,
                    request: file,
                });
            }
            Outcome::Upgrade(switch) => {
                return Some(self.switch(request, switch, output, cx, handler));
            }
            Outcome::Answered(status) => handler.on_response(status),
            Outcome::Unanswered => {
                let (status, why) = Outcome::<H::Job>::UNANSWERED;
                let mut sink = Text(request.version);
                exchange::refuse(
                    output,
                    &mut sink,
                    status,
                    why,
                    keep_alive,
                    head_only,
                    cx.stamp(),
                );
                handler.on_response(status);
            }
        }
        if keep_alive {
            self.state = State::Head { scan: 0 };
            None
        } else {
            self.state = State::Closed;
            Some(Action::Close)
        }
    }

    /// Answers a handler's [`Switch`]: 101 and the handover if the request asked for the
    /// protocol (HTTP/1.1, `Connection: upgrade`, the token in `Upgrade`, no body), else 400.
    fn switch<H: Handler>(
        &mut self,
        request: &Request<'_>,
        switch: Switch,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        if !asks_to_switch(request, switch.protocol) {
            let head_only = request.method == Method::Head;
            let why = reject(400, "this resource must be asked for with an Upgrade");
            return self.refuse(why, head_only, output, cx, handler);
        }
        self.switched(request.version, switch, output, cx, handler)
    }

    /// Writes the 101 for `switch` and hands its session over.
    fn switched<H: Handler>(
        &mut self,
        version: Version,
        switch: Switch,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        write_switching(
            output,
            switch.protocol,
            &switch.headers,
            version,
            cx.stamp(),
        );
        handler.on_response(101);
        self.state = State::Upgraded;
        self.handover = Some(Handover(switch.session));
        Action::Switched
    }

    /// Writes the error response for `r` and marks the connection for closing.
    fn refuse<H: Handler>(
        &mut self,
        r: Reject,
        head_only: bool,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        let mut sink = Text(Version::Http11);
        exchange::refuse(
            output,
            &mut sink,
            r.status,
            r.reason,
            false,
            head_only,
            cx.stamp(),
        );
        handler.on_response(r.status);
        self.state = State::Closed;
        Action::Close
    }
}

impl Feeding for Session {
    /// The pieces of the request body for the driver to carry ([`Taps::exchange`](super::Taps::exchange)).
    fn passed(&mut self) -> &mut Passed {
        &mut self.passed
    }

    /// The driver's word on the body it carries to the job ([`Taps::exchange`](super::Taps::exchange)):
    /// false once the session keeps no account of it.
    fn feed_level(&mut self, stream: u64, queued: usize, gone: bool) -> bool {
        match &mut self.feed {
            Some(feed) if stream == 0 => {
                feed.account.level(queued, gone);
                if gone {
                    // The job stopped reading: the rest goes nowhere.
                    feed.discard = true;
                }
                true
            }
            _ => false,
        }
    }
}

enum HeadOutcome<J> {
    Partial { scan: usize },
    Answered { len: usize, step: Option<Action<J>> },
    Body { head_len: usize, framing: Framing },
}

#[cfg(test)]
mod timeout_tests {
    use super::*;
    use std::time::Duration;

    /// The timeout rules every driver now takes from the session: the header deadline runs
    /// from a request's first byte and is not pushed back by later bytes (slowloris); an idle
    /// connection gets the idle timeout and forgets the request's start; output still to
    /// write gets the write timeout.
    #[test]
    fn poll_timeout_applies_each_phase_rule() {
        let t = Timeouts {
            header: Duration::from_secs(10),
            body: Duration::from_secs(30),
            idle: Duration::from_secs(60),
            write: Duration::from_secs(5),
        };
        let start = Instant::now();
        let mut s = Session::new();
        assert_eq!(s.poll_timeout(b"", false, start, &t), Some(start + t.idle));
        let later = start + Duration::from_secs(3);
        assert_eq!(
            s.poll_timeout(b"GE", false, start, &t),
            Some(start + t.header)
        );
        // A byte later, the deadline has not moved.
        assert_eq!(
            s.poll_timeout(b"GET", false, later, &t),
            Some(start + t.header)
        );
        assert_eq!(
            s.poll_timeout(b"GET", true, later, &t),
            Some(later + t.write)
        );
        // Idle again: the next request's header deadline starts from its own first byte.
        assert_eq!(s.poll_timeout(b"", false, later, &t), Some(later + t.idle));
        assert_eq!(
            s.poll_timeout(b"G", false, later, &t),
            Some(later + t.header)
        );
    }
}
