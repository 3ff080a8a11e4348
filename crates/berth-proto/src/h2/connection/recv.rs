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
        s.grant += flow - data.len() as u32;
        if end_stream {
            s.recv_closed = true;
        }
        let took = intake::piece(&mut self.wire(output), id.into(), data, cx, handler);
        match took {
            Ok(took) => {
                if let Some(s) = self.streams.get_mut(&id) {
                    match took {
                        Took::Consumed => s.grant += data.len() as u32,
                        // Granted as the job takes it (grant_windows).
                        Took::Held => s.held += data.len() as u32,
                    }
                }
            }
            Err(Malformed) => {
                // §8.1.1: DATA that disagrees with content-length makes the request malformed.
                self.reset_stream(id, ErrorCode::PROTOCOL_ERROR, output)?;
                return Ok(None);
            }
        }
        if !end_stream {
            return Ok(None);
        }
        self.end_of_body(id, output, cx, handler)
    }

    /// The request's body is complete: its job is told, or its handler asked; a body shorter
    /// than its content-length is malformed (§8.1.1).
    pub(super) fn end_of_body<H: Handler>(
        &mut self,
        id: u32,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Result<Option<Action<H::Job>>, Fail> {
        match intake::end(&mut self.wire(output), id.into(), cx, handler) {
            Ok(step) => Ok(step),
            Err(Malformed) => {
                self.reset_stream(id, ErrorCode::PROTOCOL_ERROR, output)?;
                Ok(None)
            }
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
        // The stream window is granted back only for what a job took: the stream is full (its
        // room hook, the driver's, runs) at half a window, the batch grant_windows sends.
        let mark = (self.local_window() / 2).max(1) as usize;
        let next = if end_stream { Next::Ended } else { Next::Body };
        match intake::head(
            &mut self.wire(output),
            id.into(),
            head,
            next,
            mark,
            cx,
            handler,
        ) {
            Ok(step) => Ok(step),
            // §8.1.1: END_STREAM on a head that declared a body.
            Err(Malformed) => {
                self.reset_stream(id, ErrorCode::PROTOCOL_ERROR, output)?;
                Ok(None)
            }
        }
    }

    pub(super) fn mark_discard(&mut self, id: u32) {
        if let Some(s) = self.streams.get_mut(&id) {
            s.turn.intake.discard = true;
        }
    }
}
