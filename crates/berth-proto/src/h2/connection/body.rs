//! Where a stream's answer body comes from once its head is written: a file or a streamed
//! reply's producer, which the driver holds and reads for it. Reading (and encoding, for an
//! answer compressed on the fly), and being woken by a producer, are the driver's: the
//! connection only says which stream may take how much ([`Action::Pull`](super::Action::Pull)), as
//! its windows open, and the driver hands the bytes back
//! ([`Connection::pulled`](super::Connection::pulled)). HTTP/1.1's bodies come from the same
//! driver-held source (`berth::drive::body`), sent as the socket takes them where HTTP/2's are
//! pulled as the windows take them.

/// A streamed reply's bytes are taken from its producer this much at a time, and at most this
/// much of a file is pulled at a time.
pub(super) const TAKE: usize = 64 * 1024;

/// Where a response body's bytes come from, a piece at a time as the windows take them: a
/// source the driver holds, pulled from it ([`Action::Pull`](super::Action::Pull)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    /// A streamed reply's producer; `parked` while it has nothing (until the driver is woken).
    Stream { parked: bool },
    /// A file (counted against the connection's share of files).
    File,
}

/// What the driver found when it read a stream's next bytes for [`Action::Pull`](super::Action::Pull).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pulled {
    /// Bytes (possibly none yet, for an encoder that holds a piece back); more follow.
    More,
    /// Nothing yet: a producer that has not pushed. The stream is not asked again until the
    /// driver is woken for the connection (`Connection::wake_bodies`).
    Empty,
    /// The last bytes: the body is complete.
    Ended,
    /// The read failed (the file shrank since it was opened, or an I/O error): the head
    /// promised a length the body can no longer meet, so the stream is reset.
    Failed,
}
