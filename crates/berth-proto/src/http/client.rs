//! HTTP/1.1 client side, sans-IO: finds where each response ends (RFC 9112 §6.3) without keeping
//! its body, which is all a load generator needs. It shares the chunked decoder with the server
//! side, so both read chunked framing by the same rules.
//!
//! The caller owns one buffer per connection. It appends what it reads, calls
//! [`ResponseReader::advance`], drops the `consumed` bytes from the front, and repeats while a
//! response completes; on end of input it calls [`ResponseReader::finish`], which completes a
//! response delimited by the close, or says it was cut short.

use super::chunked::{Chunked, Progress};
use super::framing::parse_content_length;
use super::request::{list_contains, trim};

/// Longest response head accepted; nginx's largest default buffer for a proxied head is 8 KiB,
/// so this is generous for anything a benchmark target sends.
pub const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// Most header fields accepted in one response head.
const MAX_RESPONSE_HEADERS: usize = 64;

/// What one complete response was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseInfo {
    /// Status code of the final (non-1xx) response.
    pub status: u16,
    /// Whether the connection may carry another request after this one.
    pub keep_alive: bool,
    /// Body bytes as framed on the wire, chunk framing excluded.
    pub body_len: u64,
}

/// Result of feeding the reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadStatus {
    /// The response is not complete yet; read more.
    Partial,
    /// A response ended; the reader is ready for the next one.
    Done(ResponseInfo),
}

/// Why input is not a valid HTTP/1.x response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseError(pub &'static str);

impl std::fmt::Display for ResponseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for ResponseError {}

#[derive(Debug, Clone, Copy)]
enum State {
    Head,
    Fixed { remaining: u64 },
    Chunked(Chunked),
    UntilClose,
}

/// Reads responses one after another from a connection's bytes.
#[derive(Debug, Clone)]
pub struct ResponseReader {
    state: State,
    head_request: bool,
    status: u16,
    keep_alive: bool,
    body_len: u64,
}

impl ResponseReader {
    /// A reader for responses to requests with the given method: responses to `HEAD` carry no
    /// body whatever their headers say.
    pub fn new(head_request: bool) -> Self {
        ResponseReader {
            state: State::Head,
            head_request,
            status: 0,
            keep_alive: false,
            body_len: 0,
        }
    }

    /// Reads at most one response from the front of `buf`. Returns how many bytes of `buf` were
    /// used up (drop them before the next call) and whether a response ended. Body bytes are
    /// used up as they arrive, so the buffer never has to hold a whole body.
    pub fn advance(&mut self, buf: &mut [u8]) -> Result<(usize, ReadStatus), ResponseError> {
        let mut consumed = 0;
        loop {
            let rest = &mut buf[consumed..];
            match &mut self.state {
                State::Head => {
                    let Some((len, informational)) = self.read_head(rest)? else {
                        return Ok((consumed, ReadStatus::Partial));
                    };
                    consumed += len;
                    if informational {
                        continue;
                    }
                    if matches!(self.state, State::Fixed { remaining: 0 }) {
                        return Ok((consumed, self.done()));
                    }
                }
                State::Fixed { remaining } => {
                    let n = (rest.len() as u64).min(*remaining);
                    *remaining -= n;
                    self.body_len += n;
                    consumed += n as usize;
                    let status = if *remaining == 0 {
                        self.done()
                    } else {
                        ReadStatus::Partial
                    };
                    return Ok((consumed, status));
                }
                State::Chunked(c) => {
                    match c.advance(rest, 0, usize::MAX, MAX_RESPONSE_HEAD) {
                        Ok(Progress::Done {
                            body_end,
                            consumed: used,
                        }) => {
                            self.body_len += body_end as u64;
                            return Ok((consumed + used, self.done()));
                        }
                        Ok(Progress::Partial) => {
                            // Chunk data is decoded leftwards over its framing; both are spent.
                            let used = c.spent();
                            self.body_len += c.gap().start as u64;
                            c.spent_dropped();
                            return Ok((consumed + used, ReadStatus::Partial));
                        }
                        Err(r) => return Err(ResponseError(r.reason)),
                    }
                }
                State::UntilClose => {
                    self.body_len += rest.len() as u64;
                    return Ok((consumed + rest.len(), ReadStatus::Partial));
                }
            }
        }
    }

    /// The peer closed the connection; `rest` is what the caller still holds unconsumed.
    /// Completes a response delimited by the close, or reports that a response was cut short.
    /// Between responses, with nothing left over, there is nothing to finish: `Ok(None)`.
    pub fn finish(&mut self, rest: &[u8]) -> Result<Option<ResponseInfo>, ResponseError> {
        match self.state {
            State::Head if rest.is_empty() => Ok(None),
            State::Head => Err(ResponseError("connection closed inside a response head")),
            State::UntilClose => match self.done() {
                ReadStatus::Done(info) => Ok(Some(info)),
                ReadStatus::Partial => unreachable!("done() always completes"),
            },
            _ => Err(ResponseError("connection closed before the response ended")),
        }
    }

    fn done(&mut self) -> ReadStatus {
        self.state = State::Head;
        ReadStatus::Done(ResponseInfo {
            status: self.status,
            keep_alive: self.keep_alive,
            body_len: std::mem::take(&mut self.body_len),
        })
    }

    /// Parses a head at the front of `buf` and sets the body state from it. Returns its length
    /// and whether it was an interim (1xx) response, or `None` if the head is not all there yet.
    fn read_head(&mut self, buf: &[u8]) -> Result<Option<(usize, bool)>, ResponseError> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
        let mut res = httparse::Response::new(&mut headers);
        let len = match res.parse(buf) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) if buf.len() >= MAX_RESPONSE_HEAD => {
                return Err(ResponseError("response head too large"))
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => {
                return Err(ResponseError("too many response header fields"))
            }
            Err(_) => return Err(ResponseError("malformed response head")),
        };
        let status = res.code.unwrap_or(0);
        // 101 switches protocols: nothing after it is HTTP/1.1, so it ends the exchange.
        if (100..200).contains(&status) && status != 101 {
            return Ok(Some((len, true)));
        }
        let http10 = res.version == Some(0);
        let mut content_length = None;
        let mut transfer_encoding: Option<bool> = None;
        let mut close = false;
        let mut keep_alive_token = false;
        for h in res.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                let n = parse_content_length(trim(h.value))
                    .ok_or(ResponseError("invalid Content-Length"))?;
                if content_length.is_some_and(|prev| prev != n) {
                    return Err(ResponseError("conflicting Content-Length values"));
                }
                content_length = Some(n);
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                // Only a final `chunked` delimits the body; any other coding runs to the close.
                let last = h.value.rsplit(|&b| b == b',').next().map(trim);
                transfer_encoding = Some(last.is_some_and(|c| c.eq_ignore_ascii_case(b"chunked")));
            } else if h.name.eq_ignore_ascii_case("connection") {
                close |= list_contains(h.value, "close");
                keep_alive_token |= list_contains(h.value, "keep-alive");
            }
        }
        self.status = status;
        self.keep_alive = !close && (!http10 || keep_alive_token);
        self.body_len = 0;
        let no_body = self.head_request || status == 204 || status == 304 || status == 101;
        self.state = match (no_body, transfer_encoding, content_length) {
            (true, _, _) => State::Fixed { remaining: 0 },
            (false, Some(true), _) => State::Chunked(Chunked::new(0)),
            (false, Some(false), _) | (false, None, None) => {
                self.keep_alive = false;
                State::UntilClose
            }
            (false, None, Some(n)) => State::Fixed { remaining: n },
        };
        if status == 101 {
            self.keep_alive = false;
        }
        Ok(Some((len, false)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `raw` in pieces of `step` bytes, as a connection would, and collects every
    /// response, then the outcome of the close.
    fn read_all(
        raw: &[u8],
        step: usize,
        head: bool,
    ) -> (
        Vec<ResponseInfo>,
        Result<Option<ResponseInfo>, ResponseError>,
    ) {
        let mut r = ResponseReader::new(head);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        for piece in raw.chunks(step) {
            buf.extend_from_slice(piece);
            loop {
                let (used, status) = match r.advance(&mut buf) {
                    Ok(x) => x,
                    Err(e) => return (out, Err(e)),
                };
                buf.drain(..used);
                match status {
                    ReadStatus::Done(info) => out.push(info),
                    ReadStatus::Partial => break,
                }
            }
        }
        let end = r.finish(&buf);
        (out, end)
    }

    fn info(status: u16, keep_alive: bool, body_len: u64) -> ResponseInfo {
        ResponseInfo {
            status,
            keep_alive,
            body_len,
        }
    }

    const PIPELINE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n\
        HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello\
        HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nT: 1\r\n\r\n\
        HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n\
        HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

    #[test]
    fn reads_a_pipeline_of_framings_at_every_split() {
        let want = vec![
            info(200, true, 5),
            info(200, true, 5),
            info(204, true, 0),
            info(404, false, 0),
        ];
        for step in 1..=PIPELINE.len() {
            let (got, end) = read_all(PIPELINE, step, false);
            assert_eq!(got, want, "step {step}");
            assert_eq!(end, Ok(None));
        }
    }

    #[test]
    fn body_delimited_by_close() {
        let raw = b"HTTP/1.0 200 OK\r\n\r\nsome bytes";
        for step in 1..raw.len() {
            let (got, end) = read_all(raw, step, false);
            assert!(got.is_empty());
            assert_eq!(end, Ok(Some(info(200, false, 10))));
        }
    }

    #[test]
    fn http10_keep_alive_needs_the_token() {
        let raw = b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\nConnection: keep-alive\r\n\r\nx\
                    HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\ny";
        let (got, _) = read_all(raw, raw.len(), false);
        assert_eq!(got, vec![info(200, true, 1), info(200, false, 1)]);
    }

    #[test]
    fn head_responses_have_no_body() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\nHTTP/1.1 200 OK\r\n\r\n";
        let (got, end) = read_all(raw, 3, true);
        assert_eq!(got, vec![info(200, true, 0), info(200, true, 0)]);
        assert_eq!(end, Ok(None));
    }

    #[test]
    fn cut_short_is_an_error() {
        for raw in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel"[..],
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
            b"HTTP/1.1 200 OK\r\nContent-Le",
        ] {
            let (got, end) = read_all(raw, 1, false);
            assert!(got.is_empty());
            assert!(end.is_err(), "{:?}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn malformed_heads_are_errors() {
        for raw in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            b"HTTP/1.1 2000 OK\r\n\r\n",
            b"SSH-2.0-OpenSSH\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        ] {
            let (_, end) = read_all(raw, raw.len(), false);
            assert!(end.is_err(), "{:?}", String::from_utf8_lossy(raw));
        }
        let huge = [
            b"HTTP/1.1 200 OK\r\nX: ".as_slice(),
            &[b'a'; MAX_RESPONSE_HEAD],
        ]
        .concat();
        let (_, end) = read_all(&huge, 4096, false);
        assert_eq!(end, Err(ResponseError("response head too large")));
    }

    #[test]
    fn body_bytes_need_no_room() {
        // A body far larger than anything buffered is used up as it arrives.
        let mut r = ResponseReader::new(false);
        let mut head = b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n".to_vec();
        let (used, status) = r.advance(&mut head).unwrap();
        assert_eq!((used, status), (head.len(), ReadStatus::Partial));
        let mut piece = vec![0u8; 1000];
        for i in 0..1000 {
            let (used, status) = r.advance(&mut piece).unwrap();
            assert_eq!(used, 1000);
            assert_eq!(status == ReadStatus::Partial, i < 999);
        }
    }
}
