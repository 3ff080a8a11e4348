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
        // The FIN is known and nothing is left before it: no body comes, and the request is
        // handed on when the FIN is read (on_fin), not streamed.
        let next = if s.fin && s.pos >= s.inbox.len() {
            Next::End
        } else {
            Next::Body
        };
        let piece = self.config.piece;
        match intake::head(self, id, head, next, piece, cx, handler) {
            Ok(step) => step,
            Err(Malformed) => {
                // §4.1.2: FIN right after a head that declared a body.
                self.counts.stream_errors += 1;
                self.stream_error(id, ErrorCode::H3_MESSAGE_ERROR);
                None
            }
        }
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
        // What a job has yet to take holds back reading the stream (feed_level), and QUIC's
        // window with it: no grant to keep here.
        if intake::piece(self, id, data, cx, handler).is_err() {
            // §4.1.2: content-length that DATA disagrees with makes the request malformed.
            self.counts.stream_errors += 1;
            self.stream_error(id, ErrorCode::H3_MESSAGE_ERROR);
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
        match intake::end(self, id, cx, handler) {
            Ok(step) => Ok(step),
            Err(Malformed) => {
                self.counts.stream_errors += 1;
                self.stream_error(id, ErrorCode::H3_MESSAGE_ERROR);
                Ok(None)
            }
        }
    }

    pub(super) fn mark_discard(&mut self, id: u64) {
        if let Some(s) = self.requests.get_mut(&id) {
            s.turn.intake.discard = true;
        }
    }
}
