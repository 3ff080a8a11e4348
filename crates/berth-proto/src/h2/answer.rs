//! A response head as HTTP/2 sends it: the same [`Head`] HTTP/1.1 writes as text, written
//! through HTTP/2's [`HeadSink`] ([`Hpack`]) as a header block, so no handler, reply or file
//! answer needs to know which protocol carries it, and none is written as text and read back.
//! Trailers too ([`trailer_block`]).

use super::hpack::{self, names, Encoder};
use crate::http::response::{Head, HeadSink};

/// HTTP/1.1 fields that HTTP/2 forbids (RFC 9113 §8.2.2).
pub(crate) fn is_connection_specific(name: &str) -> bool {
    [
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "upgrade",
    ]
    .iter()
    .any(|f| name.eq_ignore_ascii_case(f))
}

/// HTTP/2's [`HeadSink`]: the answer's whole header block, HPACK-coded through the
/// connection's [`Encoder`] as it is written, into `block` (the connection frames it as
/// HEADERS); nothing goes into the output, which holds the body alone. `:status` first, then
/// `server`, `date` and the `content-type`, which the encoder indexes (from the second answer
/// on they cost a byte each), then `content-length` and the answer's own fields, names
/// lowercased (RFC 9113 §8.2.1) and those HTTP/2 forbids left out (§8.2.2).
///
/// Write with it only for a stream that is there to be answered: the encoder's table changes
/// as it writes, and the client's decoder must see every block written.
pub(crate) struct Hpack<'a> {
    pub encoder: &'a mut Encoder,
    pub block: &'a mut Vec<u8>,
}

impl HeadSink for Hpack<'_> {
    fn head(
        &mut self,
        _out: &mut Vec<u8>,
        head: &Head<'_>,
        with_type: bool,
        length: Option<u64>,
    ) -> usize {
        let block = &mut *self.block;
        block.clear();
        self.encoder.begin(block);
        let mut num = itoa::Buffer::new();
        hpack::encode(
            [(&b":status"[..], num.format(head.status).as_bytes())],
            block,
        );
        if head.stamp.server {
            self.encoder.field(names::SERVER, b"berth", block);
        }
        if let Some(date) = head.stamp.date {
            self.encoder.field(names::DATE, date, block);
        }
        if let Some(alt_svc) = head.stamp.alt_svc {
            hpack::encode([(&b"alt-svc"[..], alt_svc)], block);
        }
        if with_type && !head.content_type.is_empty() {
            self.encoder
                .field(names::CONTENT_TYPE, head.content_type.as_bytes(), block);
        }
        if let Some(length) = length {
            hpack::encode(
                [(&b"content-length"[..], num.format(length).as_bytes())],
                block,
            );
        }
        let owned = head.fields.iter().map(|(n, v)| (n.as_str(), v.as_slice()));
        let mut lower = [0u8; 64];
        let mut long = Vec::new();
        for (name, value) in head.extra.iter().copied().chain(owned) {
            if is_connection_specific(name) {
                continue;
            }
            let name = if name.len() <= lower.len() {
                let slot = &mut lower[..name.len()];
                slot.copy_from_slice(name.as_bytes());
                slot.make_ascii_lowercase();
                &*slot
            } else {
                long.clear();
                long.extend(name.bytes().map(|b| b.to_ascii_lowercase()));
                &long[..]
            };
            hpack::encode([(name, value)], block);
        }
        0
    }

    fn frames_unknown_length(&self) -> bool {
        true
    }

    fn chunks(&self) -> bool {
        false
    }
}

/// Writes the header block of an answer's trailers to `block`: a pending table size update,
/// then each field, its name lowercased, not indexed (trailers seldom repeat; the table is
/// kept for the fields that do). The fields were checked ([`check_trailers`]
/// (crate::http::check_trailers)): no pseudo-fields, none HTTP/2 forbids.
pub(crate) fn trailer_block(
    encoder: &mut Encoder,
    trailers: &[(String, Vec<u8>)],
    block: &mut Vec<u8>,
) {
    encoder.begin(block);
    let mut name = Vec::new();
    for (n, value) in trailers {
        name.clear();
        name.extend(n.bytes().map(|b| b.to_ascii_lowercase()));
        hpack::encode([(&name[..], &value[..])], block);
    }
}
