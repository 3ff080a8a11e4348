//! A response head as HTTP/2 sends it: the same [`Head`] HTTP/1.1 writes as text, HPACK-coded
//! as it is written, so no handler, reply or file answer needs to know which protocol carries
//! it, and none is written as text and read back. Names are lowercased on the way (RFC 9113
//! §8.2.1) and the fields HTTP/2 forbids (§8.2.2) are left out.
//!
//! Written in two parts. [`encode_head`] writes what is particular to the answer, wherever the
//! head is made (`write_fields`, with no connection at hand). The connection then puts
//! `:status` and the fields answers repeat in front ([`begin_block`]) with its own
//! [`Encoder`], which indexes them: from the second answer on, `server`, `date` and a repeated
//! `content-type` cost a byte each.

use super::hpack::{self, names, Encoder};
use crate::http::response::{Head, Stamp};

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

/// Appends what of `head` is the answer's own. First the `content-type` (if `with_type`) as
/// [`begin_block`] takes it to index: its length as an HPACK integer with no flags, then its
/// bytes (length 0: none). Then, HPACK-coded, `content-length` if `length` says one (the
/// caller, `write_fields`, leaves it out where the status has no content) and the head's
/// fields.
pub(crate) fn encode_head(
    out: &mut Vec<u8>,
    head: &Head<'_>,
    with_type: bool,
    length: Option<u64>,
) {
    let kind = if with_type { head.content_type } else { "" };
    hpack::encode_int(out, 0, 7, kind.len());
    out.extend_from_slice(kind.as_bytes());
    let mut num = itoa::Buffer::new();
    if let Some(length) = length {
        hpack::encode(
            [(&b"content-length"[..], num.format(length).as_bytes())],
            out,
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
        hpack::encode([(name, value)], out);
    }
}

/// Writes the header block of an answer to `block`: a pending table size update, `:status`,
/// `server` and `date` as `stamp` says, the `content-type` [`encode_head`] put at the front of
/// `head` (these three through `encoder`, which indexes them), then the rest of `head`.
pub(crate) fn begin_block(
    encoder: &mut Encoder,
    status: u16,
    stamp: Stamp<'_>,
    head: &[u8],
    block: &mut Vec<u8>,
) {
    encoder.begin(block);
    let mut num = itoa::Buffer::new();
    hpack::encode([(&b":status"[..], num.format(status).as_bytes())], block);
    if stamp.server {
        encoder.field(names::SERVER, b"berth", block);
    }
    if let Some(date) = stamp.date {
        encoder.field(names::DATE, date, block);
    }
    let mut rest = head;
    let kind_len = hpack::decode_int(&mut rest, 7).unwrap_or(0).min(rest.len());
    let (kind, rest) = rest.split_at(kind_len);
    if !kind.is_empty() {
        encoder.field(names::CONTENT_TYPE, kind, block);
    }
    block.extend_from_slice(rest);
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
