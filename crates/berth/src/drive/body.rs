//! Body sources: response bytes the pump sends from somewhere other than its output buffer:
//! a range of an open file (a `/files` answer), or a streamed body that an application pushes
//! as it goes (a deferred job's [`Streamed`] reply). The session writes the head and says
//! [`Action::Body`](berth_proto::switch::Action::Body) or
//! [`Action::Stream`](berth_proto::switch::Action::Stream), and the pump sends the body
//! with [`Body::send`], whatever the model.
//!
//! How a file's bytes move is the transport's call, not the model's: one that
//! [`can_send_file`](Transport::can_send_file) (a plain socket) gets them straight from the page
//! cache with `sendfile(2)`, [`SENDFILE_MAX`] bytes a call at most; one that cannot (an encrypting
//! transport) gets them read into the pump's output buffer, one pooled buffer at a time, and
//! written like any output. Either way a connection holds an open file and an offset, never
//! more than one buffer of the file's bytes, however large the file or slow the peer.
//!
//! A file compressed on the fly ([`Body::encoded`]) always goes through the output buffer: the
//! file is read [`ENCODE_READ`] bytes at a time into a buffer on the stack, fed to the body's
//! encoder ([`BodyEncoder`]), and what comes out (chunk-framed) is written like any output, at
//! most [`CHUNK`] plain bytes a step; so a connection holds the encoder's state and one
//! buffer, never the body.
//!
//! Where the protocol pulls bodies as its windows open (HTTP/2's streams), the same file and
//! encoder are read with [`Body::pull`] instead: at most what the windows take, or one piece of
//! the encoder's output, into a buffer the protocol frames.
//!
//! A streamed body's chunks are moved into the output buffer, about [`CHUNK`] bytes a time.
//! When the producer has pushed nothing yet, a non-blocking pump parks ([`Sent::Parked`]) until
//! the producer's push wakes its owner; a blocking one waits for the push, up to the write
//! timeout. The stream holds at most its window of bytes, so a slow reader holds back the
//! producer, not memory.

use std::fs::File;

use crate::files::BodyFile;
use std::io;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use berth_proto::h2::Pulled;
use berth_proto::http::{BodyEncoder, Encode, Streamed, Taken};

use crate::net::Transport;

/// The most bytes a step of a read or streamed body moves into the output buffer.
pub const CHUNK: usize = 64 * 1024;

/// The most one `sendfile` call is asked for, so that one connection's large file cannot hold
/// its thread for long (nginx's `sendfile_max_chunk` is 2 MiB). Larger than [`CHUNK`]: the
/// kernel copies no more than the socket takes, and a typical answer (a precompressed page of
/// a few hundred KiB) goes in one call instead of one per 64 KiB, as nginx's does.
pub const SENDFILE_MAX: usize = 1024 * 1024;

/// What a body still has to send.
pub(crate) enum Body {
    /// `remaining` bytes of `file` from `offset`.
    File {
        file: BodyFile,
        offset: u64,
        remaining: u64,
    },
    /// A streamed body, until its producer ends it.
    Stream { streamed: Streamed, ended: bool },
    /// `remaining` bytes of `file` from `offset`, encoded on the way.
    Encoded {
        file: BodyFile,
        offset: u64,
        remaining: u64,
        encoder: Box<BodyEncoder>,
        ended: bool,
    },
}

/// How much of a file is read at a time for its encoder.
pub const ENCODE_READ: usize = 16 * 1024;

/// What one [`Body::send`] call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sent {
    /// The transport took bytes straight from the source (`n` of them; 0: it would block).
    Direct(usize),
    /// The next bytes are in the output buffer, for the pump to write like any output.
    Buffered,
    /// A stream has nothing yet: wait for its producer (the owner is woken).
    Parked,
}

impl Body {
    /// `len` bytes of `file` from `offset`.
    pub(crate) fn file(file: BodyFile, offset: u64, len: u64) -> Body {
        Body::File {
            file,
            offset,
            remaining: len,
        }
    }

    /// `len` bytes of `file` from `offset`, encoded as `encode` says.
    pub(crate) fn encoded(file: BodyFile, offset: u64, len: u64, encode: Encode) -> Body {
        Body::Encoded {
            file,
            offset,
            remaining: len,
            encoder: Box::new(BodyEncoder::new(encode, len)),
            ended: false,
        }
    }

    /// A streamed body.
    pub(crate) fn stream(streamed: Streamed) -> Body {
        Body::Stream {
            streamed,
            ended: false,
        }
    }

    /// Nothing left to send.
    pub(crate) fn is_done(&self) -> bool {
        match self {
            Body::File { remaining, .. } => *remaining == 0,
            Body::Stream { ended, .. } | Body::Encoded { ended, .. } => *ended,
        }
    }

    /// Whether the bytes always go through the output buffer (the pump must lend it one).
    pub(crate) fn is_buffered(&self) -> bool {
        matches!(self, Body::Stream { .. } | Body::Encoded { .. })
    }

    /// Moves the next bytes one step towards `transport`: one `sendfile` call if the transport
    /// can take file bytes directly, else a read of up to `out`'s capacity (`out` must be empty:
    /// the pump calls this once its output is written) into `out`. A file that ends before the
    /// promised length is an error: the Content-Length already sent can no longer be met, and
    /// the connection must end.
    ///
    /// A stream's next chunks go to `out`; with nothing pushed, `wait` says how long to block
    /// for a push (`None`: park at once). A wait that runs out is a timeout error.
    pub(crate) fn send<T: Transport>(
        &mut self,
        transport: &mut T,
        out: &mut Vec<u8>,
        wait: Option<Duration>,
    ) -> io::Result<Sent> {
        let (file, offset, remaining) = match self {
            Body::File {
                file,
                offset,
                remaining,
            } => (file, offset, remaining),
            Body::Stream { streamed, ended } => {
                debug_assert!(out.is_empty(), "a body chunk over unwritten output");
                let taken = match wait {
                    None => streamed.take(out, CHUNK),
                    Some(wait) => super::blocking::take_within(streamed, out, CHUNK, wait),
                };
                return match taken {
                    Taken::Bytes(_) => Ok(Sent::Buffered),
                    Taken::Ended => {
                        *ended = true;
                        Ok(Sent::Buffered)
                    }
                    Taken::Aborted => Err(io::Error::other(
                        "the application failed in the middle of its body",
                    )),
                    Taken::Empty if wait.is_some() => Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the application sent no more of its body within the write timeout",
                    )),
                    Taken::Empty => Ok(Sent::Parked),
                };
            }
            Body::Encoded {
                file,
                offset,
                remaining,
                encoder,
                ended,
            } => {
                debug_assert!(out.is_empty(), "a body chunk over unwritten output");
                return encode_step(file, offset, remaining, encoder, ended, out);
            }
        };
        if transport.can_send_file() {
            let n = transport.send_file(file, offset, (*remaining).min(SENDFILE_MAX as u64))?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            *remaining -= n as u64;
            return Ok(Sent::Direct(n));
        }
        debug_assert!(out.is_empty(), "a body chunk read over unwritten output");
        let want = (out.capacity() as u64).min(*remaining) as usize;
        out.resize(want, 0);
        let n = read_chunk(file, out, *offset);
        out.truncate(*n.as_ref().unwrap_or(&0));
        let n = n?;
        *offset += n as u64;
        *remaining -= n as u64;
        Ok(Sent::Buffered)
    }
}

impl Body {
    /// The next bytes of a body for a protocol that pulls them (see the module docs),
    /// appended to `out`: at most `max` bytes of a plain file or of what a producer pushed, or
    /// one piece of an encoded file's output (its trailer with the last). A file that ends
    /// early is an error, as for [`Body::send`]; so is a producer that failed.
    pub(crate) fn pull(&mut self, out: &mut Vec<u8>, max: usize) -> io::Result<Pulled> {
        match self {
            Body::File {
                file,
                offset,
                remaining,
            } => {
                let want = (*remaining).min(max.min(CHUNK) as u64) as usize;
                let start = out.len();
                // Read into the output's spare room: no zeroing of 64 KiB a piece first.
                while out.len() < start + want {
                    let left = start + want - out.len();
                    match crate::sys::io::pread_into_spare(&**file, out, left, *offset) {
                        Ok(0) => {
                            out.truncate(start);
                            return Err(io::ErrorKind::UnexpectedEof.into());
                        }
                        Ok(n) => {
                            *offset += n as u64;
                            *remaining -= n as u64;
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            out.truncate(start);
                            return Err(e);
                        }
                    }
                }
                Ok(if *remaining == 0 {
                    Pulled::Ended
                } else {
                    Pulled::More
                })
            }
            Body::Encoded {
                file,
                offset,
                remaining,
                encoder,
                ended,
            } => {
                encode_step(file, offset, remaining, encoder, ended, out)?;
                Ok(if *ended { Pulled::Ended } else { Pulled::More })
            }
            Body::Stream { streamed, ended } => match streamed.take(out, max.min(CHUNK)) {
                Taken::Bytes(_) => Ok(Pulled::More),
                Taken::Empty => Ok(Pulled::Empty),
                Taken::Ended => {
                    *ended = true;
                    Ok(Pulled::Ended)
                }
                Taken::Aborted => Err(io::Error::other(
                    "the application failed in the middle of its body",
                )),
            },
        }
    }

    /// A producer's trailers, once it has ended (none for a file): for a protocol that
    /// frames them itself.
    pub(crate) fn take_trailers(&self) -> Vec<(String, Vec<u8>)> {
        match self {
            Body::Stream { streamed, .. } => streamed.take_trailers(),
            _ => Vec::new(),
        }
    }
}

/// One step of an encoded body: reads and encodes until some encoded bytes are in `out`, at
/// most [`CHUNK`] plain bytes; at the end of the file, the encoder's trailer.
fn encode_step(
    file: &File,
    offset: &mut u64,
    remaining: &mut u64,
    encoder: &mut BodyEncoder,
    ended: &mut bool,
    out: &mut Vec<u8>,
) -> io::Result<Sent> {
    let mut buf = [0u8; ENCODE_READ];
    let mut read = 0;
    while out.is_empty() && read < CHUNK {
        if *remaining == 0 {
            encoder.finish(out).map_err(io::Error::other)?;
            *ended = true;
            break;
        }
        let want = (*remaining).min(ENCODE_READ as u64) as usize;
        let n = read_chunk(file, &mut buf[..want], *offset)?;
        *offset += n as u64;
        *remaining -= n as u64;
        read += n;
        encoder.feed(&buf[..n], out).map_err(io::Error::other)?;
    }
    Ok(Sent::Buffered)
}

/// Reads up to `buf.len()` bytes of `file` at `offset`, retrying interruptions. A file that
/// ends first is an error (see [`Body::send`]).
fn read_chunk(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    loop {
        match file.read_at(buf, offset) {
            Ok(0) if !buf.is_empty() => return Err(io::ErrorKind::UnexpectedEof.into()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::transport::NoSendFile;

    /// A transport into memory that cannot `sendfile`: what the buffered path writes to.
    struct Memory;

    impl io::Read for Memory {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            Ok(0)
        }
    }

    impl io::Write for Memory {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Transport for Memory {
        fn read_spare(&mut self, _: &mut Vec<u8>) -> io::Result<usize> {
            Ok(0)
        }
        fn shutdown_write(&mut self) -> io::Result<()> {
            Ok(())
        }
        fn abort(&mut self) {}
    }

    fn scratch_file(name: &str, data: &[u8]) -> (std::path::PathBuf, File) {
        let path = std::env::temp_dir().join(format!("berth-body-{name}-{}", std::process::id()));
        std::fs::write(&path, data).unwrap();
        let file = File::open(&path).unwrap();
        (path, file)
    }

    /// Read into the output buffer (a transport that cannot `sendfile`): exactly the range,
    /// never more than the buffer's capacity at a time, and a file shorter than promised is an
    /// error.
    #[test]
    fn a_buffered_body_sends_exactly_the_range_in_bounded_chunks() {
        let data: Vec<u8> = (0..(3 * CHUNK + 17)).map(|i| (i % 251) as u8).collect();
        let (path, file) = scratch_file("buffered", &data);
        let mut body = Body::file(
            BodyFile::unbudgeted(file.try_clone().unwrap()),
            5,
            data.len() as u64 - 10,
        );
        let mut out = Vec::with_capacity(16 * 1024);
        let capacity = out.capacity();
        let mut sent = Vec::new();
        let mut transport = NoSendFile(Memory);
        while !body.is_done() {
            assert_eq!(
                body.send(&mut transport, &mut out, None).unwrap(),
                Sent::Buffered
            );
            assert!(!out.is_empty() && out.len() <= capacity, "{}", out.len());
            sent.append(&mut out);
        }
        assert_eq!(sent, &data[5..data.len() - 5]);
        assert_eq!(
            out.capacity(),
            capacity,
            "one buffer, whatever the file size"
        );

        let mut short = Body::file(BodyFile::unbudgeted(file), 0, data.len() as u64 + 1);
        let mut out = Vec::with_capacity(4 * CHUNK);
        while !short.is_done() {
            match short.send(&mut transport, &mut out, None) {
                Ok(_) => out.clear(),
                Err(e) => {
                    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
                    assert!(out.is_empty(), "nothing of a failed read is sent");
                    let _ = std::fs::remove_file(&path);
                    return;
                }
            }
        }
        panic!("a file shorter than promised is an error");
    }
}
