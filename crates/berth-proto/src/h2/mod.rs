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
//!   client   the client role, sans-IO: the testkit's and `berth bench --h2`'s protocol
//!   connection  the state machine: preface, SETTINGS, stream states (§5.1), flow control
//!            (§5.2, §6.9), GOAWAY, the attack limits; http::Action out, as every codec
//! ```
//!
//! Files are answered as HTTP/1.1 answers them (validators, ranges, codings); the driver
//! opens the file ([`Action::Open`](crate::http::Action::Open)), keeps it ([`Action::Body`](crate::http::Action::Body)) and reads it when the
//! connection pulls ([`Action::Pull`](crate::http::Action::Pull)) as the windows open; the connection frames what it is
//! given into DATA.
//!
//! What this module does **not** do: server push (never: RFC 9113 lets a server not push),
//! RFC 8441's extended CONNECT, trailers in responses, and the entry into it (ALPN `h2`, or
//! the preface on a plain listener), which is the drivers'.

pub(crate) mod answer;
pub mod client;
pub mod config;
pub mod connection;
pub mod frame;
pub mod head;
pub mod hpack;

pub use config::{Abuse, Counts, H2Config};
pub use connection::{Connection, Pulled};
pub use frame::PREFACE;
