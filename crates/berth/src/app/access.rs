//! The access log: one line per response, at info level with the target [`ACCESS_TARGET`], in
//! one of the formats operators' tools read ([`AccessLog`]), the same for `berth serve
//! --access-log` and `python -m berth --access-log` (whose ASGI and WSGI fronts call
//! [`AccessLog::line`] with what they know of a response: one formatter for every front).
//!
//! A format is a name (`combined`, nginx's, the default; `common`; `json`; `short`) or a
//! template of gunicorn's atoms (`%(h)s %(r)s %(s)s %(D)s`) and granian's (`%(addr)s
//! %(dt_ms).3f`), so that a format copied from either's configuration writes the same line
//! ([`Template`]).
//!
//! In `berth serve`, a handler answers one request at a time per connection and the session
//! answers strictly in order, so what the line needs of a request (its line, referer, user
//! agent, start) is kept from [`Pending::start`] until the next response; a response with
//! nothing pending is one the session wrote itself (400, 413...) for a request it never
//! passed on, logged with `-` where the request's parts would be.
//!
//! Known only where the handler sees it: the body's size is that of the answers the handler
//! writes (`-` for files and answers the session writes); the client's address is the
//! request's peer; over a UNIX socket, whose clients have no address, it is `unix:` (as nginx
//! writes `$remote_addr` there), and `-` for answers the session writes.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use berth_proto::http::{Method, Request, Version};

/// The `log` target of access lines (`RUST_LOG=access=info`, or `--log-level warn,access=info`
/// to keep them alone).
pub const ACCESS_TARGET: &str = "access";

/// How a response's line is written.
#[derive(Debug, Clone, PartialEq)]
pub enum AccessLog {
    /// nginx's `combined` (Apache's too), with the request's duration in seconds added last,
    /// as nginx's `$request_time`:
    /// `ADDR - - [10/Oct/2000:13:55:36 +0000] "GET / HTTP/1.1" 200 13 "REFERER" "AGENT" 0.001`.
    Combined,
    /// The Common Log Format: `ADDR - - [TIME] "REQUEST" STATUS BYTES`.
    Common,
    /// One JSON object per line: `time` (RFC 3339, UTC), `addr`, `method`, `target`,
    /// `protocol`, `status`, `bytes`, `duration_ms`, `referer`, `user_agent` (unknown ones
    /// `null`).
    Json,
    /// berth's first format: `GET /path -> 200`.
    Short,
    /// A template of gunicorn's and granian's atoms ([`Template`]).
    Template(Arc<Template>),
}

/// The formats [`AccessLog::parse`] knows by name.
pub const ACCESS_LOG_FORMATS: &str = "combined, common, json, short";

impl AccessLog {
    /// A format by its name ([`ACCESS_LOG_FORMATS`]) or a template of atoms (anything with a
    /// `%(`); the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<AccessLog, String> {
        match text {
            "combined" => Ok(AccessLog::Combined),
            "common" => Ok(AccessLog::Common),
            "json" => Ok(AccessLog::Json),
            "short" => Ok(AccessLog::Short),
            t if t.contains("%(") => Template::parse(t).map(|t| AccessLog::Template(Arc::new(t))),
            t => Err(format!(
                "{t:?} is neither a format ({ACCESS_LOG_FORMATS}) nor a template of atoms \
                 such as '%(h)s \"%(r)s\" %(s)s %(D)s' (gunicorn's) or '%(addr)s %(dt_ms).3f' \
                 (granian's)"
            )),
        }
    }

    /// The line of one response.
    pub fn line(&self, r: &Record<'_>) -> String {
        let mut out = String::new();
        let protocol = r.request.map(|q| q.protocol);
        match self {
            AccessLog::Short => {
                let _ = match r.request {
                    Some(q) => write!(out, "{} {} -> {}", q.method, q.target, r.status),
                    None => write!(out, "- -> {}", r.status),
                };
            }
            AccessLog::Common | AccessLog::Combined => {
                let _ = write!(
                    out,
                    "{} - - [{}] \"",
                    r.addr.unwrap_or("-"),
                    clf_time(r.time)
                );
                request_line(&mut out, r);
                let _ = write!(out, "\" {} ", r.status);
                match r.bytes {
                    Some(n) => {
                        let _ = write!(out, "{n}");
                    }
                    None => out.push('-'),
                }
                if *self == AccessLog::Combined {
                    for value in [r.referer, r.user_agent] {
                        out.push_str(" \"");
                        match value.filter(|v| !v.is_empty()) {
                            Some(v) => escape_into(&mut out, v),
                            None => out.push('-'),
                        }
                        out.push('"');
                    }
                    match r.duration {
                        Some(d) => {
                            let _ = write!(out, " {:.3}", d.as_secs_f64());
                        }
                        None => out.push_str(" -"),
                    }
                }
            }
            AccessLog::Json => {
                let text = |s: Option<&str>| s.filter(|s| !s.is_empty()).map(str::to_owned);
                let json = serde_json::json!({
                    "time": rfc3339(r.time),
                    "addr": r.addr,
                    "method": r.request.map(|q| q.method),
                    "target": r.request.map(|q| q.target),
                    "protocol": protocol,
                    "status": r.status,
                    "bytes": r.bytes,
                    "duration_ms": r.duration.map(|d| (d.as_secs_f64() * 1e6).round() / 1e3),
                    "referer": text(r.referer),
                    "user_agent": text(r.user_agent),
                });
                out = json.to_string();
            }
            AccessLog::Template(t) => t.write(&mut out, r),
        }
        out
    }
}

/// What a line says of one response. `None` is written `-` (`null` in JSON).
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// The client's address without its port (`127.0.0.1`), `unix:` over a UNIX socket.
    pub addr: Option<&'a str>,
    /// The request answered; `None` for an answer the server wrote itself to bytes that
    /// were no request it passed on (a malformed one's 400).
    pub request: Option<RequestLine<'a>>,
    /// `http` or `https` (granian's `scheme`).
    pub scheme: Option<&'a str>,
    /// The response's status.
    pub status: u16,
    /// Bytes of the response's body, where known.
    pub bytes: Option<u64>,
    /// From the request's arrival to its response.
    pub duration: Option<Duration>,
    /// The `Referer` field.
    pub referer: Option<&'a str>,
    /// The `User-Agent` field.
    pub user_agent: Option<&'a str>,
    /// When the line is written.
    pub time: SystemTime,
}

/// A request's line: `GET /a?b HTTP/1.1`.
#[derive(Debug, Clone, Copy)]
pub struct RequestLine<'a> {
    /// `GET`.
    pub method: &'a str,
    /// The request-target as it came: path and query.
    pub target: &'a str,
    /// `HTTP/1.0`, `HTTP/1.1`, `HTTP/2`.
    pub protocol: &'a str,
}

/// `METHOD TARGET PROTOCOL` escaped (or `-`).
fn request_line(out: &mut String, r: &Record<'_>) {
    match r.request {
        Some(q) => {
            escape_into(out, q.method);
            out.push(' ');
            escape_into(out, q.target);
            out.push(' ');
            out.push_str(q.protocol);
        }
        None => out.push('-'),
    }
}

/// A line written from atoms, as gunicorn's `--access-logformat` and granian's
/// `--log-access-fmt` write theirs: `%(NAME)s` (or `d`, `f`, with a width and a precision:
/// `%(dt_ms).3f`, `%(s)3d`), `%%` for a `%`, anything else as it is.
///
/// gunicorn's atoms: `h` client address, `l` and `u` `-`, `t` time `[10/Oct/2000:13:55:36
/// +0000]`, `r` request line, `m` method, `U` path, `q` query, `H` protocol, `s` status, `B`
/// body bytes (0 if unknown), `b` body bytes (`-` if unknown), `f` referer, `a` user agent,
/// `T` whole seconds taken, `M` milliseconds, `D` microseconds, `L` seconds as a decimal, `p`
/// process id, `{referer}i` and `{user-agent}i`. granian's: `addr`, `time` (RFC 3339),
/// `dt_ms` (milliseconds, a decimal), `status`, `path`, `query_string`, `method`, `scheme`,
/// `protocol`. What the request sent is escaped as nginx escapes it (`"`, `\` and bytes
/// outside printable ASCII as `\xHH`).
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    pieces: Vec<Piece>,
}

#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    Atom(Atom, Spec),
}

/// `%(x)-8.3f`: left-aligned, width, precision, conversion.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Spec {
    left: bool,
    width: usize,
    precision: Option<usize>,
    conversion: u8,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Atom {
    Addr,
    Dash,
    ClfTime,
    Time,
    Request,
    Method,
    Path,
    Query,
    Protocol,
    Scheme,
    Status,
    BytesZero,
    Bytes,
    Referer,
    Agent,
    Seconds,
    Millis,
    MillisDecimal,
    Micros,
    SecondsDecimal,
    Pid,
}

/// Every atom's names, gunicorn's and granian's.
const ATOMS: &[(&str, Atom)] = &[
    ("h", Atom::Addr),
    ("addr", Atom::Addr),
    ("l", Atom::Dash),
    ("u", Atom::Dash),
    ("t", Atom::ClfTime),
    ("time", Atom::Time),
    ("r", Atom::Request),
    ("m", Atom::Method),
    ("method", Atom::Method),
    ("U", Atom::Path),
    ("path", Atom::Path),
    ("q", Atom::Query),
    ("query_string", Atom::Query),
    ("H", Atom::Protocol),
    ("protocol", Atom::Protocol),
    ("scheme", Atom::Scheme),
    ("s", Atom::Status),
    ("status", Atom::Status),
    ("B", Atom::BytesZero),
    ("b", Atom::Bytes),
    ("f", Atom::Referer),
    ("{referer}i", Atom::Referer),
    ("a", Atom::Agent),
    ("{user-agent}i", Atom::Agent),
    ("T", Atom::Seconds),
    ("M", Atom::Millis),
    ("dt_ms", Atom::MillisDecimal),
    ("D", Atom::Micros),
    ("L", Atom::SecondsDecimal),
    ("p", Atom::Pid),
];

/// An atom's value for one response.
enum Value<'a> {
    /// Written as it is.
    Plain(&'a str),
    /// From the request: escaped.
    Sent(&'a str),
    Owned(String),
    Int(u64),
    Float(f64),
    Unknown,
}

impl Template {
    /// Parses a template; the error names what is wrong (an unknown atom, a `%` that starts
    /// none).
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(at) = rest.find('%') {
            literal.push_str(&rest[..at]);
            rest = &rest[at + 1..];
            if let Some(after) = rest.strip_prefix('%') {
                literal.push('%');
                rest = after;
                continue;
            }
            let Some(inner) = rest.strip_prefix('(') else {
                return Err(format!(
                    "access log format {text:?}: a % starts no atom (write atoms as %(h)s, and \
                     a % as %%)"
                ));
            };
            let close = inner
                .find(')')
                .ok_or_else(|| format!("access log format {text:?}: an atom without its ')'"))?;
            let name = &inner[..close];
            let atom = ATOMS
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, a)| *a)
                .ok_or_else(|| {
                    let known: Vec<&str> = ATOMS.iter().map(|(n, _)| *n).collect();
                    format!(
                        "access log format {text:?}: no atom %({name})s (known: {})",
                        known.join(" ")
                    )
                })?;
            let (spec, after) = Spec::parse(&inner[close + 1..]).ok_or_else(|| {
                format!("access log format {text:?}: %({name}) needs its conversion: s, d or f")
            })?;
            rest = after;
            if !literal.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut literal)));
            }
            pieces.push(Piece::Atom(atom, spec));
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Ok(Template { pieces })
    }

    fn write(&self, out: &mut String, r: &Record<'_>) {
        for piece in &self.pieces {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Atom(atom, spec) => spec.write(out, value(*atom, r)),
            }
        }
    }
}

impl Spec {
    /// `-8.3f` and what follows it.
    fn parse(text: &str) -> Option<(Spec, &str)> {
        let bytes = text.as_bytes();
        let mut i = 0;
        let left = bytes.first() == Some(&b'-');
        i += usize::from(left);
        let digits = |i: &mut usize| {
            let start = *i;
            while bytes.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
            text[start..*i].parse::<usize>().ok()
        };
        let width = digits(&mut i).unwrap_or(0);
        let precision = match bytes.get(i) {
            Some(b'.') => {
                i += 1;
                Some(digits(&mut i).unwrap_or(0))
            }
            _ => None,
        };
        let conversion = *bytes
            .get(i)
            .filter(|c| matches!(c, b's' | b'd' | b'i' | b'f'))?;
        let spec = Spec {
            left,
            width,
            precision,
            conversion,
        };
        Some((spec, &text[i + 1..]))
    }

    fn write(&self, out: &mut String, value: Value<'_>) {
        let start = out.len();
        match (value, self.conversion) {
            (Value::Unknown, _) => out.push('-'),
            (Value::Plain(s), _) => out.push_str(s),
            (Value::Sent(s), _) => escape_into(out, s),
            (Value::Owned(s), _) => out.push_str(&s),
            (Value::Int(n), b'f') => {
                let _ = write!(out, "{:.*}", self.precision.unwrap_or(6), n as f64);
            }
            (Value::Int(n), _) => {
                let _ = write!(out, "{n}");
            }
            (Value::Float(x), b'd' | b'i') => {
                let _ = write!(out, "{}", x.trunc() as u64);
            }
            (Value::Float(x), b'f') => {
                let _ = write!(out, "{x:.*}", self.precision.unwrap_or(6));
            }
            (Value::Float(x), _) => {
                let _ = write!(out, "{x:.6}");
            }
        }
        let len = out[start..].chars().count();
        if len < self.width {
            let pad = " ".repeat(self.width - len);
            match self.left {
                true => out.push_str(&pad),
                false => out.insert_str(start, &pad),
            }
        }
    }
}

/// `atom`'s value in `r`.
fn value<'a>(atom: Atom, r: &Record<'a>) -> Value<'a> {
    let q = r.request;
    let (path, query) = match q {
        Some(q) => match q.target.split_once('?') {
            Some((p, query)) => (Some(p), Some(query)),
            None => (Some(q.target), None),
        },
        None => (None, None),
    };
    let text = |s: Option<&'a str>| s.map_or(Value::Unknown, Value::Sent);
    let took = |f: fn(Duration) -> Value<'a>| r.duration.map_or(Value::Unknown, f);
    match atom {
        Atom::Addr => r.addr.map_or(Value::Unknown, Value::Plain),
        Atom::Dash => Value::Plain("-"),
        Atom::ClfTime => Value::Owned(format!("[{}]", clf_time(r.time))),
        Atom::Time => Value::Owned(rfc3339(r.time)),
        Atom::Request => match q {
            Some(_) => {
                let mut line = String::new();
                request_line(&mut line, r);
                Value::Owned(line)
            }
            None => Value::Unknown,
        },
        Atom::Method => text(q.map(|q| q.method)),
        Atom::Path => text(path),
        // An empty query is written empty, as gunicorn writes it.
        Atom::Query => match q {
            Some(_) => Value::Sent(query.unwrap_or("")),
            None => Value::Unknown,
        },
        Atom::Protocol => q.map_or(Value::Unknown, |q| Value::Plain(q.protocol)),
        Atom::Scheme => r.scheme.map_or(Value::Unknown, Value::Plain),
        Atom::Status => Value::Int(u64::from(r.status)),
        Atom::BytesZero => Value::Int(r.bytes.unwrap_or(0)),
        Atom::Bytes => r.bytes.map_or(Value::Unknown, Value::Int),
        Atom::Referer => text(r.referer.filter(|v| !v.is_empty())),
        Atom::Agent => text(r.user_agent.filter(|v| !v.is_empty())),
        Atom::Seconds => took(|d| Value::Int(d.as_secs())),
        Atom::Millis => took(|d| Value::Int(d.as_millis() as u64)),
        Atom::MillisDecimal => took(|d| Value::Float(d.as_secs_f64() * 1e3)),
        Atom::Micros => took(|d| Value::Int(d.as_micros() as u64)),
        Atom::SecondsDecimal => took(|d| Value::Float(d.as_secs_f64())),
        Atom::Pid => Value::Int(u64::from(std::process::id())),
    }
}

/// What a line needs of the request being answered, in `berth serve`'s handler. Its strings
/// are reused from request to request.
#[derive(Debug)]
pub(crate) struct Pending {
    format: AccessLog,
    /// Whether a request is being answered (else the next response is the session's own).
    open: bool,
    method: Method,
    target: String,
    version: Version,
    referer: String,
    agent: String,
    started: Instant,
    /// The body's size, where the handler wrote it.
    body: Option<u64>,
    /// The client, where known.
    addr: Option<SocketAddr>,
    /// The requests come over a UNIX socket: a client without an address is `unix:`.
    unix: bool,
    /// `http` or `https`.
    scheme: &'static str,
}

impl Pending {
    /// Lines in `format`, for requests over a UNIX socket if `unix`, over TLS if `tls`.
    pub(crate) fn new(format: AccessLog, unix: bool, tls: bool) -> Self {
        Pending {
            format,
            open: false,
            method: Method::Get,
            target: String::new(),
            version: Version::Http11,
            referer: String::new(),
            agent: String::new(),
            started: Instant::now(),
            body: None,
            addr: None,
            unix,
            scheme: if tls { "https" } else { "http" },
        }
    }

    /// A request reached the handler.
    pub(crate) fn start(&mut self, req: &Request<'_>) {
        self.open = true;
        self.method = req.method;
        self.version = req.version;
        self.target.clear();
        self.target.push_str(req.target);
        let text = |into: &mut String, value: Option<&[u8]>| {
            into.clear();
            into.push_str(&String::from_utf8_lossy(value.unwrap_or_default()));
        };
        text(&mut self.referer, req.header("referer"));
        text(&mut self.agent, req.header("user-agent"));
        self.started = Instant::now();
        self.body = None;
        self.addr = req.peer;
    }

    /// The handler answered with a body of `len` bytes (none are sent for HEAD).
    pub(crate) fn body(&mut self, len: usize) {
        if self.open {
            self.body = Some(if self.method == Method::Head {
                0
            } else {
                len as u64
            });
        }
    }

    /// A response went out: logs its line.
    pub(crate) fn respond(&mut self, status: u16) {
        let line = self.line(status, SystemTime::now());
        log::info!(target: ACCESS_TARGET, "{line}");
        self.open = false;
        self.body = None;
    }

    /// The line for a response with `status`, written at `now`.
    fn line(&self, status: u16, now: SystemTime) -> String {
        let open = self.open;
        let addr = match (open, self.addr) {
            (false, _) => None,
            (true, Some(a)) => Some(a.ip().to_string()),
            (true, None) => self.unix.then(|| "unix:".to_owned()),
        };
        let record = Record {
            addr: addr.as_deref(),
            request: open.then(|| RequestLine {
                method: self.method.as_str(),
                target: &self.target,
                protocol: protocol(self.version),
            }),
            scheme: Some(self.scheme),
            status,
            bytes: self.body.filter(|_| open),
            duration: open.then(|| self.started.elapsed()),
            referer: open.then_some(self.referer.as_str()),
            user_agent: open.then_some(self.agent.as_str()),
            time: now,
        };
        self.format.line(&record)
    }
}

/// `HTTP/1.1`, as a request line and the access log write it.
pub fn protocol(version: Version) -> &'static str {
    match version {
        Version::Http10 => "HTTP/1.0",
        Version::Http11 => "HTTP/1.1",
        Version::Http2 => "HTTP/2",
        Version::Http3 => "HTTP/3",
    }
}

/// Writes `s` as nginx writes a variable into its log: `"`, `\` and bytes outside printable
/// ASCII as `\xHH`, so that a field never breaks the line's quoting.
fn escape_into(out: &mut String, s: &str) {
    for b in s.bytes() {
        match b {
            b'"' | b'\\' | 0..=0x1f | 0x7f..=0xff => {
                let _ = write!(out, "\\x{b:02X}");
            }
            _ => out.push(b as char),
        }
    }
}

/// Days since 1970-01-01 as a civil date (year, month 1-12, day 1-31); Howard Hinnant's
/// `civil_from_days`.
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Seconds since the epoch, and the date and time of day they fall on (UTC).
fn utc(now: SystemTime) -> (u64, (i64, u32, u32), u64) {
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    (secs, civil((secs / 86_400) as i64), secs % 86_400)
}

/// `10/Oct/2000:13:55:36 +0000`: the time of the Common Log Format, in UTC.
fn clf_time(now: SystemTime) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (_, (y, m, d), t) = utc(now);
    format!(
        "{d:02}/{}/{y}:{:02}:{:02}:{:02} +0000",
        MONTHS[m as usize - 1],
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

/// `2000-10-10T13:55:36.123Z`.
fn rfc3339(now: SystemTime) -> String {
    let millis = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_millis());
    let (_, (y, m, d), t) = utc(now);
    format!(
        "{y}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn request() -> Request<'static> {
        Request {
            method: Method::Get,
            target: "/a?b=\"c\"",
            path: "/a",
            query: Some("b=\"c\""),
            version: Version::Http11,
            headers: &[],
            body: b"",
            peer: None,
        }
    }

    #[test]
    fn dates() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(11_016), (2000, 2, 29));
        let t = UNIX_EPOCH + Duration::from_millis(971_185_336_123);
        assert_eq!(clf_time(t), "10/Oct/2000:13:42:16 +0000");
        assert_eq!(rfc3339(t), "2000-10-10T13:42:16.123Z");
    }

    #[test]
    fn formats() {
        let t = UNIX_EPOCH + Duration::from_secs(971_185_336);
        let mut p = Pending::new(AccessLog::Combined, false, false);
        // The client is the request's peer.
        p.start(&Request {
            peer: Some(([127, 0, 0, 1], 5000).into()),
            ..request()
        });
        // Header fields as `start` keeps them (a Request's fields are httparse's).
        p.agent.push_str("curl/8.0");
        p.referer.push_str("http://x/");
        p.body(13);
        let line = p.line(200, t);
        assert!(
            line.starts_with(
                "127.0.0.1 - - [10/Oct/2000:13:42:16 +0000] \"GET /a?b=\\x22c\\x22 HTTP/1.1\" 200 13 \"http://x/\" \"curl/8.0\" "
            ),
            "{line}"
        );
        p.format = AccessLog::Json;
        let json: serde_json::Value = serde_json::from_str(&p.line(200, t)).unwrap();
        assert_eq!(json["addr"], "127.0.0.1");
        assert_eq!(json["bytes"], 13);
        assert_eq!(json["user_agent"], "curl/8.0");
        assert!(json["duration_ms"].is_number());
        p.format = AccessLog::Short;
        assert_eq!(p.line(200, t), "GET /a?b=\"c\" -> 200");
        p.open = false;
        assert_eq!(p.line(400, t), "- -> 400");
        // An answer the session wrote itself names no client: the handler (one per thread)
        // does not know whose connection it was, and the last request's may be another's.
        p.format = AccessLog::Common;
        assert_eq!(
            p.line(400, t),
            "- - - [10/Oct/2000:13:42:16 +0000] \"-\" 400 -"
        );
    }

    #[test]
    fn a_client_over_a_unix_socket_is_unix() {
        let t = UNIX_EPOCH + Duration::from_secs(971_185_336);
        let mut p = Pending::new(AccessLog::Common, true, false);
        p.start(&request());
        let line = p.line(200, t);
        assert!(line.starts_with("unix: - - ["), "{line}");
        p.format = AccessLog::Json;
        let json: serde_json::Value = serde_json::from_str(&p.line(200, t)).unwrap();
        assert_eq!(json["addr"], "unix:");
        // Still no client for an answer the session wrote itself.
        p.open = false;
        p.format = AccessLog::Common;
        assert!(p.line(400, t).starts_with("- - - ["));
    }

    /// gunicorn's default format and granian's write what theirs write, with berth's values.
    #[test]
    fn templates_of_gunicorns_and_granians_atoms() {
        let t = UNIX_EPOCH + Duration::from_millis(971_185_336_123);
        let r = Record {
            addr: Some("10.0.0.1"),
            request: Some(RequestLine {
                method: "GET",
                target: "/a b?x=\"1\"",
                protocol: "HTTP/2",
            }),
            scheme: Some("https"),
            status: 201,
            bytes: Some(13),
            duration: Some(Duration::from_micros(1_500_250)),
            referer: Some(""),
            user_agent: Some("curl/8"),
            time: t,
        };
        let line = |f: &str| AccessLog::parse(f).unwrap().line(&r);
        // gunicorn's default access_log_format.
        assert_eq!(
            line(r#"%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s""#),
            r#"10.0.0.1 - - [10/Oct/2000:13:42:16 +0000] "GET /a b?x=\x221\x22 HTTP/2" 201 13 "-" "curl/8""#
        );
        // granian's default --log-access-fmt.
        assert_eq!(
            line(
                r#"[%(time)s] %(addr)s - "%(method)s %(path)s %(protocol)s" %(status)d %(dt_ms).3f"#
            ),
            r#"[2000-10-10T13:42:16.123Z] 10.0.0.1 - "GET /a b HTTP/2" 201 1500.250"#
        );
        assert_eq!(
            line(
                "%(U)s|%(q)s|%(query_string)s|%(H)s|%(scheme)s|%(B)s|%(T)s|%(M)s|%(D)s|%(L).2f|%%"
            ),
            r#"/a b|x=\x221\x22|x=\x221\x22|HTTP/2|https|13|1|1500|1500250|1.50|%"#
        );
        assert_eq!(line("[%(s)5d] [%(m)-4s]"), "[  201] [GET ]");
        assert_eq!(line("%({user-agent}i)s"), "curl/8");
        assert_eq!(line("%(p)s"), std::process::id().to_string());
        // What is not known is `-`, whatever the conversion; B is 0 as gunicorn's.
        let none = Record {
            addr: None,
            request: None,
            bytes: None,
            duration: None,
            user_agent: None,
            ..r
        };
        let f = AccessLog::parse("%(h)s %(r)s %(b)s %(B)s %(D)s %(dt_ms).3f %(a)s %(U)s").unwrap();
        assert_eq!(f.line(&none), "- - - 0 - - - -");
    }

    #[test]
    fn a_bad_template_says_why() {
        for (format, says) in [
            ("%(x)s", "no atom %(x)s"),
            ("%(h)", "needs its conversion"),
            ("%(h", "without its ')'"),
            ("100% %(h)s", "a % starts no atom"),
            ("combind", "neither a format"),
        ] {
            let e = AccessLog::parse(format).unwrap_err();
            assert!(e.contains(says), "{format}: {e}");
        }
        assert!(AccessLog::parse("combined").is_ok());
    }
}
