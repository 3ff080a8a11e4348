//! HTTP/3 (RFC 9114) and QPACK (RFC 9204), sans-IO: the framing layer, the header
//! compression, and the connection in both roles, a third codec under the one exchange
//! (DESIGN §11). QUIC itself (streams, flow control, TLS, loss recovery) is quinn-proto's;
//! what comes here is each stream's bytes, in order, in whatever pieces QUIC hands them
//! over, and what goes out is [`Quic`] orders: bytes for a stream, a unidirectional stream to
//! open, a stream to reset or stop, the connection to close.
//!
//! ```text
//!   QUIC (quinn-proto)                         this module
//!   ------------------                         -----------
//!   request stream bytes ──> FrameReader(Request) ──> HEADERS payload ──> qpack::Decoder::decode
//!                                      │                                   │ Fields | Blocked | TooLarge
//!                                      └──> DATA pieces ──> the exchange   v
//!   peer's uni stream ──> stream::UniStream::parse ──> PeerStreams::open   the exchange
//!        control:  FrameReader(Control) ──> SETTINGS, GOAWAY, ...
//!        encoder:  qpack::Decoder::handle_encoder_stream ──> poll_unblocked
//!        decoder:  qpack::Encoder::handle_decoder_stream
//!   our uni streams <── Settings::write_frame, Decoder::write_decoder_stream
//!   response stream <── HEADERS (answer::Qpack, static table), DATA pulled a piece at a time
//! ```
//!
//! ```text
//!   varint      QUIC variable-length integers (RFC 9000 §16): "need more" is a status
//!   frame       frame header and payloads (§7), where each may go (§7.2), and FrameReader,
//!               one stream's frames from pieces, bounded by a size limit
//!   settings    SETTINGS (§7.2.4): duplicates and HTTP/2's settings refused
//!   stream      unidirectional stream headers, stream IDs, the peer's stream rules (§6)
//!   qpack       QPACK: static and dynamic tables, instructions, field lines, the decoder
//!               (bounded: capacity, blocked streams, section size) and the encoder
//!   answer      a response head (the exchange's Head) QPACK-coded through the HeadSink
//!   connection  the server: control stream and SETTINGS, the client's streams, request
//!               streams onto the exchange (§4.1 framing order), jobs and files per stream,
//!               bodies pulled, GOAWAY at the drain, header and body timeouts; http::Action out
//!   client      the client role: requests out, answers in as events (tests, the load tool)
//!   error       the error codes (§8.1, RFC 9204 §6) and the errors here, by fault
//! ```
//!
//! Errors say whose fault they are: [`error::H3Error`] is the peer's, with the code to
//! close the connection (or reset the stream) with; [`error::Error::Misuse`] is the
//! caller's. Nothing here allocates on a length the peer claims before its bytes are there.
//!
//! What this module does **not** do: server push, which berth never sends (RFC 9114 §4.6
//! lets a server not push; the client role never allows it); a dynamic table for the
//! answers berth encodes (`answer` says why); extended CONNECT; and anything QUIC does: quinn-proto does, driven by the engine
//! (`berth::drive::quic` for the server, `berth_lab::bench::h3` for the client role).

pub(crate) mod answer;
pub mod client;
pub mod connection;
pub mod error;
pub mod frame;
pub mod qpack;
pub mod settings;
pub mod stream;
pub mod varint;

pub use crate::h2::Pulled;
pub use connection::{Connection, Counts, H3Config, Quic};

/// Which endpoint this side of a connection is: some rules differ (only a server pushes,
/// only a client sends MAX_PUSH_ID).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The endpoint that accepted the connection.
    Server,
    /// The endpoint that opened it.
    Client,
}
