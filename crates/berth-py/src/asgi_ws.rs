//! The ASGI `websocket` scope's connection side: once the application accepts, the connection
//! speaks WebSocket through [`AsgiWs`], an upgraded protocol (berth's `WsSession`: frames,
//! fragments, UTF-8, pings, the close handshake) whose messages meet the application in a
//! [`WsShared`] mailbox.
//!
//! ```text
//!  client frames ─> WsSession ─> inbox ─> Event::Wake(id) ─> receive(): websocket.receive
//!  send(): websocket.send ─> outbox (framed) ─> the connection's waker ─> AsgiWs::wake ─> socket
//! ```
//!
//! permessage-deflate, when the handshake agreed it: the session inflates the client's messages,
//! and [`WsShared::send`] compresses the application's as it frames them.
//!
//! Both ways are bounded. The application's sends wait (`send` awaits room) while more than
//! [`WINDOW`] bytes are framed and not yet taken by the connection, which takes them only as
//! its output drains; the client's messages are not read further while more than [`WINDOW`]
//! bytes of them wait for the application (the input stays in the socket).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use berth::proto::http::Timeouts;
use berth::proto::upgrade::{Flow, Upgraded};
use berth::proto::ws::deflate::Compressor;
use berth::proto::ws::frame::{write_frame, Opcode};
use berth::proto::ws::{Agreed, Message, Outbox, WsConfig, WsHandler, WsSession};

use crate::asgi::{Bridge, Event};

/// Bytes each way held between the connection and the application before the faster side
/// waits.
pub(crate) const WINDOW: usize = 256 * 1024;

/// What the client sent, for `receive`.
pub(crate) enum Incoming {
    Text(String),
    Binary(Vec<u8>),
    /// The connection ended: the client's close code (1005 if it gave none, 1006 if it left
    /// without a close).
    Closed(u16),
}

/// The mailbox between a WebSocket connection and its application.
#[derive(Default)]
pub(crate) struct WsShared {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    inbox: VecDeque<Incoming>,
    inbox_bytes: usize,
    /// Frames the application sent, ready to write.
    outbox: Vec<u8>,
    /// permessage-deflate, if agreed: the application's messages are compressed as they are
    /// framed (the session inflates the client's).
    compressor: Option<Compressor>,
    /// The application's close (code, reason), not yet written.
    close: Option<(u16, String)>,
    /// The application closed (its close is written or on its way).
    closed_by_app: bool,
    /// The connection is over: nothing sent will arrive.
    gone: bool,
}

impl WsShared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next message from the client, and whether the connection must be told it may read
    /// again (the inbox fell below the window).
    pub(crate) fn pop(&self) -> (Option<Incoming>, bool) {
        let mut s = self.lock();
        let was_full = s.inbox_bytes >= WINDOW;
        let next = s.inbox.pop_front();
        if let Some(Incoming::Text(t)) = &next {
            s.inbox_bytes -= t.len();
        } else if let Some(Incoming::Binary(b)) = &next {
            s.inbox_bytes -= b.len();
        }
        let resume = was_full && s.inbox_bytes < WINDOW;
        (next, resume)
    }

    /// Frames a message from the application. `Err(())`: the connection is over (or the
    /// application closed it). `Ok(room)`: whether it may send more at once.
    pub(crate) fn send(&self, text: Option<&str>, data: &[u8]) -> Result<bool, ()> {
        let mut s = self.lock();
        if s.gone || s.closed_by_app {
            return Err(());
        }
        let (opcode, bytes) = match text {
            Some(t) => (Opcode::Text, t.as_bytes()),
            None => (Opcode::Binary, data),
        };
        let State {
            outbox, compressor, ..
        } = &mut *s;
        match compressor {
            Some(c) => c.write_message(outbox, opcode, bytes),
            None => write_frame(outbox, opcode, bytes),
        }
        Ok(s.outbox.len() < WINDOW)
    }

    /// The application closes with `code` and `reason`; `false` if it had already closed, or
    /// the connection was over.
    pub(crate) fn close(&self, code: u16, reason: &str) -> bool {
        let mut s = self.lock();
        if s.gone || s.closed_by_app {
            return false;
        }
        s.closed_by_app = true;
        s.close = Some((code, reason.to_owned()));
        true
    }

    /// The application may send more at once (or the connection is over, which its send will
    /// be told).
    pub(crate) fn has_room(&self) -> bool {
        let s = self.lock();
        s.gone || s.outbox.len() < WINDOW
    }

    /// The connection is over.
    pub(crate) fn gone(&self) -> bool {
        self.lock().gone
    }

    /// Nothing more will pass: the application closed, or the connection is over.
    pub(crate) fn finished(&self) -> bool {
        let s = self.lock();
        s.gone || s.closed_by_app
    }
}

/// Puts the client's messages in the mailbox as the session completes them.
struct Inbound {
    shared: Arc<WsShared>,
    /// Something arrived since the application was last told.
    news: bool,
}

impl WsHandler for Inbound {
    fn message(&mut self, message: Message<'_>, _: &mut Outbox<'_>) {
        let mut s = self.shared.lock();
        let (incoming, len) = match message {
            Message::Text(t) => (Incoming::Text(t.to_owned()), t.len()),
            Message::Binary(b) => (Incoming::Binary(b.to_vec()), b.len()),
        };
        s.inbox.push_back(incoming);
        s.inbox_bytes += len;
        self.news = true;
    }

    fn closed(&mut self, code: Option<u16>) {
        self.end(code.unwrap_or(1005));
    }
}

impl Inbound {
    /// The connection is over; the application hears `code` (once).
    fn end(&mut self, code: u16) {
        let mut s = self.shared.lock();
        if !s.gone {
            s.gone = true;
            s.inbox.push_back(Incoming::Closed(code));
            self.news = true;
        }
    }
}

/// A WebSocket connection accepted by an ASGI application.
pub(crate) struct AsgiWs {
    session: WsSession<Inbound>,
    shared: Arc<WsShared>,
    bridge: Arc<Bridge>,
    /// The request's id: its wake events reach the application's `receive` and `send`.
    id: u64,
}

impl AsgiWs {
    pub(crate) fn new(
        shared: Arc<WsShared>,
        bridge: Arc<Bridge>,
        id: u64,
        max_message: usize,
        deflate: Option<Agreed>,
    ) -> AsgiWs {
        shared.lock().compressor = deflate.map(Compressor::new);
        let inbound = Inbound {
            shared: shared.clone(),
            news: false,
        };
        AsgiWs {
            session: WsSession::new(
                inbound,
                WsConfig {
                    max_message,
                    ..WsConfig::default()
                },
            )
            .with_deflate(deflate),
            shared,
            bridge,
            id,
        }
    }

    /// Tells the application if anything arrived.
    fn tell(&mut self) {
        let inbound = self.session.handler_mut();
        if std::mem::take(&mut inbound.news) {
            self.bridge.post(Event::Wake(self.id));
        }
    }
}

impl Upgraded for AsgiWs {
    fn receive(&mut self, input: &mut Vec<u8>, output: &mut Vec<u8>) -> Flow {
        if self.shared.lock().inbox_bytes >= WINDOW {
            // The application is behind: leave the input where it is (the connection reads no
            // further) until it takes some, which wakes this connection.
            return Flow::Continue;
        }
        let flow = self.session.receive(input, output);
        if flow == Flow::Close {
            // A close from the client (answered), or a breach (closed with its code).
            self.session.handler_mut().end(1005);
        }
        self.tell();
        flow
    }

    fn wake(&mut self, output: &mut Vec<u8>) -> Flow {
        let (frames, close, was_full) = {
            let mut s = self.shared.lock();
            let was_full = s.outbox.len() >= WINDOW;
            (std::mem::take(&mut s.outbox), s.close.take(), was_full)
        };
        output.extend_from_slice(&frames);
        if was_full {
            // Room again: the application's send goes on.
            self.bridge.post(Event::Wake(self.id));
        }
        if let Some((code, reason)) = close {
            // The client's close comes back and ends the connection (or its timeout does).
            self.session.close(code, &reason, output);
        }
        Flow::Continue
    }

    fn peer_closed(&mut self, output: &mut Vec<u8>) {
        // Gone without a closing handshake: 1006, before the session reports it as closed.
        self.session.handler_mut().end(1006);
        self.session.peer_closed(output);
        self.tell();
    }

    fn poll_timeout(&mut self, now: Instant, t: &Timeouts) -> Option<Instant> {
        self.session.poll_timeout(now, t)
    }

    /// The server is shutting down: the client gets a close with 1001, the application a
    /// `websocket.disconnect` with 1001 (the session tells the handler), and the connection
    /// waits for the client's answering close.
    fn going_away(&mut self, output: &mut Vec<u8>) -> Flow {
        let flow = self.session.going_away(output);
        self.tell();
        flow
    }

    fn handle_timeout(&mut self, now: Instant, output: &mut Vec<u8>) -> Flow {
        let flow = self.session.handle_timeout(now, output);
        if flow == Flow::Close {
            self.session.handler_mut().end(1006);
            self.tell();
        }
        flow
    }
}

impl Drop for AsgiWs {
    fn drop(&mut self) {
        // However the connection ended (a reset, a write that failed, the server stopping), the
        // application hears it.
        self.session.handler_mut().end(1006);
        self.tell();
    }
}
