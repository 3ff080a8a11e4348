//! Chunked transfer coding (RFC 9112 §7.1), decoded in place (and encoded, one chunk at a
//! time, for streamed responses: [`write_chunk`]).
//!
//! Chunk data is moved left over the chunk-size lines that preceded it, so once the last chunk
//! arrives the body lies contiguous right after the request head, in the same buffer the bytes
//! were read into. No second buffer, no allocation, and the decoder can resume after any byte.

use super::framing::{reject, Reject};

/// Longest chunk-size line (size, extensions, CRLF) accepted; chunk extensions carry nothing
/// berth uses, so this only needs to be generous, not unbounded.
const MAX_SIZE_LINE: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Expecting `chunk-size [ext] CRLF`.
    Size,
    /// Inside chunk data; `remaining` bytes still to come.
    Data,
    /// Expecting the CRLF that ends chunk data.
    DataEnd,
    /// After the last chunk: trailer fields until an empty line.
    Trailer,
}

/// Appends `data` as one chunk of a chunked body (RFC 9112 §7.1): its size in hex, CRLF, the
/// bytes, CRLF. An empty `data` would be the last chunk, so the caller never passes one.
pub(crate) fn write_chunk(out: &mut Vec<u8>, data: &[u8]) {
    debug_assert!(!data.is_empty(), "an empty chunk ends the body");
    let mut len = data.len();
    let mut hex = [0u8; 16];
    let mut at = hex.len();
    loop {
        at -= 1;
        hex[at] = b"0123456789abcdef"[len & 0xf];
        len >>= 4;
        if len == 0 {
            break;
        }
    }
    out.extend_from_slice(&hex[at..]);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Decoder state for one chunked body. Offsets are absolute positions in the input buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Chunked {
    /// Next raw byte to decode.
    read: usize,
    /// End of the decoded body so far.
    write: usize,
    remaining: u64,
    phase: Phase,
    trailer_bytes: usize,
}

/// Result of feeding the decoder.
pub(crate) enum Progress {
    /// More input is needed.
    Partial,
    /// The body is complete: decoded bytes end at `body_end`, the raw message at `consumed`.
    Done { body_end: usize, consumed: usize },
}

impl Chunked {
    pub(crate) fn new(body_start: usize) -> Self {
        Chunked {
            read: body_start,
            write: body_start,
            remaining: 0,
            phase: Phase::Size,
            trailer_bytes: 0,
        }
    }

    /// The bytes between the decoded body and the next raw byte: spent framing that the caller
    /// should cut out of the buffer while waiting for more input (see [`Chunked::gap_closed`]),
    /// so that a body sent as many tiny chunks costs no more memory than its decoded size.
    pub(crate) fn gap(&self) -> std::ops::Range<usize> {
        self.write..self.read
    }

    /// Records that the caller removed [`Chunked::gap`] from the buffer.
    pub(crate) fn gap_closed(&mut self) {
        self.read = self.write;
    }

    /// Raw bytes fully decoded so far, framing and data both: a reader that discards the body
    /// may drop them from the front of its buffer and then call [`Chunked::spent_dropped`].
    pub(crate) fn spent(&self) -> usize {
        self.read
    }

    /// Records that the caller dropped the first [`Chunked::spent`] bytes, so the body now
    /// starts (and, decoded, ends) at offset 0 of what is left.
    pub(crate) fn spent_dropped(&mut self) {
        self.read = 0;
        self.write = 0;
    }

    /// Decodes what `buf` holds past the last call. `body_start` is where the body began; the
    /// decoded body may grow to at most `max_body` bytes and the trailer to `max_trailer` bytes.
    pub(crate) fn advance(
        &mut self,
        buf: &mut [u8],
        body_start: usize,
        max_body: usize,
        max_trailer: usize,
    ) -> Result<Progress, Reject> {
        loop {
            match self.phase {
                Phase::Size => {
                    let Some(line) = take_line(buf, self.read, MAX_SIZE_LINE)? else {
                        return Ok(Progress::Partial);
                    };
                    let size = parse_size_line(&buf[self.read..line])?;
                    self.read = line + 2;
                    if size == 0 {
                        self.phase = Phase::Trailer;
                    } else {
                        let body_len = (self.write - body_start) as u64;
                        if body_len.saturating_add(size) > max_body as u64 {
                            return Err(reject(
                                413,
                                "request body too large (over the server's --max-body)",
                            ));
                        }
                        self.remaining = size;
                        self.phase = Phase::Data;
                    }
                }
                Phase::Data => {
                    let available = buf.len() - self.read;
                    if available == 0 {
                        return Ok(Progress::Partial);
                    }
                    // `remaining` fits in usize here: it was checked against `max_body` above.
                    let n = available.min(self.remaining as usize);
                    buf.copy_within(self.read..self.read + n, self.write);
                    self.read += n;
                    self.write += n;
                    self.remaining -= n as u64;
                    if self.remaining == 0 {
                        self.phase = Phase::DataEnd;
                    }
                }
                Phase::DataEnd => {
                    if buf.len() < self.read + 2 {
                        // Refuse early rather than wait, if what is there is already wrong.
                        if buf.len() > self.read && buf[self.read] != b'\r' {
                            return Err(reject(400, "chunk data not followed by CRLF"));
                        }
                        return Ok(Progress::Partial);
                    }
                    if &buf[self.read..self.read + 2] != b"\r\n" {
                        return Err(reject(400, "chunk data not followed by CRLF"));
                    }
                    self.read += 2;
                    self.phase = Phase::Size;
                }
                Phase::Trailer => {
                    let limit = max_trailer.saturating_sub(self.trailer_bytes).max(2);
                    let line = match take_line(buf, self.read, limit) {
                        Ok(Some(line)) => line,
                        Ok(None) => return Ok(Progress::Partial),
                        Err(r) if r.status == 400 && r.reason == LINE_TOO_LONG => {
                            return Err(reject(431, "trailer section too large"))
                        }
                        Err(r) => return Err(r),
                    };
                    let field = &buf[self.read..line];
                    self.trailer_bytes += field.len() + 2;
                    self.read = line + 2;
                    if field.is_empty() {
                        return Ok(Progress::Done {
                            body_end: self.write,
                            consumed: self.read,
                        });
                    }
                    check_trailer_field(field)?;
                }
            }
        }
    }
}

const LINE_TOO_LONG: &str = "chunk line too long";

/// Finds the CRLF ending the line that starts at `from`; returns the index of its CR.
/// A bare LF is refused, as is a line longer than `limit`.
fn take_line(buf: &[u8], from: usize, limit: usize) -> Result<Option<usize>, Reject> {
    let window = &buf[from..buf.len().min(from + limit)];
    match window.iter().position(|&b| b == b'\n') {
        Some(0) => Err(reject(400, "bare LF in chunked body")),
        Some(i) if window[i - 1] != b'\r' => Err(reject(400, "bare LF in chunked body")),
        Some(i) => Ok(Some(from + i - 1)),
        None if window.len() >= limit => Err(reject(400, LINE_TOO_LONG)),
        None => Ok(None),
    }
}

/// `chunk-size [ chunk-ext ]` with the CRLF already removed.
fn parse_size_line(line: &[u8]) -> Result<u64, Reject> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(reject(400, "missing chunk size"));
    }
    // Leading zeros are legal however many (RFC 9112 §7.1: `chunk-size = 1*HEXDIG`); past them,
    // 16 hex digits fill a u64 and a 17th would overflow it.
    let zeros = line[..digits].iter().take_while(|&&b| b == b'0').count();
    if digits - zeros > 16 {
        return Err(reject(400, "chunk size too large"));
    }
    let mut size = 0u64;
    for &b in &line[zeros..digits] {
        let d = (b as char).to_digit(16).unwrap_or(0);
        size = (size << 4) | u64::from(d);
    }
    let rest = &line[digits..];
    let ext = rest
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .map(|i| &rest[i..]);
    match ext {
        None => Ok(size),
        Some([b';', ext @ ..]) if ext.iter().all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f)) => {
            Ok(size)
        }
        Some(_) => Err(reject(400, "invalid chunk size")),
    }
}

/// A trailer field is `name: value` with no obs-fold and no control characters.
fn check_trailer_field(field: &[u8]) -> Result<(), Reject> {
    let Some(colon) = field.iter().position(|&b| b == b':') else {
        return Err(reject(400, "invalid trailer field"));
    };
    let name_ok = colon > 0
        && field[..colon]
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    let value_ok = field[colon + 1..]
        .iter()
        .all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f));
    if name_ok && value_ok {
        Ok(())
    } else {
        Err(reject(400, "invalid trailer field"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(raw: &[u8]) -> Result<Option<(Vec<u8>, usize)>, u16> {
        let mut buf = raw.to_vec();
        let mut c = Chunked::new(0);
        match c.advance(&mut buf, 0, 1 << 20, 1024) {
            Ok(Progress::Done { body_end, consumed }) => {
                Ok(Some((buf[..body_end].to_vec(), consumed)))
            }
            Ok(Progress::Partial) => Ok(None),
            Err(r) => Err(r.status),
        }
    }

    #[test]
    fn decodes_with_extensions_and_trailers() {
        let raw = b"5;name=val\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 1\r\n\r\nNEXT";
        let (body, consumed) = decode(raw).unwrap().unwrap();
        assert_eq!(body, b"hello world");
        assert_eq!(&raw[consumed..], b"NEXT");
    }

    #[test]
    fn resumes_after_every_byte() {
        let raw = b"3\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n";
        let mut buf = Vec::new();
        let mut c = Chunked::new(0);
        for (i, &b) in raw.iter().enumerate() {
            buf.push(b);
            match c.advance(&mut buf, 0, 1 << 20, 1024).unwrap() {
                Progress::Partial => assert!(i + 1 < raw.len()),
                Progress::Done { body_end, consumed } => {
                    assert_eq!(i + 1, raw.len());
                    assert_eq!(&buf[..body_end], b"abc0123456789abcdef");
                    assert_eq!(consumed, raw.len());
                }
            }
        }
    }

    #[test]
    fn refuses_bad_sizes() {
        assert_eq!(decode(b"zz\r\n"), Err(400));
        assert_eq!(decode(b"\r\n"), Err(400));
        assert_eq!(decode(b"-1\r\n"), Err(400));
        assert_eq!(decode(b"0x5\r\n"), Err(400));
        assert_eq!(decode(b"fffffffffffffffff\r\n"), Err(400));
        assert_eq!(decode(b"00000000000000000010000000000000000\r\n"), Err(400));
        assert_eq!(decode(b"5 6\r\n"), Err(400));
        assert_eq!(decode(b"5\nhello"), Err(400));
        assert_eq!(decode(b"3\r\nabcX\r\n"), Err(400));
        assert_eq!(decode(b"0\r\n folded\r\n\r\n"), Err(400));
    }

    #[test]
    fn leading_zeros_are_not_significant() {
        let (body, _) = decode(b"000000000000000000000003\r\nabc\r\n00000000000000000000\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(body, b"abc");
        let mut zeros = vec![b'0'; 1000];
        zeros.extend_from_slice(b"2\r\nhi\r\n0\r\n\r\n");
        assert_eq!(decode(&zeros).unwrap().unwrap().0, b"hi");
        assert_eq!(
            parse_size_line(b"0000ffffffffffffffff").ok(),
            Some(u64::MAX),
            "16 significant digits fit"
        );
    }

    #[test]
    fn closing_the_gap_keeps_decoding_right() {
        let raw = b"1\r\na\r\n1\r\nb\r\n1\r\nc\r\n0\r\n\r\n";
        let mut buf = Vec::new();
        let mut c = Chunked::new(0);
        for &b in raw.iter() {
            buf.push(b);
            if let Progress::Done { body_end, consumed } =
                c.advance(&mut buf, 0, 1 << 20, 1024).unwrap()
            {
                assert_eq!(&buf[..body_end], b"abc");
                assert_eq!(consumed, buf.len());
                return;
            }
            let gap = c.gap();
            buf.drain(gap);
            c.gap_closed();
            assert!(
                buf.len() <= 3 + 5,
                "buffer holds only decoded bytes and a partial line"
            );
        }
        panic!("never completed");
    }

    #[test]
    fn enforces_body_limit() {
        let mut buf = b"100000\r\n".to_vec();
        let mut c = Chunked::new(0);
        assert_eq!(
            c.advance(&mut buf, 0, 1000, 1024).err().map(|r| r.status),
            Some(413)
        );
    }
}
