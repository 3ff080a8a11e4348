//! One load thread: its share of the connections, driven by one mio `Poll`.
//!
//! Each connection writes a batch of requests (one, or `pipeline` of them), reads until every
//! response in the batch is complete, records each one's latency, and starts the next batch:
//! on the same connection in keep-alive mode, on a new one otherwise. That is the closed loop
//! wrk and ab both run, so requests/s from this tool and from theirs mean the same thing.
//!
//! The loop makes one `write` and, for a small response, one `read` per request: a read that
//! returns less than the room it was given has emptied the socket, so it is not followed by a
//! second read that would only say "would block". That is safe with mio's edge-triggered
//! readiness because any byte arriving after that read raises a fresh event.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use berth_proto::http::client::{ReadStatus, ResponseReader, MAX_RESPONSE_HEAD};
use mio::event::Event;
use mio::{Poll, Token};

use super::report::{Failure, Tally};
use crate::load_threads::Budget;
use crate::poll_loop::{self, EventLoop, LoadStream, ReadSide, Stream};
use berth::net::Transport;

/// Read buffer per connection to begin with; grows only while a response head is larger.
const INITIAL_BUFFER: usize = 16 * 1024;

/// What every connection of a run sends, and how.
#[derive(Debug)]
pub(crate) struct Plan {
    /// Where to connect.
    pub addr: std::net::SocketAddr,
    /// One request's bytes.
    pub request: Vec<u8>,
    /// Requests per batch.
    pub pipeline: usize,
    /// Keep connections across batches.
    pub keep_alive: bool,
    /// The method is HEAD (responses carry no body).
    pub head: bool,
    /// Longest wait for a batch's responses.
    pub timeout: Duration,
    /// `https://`: TLS over every connection (a full handshake per connection without
    /// keep-alive, resumed when the server allows it).
    pub tls: Option<TlsTarget>,
}

/// The TLS side of a plan: the client configuration and the name to check.
#[derive(Clone)]
pub(crate) struct TlsTarget {
    pub connector: berth::net::tls::TlsConnector,
    pub host: String,
}

impl std::fmt::Debug for TlsTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TlsTarget({})", self.host)
    }
}

/// State all load threads share with the thread that runs them.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// Set when the run's time is up.
    pub stop: AtomicBool,
    /// Requests still to start, when the run is bounded by count.
    pub budget: Budget,
    /// Responses so far, published every tick for the progress line.
    pub responses: AtomicU64,
    /// Errors so far, likewise.
    pub errors: AtomicU64,
}

impl Shared {
    /// Adds what `tally` counted since `published` to the progress counters (and moves
    /// `published` on): each load loop's part of the line, HTTP/1.1's and HTTP/2's alike.
    pub(crate) fn publish(&self, tally: &Tally, published: &mut (u64, u64)) {
        let counts = (tally.responses, tally.errors.total());
        let before = std::mem::replace(published, counts);
        self.responses.fetch_add(counts.0 - before.0, Relaxed);
        self.errors.fetch_add(counts.1 - before.1, Relaxed);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No socket: waiting for `retry_at`, or for nothing when the budget is spent.
    Idle,
    Connecting,
    Sending,
    Receiving,
}

struct Conn {
    stream: Option<Stream>,
    state: State,
    reader: ResponseReader,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes of the current batch written so far, and the batch's length.
    written: usize,
    batch: usize,
    /// Responses of the current batch still to come.
    inflight: usize,
    /// When the current batch (or, without keep-alive, the connect) began.
    began: Instant,
    /// What events have said about the socket's read side.
    read: ReadSide,
    /// Requests taken from the budget for the batch this connection will send once connected.
    reserved: usize,
    retry_at: Option<Instant>,
}

struct Loop<'a> {
    plan: &'a Plan,
    shared: &'a Shared,
    poll: Poll,
    conns: Vec<Conn>,
    /// `pipeline` copies of the request, so a batch is one write.
    batch: Vec<u8>,
    tally: Tally,
    /// The (responses, errors) counts last added to `shared`.
    published: (u64, u64),
}

/// Runs `connections` connections until `shared.stop` is set or the budget is spent.
pub(crate) fn run(plan: &Plan, shared: &Shared, connections: usize) -> io::Result<Tally> {
    let mut lp = Loop {
        plan,
        shared,
        poll: Poll::new()?,
        conns: Vec::with_capacity(connections),
        batch: plan.request.repeat(plan.pipeline),
        tally: Tally::default(),
        published: (0, 0),
    };
    let now = Instant::now();
    for _ in 0..connections {
        lp.conns.push(Conn {
            stream: None,
            state: State::Idle,
            reader: ResponseReader::new(plan.head),
            buf: vec![0; INITIAL_BUFFER],
            start: 0,
            end: 0,
            written: 0,
            batch: 0,
            inflight: 0,
            began: now,
            read: ReadSide::default(),
            reserved: 0,
            retry_at: Some(now),
        });
    }
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
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            match c.state {
                State::Idle if c.retry_at.is_some_and(|t| t <= now) => self.open(i, now),
                State::Connecting | State::Sending | State::Receiving
                    if now.duration_since(c.began) >= self.plan.timeout =>
                {
                    self.fail(i, Failure::Timeout, now);
                }
                _ => {}
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
        let c = &self.conns[i];
        if c.state == State::Connecting && (ev.is_writable() || ev.is_error()) {
            if !self.connected(i, now) {
                return;
            }
        } else if self.conns[i].state == State::Sending && ev.is_writable() {
            self.send(i, now);
        } else if self.conns[i].state == State::Receiving && ev.is_writable() {
            self.push_records(i, now);
        }
        let c = &self.conns[i];
        if c.state == State::Receiving && c.read.readable {
            self.receive(i);
        }
    }
}

impl Loop<'_> {
    /// Starts a connection, if the budget has a request for it.
    fn open(&mut self, i: usize, now: Instant) {
        let c = &mut self.conns[i];
        c.retry_at = None;
        // Requests are taken from the budget before connecting, so a count-bounded run opens
        // no connection it has nothing to send on. A failure spends them.
        let reserved = self.shared.budget.take(self.plan.pipeline as u64) as usize;
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
            Err(_) => return self.fail(i, Failure::Connect, now),
        };
        let c = &mut self.conns[i];
        c.stream = Some(stream);
        c.reserved = reserved;
        c.state = State::Connecting;
        c.began = now;
        c.read = ReadSide::default();
        c.start = 0;
        c.end = 0;
        c.reader = ResponseReader::new(self.plan.head);
    }

    /// Completes a non-blocking connect; false if it failed or is not done yet.
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
        self.start_batch(i, now);
        true
    }

    /// Takes requests from the budget and writes them, or leaves the connection idle.
    fn start_batch(&mut self, i: usize, now: Instant) {
        let n = match std::mem::take(&mut self.conns[i].reserved) {
            0 => self.shared.budget.take(self.plan.pipeline as u64) as usize,
            n => n,
        };
        if n == 0 || self.shared.stop.load(Relaxed) {
            self.close(i);
            return;
        }
        let c = &mut self.conns[i];
        c.inflight = n;
        c.batch = n * self.plan.request.len();
        c.written = 0;
        c.state = State::Sending;
        // Without keep-alive the clock started at the connect, as ab's does.
        if self.plan.keep_alive {
            c.began = now;
        }
        self.send(i, now);
    }

    fn send(&mut self, i: usize, now: Instant) {
        let c = &mut self.conns[i];
        let Some(stream) = c.stream.as_mut() else {
            return;
        };
        while c.written < c.batch {
            match stream.write_some(&self.batch[c.written..c.batch]) {
                Ok(Some(n)) => c.written += n,
                Ok(None) => return,
                Err(_) => return self.fail(i, Failure::Write, now),
            }
        }
        c.state = State::Receiving;
        self.push_records(i, now);
    }

    /// Writes what a TLS stream still holds (its socket was full); the rest goes on the next
    /// writable event.
    fn push_records(&mut self, i: usize, now: Instant) {
        let Some(stream) = self.conns[i].stream.as_mut() else {
            return;
        };
        if stream.has_pending() {
            match std::io::Write::flush(stream) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => self.fail(i, Failure::Write, now),
            }
        }
    }

    fn receive(&mut self, i: usize) {
        loop {
            let c = &mut self.conns[i];
            let Some(stream) = c.stream.as_mut() else {
                return;
            };
            if c.end == c.buf.len() {
                if c.start > 0 {
                    c.buf.copy_within(c.start..c.end, 0);
                    c.end -= c.start;
                    c.start = 0;
                } else {
                    // Only an unfinished head can fill the buffer; the reader caps its size.
                    let grown = (c.buf.len() * 2).min(MAX_RESPONSE_HEAD + INITIAL_BUFFER);
                    c.buf.resize(grown, 0);
                }
            }
            let room = c.buf.len() - c.end;
            let n = match stream.read_some(&mut c.buf[c.end..]) {
                Ok(Some(n)) => n,
                Ok(None) => {
                    c.read.readable = false;
                    return;
                }
                Err(_) => return self.fail(i, Failure::Read, Instant::now()),
            };
            let now = Instant::now();
            if n == 0 {
                return self.end_of_stream(i, now);
            }
            self.tally.bytes += n as u64;
            c.end += n;
            if !self.parse(i, now) {
                return;
            }
            let drains = self.conns[i]
                .stream
                .as_ref()
                .is_some_and(|s| s.short_read_drains());
            if drains && self.conns[i].read.emptied_by(n, room) {
                return;
            }
        }
    }

    /// Reads every complete response in the buffer. Returns false when the connection was
    /// closed or moved on to a new batch, so the caller must not read on for this one.
    fn parse(&mut self, i: usize, now: Instant) -> bool {
        loop {
            let c = &mut self.conns[i];
            let (used, status) = match c.reader.advance(&mut c.buf[c.start..c.end]) {
                Ok(x) => x,
                Err(_) => {
                    self.fail(i, Failure::Protocol, now);
                    return false;
                }
            };
            c.start += used;
            if c.start == c.end {
                c.start = 0;
                c.end = 0;
            }
            let info = match status {
                ReadStatus::Partial => return true,
                ReadStatus::Done(info) => info,
            };
            self.tally
                .response(info.status, now.duration_since(c.began));
            c.inflight -= 1;
            if !info.keep_alive || !self.plan.keep_alive {
                // Requests pipelined behind a `Connection: close` were refused politely, not
                // lost: the next batch on the next connection sends them again.
                self.shared.budget.give_back(c.inflight as u64);
                self.reopen(i, now);
                return false;
            }
            if c.inflight == 0 {
                self.start_batch(i, now);
                return false;
            }
        }
    }

    fn end_of_stream(&mut self, i: usize, now: Instant) {
        let c = &mut self.conns[i];
        match c.reader.finish(&c.buf[c.start..c.end]) {
            Ok(Some(info)) => {
                let (began, behind) = (c.began, c.inflight.saturating_sub(1));
                self.shared.budget.give_back(behind as u64);
                self.tally.response(info.status, now.duration_since(began));
                self.reopen(i, now);
            }
            Ok(None) => self.fail(i, Failure::Read, now),
            Err(_) => self.fail(i, Failure::Read, now),
        }
    }

    fn close(&mut self, i: usize) {
        let c = &mut self.conns[i];
        poll_loop::close(self.poll.registry(), &mut c.stream);
        c.state = State::Idle;
        c.inflight = 0;
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
        let c = &self.conns[i];
        self.tally
            .failed(why, c.inflight.max(c.reserved), &self.shared.budget);
        self.close(i);
        self.conns[i].retry_at = Some(why.retry_at(now));
        if why != Failure::Connect && !self.shared.stop.load(Relaxed) {
            self.open(i, now);
        }
    }
}
