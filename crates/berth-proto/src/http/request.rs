//! The request view handed to a [`Handler`](super::Handler): borrowed from the connection's
//! input buffer, so building it copies and allocates nothing.

/// Request methods berth knows. Anything else is answered 501 by the session itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `GET`
    Get,
    /// `HEAD`: answered like `GET` without the body.
    Head,
    /// `POST`
    Post,
    /// `PUT`
    Put,
    /// `DELETE`
    Delete,
    /// `OPTIONS`
    Options,
    /// `PATCH`
    Patch,
    /// `TRACE`
    Trace,
    /// `CONNECT`
    Connect,
}

impl Method {
    /// Parses a method token; `None` for methods berth does not implement (the session sends 501).
    pub fn parse(token: &str) -> Option<Method> {
        // Methods are case-sensitive (RFC 9110 §9.1): `get` is not `GET`.
        Some(match token {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "OPTIONS" => Method::Options,
            "PATCH" => Method::Patch,
            "TRACE" => Method::Trace,
            "CONNECT" => Method::Connect,
            _ => return None,
        })
    }

    /// The method's token as sent on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            Method::Options => "OPTIONS",
            Method::Patch => "PATCH",
            Method::Trace => "TRACE",
            Method::Connect => "CONNECT",
        }
    }
}

/// HTTP version of a request: 1.0 and 1.1 from the HTTP/1 session, 2 from the HTTP/2 codec
/// (`h2`, which sits above this module and is not named from it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0: connections close after each response unless `Connection: keep-alive`.
    Http10,
    /// HTTP/1.1: connections persist unless `Connection: close`.
    Http11,
    /// HTTP/2 (RFC 9113): one stream of a multiplexed connection, which persists; the request
    /// cannot ask for an `Upgrade` and has no `Connection` field.
    Http2,
}

/// One parsed request: head fields borrowed from the input buffer, body fully received.
#[derive(Debug)]
pub struct Request<'a> {
    /// The request method.
    pub method: Method,
    /// The raw request-target, e.g. `/reverse?x=1`.
    pub target: &'a str,
    /// The request-target up to `?`.
    pub path: &'a str,
    /// The part of the request-target after `?`, if any.
    pub query: Option<&'a str>,
    /// Protocol version.
    pub version: Version,
    /// Header fields in the order received.
    pub headers: &'a [httparse::Header<'a>],
    /// The complete body (chunked transfer coding already removed).
    pub body: &'a [u8],
    /// The address of the connection's peer, when the driver knows it (TCP and TLS over
    /// TCP; `None` over a UNIX socket or in memory): the access log's client, WSGI's
    /// `REMOTE_ADDR`, ASGI's `client`.
    pub peer: Option<std::net::SocketAddr>,
}

impl<'a> Request<'a> {
    /// Value of the first header field called `name` (compared case-insensitively).
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }
}

/// True if the comma-separated header list `value` contains `token` (case-insensitive).
pub(crate) fn list_contains(value: &[u8], token: &str) -> bool {
    value
        .split(|&b| b == b',')
        .any(|item| trim(item).eq_ignore_ascii_case(token.as_bytes()))
}

/// Strips optional whitespace (SP / HTAB) from both ends of a header value element.
pub(crate) fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}
