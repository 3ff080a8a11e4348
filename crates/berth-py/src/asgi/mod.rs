//! ASGI 3 applications on berth's HTTP engine: the Rust half. berth's event loop parses,
//! limits, times out and writes as for any service; each request becomes a *deferred* job (see
//! `berth::proto::http::stream`) posted to the [`Bridge`], a queue the Python half
//! (`berth.asgi`) drains in one call per batch ([`AsgiServer::take`]): one GIL acquisition per
//! batch of requests, none per request on the Rust side. The application runs on an asyncio
//! loop in the thread that holds the GIL. Where berth's loop runs is the engine's choice:
//!
//! - **inline** (one `evloop` loop, the default): berth's loop runs on the Python thread,
//!   between the asyncio loop's callbacks ([`berth::drive::evloop::Inline`]). asyncio watches
//!   the loop's epoll descriptor; `take` runs one turn with the GIL released, then hands over
//!   what it produced. No thread hand-off, so no context switch and no wake-up write per
//!   batch of requests: on a server with one core for it, the cheapest way to reach Python.
//! - **threads** (`io_threads` > 1, or another model): berth's loops run in their own threads
//!   and wake the asyncio loop through a socket pair, once per batch (the byte is written only
//!   when the asyncio loop has found the queue empty).
//!
//! ```text
//!  berth loop: parse ─> AsgiJob::start ─> Bridge queue ─┐ take()  (inline: a turn first)
//!  asyncio:    [AsgiRequest, ...] ─> app(scope, receive, send) <┘
//!              send(start/body) ─> Answer::reply (whole) | StreamWriter::push (streamed)
//!                               ─> the connection's loop is woken; no GIL there
//! ```
//!
//! A response is held until its first body message, so that the everyday one-body response
//! goes out whole with a Content-Length; a body with `more_body` becomes a streamed reply
//! (chunked, or held to the app's own `content-length`), with the stream's window as
//! backpressure: `send` then waits for room, which the
//! I/O thread announces through the bridge ([`Event::Room`]). An application that fails before
//! its response started costs a 500; one that fails mid-body aborts the connection, so the
//! client can tell the body is cut short. So does a body that does not fit the length the app
//! declared (see [`front::whole_reply`](crate::front::whole_reply)).

mod bridge;
mod handler;
mod request;
mod scope;
mod server;

pub(crate) use bridge::{Bridge, Event};
use request::{AsgiRequest, ClientDisconnected};
use server::AsgiServer;

use pyo3::prelude::*;

/// Registers the ASGI classes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<AsgiServer>()?;
    m.add_class::<AsgiRequest>()?;
    m.add(
        "ClientDisconnected",
        m.py().get_type::<ClientDisconnected>(),
    )?;
    Ok(())
}
