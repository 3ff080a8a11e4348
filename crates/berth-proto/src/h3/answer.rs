//! A response head as HTTP/3 sends it: the same [`Head`] HTTP/1.1 writes as text and HTTP/2
//! HPACK-codes, written through HTTP/3's [`HeadSink`] ([`Qpack`]) as a QPACK field section,
//! which the connection frames as HEADERS. Trailers too ([`trailer_section`]).
//!
//! Answers are coded with the **static table only** (the encoder is never given a dynamic
//! table capacity). An answer's head is a handful of fields, most of which the static table
//! holds whole or by name (`:status 200`, `content-type`, `content-length`), and the rest
//! (`date`) change every second; a dynamic table would save a few bytes per answer at the
//! price of encoder-stream inserts, acknowledgments to track, and answers that can block at
//! the client until the encoder stream arrives (RFC 9204 §2.1.2). Static only, no answer ever
//! blocks, and berth opens no encoder stream (RFC 9204 §4.2 lets an endpoint that will not
//! use it not open one).

use std::borrow::Cow;

use super::qpack::Encoder;
use crate::h2::answer::is_connection_specific;
use crate::http::response::{Head, HeadSink};

/// HTTP/3's [`HeadSink`]: the answer's whole field section, QPACK-coded through the
/// connection's [`Encoder`] for `stream`, into `section` (the connection frames it as
/// HEADERS); nothing goes into the output, which holds the body alone. `:status` first, then
/// `server`, `date`, `content-type`, `content-length` and the answer's own fields, names
/// lowercased (RFC 9114 §4.2) and the connection-specific ones left out (§4.2: "MUST NOT
/// generate" them), as HTTP/2's sink does.
pub(crate) struct Qpack<'a> {
    pub encoder: &'a mut Encoder,
    pub stream: u64,
    pub section: &'a mut Vec<u8>,
}

impl HeadSink for Qpack<'_> {
    fn head(
        &mut self,
        _out: &mut Vec<u8>,
        head: &Head<'_>,
        with_type: bool,
        length: Option<u64>,
    ) -> usize {
        let mut status = itoa::Buffer::new();
        let mut len = itoa::Buffer::new();
        // Names are borrowed: only one that is not lowercase already is copied (RFC 9114
        // §4.2 wants them lowercase), so an answer costs one allocation, this list.
        let mut fields: Vec<(Cow<'_, [u8]>, &[u8])> = Vec::with_capacity(6 + head.fields.len());
        let mut field = |name: &'static [u8], value| fields.push((Cow::Borrowed(name), value));
        field(b":status", status.format(head.status).as_bytes());
        if head.stamp.server {
            field(b"server", b"berth");
        }
        if let Some(date) = head.stamp.date {
            field(b"date", date);
        }
        if let Some(alt_svc) = head.stamp.alt_svc {
            field(b"alt-svc", alt_svc);
        }
        if with_type && !head.content_type.is_empty() {
            field(b"content-type", head.content_type.as_bytes());
        }
        if let Some(length) = length {
            field(b"content-length", len.format(length).as_bytes());
        }
        let owned = head.fields.iter().map(|(n, v)| (n.as_str(), v.as_slice()));
        for (name, value) in head.extra.iter().copied().chain(owned) {
            if !is_connection_specific(name) {
                fields.push((lowercase(name), value));
            }
        }
        self.section.clear();
        self.encoder.encode(
            self.stream,
            fields.iter().map(|(n, v)| (&n[..], *v)),
            self.section,
        );
        0
    }

    fn frames_unknown_length(&self) -> bool {
        // DATA frames carry a body of any length; the stream's FIN ends it.
        true
    }

    fn chunks(&self) -> bool {
        false
    }
}

/// `name` lowercased, copied only if it is not already.
fn lowercase(name: &str) -> Cow<'_, [u8]> {
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(name.to_ascii_lowercase().into_bytes())
    } else {
        Cow::Borrowed(name.as_bytes())
    }
}

/// Writes the field section of an answer's trailers for `stream` to `section`: each field,
/// its name lowercased. The fields were checked
/// ([`check_trailers`](crate::http::check_trailers)): no pseudo-fields, none HTTP/3 forbids.
pub(crate) fn trailer_section(
    encoder: &mut Encoder,
    stream: u64,
    trailers: &[(String, Vec<u8>)],
    section: &mut Vec<u8>,
) {
    let names: Vec<Cow<'_, [u8]>> = trailers.iter().map(|(n, _)| lowercase(n)).collect();
    section.clear();
    encoder.encode(
        stream,
        names
            .iter()
            .zip(trailers)
            .map(|(n, (_, v))| (&n[..], &v[..])),
        section,
    );
}
