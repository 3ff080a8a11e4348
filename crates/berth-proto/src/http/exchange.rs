//! The exchange: what becomes of one request, whatever version carried it (DESIGN §11). A
//! codec (HTTP/1.1's [`Session`](super::Session), HTTP/2's connection) turns bytes into a
//! [`Request`] and hands it here; what the application makes of it comes back as an
//! [`Outcome`], and every answer berth writes itself (refusals, a job's reply, a file) is
//! written here, once, through the codec's [`HeadSink`]. A codec adds only its framing and its
//! state: where the body goes, and what comes next on the connection.
//!
//! ```text
//!   codec ── Request ──> ask ──> Outcome: Answered | Job | File | Upgrade | Unanswered
//!     ^                                          │ (the codec hands jobs and files out)
//!     └──── head through HeadSink, body ◄── refuse | reply | files::write_answer
//! ```

use super::chunked::write_chunk;
use super::files::Send;
use super::handler::{Handled, Handler};
use super::request::Request;
use super::response::{
    write_head, write_response, FileSource, Head, HeadSink, Reply, Response, Stamp,
};
use super::stream::BodyStream;
use super::{Action, FileRequest, Streamed};
use crate::upgrade::Switch;

/// What the application made of a request.
#[derive(Debug)]
pub(crate) enum Outcome<J> {
    /// It answered, with this status (the response is written).
    Answered(u16),
    /// The answer needs this job run off the I/O path.
    Job(J),
    /// The answer is this file.
    File(FileRequest),
    /// Switch protocols (HTTP/1.1 only; another version refuses it).
    Upgrade(Switch),
    /// It wrote nothing and handed nothing on: a bug in the handler, answered 500
    /// ([`Outcome::refuse_unanswered`]).
    Unanswered,
}

impl<J> Outcome<J> {
    /// The 500 a handler that said it was done without answering gets.
    pub(crate) const UNANSWERED: (u16, &'static str) = (500, "handler sent no response");
}

/// Asks the handler for `req`'s answer, with its body streamed to it (`body`) or whole (in
/// `req`). A handler that both answered and handed the request on keeps its answer.
pub(crate) fn ask<H: Handler>(
    handler: &mut H,
    req: &Request<'_>,
    body: Option<BodyStream>,
    res: &mut Response<'_>,
) -> Outcome<H::Job> {
    let handled = match body {
        Some(body) => handler.handle_streamed(req, body, res),
        None => handler.handle(req, res),
    };
    match (handled, res.sent) {
        (Handled::Offload(job), None) => Outcome::Job(job),
        (Handled::File(file), None) => Outcome::File(file),
        (Handled::Upgrade(switch), None) => Outcome::Upgrade(switch),
        (Handled::Done, None) => Outcome::Unanswered,
        (handled, Some(status)) => {
            debug_assert!(
                matches!(handled, Handled::Done),
                "handler sent a response and offloaded a job or file"
            );
            Outcome::Answered(status)
        }
    }
}

/// Writes a refusal berth makes itself: `status` with `why` and a newline as a short text body
/// (at most 127 bytes of it, written without allocating; none for HEAD).
#[allow(clippy::too_many_arguments)]
pub(crate) fn refuse(
    out: &mut Vec<u8>,
    sink: &mut dyn HeadSink,
    status: u16,
    why: &str,
    keep_alive: bool,
    head_only: bool,
    stamp: Stamp<'_>,
) {
    let head = Head {
        status,
        content_type: "text/plain",
        extra: &[],
        fields: &[],
        keep_alive,
        stamp,
    };
    let mut body = [0u8; 128];
    let n = why.len().min(body.len() - 1);
    body[..n].copy_from_slice(&why.as_bytes()[..n]);
    body[n] = b'\n';
    // A response to HEAD carries no content, errors included (RFC 9110 §9.3.2).
    write_response(out, sink, &head, &body[..=n], head_only);
}

/// Where the rest of an answer's body comes from once its head (and first bytes) are out:
/// the driver sends it (one answer at a time) or pulls it as windows open (many at once).
#[derive(Debug)]
pub(crate) enum Rest {
    /// A range of a file: one the driver opened for `/files`, or a job's
    /// [`Reply::file`](super::Reply::file), which the driver took.
    File(Send),
    /// A producer's stream, framed as the head sink needs.
    Stream(Streamed),
}

impl Rest {
    /// The driver's step for it, on `stream` (0 where one request is answered at a time).
    pub(crate) fn action<J>(self, stream: u64) -> Action<J> {
        match self {
            Rest::File(Send {
                offset,
                len,
                encode,
            }) => Action::Body {
                stream,
                offset,
                len,
                encode,
            },
            Rest::Stream(streamed) => Action::Stream { stream, streamed },
        }
    }
}

/// A job's reply, as [`reply`] wrote it.
#[derive(Debug)]
pub(crate) struct Replied {
    /// Its status.
    pub status: u16,
    /// Whether the connection may go on after it: not after a body that only the close can
    /// end (HTTP/1.0 has no chunked coding), nor one the job asked to close.
    pub keep_alive: bool,
    /// What follows what was written; `None` for a whole reply, for HEAD and for a status
    /// without content (a producer's stream is then drained and dropped: a stream with
    /// `discard`).
    pub rest: Option<Rest>,
}

/// Writes a job's reply, whatever the version: its head through `sink`, and its body whole, or
/// its first bytes with the rest to follow ([`Rest`]). A streamed body gets the length its
/// producer declared, held to by its stream ([`Reply::with_length`](super::Reply::with_length));
/// else the sink's framing of a body of unknown length (HTTP/1.1's chunked coding, HTTP/2's
/// and HTTP/3's end of stream), or none and the close (HTTP/1.0). A reply that switches
/// protocols reaching here was not the request's to switch: the job's mistake, answered 500.
pub(crate) fn reply(
    out: &mut Vec<u8>,
    sink: &mut dyn HeadSink,
    mut reply: Reply,
    keep_alive: bool,
    head_only: bool,
    stamp: Stamp<'_>,
) -> Replied {
    if reply.switch.is_some() {
        let (status, why) = CANNOT_SWITCH;
        reply = Reply::new(status, "text/plain", format!("{why}\n").into_bytes());
    }
    let keep_alive = keep_alive && !reply.close;
    let bodiless = head_only || matches!(reply.status, 100..=199 | 204 | 304);
    if let Some(file) = reply.file.take() {
        debug_assert!(
            file.source == FileSource::Taken,
            "the driver takes a reply's file before the protocol sees it"
        );
        write_head(out, sink, &reply.head(keep_alive, stamp), Some(file.len));
        let rest = (!bodiless && file.len > 0).then_some(Rest::File(Send {
            offset: file.offset,
            len: file.len,
            encode: None,
        }));
        return Replied {
            status: reply.status,
            keep_alive,
            rest,
        };
    }
    let Some(stream) = reply.stream.take() else {
        write_response(
            out,
            sink,
            &reply.head(keep_alive, stamp),
            &reply.body,
            head_only,
        );
        return Replied {
            status: reply.status,
            keep_alive,
            rest: None,
        };
    };
    let content = !matches!(reply.status, 100..=199 | 204 | 304);
    // A declared length frames the body itself.
    let sized = reply.length.filter(|_| content);
    let chunked = sink.chunks() && content && sized.is_none();
    let keep_alive = keep_alive && (sized.is_some() || !content || sink.frames_unknown_length());
    if chunked {
        reply
            .fields
            .push(("Transfer-Encoding".to_owned(), b"chunked".to_vec()));
    }
    write_head(out, sink, &reply.head(keep_alive, stamp), sized);
    if let (Some(length), false) = (sized, bodiless) {
        // The stream sends what the first bytes leave of the length, and no more.
        let first = reply.body.len() as u64;
        reply.body.truncate(length.min(first) as usize);
        stream.declare(length.saturating_sub(first), first > length);
    }
    if !bodiless && !reply.body.is_empty() {
        if chunked {
            write_chunk(out, &reply.body);
        } else {
            out.extend_from_slice(&reply.body);
        }
    }
    Replied {
        status: reply.status,
        keep_alive,
        rest: Some(Rest::Stream(Streamed::new(stream, chunked, bodiless))),
    }
}

/// The answer to a reply that switches protocols where the request cannot be switched: the
/// job's mistake, not the client's.
pub(crate) const CANNOT_SWITCH: (u16, &str) = (
    500,
    "the server tried to switch protocols for a request that did not ask to",
);
