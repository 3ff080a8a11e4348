//! Responses: what an answer is ([`Reply`], [`Head`]) whatever the version, and where its
//! head is written ([`HeadSink`]). Every response berth sends goes through [`write_response`]
//! or [`write_head`], so every one carries `Server`, `Date`, `Content-Length` and what its
//! version says of the connection; the version is the sink's alone: [`Text`] writes HTTP/1.x
//! into the output, HTTP/2 an HPACK block beside it (`h2::answer`). A new version is a new
//! sink, never a branch here.

use super::request::Version;
use super::stream::BodyStream;
use crate::upgrade::Switch;

/// What a finished [`Job`](super::Job) answers: the session turns it into a full response.
#[derive(Debug, PartialEq, Eq)]
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// Value of `Content-Type`; ignored when the body is empty.
    pub content_type: &'static str,
    /// Extra header fields, e.g. `Retry-After` on a 503.
    pub headers: &'static [(&'static str, &'static [u8])],
    /// Header fields known only at run time (an application's own: a Python WSGI app's, say),
    /// written after `headers`. Their names and values must be valid field names and values
    /// (no CR, LF or NUL): [`Reply::with_field`] checks.
    pub fields: Vec<(String, Vec<u8>)>,
    /// Response body; with a `stream`, its first bytes.
    pub body: Vec<u8>,
    /// The rest of the body comes from this stream (see [`Reply::streamed`]).
    pub stream: Option<BodyStream>,
    /// Switch protocols instead (see [`Reply::switch`]).
    pub switch: Option<Box<Switch>>,
    /// A streamed body's length, declared by its producer (see [`Reply::with_length`]).
    pub length: Option<u64>,
    /// The body is a range of an open file instead (see [`Reply::file`]).
    /// Boxed: most replies have none, and the rest stays small.
    pub file: Option<Box<ReplyFile>>,
    /// The connection closes after this response (see [`Reply::closing`]).
    pub close: bool,
}

/// A reply's body taken from a file its job opened ([`Reply::file`]): `len` bytes from
/// `offset`, sent by the driver as it sends a `/files` answer's body.
#[derive(Debug, PartialEq, Eq)]
pub struct ReplyFile {
    /// First byte to send.
    pub offset: u64,
    /// How many bytes: the head's `Content-Length`.
    pub len: u64,
    /// The file, until the driver takes it (before the reply reaches the protocol).
    pub source: FileSource,
}

/// Where a [`ReplyFile`]'s bytes are, as the reply travels from the job to the connection.
pub enum FileSource {
    /// As the job opened it.
    Open(std::fs::File),
    /// Taken by the driver, which sends the range itself: as the socket takes it
    /// (`sendfile(2)` where the transport can), or as a protocol's windows pull it.
    Taken,
}

impl std::fmt::Debug for FileSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FileSource::Open(_) => "Open(..)",
            FileSource::Taken => "Taken",
        })
    }
}

/// Two sources are equal only if they are the same file (or both taken).
impl PartialEq for FileSource {
    fn eq(&self, other: &Self) -> bool {
        use std::os::fd::AsRawFd;
        match (self, other) {
            (FileSource::Open(a), FileSource::Open(b)) => a.as_raw_fd() == b.as_raw_fd(),
            (FileSource::Taken, FileSource::Taken) => true,
            _ => false,
        }
    }
}

impl Eq for FileSource {}

impl Reply {
    /// A reply with a body and no extra header fields.
    pub fn new(status: u16, content_type: &'static str, body: Vec<u8>) -> Self {
        Reply {
            status,
            content_type,
            headers: &[],
            fields: Vec::new(),
            body,
            stream: None,
            switch: None,
            length: None,
            file: None,
            close: false,
        }
    }

    /// A reply whose body is streamed: `first` bytes, then whatever the producer pushes into
    /// `stream` until it ends (see the `stream` module). The header fields are the
    /// application's ([`Reply::with_field`]), Content-Type among them; the session frames the
    /// body (chunked for HTTP/1.1; for HTTP/1.0 the body ends with the connection).
    pub fn streamed(status: u16, first: Vec<u8>, stream: BodyStream) -> Self {
        Reply {
            stream: Some(stream),
            ..Reply::new(status, "", first)
        }
    }

    /// A job's answer that switches the connection to another protocol, as
    /// [`Handled::Upgrade`](super::Handled::Upgrade) does for a handler: for a request that
    /// asked to switch (HTTP/1.1, `Connection: upgrade`, an `Upgrade` field, no body) the
    /// session writes `101 Switching Protocols` with the switch's fields and hands its session
    /// to the driver; for any other the answer is 500 (the job's mistake). The job checks that
    /// the request named `switch.protocol` (it had the request). This is how an application
    /// that decides asynchronously (an ASGI app's `websocket.accept`) accepts a WebSocket.
    pub fn switch(switch: Switch) -> Self {
        Reply {
            switch: Some(Box::new(switch)),
            ..Reply::new(101, "", Vec::new())
        }
    }

    /// A reply whose body is `len` bytes of `file` from `offset` (an ASGI application's
    /// `http.response.pathsend`): the head says `Content-Length: len` and carries the fields
    /// added ([`Reply::with_field`]), Content-Type among them; the driver sends the bytes as it
    /// sends a `/files` answer's (`sendfile(2)` where the transport can; HTTP/2 reads them as
    /// the windows open), never reading the file whole. A HEAD request, or a status without a
    /// body (1xx, 204, 304), gets the head alone. A file that turns out shorter than `len`
    /// ends the connection, as a `/files` answer's does.
    pub fn file(status: u16, file: std::fs::File, offset: u64, len: u64) -> Self {
        Reply {
            file: Some(Box::new(ReplyFile {
                offset,
                len,
                source: FileSource::Open(file),
            })),
            ..Reply::new(status, "", Vec::new())
        }
    }

    /// The connection closes after this response (`Connection: close` over HTTP/1.1): an
    /// answer after which nothing more may come on the connection (an ASGI application's
    /// denial of a WebSocket handshake, which the specification ends with a close).
    pub fn closing(mut self) -> Self {
        self.close = true;
        self
    }

    /// Adds a header field known at run time. `Err` (the reply unchanged) if the name is not
    /// a token or the value holds CR, LF or NUL, which would let the field smuggle others
    /// into the response; also for the fields berth writes itself (`Content-Length`,
    /// `Connection`, `Transfer-Encoding`, `Date`, `Server`), which the caller should drop.
    // The refused reply comes back as it was, by value: a builder's error is its input.
    #[allow(clippy::result_large_err)]
    pub fn with_field(mut self, name: &str, value: &[u8]) -> Result<Self, Self> {
        if !field_is_clean(name, value) || is_one_of(name, &BERTHS_OWN) {
            return Err(self);
        }
        self.fields.push((name.to_owned(), value.to_vec()));
        Ok(self)
    }

    /// Sends `trailers` after the body: a trailer section after the last chunk for HTTP/1.1,
    /// a HEADERS frame ending the stream for HTTP/2 (gRPC's `grpc-status` goes there). The
    /// reply becomes a streamed one whose stream has already ended, so HTTP/1.1 frames it
    /// chunked; an HTTP/1.0 client, which has no way to receive trailers, gets the body alone,
    /// ended by the close. Nothing is sent after a body a status forbids (1xx, 204, 304) or a
    /// HEAD request's. Announcing them in a `Trailer` field ([`Reply::with_field`]) is the
    /// caller's choice, as RFC 9110 §6.6.2 suggests.
    ///
    /// `Err` (the reply unchanged) for a field [`check_trailers`] refuses, or a reply that is
    /// already streamed: its producer gives its trailers at the end
    /// ([`StreamWriter::end_with`](super::StreamWriter::end_with)).
    // The refused reply comes back as it was, by value: a builder's error is its input.
    #[allow(clippy::result_large_err)]
    pub fn with_trailers(mut self, trailers: Vec<(String, Vec<u8>)>) -> Result<Self, Self> {
        if self.stream.is_some() || self.switch.is_some() || check_trailers(&trailers).is_err() {
            return Err(self);
        }
        let (writer, stream) = super::stream::body_stream();
        if writer.end_with(trailers).is_err() {
            return Err(self);
        }
        if self.body.is_empty() {
            // As for a whole reply: no type for no content.
            self.content_type = "";
        }
        self.stream = Some(stream);
        Ok(self)
    }

    /// Declares the length of a streamed reply's body (its first bytes included), as an
    /// application that sets its own `Content-Length` does: the head says `Content-Length:
    /// length` instead of `Transfer-Encoding: chunked`, the body goes unframed, and the
    /// connection may be kept alive. The body must be exactly that long: bytes past it are not
    /// sent, and a stream that ends short of it (or past it, or aborts) closes the connection
    /// after the bytes sent, so that the client can tell the body is incomplete. A HEAD request
    /// gets the head with the declared length; a status without a body (1xx, 204, 304), the
    /// head alone. A reply without a stream ignores it.
    pub fn with_length(mut self, length: u64) -> Self {
        self.length = Some(length);
        self
    }

    /// A reply with an empty body.
    pub fn empty(status: u16) -> Self {
        Reply::new(status, "text/plain", Vec::new())
    }

    /// The head this reply is written with.
    pub(crate) fn head<'a>(&'a self, keep_alive: bool, stamp: Stamp<'a>) -> Head<'a> {
        Head {
            status: self.status,
            content_type: self.content_type,
            extra: self.headers,
            fields: &self.fields,
            keep_alive,
            stamp,
        }
    }

    /// 503 for a job that found the worker queue full: come back in a second.
    pub fn overloaded() -> Self {
        Reply {
            status: 503,
            content_type: "text/plain",
            headers: &[("Retry-After", b"1")],
            fields: Vec::new(),
            body: b"server busy: job queue full\n".to_vec(),
            stream: None,
            switch: None,
            length: None,
            file: None,
            close: false,
        }
    }

    /// 500 for a job that failed (panicked).
    pub fn failed() -> Self {
        Reply::new(
            500,
            "text/plain",
            b"the request failed on the server\n".to_vec(),
        )
    }
}

/// The fields berth writes itself: an application's own would duplicate or contradict them.
const BERTHS_OWN: [&str; 5] = [
    "content-length",
    "connection",
    "transfer-encoding",
    "date",
    "server",
];

/// Fields a trailer section must not carry (RFC 9110 §6.5.1): framing, routing, connection
/// control, what describes the content as a whole, and berth's own. HTTP/2 forbids the
/// connection-specific ones anywhere (RFC 9113 §8.2.2).
const NOT_IN_TRAILERS: [&str; 14] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "upgrade",
    "te",
    "trailer",
    "host",
    "content-type",
    "content-encoding",
    "content-range",
    "date",
    "server",
];

/// A trailer field berth will not send: its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadTrailer(pub String);

impl std::fmt::Display for BadTrailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "trailer field {:?} is not allowed (not a token, a value with CR, LF or NUL, or a \
             field a trailer must not carry: framing, routing, connection control, the \
             content's type, encoding or range)",
            self.0
        )
    }
}

impl std::error::Error for BadTrailer {}

/// Checks trailer fields before they are sent: each name a token (not a pseudo-field), each
/// value free of CR, LF and NUL, and none of the fields a trailer section must not carry.
pub fn check_trailers(trailers: &[(String, Vec<u8>)]) -> Result<(), BadTrailer> {
    match trailers
        .iter()
        .find(|(name, value)| !field_is_clean(name, value) || is_one_of(name, &NOT_IN_TRAILERS))
    {
        Some((name, _)) => Err(BadTrailer(name.clone())),
        None => Ok(()),
    }
}

/// A field name that is a token and a value without CR, LF or NUL: nothing that could end
/// the field early and smuggle another.
fn field_is_clean(name: &str, value: &[u8]) -> bool {
    let token = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    token && !value.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0)
}

fn is_one_of(name: &str, names: &[&str]) -> bool {
    names.iter().any(|f| name.eq_ignore_ascii_case(f))
}

/// Lets a [`Handler`](super::Handler) answer the request it was given, once.
pub struct Response<'a> {
    /// Where the body goes (and the head, for a sink that writes it inline).
    pub(crate) out: &'a mut Vec<u8>,
    /// How the connection's version writes the head.
    pub(crate) sink: &'a mut dyn HeadSink,
    pub(crate) stamp: Stamp<'a>,
    pub(crate) keep_alive: bool,
    pub(crate) head_only: bool,
    pub(crate) sent: Option<u16>,
}

impl Response<'_> {
    /// Sends a complete response. Calling it twice is a caller bug; the second call is ignored.
    pub fn send(&mut self, status: u16, content_type: &str, body: &[u8]) {
        self.send_with(status, content_type, &[], body);
    }

    /// Sends a complete response with extra header fields (`(name, value)` pairs).
    pub fn send_with(
        &mut self,
        status: u16,
        content_type: &str,
        headers: &[(&str, &[u8])],
        body: &[u8],
    ) {
        if self.sent.is_some() {
            debug_assert!(false, "response sent twice");
            return;
        }
        self.sent = Some(status);
        let head = Head {
            status,
            content_type,
            extra: headers,
            fields: &[],
            keep_alive: self.keep_alive,
            stamp: self.stamp,
        };
        write_response(self.out, self.sink, &head, body, self.head_only);
    }

    /// Closes the connection after this response, whatever the request asked for.
    pub fn close(&mut self) {
        self.keep_alive = false;
    }

    /// Whether the connection will stay open after this response.
    pub fn keep_alive(&self) -> bool {
        self.keep_alive
    }
}

/// Everything of a response but its body, whatever the version that carries it.
pub(crate) struct Head<'a> {
    pub status: u16,
    pub content_type: &'a str,
    pub extra: &'a [(&'a str, &'a [u8])],
    pub fields: &'a [(String, Vec<u8>)],
    pub keep_alive: bool,
    pub stamp: Stamp<'a>,
}

/// Where a version writes a response [`Head`] (see the module docs): the one place a version
/// differs in how an answer looks, and what it can carry.
pub(crate) trait HeadSink {
    /// Writes `head`, with its Content-Type if `with_type` and `Content-Length: length` if
    /// given (the caller leaves it out where the status has no content). Returns how many
    /// bytes of `out` the head took: 0 for a sink that keeps heads apart from the body.
    fn head(
        &mut self,
        out: &mut Vec<u8>,
        head: &Head<'_>,
        with_type: bool,
        length: Option<u64>,
    ) -> usize;

    /// Whether a body of unknown length can be sent and kept apart from the next answer
    /// (HTTP/1.1 chunks it, HTTP/2 ends its stream); HTTP/1.0 can only close the connection.
    fn frames_unknown_length(&self) -> bool;

    /// Whether such a body goes chunked (HTTP/1.1); else bare (HTTP/2's frames end it).
    fn chunks(&self) -> bool;
}

/// HTTP/1.x's head: a status line and fields as text, in the output before the body.
pub(crate) struct Text(pub Version);

impl HeadSink for Text {
    fn head(
        &mut self,
        out: &mut Vec<u8>,
        head: &Head<'_>,
        with_type: bool,
        length: Option<u64>,
    ) -> usize {
        let start = out.len();
        let mut num = itoa::Buffer::new();
        // Fixed-size pieces where the size is known: copied inline rather than by a call.
        let status = head.status;
        match u8::try_from(status / 100) {
            Ok(hundreds @ 1..=9) => {
                let mut line = *b"HTTP/1.1 000 ";
                line[9] += hundreds;
                line[10] += (status / 10 % 10) as u8;
                line[11] += (status % 10) as u8;
                out.extend_from_slice(&line);
            }
            _ => {
                out.extend_from_slice(b"HTTP/1.1 ");
                out.extend_from_slice(num.format(status).as_bytes());
                out.push(b' ');
            }
        }
        out.extend_from_slice(reason_phrase(status).as_bytes());
        if head.stamp.server {
            out.extend_from_slice(b"\r\nServer: berth");
        }
        if let Some(date) = head.stamp.date {
            out.extend_from_slice(b"\r\nDate: ");
            match <&[u8; super::DATE_LEN]>::try_from(date) {
                Ok(date) => out.extend_from_slice(date),
                Err(_) => out.extend_from_slice(date),
            }
        }
        if let Some(alt_svc) = head.stamp.alt_svc {
            out.extend_from_slice(b"\r\nAlt-Svc: ");
            out.extend_from_slice(alt_svc);
        }
        if with_type {
            out.extend_from_slice(b"\r\nContent-Type: ");
            out.extend_from_slice(head.content_type.as_bytes());
        }
        if let Some(length) = length {
            out.extend_from_slice(b"\r\nContent-Length: ");
            out.extend_from_slice(num.format(length).as_bytes());
        }
        let owned = head.fields.iter().map(|(n, v)| (n.as_str(), v.as_slice()));
        for (name, value) in head.extra.iter().copied().chain(owned) {
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
        }
        match (head.keep_alive, self.0) {
            (false, _) => out.extend_from_slice(b"\r\nConnection: close"),
            // An HTTP/1.0 client only keeps the connection if told it may.
            (true, Version::Http10) => out.extend_from_slice(b"\r\nConnection: keep-alive"),
            (true, Version::Http11 | Version::Http2 | Version::Http3) => {}
        }
        out.extend_from_slice(b"\r\n\r\n");
        out.len() - start
    }

    fn frames_unknown_length(&self) -> bool {
        self.0 != Version::Http10
    }

    fn chunks(&self) -> bool {
        self.0 == Version::Http11
    }
}

/// The fields berth writes itself into every head, each unless switched off
/// ([`Limits::server_header`](super::Limits::server_header),
/// [`Limits::date_header`](super::Limits::date_header)): `Server: berth` and `Date` (the
/// driver's cached IMF-fixdate). Borrowed, so the head is still written without allocating.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stamp<'a> {
    pub server: bool,
    pub date: Option<&'a [u8]>,
    /// `Alt-Svc` ([`Context::alt_svc`](super::Context::alt_svc)).
    pub alt_svc: Option<&'a [u8]>,
}

impl<'a> Stamp<'a> {
    /// Both fields, with `date` (the message engine's WebSocket listeners, which have no
    /// switch for them).
    pub(crate) fn both(date: &'a [u8]) -> Self {
        Stamp {
            server: true,
            date: Some(date),
            alt_svc: None,
        }
    }
}

/// Appends the head of `101 Switching Protocols` to `protocol`, with `fields` (the new
/// protocol's own, e.g. `Sec-WebSocket-Accept`).
pub(crate) fn write_switching(
    out: &mut Vec<u8>,
    protocol: &str,
    fields: &[(String, String)],
    version: Version,
    stamp: Stamp<'_>,
) {
    // Only HTTP/1.x switches protocols (RFC 9113 §8.6).
    let mut extra: Vec<(&str, &[u8])> =
        vec![("Connection", b"Upgrade"), ("Upgrade", protocol.as_bytes())];
    extra.extend(fields.iter().map(|(n, v)| (n.as_str(), v.as_bytes())));
    let head = Head {
        status: 101,
        content_type: "",
        extra: &extra,
        fields: &[],
        keep_alive: true,
        stamp,
    };
    write_head(out, &mut Text(version), &head, None);
}

/// Appends a whole response to `out`; returns how many bytes the head took. With `head_only`
/// (a HEAD request) the body is measured for Content-Length but not sent.
pub(crate) fn write_response(
    out: &mut Vec<u8>,
    sink: &mut dyn HeadSink,
    head: &Head<'_>,
    body: &[u8],
    head_only: bool,
) -> usize {
    let head_len = write_fields(
        out,
        sink,
        head,
        !body.is_empty() && !head.content_type.is_empty(),
        Some(body.len() as u64),
    );
    if !head_only {
        out.extend_from_slice(body);
    }
    head_len
}

/// Appends a response head whose body, if any, the caller sends separately (a file). With
/// `length` the head says `Content-Length`; without it none (a 304). Content-Type is written
/// unless it is empty.
pub(crate) fn write_head(
    out: &mut Vec<u8>,
    sink: &mut dyn HeadSink,
    head: &Head<'_>,
    length: Option<u64>,
) -> usize {
    write_fields(out, sink, head, !head.content_type.is_empty(), length)
}

/// Writes the head through the version's sink; returns how many bytes of `out` it took.
fn write_fields(
    out: &mut Vec<u8>,
    sink: &mut dyn HeadSink,
    head: &Head<'_>,
    with_type: bool,
    length: Option<u64>,
) -> usize {
    // Never for a status without content (RFC 9110 §8.6: not in 1xx or 204; in a 304 only the
    // 200's length, which a handler's empty 304 does not know).
    let length = length.filter(|_| !matches!(head.status, 100..=199 | 204 | 304));
    sink.head(out, head, with_type, length)
}

/// The standard reason phrase of a status code (RFC 9110 §15), or `""` for unknown codes.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(reply: &Reply) -> String {
        let head = Head {
            status: reply.status,
            content_type: reply.content_type,
            extra: reply.headers,
            fields: &reply.fields,
            keep_alive: true,
            stamp: Stamp::both(b"Tue, 24 Nov 2026 00:00:00 GMT"),
        };
        let mut out = Vec::new();
        write_response(
            &mut out,
            &mut Text(Version::Http11),
            &head,
            &reply.body,
            false,
        );
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn alt_svc_follows_date_when_given() {
        let mut stamp = Stamp::both(b"Tue, 24 Nov 2026 00:00:00 GMT");
        stamp.alt_svc = Some(b"h3=\":443\"; ma=86400");
        let head = Head {
            status: 200,
            content_type: "text/plain",
            extra: &[],
            fields: &[],
            keep_alive: true,
            stamp,
        };
        let mut out = Vec::new();
        write_response(&mut out, &mut Text(Version::Http11), &head, b"x", false);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("GMT\r\nAlt-Svc: h3=\":443\"; ma=86400\r\nContent-Type"),
            "{text}"
        );
    }

    #[test]
    fn run_time_fields_are_written_after_the_static_ones() {
        let reply = Reply::new(201, "application/json", b"{}".to_vec())
            .with_field("X-Request-Id", b"abc")
            .unwrap()
            .with_field("Set-Cookie", b"a=1; Path=/")
            .unwrap();
        let text = written(&reply);
        assert!(
            text.ends_with(
                "Content-Type: application/json\r\nContent-Length: 2\r\nX-Request-Id: abc\r\n\
                 Set-Cookie: a=1; Path=/\r\n\r\n{}"
            ),
            "{text}"
        );
    }

    #[test]
    fn fields_that_would_smuggle_or_duplicate_berths_own_are_refused() {
        let ok = || Reply::new(200, "text/plain", b"x".to_vec());
        assert!(ok().with_field("X-A", b"1\r\nX-B: 2").is_err());
        assert!(ok().with_field("X-A", b"1\n").is_err());
        assert!(ok().with_field("X-A", b"1\0").is_err());
        assert!(ok().with_field("X A", b"1").is_err());
        assert!(ok().with_field("", b"1").is_err());
        for own in [
            "Content-Length",
            "connection",
            "Transfer-Encoding",
            "Date",
            "Server",
        ] {
            assert!(ok().with_field(own, b"1").is_err(), "{own}");
        }
    }

    #[test]
    fn trailers_make_a_whole_reply_streamed_and_bad_ones_are_refused() {
        let trailers = vec![("x-sum".to_owned(), b"42".to_vec())];
        let reply = Reply::new(200, "text/plain", b"body".to_vec())
            .with_trailers(trailers.clone())
            .unwrap();
        assert!(
            reply.stream.is_some(),
            "the trailers ride on an ended stream"
        );
        assert_eq!(
            (reply.body.as_slice(), reply.content_type),
            (&b"body"[..], "text/plain")
        );
        assert_eq!(
            Reply::empty(204)
                .with_trailers(trailers.clone())
                .unwrap()
                .content_type,
            ""
        );
        let (_writer, stream) = super::super::stream::body_stream();
        let streamed = Reply::streamed(200, Vec::new(), stream);
        assert!(
            streamed.with_trailers(trailers).is_err(),
            "a producer ends its own"
        );
        for bad in ["Content-Type", "Trailer", "Host", "Connection", "TE", "x y"] {
            let bad = vec![(bad.to_owned(), b"1".to_vec())];
            assert!(Reply::empty(200).with_trailers(bad).is_err());
        }
    }

    #[test]
    fn an_empty_content_type_writes_no_field() {
        let text = written(&Reply::new(200, "", b"body".to_vec()));
        assert!(!text.contains("Content-Type"), "{text}");
        assert!(text.contains("Content-Length: 4"), "{text}");
    }

    #[test]
    fn a_status_without_content_says_no_content_length() {
        for status in [101, 204, 304] {
            let text = written(&Reply::empty(status));
            assert!(!text.contains("Content-Length"), "{status}: {text}");
        }
        assert!(written(&Reply::empty(200)).contains("Content-Length: 0"));
    }
}
