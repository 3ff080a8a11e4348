//! The access log (`berth serve --access-log`): one line per response, at info level with the
//! target [`ACCESS_TARGET`], in one of the formats operators' tools read ([`AccessLog`]).
//!
//! A handler answers one request at a time per connection and the session answers strictly in
//! order, so what the line needs of a request (its line, referer, user agent, start) is kept
//! from [`Pending::start`] until the next response; a response with nothing pending is one the
//! session wrote itself (400, 413...) for a request it never passed on, logged with `-` where
//! the request's parts would be.
//!
//! Known only where the handler sees it: the body's size is that of the answers the handler
//! writes (`-` for files and answers the session writes); the client's address is the
//! request's peer; over a UNIX socket, whose clients have no address, it is `unix:` (as nginx
//! writes `$remote_addr` there), and `-` for answers the session writes.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use berth_proto::http::{Method, Request, Version};

/// The `log` target of access lines (`RUST_LOG=access=info`, or `--log-level warn,access=info`
/// to keep them alone).
pub const ACCESS_TARGET: &str = "access";

/// How a response's line is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
}

/// What a line needs of the request being answered. Its strings are reused from request to
/// request.
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
}

impl Pending {
    /// Lines in `format`, for requests over a UNIX socket if `unix`.
    pub(crate) fn new(format: AccessLog, unix: bool) -> Self {
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
        let bytes = self.body.filter(|_| open);
        let seconds = open.then(|| self.started.elapsed().as_secs_f64());
        let protocol = match self.version {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
            Version::Http2 => "HTTP/2",
        };
        let mut out = String::new();
        match self.format {
            AccessLog::Short => {
                let _ = match open {
                    true => write!(out, "{} {} -> {status}", self.method.as_str(), self.target),
                    false => write!(out, "- -> {status}"),
                };
            }
            AccessLog::Common | AccessLog::Combined => {
                let _ = write!(
                    out,
                    "{} - - [{}] \"",
                    addr.as_deref().unwrap_or("-"),
                    clf_time(now)
                );
                match open {
                    true => {
                        out.push_str(self.method.as_str());
                        out.push(' ');
                        escape_into(&mut out, &self.target);
                        out.push(' ');
                        out.push_str(protocol);
                    }
                    false => out.push('-'),
                }
                let _ = write!(out, "\" {status} ");
                match bytes {
                    Some(n) => {
                        let _ = write!(out, "{n}");
                    }
                    None => out.push('-'),
                }
                if self.format == AccessLog::Combined {
                    for value in [&self.referer, &self.agent] {
                        out.push_str(" \"");
                        match open && !value.is_empty() {
                            true => escape_into(&mut out, value),
                            false => out.push('-'),
                        }
                        out.push('"');
                    }
                    match seconds {
                        Some(s) => {
                            let _ = write!(out, " {s:.3}");
                        }
                        None => out.push_str(" -"),
                    }
                }
            }
            AccessLog::Json => {
                let some = |s: &String| (open && !s.is_empty()).then(|| s.clone());
                let json = serde_json::json!({
                    "time": rfc3339(now),
                    "addr": addr,
                    "method": open.then(|| self.method.as_str()),
                    "target": open.then(|| self.target.clone()),
                    "protocol": open.then_some(protocol),
                    "status": status,
                    "bytes": bytes,
                    "duration_ms": seconds.map(|s| (s * 1e6).round() / 1e3),
                    "referer": some(&self.referer),
                    "user_agent": some(&self.agent),
                });
                out = json.to_string();
            }
        }
        out
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
        let mut p = Pending::new(AccessLog::Combined, false);
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
        let mut p = Pending::new(AccessLog::Common, true);
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
}
