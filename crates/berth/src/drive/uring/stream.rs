//! [`UringStream`]: a connection of the `uring` model as the session pump sees it, a
//! non-blocking [`Transport`] over bytes the ring moves. It owns the connection's descriptor
//! and two user-space queues: received bytes not yet read (filled from completions of the
//! multishot receive) and bytes written but not yet handed to a send (submitted by the loop
//! once per turn). Reads and writes never enter the kernel; "would block" means "wait for a
//! completion", which the loop turns into the readiness flags the pump already understands, so
//! the pump, TLS and every session run unchanged.
//!
//! ```text
//!   recv CQE ──> rx ──read──> pump ──write──> tx ──(end of turn)──> send SQE (owns the bytes)
//! ```
//!
//! The loop reaches the queues ([`Io`]) through the connection's transport, a TLS layer's
//! included ([`Io::of`]): they live inline in the connection's slot, so a connection costs no
//! allocation of its own.

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsRawFd, RawFd};

use crate::net::{Stream, Transport};
use crate::rt::BufPool;

/// A connection's descriptor and state, reached by its loop too: the stream's, and the
/// loop's bookkeeping of the connection's operations in the ring. Its queues are boxed and
/// attached only while it has bytes (or an error) in them, and its flags are bits: an idle
/// connection's state is two words, so that a `uring` slot is no bigger than an `evloop` one
/// (a unit test of the model checks it). The loop keeps detached queues for the next busy
/// connection ([`Spares`]).
pub(super) struct Io {
    /// The socket, TCP or UNIX (non-blocking; only `shutdown`, `sendfile` and `getpeername`
    /// are called on it directly, none of them particular to a family).
    pub sock: socket2::Socket,
    /// This connection's incarnation of its slot: completions of an earlier connection in the
    /// same slot carry another, and are ignored.
    pub incarnation: u16,
    /// Number of the current receive arming (completions of earlier, cancelled ones carry
    /// another: their bytes still count, their end does not).
    pub arm: u8,
    /// Bits, read and set through the accessors below.
    flags: u8,
    queues: Option<Box<Queues>>,
}

/// A flag of [`Io`], read with `$get` and set with `$set`.
macro_rules! flags {
    ($($bit:literal $get:ident $set:ident: $doc:literal)*) => {
        impl Io {
            $(
                #[doc = $doc]
                pub fn $get(&self) -> bool {
                    self.flags & (1 << $bit) != 0
                }

                pub fn $set(&mut self, on: bool) {
                    if on {
                        self.flags |= 1 << $bit;
                    } else {
                        self.flags &= !(1 << $bit);
                    }
                }
            )*
        }
    };
}

flags! {
    0 eof set_eof: "The peer ended its side (a receive returned 0)."
    1 sending set_sending: "A send is in flight (its buffer is the ring's until it completes)."
    2 shut_write set_shut_write:
        "Our sending side is to be shut once everything written has been sent."
    3 receiving set_receiving: "A receive is armed."
    4 paused set_paused: "Receiving is paused: too many bytes unread."
    5 closing set_closing:
        "Closed as far as the session goes; waits for its last bytes to be sent."
    6 listed set_listed: "Listed for a send at the end of the loop's turn."
    7 wants_room set_wants_room:
        "A file's bytes wait for room in the socket: the loop polls for it, then pumps."
}

/// The bytes of a busy connection: see [`Io`].
pub(super) struct Queues {
    /// Received bytes; those before `rx_at` have been read.
    rx: Vec<u8>,
    rx_at: usize,
    /// Written bytes not yet handed to a send.
    tx: Vec<u8>,
    /// Most bytes `tx` takes before writes would block.
    tx_limit: usize,
    /// A receive or send failed: the next read or write reports it.
    error: Option<io::Error>,
}

impl Queues {
    fn new(tx_limit: usize) -> Box<Queues> {
        Box::new(Queues {
            rx: Vec::new(),
            rx_at: 0,
            tx: Vec::new(),
            tx_limit,
            error: None,
        })
    }

    fn unread(&self) -> usize {
        self.rx.len() - self.rx_at
    }
}

/// A loop's detached [`Queues`], holding no buffers, for its connections to take when they
/// get busy: a steady stream of requests allocates none.
pub(super) struct Spares {
    // Boxed: a spare moves into a connection and back whole, never reallocated.
    #[allow(clippy::vec_box)]
    free: Vec<Box<Queues>>,
    max_free: usize,
    tx_limit: usize,
}

impl Spares {
    /// Queues whose writes take up to `tx_limit` bytes; at most `max_free` kept spare.
    pub fn new(tx_limit: usize, max_free: usize) -> Spares {
        Spares {
            free: Vec::with_capacity(max_free),
            max_free,
            tx_limit,
        }
    }
}

/// The least a connection's output queue takes (a loop's limit is at least this).
pub(super) const MIN_TX_LIMIT: usize = 64 * 1024;

impl Io {
    /// A connection in the slot's `incarnation`.
    pub fn new(sock: socket2::Socket, incarnation: u16) -> Io {
        Io {
            sock,
            incarnation,
            arm: 0,
            flags: 0,
            queues: None,
        }
    }

    /// The queues of the connection served over `stream`.
    pub fn of(stream: &mut Stream<UringStream>) -> &mut Io {
        &mut stream.socket_mut().io
    }

    /// [`Io::of`], to look.
    pub fn of_ref(stream: &Stream<UringStream>) -> &Io {
        &stream.socket().io
    }

    /// Attaches queues (a spare's if there is one) unless some are attached, with an output
    /// buffer from `pool` for the pump to write into: a pooled buffer, so that writing a
    /// response allocates nothing.
    pub fn attach(&mut self, spares: &mut Spares, pool: &mut BufPool) {
        let q = self.queues_from(spares);
        if q.tx.capacity() == 0 {
            q.tx = pool.take();
        }
    }

    /// The attached queues, attaching a spare (or new) one if none are.
    fn queues_from(&mut self, spares: &mut Spares) -> &mut Queues {
        self.queues
            .get_or_insert_with(|| spares.free.pop().unwrap_or_else(|| Queues::new(spares.tx_limit)))
    }

    /// The attached queues, attaching fresh ones if none are. The loop attaches them before it
    /// lends the connection to a pump; this is for a write that would come otherwise.
    fn queues(&mut self) -> &mut Queues {
        self.queues.get_or_insert_with(|| Queues::new(MIN_TX_LIMIT))
    }

    /// Received bytes not read yet.
    pub fn unread(&self) -> usize {
        self.queues.as_ref().map_or(0, |q| q.unread())
    }

    /// Bytes written and not yet handed to a send.
    pub fn queued(&self) -> usize {
        self.queues.as_ref().map_or(0, |q| q.tx.len())
    }

    /// Bytes written and not yet sent, or being sent.
    pub fn unsent(&self) -> bool {
        self.sending() || self.queued() > 0
    }

    /// A receive or send failed and no read or write has reported it yet.
    pub fn failed(&self) -> bool {
        self.queues.as_ref().is_some_and(|q| q.error.is_some())
    }

    /// Records that a receive or send failed (the first failure is the one reported).
    pub fn fail(&mut self, e: io::Error, spares: &mut Spares) {
        self.queues_from(spares).error.get_or_insert(e);
    }

    /// Appends received bytes (taking a pooled buffer if none is held). Bytes already read
    /// are dropped from the front first: a reader that takes a little at a time while more
    /// keeps coming (a session that can answer nothing until its peer reads) would otherwise
    /// grow the queue by everything received, read or not, and never empty it.
    pub fn received(&mut self, bytes: &[u8], spares: &mut Spares, pool: &mut BufPool) {
        let q = self.queues_from(spares);
        if q.rx.capacity() == 0 {
            q.rx = pool.take();
        }
        if q.rx_at > 0 {
            q.rx.drain(..q.rx_at);
            q.rx_at = 0;
        }
        // No doubling past what is held: the receive limit bounds it already.
        q.rx.reserve_exact(bytes.len());
        q.rx.extend_from_slice(bytes);
    }

    /// Forgets the bytes received and not read (nobody will read them).
    pub fn drop_unread(&mut self) {
        if let Some(q) = &mut self.queues {
            q.rx.clear();
            q.rx_at = 0;
        }
    }

    /// Forgets the bytes written and not yet handed to a send (the connection failed).
    pub fn drop_queued(&mut self) {
        if let Some(q) = &mut self.queues {
            q.tx.clear();
        }
    }

    /// The bytes written so far, for a send, leaving the output queue empty (and its buffer
    /// with the send).
    pub fn take_queued(&mut self) -> Vec<u8> {
        self.queues
            .as_mut()
            .map_or_else(Vec::new, |q| std::mem::take(&mut q.tx))
    }

    /// A send's buffer back, emptied: kept as the output queue's if it has none (and the
    /// connection has not failed), else returned to `pool`.
    pub fn sent_buffer(&mut self, mut buf: Vec<u8>, pool: &mut BufPool) {
        buf.clear();
        match &mut self.queues {
            Some(q) if q.tx.capacity() == 0 && q.error.is_none() => q.tx = buf,
            _ => pool.put(buf),
        }
    }

    /// Gives back empty buffers, and the queues once they hold nothing, so that an idle
    /// connection holds neither.
    pub fn release_buffers(&mut self, spares: &mut Spares, pool: &mut BufPool) {
        let Some(q) = &mut self.queues else {
            return;
        };
        if q.unread() == 0 && q.rx.capacity() > 0 {
            q.rx_at = 0;
            pool.put(std::mem::take(&mut q.rx));
        }
        if q.tx.is_empty() && q.tx.capacity() > 0 {
            pool.put(std::mem::take(&mut q.tx));
        }
        if q.rx.capacity() == 0 && q.tx.capacity() == 0 && q.error.is_none() {
            let q = self.queues.take().expect("queues attached");
            if spares.free.len() < spares.max_free {
                spares.free.push(q);
            }
        }
    }

    /// Shuts our sending side now if that was asked for and nothing is left to send.
    pub fn shut_if_sent(&mut self) {
        if self.shut_write() && !self.unsent() {
            self.set_shut_write(false);
            let _ = self.sock.shutdown(Shutdown::Write);
        }
    }

    /// Copies unread bytes into `out`; 0 if there are none.
    fn take(&mut self, out: &mut [u8]) -> usize {
        let Some(q) = &mut self.queues else {
            return 0;
        };
        let n = out.len().min(q.unread());
        out[..n].copy_from_slice(&q.rx[q.rx_at..q.rx_at + n]);
        q.rx_at += n;
        if q.rx_at == q.rx.len() {
            q.rx.clear();
            q.rx_at = 0;
        }
        n
    }

    /// What a read returns when nothing is unread: the error, the end, or "wait".
    fn nothing_unread(&mut self) -> io::Result<usize> {
        match self.queues.as_mut().and_then(|q| q.error.take()) {
            Some(e) => Err(e),
            None if self.eof() => Ok(0),
            None => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

/// The pump's view of a `uring` connection: see the module docs.
pub struct UringStream {
    io: Io,
}

impl UringStream {
    pub(super) fn new(io: Io) -> UringStream {
        UringStream { io }
    }
}

impl Read for UringStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let io = &mut self.io;
        if buf.is_empty() {
            return Ok(0);
        }
        match io.take(buf) {
            0 => io.nothing_unread(),
            n => Ok(n),
        }
    }
}

impl Write for UringStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let q = self.io.queues();
        if let Some(e) = q.error.take() {
            return Err(e);
        }
        let room = q.tx_limit.saturating_sub(q.tx.len());
        if room == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = room.min(buf.len());
        q.tx.extend_from_slice(&buf[..n]);
        Ok(n)
    }

    /// "Would block" while the queue is full; otherwise what is queued goes with the turn's
    /// sends, and the pump may go on (it still sees the bytes pending until they are sent).
    fn flush(&mut self) -> io::Result<()> {
        match &self.io.queues {
            Some(q) if q.tx.len() >= q.tx_limit => Err(io::ErrorKind::WouldBlock.into()),
            _ => Ok(()),
        }
    }
}

impl Transport for UringStream {
    fn read_spare(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let io = &mut self.io;
        let n = (buf.capacity() - buf.len()).min(io.unread());
        let Some(q) = io.queues.as_mut().filter(|_| n > 0) else {
            return io.nothing_unread();
        };
        if buf.is_empty() && q.rx_at == 0 && n == q.rx.len() && q.rx.capacity() >= buf.capacity() {
            // Everything unread fits, and the reader has nothing: hand it the buffer rather
            // than copy (its empty one goes back to the pool with the queue's).
            std::mem::swap(buf, &mut q.rx);
            return Ok(n);
        }
        buf.extend_from_slice(&q.rx[q.rx_at..q.rx_at + n]);
        q.rx_at += n;
        if q.rx_at == q.rx.len() {
            q.rx.clear();
            q.rx_at = 0;
        }
        Ok(n)
    }

    /// Files go from the page cache with `sendfile(2)`, as on a plain socket: io_uring has no
    /// sendfile, and reading them through a buffer cost 2.5-3x the CPU per byte
    /// (`BENCHMARKS.md`, issue 19).
    fn can_send_file(&self) -> bool {
        true
    }

    /// Called on the socket itself, so only once everything written before has been sent
    /// (until then "would block": the send's completion wakes the pump). A full socket is
    /// "would block" too, and the loop polls the ring for room (`Io::wants_room`).
    fn send_file(&mut self, file: &File, offset: &mut u64, len: u64) -> io::Result<usize> {
        let io = &mut self.io;
        if let Some(e) = io.queues.as_mut().and_then(|q| q.error.take()) {
            return Err(e);
        }
        if io.unsent() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let count = usize::try_from(len).unwrap_or(usize::MAX);
        let sent = crate::sys::fs::sendfile(&io.sock, file, offset, count);
        if matches!(&sent, Err(e) if e.kind() == io::ErrorKind::WouldBlock) {
            io.set_wants_room(true);
        }
        sent
    }

    /// After what was written has been sent (the loop does it then).
    fn shutdown_write(&mut self) -> io::Result<()> {
        let io = &mut self.io;
        io.set_shut_write(true);
        io.shut_if_sent();
        Ok(())
    }

    /// The socket's close becomes a reset; what the ring still holds of it (a send, a poll
    /// for room) the loop cancels when it frees the slot (`UringLoop::release`).
    fn abort(&mut self) {
        crate::net::transport::reset_on_close(&self.io.sock);
    }

    fn peer(&self) -> Option<std::net::SocketAddr> {
        // None for a UNIX socket, whose peer has no address.
        self.io.sock.peer_addr().ok()?.as_socket()
    }

    /// Bytes written are not out until the ring has sent them: the pump waits for the loop's
    /// "writable" before it calls the connection idle or done.
    fn has_pending(&self) -> bool {
        self.io.unsent()
    }
}

impl AsRawFd for UringStream {
    fn as_raw_fd(&self) -> RawFd {
        self.io.sock.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    //! The readiness a `UringStream` gives the pump: reads "would block" until a completion
    //! brings bytes, then report the end or an error once the bytes are read; writes queue up
    //! to the limit, then "would block" until the loop has sent some. And what an idle
    //! connection holds: no buffers, no queues.

    use super::*;

    fn stream() -> (Stream<UringStream>, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (sock, _) = listener.accept().unwrap();
        (Stream::Plain(UringStream::new(Io::new(sock.into(), 0))), peer)
    }

    #[test]
    fn reads_wait_for_completions_then_see_the_end() {
        let (mut s, _peer) = stream();
        let (mut spares, mut pool) = (Spares::new(8, 4), BufPool::new(64, 1, 0));
        let mut buf = [0u8; 4];
        assert_eq!(
            s.read(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        Io::of(&mut s).received(b"hello", &mut spares, &mut pool);
        assert_eq!(s.read(&mut buf).unwrap(), 4);
        let mut spare = Vec::with_capacity(16);
        assert_eq!(s.read_spare(&mut spare).unwrap(), 1);
        assert_eq!(spare, b"o");
        // An empty reader is handed the buffer whole when everything unread fits in it.
        Io::of(&mut s).received(b"GET / HTTP/1.1", &mut spares, &mut pool);
        let mut input = Vec::with_capacity(64);
        assert_eq!(s.read_spare(&mut input).unwrap(), 14);
        assert_eq!(input, b"GET / HTTP/1.1");
        assert!(input.capacity() >= 64);
        assert_eq!(
            s.read_spare(&mut input).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        Io::of(&mut s).set_eof(true);
        assert_eq!(s.read(&mut buf).unwrap(), 0);
        Io::of(&mut s).fail(io::ErrorKind::ConnectionReset.into(), &mut spares);
        assert_eq!(
            s.read(&mut buf).unwrap_err().kind(),
            io::ErrorKind::ConnectionReset
        );
    }

    #[test]
    fn writes_queue_up_to_the_limit_and_stay_pending_until_sent() {
        let (mut s, _peer) = stream();
        let (mut spares, mut pool) = (Spares::new(8, 4), BufPool::new(64, 4, 0));
        Io::of(&mut s).attach(&mut spares, &mut pool);
        assert_eq!(s.write(b"0123456789").unwrap(), 8);
        assert_eq!(
            s.write(b"x").unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        assert_eq!(s.flush().unwrap_err().kind(), io::ErrorKind::WouldBlock);
        assert!(s.has_pending());
        // The loop hands the queue to a send: room again, still pending until it completes.
        let queued = Io::of(&mut s).take_queued();
        assert_eq!(queued, b"01234567");
        Io::of(&mut s).set_sending(true);
        assert!(s.flush().is_ok() && s.has_pending());
        Io::of(&mut s).set_sending(false);
        Io::of(&mut s).sent_buffer(queued, &mut pool);
        assert!(!s.has_pending());
        // Shutting the sending side waits for what is queued.
        s.write_all(b"ab").unwrap();
        s.shutdown_write().unwrap();
        assert!(Io::of_ref(&s).shut_write(), "not before the bytes are sent");
        Io::of(&mut s).drop_queued();
        Io::of(&mut s).shut_if_sent();
        assert!(!Io::of_ref(&s).shut_write());
    }

    #[test]
    fn an_idle_connection_gives_back_its_buffers_and_queues() {
        let (mut s, _peer) = stream();
        let (mut spares, mut pool) = (Spares::new(8, 4), BufPool::new(64, 4, 0));
        Io::of(&mut s).received(b"GET", &mut spares, &mut pool);
        s.write_all(b"ok").unwrap();
        let io = Io::of(&mut s);
        io.release_buffers(&mut spares, &mut pool);
        assert!(io.queues.is_some(), "bytes unread and unsent: kept");
        io.drop_unread();
        io.drop_queued();
        io.release_buffers(&mut spares, &mut pool);
        assert!(io.queues.is_none());
        assert_eq!(spares.free.len(), 1);
        // An error is kept until a read or write reports it.
        io.fail(io::ErrorKind::BrokenPipe.into(), &mut spares);
        assert!(spares.free.is_empty(), "the spare taken");
        io.release_buffers(&mut spares, &mut pool);
        assert!(io.failed());
        assert_eq!(
            s.write(b"x").unwrap_err().kind(),
            io::ErrorKind::BrokenPipe
        );
        Io::of(&mut s).release_buffers(&mut spares, &mut pool);
        assert!(Io::of_ref(&s).queues.is_none());
    }
}
