//! HTTP/1.1 request vectors from `testdata/http1/*.toml`, and a checker for the responses a
//! server writes back.
//!
//! ```text
//!   testdata/http1/*.toml ──load()──> Vec<Case> ──request bytes──> (any server under test)
//!                                        │                               │ response bytes
//!                                        └──── Case::check(output) <─────┘
//! ```
//!
//! The file format is described in `testdata/http1/README.md`. This module knows nothing about
//! how the bytes reach a server: the sans-IO runner (`tests/vectors.rs`) feeds them to a
//! `Session` directly, a driver test writes them to a socket. Include it with
//! `#[path = "support/vectors.rs"] mod vectors;`.
//!
//! What it does not do: run anything, open sockets or time out. It only loads, validates and
//! checks.
#![allow(dead_code)] // each test crate that includes this module uses a different part of it

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use berth_proto::http::{Compress, Limits, DATE_LEN};
use serde::Deserialize;

/// The Date value a sans-IO runner passes to the session, so responses are reproducible.
pub const FIXED_DATE: &[u8] = b"Sun, 06 Nov 1994 08:49:37 GMT";

/// The request appended after a vector's own bytes by the "pipelined" way of running it.
pub const FOLLOWUP_REQUEST: &[u8] = b"GET /hello/world HTTP/1.1\r\nHost: x\r\n\r\n";

/// The directory holding the HTTP/1.1 vectors.
pub fn http1_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/http1")
}

/// Loads and validates every `*.toml` file of [`http1_dir`], in file-name order. Panics with
/// the file and the reason if any file is malformed: a broken vector is a broken test.
pub fn load_http1() -> Vec<Case> {
    load_dir(&http1_dir()).unwrap_or_else(|e| panic!("{e}"))
}

/// Loads and validates every `*.toml` file of `dir`, in file-name order.
pub fn load_dir(dir: &Path) -> Result<Vec<Case>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!("{}: no *.toml vector files", dir.display()));
    }
    let mut cases = Vec::new();
    let mut names = HashSet::new();
    for path in files {
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let file: RawFile =
            toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        for raw in file.case {
            let name = raw.name.clone();
            let case = Case::from_raw(raw, stem.clone().unwrap_or_default())
                .map_err(|e| format!("{}: case {name:?}: {e}", path.display()))?;
            if !names.insert(case.name.clone()) {
                return Err(format!("{}: duplicate case name {name:?}", path.display()));
            }
            cases.push(case);
        }
    }
    Ok(cases)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    case: Vec<RawCase>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCase {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    rfc: Option<String>,
    #[serde(default)]
    request: Option<String>,
    #[serde(default)]
    request_hex: Option<String>,
    #[serde(default)]
    limits: LimitOverrides,
    responses: Vec<Expected>,
    close: bool,
    #[serde(default)]
    incomplete: bool,
    #[serde(default)]
    known_bug: Option<String>,
    #[serde(default)]
    files: BTreeMap<String, String>,
    #[serde(default)]
    compress: Option<CompressOverrides>,
}

/// On-the-fly compression of `/files` (`berth serve --compress`) a case turns on; unset fields
/// keep [`Compress`]'s defaults.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompressOverrides {
    /// See [`Compress::level`].
    pub level: Option<u8>,
    /// See [`Compress::min_size`].
    pub min_size: Option<u64>,
}

/// One vector: bytes a client sends and what the server must answer.
#[derive(Debug, Clone)]
pub struct Case {
    /// Name of the file the case came from, without `.toml` (e.g. `smuggling`).
    pub file: String,
    /// Unique name across all files, e.g. `cl-te-together`.
    pub name: String,
    /// What the case is about, if the name does not say it all.
    pub description: Option<String>,
    /// The specification text the expectation rests on, e.g. `RFC 9112 §6.1`.
    pub rfc: Option<String>,
    /// The raw bytes the client sends.
    pub request: Vec<u8>,
    /// Limits the server is configured with, over its defaults.
    pub limits: LimitOverrides,
    /// The responses expected, in order. Interim (1xx) responses may be marked optional.
    pub responses: Vec<Expected>,
    /// Whether the server must close the connection after the last response.
    pub close: bool,
    /// The request is deliberately unfinished: the server must answer what `responses` says
    /// and then wait for more bytes, neither closing nor answering anything else.
    pub incomplete: bool,
    /// The server is known to disagree with this vector; the reason. Runners report the case
    /// as a known failure, and fail if it unexpectedly passes (so the marker gets removed).
    pub known_bug: Option<String>,
    /// Files under the `/files` root, by path relative to it, with their contents; none: the
    /// server has no root (every file is 404).
    pub files: BTreeMap<String, String>,
    /// On-the-fly compression of `/files`, if the case turns it on.
    pub compress: Option<Compress>,
}

/// Limits a case sets; unset fields keep the server's defaults.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitOverrides {
    /// See [`Limits::max_header_bytes`].
    pub max_header_bytes: Option<usize>,
    /// See [`Limits::max_headers`].
    pub max_headers: Option<usize>,
    /// See [`Limits::max_uri_bytes`].
    pub max_uri_bytes: Option<usize>,
    /// See [`Limits::max_body_bytes`].
    pub max_body_bytes: Option<usize>,
    /// See [`Limits::output_high_water`].
    pub output_high_water: Option<usize>,
    /// Whether HTTP/2 is on (see [`Limits::http2`]); `false` serves HTTP/1.1 only.
    pub http2: Option<bool>,
}

impl LimitOverrides {
    /// True if the case relies on no limit other than the defaults.
    pub fn is_default(&self) -> bool {
        self.max_header_bytes.is_none()
            && self.max_headers.is_none()
            && self.max_uri_bytes.is_none()
            && self.max_body_bytes.is_none()
            && self.output_high_water.is_none()
            && self.http2.is_none()
    }

    /// `base` with this case's overrides applied.
    pub fn apply(&self, base: Limits) -> Limits {
        Limits {
            max_header_bytes: self.max_header_bytes.unwrap_or(base.max_header_bytes),
            max_headers: self.max_headers.unwrap_or(base.max_headers),
            max_uri_bytes: self.max_uri_bytes.unwrap_or(base.max_uri_bytes),
            max_body_bytes: self.max_body_bytes.unwrap_or(base.max_body_bytes),
            output_high_water: self.output_high_water.unwrap_or(base.output_high_water),
            http2: match self.http2 {
                Some(false) => None,
                _ => base.http2,
            },
            ..base
        }
    }
}

/// One expected response.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expected {
    /// Status code.
    pub status: u16,
    /// Header fields that must be present with exactly this value (names compared
    /// case-insensitively; one matching field line is enough).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Header fields that must not be present.
    #[serde(default)]
    pub absent_headers: Vec<String>,
    /// The exact body. For a response to HEAD: the body a GET would have had, which fixes the
    /// Content-Length; no body bytes may be sent. Unset: any body.
    #[serde(default)]
    pub body: Option<String>,
    /// The response answers a HEAD request: it has no body.
    #[serde(default)]
    pub head: bool,
    /// Only for interim (1xx) responses: the server may or may not send it.
    #[serde(default)]
    pub optional: bool,
    /// The exact body once its `Content-Encoding` (gzip, br or zstd) is undone: for a body
    /// whose encoded bytes the vector cannot fix (compressed on the fly).
    #[serde(default)]
    pub decoded_body: Option<String>,
}

impl Expected {
    /// The response every keep-alive case gets for [`FOLLOWUP_REQUEST`].
    pub fn followup() -> Expected {
        Expected {
            status: 200,
            headers: BTreeMap::new(),
            absent_headers: vec!["connection".into()],
            body: Some("Hello, World!".into()),
            head: false,
            optional: false,
            decoded_body: None,
        }
    }
}

impl Case {
    fn from_raw(raw: RawCase, file: String) -> Result<Case, String> {
        let valid_name = !raw.name.is_empty()
            && raw
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !valid_name {
            return Err("name must be non-empty [a-z0-9-]".into());
        }
        let request = match (raw.request, raw.request_hex) {
            (Some(s), None) => s.into_bytes(),
            (None, Some(h)) => parse_hex(&h)?,
            _ => return Err("exactly one of `request` and `request_hex` is required".into()),
        };
        if request.is_empty() {
            return Err("empty request".into());
        }
        for r in &raw.responses {
            if r.optional && !(100..200).contains(&r.status) {
                return Err("`optional` is only for 1xx responses".into());
            }
            if !(100..600).contains(&r.status) {
                return Err(format!("bad status {}", r.status));
            }
        }
        if raw.responses.last().is_some_and(|r| r.status < 200) && !raw.incomplete {
            return Err("the last response is interim; is the case `incomplete`?".into());
        }
        if raw.incomplete && raw.close {
            return Err("an `incomplete` case cannot `close`".into());
        }
        if raw.close && raw.responses.iter().all(|r| r.status < 200) {
            return Err("a case that closes must expect a final response".into());
        }
        // Catch the easy mistake: a HEAD request whose response is parsed as if it had a body.
        let first_final = raw.responses.iter().find(|r| r.status >= 200);
        let starts_with_head = trim_leading_crlf(&request).starts_with(b"HEAD ");
        if let Some(first) = first_final {
            if starts_with_head && !first.head {
                return Err("the request is HEAD: set `head = true` on its response".into());
            }
        }
        if matches!(raw.known_bug.as_deref(), Some("")) {
            return Err("`known_bug` must say what is wrong".into());
        }
        if raw
            .files
            .keys()
            .any(|p| p.is_empty() || p.starts_with('/') || p.contains(".."))
        {
            return Err("`files` paths are relative, below the root".into());
        }
        let compress = raw.compress.map(|c| {
            let d = Compress::default();
            Compress {
                level: c.level.unwrap_or(d.level),
                min_size: c.min_size.unwrap_or(d.min_size),
            }
        });
        Ok(Case {
            file,
            name: raw.name,
            description: raw.description,
            rfc: raw.rfc,
            request,
            limits: raw.limits,
            responses: raw.responses,
            close: raw.close,
            incomplete: raw.incomplete,
            known_bug: raw.known_bug,
            files: raw.files,
            compress,
        })
    }

    /// Writes the case's [`files`](Case::files) under a new directory; `None` if it has none.
    /// The directory is removed when the guard is dropped.
    pub fn files_root(&self) -> Option<FilesRoot> {
        if self.files.is_empty() {
            return None;
        }
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "berth-vector-{}-{}-{n}",
            self.name,
            std::process::id()
        ));
        for (path, content) in &self.files {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().expect("below the root")).expect("mkdir");
            std::fs::write(&path, content).expect("write a vector's file");
        }
        Some(FilesRoot(dir))
    }

    /// `file/name`, for messages.
    pub fn id(&self) -> String {
        format!("{}/{}", self.file, self.name)
    }

    /// The limits to configure the server with: the defaults plus this case's overrides.
    pub fn limits(&self) -> Limits {
        self.limits.apply(Limits::default())
    }

    /// Whether [`FOLLOWUP_REQUEST`] may be appended to this case's bytes.
    pub fn allows_followup(&self) -> bool {
        !self.incomplete
    }

    /// The bytes of the case followed by [`FOLLOWUP_REQUEST`], and what must come back: the
    /// case's responses plus, if the connection stays open, a `200 Hello, World!`.
    pub fn with_followup(&self) -> (Vec<u8>, Vec<Expected>) {
        assert!(self.allows_followup(), "{}: incomplete case", self.id());
        let mut bytes = self.request.clone();
        bytes.extend_from_slice(FOLLOWUP_REQUEST);
        let mut expected = self.responses.clone();
        if !self.close {
            expected.push(Expected::followup());
        }
        (bytes, expected)
    }

    /// Checks `output` (everything the server wrote) against the case's own responses.
    /// `date`, if given, is the exact Date value every final response must carry.
    pub fn check(&self, output: &[u8], date: Option<&[u8]>) -> Result<(), String> {
        check_stream(output, &self.responses, self.close, date).map(|_| ())
    }
}

/// A case's files on disk ([`Case::files_root`]), removed when dropped.
#[derive(Debug)]
pub struct FilesRoot(pub PathBuf);

impl Drop for FilesRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn trim_leading_crlf(mut b: &[u8]) -> &[u8] {
    while let [b'\r', b'\n', rest @ ..] = b {
        b = rest;
    }
    b
}

fn parse_hex(s: &str) -> Result<Vec<u8>, String> {
    // `#` starts a comment that runs to the end of the line.
    let digits: Vec<u8> = s
        .lines()
        .flat_map(|line| line.split('#').next().unwrap_or_default().bytes())
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    if digits.len() % 2 != 0 {
        return Err("request_hex has an odd number of digits".into());
    }
    digits
        .chunks(2)
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|p| u8::from_str_radix(p, 16).ok())
                .ok_or_else(|| {
                    format!(
                        "request_hex: bad digits {:?}",
                        String::from_utf8_lossy(pair)
                    )
                })
        })
        .collect()
}

/// A response as read back from the wire.
#[derive(Debug, Clone)]
pub struct Parsed {
    /// Status code.
    pub status: u16,
    /// Reason phrase.
    pub reason: String,
    /// Header fields in order, names as sent.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Body bytes as sent (none for HEAD, 1xx, 204, 304).
    pub body: Vec<u8>,
}

impl Parsed {
    /// Values of every field line called `name` (case-insensitive).
    pub fn all(&self, name: &str) -> Vec<&[u8]> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
            .collect()
    }

    /// The value of the only field line called `name`; an error if there are none or several.
    pub fn one(&self, name: &str) -> Result<&[u8], String> {
        match self.all(name).as_slice() {
            [v] => Ok(v),
            [] => Err(format!("no {name} header")),
            _ => Err(format!("several {name} headers")),
        }
    }
}

/// Reads one response from the front of `buf`. `head` says it answers a HEAD request.
/// Returns the response and its length in bytes.
pub fn parse_response(buf: &[u8], head: bool) -> Result<(Parsed, usize), String> {
    let end = find(buf, b"\r\n\r\n").ok_or("truncated response head")?;
    let head_text = std::str::from_utf8(&buf[..end]).map_err(|_| "response head is not UTF-8")?;
    let mut lines = head_text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let rest = status_line
        .strip_prefix("HTTP/1.1 ")
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let (code, reason) = rest.split_once(' ').unwrap_or((rest, ""));
    let status: u16 = match code.as_bytes() {
        [a, b, c] if [a, b, c].iter().all(|d| d.is_ascii_digit()) => code.parse().unwrap_or(0),
        _ => return Err(format!("bad status line {status_line:?}")),
    };
    let mut headers = Vec::new();
    for line in lines {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("bad header line {line:?}"))?;
        let valid_name = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !valid_name || line.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
            return Err(format!("bad header line {line:?}"));
        }
        headers.push((
            name.to_owned(),
            value.trim_matches([' ', '\t']).as_bytes().to_vec(),
        ));
    }
    let mut parsed = Parsed {
        status,
        reason: reason.to_owned(),
        headers,
        body: Vec::new(),
    };
    let mut len = end + 4;
    let bodiless = head || status < 200 || status == 204 || status == 304;
    if !bodiless && is_chunked(&parsed) {
        let (body, used) = dechunk(&buf[len..])?;
        parsed.body = body;
        len += used;
    } else if !bodiless {
        let cl = content_length(&parsed)?;
        if buf.len() < len + cl {
            return Err(format!(
                "truncated body: Content-Length {cl}, {} bytes follow",
                buf.len() - len
            ));
        }
        parsed.body = buf[len..len + cl].to_vec();
        len += cl;
    }
    Ok((parsed, len))
}

/// Whether the response says `Transfer-Encoding: chunked` (and nothing else).
fn is_chunked(p: &Parsed) -> bool {
    matches!(p.all("transfer-encoding").as_slice(), [v] if v.eq_ignore_ascii_case(b"chunked"))
}

/// A chunked body at the front of `buf` (RFC 9112 §7.1, no extensions or trailers: berth
/// writes none): the body and the bytes it took.
fn dechunk(buf: &[u8]) -> Result<(Vec<u8>, usize), String> {
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        let line = find(&buf[at..], b"\r\n").ok_or("truncated chunk size line")?;
        let size = std::str::from_utf8(&buf[at..at + line])
            .ok()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|s| usize::from_str_radix(s, 16).ok())
            .ok_or_else(|| format!("bad chunk size line {}", escape(&buf[at..at + line])))?;
        at += line + 2;
        if size == 0 {
            if buf.get(at..at + 2) != Some(b"\r\n") {
                return Err("the last chunk is not followed by CRLF".into());
            }
            return Ok((body, at + 2));
        }
        let data = buf.get(at..at + size).ok_or("truncated chunk")?;
        body.extend_from_slice(data);
        at += size;
        if buf.get(at..at + 2) != Some(b"\r\n") {
            return Err("chunk data not followed by CRLF".into());
        }
        at += 2;
    }
}

/// `body` with its `Content-Encoding` undone (none, gzip, br or zstd).
fn decoded(p: &Parsed) -> Result<Vec<u8>, String> {
    let coding = p.all("content-encoding");
    match coding.as_slice() {
        [] => Ok(p.body.clone()),
        [b"gzip"] => {
            use zlib_rs::{Inflate, InflateFlush, Status};
            let mut inflate = Inflate::new(true, 31);
            let mut out = vec![0u8; p.body.len() * 64 + 1024];
            match inflate.decompress(&p.body, &mut out, InflateFlush::Finish) {
                Ok(Status::StreamEnd) => {}
                other => return Err(format!("gzip body does not decode: {other:?}")),
            }
            out.truncate(inflate.total_out() as usize);
            Ok(out)
        }
        [b"br"] => {
            let mut out = Vec::new();
            brotli::BrotliDecompress(&mut &p.body[..], &mut out)
                .map_err(|e| format!("br body does not decode: {e}"))?;
            Ok(out)
        }
        [b"zstd"] => {
            zstd::decode_all(&p.body[..]).map_err(|e| format!("zstd body does not decode: {e}"))
        }
        _ => Err(format!("Content-Encoding {coding:?}")),
    }
}

fn content_length(p: &Parsed) -> Result<usize, String> {
    let v = p.one("content-length")?;
    let s = std::str::from_utf8(v).map_err(|_| "Content-Length is not ASCII")?;
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("bad Content-Length {s:?}"));
    }
    s.parse().map_err(|_| format!("bad Content-Length {s:?}"))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Checks that `output` holds exactly the `expected` responses, in order, and nothing else.
///
/// Besides each entry's own fields, every final (non-1xx) response must carry `Server: berth`,
/// one `Date` of [`DATE_LEN`] bytes (equal to `date` when given), one `Content-Length` equal to
/// the body length (for HEAD: to the expected GET body's length), and no `Transfer-Encoding`.
/// The last response carries `Connection: close` if `close`; no other response does.
pub fn check_stream(
    output: &[u8],
    expected: &[Expected],
    close: bool,
    date: Option<&[u8]>,
) -> Result<Vec<Parsed>, String> {
    let mut at = 0;
    let mut got = Vec::new();
    let last_final = expected.iter().rposition(|e| e.status >= 200);
    for (i, exp) in expected.iter().enumerate() {
        let rest = &output[at..];
        if exp.optional && peek_status(rest) != Some(exp.status) {
            continue;
        }
        if rest.is_empty() {
            return Err(format!(
                "response #{} ({}) missing: output ends after {} response(s)",
                i + 1,
                exp.status,
                got.len()
            ));
        }
        let (parsed, len) = parse_response(rest, exp.head)
            .map_err(|e| format!("response #{} (expected {}): {e}", i + 1, exp.status))?;
        let closes_here = close && Some(i) == last_final;
        check_one(&parsed, exp, closes_here, date)
            .map_err(|e| format!("response #{} (expected {}): {e}", i + 1, exp.status))?;
        at += len;
        got.push(parsed);
    }
    if at != output.len() {
        return Err(format!(
            "{} unexpected byte(s) after the expected responses: {}",
            output.len() - at,
            escape(&output[at..])
        ));
    }
    Ok(got)
}

fn peek_status(buf: &[u8]) -> Option<u16> {
    let code = buf.strip_prefix(b"HTTP/1.1 ")?.get(..3)?;
    std::str::from_utf8(code).ok()?.parse().ok()
}

fn check_one(
    p: &Parsed,
    exp: &Expected,
    closes_here: bool,
    date: Option<&[u8]>,
) -> Result<(), String> {
    if p.status != exp.status {
        return Err(format!("status {} {}", p.status, p.reason));
    }
    if p.status >= 200 {
        if p.one("server")? != b"berth" {
            return Err("Server is not `berth`".into());
        }
        let d = p.one("date")?;
        if d.len() != DATE_LEN {
            return Err(format!("Date is {} bytes, not {DATE_LEN}", d.len()));
        }
        if let Some(want) = date {
            if d != want {
                return Err(format!("Date is {}, not {}", escape(d), escape(want)));
            }
        }
        let chunked = is_chunked(p);
        if chunked && !p.all("content-length").is_empty() {
            return Err("Content-Length with Transfer-Encoding: chunked".into());
        }
        // 204 and 304 have no content, and (berth's) no length.
        let cl = match p.status {
            204 | 304 => None,
            // A chunked HEAD answer says no length (GET's is not known before it is sent).
            _ if chunked && exp.head => None,
            _ if chunked => Some(p.body.len()),
            _ => Some(content_length(p)?),
        };
        if let (true, Some(cl), Some(body)) = (exp.head, cl, &exp.body) {
            if cl != body.len() {
                return Err(format!(
                    "HEAD: Content-Length {cl}, but GET's body is {} bytes",
                    body.len()
                ));
            }
        } else if let (false, Some(cl)) = (exp.head, cl) {
            if cl != p.body.len() {
                return Err(format!(
                    "Content-Length {cl} but {} body bytes",
                    p.body.len()
                ));
            }
        }
        if !chunked && !p.all("transfer-encoding").is_empty() {
            return Err("response has a Transfer-Encoding other than chunked".into());
        }
        if chunked && p.all("content-encoding").is_empty() {
            // berth frames chunked only what it encodes as it sends it (a file compressed on
            // the fly); everything else in the vectors has a length.
            return Err("chunked without a Content-Encoding".into());
        }
        let says_close = p.all("connection").iter().any(|v| {
            v.split(|&b| b == b',')
                .any(|t| trim_ows(t).eq_ignore_ascii_case(b"close"))
        });
        match (closes_here, says_close) {
            (true, false) => {
                return Err("the connection closes but there is no `Connection: close`".into())
            }
            (false, true) => {
                return Err("`Connection: close` on a connection that stays open".into())
            }
            _ => {}
        }
    }
    for (name, want) in &exp.headers {
        let values = p.all(name);
        if values.is_empty() {
            return Err(format!("no {name} header"));
        }
        if !values.contains(&want.as_bytes()) {
            let got: Vec<String> = values.iter().map(|v| escape(v)).collect();
            return Err(format!("{name} is {}, not {want:?}", got.join(" / ")));
        }
    }
    for name in &exp.absent_headers {
        if !p.all(name).is_empty() {
            return Err(format!("unexpected {name} header"));
        }
    }
    if exp.head && !p.body.is_empty() {
        return Err("HEAD response has a body".into());
    }
    if let (Some(want), false) = (&exp.decoded_body, exp.head) {
        let got = decoded(p)?;
        if got != want.as_bytes() {
            return Err(format!(
                "decoded body {}, not {}",
                escape(&got),
                escape(want.as_bytes())
            ));
        }
    }
    if let (Some(body), false) = (&exp.body, exp.head) {
        if p.body != body.as_bytes() {
            return Err(format!(
                "body {}, not {}",
                escape(&p.body),
                escape(body.as_bytes())
            ));
        }
    }
    Ok(())
}

fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// `bytes` as a quoted string with `\r`, `\n` and non-printable bytes escaped, for messages.
pub fn escape(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() + 2);
    s.push('"');
    for &b in bytes {
        match b {
            b'\r' => s.push_str("\\r"),
            b'\n' => s.push_str("\\n"),
            b'\t' => s.push_str("\\t"),
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            0x20..=0x7e => s.push(b as char),
            _ => {
                let _ = write!(s, "\\x{b:02x}");
            }
        }
    }
    s.push('"');
    s
}
