//! A request stream's bytes in (RFC 9114 §4.1): HEADERS (QPACK-decoded, possibly blocked on
//! the client's encoder stream, then checked as HTTP/2 checks a request: `h2::head`), DATA
//! (the body, whole for the handler or fed to a job as it arrives, bounded by the body
//! limit and its `content-length`), optional trailing HEADERS, then FIN. Any other order is
//! H3_FRAME_UNEXPECTED; a malformed request is a stream error, H3_MESSAGE_ERROR.

use super::*;
use crate::h2::head::{check_request, check_trailers, Refusal};
use crate::h3::frame::{Event, Frame};
use crate::h3::qpack::{Decoded, Field};

/// A frame reader's event, owned, so that the stream can be let go of while it is acted on.
enum Ev {
    Data(Vec<u8>),
    Headers(Vec<u8>),
    Oversized,
    Other,
}

impl Connection {
    /// Reads stream `id`'s bytes until they run out, it blocks, or work for the driver comes
    /// of it.
    pub(super) fn read_request<H: Handler>(
        &mut self,
        id: u64,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Result<Option<Action<H::Job>>, Fail> {
        loop {
            let piece = self.config.piece;
            let Some(s) = self.requests.get_mut(&id) else {
                return Ok(None);
            };
            s.clock.get_or_insert(cx.now);
            if s.blocked || s.turn.reset || s.recv == Recv::Closed {
                return Ok(None);
            }
            // A job that has not taken what it was fed holds the stream (QUIC's window then
            // holds the client): read on when it makes room.
            if s.turn.feed.as_ref().is_some_and(|f| f.queued() >= piece) {
                return Ok(None);
            }
            let inbox = std::mem::take(&mut s.inbox);
            let read = s.reader.read(&inbox[s.pos..]).map(|(used, ev)| {
                let ev = ev.map(|ev| match ev {
                    Event::Data { chunk, .. } => Ev::Data(chunk.to_vec()),
                    Event::Frame(Frame::Headers(section)) => Ev::Headers(section.to_vec()),
                    Event::Oversized { .. } => Ev::Oversized,
                    Event::Frame(_) => Ev::Other,
                });
                (used, ev)
            });
            s.inbox = inbox;
            let (used, ev) = read?;
            s.pos += used;
            let Some(ev) = ev else {
                if s.pos >= s.inbox.len() {
                    s.inbox.clear();
                    s.pos = 0;
                    if s.fin {
                        s.reader.finish()?;
                        return self.on_fin(id, cx, handler);
                    }
                }
                return Ok(None);
            };
            let out = match (s.recv, ev) {
                (Recv::Head, Ev::Headers(section)) => {
                    s.recv = Recv::Body;
                    self.counts.requests += 1;
                    match self.decoder.decode(id, &section) {
                        Ok(Decoded::Blocked) => {
                            s.blocked = true;
                            None
                        }
                        Ok(decoded) => self.on_head(id, decoded, cx, handler),
                        Err(e) => return self.section_error(id, e),
                    }
                }
                (Recv::Head, Ev::Oversized) => {
                    s.recv = Recv::Body;
                    self.counts.requests += 1;
                    self.decoder.cancel_stream(id);
                    self.on_head(id, Decoded::TooLarge, cx, handler)
                }
                (Recv::Body, Ev::Headers(section)) => {
                    s.recv = Recv::Trailers;
                    match self.decoder.decode(id, &section) {
                        Ok(Decoded::Blocked) => {
                            s.blocked = true;
                            None
                        }
                        Ok(decoded) => {
                            self.on_trailers(id, decoded);
                            None
                        }
                        Err(e) => return self.section_error(id, e),
                    }
                }
                (Recv::Body, Ev::Oversized) => {
                    self.decoder.cancel_stream(id);
                    self.counts.stream_errors += 1;
                    self.stream_error(id, ErrorCode::H3_EXCESSIVE_LOAD);
                    None
                }
                (Recv::Body, Ev::Data(chunk)) => self.on_data(id, &chunk, cx, handler),
                (Recv::Head, Ev::Data(_)) => {
                    // §4.1: "Receipt of an invalid sequence of frames MUST be treated as a
                    // connection error of type H3_FRAME_UNEXPECTED."
                    return Err(H3Error::conn(
                        ErrorCode::H3_FRAME_UNEXPECTED,
                        "DATA before HEADERS on a request stream",
                    ));
                }
                (Recv::Trailers, Ev::Data(_) | Ev::Headers(_) | Ev::Oversized) => {
                    return Err(H3Error::conn(
                        ErrorCode::H3_FRAME_UNEXPECTED,
                        "a frame after the trailers",
                    ));
                }
                (_, Ev::Other) | (Recv::Closed, _) => None,
            };
            if out.is_some() {
                return Ok(out);
            }
        }
    }

    /// A field section failed to decode: a stream error for a section that cannot be read
    /// (an integer past berth's limit), else the connection's.
    fn section_error<J>(&mut self, id: u64, e: Error) -> Result<Option<Action<J>>, Fail> {
        match e {
            Error::Peer(e) if e.stream => {
                self.counts.stream_errors += 1;
                self.stream_error(id, e.code);
                Ok(None)
            }
            e => Err(qpack_fail(e)),
        }
    }

    /// A field section that was blocked is decoded: the stream goes on where it stopped.
    pub(super) fn unblocked<H: Handler>(
        &mut self,
        id: u64,
        decoded: Decoded,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Result<Option<Action<H::Job>>, Fail> {
        let Some(s) = self.requests.get_mut(&id) else {
            return Ok(None);
        };
        s.blocked = false;
        if s.recv == Recv::Trailers {
            self.on_trailers(id, decoded);
            return Ok(None);
        }
        if let Some(out) = self.on_head(id, decoded, cx, handler) {
            return Ok(Some(out));
        }
        self.read_request(id, cx, handler)
    }

    /// The request's field section is decoded: checked, then answered or kept for its body.
    fn on_head<H: Handler>(
        &mut self,
        id: u64,
        decoded: Decoded,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Option<Action<H::Job>> {
        let fields: Vec<Field> = match decoded {
            Decoded::Fields(fields) => fields,
            Decoded::Blocked => return None,
            Decoded::TooLarge => {
                // RFC 9114 §4.2.2: past SETTINGS_MAX_FIELD_SECTION_SIZE, answered 431.
                self.counts.oversized_heads += 1;
                self.mark_discard(id);
                hand_off::refuse(
                    self,
                    id,
                    431,
                    "request header fields too large",
                    cx,
                    handler,
                );
                return None;
            }
        };
        // Past the field count HTTP/1.1 allows (the pseudo-fields not counted), as over
        // HTTP/1.1: 431. The section size bounds the count too, but 32 bytes a field lets a
        // few hundred through.
        let regular = fields
            .iter()
            .filter(|f| f.name.first() != Some(&b':'))
            .count();
        if regular > cx.limits.max_headers {
            self.counts.oversized_heads += 1;
            self.mark_discard(id);
            hand_off::refuse(self, id, 431, "too many request header fields", cx, handler);
            return None;
        }
        // HTTP/3's request rules (§4.2, §4.3.1) are HTTP/2's: the same check.
        let head = match check_request(fields, cx.limits) {
            Ok(head) => head,
            Err(Refusal::Malformed(_)) => {
                self.counts.stream_errors += 1;
                self.stream_error(id, ErrorCode::H3_MESSAGE_ERROR);
                return None;
            }
            Err(Refusal::Status(status, why)) => {
                self.mark_discard(id);
                hand_off::refuse(self, id, status, why, cx, handler);
                return None;
            }
        };
        let s = self.requests.get_mut(&id)?;
        s.head_done = true;
        // The body timeout runs from here.
        s.clock = Some(cx.now);
        s.turn.head_only = head.head_only();
        s.content_length = head.content_length;
        if head
            .content_length
            .is_some_and(|n| n > cx.limits.max_body_bytes as u64)
        {
            s.discard = true;
            hand_off::refuse(self, id, 413, "request body too large", cx, handler);
            return None;
        }
        let whole = s.fin && s.pos >= s.inbox.len();
        let share_left = !hand_off::at_job_share::<_, H>(self, cx);
        let s = self.requests.get_mut(&id)?;
        if H::STREAMS_BODY && cx.stream_bodies && share_left && !whole {
            let (feed, stream) = Feed::open(&mut self.passed, id, Some(self.config.piece));
            s.turn.feed = Some(feed);
            return hand_off::dispatch(self, id, &head, &[], Some(stream), cx, handler);
        }
        s.head = Some(Box::new(head));
        None
    }

    /// The trailing field section: checked and dropped (berth's Request has no place for
    /// trailers); a malformed one is a stream error.
    fn on_trailers(&mut self, id: u64, decoded: Decoded) {
        let ok = match decoded {
            Decoded::Fields(fields) => check_trailers(&fields).is_ok(),
            Decoded::Blocked => return,
            Decoded::TooLarge => false,
        };
        if !ok {
            self.counts.stream_errors += 1;
            self.stream_error(id, ErrorCode::H3_MESSAGE_ERROR);
        }
    }

    /// A piece of the request body.
    fn on_data<H: Handler>(
        &mut self,
        id: u64,
        data: &[u8],
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Option<Action<H::Job>> {
        let s = self.requests.get_mut(&id)?;
        s.clock = Some(cx.now);
        s.received += data.len() as u64;
        if s.content_length.is_some_and(|n| s.received > n) {
            // §4.1.2: content-length that DATA disagrees with makes the request malformed.
            self.counts.stream_errors += 1;
            self.stream_error(id, ErrorCode::H3_MESSAGE_ERROR);
            return None;
        }
        // Past the limit: dropped from here on, and answered 413 at once.
        let too_large = !s.discard && s.received > cx.limits.max_body_bytes as u64;
        if too_large {
            s.discard = true;
            s.body = Vec::new();
            s.head = None;
            if let Some(feed) = s.turn.feed.take() {
                feed.abort(&mut self.passed);
            }
        }
        if s.discard {
        } else if let Some(feed) = &mut s.turn.feed {
            if !data.is_empty() && !feed.push(&mut self.passed, data.to_vec()) {
                // The job stopped reading: the rest is dropped.
                if let Some(feed) = s.turn.feed.take() {
                    feed.abort(&mut self.passed);
                }
                s.discard = true;
            }
        } else {
            s.body.extend_from_slice(data);
        }
        if too_large && s.turn.stage == Stage::Pending {
            hand_off::refuse(self, id, 413, "request body too large", cx, handler);
        }
        None
    }

    /// FIN: the request is complete (or incomplete: no HEADERS came).
    fn on_fin<H: Handler>(
        &mut self,
        id: u64,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Result<Option<Action<H::Job>>, Fail> {
        let Some(s) = self.requests.get_mut(&id) else {
            return Ok(None);
        };
        let before = s.recv;
        s.recv = Recv::Closed;
        if before == Recv::Head {
            // §4.1.2: a request stream closed without a complete request.
            self.counts.stream_errors += 1;
            self.stream_error(id, ErrorCode::H3_REQUEST_INCOMPLETE);
            return Ok(None);
        }
        if s.content_length.is_some_and(|n| n != s.received) && !s.discard {
            self.counts.stream_errors += 1;
            self.stream_error(id, ErrorCode::H3_MESSAGE_ERROR);
            return Ok(None);
        }
        if let Some(feed) = s.turn.feed.take() {
            feed.end(&mut self.passed);
        }
        if s.discard && s.turn.stage == Stage::Pending {
            s.head = None;
            hand_off::refuse(self, id, 413, "request body too large", cx, handler);
            return Ok(None);
        }
        if s.turn.stage == Stage::Done {
            self.forget(id);
            return Ok(None);
        }
        match s.head.take() {
            Some(head) => {
                let body = std::mem::take(&mut s.body);
                Ok(hand_off::ready(self, id, *head, body, cx, handler))
            }
            None => Ok(None),
        }
    }

    pub(super) fn mark_discard(&mut self, id: u64) {
        if let Some(s) = self.requests.get_mut(&id) {
            s.discard = true;
        }
    }
}
