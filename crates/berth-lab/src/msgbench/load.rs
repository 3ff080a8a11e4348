//! One load thread: its share of the connections, driven by one mio `Poll`.
//!
//! A connection's life: connect, write its hello (keyword, or ZMTP greeting and READY), wait
//! for the server's answer, then keep up to `window` messages in flight. Writing and reading
//! are independent: a message is written while earlier echoes (or the start of its own) are
//! read, so a 64 MiB message never deadlocks against a server that echoes as it reads.
//!
//! Output goes through a small per-connection buffer, which batches headers and small
//! messages into one write; the bulk of a big message is written straight from the shared
//! [`Pattern`]. Input lands in one buffer per thread, which [`wire::Reader`] consumes
//! completely on every read (it keeps partial headers itself), and each echo chunk is compared
//! in place against the pattern. So nothing here grows with the message size.
//!
//! Readiness is edge-triggered: each side reads or writes until the socket says "would
//! block", except that a read shorter than the buffer is taken to have emptied the socket (a
//! byte arriving after it raises a fresh event), which saves a syscall per small echo.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use mio::event::Event;
use mio::{Poll, Token};

use super::pattern::{Pattern, CHUNK};
use super::report::{Failure, MsgTally};
use super::wire::{self, In, WireError};
use berth::net::Addr;

use super::{Endpoint, Protocol};
use crate::load_threads::Budget;
use crate::poll_loop::{self, EventLoop, LoadStream, ReadSide, Stream};

/// Pause before a connection tries again after its connect failed or its handshake was
/// refused, so a server that is down or turning us away is not hammered in a tight loop.
const RETRY_BACKOFF: Duration = Duration::from_millis(10);

/// The thread's read buffer.
const READ_BUFFER: usize = 256 * 1024;

/// Output is batched up to about this many bytes per write.
const OUT_TARGET: usize = 16 * 1024;

/// Payload left to write at or above which it is written straight from the pattern instead of
/// being copied into the output buffer first.
const DIRECT_MIN: u64 = 4 * 1024;

/// What every connection of a run does.
#[derive(Debug)]
pub(crate) struct Plan {
    /// Where to connect.
    pub endpoint: Endpoint,
    /// What to speak.
    pub protocol: Protocol,
    /// Payload bytes per message.
    pub size: u64,
    /// Messages in flight per connection.
    pub window: usize,
    /// Longest time without progress while something is outstanding.
    pub timeout: Duration,
    /// What messages carry.
    pub pattern: Pattern,
    /// Relay mode: connections `2k` and `2k + 1` send to each other by name (see `Spec`), odd
    /// ones through `peer_endpoint`; nobody sends before all `connections` are in and
    /// `settle` has passed (so that every name is known, on every node of a cluster).
    pub relay: bool,
    /// Where odd connections connect in relay mode (the other node; else `endpoint`).
    pub peer_endpoint: Endpoint,
    /// Connections of the whole run (relay mode's barrier).
    pub connections: usize,
    /// The pause after every connection is in (relay mode).
    pub settle: Duration,
}

/// One connection's part in a run.
pub(crate) struct Spec {
    /// Its keyword.
    pub name: String,
    /// Relay mode: `@PARTNER ` at the front of every message it sends, and of every message it
    /// gets (its partner's, whose prefix the server rewrote to the partner's name); so a relayed
    /// message is checked like an echo. Empty otherwise.
    pub prefix: Vec<u8>,
    /// Relay mode: it connects to the peer endpoint.
    pub peer: bool,
}

/// State all load threads share with the thread that runs them.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// Set when the run's time is up.
    pub stop: AtomicBool,
    /// Messages still to send, when the run is bounded by count.
    pub budget: Budget,
    /// Echoed messages so far, published every tick for the progress line.
    pub messages: AtomicU64,
    /// Verified payload bytes so far, likewise.
    pub payload_bytes: AtomicU64,
    /// Errors so far, likewise.
    pub errors: AtomicU64,
    /// Connections past their handshake (relay mode's barrier).
    pub ready: AtomicU64,
}

/// Starts a non-blocking connect to `endpoint`.
fn connect(endpoint: &Endpoint) -> io::Result<Stream> {
    match &endpoint.address {
        // `ws://` is TCP too.
        Addr::Tcp(addr) => poll_loop::tcp(*addr),
        Addr::Unix(path) => poll_loop::unix(path),
        // Refused by `MsgBenchConfig::check`.
        Addr::Udp(_) => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("{endpoint}: the bench connects to stream servers only"),
        )),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No socket: waiting for `retry_at`, or for nothing when the budget is spent.
    Idle,
    Connecting,
    /// Connected; the hello is written or being written, the answer awaited.
    Handshake,
    /// Messages flow.
    Running,
}

/// The message being written.
struct Writing {
    seq: u64,
    /// Payload bytes written or copied into the output buffer.
    done: u64,
}

struct Conn {
    /// The bytes this connection sends first (its keyword, or the ZMTP greeting and READY).
    hello: Vec<u8>,
    /// See [`Spec::prefix`].
    prefix: Vec<u8>,
    /// See [`Spec::peer`].
    peer: bool,
    /// Counted in `Shared::ready` (once per run, reconnects aside).
    counted: bool,
    stream: Option<Stream>,
    /// Counts opens, so a caller can tell whether the connection it was serving was replaced
    /// (a failure reopens at once) while it was busy with it.
    generation: u64,
    state: State,
    reader: wire::Reader,
    out: Vec<u8>,
    out_at: usize,
    writing: Option<Writing>,
    /// Messages taken from the budget and not yet begun.
    queued: u64,
    /// Sequence number of the next message to begin.
    next_seq: u64,
    /// When each begun, not yet echoed message began; the oldest first, as echoes come back.
    sent_at: VecDeque<Instant>,
    /// Verified bytes of the echo being read.
    echo_at: u64,
    /// What events have said about the socket's read side.
    read: ReadSide,
    /// When a byte last moved (or the connect began).
    last_progress: Instant,
    retry_at: Option<Instant>,
}

impl Conn {
    /// The sequence number of the message whose echo comes next.
    fn echo_seq(&self) -> u64 {
        self.next_seq - self.sent_at.len() as u64
    }

    /// Messages taken from the budget and not yet echoed.
    fn outstanding(&self) -> u64 {
        self.queued + self.sent_at.len() as u64
    }
}

struct Loop<'a> {
    plan: &'a Plan,
    shared: &'a Shared,
    poll: Poll,
    conns: Vec<Conn>,
    /// Every read lands here and is consumed at once.
    rbuf: Vec<u8>,
    tally: MsgTally,
    /// The (messages, payload bytes, errors) counts last added to `shared`.
    published: (u64, u64, u64),
    /// Relay mode: when this thread saw every connection in; sending starts `settle` later.
    all_in: Option<Instant>,
    /// Relay mode: sending has started.
    started: bool,
}

/// Runs one connection per name until `shared.stop` is set or the budget is spent.
pub(crate) fn run(plan: &Plan, shared: &Shared, specs: Vec<Spec>) -> io::Result<MsgTally> {
    let now = Instant::now();
    let mut lp = Loop {
        plan,
        shared,
        poll: Poll::new()?,
        conns: specs
            .into_iter()
            .map(|spec| Conn {
                hello: wire::hello(plan.protocol, &spec.name, &plan.endpoint),
                prefix: spec.prefix,
                peer: spec.peer,
                counted: false,
                stream: None,
                generation: 0,
                state: State::Idle,
                reader: wire::Reader::new(plan.protocol),
                out: Vec::new(),
                out_at: 0,
                writing: None,
                queued: 0,
                next_seq: 0,
                sent_at: VecDeque::with_capacity(plan.window),
                echo_at: 0,
                read: ReadSide::default(),
                last_progress: now,
                retry_at: Some(now),
            })
            .collect(),
        rbuf: vec![0; READ_BUFFER],
        tally: MsgTally::default(),
        published: (0, 0, 0),
        all_in: None,
        started: false,
    };
    poll_loop::drive(&mut lp, &shared.stop, &shared.budget)?;
    Ok(lp.tally)
}

impl EventLoop for Loop<'_> {
    fn poll(&mut self) -> &mut Poll {
        &mut self.poll
    }

    fn publish(&mut self) {
        let t = &self.tally;
        let counts = (t.messages, t.payload_bytes, t.errors.total());
        let before = std::mem::replace(&mut self.published, counts);
        self.shared.messages.fetch_add(counts.0 - before.0, Relaxed);
        self.shared
            .payload_bytes
            .fetch_add(counts.1 - before.1, Relaxed);
        self.shared.errors.fetch_add(counts.2 - before.2, Relaxed);
    }

    fn tick(&mut self, now: Instant) {
        if self.plan.relay && !self.started && self.barrier(now) {
            // The barrier just opened: start every connection that is in.
            self.started = true;
            for i in 0..self.conns.len() {
                if self.conns[i].state == State::Running {
                    self.send(i, now);
                }
            }
        }
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            let waiting = match c.state {
                State::Idle => {
                    if c.retry_at.is_some_and(|t| t <= now) {
                        self.open(i, now);
                    }
                    continue;
                }
                State::Connecting | State::Handshake => true,
                State::Running => c.outstanding() > 0 || c.out_at < c.out.len(),
            };
            if waiting && now.duration_since(c.last_progress) >= self.plan.timeout {
                let text = match c.state {
                    State::Connecting => "no connection".to_owned(),
                    State::Handshake => "no answer to the handshake".to_owned(),
                    _ => format!("no byte moved with {} messages in flight", c.sent_at.len()),
                };
                self.fail(
                    i,
                    Failure::Timeout,
                    &format!("{text} within {:?}", self.plan.timeout),
                    now,
                );
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
        let generation = c.generation;
        match c.state {
            State::Idle => return,
            State::Connecting => {
                if !(ev.is_writable() || ev.is_error() || ev.is_read_closed())
                    || !self.connected(i, now)
                {
                    return;
                }
            }
            State::Handshake | State::Running => {
                if ev.is_writable() {
                    self.send(i, now);
                }
            }
        }
        let c = &self.conns[i];
        if c.generation == generation
            && c.read.readable
            && matches!(c.state, State::Handshake | State::Running)
        {
            self.receive(i);
        }
    }
}

impl Loop<'_> {
    /// Starts a connection, if the budget has a message for it.
    fn open(&mut self, i: usize, now: Instant) {
        self.conns[i].retry_at = None;
        // A message is taken from the budget before connecting, so a count-bounded run opens
        // no connection it has nothing to send on; a failure on the way spends it.
        let reserved = self.shared.budget.take(1);
        if reserved == 0 {
            return;
        }
        self.conns[i].queued = reserved;
        let endpoint = match self.conns[i].peer {
            true => &self.plan.peer_endpoint,
            false => &self.plan.endpoint,
        };
        let stream = match poll_loop::open(self.poll.registry(), Token(i), || connect(endpoint)) {
            Ok(s) => s,
            Err(e) => return self.fail(i, Failure::Connect, &e, now),
        };
        let c = &mut self.conns[i];
        c.stream = Some(stream);
        c.generation += 1;
        c.state = State::Connecting;
        c.reader = wire::Reader::new(self.plan.protocol);
        c.out.clear();
        c.out.extend_from_slice(&c.hello);
        c.out_at = 0;
        c.writing = None;
        c.sent_at.clear();
        c.echo_at = 0;
        c.read = ReadSide::default();
        c.last_progress = now;
    }

    /// Completes a non-blocking connect and writes the hello; false if the connect failed or
    /// is not done yet.
    fn connected(&mut self, i: usize, now: Instant) -> bool {
        let Some(stream) = self.conns[i].stream.as_ref() else {
            return false;
        };
        match stream.connect_done() {
            Ok(true) => {}
            Ok(false) => return false,
            Err(e) => {
                self.fail(i, Failure::Connect, &e.to_string(), now);
                return false;
            }
        }
        self.tally.connects += 1;
        let c = &mut self.conns[i];
        c.state = State::Handshake;
        c.last_progress = now;
        let generation = c.generation;
        self.send(i, now);
        self.conns[i].generation == generation
    }

    /// Writes what the connection has to write until the socket would block or nothing is
    /// left: the output buffer, then payload straight from the pattern, refilling the buffer
    /// with new messages while the window allows.
    fn send(&mut self, i: usize, now: Instant) {
        let plan = self.plan;
        loop {
            let c = &mut self.conns[i];
            let Some(stream) = c.stream.as_mut() else {
                return;
            };
            let direct = c
                .writing
                .as_ref()
                .filter(|w| c.out_at == c.out.len() && plan.size - w.done >= DIRECT_MIN);
            let result = if c.out_at < c.out.len() {
                stream.write_some(&c.out[c.out_at..])
            } else if let Some(w) = direct {
                let left = (plan.size - w.done).min(CHUNK as u64) as usize;
                stream.write_some(payload(plan, &c.prefix, w.seq, w.done, left))
            } else {
                if !self.fill(i, now) {
                    let c = &self.conns[i];
                    // Nothing left to send and nothing in flight: the budget is spent (or
                    // the run is stopping), and this connection is done.
                    if c.state == State::Running && c.outstanding() == 0 {
                        self.close(i);
                    }
                    return;
                }
                continue;
            };
            match result {
                Ok(Some(n)) => {
                    self.tally.bytes_written += n as u64;
                    c.last_progress = now;
                    if c.out_at < c.out.len() {
                        c.out_at += n;
                    } else if let Some(w) = c.writing.as_mut() {
                        w.done += n as u64;
                        if w.done == plan.size {
                            c.writing = None;
                        }
                    }
                }
                Ok(None) => return,
                Err(e) => return self.fail(i, Failure::Write, &e.to_string(), now),
            }
        }
    }

    /// Refills the (drained) output buffer: the rest of the current message, then new
    /// messages while the window and the budget allow, up to about [`OUT_TARGET`] bytes.
    /// Returns whether there is anything to write.
    fn fill(&mut self, i: usize, now: Instant) -> bool {
        let (plan, shared) = (self.plan, self.shared);
        // Relay mode: nobody sends before every connection is in (see `Plan::relay`).
        let open = !plan.relay || self.started;
        let c = &mut self.conns[i];
        c.out.clear();
        c.out_at = 0;
        if c.state != State::Running {
            return false;
        }
        while c.out.len() < OUT_TARGET {
            if let Some(w) = c.writing.as_mut() {
                let n = (plan.size - w.done).min((OUT_TARGET - c.out.len()) as u64) as usize;
                let part = payload(plan, &c.prefix, w.seq, w.done, n);
                c.out.extend_from_slice(part);
                w.done += part.len() as u64;
                if w.done == plan.size {
                    c.writing = None;
                }
                continue;
            }
            if c.sent_at.len() >= plan.window || !open {
                break;
            }
            if c.queued == 0 {
                if shared.stop.load(Relaxed) {
                    break;
                }
                c.queued = shared.budget.take((plan.window - c.sent_at.len()) as u64);
                if c.queued == 0 {
                    break;
                }
            }
            c.queued -= 1;
            c.sent_at.push_back(now);
            wire::message_header(plan.protocol, plan.size, &mut c.out);
            c.writing = Some(Writing {
                seq: c.next_seq,
                done: 0,
            });
            c.next_seq += 1;
        }
        !c.out.is_empty()
    }

    fn receive(&mut self, i: usize) {
        // The buffer is lent out so the pieces read from it can be handled with `self`.
        let mut buf = std::mem::take(&mut self.rbuf);
        self.receive_into(i, &mut buf);
        self.rbuf = buf;
    }

    fn receive_into(&mut self, i: usize, buf: &mut [u8]) {
        let generation = self.conns[i].generation;
        loop {
            let c = &mut self.conns[i];
            if c.generation != generation {
                return;
            }
            let Some(stream) = c.stream.as_mut() else {
                return;
            };
            let n = match stream.read_some(buf) {
                Ok(Some(n)) => n,
                Ok(None) => {
                    c.read.readable = false;
                    return;
                }
                Err(e) => return self.fail(i, Failure::Read, &e.to_string(), Instant::now()),
            };
            let now = Instant::now();
            if n == 0 {
                return self.end_of_stream(i, now);
            }
            self.tally.bytes_read += n as u64;
            c.last_progress = now;
            if !self.consume(i, &buf[..n], now) {
                return;
            }
            // Echoes that completed freed room in the window, or the handshake finished.
            self.send(i, now);
            if self.plan.relay {
                // Relays delivered here freed room in the partner's window.
                self.send(i ^ 1, now);
            }
            let c = &mut self.conns[i];
            if c.generation != generation || c.stream.is_none() {
                return;
            }
            if c.read.emptied_by(n, buf.len()) {
                return;
            }
        }
    }

    /// Acts on everything in `data`. Returns false when the connection failed on it.
    fn consume(&mut self, i: usize, data: &[u8], now: Instant) -> bool {
        let plan = self.plan;
        // What comes in is an echo of this connection's messages, or (relay mode) its
        // partner's messages: the sender's queue says which was sent, and when.
        let src = if plan.relay { i ^ 1 } else { i };
        let mut at = 0;
        loop {
            let (src_waiting, src_seq) = {
                let s = &self.conns[src];
                (!s.sent_at.is_empty(), s.echo_seq())
            };
            let c = &mut self.conns[i];
            let (n, step) = match c.reader.next(&data[at..]) {
                Ok(x) => x,
                Err(WireError::Handshake(e)) => {
                    self.fail(i, Failure::Handshake, &e, now);
                    return false;
                }
                Err(WireError::Protocol(e)) => {
                    self.fail(i, Failure::Protocol, &e, now);
                    return false;
                }
            };
            at += n;
            let Some(step) = step else {
                return true;
            };
            let failure = match step {
                In::Ready => {
                    c.state = State::Running;
                    self.tally.handshakes += 1;
                    if !std::mem::replace(&mut c.counted, true) {
                        self.shared.ready.fetch_add(1, Relaxed);
                    }
                    None
                }
                In::Refused(text) => Some((Failure::Handshake, text)),
                In::Ended(text) => Some((
                    Failure::Read,
                    format!("the server ended the connection: {text}"),
                )),
                In::Start(_) if !src_waiting => Some((
                    Failure::Protocol,
                    "an echo of a message that was not sent".to_owned(),
                )),
                In::Start(len) if len != plan.size => Some((
                    Failure::Protocol,
                    format!("an echo of {len} bytes for a message of {}", plan.size),
                )),
                In::Start(_) => {
                    c.echo_at = 0;
                    None
                }
                In::Chunk(bytes) => match mismatch(plan, &c.prefix, src_seq, c.echo_at, bytes) {
                    Some(k) => Some((
                        Failure::Protocol,
                        format!(
                            "the echo differs from what was sent at byte {} of a {}-byte message",
                            c.echo_at + k as u64,
                            plan.size
                        ),
                    )),
                    None => {
                        c.echo_at += bytes.len() as u64;
                        self.tally.payload_bytes += bytes.len() as u64;
                        None
                    }
                },
                In::End => {
                    // A Start was checked against the sender's queue being non-empty.
                    if let Some(began) = self.conns[src].sent_at.pop_front() {
                        self.tally.echoed(now.duration_since(began));
                    }
                    None
                }
            };
            if let Some((why, text)) = failure {
                self.fail(i, why, &text, now);
                return false;
            }
        }
    }

    fn end_of_stream(&mut self, i: usize, now: Instant) {
        let c = &self.conns[i];
        let (why, text) = match c.state {
            State::Handshake => (
                Failure::Handshake,
                "the server closed the connection during the handshake".to_owned(),
            ),
            _ => (
                Failure::Read,
                format!(
                    "the server closed the connection with {} messages in flight",
                    c.sent_at.len()
                ),
            ),
        };
        self.fail(i, why, &text, now);
    }

    fn close(&mut self, i: usize) {
        let c = &mut self.conns[i];
        poll_loop::close(self.poll.registry(), &mut c.stream);
        c.state = State::Idle;
        c.queued = 0;
        c.writing = None;
        c.sent_at.clear();
        c.out.clear();
        c.out_at = 0;
        c.retry_at = None;
    }

    fn fail(&mut self, i: usize, why: Failure, text: &str, now: Instant) {
        // One failure per connection, as wrk counts them. It spends one of the messages the
        // connection held; the others go back to the budget, so a count-bounded run ends
        // after exactly N echoes or failures.
        let outstanding = self.conns[i].outstanding();
        self.shared.budget.give_back(outstanding.saturating_sub(1));
        self.tally.fail(why, text);
        self.close(i);
        if self.shared.stop.load(Relaxed) {
            return;
        }
        match why {
            Failure::Connect | Failure::Handshake => {
                self.conns[i].retry_at = Some(now + RETRY_BACKOFF);
            }
            _ => self.open(i, now),
        }
    }
}

impl Loop<'_> {
    /// Relay mode: whether every connection of the run is in and `settle` has passed since
    /// this thread first saw so.
    fn barrier(&mut self, now: Instant) -> bool {
        if self.all_in.is_none() && self.shared.ready.load(Relaxed) >= self.plan.connections as u64
        {
            self.all_in = Some(now);
        }
        self.all_in.is_some_and(|t| now >= t + self.plan.settle)
    }
}

/// The bytes of message `seq` from offset `at` (at most `max`): the relay prefix, then the
/// pattern.
fn payload<'a>(plan: &'a Plan, prefix: &'a [u8], seq: u64, at: u64, max: usize) -> &'a [u8] {
    let plen = prefix.len() as u64;
    if at < plen {
        let at = at as usize;
        &prefix[at..prefix.len().min(at + max)]
    } else {
        plan.pattern.slice(seq, at - plen, max)
    }
}

/// Where `data`, read at offset `at` of message `seq`, first differs from what was sent.
fn mismatch(plan: &Plan, prefix: &[u8], seq: u64, at: u64, data: &[u8]) -> Option<usize> {
    let plen = prefix.len() as u64;
    let head = if at < plen {
        let n = ((plen - at) as usize).min(data.len());
        let want = &prefix[at as usize..at as usize + n];
        if let Some(k) = data[..n].iter().zip(want).position(|(a, b)| a != b) {
            return Some(k);
        }
        n
    } else {
        0
    };
    let from = (at + head as u64).saturating_sub(plen);
    plan.pattern
        .mismatch(seq, from, &data[head..])
        .map(|k| head + k)
}
