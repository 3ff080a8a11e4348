//! Endpoints and addresses (one [`Addr`] and one parser of `tcp://`, `tls://`, `unix://`,
//! `udp://`, `ws://`, `wss://` and `quic://` endpoints, [`Endpoint::parse`], for every part of
//! berth), listening sockets, the transports connections are served over ([`transport`]: the
//! `Transport` seam, and the per-listener choice of one, [`Acceptor`]), how many connections a
//! server holds and how big their buffers are ([`ConnSizing`], HTTP's and the message engine's
//! alike), and the few raw socket calls the drivers need. Nothing here knows about protocols or
//! models (beyond naming the two sets of default sizes).

pub mod activation;
mod endpoint;
mod listen;
mod local;
mod sizing;
pub mod tls;
pub mod transport;

pub use crate::sys::io::read_into_spare;
pub use endpoint::{Addr, Endpoint, Scheme, TlsFiles, WS_DEFAULT_PATH};
pub use listen::{
    bind, bind_tcp, check_unshared, reserve_port, BindError, EventedListener, ListenConfig,
    Listener,
};
pub use local::{bind_udp, bind_unix, size_quic_buffers, SocketFile, QUIC_SOCKET_BUFFER};
pub use sizing::ConnSizing;
pub use transport::{Acceptor, Blocking, BlockingSocket, Evented, Socket, Stream, Transport};
