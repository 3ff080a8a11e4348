//! Reads the header fields that decide how a request is delimited and whether the connection
//! persists (RFC 9112 §6–§9). This file owns every framing rule; the session only acts on the
//! verdict. Anything two implementations could read differently is refused, because a proxy in
//! front of berth that reads it the other way is how requests get smuggled.

use super::request::{list_contains, trim, Version};

/// How the request body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyKind {
    /// No body.
    Empty,
    /// Exactly this many bytes follow the head.
    Fixed(u64),
    /// Chunked transfer coding follows the head.
    Chunked,
}

/// What the head says about framing and connection handling.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Framing {
    pub body: BodyKind,
    pub keep_alive: bool,
    pub expect_continue: bool,
}

/// A request the session must refuse: the status to send and a short reason for the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reject {
    pub status: u16,
    pub reason: &'static str,
}

pub(crate) const fn reject(status: u16, reason: &'static str) -> Reject {
    Reject { status, reason }
}

/// Decides framing from the parsed header fields.
pub(crate) fn framing(
    version: Version,
    headers: &[httparse::Header<'_>],
) -> Result<Framing, Reject> {
    let mut content_length: Option<u64> = None;
    let mut transfer_encoding = false;
    let mut chunked = false;
    let mut hosts = 0usize;
    let mut close = false;
    let mut keep_alive_token = false;
    let mut expect_continue = false;

    for h in headers {
        let name = h.name;
        if name.eq_ignore_ascii_case("content-length") {
            // A list of identical values is tolerated (RFC 9110 §8.6); anything else is refused.
            for item in h.value.split(|&b| b == b',') {
                let n = parse_content_length(trim(item))
                    .ok_or(reject(400, "invalid Content-Length"))?;
                match content_length {
                    Some(prev) if prev != n => {
                        return Err(reject(400, "conflicting Content-Length values"))
                    }
                    _ => content_length = Some(n),
                }
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            transfer_encoding = true;
            for item in h.value.split(|&b| b == b',') {
                let coding = trim(item);
                if coding.is_empty() {
                    continue;
                }
                if !coding.eq_ignore_ascii_case(b"chunked") {
                    return Err(reject(501, "unsupported transfer coding"));
                }
                if chunked {
                    return Err(reject(400, "chunked applied twice"));
                }
                chunked = true;
            }
        } else if name.eq_ignore_ascii_case("host") {
            hosts += 1;
            if !valid_host(h.value) {
                return Err(reject(400, "invalid Host header"));
            }
        } else if name.eq_ignore_ascii_case("connection") {
            close |= list_contains(h.value, "close");
            keep_alive_token |= list_contains(h.value, "keep-alive");
        } else if name.eq_ignore_ascii_case("expect") {
            if trim(h.value).eq_ignore_ascii_case(b"100-continue") {
                expect_continue = true;
            } else {
                return Err(reject(417, "unsupported expectation"));
            }
        }
    }

    if hosts > 1 || (hosts == 0 && version == Version::Http11) {
        return Err(reject(400, "exactly one Host header is required"));
    }
    let body = match (transfer_encoding, content_length) {
        (true, Some(_)) => {
            return Err(reject(400, "both Transfer-Encoding and Content-Length"));
        }
        (true, None) if version == Version::Http10 => {
            return Err(reject(400, "Transfer-Encoding in an HTTP/1.0 request"));
        }
        // A Transfer-Encoding whose final coding is not chunked leaves the body length unknown.
        (true, None) if !chunked => return Err(reject(400, "chunked must be the final coding")),
        (true, None) => BodyKind::Chunked,
        (false, Some(0)) | (false, None) => BodyKind::Empty,
        (false, Some(n)) => BodyKind::Fixed(n),
    };
    let keep_alive = match version {
        // HTTP/2 requests are never framed here; its connections persist.
        Version::Http11 | Version::Http2 | Version::Http3 => !close,
        Version::Http10 => keep_alive_token && !close,
    };
    Ok(Framing {
        body,
        keep_alive,
        // 100-continue means nothing without a body to wait for, or to an HTTP/1.0 client.
        expect_continue: expect_continue && version == Version::Http11 && body != BodyKind::Empty,
    })
}

/// `Host = uri-host [ ":" port ]` (RFC 9110 §7.2, RFC 3986 §3.2.2). An empty value is allowed:
/// it is what a client sends when the target has no authority. Checked by character class,
/// which is what keeps a Host from smuggling a path, a userinfo or whitespace.
fn valid_host(value: &[u8]) -> bool {
    value.iter().all(|&b| HOST_BYTES[usize::from(b)])
}

/// The bytes a Host value may hold (letters, digits and `-._~%!$&'()*+,;=:[]`), as a table:
/// every request's Host is checked byte by byte, and a lookup is one load where a search of
/// the list was up to twenty compares a byte.
const HOST_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        table[i] = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'%'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b':'
                    | b'['
                    | b']'
            );
        i += 1;
    }
    table
};

/// Where `byte` first occurs in `hay`: eight bytes a step, a word at a time (the "has a zero
/// byte" test on the word XOR the byte repeated), for the scans of a request head that run
/// once per request. The lowest flagged byte of a word is always a true match (a false flag
/// comes only from a borrow out of a match below it), so the first match is exact.
pub(crate) fn find_byte(hay: &[u8], byte: u8) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let repeated = LO * u64::from(byte);
    let mut words = hay.chunks_exact(8);
    let mut at = 0;
    for word in &mut words {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(word);
        let x = u64::from_le_bytes(bytes) ^ repeated;
        let found = x.wrapping_sub(LO) & !x & HI;
        if found != 0 {
            return Some(at + (found.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let rest = words.remainder();
    rest.iter().position(|&b| b == byte).map(|i| at + i)
}

/// `Content-Length = 1*DIGIT`: no sign, no spaces inside, no hex, and it must fit in a u64.
/// Leading zeros are digits like any other (RFC 9112 §6.2), however many; a value that
/// overflows is refused, never wrapped.
pub(crate) fn parse_content_length(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.iter().try_fold(0u64, |acc, &b| {
        let digit = b.is_ascii_digit().then(|| u64::from(b - b'0'))?;
        acc.checked_mul(10)?.checked_add(digit)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word-at-a-time search finds what a byte-by-byte one finds, wherever the byte is,
    /// whatever surrounds it (bytes just above and below it, 0x80, repeats), at every length.
    #[test]
    fn find_byte_finds_the_first_match_as_a_plain_search_does() {
        for byte in [b'\n', b'\r', 0u8, 0x80, 0xff] {
            for len in 0..40 {
                for at in 0..=len {
                    for fill in [b'a', byte.wrapping_add(1), byte.wrapping_sub(1), 0x80, 0] {
                        if fill == byte {
                            continue;
                        }
                        let mut hay = vec![fill; len];
                        if at < len {
                            hay[at] = byte;
                            // A second match after the first must not be taken.
                            if at + 3 < len {
                                hay[at + 3] = byte;
                            }
                        }
                        let want = hay.iter().position(|&b| b == byte);
                        assert_eq!(find_byte(&hay, byte), want, "{byte} in {hay:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn host_bytes_are_those_of_the_list() {
        for b in 0..=255u8 {
            let listed = b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=:[]".contains(&b);
            assert_eq!(valid_host(&[b]), listed, "{b}");
        }
    }

    fn h<'a>(name: &'a str, value: &'a str) -> httparse::Header<'a> {
        httparse::Header {
            name,
            value: value.as_bytes(),
        }
    }

    #[test]
    fn content_length_rules() {
        assert_eq!(parse_content_length(b"0"), Some(0));
        assert_eq!(parse_content_length(b"0012"), Some(12));
        assert_eq!(parse_content_length(b"+12"), None);
        assert_eq!(parse_content_length(b"-1"), None);
        assert_eq!(parse_content_length(b"1 2"), None);
        assert_eq!(parse_content_length(b"0x10"), None);
        assert_eq!(parse_content_length(b"99999999999999999999"), None);
        assert_eq!(
            parse_content_length(b"18446744073709551615"),
            Some(u64::MAX)
        );
        assert_eq!(parse_content_length(b"18446744073709551616"), None);
        assert_eq!(
            parse_content_length(b"000000000000000000000000012"),
            Some(12)
        );
        assert_eq!(parse_content_length(&[b'0'; 4000]), Some(0));
        assert_eq!(
            parse_content_length(b"0000000000000000000018446744073709551616"),
            None
        );
        assert_eq!(parse_content_length(b""), None);
    }

    #[test]
    fn identical_duplicates_pass_differing_fail() {
        let same = [
            h("Host", "x"),
            h("Content-Length", "5"),
            h("content-length", "5, 5"),
        ];
        assert_eq!(
            framing(Version::Http11, &same).unwrap().body,
            BodyKind::Fixed(5)
        );
        let diff = [
            h("Host", "x"),
            h("Content-Length", "5"),
            h("Content-Length", "6"),
        ];
        assert_eq!(framing(Version::Http11, &diff).unwrap_err().status, 400);
    }

    #[test]
    fn te_and_cl_together_is_refused() {
        let hs = [
            h("Host", "x"),
            h("Transfer-Encoding", "chunked"),
            h("Content-Length", "3"),
        ];
        assert_eq!(framing(Version::Http11, &hs).unwrap_err().status, 400);
    }

    #[test]
    fn transfer_codings() {
        let ok = [h("Host", "x"), h("Transfer-Encoding", "Chunked")];
        assert_eq!(
            framing(Version::Http11, &ok).unwrap().body,
            BodyKind::Chunked
        );
        let twice = [h("Host", "x"), h("Transfer-Encoding", "chunked, chunked")];
        assert_eq!(framing(Version::Http11, &twice).unwrap_err().status, 400);
        let gzip = [h("Host", "x"), h("Transfer-Encoding", "gzip")];
        assert_eq!(framing(Version::Http11, &gzip).unwrap_err().status, 501);
        let v10 = [h("Transfer-Encoding", "chunked")];
        assert_eq!(framing(Version::Http10, &v10).unwrap_err().status, 400);
    }

    #[test]
    fn keep_alive_by_version() {
        let hs = [h("Host", "x")];
        assert!(framing(Version::Http11, &hs).unwrap().keep_alive);
        assert!(!framing(Version::Http10, &[]).unwrap().keep_alive);
        let ka = [h("Connection", "Keep-Alive")];
        assert!(framing(Version::Http10, &ka).unwrap().keep_alive);
        let close = [h("Host", "x"), h("Connection", "foo, close")];
        assert!(!framing(Version::Http11, &close).unwrap().keep_alive);
    }

    #[test]
    fn host_rules() {
        assert_eq!(framing(Version::Http11, &[]).unwrap_err().status, 400);
        let two = [h("Host", "a"), h("Host", "b")];
        assert_eq!(framing(Version::Http11, &two).unwrap_err().status, 400);
    }
}
