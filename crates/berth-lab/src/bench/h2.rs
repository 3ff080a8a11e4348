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
//! The protocol is berth-proto's client role (`h2::client`), the one the testkit drives too:
//! this file moves its bytes over mio and keeps the load's books. The request's header block
//! is encoded once (no dynamic table, so the same bytes serve every request); the role is
//! told to keep no body bytes and only the first field of each head (`:status`), and to open
//! its windows once half of them is spent.
//!
//! What counts as an error: a stream the server resets (RST_STREAM), a GOAWAY with an error
//! code, a non-2xx status, and the connection-level failures of the HTTP/1.1 loop (connect,
//! read, write, timeout, protocol). A GOAWAY with NO_ERROR is the server winding a long
//! connection down (berth after `--http2-max-requests` streams, nginx after
//! `keepalive_requests`): the streams it did not take go back to the budget and the
//! connection is made again once its last answer is in, as the HTTP/1.1 loop does after a
//! `Connection: close`.

use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use berth_proto::h2::client::{Client, ClientConfig, Event, StreamMap, Windows};
use berth_proto::h2::frame::{setting, ErrorCode};
use berth_proto::h2::hpack::ListLimits;
use mio::event::Event as MioEvent;
use mio::{Poll, Token};

use super::load::{Shared, TlsTarget};
use super::report::{Failure, Tally};
use crate::poll_loop::{self, EventLoop, LoadStream, ReadSide, Stream};
use berth::net::Transport;

/// The client's stream and connection receive windows: 2^30 - 1, as h2load's `-w 30 -W 30`.
const RECV_WINDOW: u32 = (1 << 30) - 1;

/// Streams opened before the server's SETTINGS says how many it allows.
const STREAMS_BEFORE_SETTINGS: usize = 100;

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

/// The client role as a load generator wants it: no push, both windows at [`RECV_WINDOW`]
/// and refilled at half, no body bytes kept, only `:status` kept of each head.
fn client_config() -> ClientConfig {
    ClientConfig {
        settings: vec![(setting::INITIAL_WINDOW_SIZE, RECV_WINDOW)],
        connection_window: RECV_WINDOW,
        windows: Windows::Refill {
            every: RECV_WINDOW / 2,
        },
        keep_data: false,
        head_limits: ListLimits {
            max_size: usize::MAX,
            max_fields: 1,
        },
    }
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
    /// Final status, once its head came (0 before).
    status: u16,
}

type Streams = StreamMap<Inflight>;

struct Conn {
    stream: Option<Stream>,
    state: State,
    read: ReadSide,
    buf: Vec<u8>,
    /// Frames queued, and how much of them the socket has taken.
    out: Vec<u8>,
    out_pos: usize,
    /// The protocol: made new for each connection.
    client: Client,
    inflight: Streams,
    /// Requests taken from the budget at the connect, for the first streams.
    reserved: usize,
    /// The connect's start, for its timeout.
    began: Instant,
    retry_at: Option<Instant>,
    /// Once the server's SETTINGS has come (its stream cap and windows known): the first
    /// stream id opened after it; 0 before.
    settled_at: u32,
}

impl Conn {
    fn new(now: Instant) -> Conn {
        Conn {
            stream: None,
            state: State::Idle,
            read: ReadSide::default(),
            buf: vec![0; READ_BUFFER],
            out: Vec::with_capacity(4096),
            out_pos: 0,
            client: Client::new(client_config()),
            inflight: Streams::default(),
            reserved: 0,
            began: now,
            retry_at: Some(now),
            settled_at: 0,
        }
    }

    /// Fresh protocol state for a new connection (the buffers are kept).
    fn reset(&mut self) {
        self.out.clear();
        self.out_pos = 0;
        self.client = Client::new(client_config());
        self.inflight.clear();
        self.settled_at = 0;
        self.read = ReadSide::default();
    }

    /// Streams this connection keeps in flight: the plan's, or fewer if the server's SETTINGS
    /// allows fewer (100 until it says).
    fn target(&self, plan: &Plan) -> usize {
        let peer = self.client.peer().max_streams;
        plan.streams
            .min(peer.map_or(STREAMS_BEFORE_SETTINGS, |n| n as usize))
    }
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

    fn on_event(&mut self, i: usize, ev: &MioEvent, now: Instant) {
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
        // The client role queued the preface, SETTINGS and WINDOW_UPDATE when it was made
        // (`reset`); the first streams join them in the same write.
        let c = &mut self.conns[i];
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
        c.client.poll_transmit(&mut c.out);
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
            let room = c.buf.len();
            let n = match stream.read_some(&mut c.buf) {
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
            let heard = c.client.recv(&c.buf[..n]);
            // What came before an error still counts, as it would frame by frame.
            if let Err(why) = self.events(i, now) {
                return self.fail(i, why, now);
            }
            let c = &mut self.conns[i];
            if c.stream.is_none() || !matches!(c.state, State::Open | State::Draining) {
                // Closed, or made again, by what it heard.
                return;
            }
            if heard.is_err() {
                return self.fail(i, Failure::Protocol, now);
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

    /// Acts on what the client role heard.
    fn events(&mut self, i: usize, now: Instant) -> Result<(), Failure> {
        while let Some(event) = self.conns[i].client.poll_event() {
            let c = &mut self.conns[i];
            match event {
                Event::Head {
                    stream,
                    status,
                    end_stream,
                    ..
                } => {
                    if let Some(s) = c.inflight.get_mut(&stream) {
                        s.status = status;
                    }
                    if end_stream {
                        self.complete(i, stream, now);
                    }
                }
                Event::Data {
                    stream,
                    end_stream: true,
                    ..
                }
                | Event::Trailers { stream, .. } => self.complete(i, stream, now),
                Event::Reset { stream, code } => {
                    if c.inflight.remove(&stream).is_some() {
                        let early = c.settled_at == 0 || stream < c.settled_at;
                        if code == ErrorCode::REFUSED_STREAM && early {
                            // Opened before the client knew the server's cap, and not
                            // processed: sent again by the next refill.
                            self.shared.budget.give_back(1);
                        } else {
                            self.tally.errors.reset += 1;
                        }
                        if c.state == State::Draining && c.inflight.is_empty() {
                            self.reopen(i, now);
                        }
                    }
                }
                Event::Settings { first: true } => {
                    // Over TLS the handshake is done by now, and must have chosen `h2`.
                    if let Some(Stream::Tls(t)) = c.stream.as_ref() {
                        if t.alpn_protocol() != Some(b"h2") {
                            return Err(Failure::Protocol);
                        }
                    }
                    c.settled_at = c.client.next_stream_id();
                }
                Event::GoAway {
                    last_stream, code, ..
                } => {
                    if code != ErrorCode::NO_ERROR {
                        return Err(Failure::GoAway);
                    }
                    // The streams the server will not answer go back to the budget, for
                    // another connection (or this one, made again) to send.
                    let before = c.inflight.len();
                    c.inflight.retain(|&id, _| id <= last_stream);
                    let dropped = before - c.inflight.len();
                    self.shared.budget.give_back(dropped as u64);
                    self.drain(i, now);
                }
                Event::Data { .. }
                | Event::Settings { first: false }
                | Event::SettingsAcked
                | Event::Pong(_) => {}
            }
        }
        Ok(())
    }

    /// `stream`'s answer is complete.
    fn complete(&mut self, i: usize, stream: u32, now: Instant) {
        let c = &mut self.conns[i];
        if let Some(s) = c.inflight.remove(&stream) {
            self.tally.response(s.status, now.duration_since(s.began));
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
        let body = &self.plan.body;
        let opened = match c.state {
            State::Open => c.client.open(&self.plan.block, body.is_empty()),
            _ => None,
        };
        let Some(id) = opened else {
            self.shared.budget.give_back(1);
            if c.state == State::Open {
                // No id left: make the connection again after these answers.
                c.state = State::Draining;
            }
            return;
        };
        c.inflight.insert(
            id,
            Inflight {
                began: now,
                status: 0,
            },
        );
        if !body.is_empty() {
            c.client.send_data(id, body, true);
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
            .failed(why, c.inflight.len() + c.reserved, &self.shared.budget);
        self.close(i);
        self.conns[i].retry_at = Some(why.retry_at(now));
        if why != Failure::Connect && !self.shared.stop.load(Relaxed) {
            self.open(i, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_proto::h2::frame::{self, kind, Header, HEADER_LEN};

    /// The preface, SETTINGS and WINDOW_UPDATE the role writes for the bench, as h2load's.
    #[test]
    fn the_opening_raises_both_windows_and_refuses_push() {
        let mut out = Vec::new();
        Client::new(client_config()).poll_transmit(&mut out);
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
        assert_eq!(wu.len(), HEADER_LEN + 4);
    }
}
