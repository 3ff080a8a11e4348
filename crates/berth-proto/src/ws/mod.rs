//! WebSocket (RFC 6455), server side, on the protocol seam: an HTTP/1.1 request that asks to
//! upgrade ([`handshake::accept`] checks it and makes the 101's fields) is handed to a
//! [`WsSession`], which speaks frames over the same connection, sans-IO like the rest of this
//! crate, in every concurrency model.
//!
//! Written here rather than on a crate's codec: the well-kept ones (tungstenite's
//! `WebSocketContext`) drive a `Read + Write` stream and bring a random-number generator for
//! client masking, whose dependency on libc this crate does not take; the server side needs
//! neither, and the frame rules are short. The one extension is permessage-deflate (RFC 7692,
//! [`deflate`]): negotiated in the handshake, it compresses messages with RSV1 set; without it
//! (and RSV2, RSV3 always) a reserved bit is a protocol error.
//!
//! ```text
//!   GET /ws/echo, Upgrade: websocket ──> handshake::accept ──> Switch { "websocket", 101 }
//!   input ──> WsSession::receive ──> frames: unmask, reassemble, check UTF-8 ──> WsHandler
//!   output <── frames (pong, close, messages the handler sends)
//! ```

pub mod deflate;
pub mod frame;
pub mod handshake;
pub mod opening;
mod session;

pub use deflate::{Agreed, DeflateConfig};
pub use session::{EchoHandler, Message, Outbox, WsConfig, WsHandler, WsSession};
