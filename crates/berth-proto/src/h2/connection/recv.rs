//! Frames in: a stream's request head (HEADERS and its CONTINUATIONs, decoded and checked),
//! its body (DATA within the stream's and the connection's windows, to the handler whole or
//! to a job as it arrives) and its trailers.

use super::*;

impl Connection {
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    pub(super) fn on_data<H: Handler>(
        &mut self,
        id: u32,
        end_stream: bool,
        data: &[u8],
        flow: u32,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Result<Option<Action<H::Job>>, Fail> {
        self.recv_window -= i64::from(flow);
        if self.recv_window < 0 {
            return Err(Fail::Conn(
                ErrorCode::FLOW_CONTROL_ERROR,
                "DATA past the connection window",
            ));
        }
        // Whatever happens to the bytes, the connection has taken them: stream windows
        // bound what is held.
        self.conn_grant += flow;
        self.count_empty(data.is_empty() && !end_stream)?;
        // A zombie (reset while its job is out) is a closed stream like one that is gone:
        // STREAM_CLOSED after the client's own reset, silence after berth's (§5.1, §5.4.2).
        let Some(s) = self.streams.get_mut(&id).filter(|s| !s.turn.reset) else {
            if id > self.highest {
                return Err(Fail::Conn(
                    ErrorCode::PROTOCOL_ERROR,
                    "DATA on an idle stream",
                ));
            }
            if !self.ignored(id) && !self.reset.contains(&id) {
                self.reset_stream(id, ErrorCode::STREAM_CLOSED, output)?;
            }
            return Ok(None);
        };
        if s.recv_closed {
            self.reset_stream(id, ErrorCode::STREAM_CLOSED, output)?;
            return Ok(None);
        }
        s.recv_window -= i64::from(flow);
        if s.recv_window < 0 {
            self.reset_stream(id, ErrorCode::FLOW_CONTROL_ERROR, output)?;
            return Ok(None);
        }
        s.received += data.len() as u64;
        let pad = flow - data.len() as u32;
        s.grant += pad;
        if s.content_length.is_some_and(|n| s.received > n)
            || (end_stream && s.content_length.is_some_and(|n| s.received != n))
        {
            // §8.1.1: DATA that disagrees with content-length makes the request malformed.
            self.reset_stream(id, ErrorCode::PROTOCOL_ERROR, output)?;
            return Ok(None);
        }
        // Past the limit (streamed or not): the body is dropped from here on, whatever waits
        // for it is told, and the client is answered 413 at once, not after it sent the rest.
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
            s.grant += data.len() as u32;
        } else if let Some(feed) = &mut s.turn.feed {
            if !data.is_empty() && !feed.push(&mut self.passed, data.to_vec()) {
                // The job stopped reading: the rest is dropped, and granted at once.
                if let Some(feed) = s.turn.feed.take() {
                    feed.abort(&mut self.passed);
                }
                s.discard = true;
                s.grant += data.len() as u32;
            } else {
                // Granted as the job takes it (grant_windows).
                s.held += data.len() as u32;
            }
        } else {
            // Buffered whole for the handler: taking it into the body is consuming it.
            s.grant += data.len() as u32;
            s.body.extend_from_slice(data);
        }
        let answered = matches!(s.turn.stage, Stage::Sending | Stage::Done);
        if end_stream {
            s.recv_closed = true;
        }
        if too_large && !answered {
            self.answer_status(id, 413, "request body too large", output, cx, handler);
        }
        if !end_stream {
            return Ok(None);
        }
        self.end_of_body(id, output, cx, handler)
    }

    /// The request's body is complete: its job is told, or its handler asked.
    #[allow(clippy::type_complexity)]
    pub(super) fn end_of_body<H: Handler>(
        &mut self,
        id: u32,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Result<Option<Action<H::Job>>, Fail> {
        let Some(s) = self.streams.get_mut(&id) else {
            return Ok(None);
        };
        if let Some(feed) = s.turn.feed.take() {
            feed.end(&mut self.passed);
        }
        if s.discard && s.turn.stage == Stage::Pending {
            s.head = None;
            self.answer_status(id, 413, "request body too large", output, cx, handler);
            return Ok(None);
        }
        if s.turn.stage == Stage::Done {
            self.streams.remove(&id);
            remember(&mut self.closed, id);
            return Ok(None);
        }
        match s.head.take() {
            Some(head) => {
                let body = std::mem::take(&mut s.body);
                Ok(hand_off::ready(
                    &mut self.wire(output),
                    id.into(),
                    *head,
                    body,
                    cx,
                    handler,
                ))
            }
            None => Ok(None),
        }
    }

    /// Classifies a HEADERS frame and starts its block.
    pub(super) fn on_headers(
        &mut self,
        id: u32,
        end_stream: bool,
        block: &[u8],
        self_dependent: bool,
    ) -> Result<(), Fail> {
        if id % 2 == 0 {
            return Err(Fail::Conn(
                ErrorCode::PROTOCOL_ERROR,
                "even stream id from a client",
            ));
        }
        // A zombie (reset while its job is out) is classified as a gone stream, as in on_data.
        let for_ = if let Some(s) = self.streams.get(&id).filter(|s| !s.turn.reset) {
            if s.recv_closed {
                BlockFor::Closed
            } else {
                BlockFor::Trailers
            }
        } else if id > self.highest {
            self.highest = id;
            if self.goaway_sent {
                // §6.8: past the GOAWAY's last stream, the client retries elsewhere.
                BlockFor::Ignore
            } else {
                self.last_stream = id;
                BlockFor::Request { self_dependent }
            }
        } else if self.ignored(id) || self.reset.contains(&id) {
            BlockFor::Ignore
        } else if self.closed.contains(&id) {
            BlockFor::Gone(ErrorCode::STREAM_CLOSED)
        } else {
            BlockFor::Gone(ErrorCode::PROTOCOL_ERROR)
        };
        self.block = Some(Block {
            stream: id,
            end_stream,
            for_,
            buf: block.to_vec(),
            continuations: 0,
        });
        Ok(())
    }

    /// A header block is complete: decode it, and act on it.
    #[allow(clippy::type_complexity)]
    pub(super) fn finish_block<H: Handler>(
        &mut self,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Result<Option<Action<H::Job>>, Fail> {
        let Some(block) = self.block.take() else {
            return Ok(None);
        };
        let id = block.stream;
        let limits = ListLimits {
            max_size: self.config.max_header_list_size as usize,
            max_fields: self.config.max_header_fields,
        };
        let mut fields = Vec::new();
        let decoded = self
            .decoder
            .decode(&block.buf, limits, &mut fields)
            .map_err(|_| Fail::Conn(ErrorCode::COMPRESSION_ERROR, "bad header block"))?;
        let bomb =
            self.config.max_header_list_size as usize * self.config.hpack_bomb_factor as usize;
        if decoded.size > bomb {
            return Err(Fail::Calm(Abuse::HpackBomb));
        }
        match block.for_ {
            BlockFor::Ignore => Ok(None),
            BlockFor::Gone(code) => Err(Fail::Conn(code, "HEADERS on a closed stream")),
            BlockFor::Closed => {
                self.reset_stream(id, ErrorCode::STREAM_CLOSED, output)?;
                Ok(None)
            }
            BlockFor::Trailers => {
                if !block.end_stream || decoded.over || check_trailers(&fields).is_err() {
                    self.reset_stream(id, ErrorCode::PROTOCOL_ERROR, output)?;
                    return Ok(None);
                }
                // Trailers are checked and dropped: berth's Request has no place for them.
                if let Some(s) = self.streams.get_mut(&id) {
                    if s.content_length.is_some_and(|n| s.received != n) {
                        self.reset_stream(id, ErrorCode::PROTOCOL_ERROR, output)?;
                        return Ok(None);
                    }
                    s.recv_closed = true;
                }
                self.end_of_body(id, output, cx, handler)
            }
            BlockFor::Request { self_dependent } => self.open_stream(
                id,
                block.end_stream,
                self_dependent,
                fields,
                decoded.over,
                output,
                cx,
                handler,
            ),
        }
    }

    /// A new stream's request head is in.
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    pub(super) fn open_stream<H: Handler>(
        &mut self,
        id: u32,
        end_stream: bool,
        self_dependent: bool,
        fields: Vec<Field>,
        over: bool,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Result<Option<Action<H::Job>>, Fail> {
        self.counts.streams += 1;
        if self.counts.streams >= u64::from(self.config.max_streams_per_connection) && !self.drain {
            // This stream is the last served: GOAWAY with its id now, so that no stream read
            // after it in the same input is served past the budget.
            self.drain = true;
            self.counts.exhausted = 1;
            self.goaway_now(output);
        }
        if self_dependent {
            self.reset_stream(id, ErrorCode::PROTOCOL_ERROR, output)?;
            return Ok(None);
        }
        if self.streams.len() >= self.config.max_concurrent_streams as usize {
            frame::write_rst(output, id, ErrorCode::REFUSED_STREAM);
            remember(&mut self.reset, id);
            self.counts.refused += 1;
            return Ok(None);
        }
        let mut s = Stream::new(self.local_window(), self.peer_window);
        s.recv_closed = end_stream;
        self.streams.insert(id, s);
        if over {
            self.counts.oversized_heads += 1;
            self.mark_discard(id);
            self.answer_status(
                id,
                431,
                "request header fields too large",
                output,
                cx,
                handler,
            );
            return Ok(None);
        }
        let head = match check_request(fields, cx.limits) {
            Ok(head) => head,
            Err(Refusal::Malformed(_)) => {
                self.reset_stream(id, ErrorCode::PROTOCOL_ERROR, output)?;
                return Ok(None);
            }
            Err(Refusal::Status(status, why)) => {
                self.mark_discard(id);
                self.answer_status(id, status, why, output, cx, handler);
                return Ok(None);
            }
        };
        let mark = (self.local_window() / 2).max(1) as usize;
        let Some(s) = self.streams.get_mut(&id) else {
            return Ok(None);
        };
        s.turn.head_only = head.head_only();
        s.content_length = head.content_length;
        if end_stream {
            if head.content_length.is_some_and(|n| n != 0) {
                self.reset_stream(id, ErrorCode::PROTOCOL_ERROR, output)?;
                return Ok(None);
            }
            return Ok(hand_off::ready(
                &mut self.wire(output),
                id.into(),
                head,
                Vec::new(),
                cx,
                handler,
            ));
        }
        if head
            .content_length
            .is_some_and(|n| n > cx.limits.max_body_bytes as u64)
        {
            s.discard = true;
            self.answer_status(id, 413, "request body too large", output, cx, handler);
            return Ok(None);
        }
        // A request that would be one job too many is buffered whole instead, and waits its
        // turn with its body (`request_ready`).
        let share_left = !hand_off::at_job_share::<_, H>(&self.wire(output), cx);
        let Some(s) = self.streams.get_mut(&id) else {
            return Ok(None);
        };
        if H::STREAMS_BODY && cx.stream_bodies && share_left {
            // The stream window is granted back only for what the job took: the stream is
            // full (its room hook, the driver's, runs) at half a window, the batch
            // grant_windows sends.
            let (feed, stream) = Feed::open(&mut self.passed, id.into(), Some(mark));
            s.turn.feed = Some(feed);
            return Ok(hand_off::dispatch(
                &mut self.wire(output),
                id.into(),
                &head,
                &[],
                Some(stream),
                cx,
                handler,
            ));
        }
        s.head = Some(Box::new(head));
        Ok(None)
    }

    pub(super) fn mark_discard(&mut self, id: u32) {
        if let Some(s) = self.streams.get_mut(&id) {
            s.discard = true;
        }
    }
}
