//! QPACK's static table (RFC 9204 §3.1, Appendix A): 99 entries, indexed from 0 (HPACK's
//! starts at 1), chosen from 2018's traffic, so that the fields of most requests and
//! responses are one or two bytes.

/// The static table, Appendix A, in order: index `i` is `STATIC[i]`.
pub const STATIC: [(&str, &str); 99] = [
    (":authority", ""),
    (":path", "/"),
    ("age", "0"),
    ("content-disposition", ""),
    ("content-length", "0"),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("referer", ""),
    ("set-cookie", ""),
    (":method", "CONNECT"),
    (":method", "DELETE"),
    (":method", "GET"),
    (":method", "HEAD"),
    (":method", "OPTIONS"),
    (":method", "POST"),
    (":method", "PUT"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "103"),
    (":status", "200"),
    (":status", "304"),
    (":status", "404"),
    (":status", "503"),
    ("accept", "*/*"),
    ("accept", "application/dns-message"),
    ("accept-encoding", "gzip, deflate, br"),
    ("accept-ranges", "bytes"),
    ("access-control-allow-headers", "cache-control"),
    ("access-control-allow-headers", "content-type"),
    ("access-control-allow-origin", "*"),
    ("cache-control", "max-age=0"),
    ("cache-control", "max-age=2592000"),
    ("cache-control", "max-age=604800"),
    ("cache-control", "no-cache"),
    ("cache-control", "no-store"),
    ("cache-control", "public, max-age=31536000"),
    ("content-encoding", "br"),
    ("content-encoding", "gzip"),
    ("content-type", "application/dns-message"),
    ("content-type", "application/javascript"),
    ("content-type", "application/json"),
    ("content-type", "application/x-www-form-urlencoded"),
    ("content-type", "image/gif"),
    ("content-type", "image/jpeg"),
    ("content-type", "image/png"),
    ("content-type", "text/css"),
    ("content-type", "text/html; charset=utf-8"),
    ("content-type", "text/plain"),
    ("content-type", "text/plain;charset=utf-8"),
    ("range", "bytes=0-"),
    ("strict-transport-security", "max-age=31536000"),
    (
        "strict-transport-security",
        "max-age=31536000; includesubdomains",
    ),
    (
        "strict-transport-security",
        "max-age=31536000; includesubdomains; preload",
    ),
    ("vary", "accept-encoding"),
    ("vary", "origin"),
    ("x-content-type-options", "nosniff"),
    ("x-xss-protection", "1; mode=block"),
    (":status", "100"),
    (":status", "204"),
    (":status", "206"),
    (":status", "302"),
    (":status", "400"),
    (":status", "403"),
    (":status", "421"),
    (":status", "425"),
    (":status", "500"),
    ("accept-language", ""),
    ("access-control-allow-credentials", "FALSE"),
    ("access-control-allow-credentials", "TRUE"),
    ("access-control-allow-headers", "*"),
    ("access-control-allow-methods", "get"),
    ("access-control-allow-methods", "get, post, options"),
    ("access-control-allow-methods", "options"),
    ("access-control-expose-headers", "content-length"),
    ("access-control-request-headers", "content-type"),
    ("access-control-request-method", "get"),
    ("access-control-request-method", "post"),
    ("alt-svc", "clear"),
    ("authorization", ""),
    (
        "content-security-policy",
        "script-src 'none'; object-src 'none'; base-uri 'none'",
    ),
    ("early-data", "1"),
    ("expect-ct", ""),
    ("forwarded", ""),
    ("if-range", ""),
    ("origin", ""),
    ("purpose", "prefetch"),
    ("server", ""),
    ("timing-allow-origin", "*"),
    ("upgrade-insecure-requests", "1"),
    ("user-agent", ""),
    ("x-forwarded-for", ""),
    ("x-frame-options", "deny"),
    ("x-frame-options", "sameorigin"),
];

/// How much of a field the static table holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// Name and value: the entry's index.
    Full(usize),
    /// The name only: the first entry with it.
    Name(usize),
    /// Nothing.
    None,
}

/// The table's names by length, each with its entries' indices in order: a lookup compares
/// the few names of one length, then that name's values. Made once: an answer's fields were
/// each looked up by walking all 99 entries, a fifth of HTTP/3's CPU on small answers
/// (BENCHMARKS, "HTTP/3: the lost bursts").
type ByLength = Vec<Vec<(&'static [u8], Vec<u8>)>>;

fn by_length() -> &'static ByLength {
    static INDEX: std::sync::OnceLock<ByLength> = std::sync::OnceLock::new();
    INDEX.get_or_init(|| {
        let mut index: ByLength = Vec::new();
        for (i, (n, _)) in STATIC.iter().enumerate() {
            let n = n.as_bytes();
            if index.len() <= n.len() {
                index.resize_with(n.len() + 1, Vec::new);
            }
            let names = &mut index[n.len()];
            match names.iter_mut().find(|(name, _)| *name == n) {
                Some((_, entries)) => entries.push(i as u8),
                None => names.push((n, vec![i as u8])),
            }
        }
        index
    })
}

/// Looks `name: value` up. A full match wins over the name alone.
pub fn find(name: &[u8], value: &[u8]) -> Match {
    let Some(names) = by_length().get(name.len()) else {
        return Match::None;
    };
    let Some((_, entries)) = names.iter().find(|(n, _)| *n == name) else {
        return Match::None;
    };
    for &i in entries {
        let v = STATIC[usize::from(i)].1.as_bytes();
        // The first byte before the whole: most values of a name differ in it.
        if v.first() == value.first() && v == value {
            return Match::Full(usize::from(i));
        }
    }
    Match::Name(usize::from(entries[0]))
}

/// The entry at `index`, if there is one.
pub fn get(index: u64) -> Option<(&'static [u8], &'static [u8])> {
    let (n, v) = STATIC.get(usize::try_from(index).ok()?)?;
    Some((n.as_bytes(), v.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spot checks against Appendix A, at both ends and around its runs of one name.
    #[test]
    fn entries_are_appendix_as() {
        assert_eq!(get(0), Some((&b":authority"[..], &b""[..])));
        assert_eq!(get(1), Some((&b":path"[..], &b"/"[..])));
        assert_eq!(get(17), Some((&b":method"[..], &b"GET"[..])));
        assert_eq!(get(25), Some((&b":status"[..], &b"200"[..])));
        assert_eq!(get(31).unwrap().1, b"gzip, deflate, br");
        assert_eq!(get(52).unwrap().1, b"text/html; charset=utf-8");
        assert_eq!(
            get(85).unwrap().1,
            b"script-src 'none'; object-src 'none'; base-uri 'none'"
        );
        assert_eq!(get(98), Some((&b"x-frame-options"[..], &b"sameorigin"[..])));
        assert_eq!(get(99), None);
        assert_eq!(get(u64::MAX), None);
    }

    #[test]
    fn lookups() {
        assert_eq!(find(b":method", b"GET"), Match::Full(17));
        assert_eq!(find(b":method", b"PATCH"), Match::Name(15));
        assert_eq!(find(b":status", b"206"), Match::Full(65));
        assert_eq!(find(b":status", b"418"), Match::Name(24));
        assert_eq!(find(b"server", b"berth"), Match::Name(92));
        assert_eq!(find(b"x-unknown", b""), Match::None);
    }

    /// The index finds what walking the table in order finds, for every entry, its name with
    /// another value, and names around them.
    #[test]
    fn the_sorted_index_agrees_with_the_table_walked_in_order() {
        let walk = |name: &[u8], value: &[u8]| {
            let mut found = Match::None;
            for (i, (n, v)) in STATIC.iter().enumerate() {
                if n.as_bytes() == name {
                    if v.as_bytes() == value {
                        return Match::Full(i);
                    }
                    if found == Match::None {
                        found = Match::Name(i);
                    }
                }
            }
            found
        };
        for (n, v) in STATIC {
            for name in [n.as_bytes(), &n.as_bytes()[1..], format!("{n}x").as_bytes()] {
                for value in [v.as_bytes(), b"other", b""] {
                    assert_eq!(find(name, value), walk(name, value), "{n}: {v}");
                }
            }
        }
    }
}
