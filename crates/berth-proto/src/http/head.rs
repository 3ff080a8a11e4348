//! Request heads: finding where one ends, checking its version, and parsing it into a
//! [`Request`] whose fields borrow from the input; and whether a request asks to switch
//! protocols.

use std::mem::MaybeUninit;
use std::net::SocketAddr;

use super::framing::{reject, Reject};
use super::request::{list_contains, Method, Request, Version};
use crate::settings::Limits;

/// Room for the method, spaces and ` HTTP/1.1\r\n` around a maximal request-target.
const REQUEST_LINE_OVERHEAD: usize = 32;

pub(super) enum Scan {
    /// The head ends at this offset (just past its blank line).
    Complete(usize),
    /// Not yet; resume scanning here.
    Partial(usize),
}

/// Scans `buf` from `from` for the blank line ending a head, refusing bare LF on the way and a
/// request line too long to carry a permitted request-target. Line by line, with the
/// word-at-a-time search of `framing::find_byte`: a head is a few short lines, where memchr's
/// vector searches (and memmem's for the blank line) cost more per request (measured with
/// callgrind: 282 instructions a request against 200).
pub(super) fn find_head_end(buf: &[u8], from: usize, limits: &Limits) -> Result<Scan, Reject> {
    // Back up over a CRLF CR that may have been split across reads.
    let start = from.saturating_sub(3);
    let mut line_start_seen = from > 0 && buf[..start].contains(&b'\n');
    let mut i = start;
    while let Some(off) = super::framing::find_byte(&buf[i..], b'\n') {
        let lf = i + off;
        // RFC 9112 §2.2 lets a recipient take a bare LF as a line end; one that does and one
        // that does not disagree on where a request ends, which is how requests are smuggled.
        if lf == 0 || buf[lf - 1] != b'\r' {
            return Err(reject(400, "bare LF in request head"));
        }
        if !line_start_seen {
            line_start_seen = true;
            if lf > limits.max_uri_bytes + REQUEST_LINE_OVERHEAD {
                return Err(reject(414, "request-target too long"));
            }
        }
        if lf >= 3 && &buf[lf - 3..lf] == b"\r\n\r" {
            return Ok(Scan::Complete(lf + 1));
        }
        i = lf + 1;
    }
    if !line_start_seen && buf.len() > limits.max_uri_bytes + REQUEST_LINE_OVERHEAD {
        return Err(reject(414, "request-target too long"));
    }
    Ok(Scan::Partial(buf.len()))
}

/// Checks the HTTP-version of a complete head's request-line before the parser sees it.
/// `HTTP/1.x` for x > 1 is rewritten to `HTTP/1.1`: a server SHOULD treat a higher minor
/// version as the highest it supports (RFC 9110 §2.5). Another well-formed major version gets
/// 505; a malformed request-line is left for the parser, which refuses it with 400.
pub(super) fn normalize_version(head: &mut [u8]) -> Result<(), Reject> {
    let Some(line_end) = super::framing::find_byte(head, b'\r') else {
        return Ok(());
    };
    // Nearly every request says HTTP/1.1 or HTTP/1.0: nothing to look at then.
    if line_end >= 8 && matches!(&head[line_end - 8..line_end], b"HTTP/1.1" | b"HTTP/1.0") {
        return Ok(());
    }
    let line = &mut head[..line_end];
    if line.iter().filter(|&&b| b == b' ').count() != 2 {
        return Ok(());
    }
    let Some(space) = line.iter().rposition(|&b| b == b' ') else {
        return Ok(());
    };
    match &mut line[space + 1..] {
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            if *major != b'1' {
                return Err(reject(505, "unsupported HTTP version"));
            }
            if *minor > b'1' {
                *minor = b'1';
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// A parsed head whose field values still borrow from the input.
pub(super) struct ParsedHead<'h, 'b> {
    pub(super) method: Method,
    pub(super) target: &'b str,
    pub(super) version: Version,
    pub(super) headers: &'h [httparse::Header<'b>],
}

impl<'h, 'b> ParsedHead<'h, 'b> {
    pub(super) fn into_request(self, body: &'b [u8], peer: Option<SocketAddr>) -> Request<'h>
    where
        'b: 'h,
    {
        // Absolute-form (`http://host/path`) must be accepted too (RFC 9112 §3.2.2): route on
        // its path, which starts at the first `/` after the authority.
        // The common origin-form (`/path`) is recognised by its first byte alone.
        let origin = if self.target.starts_with('/') {
            self.target
        } else {
            match self.target.find("://") {
                Some(i) => {
                    let rest = &self.target[i + 3..];
                    rest.find(['/', '?']).map_or("/", |j| &rest[j..])
                }
                None => self.target,
            }
        };
        // A byte search, not `split_once('?')`: for a path of a few bytes the char searcher's
        // set-up costs more than the search (about 80 instructions a request, issue 41).
        let (path, query) = match origin.bytes().position(|b| b == b'?') {
            Some(0) => ("/", Some(&origin[1..])),
            Some(i) => (&origin[..i], Some(&origin[i + 1..])),
            None => (origin, None),
        };
        Request {
            method: self.method,
            target: self.target,
            path,
            query,
            version: self.version,
            headers: self.headers,
            body,
            peer,
        }
    }
}

pub(super) fn parse_head<'h, 'b>(
    buf: &'b [u8],
    storage: &'h mut [MaybeUninit<httparse::Header<'b>>],
    limits: &Limits,
) -> Result<ParsedHead<'h, 'b>, Reject> {
    let mut req = httparse::Request::new(&mut []);
    match req.parse_with_uninit_headers(buf, storage) {
        Ok(httparse::Status::Complete(n)) if n == buf.len() => {}
        Ok(_) => return Err(reject(400, "malformed request head")),
        Err(httparse::Error::TooManyHeaders) => return Err(reject(431, "too many header fields")),
        Err(_) => return Err(reject(400, "malformed request head")),
    }
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Err(reject(400, "malformed request line"));
    };
    if target.len() > limits.max_uri_bytes {
        return Err(reject(414, "request-target too long"));
    }
    let method = Method::parse(method).ok_or(reject(501, "method not implemented"))?;
    let version = if version == 0 {
        Version::Http10
    } else {
        Version::Http11
    };
    Ok(ParsedHead {
        method,
        target,
        version,
        headers: req.headers,
    })
}

/// The request asks to switch to `protocol`: [`asks_upgrade`], and the token in `Upgrade`.
pub(crate) fn asks_to_switch(request: &Request<'_>, protocol: &str) -> bool {
    asks_upgrade(request)
        && request
            .header("upgrade")
            .is_some_and(|v| list_contains(v, protocol))
}

/// The request asks to switch protocols: HTTP/1.1, `Connection: upgrade`, an `Upgrade` field,
/// no body (RFC 9110 §7.8). Which protocol it names is the handler's to check.
pub(super) fn asks_upgrade(request: &Request<'_>) -> bool {
    request.version == Version::Http11
        && request.body.is_empty()
        && request
            .header("connection")
            .is_some_and(|v| list_contains(v, "upgrade"))
        && request.header("upgrade").is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a head scan says, as a comparable value.
    fn outcome(r: Result<Scan, Reject>) -> Result<Option<usize>, u16> {
        match r {
            Ok(Scan::Complete(n)) => Ok(Some(n)),
            Ok(Scan::Partial(_)) => Ok(None),
            Err(e) => Err(e.status),
        }
    }

    /// The plain line-by-line reading of the rules: the first LF not after a CR refuses (400),
    /// the request line's LF past the cap refuses (414), the first CRLF CRLF ends the head.
    fn reference(buf: &[u8], cap: usize) -> Result<Option<usize>, u16> {
        for (i, &b) in buf.iter().enumerate() {
            if i > cap && !buf[..i].contains(&b'\n') {
                return Err(414);
            }
            if b != b'\n' {
                continue;
            }
            if i == 0 || buf[i - 1] != b'\r' {
                return Err(400);
            }
            if i >= 3 && &buf[i - 3..i] == b"\r\n\r" {
                return Ok(Some(i + 1));
            }
        }
        if buf.len() > cap && !buf.contains(&b'\n') {
            return Err(414);
        }
        Ok(None)
    }

    /// The scan agrees with the plain reading on heads with bare LFs, lone CRs and long
    /// request lines anywhere, given whole or in two reads split at every byte.
    #[test]
    fn head_scan_agrees_with_the_plain_reading_whole_and_split() {
        let limits = Limits {
            max_uri_bytes: 16,
            ..Limits::default()
        };
        let cap = limits.max_uri_bytes + REQUEST_LINE_OVERHEAD;
        let long = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(60));
        let heads: Vec<Vec<u8>> = vec![
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\n\n".to_vec(),
            b"GET / HTTP/1.1\r\nHost: x\n\r\n".to_vec(),
            b"GET / HTTP/1.1\nHost: x\r\n\r\n".to_vec(),
            b"\nGET / HTTP/1.1\r\n\r\n".to_vec(),
            b"GET / HTTP/1.1\r\nA: b\r\r\n\r\n".to_vec(),
            b"GET / HTTP/1.1\r\nA: b\r\n\n".to_vec(),
            b"\r\n\r\n".to_vec(),
            b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec(),
            long.clone().into_bytes(),
            long.replace("\r\n", "").into_bytes(),
            // The request line's end just inside and just past the cap, and no end at all.
            format!("GET /{} HTTP/1.1\r\n\r\n", "b".repeat(cap - 15)).into_bytes(),
            format!("GET /{} HTTP/1.1\r\n\r\n", "b".repeat(cap - 14)).into_bytes(),
            "c".repeat(cap).into_bytes(),
            "c".repeat(cap + 1).into_bytes(),
        ];
        for head in &heads {
            let want = reference(head, cap);
            assert_eq!(
                outcome(find_head_end(head, 0, &limits)),
                want,
                "{:?}",
                String::from_utf8_lossy(head)
            );
            for split in 0..head.len() {
                let got = match find_head_end(&head[..split], 0, &limits) {
                    Ok(Scan::Partial(from)) => outcome(find_head_end(head, from, &limits)),
                    other => outcome(other),
                };
                // A refusal or an end found in the first part is the whole's too.
                assert_eq!(got, want, "split {split} of {head:?}");
            }
        }
    }
}
