//! QPACK (RFC 9204), berth's own, sans-IO: HTTP/3's header compression, bounded by the limits
//! berth announces.
//!
//! QPACK is HPACK (RFC 7541) reworked for streams that arrive out of order: the dynamic table
//! changes only through the **encoder stream**, field sections only reference it (by an index
//! relative to a Base the section names), and the **decoder stream** tells the encoder what
//! arrived, so that it knows which entries it may reference without blocking and which it may
//! evict. The integers, strings and Huffman code are HPACK's, shared with
//! [`crate::h2::hpack`].
//!
//! ```text
//!             peer's encoder stream bytes ──> Decoder::handle_encoder_stream ──> table
//!   HEADERS payload (stream id, section) ──> Decoder::decode ──> Fields | Blocked | TooLarge
//!                                             Decoder::poll_unblocked ──> (stream, Fields..)
//!             peer's decoder stream bytes <── Decoder::write_decoder_stream  (acks, cancels,
//!                                                                              increments)
//!
//!   fields (stream id) ──> Encoder::encode ──> HEADERS payload
//!                          Encoder::write_encoder_stream ──> our encoder stream bytes
//!   our decoder stream's bytes from the peer ──> Encoder::handle_decoder_stream
//! ```
//!
//! ```text
//!   static_table  Appendix A's 99 entries
//!   prim          prefixed integers and N-bit-prefix strings (§4.1), on hpack's
//!   instruction   encoder and decoder stream instructions (§4.3, §4.4), partial input waits
//!   field         the section prefix and Required Insert Count (§4.5.1), the five field
//!                 line representations (§4.5.2 to §4.5.6)
//!   table         the dynamic table: absolute indices, capacity, eviction (§3.2)
//!   decoder       the peer's table followed in full; blocked streams; bounded sections
//!   encoder       static only, or with a table of its own within the peer's limits
//! ```
//!
//! The decoder handles everything a peer's encoder may do, within three limits it announces
//! ([`DecoderConfig`]): the table capacity, the blocked streams (one more is a connection
//! error, QPACK_DECOMPRESSION_FAILED), and the decoded size of a section (counted as RFC 9114
//! §4.2.2 counts it; past it the section is [`Decoded::TooLarge`], for a 431). Nothing is
//! allocated on a length the peer claims before the bytes are there: an encoder-stream string
//! that could not fit the table is refused from its length, and field sections come whole,
//! bounded by the frame reader's limit.
//!
//! What this module does **not** do: validate fields (lowercase names, pseudo-fields: that
//! is HTTP/3's message layer), keep the N ("never index") bit of fields it decodes (berth
//! does not re-encode what it receives), or duplicate entries on its own initiative.

pub mod decoder;
pub mod encoder;
pub mod field;
pub mod instruction;
pub mod prim;
pub mod static_table;
pub mod table;

pub use crate::h2::hpack::Field;
pub use decoder::{Decoded, Decoder, DecoderConfig};
pub use encoder::{encode_static, Encoder};

/// What each entry adds to a table's size, and each field to a field section's (RFC 9204
/// §3.2.1, RFC 9114 §4.2.2).
pub const ENTRY_OVERHEAD: usize = 32;

#[cfg(test)]
mod tests_interop;
#[cfg(test)]
mod tests_limits;
#[cfg(test)]
mod tests_rfc;
#[cfg(test)]
mod tests_roundtrip;
