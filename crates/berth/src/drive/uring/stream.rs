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
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};

use crate::net::{Accepted, Transport};
use crate::rt::BufPool;

/// A connection's queues and descriptor: its [`UringStream`]'s, reached by its loop too.
pub(super) struct Io {
    /// The socket (non-blocking; only `shutdown` is called on it directly).
    pub sock: TcpStream,
    /// Received bytes; those before `rx_at` have been read.
    pub rx: Vec<u8>,
    pub rx_at: usize,
    /// The peer ended its side (a receive returned 0).
    pub eof: bool,
    /// A receive or send failed: the next read or write reports it.
    pub error: Option<io::Error>,
    /// Written bytes not yet handed to a send.
    pub tx: Vec<u8>,
    /// Most bytes `tx` takes before writes would block.
    pub tx_limit: usize,
    /// A send is in flight (its buffer is the ring's until it completes).
    pub sending: bool,
    /// Our sending side is to be shut once everything written has been sent.
    pub shut_write: bool,
}

impl Io {
    pub fn new(sock: TcpStream, tx_limit: usize) -> Io {
        Io {
            sock,
            rx: Vec::new(),
            rx_at: 0,
            eof: false,
            error: None,
            tx: Vec::new(),
            tx_limit,
            sending: false,
            shut_write: false,
        }
    }

    /// The queues of the connection served over `stream`.
    pub fn of(stream: &mut Accepted<UringStream>) -> &mut Io {
        match stream {
            Accepted::Plain(s) => &mut s.io,
            Accepted::Tls(t) => &mut t.get_mut().io,
        }
    }

    /// [`Io::of`], to look.
    pub fn of_ref(stream: &Accepted<UringStream>) -> &Io {
        match stream {
            Accepted::Plain(s) => &s.io,
            Accepted::Tls(t) => &t.get_ref().io,
        }
    }

    /// Received bytes not read yet.
    pub fn unread(&self) -> usize {
        self.rx.len() - self.rx_at
    }

    /// Bytes written and not yet sent, or being sent.
    pub fn unsent(&self) -> bool {
        self.sending || !self.tx.is_empty()
    }

    /// Appends received bytes (taking a pooled buffer if none is held).
    pub fn received(&mut self, bytes: &[u8], pool: &mut BufPool) {
        if self.rx.capacity() == 0 {
            self.rx = pool.take();
        }
        self.rx.extend_from_slice(bytes);
    }

    /// Gives back empty buffers, so that an idle connection holds none.
    pub fn release_buffers(&mut self, pool: &mut BufPool) {
        if self.unread() == 0 && self.rx.capacity() > 0 {
            self.rx_at = 0;
            pool.put(std::mem::take(&mut self.rx));
        }
        if self.tx.is_empty() && self.tx.capacity() > 0 {
            pool.put(std::mem::take(&mut self.tx));
        }
    }

    /// Shuts our sending side now if that was asked for and nothing is left to send.
    pub fn shut_if_sent(&mut self) {
        if self.shut_write && !self.unsent() {
            self.shut_write = false;
            let _ = self.sock.shutdown(Shutdown::Write);
        }
    }

    /// Copies unread bytes into `out`; 0 if there are none.
    fn take(&mut self, out: &mut [u8]) -> usize {
        let n = out.len().min(self.unread());
        out[..n].copy_from_slice(&self.rx[self.rx_at..self.rx_at + n]);
        self.rx_at += n;
        if self.rx_at == self.rx.len() {
            self.rx.clear();
            self.rx_at = 0;
        }
        n
    }

    /// What a read returns when nothing is unread: the error, the end, or "wait".
    fn nothing_unread(&mut self) -> io::Result<usize> {
        match self.error.take() {
            Some(e) => Err(e),
            None if self.eof => Ok(0),
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
        let io = &mut self.io;
        if let Some(e) = io.error.take() {
            return Err(e);
        }
        let room = io.tx_limit.saturating_sub(io.tx.len());
        if room == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = room.min(buf.len());
        io.tx.extend_from_slice(&buf[..n]);
        Ok(n)
    }

    /// "Would block" while the queue is full; otherwise what is queued goes with the turn's
    /// sends, and the pump may go on (it still sees the bytes pending until they are sent).
    fn flush(&mut self) -> io::Result<()> {
        let io = &self.io;
        if io.tx.len() >= io.tx_limit {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(())
    }
}

impl Transport for UringStream {
    fn read_spare(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let io = &mut self.io;
        let n = (buf.capacity() - buf.len()).min(io.unread());
        if n == 0 {
            return io.nothing_unread();
        }
        let at = io.rx_at;
        buf.extend_from_slice(&io.rx[at..at + n]);
        io.rx_at += n;
        if io.rx_at == io.rx.len() {
            io.rx.clear();
            io.rx_at = 0;
        }
        Ok(n)
    }

    // Files go through the output buffer (read, then written like any output): bounded by one
    // buffer, and sent by the ring like the rest.
    fn can_send_file(&self) -> bool {
        false
    }

    fn send_file(&mut self, _: &File, _: &mut u64, _: u64) -> io::Result<usize> {
        Err(io::ErrorKind::Unsupported.into())
    }

    /// After what was written has been sent (the loop does it then).
    fn shutdown_write(&mut self) -> io::Result<()> {
        let io = &mut self.io;
        io.shut_write = true;
        io.shut_if_sent();
        Ok(())
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
    //! to the limit, then "would block" until the loop has sent some.

    use super::*;

    fn stream(tx_limit: usize) -> (Accepted<UringStream>, TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (sock, _) = listener.accept().unwrap();
        let s = Accepted::Plain(UringStream::new(Io::new(sock, tx_limit)));
        (s, peer)
    }

    #[test]
    fn reads_wait_for_completions_then_see_the_end() {
        let (mut s, _peer) = stream(8);
        let mut pool = BufPool::new(64, 1, 0);
        let mut buf = [0u8; 4];
        assert_eq!(
            s.read(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        Io::of(&mut s).received(b"hello", &mut pool);
        assert_eq!(s.read(&mut buf).unwrap(), 4);
        let mut spare = Vec::with_capacity(16);
        assert_eq!(s.read_spare(&mut spare).unwrap(), 1);
        assert_eq!(spare, b"o");
        Io::of(&mut s).eof = true;
        assert_eq!(s.read(&mut buf).unwrap(), 0);
        Io::of(&mut s).error = Some(io::ErrorKind::ConnectionReset.into());
        assert_eq!(
            s.read(&mut buf).unwrap_err().kind(),
            io::ErrorKind::ConnectionReset
        );
    }

    #[test]
    fn writes_queue_up_to_the_limit_and_stay_pending_until_sent() {
        let (mut s, _peer) = stream(8);
        assert_eq!(s.write(b"0123456789").unwrap(), 8);
        assert_eq!(
            s.write(b"x").unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        assert_eq!(s.flush().unwrap_err().kind(), io::ErrorKind::WouldBlock);
        assert!(s.has_pending());
        // The loop hands the queue to a send: room again, still pending until it completes.
        let queued = std::mem::take(&mut Io::of(&mut s).tx);
        assert_eq!(queued, b"01234567");
        Io::of(&mut s).sending = true;
        assert!(s.flush().is_ok() && s.has_pending());
        Io::of(&mut s).sending = false;
        assert!(!s.has_pending());
        // Shutting the sending side waits for what is queued.
        s.write_all(b"ab").unwrap();
        s.shutdown_write().unwrap();
        assert!(Io::of_ref(&s).shut_write, "not before the bytes are sent");
        Io::of(&mut s).tx.clear();
        Io::of(&mut s).shut_if_sent();
        assert!(!Io::of_ref(&s).shut_write);
    }
}
