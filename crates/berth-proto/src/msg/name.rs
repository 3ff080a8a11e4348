//! Client names (docs/msg-protocol.md §2): a name is bytes, any bytes, as FI-ASockIOCore takes
//! them. This module holds the [`Name`] type, the [`NameRule`] a keyword must follow (its length,
//! the `#` form reserved for anonymous clients' ids, and, when asked, the strict rule of old),
//! and the one **escaped form** used wherever a name is shown or typed: logs, refusal texts, the
//! relay demo's `@NAME ` prefix and the command line.
//!
//! The escaped form: a printable character stands for itself, except the backslash, which is
//! doubled (`\\`); every other byte is written `\xNN` (two lowercase hex digits). "Other" means
//! a space, an ASCII control character, a byte that is not part of valid UTF-8, and each byte of
//! a character that shows nothing or changes what is around it (a Unicode control, whitespace,
//! or an invisible or direction-changing format character). So an escaped name is UTF-8 text with
//! no space and no control character, which is why it can end at a space in `@NAME text` and sit
//! on one log line, and it maps back to exactly the bytes of the name ([`Name::unescape`]).
//!
//! Reading the escaped form is lenient, so that what people type works: `\\` and `\xNN` (either
//! case) are escapes, and any other byte, a backslash that starts neither included, stands for
//! itself.

use std::borrow::Borrow;
use std::fmt::{self, Write as _};

/// Longest name by default (`--max-name`), in bytes.
pub const DEFAULT_MAX_NAME: usize = 4096;

/// Longest name under the strict rule (`--strict-names`), in bytes.
pub const STRICT_MAX_NAME: usize = 255;

/// First byte of the ids the server gives anonymous clients (`#1.2`); no name may start with
/// it, so no client can take an anonymous client's identity.
pub const ANONYMOUS_MARK: u8 = b'#';

/// A client's name: 1 or more bytes, compared byte for byte. `Display` writes the escaped form
/// (module docs); `Debug` writes it in double quotes (a `"` inside as `\x22`).
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(Box<[u8]>);

impl Name {
    /// The name's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The name as text, if it is UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the name has no bytes (never true of an admitted client's name).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Reads the escaped form (module docs): `\\` is a backslash, `\xNN` the byte NN, anything
    /// else stands for itself. Never fails: every input means some bytes.
    pub fn unescape(text: impl AsRef<[u8]>) -> Name {
        let text = text.as_ref();
        let mut out = Vec::with_capacity(text.len());
        let mut i = 0;
        while i < text.len() {
            let b = text[i];
            if b == b'\\' {
                if text.get(i + 1) == Some(&b'\\') {
                    out.push(b'\\');
                    i += 2;
                    continue;
                }
                if text.get(i + 1) == Some(&b'x') {
                    let hex = |j: usize| text.get(j).and_then(|&h| (h as char).to_digit(16));
                    if let (Some(hi), Some(lo)) = (hex(i + 2), hex(i + 3)) {
                        out.push((hi * 16 + lo) as u8);
                        i += 4;
                        continue;
                    }
                }
            }
            out.push(b);
            i += 1;
        }
        Name(out.into_boxed_slice())
    }

    /// Whether the bytes are already in the escaped form's alphabet: UTF-8 with no control
    /// character and no space (what a relay target or a log token may hold).
    pub fn is_escaped_text(text: &[u8]) -> bool {
        std::str::from_utf8(text).is_ok_and(|s| s.chars().all(|c| c == '\\' || shown_as_is(c)))
    }

    /// The escaped form, at most about `limit` bytes of it: a longer one is cut at a character
    /// and ends `...` (for refusal texts, which clients read with a size limit).
    pub fn short(&self, limit: usize) -> Escaped<'_> {
        Escaped {
            bytes: &self.0,
            limit,
        }
    }
}

/// What a character of a name must be to stand for itself in the escaped form.
fn shown_as_is(c: char) -> bool {
    !c.is_control() && !c.is_whitespace() && !invisible(c) && c != '\\'
}

/// Format characters that show nothing, or reorder or hide the text around them (the bidi
/// controls of "Trojan Source", zero-width characters, the byte-order mark): in a log they
/// would make one name look like another.
fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{ad}'
            | '\u{61c}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{feff}'
    )
}

/// Writes `bytes` escaped, stopping before `limit` output bytes (then `...`).
fn write_escaped(f: &mut dyn fmt::Write, bytes: &[u8], limit: usize, quote: bool) -> fmt::Result {
    let mut written = 0;
    let mut put = |f: &mut dyn fmt::Write, s: &str| -> Result<bool, fmt::Error> {
        if written + s.len() > limit {
            f.write_str("...")?;
            return Ok(false);
        }
        written += s.len();
        f.write_str(s)?;
        Ok(true)
    };
    let mut hex = String::new();
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            let keep = shown_as_is(c) && !(quote && c == '"');
            let more = if c == '\\' {
                put(f, "\\\\")?
            } else if keep {
                put(f, c.encode_utf8(&mut [0; 4]))?
            } else {
                hex.clear();
                for b in c.encode_utf8(&mut [0; 4]).bytes() {
                    let _ = write!(hex, "\\x{b:02x}");
                }
                put(f, &hex)?
            };
            if !more {
                return Ok(());
            }
        }
        for b in chunk.invalid() {
            hex.clear();
            let _ = write!(hex, "\\x{b:02x}");
            if !put(f, &hex)? {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// A name's escaped form, possibly cut short ([`Name::short`]).
#[derive(Clone, Copy)]
pub struct Escaped<'a> {
    bytes: &'a [u8],
    limit: usize,
}

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_escaped(f, self.bytes, self.limit, false)
    }
}

impl fmt::Debug for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_char('"')?;
        write_escaped(f, self.bytes, self.limit, true)?;
        f.write_char('"')
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_escaped(f, &self.0, usize::MAX, false)
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.short(usize::MAX), f)
    }
}

impl AsRef<[u8]> for Name {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// So that maps keyed by [`Name`] are searched with plain bytes.
impl Borrow<[u8]> for Name {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

impl From<&[u8]> for Name {
    fn from(b: &[u8]) -> Name {
        Name(b.into())
    }
}

impl<const N: usize> From<&[u8; N]> for Name {
    fn from(b: &[u8; N]) -> Name {
        Name(b[..].into())
    }
}

impl From<Vec<u8>> for Name {
    fn from(b: Vec<u8>) -> Name {
        Name(b.into_boxed_slice())
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Name {
        Name(s.as_bytes().into())
    }
}

impl From<String> for Name {
    fn from(s: String) -> Name {
        Name(s.into_bytes().into_boxed_slice())
    }
}

impl PartialEq<[u8]> for Name {
    fn eq(&self, other: &[u8]) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other.as_bytes()
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == *other.as_bytes()
    }
}

/// What a keyword must be to be a name (`--max-name`, `--strict-names`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NameRule {
    /// Longest name, in bytes (under the strict rule, at most [`STRICT_MAX_NAME`] whatever
    /// this says).
    pub max: usize,
    /// The strict rule of berth before issue 15: UTF-8 without control characters or spaces.
    pub strict: bool,
}

impl Default for NameRule {
    fn default() -> Self {
        NameRule::DEFAULT
    }
}

impl NameRule {
    /// Any bytes, up to [`DEFAULT_MAX_NAME`], not starting with `#`.
    pub const DEFAULT: NameRule = NameRule {
        max: DEFAULT_MAX_NAME,
        strict: false,
    };

    /// 1 to 255 bytes of UTF-8 without control characters or spaces, not starting with `#`.
    pub const STRICT: NameRule = NameRule {
        max: STRICT_MAX_NAME,
        strict: true,
    };

    /// The longest name this rule admits.
    pub fn max_len(self) -> usize {
        match self.strict {
            true => self.max.min(STRICT_MAX_NAME),
            false => self.max,
        }
    }

    /// Whether `bytes` is a name under this rule.
    pub fn check(self, bytes: &[u8]) -> Result<(), BadName> {
        if bytes.is_empty() {
            return Err(BadName::Empty);
        }
        let max = self.max_len();
        if bytes.len() > max {
            return Err(BadName::TooLong {
                len: bytes.len() as u64,
                max,
            });
        }
        if bytes[0] == ANONYMOUS_MARK {
            return Err(BadName::Reserved);
        }
        // A space once ended `@NAME ` in a relayed message; under the strict rule it still may
        // not appear (the escaped form now reaches such names, `\x20`).
        let plain = |s: &str| !s.chars().any(|c| c.is_control() || c == ' ');
        if self.strict && !std::str::from_utf8(bytes).is_ok_and(plain) {
            return Err(BadName::NotStrict);
        }
        Ok(())
    }
}

/// Why a keyword is not a name (all refused with `name-invalid`; this says why).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadName {
    /// No bytes (a keyword with none is the anonymous form; elsewhere a name needs one).
    Empty,
    /// Longer than the rule allows (`len`: the keyword frame's announced length; it is not
    /// read).
    TooLong {
        /// Bytes announced.
        len: u64,
        /// The limit in force.
        max: usize,
    },
    /// Starts with `#`, the form of anonymous clients' ids.
    Reserved,
    /// Not UTF-8 free of control characters and spaces (strict names only).
    NotStrict,
    /// The keyword came as a control frame (length field with the top bit set).
    ControlFrame,
}

impl fmt::Display for BadName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadName::Empty => f.write_str("a name has at least one byte"),
            BadName::TooLong { len, max } => {
                write!(f, "a name is at most {max} bytes; this one has {len}")
            }
            BadName::Reserved => {
                f.write_str("names starting with '#' are reserved for the ids of anonymous clients")
            }
            BadName::NotStrict => f.write_str(
                "this server takes strict names: UTF-8 without control characters or spaces",
            ),
            BadName::ControlFrame => f.write_str("a control frame is not a keyword"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_escaped_form() {
        for (bytes, shown) in [
            (&b"svc"[..], "svc"),
            ("ñame".as_bytes(), "ñame"),
            (b"a b", "a\\x20b"),
            (b"a\nb", "a\\x0ab"),
            (b"\xff\xfe", "\\xff\\xfe"),
            (b"back\\slash", "back\\\\slash"),
            (b"\x7f\x00", "\\x7f\\x00"),
            ("c1\u{85}".as_bytes(), "c1\\xc2\\x85"),
            ("rtl\u{202e}x".as_bytes(), "rtl\\xe2\\x80\\xaex"),
            ("nbsp\u{a0}".as_bytes(), "nbsp\\xc2\\xa0"),
            (b"q\"", "q\""),
            // A lone continuation byte, then a truncated sequence at the end.
            (b"a\x80b\xe2\x82", "a\\x80b\\xe2\\x82"),
        ] {
            let name = Name::from(bytes);
            assert_eq!(name.to_string(), shown, "{bytes:?}");
            assert!(Name::is_escaped_text(shown.as_bytes()), "{shown}");
            assert_eq!(Name::unescape(shown), name, "{shown}");
        }
        assert_eq!(format!("{:?}", Name::from("q\"")), "\"q\\x22\"");
    }

    #[test]
    fn unescaping_is_lenient() {
        assert_eq!(Name::unescape("a\\x41\\X41"), Name::from("aA\\X41"));
        assert_eq!(Name::unescape("C:\\dir"), Name::from("C:\\dir"));
        assert_eq!(Name::unescape("end\\"), Name::from("end\\"));
        assert_eq!(Name::unescape("\\x4"), Name::from("\\x4"));
        assert_eq!(Name::unescape("\\xFF"), Name::from(b"\xff"));
        assert_eq!(Name::unescape("a b"), Name::from("a b"));
    }

    #[test]
    fn short_forms_are_cut_at_a_character() {
        let name = Name::from(vec![0xffu8; 100]);
        let s = name.short(10).to_string();
        assert_eq!(s, "\\xff\\xff...");
        assert_eq!(Name::from("abc").short(10).to_string(), "abc");
        assert_eq!(Name::from("abcdef").short(3).to_string(), "abc...");
    }

    #[test]
    fn rules() {
        let d = NameRule::DEFAULT;
        assert_eq!(d.check(&[b'n'; 4096]), Ok(()));
        assert_eq!(
            d.check(&[b'n'; 4097]),
            Err(BadName::TooLong {
                len: 4097,
                max: 4096
            })
        );
        for ok in [&b"\xff\xfe"[..], b"a\nb", b"a b", b"a#1", b"\x00"] {
            assert_eq!(d.check(ok), Ok(()), "{ok:?}");
        }
        assert_eq!(d.check(b"#1.2"), Err(BadName::Reserved));
        assert_eq!(d.check(b""), Err(BadName::Empty));
        let s = NameRule::STRICT;
        assert_eq!(
            s.check(&[b'n'; 300]),
            Err(BadName::TooLong { len: 300, max: 255 })
        );
        for bad in [
            &b"\xff\xfe"[..],
            b"a\nb",
            b"a b",
            b"\x7f",
            "\u{85}".as_bytes(),
        ] {
            assert_eq!(s.check(bad), Err(BadName::NotStrict), "{bad:?}");
        }
        let strict_big = NameRule {
            max: 10_000,
            strict: true,
        };
        assert_eq!(strict_big.max_len(), 255);
        let small = NameRule {
            max: 3,
            strict: false,
        };
        assert!(small.check(b"abcd").is_err());
    }

    #[test]
    fn names_are_found_by_their_bytes() {
        let mut map = std::collections::HashMap::new();
        map.insert(Name::from(b"\xff\xfe"), 1);
        map.insert(Name::from("bob"), 2);
        assert_eq!(map.get(&b"\xff\xfe"[..]), Some(&1));
        assert_eq!(map.get("bob".as_bytes()), Some(&2));
        let bob = Name::from("bob");
        assert!(bob == "bob" && bob == *"bob" && bob == b"bob"[..]);
        assert_eq!(Name::from("bob").as_str(), Some("bob"));
        assert_eq!(Name::from(b"\xff").as_str(), None);
    }
}
