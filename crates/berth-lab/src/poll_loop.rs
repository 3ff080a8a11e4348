//! The mio plumbing under both load generators' threads: the loop that polls for events, ticks
//! between them and stops when the run is over ([`drive`]), the socket a connection owns ([`Stream`], TCP or UNIX),
//! starting and completing a non-blocking connect, single reads and writes that tell "would
//! block" apart from failure, and what edge-triggered events said about the read side
//! ([`ReadSide`]). What a connection sends and how it checks the answers is each
//! generator's own.

use std::io::{self, ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use berth::net::tls::{TlsConnector, TlsStream};
use berth::net::{Evented, Transport};
use mio::event::{Event, Source};
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

/// A TCP or UNIX stream socket, or TLS over TCP (`berth bench https://`).
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    /// Starts a non-blocking TCP connect.
    pub(crate) fn tcp(addr: SocketAddr) -> io::Result<Stream> {
        let s = TcpStream::connect(addr)?;
        // Small requests, messages and headers must not wait for Nagle.
        let _ = s.set_nodelay(true);
        Ok(Stream::Tcp(s))
    }

    /// Starts a non-blocking TCP connect with TLS over it (the handshake goes as the stream
    /// is written and read).
    pub(crate) fn tls(addr: SocketAddr, tls: &TlsConnector, host: &str) -> io::Result<Stream> {
        let Stream::Tcp(s) = Stream::tcp(addr)? else {
            unreachable!("Stream::tcp makes a TCP stream")
        };
        Ok(Stream::Tls(Box::new(tls.connect(host, s)?)))
    }

    /// Records a TLS stream holds that the socket has not taken yet: [`Write::flush`] them
    /// when writable.
    pub(crate) fn has_pending(&self) -> bool {
        matches!(self, Stream::Tls(t) if t.has_pending())
    }

    /// Whether a short read emptied the socket (not so under TLS: a read returns one
    /// record's plaintext while more may wait).
    pub(crate) fn short_read_drains(&self) -> bool {
        !matches!(self, Stream::Tls(_))
    }

    /// Starts a non-blocking UNIX stream connect.
    pub(crate) fn unix(path: &Path) -> io::Result<Stream> {
        UnixStream::connect(path).map(Stream::Unix)
    }

    /// Starts a connect with `connect` and registers the socket under `token` for both
    /// readiness kinds, since a connection reads and writes from the start. The error says
    /// which step failed, as the reports show it.
    pub(crate) fn open(
        registry: &Registry,
        token: Token,
        connect: impl FnOnce() -> io::Result<Stream>,
    ) -> Result<Stream, String> {
        let mut stream = connect().map_err(|e| e.to_string())?;
        registry
            .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
            .map_err(|e| format!("cannot poll: {e}"))?;
        Ok(stream)
    }

    /// Where a non-blocking connect stands: `Ok(true)` done, `Ok(false)` still under way (a
    /// spurious event), `Err` failed. Its first writable or error event is the time to ask.
    pub(crate) fn connect_done(&self) -> io::Result<bool> {
        let (error, peer) = match self {
            Stream::Tcp(s) => (s.take_error(), s.peer_addr().map(drop)),
            Stream::Unix(s) => (s.take_error(), s.peer_addr().map(drop)),
            Stream::Tls(t) => (t.get_ref().take_error(), t.get_ref().peer_addr().map(drop)),
        };
        if let Some(e) = error? {
            return Err(e);
        }
        match peer {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NotConnected => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// One read, retried if interrupted: `Ok(Some(n))` read n bytes (0 is the end of the
    /// stream), `Ok(None)` the socket has nothing now.
    pub(crate) fn read_some(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        retry(|| self.read(buf))
    }

    /// One write, retried if interrupted: `Ok(Some(n))` wrote n bytes, `Ok(None)` the socket
    /// takes nothing now. Callers write only non-empty buffers, so a write that takes no bytes
    /// without saying "would block" is a failure: waiting for readiness would not change it.
    pub(crate) fn write_some(&mut self, buf: &[u8]) -> io::Result<Option<usize>> {
        match retry(|| self.write(buf))? {
            Some(0) => Err(io::Error::new(
                ErrorKind::WriteZero,
                "the socket accepted no bytes",
            )),
            n => Ok(n),
        }
    }

    /// Deregisters and drops (so closes) the connection's socket, if it has one.
    pub(crate) fn close(registry: &Registry, stream: &mut Option<Stream>) {
        if let Some(mut s) = stream.take() {
            let _ = registry.deregister(&mut s);
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

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tls(s) => s.flush(),
            _ => Ok(()),
        }
    }
}

impl Source for Stream {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.register(r, t, i),
            Stream::Unix(s) => s.register(r, t, i),
            Stream::Tls(s) => s.source().register(r, t, i),
        }
    }

    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.reregister(r, t, i),
            Stream::Unix(s) => s.reregister(r, t, i),
            Stream::Tls(s) => s.source().reregister(r, t, i),
        }
    }

    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.deregister(r),
            Stream::Unix(s) => s.deregister(r),
            Stream::Tls(s) => s.source().deregister(r),
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
