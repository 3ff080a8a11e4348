//! A response head as HTTP/2 sends it: the same [`Head`] HTTP/1.1 writes as text (status,
//! `server`, `date`, `content-type`, `content-length`, the handler's fields), HPACK-coded
//! straight into the block of a HEADERS frame. Names are lowercased on the way (RFC 9113
//! §8.2.1) and the fields HTTP/2 forbids (§8.2.2) are left out, so no handler, reply or file
//! answer needs to know which protocol carries it, and none is written as text and read back.

use super::hpack;
use crate::http::response::Head;

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

/// Appends `head`'s header block to `out`: `:status` first, then `server` and `date` as the
/// stamp says, `content-type` if `with_type`, `content-length` if `length` says one (the
/// caller, `write_fields`, leaves it out where the status has no content), then the head's
/// own fields.
pub(crate) fn encode_head(
    out: &mut Vec<u8>,
    head: &Head<'_>,
    with_type: bool,
    length: Option<u64>,
) {
    let mut num = itoa::Buffer::new();
    hpack::encode([(&b":status"[..], num.format(head.status).as_bytes())], out);
    if head.stamp.server {
        hpack::encode([(&b"server"[..], &b"berth"[..])], out);
    }
    if let Some(date) = head.stamp.date {
        hpack::encode([(&b"date"[..], date)], out);
    }
    if with_type {
        hpack::encode([(&b"content-type"[..], head.content_type.as_bytes())], out);
    }
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
