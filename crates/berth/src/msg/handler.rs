//! The handler API, after seed 003's `InlineProcessor`: implement [`MsgHandler`] and the engine
//! calls it as clients arrive, send, drain and leave. Everything it sends goes through [`Out`],
//! which can reach any client of the engine, not only the one being served.
//!
//! A handler takes whole messages ([`MsgHandler::on_data`], up to `max_message`) unless it says
//! it [`MsgHandler::streams`]; then it gets each message in [`Piece`]s as they arrive and can
//! pass them on with [`Out::open_stream`] / [`Out::stream_chunk`], so a message of any size
//! crosses the server in bounded memory.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use berth_proto::msg::{Name, Piece};

use super::client::ClientId;
use super::core::{Arrival, Core, Note, Sink};
use super::engine::Engine;
use crate::rt::Control;

/// An application served by an [`Engine`].
pub trait MsgHandler {
    /// A client was admitted.
    fn on_connect(&mut self, client: ClientId, arrival: Arrival, out: &mut Out<'_>) {
        let _ = (client, arrival, out);
    }

    /// A whole message arrived (handlers that do not stream).
    fn on_data(&mut self, client: ClientId, msg: &[u8], out: &mut Out<'_>);

    /// Whether this handler takes messages in pieces ([`MsgHandler::on_piece`]) rather than
    /// whole. Asked once per event, so keep it constant.
    fn streams(&self) -> bool {
        false
    }

    /// A piece of a message arrived (streaming handlers): `Start(len)`, `Chunk`s, `End`.
    fn on_piece(&mut self, client: ClientId, piece: Piece<'_>, out: &mut Out<'_>) {
        let _ = (client, piece, out);
    }

    /// A message a streaming handler gets whole because it arrived whole (it was received
    /// before any of it was handed over: up to `max_held`, see [`EngineConfig`]), as a buffer
    /// it owns, so that it can pass it on without a copy ([`Out::send_owned`]). By default it
    /// is given as pieces.
    ///
    /// [`EngineConfig`]: super::EngineConfig
    fn on_whole(&mut self, client: ClientId, msg: Vec<u8>, out: &mut Out<'_>) {
        self.on_piece(client, Piece::Start(msg.len() as u64), out);
        if !msg.is_empty() {
            self.on_piece(client, Piece::Chunk(&msg), out);
        }
        self.on_piece(client, Piece::End, out);
    }

    /// Everything queued to `client` has been written.
    fn on_output_drained(&mut self, client: ClientId, out: &mut Out<'_>) {
        let _ = (client, out);
    }

    /// `client` is gone (`name`: the name it had).
    fn on_connection_lost(&mut self, client: ClientId, name: Option<&Name>, out: &mut Out<'_>) {
        let _ = (client, name, out);
    }
}

/// What a handler may do with the engine's clients.
pub struct Out<'a> {
    core: &'a mut Core,
}

impl Out<'_> {
    /// Queues a message to `to`. `false`: no such client (any more).
    pub fn send(&mut self, to: ClientId, msg: &[u8]) -> bool {
        self.core.send(to, msg)
    }

    /// Queues a message, handing over its buffer (large ones are not copied).
    pub fn send_owned(&mut self, to: ClientId, msg: Vec<u8>) -> bool {
        self.core.send_owned(to, msg)
    }

    /// Queues a lazily drawn sequence of messages.
    pub fn send_messages<I>(&mut self, to: ClientId, messages: I) -> bool
    where
        I: IntoIterator,
        I::IntoIter: Send + 'static,
        I::Item: AsRef<[u8]>,
    {
        self.core.send_messages(to, messages)
    }

    /// Starts a message of `len` bytes to `to`, to be filled by [`Out::stream_chunk`]. `false`
    /// if `to` is gone, is already receiving a streamed message (send it whole instead, or
    /// wait), or does not take this one ([`Out::stream_refusal`]). Whole messages sent to `to`
    /// meanwhile wait until the stream is complete. A stream fed by a client that stalls or
    /// leaves before its last byte is completed with zero bytes by the engine.
    pub fn open_stream(&mut self, to: ClientId, len: u64) -> bool {
        self.core.open_stream(to, len)
    }

    /// Why [`Out::open_stream`] would refuse a stream of `len` bytes to `to` whatever `to`'s
    /// queue holds: `Some(limit)` when the message being delivered is still arriving from
    /// another client and `to` takes such streams only up to `limit` bytes (its rule's
    /// `streams=`, 0 without one). Such a sender could stop halfway and leave `to` inside a
    /// frame (issue 29); send the message whole instead, or refuse it.
    pub fn stream_refusal(&self, to: ClientId, len: u64) -> Option<u64> {
        self.core.stream_refusal(to, len)
    }

    /// More bytes of the message streaming to `to`. `false` if `to` is gone, or if the
    /// stream was cut (its sender stalled or is ending: see `--stall-timeout`).
    pub fn stream_chunk(&mut self, to: ClientId, bytes: &[u8]) -> bool {
        self.core.stream_chunk(to, bytes)
    }

    /// Closes `to` once its queued output is written.
    pub fn close(&mut self, to: ClientId) {
        self.core.close(to)
    }

    /// The client registered under `name`: its bytes, as the client sent them (a `&str`, a
    /// byte string, a [`Name`]; for a name in the escaped form people type, `\xNN`, use
    /// [`Name::unescape`] first).
    pub fn client(&self, name: impl AsRef<[u8]>) -> Option<ClientId> {
        self.core.lookup(name.as_ref())
    }

    /// The name `client` registered under: bytes ([`Name::as_str`] if you expect UTF-8;
    /// `Display` shows it escaped, so it can be logged whatever it holds).
    pub fn name(&self, client: ClientId) -> Option<&Name> {
        self.core.get(client)?.name.as_ref()
    }

    /// Bytes queued to `client` and not yet written.
    pub fn queued(&self, client: ClientId) -> usize {
        self.core.get(client).map_or(0, |c| c.out.queued())
    }
}

struct HandlerSink<'h, H: ?Sized>(&'h mut H);

impl<H: MsgHandler + ?Sized> Sink for HandlerSink<'_, H> {
    fn streams(&self) -> bool {
        self.0.streams()
    }
    fn message(&mut self, core: &mut Core, id: ClientId, msg: &[u8]) {
        self.0.on_data(id, msg, &mut Out { core });
    }
    fn piece(&mut self, core: &mut Core, id: ClientId, piece: Piece<'_>) {
        self.0.on_piece(id, piece, &mut Out { core });
    }
    fn whole(&mut self, core: &mut Core, id: ClientId, msg: Vec<u8>) {
        self.0.on_whole(id, msg, &mut Out { core });
    }
    fn note(&mut self, core: &mut Core, note: Note) {
        let out = &mut Out { core };
        match note {
            Note::Connected(id, arrival) => self.0.on_connect(id, arrival, out),
            Note::Drained(id) => self.0.on_output_drained(id, out),
            Note::Lost(id, name, _) => self.0.on_connection_lost(id, name.as_ref(), out),
        }
    }
}

impl Engine {
    /// Runs one round of I/O, delivering to `handler`; waits up to `timeout` for readiness.
    pub fn iterate_with<H: MsgHandler + ?Sized>(
        &mut self,
        handler: &mut H,
        timeout: Option<Duration>,
    ) -> io::Result<()> {
        self.turn(timeout, &mut HandlerSink(handler))
    }

    /// Serves `handler` until `stop` is set (checked at least every `tick`), then shuts down:
    /// every client gets its queued output and the `shutdown` frame, for up to `grace`. (A
    /// [`MsgServer`](super::MsgServer) does not poll: its threads are woken by a stop.)
    pub fn serve<H: MsgHandler + ?Sized>(
        &mut self,
        handler: &mut H,
        stop: &AtomicBool,
        tick: Duration,
        grace: Duration,
    ) -> io::Result<()> {
        while !stop.load(Ordering::Relaxed) {
            self.iterate_with(handler, Some(tick))?;
        }
        self.shutdown_with(
            grace,
            || false,
            |engine, timeout| engine.iterate_with(handler, Some(timeout)),
        )
    }

    /// Serves `handler` until `ctl` asks for a stop, blocking in the poll between events and
    /// timers: the stop wakes it through this engine's waker, which the caller has registered
    /// with `ctl` ([`Control::wake_on_stop`]). A drain is the graceful shutdown of
    /// [`Engine::serve`], within what is left of the drain's timeout; a stop now (or the drain's
    /// deadline) closes every client at once.
    pub(crate) fn serve_until<H: MsgHandler + ?Sized>(
        &mut self,
        handler: &mut H,
        ctl: &Control,
    ) -> io::Result<()> {
        while !ctl.stopping() {
            self.iterate_with(handler, None)?;
        }
        let grace = match (ctl.stop_now(), ctl.deadline()) {
            (false, Some(deadline)) => deadline.saturating_duration_since(Instant::now()),
            _ => Duration::ZERO,
        };
        self.shutdown_with(
            grace,
            || ctl.stop_now(),
            |engine, timeout| engine.iterate_with(handler, Some(timeout)),
        )
    }
}
