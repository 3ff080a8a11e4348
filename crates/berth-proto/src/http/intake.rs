//! A multiplexed stream's request as it comes in, the same for HTTP/2 and HTTP/3: its head held
//! until the body is whole, the body taken whole for the handler or passed to a job as it
//! arrives, held to the `content-length` the head declared, and dropped past the body limit,
//! which is answered 413 at once (as HTTP/1.1's session answers it). A codec adds only its
//! framing, its flow control (by what [`Took`] says of each piece) and its stream error (on
//! [`Malformed`]).
//!
//! ```text
//!   codec: head ──> head ──┬─> ended with it ──> hand_off::ready
//!                          ├─> streamed to a job (hand_off::dispatch with the BodyStream)
//!                          └─> held ──> piece, piece .. ──> end ──> hand_off::ready
//! ```

use super::feed::Feed;
use super::hand_off::{self, Stage, Streams, Turn};
use super::request::ReqHead;
use super::{Action, Context, Handler};

/// What a refusal of a body past the limit says.
const TOO_LARGE: &str = "request body too large";

/// The request side of one stream ([`Turn::intake`](hand_off::Turn)).
#[derive(Debug, Default)]
pub(crate) struct Intake {
    /// The request's head, held until its body is complete (none once handed on).
    head: Option<Box<ReqHead>>,
    /// The body as it arrives, for a handler that takes it whole.
    pub(crate) body: Vec<u8>,
    content_length: Option<u64>,
    received: u64,
    /// Past the limit, or answered already, or its job stopped reading: the rest of the body
    /// is read and dropped, and no longer judged against its length.
    pub(crate) discard: bool,
}

impl Intake {
    /// A stream whose head has not come.
    pub(crate) const fn new() -> Self {
        Intake {
            head: None,
            body: Vec::new(),
            content_length: None,
            received: 0,
            discard: false,
        }
    }

    /// Keeps a whole request while it waits its turn ([`hand_off::ready`]).
    pub(crate) fn hold(&mut self, head: ReqHead, body: Vec<u8>) {
        self.head = Some(Box::new(head));
        self.body = body;
    }

    /// The whole request held, when its turn comes ([`hand_off::unpark`]).
    pub(crate) fn take(&mut self) -> Option<(Box<ReqHead>, Vec<u8>)> {
        Some((self.head.take()?, std::mem::take(&mut self.body)))
    }
}

/// What a connection holds of request bodies taken whole (arriving, or whole and waiting
/// their turn): many streams at once must not make it hold many times what one HTTP/1.1
/// connection may. A codec asks before it lets a stream send more ([`WholeBodies::may_take`]):
/// HTTP/2 holds back the stream's window, HTTP/3 stops reading it (QUIC's window holds the
/// client).
#[derive(Debug, Clone, Copy)]
pub(crate) struct WholeBodies {
    bytes: usize,
    /// A whole request waits its turn (for a job): it goes on without the client's help.
    queued: bool,
    /// The lowest stream whose body is arriving whole: it may always go on while nothing
    /// waits, so that the client can always finish one body.
    first: Option<u64>,
}

impl WholeBodies {
    /// Counts what the streams hold.
    pub(crate) fn of<'a>(turns: impl Iterator<Item = (u64, &'a Turn)>) -> Self {
        let mut held = WholeBodies {
            bytes: 0,
            queued: false,
            first: None,
        };
        for (id, t) in turns {
            held.bytes += t.intake.body.len();
            held.queued |= t.stage == Stage::Queued;
            if arriving_whole(t) && held.first.is_none_or(|f| id < f) {
                held.first = Some(id);
            }
        }
        held
    }

    /// Whether stream `id` may be sent more of its body: yes unless it is taken whole and the
    /// connection holds `budget` bytes of such bodies already
    /// ([`Limits::max_body_bytes`](crate::http::Limits::max_body_bytes): what one HTTP/1.1
    /// connection may hold), save for the lowest such stream while no whole request waits.
    pub(crate) fn may_take(&self, id: u64, t: &Turn, budget: usize) -> bool {
        !arriving_whole(t) || self.bytes < budget || self.alone(id, budget)
    }

    /// Whether stream `id` is the one that goes on past `budget`: the lowest whose body is
    /// arriving whole, while no whole request waits.
    pub(crate) fn alone(&self, id: u64, budget: usize) -> bool {
        self.bytes >= budget && self.first == Some(id) && !self.queued
    }
}

/// The stream's body is arriving, to be handed over whole.
pub(crate) fn arriving_whole(t: &Turn) -> bool {
    t.stage == Stage::Pending && t.feed.is_none() && !t.intake.discard && t.intake.head.is_some()
}

/// What became of a piece of body, for the codec's flow control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Took {
    /// Taken into the request, or dropped: the client may send as much again at once.
    Consumed,
    /// Passed to a job that has yet to take it: the client may send more as the job does.
    Held,
}

/// The body disagrees with the `content-length` its head declared (RFC 9113 §8.1.1, RFC 9114
/// §4.1.2): the request is malformed, a stream error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Malformed;

/// What follows a request's head on its stream, as far as the codec knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Body bytes may.
    Body,
    /// Nothing, and the codec will say so ([`end`], HTTP/3's FIN read next).
    End,
    /// Nothing: the head ended the stream (HTTP/2's END_STREAM).
    Ended,
}

/// Stream `id`'s request head is in, checked. A declared body past the limit is answered 413
/// at once. A request the head ended is handed on now; one whose body may come goes now to a
/// handler that streams bodies, with its body to come through a [`Feed`] that paces the
/// client at `mark` bytes the job has yet to take; else the head is held for [`end`].
pub(crate) fn head<S: Streams, H: Handler>(
    s: &mut S,
    id: u64,
    head: ReqHead,
    next: Next,
    mark: usize,
    cx: &Context<'_>,
    handler: &mut H,
) -> Result<Option<Action<H::Job>>, Malformed> {
    if next != Next::Body && head.content_length.is_some_and(|n| n != 0) {
        return Err(Malformed);
    }
    let stream = next == Next::Body && H::STREAMS_BODY && cx.stream_bodies;
    // A request that would be one job too many is taken whole instead, and waits its turn
    // with its body (`hand_off::ready`).
    let stream = stream && !hand_off::at_job_share::<S, H>(s, cx);
    let Some((t, passed)) = s.parts(id) else {
        return Ok(None);
    };
    t.head_only = head.head_only();
    t.intake.content_length = head.content_length;
    if next == Next::Ended {
        return Ok(hand_off::ready(s, id, head, Vec::new(), cx, handler));
    }
    if head
        .content_length
        .is_some_and(|n| n > cx.limits.max_body_bytes as u64)
    {
        t.intake.discard = true;
        hand_off::refuse(s, id, 413, TOO_LARGE, cx, handler);
        return Ok(None);
    }
    if stream {
        let (feed, body) = Feed::open(passed, id, Some(mark));
        t.feed = Some(feed);
        return Ok(hand_off::dispatch(
            s,
            id,
            &head,
            &[],
            Some(body),
            cx,
            handler,
        ));
    }
    t.intake.head = Some(Box::new(head));
    Ok(None)
}

/// A piece of stream `id`'s request body: taken for the handler, passed to the job, or
/// dropped. Past the limit (streamed or not) the rest is dropped, whatever waits for it is
/// told, and the client is answered 413 at once, not after it sent the rest.
pub(crate) fn piece<S: Streams, H: Handler>(
    s: &mut S,
    id: u64,
    data: &[u8],
    cx: &Context<'_>,
    handler: &mut H,
) -> Result<Took, Malformed> {
    let Some((t, passed)) = s.parts(id) else {
        return Ok(Took::Consumed);
    };
    let i = &mut t.intake;
    i.received += data.len() as u64;
    if i.content_length.is_some_and(|n| i.received > n) {
        return Err(Malformed);
    }
    let too_large = !i.discard && i.received > cx.limits.max_body_bytes as u64;
    if too_large {
        i.discard = true;
        i.body = Vec::new();
        i.head = None;
        if let Some(feed) = t.feed.take() {
            feed.abort(passed);
        }
    }
    let took = if i.discard {
        Took::Consumed
    } else if let Some(feed) = &mut t.feed {
        if data.is_empty() || feed.push(passed, data.to_vec()) {
            Took::Held
        } else {
            // The job stopped reading: the rest goes nowhere.
            if let Some(feed) = t.feed.take() {
                feed.abort(passed);
            }
            i.discard = true;
            Took::Consumed
        }
    } else {
        i.body.extend_from_slice(data);
        Took::Consumed
    };
    if too_large && !matches!(t.stage, Stage::Sending | Stage::Done) {
        hand_off::refuse(s, id, 413, TOO_LARGE, cx, handler);
    }
    Ok(took)
}

/// Stream `id`'s request body is complete: its job is told, or its handler asked
/// ([`hand_off::ready`]) if the head was held for it.
pub(crate) fn end<S: Streams, H: Handler>(
    s: &mut S,
    id: u64,
    cx: &Context<'_>,
    handler: &mut H,
) -> Result<Option<Action<H::Job>>, Malformed> {
    let Some((t, passed)) = s.parts(id) else {
        return Ok(None);
    };
    let i = &mut t.intake;
    if !i.discard && i.content_length.is_some_and(|n| n != i.received) {
        return Err(Malformed);
    }
    if let Some(feed) = t.feed.take() {
        feed.end(passed);
    }
    let Some((head, body)) = i.take() else {
        return Ok(None);
    };
    Ok(hand_off::ready(s, id, *head, body, cx, handler))
}
