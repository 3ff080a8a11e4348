//! The handshake (docs/msg-protocol.md §2 and §4): what a keyword may be, the `OK` answer, and
//! the control payloads that refuse a client or end a connection with a reason. Names
//! themselves (bytes, the rule they follow, their escaped form) are in [`super::name`].

use super::frame::{control_header, encode};
pub use super::name::{BadName, Name, NameRule, ANONYMOUS_MARK, DEFAULT_MAX_NAME, STRICT_MAX_NAME};

/// Who a client says it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Keyword {
    /// A name: bytes that follow the server's [`NameRule`] (by default any bytes up to
    /// [`DEFAULT_MAX_NAME`], not starting with [`ANONYMOUS_MARK`]).
    Named(Name),
    /// An empty keyword: no name (a berth extension).
    Anonymous,
}

/// Why the server turns a client away (`refused` control payloads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The keyword is not a valid name.
    NameInvalid,
    /// The listener takes no anonymous clients.
    AnonymousRefused,
    /// A rule forbids this name on this kind of listener.
    TransportRefused,
    /// A rule forbids this name from this address.
    AddressRefused,
    /// A rule asks for a TLS client certificate naming this name, and none did.
    CertRefused,
    /// Only expected names are accepted, and this one was not.
    NotExpected,
    /// A live connection holds the name.
    NameTaken,
    /// The server is at its connection limit.
    Capacity,
    /// No keyword arrived in time.
    Timeout,
}

impl Refusal {
    /// Every refusal, in the order the checks run (capacity and timeout are not checks on the
    /// keyword and come last).
    pub const ALL: [Refusal; 9] = [
        Refusal::NameInvalid,
        Refusal::AnonymousRefused,
        Refusal::TransportRefused,
        Refusal::AddressRefused,
        Refusal::CertRefused,
        Refusal::NotExpected,
        Refusal::NameTaken,
        Refusal::Capacity,
        Refusal::Timeout,
    ];

    /// The code on the wire.
    pub fn code(self) -> &'static str {
        match self {
            Refusal::NameInvalid => "name-invalid",
            Refusal::AnonymousRefused => "anonymous-refused",
            Refusal::TransportRefused => "transport-refused",
            Refusal::AddressRefused => "address-refused",
            Refusal::CertRefused => "cert-refused",
            Refusal::NotExpected => "not-expected",
            Refusal::NameTaken => "name-taken",
            Refusal::Capacity => "capacity",
            Refusal::Timeout => "timeout",
        }
    }
}

/// Why the server ends an established connection (`error` control payloads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ending {
    /// A frame announced more than the server accepts.
    TooLarge,
    /// The server is stopping.
    Shutdown,
    /// A frame the client may not send (a control frame).
    BadFrame,
    /// A newcomer took this connection's name (`--name-taken replace`).
    NameReplaced,
    /// The client sent nothing for `--read-timeout` in the middle of a message.
    ReadTimeout,
    /// The client closed its sending side in the middle of a message.
    Incomplete,
}

impl Ending {
    /// The code on the wire.
    pub fn code(self) -> &'static str {
        match self {
            Ending::TooLarge => "too-large",
            Ending::Shutdown => "shutdown",
            Ending::BadFrame => "bad-frame",
            Ending::NameReplaced => "name-replaced",
            Ending::ReadTimeout => "read-timeout",
            Ending::Incomplete => "incomplete",
        }
    }
}

/// Reads a keyword frame's payload under the default rule ([`NameRule::DEFAULT`]).
pub fn parse_keyword(payload: &[u8]) -> Result<Keyword, BadName> {
    parse_keyword_with(payload, NameRule::DEFAULT)
}

/// Reads a keyword frame's payload under `rule`: empty is anonymous, anything else must be a
/// name.
pub fn parse_keyword_with(payload: &[u8], rule: NameRule) -> Result<Keyword, BadName> {
    if payload.is_empty() {
        return Ok(Keyword::Anonymous);
    }
    rule.check(payload)?;
    Ok(Keyword::Named(Name::from(payload)))
}

/// The server's `OK` answer, as a frame.
pub const OK_FRAME: [u8; 10] = [2, 0, 0, 0, 0, 0, 0, 0, b'O', b'K'];

/// Appends a control frame `KIND CODE[ TEXT]` to `out`.
fn control(kind: &str, code: &str, text: &str, out: &mut Vec<u8>) {
    // Control payloads are ASCII: anything else in the explanation is replaced, so a name a
    // client chose cannot smuggle bytes into another client's parser.
    let text: String = text
        .chars()
        .map(|c| {
            if c.is_ascii() && !c.is_ascii_control() {
                c
            } else {
                '?'
            }
        })
        .collect();
    let len = kind.len() + 1 + code.len() + if text.is_empty() { 0 } else { 1 + text.len() };
    out.extend_from_slice(&control_header(len as u64));
    out.extend_from_slice(kind.as_bytes());
    out.push(b' ');
    out.extend_from_slice(code.as_bytes());
    if !text.is_empty() {
        out.push(b' ');
        out.extend_from_slice(text.as_bytes());
    }
}

/// Appends the control frame refusing a client, with an explanation.
pub fn encode_refusal(why: Refusal, text: &str, out: &mut Vec<u8>) {
    control("refused", why.code(), text, out);
}

/// Appends the control frame that ends a connection, with an explanation.
pub fn encode_ending(why: Ending, text: &str, out: &mut Vec<u8>) {
    control("error", why.code(), text, out);
}

/// A control payload read back (client side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Control {
    /// `refused` or `error`.
    pub kind: String,
    /// The code, e.g. `name-taken`.
    pub code: String,
    /// The explanation, possibly empty.
    pub text: String,
}

/// Reads a control payload: `KIND CODE[ TEXT]`.
pub fn parse_control(payload: &[u8]) -> Option<Control> {
    let s = std::str::from_utf8(payload).ok()?;
    let mut parts = s.splitn(3, ' ');
    let (kind, code) = (parts.next()?, parts.next()?);
    if kind.is_empty() || code.is_empty() {
        return None;
    }
    Some(Control {
        kind: kind.to_owned(),
        code: code.to_owned(),
        text: parts.next().unwrap_or("").to_owned(),
    })
}

/// Appends the keyword frame a client sends first (empty name: anonymous).
pub fn encode_keyword(name: impl AsRef<[u8]>, out: &mut Vec<u8>) {
    encode(name.as_ref(), out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords() {
        assert_eq!(parse_keyword(b""), Ok(Keyword::Anonymous));
        assert_eq!(parse_keyword(b"svc"), Ok(Keyword::Named("svc".into())));
        assert_eq!(
            parse_keyword("ñame".as_bytes()),
            Ok(Keyword::Named("ñame".into()))
        );
        assert_eq!(parse_keyword(b"a#1"), Ok(Keyword::Named("a#1".into())));
        // Issue 15: any bytes, as FI-ASockIOCore takes them, up to 4 KiB.
        for any in [
            &[b'a'; 300][..],
            &[b'a'; DEFAULT_MAX_NAME][..],
            b"a\nb",
            b"\x7f",
            b"\xff\xfe",
            b"tab\there",
            b"a b",
        ] {
            assert_eq!(
                parse_keyword(any),
                Ok(Keyword::Named(any.into())),
                "{any:?}"
            );
        }
        // Except the anonymous id form, and more than the limit.
        for bad in [&b"#1.2"[..], b"#", &[b'a'; DEFAULT_MAX_NAME + 1][..]] {
            assert!(parse_keyword(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_keyword(b"#1.2"), Err(BadName::Reserved));
    }

    #[test]
    fn strict_keywords_are_the_rule_of_old() {
        let strict = |k: &[u8]| parse_keyword_with(k, NameRule::STRICT);
        assert_eq!(strict(b"svc"), Ok(Keyword::Named("svc".into())));
        assert_eq!(strict(b""), Ok(Keyword::Anonymous));
        assert_eq!(strict(&[b'a'; 255]).map(|_| ()), Ok(()));
        for bad in [
            &[b'a'; 256][..],
            &[b'a'; 300][..],
            b"a\nb",
            b"\x7f",
            b"\xff\xfe",
            b"tab\there",
            b"a b",
            b"#1.2",
            b"#",
        ] {
            assert!(strict(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn refusal_bytes_match_the_document() {
        let mut out = Vec::new();
        encode_refusal(Refusal::NameTaken, "", &mut out);
        let mut want = vec![0x12, 0, 0, 0, 0, 0, 0, 0x80];
        want.extend_from_slice(b"refused name-taken");
        assert_eq!(out, want);
        out.clear();
        encode_ending(Ending::TooLarge, "frame of 9 bytes\u{1}é", &mut out);
        let c = parse_control(&out[8..]).unwrap();
        assert_eq!((c.kind.as_str(), c.code.as_str()), ("error", "too-large"));
        assert_eq!(c.text, "frame of 9 bytes??");
        assert_eq!(
            u64::from_le_bytes(out[..8].try_into().unwrap()) & !(1 << 63),
            out.len() as u64 - 8
        );
        let codes: std::collections::HashSet<_> = Refusal::ALL.iter().map(|r| r.code()).collect();
        assert_eq!(codes.len(), Refusal::ALL.len());
    }
}
