//! HTTP/2 (RFC 9113), server side, sans-IO: bytes in, bytes out, `now` in, deadline out, and
//! each stream's request given to the same [`Handler`](crate::http::Handler) as HTTP/1.1.
//!
//! ```text
//!   frame    the frame codec (§4, §6): header, each type's payload checked, the writers
//!   hpack    header compression (RFC 7541), bounded: list size with the 32-byte overhead,
//!            field count, table size updates
//!   head     a request's header list checked (§8.2, §8.3) and made a Request
//!   answer   a response head HPACK-coded as it is written (the same Head HTTP/1.1 writes)
//!   config   every setting and abuse limit, with its default and where it comes from;
//!            the counters a driver reports
//!   connection  the state machine: preface, SETTINGS, stream states (§5.1), flow control
//!            (§5.2, §6.9), GOAWAY, the attack limits; Step out, like http::Session
//! ```
//!
//! Files are answered as HTTP/1.1 answers them (validators, ranges, codings); the driver
//! opens the file ([`Step::Open`]) and the connection reads it into DATA frames as the
//! windows open ([`FileRead`]).
//!
//! What this module does **not** do: server push (never: RFC 9113 lets a server not push),
//! RFC 8441's extended CONNECT, trailers in responses, and the entry into it (ALPN `h2`, or
//! the preface on a plain listener), which is the drivers'.

pub(crate) mod answer;
pub mod config;
pub mod connection;
pub mod frame;
pub mod head;
pub mod hpack;

pub use config::{Abuse, Counts, H2Config};
pub use connection::{Connection, FileRead, Step};
pub use frame::PREFACE;
