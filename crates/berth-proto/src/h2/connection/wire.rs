//! HTTP/2's side of the hand-off to the exchange ([`hand_off`]): its streams' turns, its head
//! sink ([`Hpack`]), and how an answer is framed: HEADERS now, its body queued on the stream
//! for the windows. Dispatch, refusals, files and replies are the shared hand-off's.

use super::*;

/// A connection and the output its frames go to: what the shared hand-off works on.
pub(super) struct Wire<'c> {
    conn: &'c mut Connection,
    output: &'c mut Vec<u8>,
}

impl Connection {
    /// The connection as the shared hand-off sees it, writing into `output`.
    pub(super) fn wire<'c>(&'c mut self, output: &'c mut Vec<u8>) -> Wire<'c> {
        Wire { conn: self, output }
    }

    /// Hands what opening a stream's file found to the connection, which answers it: the
    /// head now, then [`Action::Body`] if the answer takes bytes from the file (the driver keeps
    /// it and is asked for them as the windows open, [`Action::Pull`]); else it goes on as
    /// [`Connection::process`] does.
    #[allow(clippy::too_many_arguments)]
    pub fn file<H: Handler>(
        &mut self,
        stream: u64,
        request: &FileRequest,
        found: Result<&FileMeta, FileError>,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        let wire = &mut self.wire(output);
        if let Some(body) = hand_off::file(wire, stream, request, found, cx, handler) {
            return body;
        }
        self.process(input, output, cx, handler)
    }

    /// Hands a job's reply for `stream` to the connection, which answers it (if the stream
    /// is still there) and goes on as [`Connection::process`] does.
    #[allow(clippy::too_many_arguments)]
    pub fn complete<H: Handler>(
        &mut self,
        stream: u64,
        reply: Reply,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        if let Some(body) = hand_off::reply(&mut self.wire(output), stream, reply, cx, handler) {
            return body;
        }
        self.process(input, output, cx, handler)
    }

    /// Answers stream `id` with a status and a short text body ([`hand_off::refuse`]).
    pub(super) fn answer_status<H: Handler>(
        &mut self,
        id: u32,
        status: u16,
        why: &str,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) {
        hand_off::refuse(&mut self.wire(output), id.into(), status, why, cx, handler);
    }

    /// The answer is complete: the stream closes, or, while the client is still sending,
    /// is reset with NO_ERROR so it stops (RFC 9113 §8.1).
    pub(super) fn stream_done(&mut self, id: u32, output: &mut Vec<u8>) {
        let Some(s) = self.streams.get(&id) else {
            return;
        };
        if s.recv_closed {
            self.streams.remove(&id);
            remember(&mut self.closed, id);
        } else {
            frame::write_rst(output, id, ErrorCode::NO_ERROR);
            self.forget(id);
        }
    }
}

/// An id the shared hand-off names: always one of ours (HTTP/2's are 31 bits).
fn id31(id: u64) -> u32 {
    u32::try_from(id).unwrap_or(u32::MAX)
}

impl Streams for Wire<'_> {
    const VERSION: crate::http::Version = crate::http::Version::Http2;
    type Sink<'a>
        = Hpack<'a>
    where
        Self: 'a;

    fn sink(&mut self, _id: u64) -> Hpack<'_> {
        Hpack {
            encoder: &mut self.conn.encoder,
            block: &mut self.conn.answer_block,
        }
    }

    fn parts(&mut self, id: u64) -> Option<(&mut Turn, &mut Passed)> {
        let conn = &mut *self.conn;
        let s = conn.streams.get_mut(&id31(id))?;
        Some((&mut s.turn, &mut conn.passed))
    }

    fn turns(&self) -> impl Iterator<Item = (u64, &Turn)> + '_ {
        self.conn
            .streams
            .iter()
            .map(|(&id, s)| (u64::from(id), &s.turn))
    }

    fn held(&self) -> usize {
        self.conn.streams.len()
    }

    fn waiting(&mut self) -> &mut usize {
        &mut self.conn.waiting
    }

    fn peer(&self) -> Option<std::net::SocketAddr> {
        self.conn.peer
    }

    /// A window open on the stream and on the connection (an answer without a body needs
    /// none).
    fn can_send(&self, id: u64) -> bool {
        self.conn
            .streams
            .get(&id31(id))
            .is_some_and(|s| s.turn.head_only || (s.send_window > 0 && self.conn.send_window > 0))
    }

    /// Writes HEADERS (the block [`Hpack`] just wrote into `answer_block`) and queues the
    /// body on the stream for the windows: `body`, then what `source` yields.
    fn send_answer(&mut self, id: u64, status: u16, body: Vec<u8>, source: Option<Source>) -> bool {
        let id = id31(id);
        let conn = &mut *self.conn;
        let Some(s) = conn.streams.get_mut(&id) else {
            return false;
        };
        let no_body = s.turn.head_only || status < 200 || status == 204 || status == 304;
        let source = if no_body { None } else { source };
        let end = (no_body || body.is_empty()) && source.is_none();
        frame::write_headers(
            self.output,
            id,
            &conn.answer_block,
            end,
            conn.peer_max_frame,
        );
        s.out = if no_body { Vec::new() } else { body };
        s.out_pos = 0;
        s.out_end = source.is_none();
        let pulled = source.is_some();
        s.turn.source = source;
        s.turn.stage = if end { Stage::Done } else { Stage::Sending };
        if end {
            conn.stream_done(id, self.output);
        }
        pulled
    }

    fn remove(&mut self, id: u64) {
        self.conn.streams.remove(&id31(id));
    }
}
