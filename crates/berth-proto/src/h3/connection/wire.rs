//! HTTP/3's side of the hand-off to the exchange ([`hand_off`]): its request streams' turns,
//! its head sink ([`Qpack`]), and how an answer is framed: HEADERS and DATA on the stream, FIN
//! at the end. Dispatch, refusals, files and replies are the shared hand-off's.

use super::*;
use crate::h3::answer::{self, Qpack};
use crate::h3::frame::{self, kind};
use crate::http::files::{FileError, FileMeta, FileRequest};
use crate::http::hand_off::Streams;
use crate::http::Reply;

impl Connection {
    /// Hands what opening a stream's file found to the connection, which answers it (the
    /// head now, then [`Action::Body`] if bytes of the file follow), then goes on as
    /// [`Connection::process`] does.
    pub fn file<H: Handler>(
        &mut self,
        stream: u64,
        request: &FileRequest,
        found: Result<&FileMeta, FileError>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        if let Some(body) = hand_off::file(self, stream, request, found, cx, handler) {
            return body;
        }
        self.process(cx, handler)
    }

    /// Hands a job's reply for `stream` to the connection, which answers it (if the stream
    /// is still there) and goes on as [`Connection::process`] does.
    pub fn complete<H: Handler>(
        &mut self,
        stream: u64,
        reply: Reply,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        if let Some(body) = hand_off::reply(self, stream, reply, cx, handler) {
            return body;
        }
        self.process(cx, handler)
    }

    /// A piece the driver pulled for `id`'s body goes out; the last ends the stream (after
    /// the trailers, if any).
    pub(super) fn body_piece(
        &mut self,
        id: u64,
        bytes: &mut Vec<u8>,
        pulled: Pulled,
        trailers: Vec<(String, Vec<u8>)>,
    ) {
        let Some(s) = self.requests.get_mut(&id) else {
            return;
        };
        s.pulling = false;
        if pulled == Pulled::Failed {
            // The head promised a length the body cannot meet: the client must not take
            // what came for complete.
            s.turn.stage = Stage::Done;
            self.actions.push_back(Quic::Reset {
                stream: id,
                code: ErrorCode::H3_INTERNAL_ERROR,
            });
            self.stream_done(id);
            return;
        }
        let mut out = Vec::with_capacity(bytes.len() + 8);
        if !bytes.is_empty() {
            frame::write_data_header(bytes.len() as u64, &mut out);
            out.append(bytes);
        }
        let end = s.turn.took(pulled, trailers);
        if end {
            s.turn.stage = Stage::Done;
            let trailers = std::mem::take(&mut s.turn.trailers);
            if !trailers.is_empty() {
                answer::trailer_section(&mut self.encoder, id, &trailers, &mut self.section);
                frame::write_header(kind::HEADERS, self.section.len() as u64, &mut out);
                out.extend_from_slice(&self.section);
            }
        }
        if !out.is_empty() || end {
            self.send(id, out, end);
        }
        if end {
            self.stream_done(id);
        }
    }

    /// The answer is complete: the stream is forgotten, and if the client is still sending,
    /// asked to stop (RFC 9114 §4.1: "the server MAY send a STOP_SENDING frame with error
    /// code H3_NO_ERROR").
    pub(super) fn stream_done(&mut self, id: u64) {
        let Some(s) = self.requests.get_mut(&id) else {
            return;
        };
        if s.recv != Recv::Closed {
            self.actions.push_back(Quic::Stop {
                stream: id,
                code: ErrorCode::H3_NO_ERROR,
            });
            if s.blocked {
                self.decoder.cancel_stream(id);
            }
        }
        if let Some(feed) = s.turn.feed.take() {
            feed.abort(&mut self.passed);
        }
        self.forget(id);
    }
}

impl Streams for Connection {
    const VERSION: crate::http::Version = crate::http::Version::Http3;
    type Sink<'a> = Qpack<'a>;

    fn sink(&mut self, id: u64) -> Qpack<'_> {
        Qpack {
            encoder: &mut self.encoder,
            stream: id,
            section: &mut self.section,
        }
    }

    fn parts(&mut self, id: u64) -> Option<(&mut Turn, &mut Passed)> {
        let s = self.requests.get_mut(&id)?;
        Some((&mut s.turn, &mut self.passed))
    }

    fn turns(&self) -> impl Iterator<Item = (u64, &Turn)> + '_ {
        self.requests.iter().map(|(&id, s)| (id, &s.turn))
    }

    fn held(&self) -> usize {
        self.requests.len()
    }

    fn waiting(&mut self) -> &mut usize {
        &mut self.waiting
    }

    fn peer(&self) -> Option<std::net::SocketAddr> {
        self.peer
    }

    /// QUIC's flow control is QUIC's: a stream always may, as far as HTTP/3 knows.
    fn can_send(&self, _id: u64) -> bool {
        true
    }

    /// Writes the stream's HEADERS (the section [`Qpack`] just wrote) and its first body bytes
    /// as DATA, then FIN unless a `source` follows. True if a source was kept.
    fn send_answer(&mut self, id: u64, status: u16, body: Vec<u8>, source: Option<Source>) -> bool {
        let Some(s) = self.requests.get_mut(&id) else {
            return false;
        };
        let no_body = s.turn.head_only || status < 200 || status == 204 || status == 304;
        let source = if no_body { None } else { source };
        let mut bytes = Vec::with_capacity(self.section.len() + body.len() + 16);
        frame::write_header(kind::HEADERS, self.section.len() as u64, &mut bytes);
        bytes.extend_from_slice(&self.section);
        if !no_body && !body.is_empty() {
            frame::write_data_header(body.len() as u64, &mut bytes);
            bytes.extend_from_slice(&body);
        }
        let end = source.is_none();
        let pulled = source.is_some();
        s.turn.source = source;
        s.turn.stage = if end { Stage::Done } else { Stage::Sending };
        self.send(id, bytes, end);
        if end {
            self.stream_done(id);
        }
        pulled
    }

    fn remove(&mut self, id: u64) {
        self.forget(id);
    }
}
