//! The mio plumbing under both load generators' threads: the loop that polls for events, ticks
//! between them and stops when the run is over ([`drive`]), the stream a connection owns ([`Stream`], berth's own, over TCP or UNIX),
//! starting and completing a non-blocking connect, single reads and writes that tell "would
//! block" apart from failure, and what edge-triggered events said about the read side
//! ([`ReadSide`]). What a connection sends and how it checks the answers is each
//! generator's own.

use std::io::{self, ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use berth::net::tls::TlsConnector;
use berth::net::{Evented, Socket};
use mio::event::Event;
use mio::net::{TcpStream, UnixStream};
use mio::{Events, Interest, Poll, Registry, Token};

use crate::load_threads::Budget;

/// How often timeouts and reconnect back-offs are checked, and progress published.
pub(crate) const TICK: Duration = Duration::from_millis(10);

/// One load thread's connections, as [`drive`] runs them. A connection's token is its index.
pub(crate) trait EventLoop {
    /// The poll instance the connections are registered with.
    fn poll(&mut self) -> &mut Poll;
    /// Timeouts and reconnects; called every [`TICK`].
    fn tick(&mut self, now: Instant);
    /// Adds what was counted since the last call to the run's shared progress counters.
    fn publish(&mut self);
    /// Whether every connection is idle with no retry pending.
    fn all_idle(&self) -> bool;
    /// The read side of connection `i`, if there is one with that index.
    fn read_side(&mut self, i: usize) -> Option<&mut ReadSide>;
    /// Acts on an event for connection `i`, once its read side has noted it.
    fn on_event(&mut self, i: usize, ev: &Event, now: Instant);
}

/// Polls and dispatches events until `stop` is set or, in a count-bounded run, the budget is
/// spent and every connection idle, ticking at least every [`TICK`] so that timeouts fire
/// even when no event comes. Counts are published every tick, for the progress line, and
/// once more at the end. Fails only if polling does.
pub(crate) fn drive(lp: &mut impl EventLoop, stop: &AtomicBool, budget: &Budget) -> io::Result<()> {
    let mut events = Events::with_capacity(1024);
    let mut next_tick = Instant::now();
    loop {
        let now = Instant::now();
        if now >= next_tick {
            lp.tick(now);
            lp.publish();
            next_tick = now + TICK;
        }
        // A connection goes idle for good only once the budget has nothing left for it.
        if stop.load(Relaxed) || (budget.is_bounded() && lp.all_idle()) {
            lp.publish();
            return Ok(());
        }
        match lp.poll().poll(&mut events, Some(TICK)) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        for ev in events.iter() {
            let i = ev.token().0;
            let Some(read) = lp.read_side(i) else {
                continue;
            };
            read.note(ev);
            lp.on_event(i, ev, Instant::now());
        }
    }
}

/// A load connection's transport: berth's one stream type ([`berth::net::Stream`]) over a TCP
/// or UNIX socket, or TLS over TCP (`berth bench https://`), so that the lab reads, writes and
/// flushes exactly as the servers do (`has_pending`, `short_read_drains` come from
/// [`Transport`]).
pub(crate) use berth::net::Stream;

/// Starts a non-blocking TCP connect.
pub(crate) fn tcp(addr: SocketAddr) -> io::Result<Stream> {
    let s = TcpStream::connect(addr)?;
    // Small requests, messages and headers must not wait for Nagle.
    let _ = s.set_nodelay(true);
    Ok(Stream::Plain(Socket::Tcp(s)))
}

/// Starts a non-blocking TCP connect with TLS over it (the handshake goes as the stream is
/// written and read).
pub(crate) fn tls(addr: SocketAddr, tls: &TlsConnector, host: &str) -> io::Result<Stream> {
    let Stream::Plain(s) = tcp(addr)? else {
        unreachable!("tcp makes a plain stream")
    };
    Ok(Stream::Tls(Box::new(tls.connect(host, s)?)))
}

/// Starts a non-blocking UNIX stream connect.
pub(crate) fn unix(path: &Path) -> io::Result<Stream> {
    UnixStream::connect(path).map(|s| Stream::Plain(Socket::Unix(s)))
}

/// Starts a connect with `connect` and registers the socket under `token` for both readiness
/// kinds, since a connection reads and writes from the start. The error says which step failed,
/// as the reports show it.
pub(crate) fn open(
    registry: &Registry,
    token: Token,
    connect: impl FnOnce() -> io::Result<Stream>,
) -> Result<Stream, String> {
    let mut stream = connect().map_err(|e| e.to_string())?;
    registry
        .register(
            stream.source(),
            token,
            Interest::READABLE | Interest::WRITABLE,
        )
        .map_err(|e| format!("cannot poll: {e}"))?;
    Ok(stream)
}

/// Deregisters and drops (so closes) the connection's socket, if it has one.
pub(crate) fn close(registry: &Registry, stream: &mut Option<Stream>) {
    if let Some(mut s) = stream.take() {
        let _ = registry.deregister(s.source());
    }
}

/// What a load connection asks of its stream beyond [`Transport`].
pub(crate) trait LoadStream {
    /// Where a non-blocking connect stands: `Ok(true)` done, `Ok(false)` still under way (a
    /// spurious event), `Err` failed. Its first writable or error event is the time to ask.
    fn connect_done(&self) -> io::Result<bool>;
    /// One read, retried if interrupted: `Ok(Some(n))` read n bytes (0 is the end of the
    /// stream), `Ok(None)` the socket has nothing now.
    fn read_some(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>>;
    /// One write, retried if interrupted: `Ok(Some(n))` wrote n bytes, `Ok(None)` the socket
    /// takes nothing now. Callers write only non-empty buffers, so a write that takes no bytes
    /// without saying "would block" is a failure: waiting for readiness would not change it.
    fn write_some(&mut self, buf: &[u8]) -> io::Result<Option<usize>>;
}

impl LoadStream for Stream {
    fn connect_done(&self) -> io::Result<bool> {
        let socket = self.socket();
        if let Some(e) = socket.take_error()? {
            return Err(e);
        }
        match socket.peer_addr() {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NotConnected => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn read_some(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        retry(|| self.read(buf))
    }

    fn write_some(&mut self, buf: &[u8]) -> io::Result<Option<usize>> {
        match retry(|| self.write(buf))? {
            Some(0) => Err(io::Error::new(
                ErrorKind::WriteZero,
                "the socket accepted no bytes",
            )),
            n => Ok(n),
        }
    }
}

/// Runs `op` again while it is interrupted; "would block" is `Ok(None)`.
fn retry(mut op: impl FnMut() -> io::Result<usize>) -> io::Result<Option<usize>> {
    loop {
        match op() {
            Ok(n) => return Ok(Some(n)),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// What edge-triggered events have said about a connection's read side. Readiness is
/// announced once per change, so the connection must remember it until it has read the
/// socket empty.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ReadSide {
    /// A readable event arrived that has not been read to the end yet.
    pub readable: bool,
    /// The peer's FIN has arrived: read to the end even after a short read, because no
    /// further event will announce it.
    pub closed: bool,
}

impl ReadSide {
    /// Notes what `ev` says. An error or a FIN makes the socket readable too, so that the
    /// read that reports it is made.
    pub(crate) fn note(&mut self, ev: &Event) {
        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
            self.readable = true;
        }
        if ev.is_read_closed() || ev.is_error() {
            self.closed = true;
        }
    }

    /// After a read of `n` bytes into `room`: whether it emptied the socket, which ends the
    /// reading until the next event. A short read did, unless the FIN has come. Trusting a
    /// short read saves the second read that would only say "would block", a syscall per
    /// small answer; it is safe because any byte arriving after it raises a fresh event.
    pub(crate) fn emptied_by(&mut self, n: usize, room: usize) -> bool {
        let emptied = n < room && !self.closed;
        if emptied {
            self.readable = false;
        }
        emptied
    }
}
