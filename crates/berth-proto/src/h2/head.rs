//! A request's decoded header list checked as RFC 9113 §8.2–§8.3 require, and turned into
//! what berth's [`Request`](crate::http::Request) borrows: pseudo-fields first and only the four a request may
//! carry, each once; lowercase names; no connection-specific fields; `te` only `trailers`;
//! cookies joined back into one field (§8.2.3), and `host` made from `:authority` when the
//! client sent none, so that a handler written for HTTP/1.1 finds what it looks for.

use super::hpack::Field;
pub use crate::http::ReqHead;
use crate::http::{Limits, Method};

/// Why a request head is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Malformed (RFC 9113 §8.1.1): a stream error of type PROTOCOL_ERROR.
    Malformed(&'static str),
    /// Well-formed but not served: answered with this status.
    Status(u16, &'static str),
}

/// RFC 9113 §8.2.1: a field name is lowercase, with no separators, controls or non-ASCII.
fn valid_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name.iter().all(|&b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b"!#$%&'*+-.^_`|~".contains(&b)
        })
}

/// RFC 9113 §8.2.1: no NUL, CR or LF in a value.
fn valid_value(value: &[u8]) -> bool {
    !value.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n')
}

/// Fields that mean something only to one HTTP/1.1 connection (RFC 9113 §8.2.2).
const CONNECTION_SPECIFIC: [&[u8]; 5] = [
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"transfer-encoding",
    b"upgrade",
];

/// Checks a trailer section: regular fields only (RFC 9113 §8.1).
pub fn check_trailers(fields: &[Field]) -> Result<(), Refusal> {
    for f in fields {
        if f.name.first() == Some(&b':') {
            return Err(Refusal::Malformed("pseudo-header in trailers"));
        }
        if !valid_name(&f.name) || !valid_value(&f.value) {
            return Err(Refusal::Malformed("invalid trailer field"));
        }
    }
    Ok(())
}

/// Checks a request's header list and builds its head.
pub fn check_request(fields: Vec<Field>, limits: &Limits) -> Result<ReqHead, Refusal> {
    use Refusal::Malformed;
    let mut method = None;
    let mut scheme = None;
    let mut path: Option<Vec<u8>> = None;
    let mut authority: Option<Vec<u8>> = None;
    let mut regular_seen = false;
    let mut out = Vec::with_capacity(fields.len() + 1);
    let mut cookie: Option<Vec<u8>> = None;
    let mut content_length = None;
    let mut host = false;
    for Field { name, value } in fields {
        if let Some(pseudo) = name.strip_prefix(b":") {
            if regular_seen {
                return Err(Malformed("pseudo-header after a regular field"));
            }
            let slot = match pseudo {
                b"method" => &mut method,
                b"scheme" => &mut scheme,
                b"path" => &mut path,
                b"authority" => &mut authority,
                _ => return Err(Malformed("unknown or response pseudo-header")),
            };
            if slot.is_some() {
                return Err(Malformed("repeated pseudo-header"));
            }
            if !valid_value(&value) {
                return Err(Malformed("invalid pseudo-header value"));
            }
            *slot = Some(value);
            continue;
        }
        regular_seen = true;
        if !valid_name(&name) {
            return Err(Malformed("uppercase or invalid field name"));
        }
        if !valid_value(&value) {
            return Err(Malformed("invalid field value"));
        }
        if CONNECTION_SPECIFIC.contains(&name.as_slice()) {
            return Err(Malformed("connection-specific field"));
        }
        match name.as_slice() {
            b"te" if value != b"trailers" => return Err(Malformed("te other than trailers")),
            b"cookie" => {
                // §8.2.3: cookie crumbs are joined with "; " for an HTTP/1.1 application.
                match &mut cookie {
                    Some(c) => {
                        c.extend_from_slice(b"; ");
                        c.extend_from_slice(&value);
                    }
                    None => cookie = Some(value),
                }
                continue;
            }
            b"content-length" => {
                let n = std::str::from_utf8(&value)
                    .ok()
                    .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|s| s.parse::<u64>().ok())
                    .ok_or(Malformed("invalid content-length"))?;
                if content_length.is_some_and(|m| m != n) {
                    return Err(Malformed("differing content-lengths"));
                }
                content_length = Some(n);
            }
            b"host" => host = true,
            _ => {}
        }
        // Names were checked ASCII above.
        let name = String::from_utf8(name).unwrap_or_default();
        out.push((name, value));
    }
    if let Some(c) = cookie {
        out.push(("cookie".to_owned(), c));
    }
    let method = method.ok_or(Malformed("no :method"))?;
    if method == b"CONNECT" {
        // Tunnels (and RFC 8441's extended CONNECT) are not served over HTTP/2 yet.
        return Err(Refusal::Status(501, "CONNECT is not supported"));
    }
    let (Some(_), Some(path)) = (scheme, path) else {
        return Err(Malformed("no :scheme or :path"));
    };
    if path.is_empty() {
        return Err(Malformed("empty :path"));
    }
    if !(path.starts_with(b"/") || (path == b"*" && method == b"OPTIONS")) {
        return Err(Malformed(":path neither origin form nor *"));
    }
    let target = String::from_utf8(path).map_err(|_| Malformed("non-UTF-8 :path"))?;
    if target.len() > limits.max_uri_bytes {
        return Err(Refusal::Status(414, "request-target too long"));
    }
    let method = std::str::from_utf8(&method)
        .ok()
        .and_then(Method::parse)
        .ok_or(Refusal::Status(501, "method not implemented"))?;
    if let (false, Some(a)) = (host, authority) {
        out.insert(0, ("host".to_owned(), a));
    }
    Ok(ReqHead {
        method,
        target,
        fields: out,
        content_length,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::Version;

    fn f(list: &[(&str, &str)]) -> Vec<Field> {
        list.iter()
            .map(|(n, v)| Field {
                name: n.as_bytes().to_vec(),
                value: v.as_bytes().to_vec(),
            })
            .collect()
    }

    const BASE: [(&str, &str); 4] = [
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/a?b=1"),
        (":authority", "example.com"),
    ];

    fn with(extra: &[(&str, &str)]) -> Vec<Field> {
        let mut l = BASE.to_vec();
        l.extend_from_slice(extra);
        f(&l)
    }

    #[test]
    fn a_good_head_becomes_a_request() {
        let head = check_request(
            with(&[("cookie", "a=1"), ("accept", "*/*"), ("cookie", "b=2")]),
            &Limits::default(),
        )
        .unwrap();
        head.with_request(b"", None, Version::Http2, |req| {
            assert_eq!(req.method, Method::Get);
            assert_eq!(req.version, Version::Http2);
            assert_eq!(req.path, "/a");
            assert_eq!(req.query, Some("b=1"));
            assert_eq!(req.header("host"), Some(&b"example.com"[..]));
            assert_eq!(req.header("cookie"), Some(&b"a=1; b=2"[..]));
        });
    }

    #[test]
    fn malformed_heads_are_refused() {
        let l = Limits::default();
        let bad: Vec<Vec<Field>> = vec![
            with(&[("Accept", "x")]),
            with(&[("connection", "close")]),
            with(&[("te", "gzip")]),
            with(&[("x", "a\nb")]),
            with(&[(":status", "200")]),
            with(&[(":method", "GET")]),
            with(&[("content-length", "1"), ("content-length", "2")]),
            with(&[("content-length", "-1")]),
            f(&[("accept", "x"), (":method", "GET")]),
            f(&[(":method", "GET"), (":path", "/")]),
            f(&[(":method", "GET"), (":scheme", "http"), (":path", "")]),
            f(&[(":method", "GET"), (":scheme", "http"), (":path", "x")]),
            f(&[(":method", "GET"), (":scheme", "http"), (":path", "*")]),
        ];
        for fields in bad {
            let shown = format!("{fields:?}");
            assert!(
                matches!(check_request(fields, &l), Err(Refusal::Malformed(_))),
                "{shown}"
            );
        }
        assert!(check_request(with(&[("te", "trailers")]), &l).is_ok());
    }

    #[test]
    fn unknown_methods_and_long_targets_get_a_status() {
        let l = Limits {
            max_uri_bytes: 4,
            ..Limits::default()
        };
        assert_eq!(
            check_request(with(&[]), &l).unwrap_err(),
            Refusal::Status(414, "request-target too long")
        );
        let fields = f(&[(":method", "BREW"), (":scheme", "http"), (":path", "/")]);
        assert!(matches!(
            check_request(fields, &Limits::default()),
            Err(Refusal::Status(501, _))
        ));
    }
}
