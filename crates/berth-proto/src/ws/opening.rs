//! The opening handshake read from raw bytes, for a listener that speaks only WebSocket (the
//! message engine's `ws://` listener): no HTTP session in front, so the head is parsed here, the
//! upgrade tokens and the path checked, and the answer written, 101 or the refusal that ends
//! the connection.
//!
//! The HTTP server's routes take the other way in: the HTTP session parses the request, checks
//! the tokens ([`Switch`](crate::upgrade::Switch)) and writes the 101; both use
//! [`handshake::accept`] for what RFC 6455 adds.

use super::deflate::Agreed;
use super::handshake::{self, Offer};
use crate::http::head::asks_to_switch;
use crate::http::request::{Method, Request, Version};
use crate::http::response::{write_response, write_switching, Head, Stamp, Text};

/// Most header fields an opening handshake may have.
const MAX_FIELDS: usize = 64;

/// What the bytes read so far make of the opening handshake.
#[derive(Debug, PartialEq, Eq)]
pub enum Opening {
    /// The head is not complete yet: read more (within the caller's limit on its size).
    Partial,
    /// Accepted: `response` (the 101) is to be sent, and the frames start `consumed` bytes
    /// into the input.
    Open {
        /// The length of the head.
        consumed: usize,
        /// The 101 Switching Protocols.
        response: Vec<u8>,
        /// permessage-deflate, if it was agreed (for the session).
        deflate: Option<Agreed>,
    },
    /// Refused: `response` is to be sent, then the connection closed.
    Refused {
        /// The status, for the log.
        status: u16,
        /// The whole answer: status, `Connection: close`, the reason as the body.
        response: Vec<u8>,
    },
}

/// Reads an opening handshake for `path` from `input`. A head longer than `max_head` bytes is
/// refused (431); `date` is the `Date` field's value.
pub fn open(input: &[u8], path: &str, max_head: usize, offer: &Offer<'_>, date: &[u8]) -> Opening {
    let refuse = |status: u16, why: &str| Opening::Refused {
        status,
        response: refusal(status, why, &[], date),
    };
    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut parsed = httparse::Request::new(&mut fields);
    let consumed = match parsed.parse(input) {
        Ok(httparse::Status::Complete(n)) if n <= max_head => n,
        Ok(httparse::Status::Partial) if input.len() <= max_head => return Opening::Partial,
        Ok(_) | Err(httparse::Error::TooManyHeaders) => {
            return refuse(431, "the opening handshake is too large\n")
        }
        Err(_) => return refuse(400, "not an HTTP request\n"),
    };
    let (Some(token), Some(target), Some(minor)) = (parsed.method, parsed.path, parsed.version)
    else {
        return refuse(400, "not an HTTP request\n");
    };
    let Some(method) = Method::parse(token) else {
        return refuse(400, "a WebSocket handshake is a GET\n");
    };
    let (request_path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let request = Request {
        method,
        target,
        path: request_path,
        query,
        version: if minor == 1 {
            Version::Http11
        } else {
            Version::Http10
        },
        headers: parsed.headers,
        body: &[],
        peer: None,
    };
    if request.path != path {
        return refuse(404, "no WebSocket here\n");
    }
    if !asks_to_switch(&request, "websocket") {
        let why = "a WebSocket: HTTP/1.1 with Connection: upgrade and Upgrade: websocket\n";
        return Opening::Refused {
            status: 426,
            response: refusal(426, why, &[("Upgrade", b"websocket")], date),
        };
    }
    if request.header("content-length").is_some_and(|v| v != b"0")
        || request.header("transfer-encoding").is_some()
    {
        return refuse(400, "an opening handshake has no body\n");
    }
    match handshake::accept(&request, offer) {
        Ok(accepted) => {
            let mut response = Vec::with_capacity(256);
            write_switching(
                &mut response,
                "websocket",
                &accepted.headers,
                Version::Http11,
                Stamp::both(date),
            );
            Opening::Open {
                consumed,
                response,
                deflate: accepted.deflate,
            }
        }
        Err(refused) => Opening::Refused {
            status: refused.status,
            response: match refused.status {
                426 => refusal(426, refused.why, &[("Sec-WebSocket-Version", b"13")], date),
                s => refusal(s, refused.why, &[], date),
            },
        },
    }
}

/// A refusal: `status`, `Connection: close`, `why` as a text body (`extra` fields besides).
pub fn refusal(status: u16, why: &str, extra: &[(&str, &[u8])], date: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    let head = Head {
        status,
        content_type: "text/plain; charset=utf-8",
        extra,
        fields: &[],
        keep_alive: false,
        stamp: Stamp::both(date),
    };
    write_response(
        &mut out,
        &mut Text(Version::Http11),
        &head,
        why.as_bytes(),
        false,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATE: &[u8] = b"Wed, 25 Nov 2026 07:00:00 GMT";

    fn opening(head: &str) -> Opening {
        open(head.as_bytes(), "/ws/relay", 8192, &Offer::default(), DATE)
    }

    fn status(o: &Opening) -> u16 {
        match o {
            Opening::Partial => 0,
            Opening::Open { .. } => 101,
            Opening::Refused { status, .. } => *status,
        }
    }

    const GOOD: &str = "GET /ws/relay HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\n\
        Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
        Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";

    #[test]
    fn a_good_handshake_is_answered_101_with_the_accept_key() {
        let mut input = GOOD.as_bytes().to_vec();
        input.extend_from_slice(b"\x81\x80");
        let Opening::Open {
            consumed, response, ..
        } = open(&input, "/ws/relay", 8192, &Offer::default(), DATE)
        else {
            panic!("not accepted");
        };
        assert_eq!(consumed, GOOD.len());
        let text = String::from_utf8(response).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
            "{text}"
        );
        assert!(text.contains("\r\nUpgrade: websocket\r\n"), "{text}");
        assert!(text.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
        assert!(text.ends_with("\r\n\r\n"));
    }

    #[test]
    fn every_prefix_of_a_good_handshake_is_partial() {
        for n in 0..GOOD.len() {
            assert_eq!(opening(&GOOD[..n]), Opening::Partial, "{n} bytes");
        }
    }

    #[test]
    fn bad_handshakes_are_refused_with_their_status() {
        assert_eq!(status(&opening(&GOOD.replace("/ws/relay", "/other"))), 404);
        assert_eq!(status(&opening(&GOOD.replace("GET", "POST"))), 400);
        assert_eq!(status(&opening(&GOOD.replace("HTTP/1.1", "HTTP/1.0"))), 426);
        assert_eq!(
            status(&opening(&GOOD.replace("Upgrade: websocket", "X: y"))),
            426
        );
        assert_eq!(
            status(&opening(&GOOD.replace("Version: 13", "Version: 8"))),
            426
        );
        assert_eq!(status(&opening(&GOOD.replace("ZQ==", "Z"))), 400);
        let body = GOOD.replace("Host: x", "Content-Length: 3");
        assert_eq!(status(&opening(&body)), 400);
        assert_eq!(status(&opening("\x16\x03\x01 not http\r\n\r\n")), 400);
        let long = format!("GET /ws/relay HTTP/1.1\r\nX: {}\r\n", "a".repeat(9000));
        assert_eq!(status(&opening(&long)), 431);
        let Opening::Refused { response, .. } = opening(&GOOD.replace("/ws/relay", "/x")) else {
            panic!()
        };
        let text = String::from_utf8(response).unwrap();
        assert!(text.starts_with("HTTP/1.1 404 Not Found\r\n"), "{text}");
        assert!(text.contains("Connection: close"), "{text}");
    }
}
