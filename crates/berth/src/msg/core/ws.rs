//! WebSocket clients (`ws://` and `wss://` listeners): a browser as a named client of the
//! engine, as the framed protocol's clients are.
//!
//! ```text
//!   GET /ws/relay, Upgrade: websocket ──> 101 (ws::opening; 404/400/426/431 and the close otherwise)
//!   first text message ──> the keyword: the name, under the same rules (empty: anonymous)
//!   each later message ──> one message to the application (`@NAME text` relays, as for tcp://)
//!   messages to it <── one WebSocket message each: text when the bytes are UTF-8, else binary
//!   refusals, endings <── a close frame: 1008 (1013 at capacity, 1001 shutting down, 1009 too
//!                         large) with the framed protocol's code and explanation as its reason
//! ```
//!
//! The frames are read by [`WsSession`] (berth-proto: unmasking, fragments, UTF-8, pings,
//! the close handshake, `max_message`, permessage-deflate's inflation when the opening agreed
//! it: `EngineConfig::ws_deflate`, unless the listener says `?deflate=off`); what the engine
//! sends is compressed by the client's output queue (`outq.rs`); this file turns what it
//! collects into the engine's keyword and messages. Messages arrive whole (a WebSocket message announces no length), up
//! to the engine's `max_message`; the admission is not answered (a refused client gets the
//! close), so a client may send messages right behind its name, as on `tcp://`.

use std::collections::VecDeque;

use berth_proto::http::DATE_LEN;
use berth_proto::msg::handshake::parse_keyword_with;
use berth_proto::msg::{Ending, Refusal};
use berth_proto::upgrade::{Flow, Upgraded};
use berth_proto::ws::handshake::Offer;
use berth_proto::ws::opening::{self, Opening};
use berth_proto::ws::{DeflateConfig, Message, Outbox, WsConfig, WsHandler, WsSession};

use super::{ClientId, Core, Io, Phase, Proto, Sink};

/// A WebSocket client's protocol state.
pub(crate) struct WsPeer {
    /// Until the 101: the opening handshake's bytes so far.
    opening: Option<Vec<u8>>,
    session: WsSession<Collect>,
    /// Bytes the session has not taken yet (the start of a frame).
    input: Vec<u8>,
}

impl WsPeer {
    /// A client that has just connected, whose messages may be up to `max_message` bytes.
    pub(crate) fn new(max_message: u64) -> WsPeer {
        let config = WsConfig {
            max_message: usize::try_from(max_message).unwrap_or(usize::MAX),
            ..WsConfig::default()
        };
        WsPeer {
            opening: Some(Vec::new()),
            session: WsSession::new(Collect::default(), config),
            input: Vec::new(),
        }
    }

    /// A close frame with `code` and `reason`, once the connection is a WebSocket (before
    /// that, nothing: the refusal of the opening is an HTTP answer, see [`Core::deliver_ws`]).
    fn close(&mut self, code: u16, reason: &str, out: &mut Vec<u8>) {
        if self.opening.is_none() {
            self.session.close(code, reason, out);
        }
    }

    /// Refuses the client: a close frame whose reason is the refusal's code and text.
    pub(crate) fn refuse(&mut self, why: Refusal, text: &str, out: &mut Vec<u8>) {
        let code = match why {
            Refusal::Capacity => 1013,
            _ => 1008,
        };
        self.close(code, &format!("{} {text}", why.code()), out);
    }

    /// Ends the client: a close frame whose reason is the ending's code and text.
    pub(crate) fn end(&mut self, why: Ending, text: &str, out: &mut Vec<u8>) {
        let code = match why {
            Ending::Shutdown => 1001,
            Ending::TooLarge => 1009,
            Ending::BadFrame | Ending::Incomplete => 1002,
            Ending::NameReplaced | Ending::ReadTimeout => 1008,
        };
        self.close(code, &format!("{} {text}", why.code()), out);
    }
}

/// The session's handler: keeps each message (and whether it was text) for the engine.
#[derive(Default)]
struct Collect {
    messages: VecDeque<(bool, Vec<u8>)>,
}

impl WsHandler for Collect {
    fn message(&mut self, message: Message<'_>, _: &mut Outbox<'_>) {
        self.messages.push_back(match message {
            Message::Text(t) => (true, t.as_bytes().to_vec()),
            Message::Binary(b) => (false, b.to_vec()),
        });
    }
}

impl Core {
    /// The current `Date` value for a handshake answer (the engine's cache, refreshed at most
    /// once a second), copied so that a client's state can be borrowed beside it.
    pub(super) fn http_date(&mut self) -> [u8; DATE_LEN] {
        self.date.refresh();
        let mut date = [0; DATE_LEN];
        date.copy_from_slice(self.date.get());
        date
    }

    /// A read's bytes from a WebSocket client: the opening handshake, then frames, whose
    /// messages become its keyword and then its messages.
    pub(super) fn deliver_ws(&mut self, id: ClientId, input: &[u8], sink: &mut dyn Sink) {
        let endpoint = self
            .get(id)
            .and_then(|c| c.listener)
            .map(|i| &self.listeners[i].endpoint);
        let path = endpoint
            .and_then(|e| e.websocket.clone())
            .unwrap_or_default();
        // permessage-deflate, unless the listener or the engine turns it off; always without
        // server context takeover: the output queue compresses messages in the order they are
        // queued, not always the order they are sent (see outq.rs).
        let offer = Offer {
            deflate: endpoint
                .is_some_and(|e| e.deflate)
                .then_some(DeflateConfig {
                    server_context_takeover: false,
                    ..self.config.ws_deflate
                }),
            ..Offer::default()
        };
        let max_opening = self.config.max_opening;
        let date = self.http_date();
        let Some(ws) = self.ws_mut(id) else { return };
        let mut out = Vec::new();
        let mut closing = false;
        // Set when the opening agreed permessage-deflate: the output queue's compressor.
        let mut agreed = None;
        let frames = match ws.opening.as_mut() {
            None => input,
            Some(head) => {
                head.extend_from_slice(input);
                match opening::open(head, &path, max_opening, &offer, &date) {
                    Opening::Partial => return,
                    Opening::Refused { status, response } => {
                        log::debug!("client {id}: opening handshake refused ({status})");
                        out = response;
                        closing = true;
                        &[][..]
                    }
                    Opening::Open {
                        consumed,
                        response,
                        deflate,
                    } => {
                        out = response;
                        ws.session.set_deflate(deflate);
                        agreed = deflate;
                        let mut head = ws.opening.take().expect("matched");
                        head.drain(..consumed);
                        ws.input = head;
                        &[][..]
                    }
                }
            }
        };
        if !closing {
            ws.input.extend_from_slice(frames);
            if ws.session.receive(&mut ws.input, &mut out) == Flow::Close {
                closing = true;
            }
        }
        let messages = std::mem::take(&mut ws.session.handler_mut().messages);
        if let Some(c) = self.get_mut(id) {
            if agreed.is_some() {
                c.out.set_deflate(agreed);
            }
            if !out.is_empty() {
                // Behind a stream still arriving for it, if one is open: frames never
                // interleave.
                c.out.push_wire(&out);
                self.dirty.push(id);
            }
        }
        for (text, msg) in messages {
            let Some(c) = self.get(id) else { return };
            match c.phase {
                Phase::Handshake if !text => self.refuse_now(
                    id,
                    Refusal::NameInvalid,
                    "the first message is the client's name, as text",
                ),
                Phase::Handshake => {
                    let keyword = parse_keyword_with(&msg, self.config.policy.names);
                    self.handshake(id, keyword);
                }
                // Messages sent after the shutdown began are not taken (the client is told
                // with its close, 1001).
                Phase::Open if !self.stopping => {
                    self.stats.message(msg.len());
                    self.whole_or_pieces(id, &msg, sink);
                }
                _ => break,
            }
        }
        if closing {
            if let Some(c) = self.get_mut(id) {
                c.phase = Phase::Closing;
                self.wheel.disarm(id.key());
                self.dirty.push(id);
            }
        }
    }

    fn ws_mut(&mut self, id: ClientId) -> Option<&mut WsPeer> {
        match &mut self.get_mut(id)?.io {
            Io::Stream {
                proto: Proto::Ws(ws),
                ..
            } => Some(ws),
            _ => None,
        }
    }
}

/// The answer to a WebSocket client turned away at capacity, before its opening handshake.
pub(crate) fn busy(date: &[u8]) -> Vec<u8> {
    opening::refusal(503, "the server is at its client limit\n", &[], date)
}
