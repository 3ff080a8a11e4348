//! Bytes a test sends and checks: a pattern whose misplaced chunk shows, and reads until the
//! bytes so far are enough.

use std::io::{self, Read};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// `len` bytes of the test pattern from offset `from`: `i * 7 % 251` for the byte at offset `i`.
/// Its period (251, a prime) divides no chunk or buffer size, so a chunk sent twice, dropped or
/// out of place changes the bytes.
pub fn pattern(from: usize, len: usize) -> Vec<u8> {
    (from..from + len).map(|i| (i * 7 % 251) as u8).collect()
}

/// A stream whose reads can be given a timeout (so [`read_until`] can keep its deadline).
pub trait TimedRead: Read {
    /// Sets the read timeout of the socket underneath.
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()>;
}

impl TimedRead for TcpStream {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, t)
    }
}

impl TimedRead for UnixStream {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        UnixStream::set_read_timeout(self, t)
    }
}

impl TimedRead for berth::net::tls::TlsStream<TcpStream> {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.get_ref().set_read_timeout(t)
    }
}

/// How [`read_until`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadEnd {
    /// The condition held.
    Done,
    /// The peer closed the connection (EOF or reset).
    Closed,
    /// The deadline passed.
    TimedOut,
}

/// Whether `e` says the peer reset or aborted the connection, or the pipe broke.
pub fn is_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}

/// Reads into `out` until `done(out)` holds, the peer closes, or `within` passes; `Err` with
/// the cause for any other read error. Leaves the stream's read timeout at 50 ms or less.
pub fn read_until<S: TimedRead + ?Sized>(
    stream: &mut S,
    out: &mut Vec<u8>,
    within: Duration,
    done: impl Fn(&[u8]) -> bool,
) -> Result<ReadEnd, String> {
    let deadline = Instant::now() + within;
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if done(out) {
            return Ok(ReadEnd::Done);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(ReadEnd::TimedOut);
        }
        stream
            .set_read_timeout(Some(left.min(Duration::from_millis(50))))
            .map_err(|e| e.to_string())?;
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(ReadEnd::Closed),
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(e) if is_reset(&e) => return Ok(ReadEnd::Closed),
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}
