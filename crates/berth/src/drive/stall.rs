//! [`Stalls`]: a blocking socket whose writes end once its peer has taken nothing for the write
//! timeout, however the waiting was split across calls.
//!
//! `SO_SNDTIMEO` bounds one call, not a stall: a blocking `send` or `sendfile` that moves a few
//! bytes before its timeout passes returns them, and the next call waits a whole timeout again.
//! A peer that never reads still lets the kernel take more now and then (the send buffer grows
//! under autotuning), so a stalled download ran to four timeouts, and over TLS, whose layer
//! makes several socket calls per write, longer still (issue 29).
//!
//! So what counts is the peer's progress, not the call's: on a write that did not take
//! everything, the wrapper reads how many bytes the peer has acknowledged (`TCP_INFO`'s
//! `tcpi_bytes_acked`). While that count moves the peer is reading, however slowly; once it
//! has stood still for the write timeout, the write fails with `TimedOut` (the pump then aborts
//! the connection). A stall ends at most one call's wait after the timeout. A write that took
//! everything at once costs two clock reads: the count is read only after a write that was
//! short or waited (an eighth of the timeout or more: a blocking call may wait most of a
//! timeout and still take everything, the send buffer having grown meanwhile), and until the
//! next quick whole one. A socket that keeps no
//! count (not TCP) falls back to "a call that moved bytes is progress".
//!
//! ```text
//!   pump ──> (TLS) ──> Stalls<S> ──> S (blocking socket, SO_SNDTIMEO = write timeout)
//!                         └─ short or slow write: peer's acked bytes moved? not for a
//!                            timeout: TimedOut
//! ```

use std::fs::File;
use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use crate::net::{Blocking, Transport};
use crate::sys::io::poll_writable;
use crate::sys::socket::bytes_acked;

/// A blocking socket `S` whose writes fail once the peer stalls for `timeout` (module docs).
pub(crate) struct Stalls<S> {
    sock: S,
    timeout: Duration,
    /// Since when the peer has taken nothing, and its acknowledged count then; `None` while
    /// writes take everything they are given.
    stalled: Option<(Instant, Option<u64>)>,
}

impl<S: Blocking> Stalls<S> {
    /// `sock`, whose writes fail once its peer takes nothing for `timeout`.
    pub(crate) fn new(sock: S, timeout: Duration) -> io::Result<Stalls<S>> {
        let stalls = Stalls {
            sock,
            timeout,
            stalled: None,
        };
        stalls.set_write_timeout(Some(timeout))?;
        Ok(stalls)
    }

    /// While the peer is watched, waits for room before a write, up to the end of the
    /// timeout: a call then starts only when the kernel will take bytes at once, rather than
    /// wait in the kernel past the deadline (a blocking `sendfile` can wait two `SO_SNDTIMEO`s
    /// in one call). If the deadline passes with no room and the peer acknowledged nothing
    /// since, the write fails.
    fn wait_room(&mut self) -> io::Result<()> {
        while let Some((since, before)) = self.stalled {
            let left = (since + self.timeout).saturating_duration_since(Instant::now());
            if !left.is_zero() && poll_writable(&self.sock, left)? {
                return Ok(());
            }
            if left.is_zero() || Instant::now() >= since + self.timeout {
                let acked = bytes_acked(&self.sock).ok();
                if acked.is_none() || acked == before {
                    return Err(stalled());
                }
                self.stalled = Some((Instant::now(), acked));
            }
        }
        Ok(())
    }

    /// Judges a write of `want` bytes begun at `began` that returned `result`: passes it on,
    /// or fails it if the peer has taken nothing for the timeout. A call that timed out while
    /// the peer still made progress is `Interrupted`, which every writer retries.
    ///
    /// A call is slow if it did not take everything or waited for room (a blocking call that
    /// took everything may still have waited most of a timeout: the send buffer grew under it).
    /// The first slow call starts watching the peer's acknowledged count, each later call
    /// looks again, and the first quick whole write stops watching.
    fn judge(
        &mut self,
        began: Instant,
        want: usize,
        result: io::Result<usize>,
    ) -> io::Result<usize> {
        let whole = match &result {
            Ok(n) => *n >= want,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                false
            }
            Err(_) => return result,
        };
        let now = Instant::now();
        if whole && self.stalled.is_none() && now.duration_since(began) < self.timeout / 8 {
            return result;
        }
        let acked = bytes_acked(&self.sock).ok();
        let moved = match (&self.stalled, acked) {
            (None, _) => true,
            (Some((_, before)), Some(now_acked)) => *before != Some(now_acked),
            // No count to go by: bytes taken by the call are the only sign of the peer.
            (Some(_), None) => matches!(result, Ok(n) if n > 0),
        };
        if moved {
            self.stalled =
                (!whole || now.duration_since(began) >= self.timeout / 8).then_some((now, acked));
        } else if let Some((since, _)) = self.stalled {
            if now.duration_since(since) >= self.timeout {
                return Err(stalled());
            }
        }
        match result {
            Err(_) => Err(io::ErrorKind::Interrupted.into()),
            ok => ok,
        }
    }
}

/// The error of a write to a peer that took nothing for the write timeout.
fn stalled() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "the peer took nothing for the write timeout",
    )
}

impl<S: Blocking> Read for Stalls<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.sock.read(buf)
    }
}

impl<S: Blocking> Write for Stalls<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.wait_room()?;
        let began = Instant::now();
        let result = self.sock.write(buf);
        self.judge(began, buf.len(), result)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let want = bufs.iter().map(|b| b.len()).sum();
        self.wait_room()?;
        let began = Instant::now();
        let result = self.sock.write_vectored(bufs);
        self.judge(began, want, result)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.sock.flush()
    }
}

impl<S: Blocking> Transport for Stalls<S> {
    fn read_spare(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        self.sock.read_spare(buf)
    }

    fn can_send_file(&self) -> bool {
        self.sock.can_send_file()
    }

    fn send_file(&mut self, file: &File, offset: &mut u64, len: u64) -> io::Result<usize> {
        self.wait_room()?;
        let began = Instant::now();
        let result = self.sock.send_file(file, offset, len);
        self.judge(began, usize::try_from(len).unwrap_or(usize::MAX), result)
    }

    fn shutdown_write(&mut self) -> io::Result<()> {
        self.sock.shutdown_write()
    }

    fn has_pending(&self) -> bool {
        self.sock.has_pending()
    }

    fn short_read_drains(&self) -> bool {
        self.sock.short_read_drains()
    }

    fn handshaking(&self) -> bool {
        self.sock.handshaking()
    }

    fn write_last(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.wait_room()?;
        let began = Instant::now();
        let result = self.sock.write_last(buf);
        self.judge(began, buf.len(), result)
    }

    fn abort(&mut self) {
        self.sock.abort()
    }
    fn peer(&self) -> Option<std::net::SocketAddr> {
        self.sock.peer()
    }
}

impl<S: Blocking> AsRawFd for Stalls<S> {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

impl<S: Blocking> Blocking for Stalls<S> {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.sock.set_read_timeout(t)
    }

    /// Each call waits at most a quarter of the timeout in the kernel: a blocking `sendfile`
    /// may wait twice its `SO_SNDTIMEO` in one call (Linux 6.x does, under a peer that reads
    /// nothing), and the watch of the peer starts when the first slow call returns, so a stall
    /// ends at most half a timeout past the timeout. (With half, a stalled download ended at
    /// twice the timeout and a little more.) The timeout itself is the one `new` was given.
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        let quarter = t.map(|t| (t / 4).max(Duration::from_millis(1)));
        self.sock.set_write_timeout(quarter)
    }
}
