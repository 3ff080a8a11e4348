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

use super::handler::{Handled, Handler};
use super::request::Request;
use super::response::{write_head, write_response, Head, HeadSink, Reply, Response, Stamp};
use super::stream::BodyStream;
use super::FileRequest;
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

/// Writes a job's reply: whole (`streamed` is `None`), or, for a streamed one, its head with
/// the length it declared (`Some(Some(length))`) or none, with whatever the version adds for a
/// body of unknown length listed by the caller in `reply.fields` first (HTTP/1.1's
/// `Transfer-Encoding: chunked`); its first bytes are the caller's to frame. Returns the
/// status.
#[allow(clippy::too_many_arguments)]
pub(crate) fn reply(
    out: &mut Vec<u8>,
    sink: &mut dyn HeadSink,
    reply: &Reply,
    streamed: Option<Option<u64>>,
    keep_alive: bool,
    head_only: bool,
    stamp: Stamp<'_>,
) -> u16 {
    let head = reply.head(keep_alive, stamp);
    match streamed {
        Some(length) => write_head(out, sink, &head, length),
        None => write_response(out, sink, &head, &reply.body, head_only),
    };
    reply.status
}

/// The answer to a reply that switches protocols where the request cannot be switched: the
/// job's mistake, not the client's.
pub(crate) const CANNOT_SWITCH: (u16, &str) = (
    500,
    "the server tried to switch protocols for a request that did not ask to",
);
