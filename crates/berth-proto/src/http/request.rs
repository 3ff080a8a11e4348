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

/// HTTP version of a request: 1.0 and 1.1 from the HTTP/1 session, 2 and 3 from the HTTP/2
/// and HTTP/3 codecs (`h2`, `h3`, which sit above this module and are not named from it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0: connections close after each response unless `Connection: keep-alive`.
    Http10,
    /// HTTP/1.1: connections persist unless `Connection: close`.
    Http11,
    /// HTTP/2 (RFC 9113): one stream of a multiplexed connection, which persists; the request
    /// cannot ask for an `Upgrade` and has no `Connection` field.
    Http2,
    /// HTTP/3 (RFC 9114): one request stream of a QUIC connection; as HTTP/2, no `Upgrade`
    /// and no `Connection` field.
    Http3,
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

/// A request head that owns its fields: what a multiplexed codec (HTTP/2, HTTP/3) keeps of a
/// stream's checked head while its body arrives or it waits its turn.
#[derive(Debug)]
pub struct ReqHead {
    /// The method.
    pub method: Method,
    /// `:path`.
    pub target: String,
    /// Regular fields, names lowercase.
    pub fields: Vec<(String, Vec<u8>)>,
    /// The declared `content-length`, if any.
    pub content_length: Option<u64>,
}

impl ReqHead {
    /// Whether the answer carries no body (HEAD).
    pub fn head_only(&self) -> bool {
        self.method == Method::Head
    }

    /// Calls `f` with the [`Request`] this head and `body` make, as `version` carried it.
    pub fn with_request<R>(
        &self,
        body: &[u8],
        peer: Option<std::net::SocketAddr>,
        version: Version,
        f: impl FnOnce(&Request<'_>) -> R,
    ) -> R {
        let headers: Vec<httparse::Header<'_>> = self
            .fields
            .iter()
            .map(|(n, v)| httparse::Header { name: n, value: v })
            .collect();
        let (path, query) = match self.target.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (self.target.as_str(), None),
        };
        let req = Request {
            method: self.method,
            target: &self.target,
            path,
            query,
            version,
            headers: &headers,
            body,
            peer,
        };
        f(&req)
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
