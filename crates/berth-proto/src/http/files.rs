//! Static files, the protocol half: everything about serving a file that needs no file system.
//!
//! ```text
//!   handler: FileRequest::parse(req, "a/b.txt") ──> Handled::File(request)
//!   session: Action::Open { request }          ──> driver opens it under its root
//!   driver:  Session::file(&request, Ok(meta))  ──> head written (200/206/304/416/404...)
//!   session: Action::Body { offset, len }       ──> driver sends those bytes of the file
//! ```
//!
//! Here live the parts a driver must not get wrong and that are easy to test without a disk:
//! turning the request path into a relative path that cannot leave the root (percent-decoding,
//! `..`, encoded slashes, NUL bytes, absolute paths), the conditional request rules
//! (`If-None-Match`, `If-Modified-Since`, `If-Range`), `Range: bytes=` with its 206 and 416
//! answers, validators (`ETag`, `Last-Modified`) and the Content-Type table. Opening the file,
//! refusing symlinks that leave the root, and moving the bytes are the driver's
//! (`berth::files`).
//!
//! Content codings ([`super::encoding`]): the driver may open a precompressed sibling
//! (`a.css.br`, `.zst`, `.gz`) that the client accepts ([`FileMeta::encoding`]); it is served
//! as it is, with its own `ETag`, and ranges and conditions apply to its bytes (as nginx's
//! `gzip_static` does). Otherwise a whole `200` of a compressible type may be encoded on the fly
//! ([`FileRequest::compress`]): then [`Action::Body`](super::Action::Body) carries an
//! [`Encode`], the body goes out chunked, and the `ETag` is the plain file's made weak. Never
//! for a range, a 304, HTTP/1.0 (as nginx's `gzip_http_version 1.1`), or a request that says
//! `Cache-Control: no-transform`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::encoding::{compressible, Accepted, Coding, Compress};
use super::request::{trim, Method, Request};
use super::response::{write_head, write_response, Head, HeadSink, Stamp};

/// A request for a file, checked and reduced to what answering it needs. Owned, so it can
/// travel to whoever opens files (a worker, or the actor model's Files actor). Boxed: it rides
/// in [`Handled`](super::Handled) and [`Action`](super::Action), which every request moves
/// several times, and inline it made them 184 bytes where the rest fit in 40.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRequest(Box<FileFields>);

impl std::ops::Deref for FileRequest {
    type Target = FileFields;
    fn deref(&self) -> &FileFields {
        &self.0
    }
}

impl std::ops::DerefMut for FileRequest {
    fn deref_mut(&mut self) -> &mut FileFields {
        &mut self.0
    }
}

/// What a [`FileRequest`] holds (its fields are this module's own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileFields {
    /// The relative path to open (`..path_len`): `/`-separated, percent-decoded; no empty, `.`
    /// or `..` segment; `""` is the root. Then, for a path not in directory form, the
    /// `Location` a directory would be redirected to (the request path with a `/` added, query
    /// kept), built in the same allocation because it cannot be built once the request is gone.
    text: String,
    path_len: usize,
    /// The request path ends in `/` or `/.`: it names a directory, never a file.
    dir_form: bool,
    head_only: bool,
    /// The raw `If-None-Match` value (rarely present, so kept as sent).
    if_none_match: Option<String>,
    /// `If-Modified-Since` in seconds since the epoch; a malformed date is ignored
    /// (RFC 9110 §13.1.3).
    if_modified_since: Option<u64>,
    /// The single byte range asked for; `None` when absent, malformed or multiple (then the whole
    /// file is sent, which RFC 9110 §14.2 allows).
    range: Option<RangeSpec>,
    if_range: Option<IfRange>,
    /// What `Accept-Encoding` allows.
    accept: Accepted,
    /// The request said `Cache-Control: no-transform`: nothing is encoded on the fly.
    no_transform: bool,
    /// On-the-fly compression, if the server does it ([`FileRequest::compress`]).
    compress: Option<Compress>,
    /// Opened below the site's root rather than the `/files` root ([`FileRequest::in_site`]).
    site: bool,
    /// The `Cache-Control` of the file's answers ([`FileRequest::cache_control`]).
    cache_control: Option<std::sync::Arc<str>>,
}

/// A file body to encode as it is sent: what [`Action::Body`](super::Action::Body) asks of
/// the driver besides the range (then always the whole file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Encode {
    /// The coding to apply.
    pub coding: Coding,
    /// Its level (1–9).
    pub level: u8,
    /// Frame the encoded bytes with the chunked transfer coding (HTTP/1.1; the head said so).
    pub chunked: bool,
}

/// Why a request path was refused before any file was looked at. The answer is 404 either
/// way (nothing tells a prober which rule it hit); the reason is for logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadPath(pub &'static str);

/// What the driver found for a [`FileRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMeta {
    /// Size in bytes.
    pub len: u64,
    /// Last modification time.
    pub modified: SystemTime,
    /// The Content-Type of the file actually opened (a directory's `index.html`, say): see
    /// [`content_type`].
    pub content_type: &'static str,
    /// The file opened is a precompressed sibling in this coding (`len` and `modified` are
    /// the sibling's): sent with `Content-Encoding` and an `ETag` of its own.
    pub encoding: Option<Coding>,
    /// A precompressed sibling exists, whether or not this one was opened: the answer varies
    /// with `Accept-Encoding` (`Vary`).
    pub vary: bool,
}

impl FileMeta {
    /// A plain file's metadata: no sibling.
    pub fn plain(len: u64, modified: SystemTime, content_type: &'static str) -> FileMeta {
        FileMeta {
            len,
            modified,
            content_type,
            encoding: None,
            vary: false,
        }
    }
}

/// Why the driver could not open a [`FileRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileError {
    /// No such file, a directory without `index.html`, not a regular file, a symlink leading
    /// out of the root, or no root configured: 404.
    NotFound,
    /// The file exists but the server may not read it: 403.
    Forbidden,
    /// Any other I/O failure: 500.
    Failed,
    /// The server holds as many open files as it may (its budget of descriptors, or the
    /// process's limit): 503 with `Retry-After`, and the server goes on serving.
    Busy,
    /// A directory that has an `index.html`, asked for without the trailing `/`
    /// ([`FileRequest::dir_form`]): 301 to the path with it, as nginx does, so that the
    /// index's relative links resolve below the directory.
    Directory,
}

/// A single byte range as asked for, before the file's length is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RangeSpec {
    /// `first-last`, both inclusive.
    FromTo(u64, u64),
    /// `first-`: to the end.
    From(u64),
    /// `-n`: the last n bytes.
    Suffix(u64),
}

/// `If-Range`: send the range only if the file is still this one.
#[derive(Debug, Clone, PartialEq, Eq)]
enum IfRange {
    ETag(String),
    Date(u64),
}

impl FileRequest {
    /// Checks `rel`, the request path below the files route (`"a/b%20c.txt"` for
    /// `/files/a/b%20c.txt`), and collects the conditional and range headers of `req`.
    ///
    /// Refused, whatever the file system holds: malformed percent-escapes, an encoded `/` or
    /// `\`, a NUL byte, a `..` segment (encoded or not), a path that starts with `/` (absolute),
    /// and bytes that are not UTF-8. Empty and `.` segments are skipped; a last one (`a/`,
    /// `a/.`) puts the path in directory form ([`FileRequest::dir_form`]). An empty `rel` is the
    /// directory the route serves, in directory form if the request path ends in `/`.
    pub fn parse(req: &Request<'_>, rel: &str) -> Result<FileRequest, BadPath> {
        let extra = req.path.len() + 2 + req.query.map_or(0, str::len);
        let (mut text, dir_form) = sanitize(rel, extra)?;
        let dir_form = if rel.is_empty() {
            req.path.ends_with('/')
        } else {
            dir_form
        };
        let path_len = text.len();
        if !dir_form {
            text.push_str(req.path);
            text.push('/');
            if let Some(q) = req.query {
                text.push('?');
                text.push_str(q);
            }
        }
        Ok(FileRequest(Box::new(FileFields {
            text,
            path_len,
            dir_form,
            head_only: req.method == Method::Head,
            if_none_match: req
                .header("if-none-match")
                .and_then(|v| std::str::from_utf8(v).ok())
                .map(|v| v.trim().to_owned()),
            if_modified_since: req.header("if-modified-since").and_then(parse_date),
            // Range is defined for GET only (RFC 9110 §14.2).
            range: match req.method {
                Method::Get => req.header("range").and_then(parse_range),
                _ => None,
            },
            if_range: req.header("if-range").and_then(parse_if_range),
            accept: Accepted::parse(
                req.headers
                    .iter()
                    .filter(|h| h.name.eq_ignore_ascii_case("accept-encoding"))
                    .map(|h| h.value),
            ),
            no_transform: req
                .headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case("cache-control"))
                .any(|h| super::request::list_contains(h.value, "no-transform")),
            compress: None,
            site: false,
            cache_control: None,
        })))
    }

    /// The file is the site's (`berth serve --site DIR`, served at `/`), not one below the
    /// `/files` root: the driver opens it under the site's directory.
    pub fn in_site(mut self) -> FileRequest {
        self.site = true;
        self
    }

    /// Whether the file is opened below the site's root ([`FileRequest::in_site`]).
    pub fn in_site_root(&self) -> bool {
        self.site
    }

    /// Encodes a whole `200` of a compressible type on the fly, as `compress` says (`None`:
    /// never, the default).
    pub fn compress(mut self, compress: Option<Compress>) -> FileRequest {
        self.compress = compress;
        self
    }

    /// Sends `value` as the `Cache-Control` of the file's answers that carry it (200, 206, and
    /// 304 as RFC 9111 §4.3.4 says a 304 should): `max-age=86400` for a day, a far future
    /// for assets whose names change with their content. Errors (404, 416...) get none.
    /// `None` (the default): no field.
    pub fn cache_control(mut self, value: Option<std::sync::Arc<str>>) -> FileRequest {
        self.cache_control = value;
        self
    }

    /// What the request's `Accept-Encoding` allows: the driver picks a precompressed sibling
    /// with it.
    pub fn accepted(&self) -> &Accepted {
        &self.accept
    }

    /// The relative path to open below the root; `""` means the root itself.
    pub fn path(&self) -> &str {
        &self.text[..self.path_len]
    }

    /// Whether the request path ends in `/` or `/.`: then it names a directory, and a file
    /// found there is not served (`/files/a.txt/` is 404, as nginx answers, rather than
    /// `a.txt` at a second URL). A directory asked for without it is redirected to it
    /// ([`FileError::Directory`]).
    pub fn dir_form(&self) -> bool {
        self.dir_form
    }

    /// Where [`FileError::Directory`] redirects: the request path with `/` added, query kept.
    fn location(&self) -> &str {
        &self.text[self.path_len..]
    }

    /// Whether the request was HEAD (the head is sent, the body is not).
    pub fn head_only(&self) -> bool {
        self.head_only
    }
}

/// Percent-decodes and checks a path below the root; see [`FileRequest::parse`]. Returns it
/// (with room for `extra` more bytes) and whether its last segment was empty or `.`.
fn sanitize(rel: &str, extra: usize) -> Result<(String, bool), BadPath> {
    if rel.starts_with('/') {
        return Err(BadPath("absolute path"));
    }
    let mut out = Vec::with_capacity(rel.len() + extra);
    let mut dir_form = false;
    for segment in rel.split('/') {
        let start = out.len();
        if start > 0 {
            out.push(b'/');
        }
        let mut bytes = segment.bytes();
        while let Some(b) = bytes.next() {
            let b = if b == b'%' {
                let hi = bytes.next().and_then(hex);
                let lo = bytes.next().and_then(hex);
                match (hi, lo) {
                    (Some(hi), Some(lo)) => hi << 4 | lo,
                    _ => return Err(BadPath("malformed percent-escape")),
                }
            } else {
                b
            };
            match b {
                0 => return Err(BadPath("NUL byte")),
                // Only a literal `/` separates segments; an encoded one would let `..%2F..`
                // through a segment check. `\` separates nothing on Unix, but refusing it costs
                // nothing and keeps the rule simple.
                b'/' | b'\\' => return Err(BadPath("encoded separator")),
                _ => out.push(b),
            }
        }
        let seg = &out[start + usize::from(start > 0)..];
        dir_form = matches!(seg, b"" | b".");
        match seg {
            b".." => return Err(BadPath("parent segment")),
            b"" | b"." => out.truncate(start),
            _ => {}
        }
    }
    let path = String::from_utf8(out).map_err(|_| BadPath("not UTF-8"))?;
    Ok((path, dir_form))
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn parse_date(v: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(trim(v)).ok()?;
    let t = httpdate::parse_http_date(s).ok()?;
    Some(t.duration_since(UNIX_EPOCH).ok()?.as_secs())
}

/// `bytes=first-last`, `bytes=first-` or `bytes=-suffix`; anything else (other units, several
/// ranges, bad numbers, last before first) is `None`: the header is ignored.
///
/// Numbers too big for 64 bits are valid (`1*DIGIT`, RFC 9110 §14.1.1) and saturate: a last
/// position or a suffix past the end of any file means the end (§14.1.2), a first position
/// past it is unsatisfiable.
fn parse_range(v: &[u8]) -> Option<RangeSpec> {
    let v = trim(v);
    let (unit, set) = (v.get(..6)?, &v[6..]);
    if !unit.eq_ignore_ascii_case(b"bytes=") || set.contains(&b',') {
        return None;
    }
    let set = trim(set);
    let dash = set.iter().position(|&b| b == b'-')?;
    let (first, last) = (trim(&set[..dash]), trim(&set[dash + 1..]));
    match (first.is_empty(), last.is_empty()) {
        (true, true) => None,
        (true, false) => Some(RangeSpec::Suffix(saturating_num(last)?)),
        (false, true) => Some(RangeSpec::From(saturating_num(first)?)),
        (false, false) => {
            let (a, b) = (saturating_num(first)?, saturating_num(last)?);
            // Compared as written, not as saturated: `…9-…8` stays invalid.
            (cmp_decimal(first, last).is_le()).then_some(RangeSpec::FromTo(a, b))
        }
    }
}

/// `1*DIGIT` as a u64, `u64::MAX` when it is bigger; `None` if not all digits.
fn saturating_num(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0u64, |acc, &b| {
        acc.checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(b - b'0')))
            .unwrap_or(u64::MAX)
    }))
}

/// Compares two strings of decimal digits by value, whatever their length.
fn cmp_decimal(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    fn strip(s: &[u8]) -> &[u8] {
        &s[s.iter().take_while(|&&d| d == b'0').count()..]
    }
    let (a, b) = (strip(a), strip(b));
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

fn parse_if_range(v: &[u8]) -> Option<IfRange> {
    let v = trim(v);
    if v.starts_with(b"\"") || v.starts_with(b"W/") {
        Some(IfRange::ETag(String::from_utf8(v.to_vec()).ok()?))
    } else {
        parse_date(v).map(IfRange::Date)
    }
}

/// What answering a file request comes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    /// 200, the whole file.
    Full,
    /// 206, `len` bytes from `start`.
    Partial { start: u64, len: u64 },
    /// 304.
    NotModified,
    /// 416.
    Unsatisfiable,
}

/// Seconds and nanoseconds since the epoch (0 for times before it).
fn since_epoch(t: SystemTime) -> Duration {
    t.duration_since(UNIX_EPOCH).unwrap_or_default()
}

/// The strong validator of a file: its modification time and length, as nginx builds one, with
/// nanoseconds so that two writes within a second still change it. A precompressed sibling's
/// names its coding too, so it never equals the plain file's.
fn etag(meta: &FileMeta) -> String {
    let t = since_epoch(meta.modified);
    let coding = meta.encoding.map_or("", Coding::token);
    format!(
        "\"{:x}.{:x}-{:x}{}{coding}\"",
        t.as_secs(),
        t.subsec_nanos(),
        meta.len,
        if coding.is_empty() { "" } else { "-" },
    )
}

/// `If-None-Match` uses the weak comparison: `W/"x"` matches `"x"` (RFC 9110 §13.1.2).
fn none_match_hits(list: &str, tag: &str) -> bool {
    let opaque = |t: &str| t.trim().trim_start_matches("W/").to_owned();
    let tag = opaque(tag);
    list.trim() == "*" || list.split(',').any(|t| opaque(t) == tag)
}

fn decide(req: &FileRequest, meta: &FileMeta, tag: &str) -> Decision {
    let modified = since_epoch(meta.modified).as_secs();
    // RFC 9110 §13.2.2: If-None-Match first; If-Modified-Since only when it is absent.
    let not_modified = match (&req.if_none_match, req.if_modified_since) {
        (Some(list), _) => none_match_hits(list, tag),
        (None, Some(since)) => modified <= since,
        (None, None) => false,
    };
    if not_modified {
        return Decision::NotModified;
    }
    let Some(range) = req.range else {
        return Decision::Full;
    };
    // If-Range: the range only if the file is unchanged; a weak tag never matches (§13.1.5).
    let still_same = match &req.if_range {
        None => true,
        Some(IfRange::ETag(t)) => !t.starts_with("W/") && t == tag,
        Some(IfRange::Date(d)) => *d == modified,
    };
    if !still_same {
        return Decision::Full;
    }
    let len = meta.len;
    let (start, end) = match range {
        RangeSpec::FromTo(a, _) | RangeSpec::From(a) if a >= len => return Decision::Unsatisfiable,
        RangeSpec::FromTo(a, b) => (a, b.min(len - 1)),
        RangeSpec::From(a) => (a, len - 1),
        RangeSpec::Suffix(0) => return Decision::Unsatisfiable,
        RangeSpec::Suffix(_) if len == 0 => return Decision::Unsatisfiable,
        RangeSpec::Suffix(n) => (len.saturating_sub(n), len - 1),
    };
    Decision::Partial {
        start,
        len: end - start + 1,
    }
}

/// What follows a file answer's head: `len` bytes of the file from `offset`, encoded on the
/// way if `encode` says so (then the whole file, framed as it says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Send {
    pub offset: u64,
    pub len: u64,
    pub encode: Option<Encode>,
}

/// Writes the response to a file request: its whole head, and for errors and 416 a short body.
/// Returns the status, what the driver must send after the head (nothing for HEAD, 304,
/// errors and empty files) and the bytes the head took.
pub(crate) fn write_answer(
    out: &mut Vec<u8>,
    sink: &mut dyn HeadSink,
    req: &FileRequest,
    found: Result<&FileMeta, FileError>,
    keep_alive: bool,
    stamp: Stamp<'_>,
) -> (u16, Option<Send>, usize) {
    let head = |status, content_type, extra| Head {
        status,
        content_type,
        extra,
        fields: &[],
        keep_alive,
        stamp,
    };
    let text = "text/plain; charset=utf-8";
    let meta = match found {
        Ok(meta) => meta,
        Err(e) => {
            let (status, body): (u16, &[u8]) = match e {
                FileError::NotFound => (404, b"Not Found\n"),
                FileError::Forbidden => (403, b"Forbidden\n"),
                FileError::Failed => (500, b"cannot read the file\n"),
                FileError::Busy => (503, b"too many files open; try again\n"),
                FileError::Directory => (301, b"Moved Permanently\n"),
            };
            let location = [("Location", req.location().as_bytes())];
            let retry = [("Retry-After", &b"1"[..])];
            let extra: &[(&str, &[u8])] = match status {
                301 => &location,
                503 => &retry,
                _ => &[],
            };
            let n = write_response(out, sink, &head(status, text, extra), body, req.head_only);
            return (status, None, n);
        }
    };
    let tag = etag(meta);
    let mut modified = [0u8; super::DATE_LEN];
    {
        use std::io::Write;
        let mut slot = &mut modified[..];
        // An IMF-fixdate is always DATE_LEN bytes.
        let _ = write!(slot, "{}", httpdate::HttpDate::from(meta.modified));
    }
    // On the fly: a plain file of a compressible type, big enough, over a version that can
    // end a body of unknown length (HTTP/1.1 chunks it, HTTP/2's DATA frames end it).
    let compress = req.compress.filter(|c| {
        meta.encoding.is_none()
            && sink.frames_unknown_length()
            && meta.len >= c.min_size
            && compressible(meta.content_type)
    });
    let fly = compress
        .filter(|_| !req.no_transform)
        .and_then(|c| Some((req.accept.pick(|_| true)?, c.level)));
    let vary = meta.vary || meta.encoding.is_some() || compress.is_some();
    let decision = decide(req, meta, &tag);
    // Ranges and conditions apply to the plain file (or the sibling opened); an encoded whole
    // answer's validator is the plain file's made weak, as nginx's gzip does.
    let fly = fly.filter(|_| decision == Decision::Full);
    let weak;
    let shown = match fly {
        Some(_) => {
            weak = format!("W/{tag}");
            weak.as_str()
        }
        None => tag.as_str(),
    };
    let mut extra: Vec<(&str, &[u8])> =
        vec![("ETag", shown.as_bytes()), ("Last-Modified", &modified[..])];
    if let Some(cache) = &req.cache_control {
        extra.push(("Cache-Control", cache.as_bytes()));
    }
    // Vary stays last: a 406 sends it alone.
    if vary {
        extra.push(("Vary", b"Accept-Encoding"));
    }
    match decision {
        Decision::NotModified => {
            // A 304 has no content and, here, no Content-Length: the only value allowed would be
            // the 200's, which a careless client could take for a body to wait for (§8.6).
            let n = write_head(out, sink, &head(304, "", &extra), None);
            (304, None, n)
        }
        Decision::Unsatisfiable => {
            let range = format!("bytes */{}", meta.len);
            let extra = [("Content-Range", range.as_bytes())];
            let n = write_response(
                out,
                sink,
                &head(416, text, &extra),
                b"Range Not Satisfiable\n",
                req.head_only,
            );
            (416, None, n)
        }
        // The client refuses the file as it is, and no coding it takes is at hand.
        Decision::Full | Decision::Partial { .. }
            if meta.encoding.is_none() && fly.is_none() && !req.accept.identity_ok() =>
        {
            let n = write_response(
                out,
                sink,
                &head(406, text, &extra[extra.len() - usize::from(vary)..]),
                b"Not Acceptable: no content coding the client accepts\n",
                req.head_only,
            );
            (406, None, n)
        }
        Decision::Full if fly.is_some() => {
            let (coding, level) = fly.unwrap_or((Coding::Gzip, 1));
            extra.push(("Content-Encoding", coding.token().as_bytes()));
            let chunked = sink.chunks();
            if chunked {
                extra.push(("Transfer-Encoding", b"chunked"));
            }
            let n = write_head(out, sink, &head(200, meta.content_type, &extra), None);
            let encode = Encode {
                coding,
                level,
                chunked,
            };
            let send = (!req.head_only).then_some(Send {
                offset: 0,
                len: meta.len,
                encode: Some(encode),
            });
            (200, send, n)
        }
        Decision::Full | Decision::Partial { .. } => {
            let (status, start, len) = match decision {
                Decision::Partial { start, len } => (206, start, len),
                _ => (200, 0, meta.len),
            };
            let range;
            extra.push(("Accept-Ranges", &b"bytes"[..]));
            if let Some(coding) = meta.encoding {
                extra.push(("Content-Encoding", coding.token().as_bytes()));
            }
            if status == 206 {
                range = format!("bytes {}-{}/{}", start, start + len - 1, meta.len);
                extra.push(("Content-Range", range.as_bytes()));
            }
            let n = write_head(
                out,
                sink,
                &head(status, meta.content_type, &extra),
                Some(len),
            );
            let send = (!req.head_only && len > 0).then_some(Send {
                offset: start,
                len,
                encode: None,
            });
            (status, send, n)
        }
    }
}

/// The Content-Type for a file name, from its extension (case-insensitive);
/// `application/octet-stream` when unknown. Text types say UTF-8, as nginx's defaults do not
/// but browsers need for anything beyond ASCII.
pub fn content_type(name: &str) -> &'static str {
    let file = name.rsplit('/').next().unwrap_or(name);
    let Some((_, ext)) = file.rsplit_once('.') else {
        return "application/octet-stream";
    };
    let mut lower = [0u8; 8];
    if ext.len() > lower.len() {
        return "application/octet-stream";
    }
    for (l, b) in lower.iter_mut().zip(ext.bytes()) {
        *l = b.to_ascii_lowercase();
    }
    match &lower[..ext.len()] {
        b"html" | b"htm" => "text/html; charset=utf-8",
        b"css" => "text/css; charset=utf-8",
        b"js" | b"mjs" => "text/javascript; charset=utf-8",
        b"json" => "application/json",
        b"txt" | b"text" => "text/plain; charset=utf-8",
        b"md" => "text/markdown; charset=utf-8",
        b"csv" => "text/csv; charset=utf-8",
        b"xml" => "application/xml",
        b"svg" => "image/svg+xml",
        b"png" => "image/png",
        b"jpg" | b"jpeg" => "image/jpeg",
        b"gif" => "image/gif",
        b"webp" => "image/webp",
        b"avif" => "image/avif",
        b"ico" => "image/vnd.microsoft.icon",
        b"woff" => "font/woff",
        b"woff2" => "font/woff2",
        b"ttf" => "font/ttf",
        b"otf" => "font/otf",
        b"wasm" => "application/wasm",
        b"pdf" => "application/pdf",
        b"zip" => "application/zip",
        b"gz" => "application/gzip",
        b"tar" => "application/x-tar",
        b"mp4" => "video/mp4",
        b"webm" => "video/webm",
        b"mp3" => "audio/mpeg",
        b"ogg" => "audio/ogg",
        b"wav" => "audio/wav",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
#[path = "files_tests.rs"]
mod tests;
