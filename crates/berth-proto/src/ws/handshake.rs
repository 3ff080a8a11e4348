//! The opening handshake, server side (RFC 6455 §4.2): what makes an HTTP request a valid
//! WebSocket upgrade, and the fields of the 101 that accepts it. The `Upgrade: websocket` and
//! `Connection: upgrade` tokens, HTTP/1.1 and an empty body are the HTTP session's checks
//! ([`Switch`](crate::upgrade::Switch)); the rest is here.

use base64::Engine as _;
use sha1::{Digest, Sha1};

use super::deflate::{self, Agreed, DeflateConfig};
use crate::http::{Method, Request};

/// The GUID every accept key is made with (RFC 6455 §1.3).
const GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// `Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key`.
pub fn accept_key(key: &[u8]) -> String {
    let mut sha = Sha1::new();
    sha.update(key);
    sha.update(GUID);
    base64::engine::general_purpose::STANDARD.encode(sha.finalize())
}

/// Decides whether a handshake's `Origin` (`None`: the client sent none) may come in.
pub type OriginCheck<'a> = &'a dyn Fn(Option<&[u8]>) -> bool;

/// What the server offers: subprotocols it speaks (in its order of preference), which
/// origins it lets in, and whether (and how) it compresses.
#[derive(Default)]
pub struct Offer<'a> {
    /// Subprotocols the server speaks; the first the client also offers is chosen.
    pub protocols: &'a [&'a str],
    /// Decides on the `Origin` field (`None` if the client sent none); `None` here lets every
    /// origin in.
    pub origin: Option<OriginCheck<'a>>,
    /// permessage-deflate (RFC 7692), negotiated under these settings; `None`: never (the
    /// session must then be made without it).
    pub deflate: Option<DeflateConfig>,
}

/// Why a request is not accepted: the status to answer and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// 400, 403 or 426 (a version other than 13: the answer names 13).
    pub status: u16,
    /// The body of the answer.
    pub why: &'static str,
}

/// What accepting the request needs: the fields of the 101, and the subprotocol chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// `Sec-WebSocket-Accept`, and `Sec-WebSocket-Protocol` if one was chosen.
    pub headers: Vec<(String, String)>,
    /// The subprotocol chosen, if any.
    pub protocol: Option<String>,
    /// permessage-deflate, if it was agreed (`Sec-WebSocket-Extensions` is among `headers`):
    /// for [`WsSession::with_deflate`](super::WsSession::with_deflate).
    pub deflate: Option<Agreed>,
}

/// Checks what RFC 6455 §4.2.1 asks of a client's opening handshake beyond the upgrade tokens:
/// GET, `Sec-WebSocket-Version: 13` (426 naming 13 otherwise), a `Sec-WebSocket-Key` that is 16
/// bytes in base64, and an origin `offer` lets in (403 otherwise).
pub fn accept(req: &Request<'_>, offer: &Offer<'_>) -> Result<Accepted, Refused> {
    let refuse = |status, why| Err(Refused { status, why });
    if req.method != Method::Get {
        return refuse(400, "a WebSocket handshake is a GET\n");
    }
    match req.header("sec-websocket-version").map(trim) {
        Some(b"13") => {}
        Some(_) => return refuse(426, "only WebSocket version 13 is spoken\n"),
        None => return refuse(400, "no Sec-WebSocket-Version\n"),
    }
    let Some(key) = req.header("sec-websocket-key").map(trim) else {
        return refuse(400, "no Sec-WebSocket-Key\n");
    };
    let decoded = base64::engine::general_purpose::STANDARD.decode(key);
    if decoded.map(|k| k.len()) != Ok(16) {
        return refuse(400, "Sec-WebSocket-Key is not 16 bytes in base64\n");
    }
    if let Some(allow) = offer.origin {
        if !allow(req.header("origin")) {
            return refuse(403, "origin not allowed\n");
        }
    }
    let mut headers = vec![("Sec-WebSocket-Accept".to_owned(), accept_key(key))];
    let offered = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("sec-websocket-protocol"))
        .flat_map(|h| h.value.split(|&b| b == b','))
        .map(trim)
        .collect::<Vec<_>>();
    let protocol = offer
        .protocols
        .iter()
        .find(|p| offered.contains(&p.as_bytes()))
        .map(|p| p.to_string());
    if let Some(p) = &protocol {
        headers.push(("Sec-WebSocket-Protocol".to_owned(), p.clone()));
    }
    let extensions = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("sec-websocket-extensions"))
        .map(|h| h.value);
    let agreed = offer
        .deflate
        .and_then(|config| deflate::negotiate(extensions, &config));
    let deflate = agreed.map(|(agreed, response)| {
        headers.push(("Sec-WebSocket-Extensions".to_owned(), response));
        agreed
    });
    Ok(Accepted {
        headers,
        protocol,
        deflate,
    })
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &v[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::http::Version;

    fn request<'a>(headers: &'a [httparse::Header<'a>]) -> Request<'a> {
        Request {
            method: Method::Get,
            target: "/ws",
            path: "/ws",
            query: None,
            version: Version::Http11,
            headers,
            body: b"",
            peer: None,
        }
    }

    fn header<'a>(name: &'a str, value: &'a str) -> httparse::Header<'a> {
        httparse::Header {
            name,
            value: value.as_bytes(),
        }
    }

    #[test]
    fn subprotocols_are_chosen_in_the_servers_order_and_origins_checked() {
        let headers = [
            header("Sec-WebSocket-Version", "13"),
            header("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            header("Sec-WebSocket-Protocol", "chat, superchat"),
            header("Origin", "https://good.example"),
        ];
        let req = request(&headers);
        let offer = Offer {
            protocols: &["superchat", "chat"],
            origin: None,
            deflate: None,
        };
        let accepted = accept(&req, &offer).unwrap();
        assert_eq!(accepted.protocol.as_deref(), Some("superchat"));
        assert!(accepted
            .headers
            .contains(&("Sec-WebSocket-Protocol".to_owned(), "superchat".to_owned())));
        let none = accept(&req, &Offer::default()).unwrap();
        assert_eq!(none.protocol, None);
        assert_eq!(
            none.headers.len(),
            1,
            "no protocol field when none is chosen"
        );
        let only_bad = |o: Option<&[u8]>| o == Some(b"https://bad.example".as_slice());
        let strict = |o: Option<&[u8]>| o == Some(b"https://other.example".as_slice());
        let offer = Offer {
            protocols: &[],
            origin: Some(&only_bad),
            deflate: None,
        };
        assert_eq!(accept(&req, &offer).unwrap_err().status, 403);
        let offer = Offer {
            protocols: &[],
            origin: Some(&strict),
            deflate: None,
        };
        assert_eq!(accept(&req, &offer).unwrap_err().status, 403);
    }

    #[test]
    fn permessage_deflate_is_agreed_only_when_offered_on_both_sides() {
        let headers = [
            header("Sec-WebSocket-Version", "13"),
            header("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            header("Sec-WebSocket-Extensions", "x-foo, permessage-deflate; bad"),
            header(
                "Sec-WebSocket-Extensions",
                "permessage-deflate; client_max_window_bits",
            ),
        ];
        let req = request(&headers);
        let on = Offer {
            deflate: Some(DeflateConfig::default()),
            ..Offer::default()
        };
        let accepted = accept(&req, &on).unwrap();
        assert!(accepted.deflate.is_some());
        assert!(accepted.headers.contains(&(
            "Sec-WebSocket-Extensions".to_owned(),
            "permessage-deflate; server_no_context_takeover".to_owned()
        )));
        let off = accept(&req, &Offer::default()).unwrap();
        assert_eq!((off.deflate, off.headers.len()), (None, 1));
        // Nothing acceptable offered: the handshake goes on without the extension.
        let bad = [
            header("Sec-WebSocket-Version", "13"),
            header("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            header(
                "Sec-WebSocket-Extensions",
                "permessage-deflate; server_max_window_bits=99",
            ),
        ];
        let plain = accept(&request(&bad), &on).unwrap();
        assert_eq!((plain.deflate, plain.headers.len()), (None, 1));
    }

    #[test]
    fn the_accept_key_of_rfc_6455s_example() {
        assert_eq!(
            accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }
}
