//! Messages: the engine behind `berth msg` (docs/msg-protocol.md, seed 003, DESIGN §4).
//!
//! ```text
//!  tcp:// unix:// udp:// listeners ─┐                       ┌─ polling API: io_iteration()
//!  servers we connected to ─────────┼─> Engine (mio, one   ─┤   -> IoIterationResult sets,
//!                                   │   thread) + Core      │   messages(), send_message()
//!       berth_proto::msg sessions <─┘   (clients, names,    └─ handler API: MsgHandler
//!                                        queues, timers)        on_data / on_piece / ...
//! ```
//!
//! - [`Endpoint`]: endpoint URLs, parsed in [`net`](crate::net) for all of berth and
//!   re-exported here.
//! - `core`: everything protocol-and-socket (handshake decisions, reading, backpressure,
//!   UDP, timers); `outq`: per-client output queues; `client`: a client's record.
//! - [`Engine`]: the poll loop and the polling API; [`MsgHandler`]: the handler API.

mod client;
mod cluster;
mod core;
mod directory;
mod engine;
mod handler;
mod outq;
mod server;
mod stats;

pub use self::client::{ClientId, MAX_DATAGRAM_MESSAGE};
pub use self::cluster::ClusterConfig;
pub use self::core::{Arrival, EngineConfig};
pub use self::engine::{ConnectError, Engine, IoIterationResult};
pub use self::handler::{MsgHandler, Out};
pub use self::server::{MsgServer, Stopper, TlsReloader};
pub use self::stats::{MsgCounts, MsgStats};
/// The address of an [`Endpoint`]: [`net::Addr`](crate::net::Addr), under the name the msg
/// API has used.
pub use crate::net::Addr as Address;
pub use crate::net::Endpoint;
pub use berth_proto::msg::{Name, NameRule, Piece, Policy};
