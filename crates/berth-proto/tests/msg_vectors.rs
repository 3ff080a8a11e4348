//! The message protocol's vectors (`testdata/msg/`), each run whole, one byte at a time and
//! split at every point: whatever way the bytes arrive, a server reads the same messages and
//! stops at the same error.

use berth_proto::msg::handshake::{parse_keyword, parse_keyword_with, Keyword, NameRule};
use berth_proto::msg::{FrameError, MessageReader};
use serde::Deserialize;

const DEFAULT_LIMIT: u64 = 64 * 1024 * 1024;

#[derive(Deserialize)]
struct FrameFile {
    case: Vec<FrameCase>,
}

#[derive(Deserialize)]
struct FrameCase {
    name: String,
    input: String,
    messages: Vec<String>,
    limit: Option<u64>,
    error: Option<String>,
    #[serde(default)]
    partial: bool,
}

#[derive(Deserialize)]
struct KeywordFile {
    case: Vec<KeywordCase>,
}

#[derive(Deserialize)]
struct KeywordCase {
    name: String,
    payload: String,
    expect: String,
    /// Under `--strict-names`, if that differs from `expect`.
    strict: Option<String>,
}

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    assert!(digits.len() % 2 == 0, "odd hex: {s}");
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).expect("hex digit"))
        .collect()
}

fn load<T: for<'de> Deserialize<'de>>(file: &str) -> T {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/msg/").to_owned() + file;
    toml::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// What reading `pieces` in order yields: the messages, the error if any, and whether the
/// reader ended between frames.
fn read(limit: u64, pieces: &[&[u8]]) -> (Vec<Vec<u8>>, Option<FrameError>, bool) {
    let mut r = MessageReader::new(limit);
    let mut messages = Vec::new();
    for piece in pieces {
        let mut at = 0;
        loop {
            match r.next(&piece[at..]) {
                Ok((n, m)) => {
                    at += n;
                    match m {
                        Some(m) => messages.push(m.to_vec()),
                        None => break,
                    }
                }
                Err(e) => return (messages, Some(e), false),
            }
        }
        assert_eq!(at, piece.len(), "a piece was not used up");
    }
    let boundary = r.at_boundary();
    (messages, None, boundary)
}

#[test]
fn frame_vectors() {
    let file: FrameFile = load("frames.toml");
    assert!(file.case.len() >= 10);
    for case in &file.case {
        let input = hex(&case.input);
        let limit = case.limit.unwrap_or(DEFAULT_LIMIT);
        let want: Vec<Vec<u8>> = case.messages.iter().map(|m| hex(m)).collect();
        let check = |how: &str, pieces: &[&[u8]]| {
            let (got, err, boundary) = read(limit, pieces);
            assert_eq!(got, want, "{} ({how}): messages", case.name);
            match (&case.error, err) {
                (None, None) => {}
                (Some(code), Some(e)) if code == e.ending().code() => {}
                (want, got) => panic!("{} ({how}): error {want:?}, got {got:?}", case.name),
            }
            if case.error.is_none() {
                assert_eq!(
                    boundary, !case.partial,
                    "{} ({how}): ends between frames",
                    case.name
                );
            }
        };
        check("whole", &[&input]);
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        check("byte by byte", &bytes);
        for split in 1..input.len() {
            let (a, b) = input.split_at(split);
            check(&format!("split at {split}"), &[a, b]);
        }
    }
}

#[test]
fn keyword_vectors() {
    let file: KeywordFile = load("keywords.toml");
    let read = |payload: &[u8], rule: NameRule| match parse_keyword_with(payload, rule) {
        // Names are shown in their escaped form (`\xNN` for bytes that show nothing).
        Ok(Keyword::Named(n)) => format!("named:{n}"),
        Ok(Keyword::Anonymous) => "anonymous".to_owned(),
        Err(_) => "refused:name-invalid".to_owned(),
    };
    for case in &file.case {
        let payload = hex(&case.payload);
        assert_eq!(
            read(&payload, NameRule::DEFAULT),
            case.expect,
            "{}",
            case.name
        );
        let strict = case.strict.as_ref().unwrap_or(&case.expect);
        let got = read(&payload, NameRule::STRICT);
        assert_eq!(&got, strict, "{} (strict names)", case.name);
    }
    // The length bounds, which are awkward to write out as hex.
    assert!(matches!(
        parse_keyword(&[b'n'; 4096]),
        Ok(Keyword::Named(_))
    ));
    assert!(parse_keyword(&[b'n'; 4097]).is_err());
    let strict = |k: &[u8]| parse_keyword_with(k, NameRule::STRICT);
    assert!(matches!(strict(&[b'n'; 255]), Ok(Keyword::Named(_))));
    assert!(strict(&[b'n'; 256]).is_err());
}
