//! The transport seam: a connected byte stream, as every model, the message engine and the lab
//! read and write it. Plain TCP and UNIX sockets are transports, and TLS (rustls) over either;
//! one more plugs in here without any driver learning about it.
//!
//! ```text
//!   listener ── accept ── Acceptor (per listener: Plain | Tls) ──> Stream<socket>
//!   connect (msg outbound, lab load) ─────────────────────────────> Stream<Socket>
//!                                                                       │
//!   drive::pump (every model), msg::core, the lab ──> Transport ──> socket | TlsStream<socket>
//! ```
//!
//! Dispatch is static: the pump is generic over the transport, and [`Stream`] and [`Socket`]
//! are enums, so a plain socket costs no more than calling it directly (no `Box<dyn>` per
//! call).
//!
//! What a listener's connections are served over is the listener's choice, its [`Acceptor`]
//! (carried by [`ListenConfig::transport`](super::ListenConfig::transport)): every model and the
//! message engine turn an accepted socket into a [`Stream`] through it, so a new transport is one
//! type here plus one variant of [`Acceptor`] and [`Stream`], and no model changes.
//!
//! File bodies ask the transport first: one that [`Transport::can_send_file`] gets the bytes
//! straight from the page cache (`sendfile(2)`); one that must transform the bytes (encrypt
//! them) cannot, and the pump reads the file in bounded chunks and writes them instead.

use std::fs::File;
use std::io::{self, IoSlice, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

/// A connected byte stream.
pub trait Transport: Read + Write {
    /// Reads once into the spare capacity of `buf` (which must have some) and extends it by
    /// what was read; 0 at the end of the stream. Plain sockets read without zeroing first.
    fn read_spare(&mut self, buf: &mut Vec<u8>) -> io::Result<usize>;

    /// Whether file bytes can go to this transport without passing through user space
    /// ([`Transport::send_file`]). `false`: read the file and write its bytes.
    fn can_send_file(&self) -> bool {
        false
    }

    /// Sends up to `len` bytes of `file` from `*offset`, advancing it; returns the count sent
    /// (0 if the file ends at `*offset`). Only called when [`Transport::can_send_file`].
    /// `WouldBlock` on a full non-blocking socket (or, on a blocking one, when its send timeout
    /// passed).
    fn send_file(&mut self, file: &File, offset: &mut u64, len: u64) -> io::Result<usize> {
        let _ = (file, offset, len);
        Err(io::ErrorKind::Unsupported.into())
    }

    /// Ends our direction of the stream (the peer reads end-of-stream after what was sent).
    fn shutdown_write(&mut self) -> io::Result<()>;

    /// Bytes written to this transport that have not reached the socket yet (a TLS layer's
    /// records, when the socket was full): the output is not out until
    /// [`Write::flush`] has pushed them. Plain sockets hold nothing.
    #[inline]
    fn has_pending(&self) -> bool {
        false
    }

    /// Whether a read that returned less than it was offered emptied the socket, so that the
    /// next read would only say "would block" (true for a plain socket; not for TLS, where a
    /// read returns one record's plaintext while more records may wait).
    #[inline]
    fn short_read_drains(&self) -> bool {
        true
    }

    /// Whether input already taken off the socket waits here to be read (TLS plaintext
    /// decrypted ahead of the reader, or the peer's close_notify): a wait for the socket to
    /// become readable would not see it. Plain sockets hold nothing.
    #[inline]
    fn holds_input(&self) -> bool {
        false
    }

    /// A handshake of the transport's own (TLS) is under way: no application byte can come
    /// before it ends, so the driver times it as it would a request head.
    #[inline]
    fn handshaking(&self) -> bool {
        false
    }

    /// Blocking: drives the transport's handshake (TLS) to its end and sends what it left to
    /// send, without waiting for application bytes after it (a read would): for a blocking
    /// model that looks around once the client could speak (`single`'s parking). Nothing to
    /// do without a handshake.
    #[inline]
    fn finish_handshake(&mut self) -> io::Result<()> {
        Ok(())
    }

    /// Writes the last bytes the connection will send, as [`Write::write`] does. A transport
    /// that ends its stream with a message of its own (TLS's close_notify) adds it once all of
    /// `buf` is taken, so that it leaves in the same write as the last bytes rather than in a
    /// segment of its own after them. [`Transport::shutdown_write`] still ends the sending side.
    #[inline]
    fn write_last(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.send(buf)
    }

    /// Writes what it can of a connection's output: [`Write::write`], unless the transport has
    /// a cheaper way (a plain socket: one raw `sendto(2)`, see `sys::io::send`).
    #[inline]
    fn send(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write(buf)
    }

    /// The connection is being given up with bytes the peer has not taken (it stopped
    /// reading and the write timeout passed, or the server stops): its close becomes a reset
    /// (`SO_LINGER` 0). Otherwise the kernel keeps the socket as an orphan, retrying into a
    /// closed window with its send buffer full, for minutes after the descriptor is gone. A
    /// peer that stalled a transfer gets a reset, as nginx's `reset_timedout_connection` does.
    fn abort(&mut self);

    /// The peer's address, if the socket has one (TCP; not a UNIX socket): what the requests
    /// of the connection carry as their client. Asked once per connection.
    fn peer(&self) -> Option<std::net::SocketAddr> {
        None
    }

    /// The application protocol agreed by ALPN (TLS), once the handshake is done: `h2` makes
    /// the connection HTTP/2's whatever its first bytes are.
    fn alpn(&self) -> Option<&[u8]> {
        None
    }

    /// What every HTTP answer on this connection carries as `Alt-Svc`: the listener's
    /// ([`TlsAcceptor::advertising`](super::tls::TlsAcceptor::advertising)), borrowed for
    /// each answer. `None`: no such field.
    fn alt_svc(&self) -> Option<&[u8]> {
        None
    }
}

/// A transport whose readiness a mio poll reports (the event-loop models, the msg engine).
pub trait Evented: Transport {
    /// What to register with the poll.
    fn source(&mut self) -> &mut dyn mio::event::Source;
}

/// A transport read and written with blocking calls (the blocking models).
pub trait Blocking: Transport + AsRawFd {
    /// `SO_RCVTIMEO`: a read waiting longer fails with `WouldBlock` or `TimedOut`.
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()>;
    /// `SO_SNDTIMEO`: a write waiting longer fails.
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()>;
}

/// A plain socket: reads into spare capacity, `sendfile(2)`, `shutdown(SHUT_WR)`.
macro_rules! plain_socket {
    ($($ty:ty),*) => {$(
        impl Transport for $ty {
            #[inline]
            fn read_spare(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
                super::read_into_spare(&*self, buf)
            }
            #[inline]
            fn send(&mut self, buf: &[u8]) -> io::Result<usize> {
                crate::sys::io::send(&*self, buf)
            }
            #[inline]
            fn can_send_file(&self) -> bool {
                true
            }
            #[inline]
            fn send_file(&mut self, file: &File, offset: &mut u64, len: u64) -> io::Result<usize> {
                let count = usize::try_from(len).unwrap_or(usize::MAX);
                crate::sys::fs::sendfile(&*self, file, offset, count)
            }
            fn shutdown_write(&mut self) -> io::Result<()> {
                self.shutdown(Shutdown::Write)
            }
            fn abort(&mut self) {
                reset_on_close(&*self);
            }
            fn peer(&self) -> Option<std::net::SocketAddr> {
                socket2::SockRef::from(self).peer_addr().ok()?.as_socket()
            }
        }
    )*};
}

/// Makes closing `socket` a reset ([`Transport::abort`]). A UNIX socket frees its buffers on
/// close anyway; the option is harmless there.
pub(crate) fn reset_on_close(socket: &impl std::os::fd::AsFd) {
    let _ = socket2::SockRef::from(socket).set_linger(Some(Duration::ZERO));
}

plain_socket!(
    mio::net::TcpStream,
    mio::net::UnixStream,
    std::net::TcpStream,
    std::os::unix::net::UnixStream,
    socket2::Socket
);

impl Evented for mio::net::TcpStream {
    fn source(&mut self) -> &mut dyn mio::event::Source {
        self
    }
}

impl Evented for mio::net::UnixStream {
    fn source(&mut self) -> &mut dyn mio::event::Source {
        self
    }
}

impl Blocking for std::net::TcpStream {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        std::net::TcpStream::set_read_timeout(self, t)
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        std::net::TcpStream::set_write_timeout(self, t)
    }
}

impl Blocking for std::os::unix::net::UnixStream {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        std::os::unix::net::UnixStream::set_read_timeout(self, t)
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        std::os::unix::net::UnixStream::set_write_timeout(self, t)
    }
}

/// A stream socket of either family, TCP or UNIX: what a listener of either family accepts
/// ([`Listener`](super::Listener)), under a [`Stream`]. Its two parameters are the socket
/// types the holder keeps: non-blocking mio sockets by default (the readiness models, the msg
/// engine, the lab's load generators), blocking std ones in the blocking models
/// ([`BlockingSocket`]). With one family in use the other arm is never taken.
pub enum Socket<T = mio::net::TcpStream, U = mio::net::UnixStream> {
    /// TCP.
    Tcp(T),
    /// A UNIX stream socket.
    Unix(U),
}

/// A blocking socket of either family: what the blocking models accept and serve.
pub type BlockingSocket = Socket<std::net::TcpStream, std::os::unix::net::UnixStream>;

/// Calls `$body` with `$s` bound to the socket inside a [`Socket`].
macro_rules! either {
    ($socket:expr, $s:ident => $body:expr) => {
        match $socket {
            Socket::Tcp($s) => $body,
            Socket::Unix($s) => $body,
        }
    };
}

impl Socket {
    /// The error pending on the socket (`SO_ERROR`): how a non-blocking connect failed.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        either!(self, s => s.take_error())
    }

    /// The peer's address for TCP; `None` for a UNIX socket. `Err` (`NotConnected`) while a
    /// non-blocking connect is still under way.
    pub fn peer_addr(&self) -> io::Result<Option<std::net::SocketAddr>> {
        match self {
            Socket::Tcp(s) => s.peer_addr().map(Some),
            Socket::Unix(s) => s.peer_addr().map(|_| None),
        }
    }
}

impl<T: AsRawFd, U: AsRawFd> AsRawFd for Socket<T, U> {
    fn as_raw_fd(&self) -> RawFd {
        either!(self, s => s.as_raw_fd())
    }
}

impl<T: Into<OwnedFd>, U: Into<OwnedFd>> From<Socket<T, U>> for OwnedFd {
    fn from(socket: Socket<T, U>) -> OwnedFd {
        either!(socket, s => s.into())
    }
}

impl<T: AsFd, U: AsFd> AsFd for Socket<T, U> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        either!(self, s => s.as_fd())
    }
}

impl<T: Read, U: Read> Read for Socket<T, U> {
    #[inline]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        either!(self, s => s.read(buf))
    }
}

impl<T: Write, U: Write> Write for Socket<T, U> {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        either!(self, s => s.write(buf))
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        either!(self, s => s.write_vectored(bufs))
    }
    fn flush(&mut self) -> io::Result<()> {
        either!(self, s => s.flush())
    }
}

impl<T: Transport, U: Transport> Transport for Socket<T, U> {
    #[inline]
    fn read_spare(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        either!(self, s => s.read_spare(buf))
    }
    // Forwarded, or the default (`Write::write`) would reach glibc's `send` and its
    // cancellation wrappers instead of the socket's raw `sendto(2)`: it did, about 60
    // instructions a keep-alive request (callgrind, issue 41).
    #[inline]
    fn send(&mut self, buf: &[u8]) -> io::Result<usize> {
        either!(self, s => s.send(buf))
    }
    #[inline]
    fn write_last(&mut self, buf: &[u8]) -> io::Result<usize> {
        either!(self, s => s.write_last(buf))
    }
    fn can_send_file(&self) -> bool {
        either!(self, s => s.can_send_file())
    }
    fn send_file(&mut self, file: &File, offset: &mut u64, len: u64) -> io::Result<usize> {
        either!(self, s => s.send_file(file, offset, len))
    }
    fn shutdown_write(&mut self) -> io::Result<()> {
        either!(self, s => s.shutdown_write())
    }
    fn abort(&mut self) {
        either!(self, s => s.abort())
    }
    fn peer(&self) -> Option<std::net::SocketAddr> {
        either!(self, s => s.peer())
    }
}

impl<T: Evented, U: Evented> Evented for Socket<T, U> {
    fn source(&mut self) -> &mut dyn mio::event::Source {
        either!(self, s => s.source())
    }
}

impl<T: Blocking, U: Blocking> Blocking for Socket<T, U> {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        either!(self, s => s.set_read_timeout(t))
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        either!(self, s => s.set_write_timeout(t))
    }
}

/// A transport that cannot `sendfile`, over any other: what an encrypting transport looks like
/// to a file body, without the encryption. Drivers serve it like any transport; tests use it
/// to prove the read-and-write path for files.
pub struct NoSendFile<T>(pub T);

impl<T: Read> Read for NoSendFile<T> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl<T: Write> Write for NoSendFile<T> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.write_vectored(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl<T: Transport> Transport for NoSendFile<T> {
    fn read_spare(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        self.0.read_spare(buf)
    }
    fn shutdown_write(&mut self) -> io::Result<()> {
        self.0.shutdown_write()
    }
    fn abort(&mut self) {
        self.0.abort()
    }
    fn peer(&self) -> Option<std::net::SocketAddr> {
        self.0.peer()
    }
}

impl<T: Evented> Evented for NoSendFile<T> {
    fn source(&mut self) -> &mut dyn mio::event::Source {
        self.0.source()
    }
}

impl<T: Blocking> AsRawFd for NoSendFile<T> {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

impl<T: Blocking> Blocking for NoSendFile<T> {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.0.set_read_timeout(t)
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.0.set_write_timeout(t)
    }
}

/// What a listener makes of the sockets it accepts: the transport its connections are served
/// over, chosen per listener ([`ListenConfig::transport`](super::ListenConfig::transport)).
/// Every accept path (each model's, through `drive::pump`, and the message engine's) goes
/// through [`Acceptor::accept`], so serving a listener over another transport is a variant here
/// and one in [`Stream`], not an edit to each model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Acceptor {
    /// The socket itself: bytes as they are, files with `sendfile(2)`.
    #[default]
    Plain,
    /// TLS (rustls) over the socket: files are read and encrypted in bounded chunks.
    Tls(super::tls::TlsAcceptor),
}

/// What a TLS listener says to a connection it refuses at capacity, before any handshake: a
/// fatal `internal_error` alert record (RFC 8446 §6), which clients report as the server's
/// refusal ("tlsv1 alert internal error") rather than as garbage or a network fault. There is
/// no TLS alert for "busy", and a handshake to send a 503 would cost the server most at the
/// moment it can least afford it.
const TLS_REFUSAL: &[u8] = &[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x50];

impl Acceptor {
    /// The bytes written to a connection refused at capacity: the service's own refusal (a
    /// 503) on a plain listener; on a TLS listener, where plaintext would reach the client as
    /// a corrupt record, a fatal `internal_error` alert record.
    pub fn refusal<'a>(&self, plain: &'a [u8]) -> &'a [u8] {
        match self {
            Acceptor::Plain => plain,
            Acceptor::Tls(_) => TLS_REFUSAL,
        }
    }

    /// Turns `socket`, just accepted on this listener (non-blocking for the readiness models,
    /// blocking for the others), into the transport the connection is served over.
    pub fn accept<S: Transport>(&self, socket: S) -> io::Result<Stream<S>> {
        match self {
            Acceptor::Plain => Ok(Stream::Plain(socket)),
            Acceptor::Tls(tls) => Ok(Stream::Tls(Box::new(tls.accept(socket)?))),
        }
    }
}

/// A connection's transport, the one type for it everywhere: what a listener's [`Acceptor`]
/// makes of an accepted socket (every HTTP model, the message engine), and what a client
/// connects over (the engine's outbound connections, the lab's load). `S` is the socket the
/// holder keeps: `mio::net::TcpStream` in the readiness models, a blocking
/// `std::net::TcpStream` in the others, uring's own, or [`Socket`] (either family) in the
/// message engine and the lab. An enum, so with one kind the matches vanish at compile time
/// and with more each call is one branch.
pub enum Stream<S = Socket> {
    /// A plain socket.
    Plain(S),
    /// TLS over the socket (boxed: a TLS connection's state is kilobytes, a socket's a word).
    Tls(Box<super::tls::TlsStream<S>>),
}

/// Calls `$body` with `$s` bound to the transport inside a [`Stream`].
macro_rules! stream {
    ($stream:expr, $s:ident => $body:expr) => {
        match $stream {
            Stream::Plain($s) => $body,
            Stream::Tls($s) => $body,
        }
    };
}

impl<S> Stream<S> {
    /// The socket under the transport (a driver that does its own I/O on it: uring).
    #[inline]
    pub fn socket(&self) -> &S {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => t.get_ref(),
        }
    }

    /// [`Stream::socket`], to change.
    #[inline]
    pub fn socket_mut(&mut self) -> &mut S {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => t.get_mut(),
        }
    }

    /// The TLS session, if the stream is encrypted (its peer's certificate, ALPN, version).
    pub fn tls(&self) -> Option<&super::tls::TlsStream<S>> {
        match self {
            Stream::Plain(_) => None,
            Stream::Tls(t) => Some(t),
        }
    }
}

impl<S: Read + Write> Read for Stream<S> {
    #[inline]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        stream!(self, s => s.read(buf))
    }
}

impl<S: Read + Write> Write for Stream<S> {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        stream!(self, s => s.write(buf))
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        stream!(self, s => s.write_vectored(bufs))
    }
    fn flush(&mut self) -> io::Result<()> {
        stream!(self, s => s.flush())
    }
}

impl<S: Transport> Transport for Stream<S> {
    #[inline]
    fn read_spare(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        stream!(self, s => s.read_spare(buf))
    }
    #[inline]
    fn can_send_file(&self) -> bool {
        stream!(self, s => s.can_send_file())
    }
    #[inline]
    fn send_file(&mut self, file: &File, offset: &mut u64, len: u64) -> io::Result<usize> {
        stream!(self, s => s.send_file(file, offset, len))
    }
    fn shutdown_write(&mut self) -> io::Result<()> {
        stream!(self, s => s.shutdown_write())
    }
    #[inline]
    fn has_pending(&self) -> bool {
        stream!(self, s => s.has_pending())
    }
    #[inline]
    fn short_read_drains(&self) -> bool {
        stream!(self, s => s.short_read_drains())
    }
    #[inline]
    fn holds_input(&self) -> bool {
        stream!(self, s => s.holds_input())
    }
    #[inline]
    fn handshaking(&self) -> bool {
        stream!(self, s => s.handshaking())
    }
    fn finish_handshake(&mut self) -> io::Result<()> {
        stream!(self, s => s.finish_handshake())
    }
    #[inline]
    fn write_last(&mut self, buf: &[u8]) -> io::Result<usize> {
        stream!(self, s => s.write_last(buf))
    }
    #[inline]
    fn send(&mut self, buf: &[u8]) -> io::Result<usize> {
        stream!(self, s => s.send(buf))
    }
    fn abort(&mut self) {
        stream!(self, s => s.abort())
    }
    fn peer(&self) -> Option<std::net::SocketAddr> {
        stream!(self, s => s.peer())
    }
    fn alpn(&self) -> Option<&[u8]> {
        stream!(self, s => s.alpn())
    }
    #[inline]
    fn alt_svc(&self) -> Option<&[u8]> {
        stream!(self, s => s.alt_svc())
    }
}

impl<S: Evented> Evented for Stream<S> {
    fn source(&mut self) -> &mut dyn mio::event::Source {
        stream!(self, s => s.source())
    }
}

impl<S: Blocking> AsRawFd for Stream<S> {
    fn as_raw_fd(&self) -> RawFd {
        stream!(self, s => s.as_raw_fd())
    }
}

impl<S: Blocking> Blocking for Stream<S> {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        stream!(self, s => s.set_read_timeout(t))
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        stream!(self, s => s.set_write_timeout(t))
    }
}
