//! The client's receive side: frames from the server cut out of the input, checked with the
//! same frame codec the server uses ([`Frame::parse`]), and turned into events, window
//! accounting and the acknowledgements RFC 9113 requires (SETTINGS §6.5.3, PING §6.7).

use super::{Answer, Block, Client, Event, ProtocolError, Windows};
use crate::h2::frame::{self, setting, ErrorCode as E, Frame, Header, HEADER_LEN};

/// The server's fault: the connection is over.
fn err<T>(code: E, reason: &'static str) -> Result<T, ProtocolError> {
    Err(ProtocolError { code, reason })
}

impl Client {
    /// Bytes from the server: every whole frame in them is handled (a partial one is kept
    /// for the next call). Then [`Client::poll_event`] and [`Client::poll_transmit`].
    ///
    /// `Err` if the server broke the protocol; the connection is over and every later call
    /// returns the same error.
    pub fn recv(&mut self, bytes: &[u8]) -> Result<(), ProtocolError> {
        if let Some(e) = self.broken {
            return Err(e);
        }
        let result = if self.input.is_empty() {
            // The common case: whole frames straight from the caller's buffer, no copy.
            self.frames(bytes).map(|used| {
                self.input.extend_from_slice(&bytes[used..]);
            })
        } else {
            let mut input = std::mem::take(&mut self.input);
            input.extend_from_slice(bytes);
            let result = self.frames(&input).map(|used| {
                input.drain(..used);
            });
            self.input = input;
            result
        };
        if let Err(e) = result {
            self.broken = Some(e);
        }
        result
    }

    /// Handles every whole frame at the start of `buf`; returns how many bytes they took.
    fn frames(&mut self, buf: &[u8]) -> Result<usize, ProtocolError> {
        let mut at = 0;
        while let Some(h) = Header::parse(&buf[at..]) {
            if h.len > self.local_max_frame {
                return err(
                    E::FRAME_SIZE_ERROR,
                    "a frame past the client's SETTINGS_MAX_FRAME_SIZE",
                );
            }
            let end = at + HEADER_LEN + h.len as usize;
            if buf.len() < end {
                break;
            }
            self.frame(&h, &buf[at + HEADER_LEN..end])?;
            at = end;
        }
        Ok(at)
    }

    fn frame(&mut self, h: &Header, payload: &[u8]) -> Result<(), ProtocolError> {
        let f = match Frame::parse(h, payload) {
            Ok(f) => f,
            Err(e) => return err(e.code, e.reason),
        };
        // Between a HEADERS without END_HEADERS and its last CONTINUATION nothing else may
        // come (RFC 9113 §6.10).
        if self.block.is_some() && !matches!(f, Frame::Continuation { .. }) {
            return err(E::PROTOCOL_ERROR, "a frame inside a header block");
        }
        match f {
            Frame::Headers {
                stream,
                end_stream,
                end_headers,
                block,
                ..
            } => {
                if end_headers {
                    return self.end_block(stream, block, end_stream);
                }
                self.block = Some(Block {
                    stream,
                    end_stream,
                    bytes: block.to_vec(),
                });
            }
            Frame::Continuation {
                stream,
                end_headers,
                block,
            } => {
                let Some(b) = self.block.as_mut().filter(|b| b.stream == stream) else {
                    return err(E::PROTOCOL_ERROR, "CONTINUATION without its HEADERS");
                };
                b.bytes.extend_from_slice(block);
                if end_headers {
                    let b = self.block.take().expect("a block in progress");
                    return self.end_block(b.stream, &b.bytes, b.end_stream);
                }
            }
            Frame::Data {
                stream,
                end_stream,
                data,
                flow,
            } => self.data(stream, data, flow, end_stream)?,
            Frame::RstStream { stream, code } => {
                // Nothing more is sent on it; an answer already complete stands (a server
                // may reset NO_ERROR to stop a body it no longer needs, §8.1).
                self.streams.remove(&stream);
                self.events.push_back(Event::Reset { stream, code });
            }
            Frame::Settings { ack: true, .. } => self.events.push_back(Event::SettingsAcked),
            Frame::Settings { ack: false, params } => {
                for (id, value) in frame::settings(params) {
                    self.setting(id, value)?;
                }
                frame::write_settings_ack(&mut self.out);
                self.peer.received += 1;
                self.events.push_back(Event::Settings {
                    first: self.peer.received == 1,
                });
                self.send_pending();
            }
            Frame::Ping { ack: false, data } => frame::write_ping_ack(&mut self.out, data),
            Frame::Ping { ack: true, data } => self.events.push_back(Event::Pong(data)),
            Frame::GoAway { last_stream, code } => {
                self.goaway = Some(last_stream);
                // The streams above it were never processed: nothing more goes out on them.
                self.streams.retain(|&id, _| id <= last_stream);
                self.events.push_back(Event::GoAway {
                    last_stream,
                    code,
                    debug: payload[8..].to_vec(),
                });
            }
            Frame::WindowUpdate { stream, increment } => {
                let inc = i64::from(increment);
                if stream == 0 {
                    if inc == 0 || self.send_window + inc > frame::MAX_WINDOW {
                        return err(
                            E::FLOW_CONTROL_ERROR,
                            "a connection WINDOW_UPDATE of 0 or past 2^31 - 1",
                        );
                    }
                    self.send_window += inc;
                } else if let Some(s) = self.streams.get_mut(&stream) {
                    s.send_window += inc;
                }
                self.send_pending();
            }
            // The client said SETTINGS_ENABLE_PUSH 0: a push is the server's error (§8.4).
            Frame::PushPromise => {
                return err(E::PROTOCOL_ERROR, "PUSH_PROMISE with push turned off")
            }
            Frame::Priority { .. } | Frame::Unknown => {}
        }
        Ok(())
    }

    /// One entry of the server's SETTINGS (§6.5.2).
    fn setting(&mut self, id: u16, value: u32) -> Result<(), ProtocolError> {
        match id {
            setting::MAX_CONCURRENT_STREAMS => self.peer.max_streams = Some(value),
            setting::INITIAL_WINDOW_SIZE => {
                if i64::from(value) > frame::MAX_WINDOW {
                    return err(
                        E::FLOW_CONTROL_ERROR,
                        "SETTINGS_INITIAL_WINDOW_SIZE past 2^31 - 1",
                    );
                }
                // Every open stream's window moves by the change, below zero if need be
                // (§6.9.2).
                let delta = i64::from(value) - i64::from(self.peer.initial_window);
                self.peer.initial_window = value;
                for s in self.streams.values_mut() {
                    s.send_window += delta;
                }
            }
            setting::MAX_FRAME_SIZE => {
                if !(frame::DEFAULT_MAX_FRAME..=frame::MAX_MAX_FRAME).contains(&value) {
                    return err(E::PROTOCOL_ERROR, "SETTINGS_MAX_FRAME_SIZE out of range");
                }
                self.peer.max_frame = value;
            }
            _ => {}
        }
        Ok(())
    }

    /// A DATA frame: the windows it takes, the refill, the event.
    fn data(
        &mut self,
        stream: u32,
        data: &[u8],
        flow: u32,
        end_stream: bool,
    ) -> Result<(), ProtocolError> {
        let every = match self.config.windows {
            Windows::Refill { every } => Some(every.max(1)),
            Windows::Shut => None,
        };
        self.recv_window -= i64::from(flow);
        self.conn_unacked += flow;
        if self.recv_window < 0 {
            return err(E::FLOW_CONTROL_ERROR, "DATA past the connection's window");
        }
        if every.is_some_and(|every| self.conn_unacked >= every) {
            frame::write_window_update(&mut self.out, 0, self.conn_unacked);
            self.recv_window += i64::from(self.conn_unacked);
            self.conn_unacked = 0;
        }
        // A stream the client forgot (reset, or dropped by a GOAWAY) or never opened (a raw
        // HEADERS): its bytes count against the connection's window only.
        if let Some(s) = self.streams.get_mut(&stream) {
            match s.answer {
                Answer::Awaited => return err(E::PROTOCOL_ERROR, "DATA before the response head"),
                Answer::Done => return err(E::STREAM_CLOSED, "DATA after END_STREAM"),
                Answer::Body => {}
            }
            s.recv_window -= i64::from(flow);
            s.unacked += flow;
            if s.recv_window < 0 {
                return err(E::FLOW_CONTROL_ERROR, "DATA past the stream's window");
            }
            if end_stream {
                s.answer = Answer::Done;
            } else if every.is_some_and(|every| s.unacked >= every) {
                frame::write_window_update(&mut self.out, stream, s.unacked);
                s.recv_window += i64::from(s.unacked);
                s.unacked = 0;
            }
        }
        let kept = if self.config.keep_data {
            data.to_vec()
        } else {
            Vec::new()
        };
        self.events.push_back(Event::Data {
            stream,
            data: kept,
            len: data.len(),
            end_stream,
        });
        if end_stream {
            self.forget_if_over(stream);
        }
        Ok(())
    }

    /// A whole header block on `stream`: an interim head, the head, or the trailers.
    fn end_block(
        &mut self,
        stream: u32,
        block: &[u8],
        end_stream: bool,
    ) -> Result<(), ProtocolError> {
        self.fields.clear();
        // Every block is decoded, wanted or not, to keep the dynamic table in step with the
        // server's encoder.
        let decoded = self
            .decoder
            .decode(block, self.config.head_limits, &mut self.fields);
        if decoded.is_err() {
            return err(E::COMPRESSION_ERROR, "a header block not decoded");
        }
        let status = match self.fields.first() {
            Some(f) if f.name == b":status" => std::str::from_utf8(&f.value)
                .ok()
                .and_then(|v| v.parse::<u16>().ok())
                .filter(|s| (100..600).contains(s)),
            _ => None,
        };
        let answer = match self.streams.get(&stream) {
            Some(s) => s.answer,
            // Not a stream it knows (forgotten, or opened by a raw frame): a block with a
            // status is a head, one without the trailers.
            None if status.is_some() => Answer::Awaited,
            None => Answer::Body,
        };
        let event = match answer {
            Answer::Awaited => {
                let Some(status) = status else {
                    return err(E::PROTOCOL_ERROR, "a response head without a valid :status");
                };
                if status < 200 {
                    // An interim head (100, 103): skipped, the final one follows.
                    if end_stream {
                        return err(E::PROTOCOL_ERROR, "an interim head with END_STREAM");
                    }
                    return Ok(());
                }
                Event::Head {
                    stream,
                    status,
                    fields: self.fields.drain(1..).map(|f| (f.name, f.value)).collect(),
                    end_stream,
                }
            }
            Answer::Body => {
                if !end_stream {
                    return err(E::PROTOCOL_ERROR, "trailers without END_STREAM");
                }
                Event::Trailers {
                    stream,
                    fields: self.fields.drain(..).map(|f| (f.name, f.value)).collect(),
                }
            }
            Answer::Done => return err(E::STREAM_CLOSED, "HEADERS after END_STREAM"),
        };
        self.events.push_back(event);
        if let Some(s) = self.streams.get_mut(&stream) {
            s.answer = if end_stream {
                Answer::Done
            } else {
                Answer::Body
            };
            if end_stream {
                self.forget_if_over(stream);
            }
        }
        Ok(())
    }
}
