//! What the WSGI and ASGI fronts share: the answer at capacity, the request path decoded, an
//! application's header fields turned into berth's reply (dropping the ones berth writes
//! itself), the body length an application declares held to, and bodies compressed on the
//! fly when `--compress` is on and the client accepts a coding.

use std::borrow::Cow;
use std::time::Duration;

use berth::drive::{Model, Settings};
use berth::files::Files;
use berth::net::tls::{KeyPassword, TlsAcceptor, TlsSettings};
use berth::net::{Acceptor, Addr};
use berth::proto::http::encoding::compressible;
use berth::proto::http::{
    body_stream, Accepted, Compress, Encoder, FileRequest, Handled, Method, Reply, Request,
    Response,
};
use berth::proto::ws::DeflateConfig;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::Arc;

/// Written to a connection refused at capacity.
pub const REFUSAL: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nServer: berth\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// [`REFUSAL`] without `Server` (`--no-server-header`).
const REFUSAL_UNNAMED: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// What a connection refused at capacity is written, as the limits say of `Server`.
pub fn refusal(limits: &berth::proto::http::Limits) -> &'static [u8] {
    if limits.server_header {
        REFUSAL
    } else {
        REFUSAL_UNNAMED
    }
}

/// The request path with `%XX` decoded, as bytes (WSGI makes them latin-1 characters, ASGI
/// UTF-8). A `%` not followed by two hex digits stays as it is.
pub fn percent_decode(path: &str) -> Vec<u8> {
    percent_encoding::percent_decode_str(path).collect()
}

/// Adds an application's header fields to `reply`, leaving out those berth writes itself or
/// that would frame the body otherwise than berth sends it (`Content-Length`, `Connection`,
/// `Transfer-Encoding`, `Keep-Alive`, `Date`, `Server`). A field that is not valid HTTP is a
/// `ValueError`.
pub fn with_app_fields<N: AsRef<str>, V: AsRef<[u8]>>(
    mut reply: Reply,
    fields: impl IntoIterator<Item = (N, V)>,
) -> PyResult<Reply> {
    const OWN: [&str; 6] = [
        "content-length",
        "connection",
        "transfer-encoding",
        "keep-alive",
        "date",
        "server",
    ];
    for (name, value) in fields {
        let name = name.as_ref();
        if OWN.iter().any(|own| own.eq_ignore_ascii_case(name)) {
            continue;
        }
        reply = reply.with_field(name, value.as_ref()).map_err(|_| {
            PyValueError::new_err(format!("header field {name:?} is not valid in HTTP"))
        })?;
    }
    Ok(reply)
}

/// The body length an application declared in its own `Content-Length` field(s), if any.
/// Repeated fields (or a list in one) must agree; a value that is not a length is a
/// `ValueError`.
pub fn declared_length<N: AsRef<str>, V: AsRef<[u8]>>(
    fields: impl IntoIterator<Item = (N, V)>,
) -> PyResult<Option<u64>> {
    let mut declared = None;
    for (name, value) in fields {
        if !name.as_ref().eq_ignore_ascii_case("content-length") {
            continue;
        }
        for item in value.as_ref().split(|&b| b == b',') {
            let item = item.trim_ascii();
            let length = std::str::from_utf8(item)
                .ok()
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| {
                    PyValueError::new_err(format!(
                        "Content-Length {:?} is not a length",
                        String::from_utf8_lossy(value.as_ref())
                    ))
                })?;
            if declared.is_some_and(|d| d != length) {
                return Err(PyValueError::new_err("Content-Length fields that disagree"));
            }
            declared = Some(length);
        }
    }
    Ok(declared)
}

/// Whether a response of `status` has a body at all (RFC 9110: not 1xx, 204, 304): one
/// without has nothing to hold to a declared length.
pub fn has_body(status: u16) -> bool {
    !matches!(status, 100..=199 | 204 | 304)
}

/// What an application did wrong when its body does not fit the length it declared: the
/// message logged (WSGI) or raised in the application (ASGI, as uvicorn does).
pub fn misfit(method: &str, path: &str, sent: u64, declared: u64) -> String {
    let (how, then) = if sent < declared {
        ("shorter", "the connection is closed after the bytes sent")
    } else {
        (
            "longer",
            "nothing past it is sent and the connection is closed",
        )
    };
    format!(
        "the response to {method} {path} is {how} than its Content-Length \
         ({sent} bytes sent, {declared} declared): {then}"
    )
}

/// A whole response body (`status`, the application's `fields`) as berth's reply, held to the
/// length the application declared, if it did. A body that fits, or a response without a
/// body, goes out as any other. A HEAD request gets the declared length in its head. A body
/// that does not fit is the application's error (the second value: `(sent, declared)`): the
/// head still says the declared length (never one rewritten to fit), the bytes sent follow, up
/// to it, and the connection is closed after them, so that the client sees an incomplete read
/// rather than a complete response of another length.
///
/// With `encoding` (`--compress` on), a body worth it goes out compressed (see
/// [`Encoding::apply`]).
pub fn whole_reply(
    status: u16,
    fields: &[(String, Vec<u8>)],
    body: Vec<u8>,
    head: bool,
    encoding: Option<&Encoding>,
) -> PyResult<(Reply, Option<(u64, u64)>)> {
    let (fields, body) = match encoding {
        Some(e) => e.apply(status, fields, body, head)?,
        None => (Cow::Borrowed(fields), body),
    };
    let fields = &fields[..];
    let declared =
        declared_length(fields.iter().map(|(n, v)| (n, v)))?.filter(|_| has_body(status));
    let sent = body.len() as u64;
    let reply = match declared {
        Some(length) if head || sent != length => {
            let (writer, stream) = body_stream();
            // Nothing more comes: the session holds the first bytes to the length.
            writer.end();
            Reply::streamed(status, body, stream).with_length(length)
        }
        _ => Reply::new(status, "", body),
    };
    let misfit = declared.filter(|&d| !head && d != sent).map(|d| (sent, d));
    Ok((
        with_app_fields(reply, fields.iter().map(|(n, v)| (n, v)))?,
        misfit,
    ))
}

/// Applies the server options both fronts share (`python -m berth`'s, given as a dict so that
/// a new one needs no new parameter): `backlog` (listen backlog), `keep_alive` (seconds an
/// idle keep-alive connection is kept), `limit_concurrency` (most connections at once; more
/// are answered 503), `server_header`/`date_header` (berth's `Server` and `Date` fields,
/// on unless false), `uds` (a UNIX socket's path to listen on instead of the host and port;
/// its file is removed at exit), `ssl_certfile`/`ssl_keyfile`/`ssl_ca_certs` (TLS with berth's rustls;
/// a CA asks clients for a certificate; `ssl_keyfile_password` decrypts an encrypted key;
/// `redirect_https` redirects plain HTTP on the TLS port to https:// rather than answer 400;
/// `http3` also serves HTTP/3 on the UDP twin of the TLS listener, `--model evloop` only, as
/// `berth serve --http3`, advertised in `Alt-Svc` unless `alt_svc` is false),
/// `uds_permissions` (the UNIX socket file's mode, e.g. `0o660`; default: the umask's), `ws_deflate` (permessage-deflate in the `websocket`
/// scope, on unless false), `ws_deflate_window_bits` (its largest window, 8 to 15),
/// `compress` (on-the-fly gzip, br or zstd of responses, off unless true), `compress_level`
/// (1 to 9, default 5) and `compress_min_size` (bytes, default 1024; smaller bodies go as they
/// are), as `berth serve`'s flags of the same names; `static_path_mount` (a directory
/// served under `static_path_route`, default `/static`, before the application: see
/// [`StaticMount`]) with `static_cache_control` (its answers' `Cache-Control`, default none)
/// and `static_dotfiles` (serve names starting with `.`, default false). An
/// unknown key, or a value of the wrong kind, is a `ValueError`; a certificate or key that
/// cannot be used is a `ValueError` naming it. The options that are the application's rather
/// than the server's come back, as `berth serve`'s `DemoConfig` holds them.
pub fn configure(
    settings: &mut Settings,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<AppOptions> {
    // A listening socket passed in (`fd`) is served as what it is: a UNIX socket at its path.
    if let Some(path) = settings
        .common
        .listen
        .inherited
        .as_deref()
        .and_then(berth::net::activation::unix_path)
    {
        settings.addr = Addr::Unix(path);
    }
    let mut app = AppOptions::default();
    let Some(options) = options else {
        return Ok(app);
    };
    let (mut compress, mut level, mut min_size) = (false, None::<u8>, None::<u64>);
    // granian's --http: "auto" (HTTP/1.1 and HTTP/2), "1" (HTTP/1.1 only), "2" (HTTP/2 only).
    let mut http = String::from("auto");
    let (mut cert, mut key, mut ca) = (None::<String>, None::<String>, None::<String>);
    let mut mount = None::<std::path::PathBuf>;
    let mut password = None::<KeyPassword>;
    let mut redirect = false;
    let mut http3 = false;
    let mut route = String::from("/static");
    let (mut cache_control, mut dotfiles) = (None::<String>, false);
    for (name, value) in options.iter() {
        let name: String = name.extract()?;
        if value.is_none() {
            continue;
        }
        match name.as_str() {
            "backlog" => {
                let backlog: i32 = value.extract()?;
                if backlog < 1 {
                    return Err(PyValueError::new_err("backlog must be at least 1"));
                }
                settings.common.listen.backlog = backlog;
            }
            "keep_alive" => {
                let secs: f64 = value.extract()?;
                settings.common.timeouts.idle = Duration::try_from_secs_f64(secs)
                    .map_err(|_| PyValueError::new_err("keep_alive: not a number of seconds"))?;
            }
            "limit_concurrency" => {
                let limit: usize = value.extract()?;
                if limit < 1 {
                    return Err(PyValueError::new_err(
                        "limit_concurrency must be at least 1",
                    ));
                }
                // Per accept thread in berth: shared out so that the whole holds `limit`.
                let threads = settings.common.accept_threads.max(1);
                settings.common.sizing.capacity = limit.div_ceil(threads);
                // The blocking models' own caps (a thread or a process per connection): they
                // do not read the capacity, and served past the limit without a word.
                settings.models.threaded.max_threads = limit;
                settings.models.forked.max_children = limit;
            }
            "server_header" => settings.common.limits.server_header = value.extract()?,
            "date_header" => settings.common.limits.date_header = value.extract()?,
            "uds" => {
                let path: std::path::PathBuf = value.extract()?;
                if settings.common.listen.inherited.is_none() {
                    settings.addr = Addr::Unix(path);
                }
            }
            "ws_deflate" => app.ws_deflate.enabled = value.extract()?,
            "ws_deflate_window_bits" => {
                let bits: u8 = value.extract()?;
                if !(8..=15).contains(&bits) {
                    return Err(PyValueError::new_err(
                        "ws_deflate_window_bits must be 8 to 15",
                    ));
                }
                app.ws_deflate.max_window_bits = bits;
            }
            "compress" => compress = value.extract()?,
            "compress_level" => {
                let n: u8 = value.extract()?;
                if !(1..=9).contains(&n) {
                    return Err(PyValueError::new_err("compress_level must be 1 to 9"));
                }
                level = Some(n);
            }
            "compress_min_size" => min_size = Some(value.extract()?),
            "http" => http = value.extract()?,
            "announce" => app.announce = Some(std::sync::Arc::new(value.clone().unbind())),
            "ssl_certfile" => cert = Some(value.extract()?),
            "ssl_keyfile" => key = Some(value.extract()?),
            "ssl_ca_certs" => ca = Some(value.extract()?),
            "ssl_keyfile_password" => password = Some(KeyPassword(value.extract()?)),
            "redirect_https" => redirect = value.extract()?,
            "http3" => http3 = value.extract()?,
            "alt_svc" => {
                settings.models.evloop.alt_svc = value.extract()?;
                settings.models.uring.alt_svc = settings.models.evloop.alt_svc;
            }
            "uds_permissions" => {
                let mode: u32 = value.extract()?;
                if mode > 0o777 {
                    return Err(PyValueError::new_err(format!(
                        "uds_permissions {mode:o}: a mode from 0 to 777 (octal)"
                    )));
                }
                settings.common.listen.unix_mode = Some(mode);
            }
            "static_path_mount" => mount = Some(value.extract()?),
            "static_path_route" => route = value.extract()?,
            "static_cache_control" => cache_control = Some(value.extract()?),
            "static_dotfiles" => dotfiles = value.extract()?,
            "more_fds" => {
                let fds: Vec<i32> = value.extract()?;
                app.more = fds
                    .into_iter()
                    .map(crate::workers::inherited)
                    .collect::<PyResult<_>>()?;
            }
            other => return Err(PyValueError::new_err(format!("no server option {other:?}"))),
        }
    }
    match http.as_str() {
        "auto" => {}
        "1" => settings.common.limits.http2 = None,
        "2" => {
            if let Some(h2) = &mut settings.common.limits.http2 {
                h2.exclusive = true;
            }
        }
        other => {
            return Err(PyValueError::new_err(format!(
                "http {other:?}: expected auto, 1 or 2"
            )))
        }
    }
    if compress {
        let default = Compress::default();
        app.compress = Some(Compress {
            level: level.unwrap_or(default.level),
            min_size: min_size.unwrap_or(default.min_size),
        });
    }
    if let Some(dir) = mount {
        app.statics = Some(StaticMount::new(
            &dir,
            &route,
            cache_control,
            dotfiles,
            app.compress,
        )?);
    }
    if http3 {
        // As `berth serve --http3`: the UDP twin of the TLS listener, served by its loops.
        if cert.is_none() {
            return Err(PyValueError::new_err(
                "http3 needs ssl_certfile and ssl_keyfile (QUIC has TLS inside)",
            ));
        }
        if !settings.model.caps().serves_http3 {
            return Err(PyValueError::new_err(format!(
                "http3: HTTP/3 is served by --model {} only, not {}",
                berth::drive::Caps::http3_models().join(", --model "),
                settings.model
            )));
        }
        // Both loop models serve it; the model chosen reads its own.
        settings.models.evloop.http3 = true;
        settings.models.uring.http3 = true;
    }
    match (cert, key) {
        (None, None) if ca.is_some() => Err(PyValueError::new_err(
            "ssl_ca_certs needs ssl_certfile and ssl_keyfile",
        )),
        (None, None) => Ok(app),
        (Some(cert), Some(key)) => {
            let mut tls = TlsSettings::http(cert, key);
            tls.client_ca = ca.map(Into::into);
            tls.key_password = password;
            tls.redirect_plain_http = redirect;
            // ALPN offers what the server speaks (as berth serve --http2 off|only).
            match http.as_str() {
                "1" => tls.alpn.retain(|p| p != b"h2"),
                "2" => tls.alpn.retain(|p| p == b"h2"),
                _ => {}
            }
            let acceptor = TlsAcceptor::new(tls).map_err(|e| PyValueError::new_err(e.0))?;
            settings.common.listen.transport = Acceptor::Tls(acceptor);
            Ok(app)
        }
        (Some(_), None) => Err(PyValueError::new_err("ssl_certfile needs ssl_keyfile")),
        (None, Some(_)) => Err(PyValueError::new_err("ssl_keyfile needs ssl_certfile")),
    }
}

/// An application's response fields, as the fronts hold them.
type Fields = [(String, Vec<u8>)];

/// [`Fields`], owned.
type FieldVec = Vec<(String, Vec<u8>)>;

/// On-the-fly compression of one response (`--compress`, issue 34): the settings, and what
/// the request's `Accept-Encoding` allows. A whole body is compressed at once
/// ([`Encoding::apply`]); a streamed ASGI body message by message ([`Encoding::for_stream`]).
#[derive(Debug, Clone, Copy)]
pub struct Encoding {
    compress: Compress,
    accept: Accepted,
}

impl Encoding {
    /// For a request whose `Accept-Encoding` values are `values`, if compression is on.
    pub fn for_request<'a>(
        compress: Option<Compress>,
        values: impl IntoIterator<Item = &'a [u8]>,
    ) -> Option<Encoding> {
        compress.map(|compress| Encoding {
            compress,
            accept: Accepted::parse(values),
        })
    }

    /// The application's fields and body as they go out. A response worth compressing (a body
    /// of `min_size` bytes or more, of a compressible Content-Type, not already encoded, not a
    /// range, no `Cache-Control: no-transform`) gets `Vary: Accept-Encoding` whether or not
    /// this client takes a coding (a cache must tell the answers apart); if it takes one, the
    /// body is encoded with the coding it prefers, `Content-Encoding` says which, and the
    /// length is the encoded body's. A HEAD answer, or a body that does not fit the length the
    /// application declared, is left as it is (the length said must stay the one declared).
    fn apply<'f>(
        &self,
        status: u16,
        fields: &'f [(String, Vec<u8>)],
        body: Vec<u8>,
        head: bool,
    ) -> PyResult<(Cow<'f, Fields>, Vec<u8>)> {
        if !self.worth(status, fields, Some(body.len() as u64)) {
            return Ok((Cow::Borrowed(fields), body));
        }
        let mut out = with_vary(fields);
        let declared = declared_length(fields.iter().map(|(n, v)| (n, v)))?;
        let coding = self.accept.pick(|_| true);
        let (Some(coding), false) = (
            coding,
            head || declared.is_some_and(|d| d != body.len() as u64),
        ) else {
            return Ok((Cow::Owned(out), body));
        };
        let mut encoder = Encoder::new(coding, self.compress.level, Some(body.len() as u64))
            .map_err(encode_failed)?;
        let mut encoded = Vec::with_capacity(body.len() / 4 + 64);
        encoder.encode(&body, &mut encoded).map_err(encode_failed)?;
        encoder.finish(&mut encoded).map_err(encode_failed)?;
        // The application's length was the plain body's.
        out.retain(|(n, _)| !n.eq_ignore_ascii_case("content-length"));
        out.push((
            "Content-Encoding".into(),
            coding.token().as_bytes().to_vec(),
        ));
        Ok((Cow::Owned(out), encoded))
    }

    /// The same for a streamed body (ASGI's `more_body`), whose size is not known: worth
    /// compressing whatever its size, as GZipMiddleware judges a streamed response. Returns
    /// the fields it goes out with and, if this client takes a coding, the encoder its
    /// messages go through ([`Encoder::flush`] each, so that each reaches the client when
    /// sent). A body under the application's own `content-length`, or a HEAD answer, goes as
    /// sent.
    pub fn for_stream(
        &self,
        status: u16,
        fields: FieldVec,
        head: bool,
    ) -> PyResult<(FieldVec, Option<Encoder>)> {
        if !self.worth(status, &fields, None) {
            return Ok((fields, None));
        }
        let mut out = with_vary(&fields);
        let declared = declared_length(fields.iter().map(|(n, v)| (n, v)))?;
        let (Some(coding), false) = (self.accept.pick(|_| true), head || declared.is_some()) else {
            return Ok((out, None));
        };
        let encoder = Encoder::new(coding, self.compress.level, None).map_err(encode_failed)?;
        out.push((
            "Content-Encoding".into(),
            coding.token().as_bytes().to_vec(),
        ));
        Ok((out, Some(encoder)))
    }

    /// Whether a response of `status` with `fields` and a body of `size` bytes (`None`:
    /// streamed, not known) is worth compressing: see [`Encoding::apply`].
    fn worth(&self, status: u16, fields: &Fields, size: Option<u64>) -> bool {
        let field = |name: &'static str| {
            fields
                .iter()
                .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_slice())
        };
        (200..300).contains(&status)
            && has_body(status)
            && status != 206
            && size.is_none_or(|size| size >= self.compress.min_size)
            && field("content-encoding").next().is_none()
            && field("content-range").next().is_none()
            && !has_token(fields, "cache-control", b"no-transform")
            && field("content-type")
                .next()
                .and_then(|t| std::str::from_utf8(t).ok())
                .is_some_and(compressible)
    }
}

/// Whether a field `name` of `fields` lists `token` (comma-separated, any case).
fn has_token(fields: &Fields, name: &str, token: &[u8]) -> bool {
    fields
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .any(|(_, v)| {
            v.split(|&b| b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
        })
}

/// `fields` with `Vary: Accept-Encoding` added unless they vary on it (or on everything)
/// already: a response that is compressed for some clients.
fn with_vary(fields: &Fields) -> FieldVec {
    let mut out = fields.to_vec();
    if !has_token(fields, "vary", b"accept-encoding") && !has_token(fields, "vary", b"*") {
        out.push(("Vary".into(), b"Accept-Encoding".to_vec()));
    }
    out
}

fn encode_failed(e: berth::proto::http::EncodeError) -> PyErr {
    PyValueError::new_err(e.0)
}

/// A directory served under a route before the application sees the request
/// (`--static-path-mount DIR`, `--static-path-route`, granian's flags; whitenoise's role): the
/// files go out by berth's own file path, as `berth serve`'s `/files` do (`Handled::File`,
/// opened under the directory with `openat2(RESOLVE_BENEATH)`, `sendfile(2)`, ranges,
/// validators and 304, precompressed siblings, `--compress`), without entering Python.
#[derive(Debug, Clone)]
pub struct StaticMount {
    /// The route, without a trailing `/` (`""` for `/`: every path).
    route: String,
    files: Files,
    /// The answers' `Cache-Control` (`--static-path-expires`).
    cache_control: Option<Arc<str>>,
    /// Serve names that start with `.` (`.env`, `.git/`); refused (404) by default.
    dotfiles: bool,
    compress: Option<Compress>,
}

impl StaticMount {
    /// Serves `dir` (a directory) under `route` (a path starting with `/`).
    pub fn new(
        dir: &std::path::Path,
        route: &str,
        cache_control: Option<String>,
        dotfiles: bool,
        compress: Option<Compress>,
    ) -> PyResult<StaticMount> {
        if !route.starts_with('/') || route.contains(['?', '#']) {
            return Err(PyValueError::new_err(format!(
                "static_path_route {route:?}: a path, starting with /"
            )));
        }
        let files = Files::new(dir).map_err(|e| {
            PyValueError::new_err(format!("static_path_mount {}: {e}", dir.display()))
        })?;
        if let Some(v) = &cache_control {
            if Reply::empty(200)
                .with_field("cache-control", v.as_bytes())
                .is_err()
            {
                return Err(PyValueError::new_err(format!(
                    "static cache control {v:?} is not a field value"
                )));
            }
        }
        Ok(StaticMount {
            route: route.trim_end_matches('/').to_owned(),
            files,
            cache_control: cache_control.map(Into::into),
            dotfiles,
            compress,
        })
    }

    /// Where its files are opened (the service's [`berth::drive::Service::files`]).
    pub fn files(&self) -> Files {
        self.files.clone()
    }

    /// The answer to `req` if its path is under the route (`None`: the application's): a file
    /// for the driver to open, or a refusal written to `res` (405 for a method other than GET
    /// and HEAD; 404 for a path that could leave the directory, or a dotfile unless allowed).
    pub fn answer<J>(&self, req: &Request<'_>, res: &mut Response<'_>) -> Option<Handled<J>> {
        let rest = req.path.strip_prefix(self.route.as_str())?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            // `/staticky` is not below `/static`.
            return None;
        }
        if !matches!(req.method, Method::Get | Method::Head) {
            res.send_with(
                405,
                "text/plain",
                &[("Allow", b"GET, HEAD")],
                b"Method Not Allowed\n",
            );
            return Some(Handled::Done);
        }
        // `/static//etc/passwd` keeps its second slash: an absolute path, refused.
        let rel = rest.strip_prefix('/').unwrap_or(rest);
        let file = match FileRequest::parse(req, rel) {
            Ok(file) => file,
            Err(_) => {
                res.send(404, "text/plain", b"Not Found\n");
                return Some(Handled::Done);
            }
        };
        if !self.dotfiles && file.path().split('/').any(|seg| seg.starts_with('.')) {
            // Hidden files (`.env`, `.git/config`) are not published by accident.
            res.send(404, "text/plain", b"Not Found\n");
            return Some(Handled::Done);
        }
        Some(Handled::File(
            file.compress(self.compress)
                .cache_control(self.cache_control.clone()),
        ))
    }
}

/// The options [`configure`] reads that concern what the front does with requests and
/// messages, not the listening socket.
#[derive(Debug, Clone, Default)]
pub struct AppOptions {
    /// Files served under a route before the application (`None`: none).
    pub statics: Option<StaticMount>,
    /// permessage-deflate in the ASGI `websocket` scope (WSGI has none).
    pub ws_deflate: DeflateConfig,
    /// On-the-fly compression of responses (`--compress`); `None`: off, the default.
    pub compress: Option<Compress>,
    /// Prints the startup line, given the URL served and the server's shape (`python -m
    /// berth`'s, which names a worker and its pid); `None`: berth's own line.
    pub announce: Option<std::sync::Arc<Py<PyAny>>>,
    /// More listening sockets to serve beside the main address (`-b` given more than once,
    /// gunicorn's habit: the option `more_fds`), each taken over as an inherited socket is
    /// (closed when done). Bound by the caller: `listen_shared`, `listen_unix`.
    pub more: Vec<std::sync::Arc<socket2::Socket>>,
}

/// The settings that serve `socket` (one of [`AppOptions::more`]): `settings` with the socket
/// as the inherited listener, and its address (a UNIX socket served as one, at its path).
pub fn more_settings(settings: &Settings, socket: &std::sync::Arc<socket2::Socket>) -> Settings {
    let mut more = settings.clone();
    more.common.listen.inherited = Some(socket.clone());
    let local = socket.local_addr().ok();
    if let Some(path) = berth::net::activation::unix_path(socket) {
        more.addr = Addr::Unix(path);
    } else if let Some(tcp) = local.as_ref().and_then(|a| a.as_socket()) {
        more.addr = Addr::Tcp(tcp);
    }
    more
}

/// The models berth's registry has, by name, in its order (`python -m berth --model`'s
/// choices).
#[pyfunction]
pub fn models() -> Vec<&'static str> {
    Model::ALL.iter().map(|m| m.name()).collect()
}

/// A duration as every berth command line reads it (`berth::units::duration_or_zero`):
/// `30s`, `500ms`, `2m`, `1h`, or a bare number of seconds; in seconds. `ValueError` with
/// berth's own message otherwise.
#[pyfunction]
pub fn parse_duration(text: &str) -> PyResult<f64> {
    berth::units::duration_or_zero(text)
        .map(|d| d.as_secs_f64())
        .map_err(pyo3::exceptions::PyValueError::new_err)
}

/// A size as every berth command line reads it (`berth::units::size`): `1000`, `64k`, `1m`,
/// `1g` (powers of 1024); in bytes. `ValueError` with berth's own message otherwise.
#[pyfunction]
pub fn parse_size(text: &str) -> PyResult<u64> {
    berth::units::size(text).map_err(pyo3::exceptions::PyValueError::new_err)
}

/// The log line (and the 413's reason) for a request body over the limit: the option that
/// raises it.
pub const OVER_MAX_BODY: &str =
    "a request body over the limit was answered 413; python -m berth --max-body raises the limit";

/// Writes `message` to the Python logger `berth.error` at WARNING (taking the GIL: for rare
/// events only).
pub fn warn(message: &str) {
    say("warning", message)
}

/// Writes `message` to the Python logger `berth.error` at INFO (taking the GIL: for rare
/// events only: a drain's start and end).
pub fn info(message: &str) {
    say("info", message)
}

fn say(level: &str, message: &str) {
    Python::with_gil(|py| {
        let logged = py
            .import("logging")
            .and_then(|l| l.call_method1("getLogger", ("berth.error",)))
            .and_then(|l| l.call_method1(level, ("%s", message)));
        if let Err(e) = logged {
            e.write_unraisable(py, None);
        }
    });
}

/// What a front says it listens on: `http://127.0.0.1:8000`, `https://...`, or
/// `unix:///run/app.sock` (as `berth serve --listen` takes it).
pub fn url(bound: &Addr, tls: bool) -> String {
    match bound {
        Addr::Unix(_) => bound.to_string(),
        Addr::Tcp(_) if tls => format!("https://{bound}"),
        Addr::Tcp(_) => format!("http://{bound}"),
        Addr::Udp(_) => bound.to_string(),
    }
}

/// [`berth::drive::Service::around_fork`] for a service that runs Python: the fork is made as
/// `os.fork()` makes it, by a thread holding the GIL, between `PyOS_BeforeFork` and
/// `PyOS_AfterFork_Parent`/`_Child`. Without them (berth's `forked` and `prefork` models fork
/// from a Rust thread) the child inherited the interpreter as the fork found it: a GIL held by
/// one of the parent's threads at that moment (the main thread printing the startup line, an
/// application's own thread) was never let go in the child, whose requests then waited for it
/// forever (one run of the `forked` WSGI test in about twenty); the import lock, `threading`'s
/// state and the handlers registered with `os.register_at_fork` (logging's locks among them)
/// were the parent's too.
///
/// In the child the forking thread is CPython's main thread from then on, and keeps its thread
/// state for the process's life, letting only the GIL go: were it released, the interpreter
/// would have no thread state left, and CPython (3.11) would hand the next thread to ask (an
/// application thread) the dead main thread's, still marked in use: "Fatal Python error:
/// init_threadstate: thread state already initialized".
pub fn around_fork(fork: &mut dyn FnMut() -> bool) {
    use pyo3::ffi;
    // SAFETY: the C API's contract for these calls ("Process Control", "Thread State and the
    // Global Interpreter Lock"): the interpreter is initialized (this module is loaded in it);
    // `PyOS_BeforeFork` is called by a thread holding the GIL (`PyGILState_Ensure`) just before
    // fork(2), and exactly one of the after-fork calls just after it, on the side we are on
    // (the parent's after a failed fork). The parent releases what it ensured; the child lets
    // the GIL go with its thread state kept (see above), as a thread that calls
    // `PyEval_SaveThread` and never restores may.
    unsafe {
        let gil = ffi::PyGILState_Ensure();
        ffi::PyOS_BeforeFork();
        if fork() {
            ffi::PyOS_AfterFork_Child();
            ffi::PyEval_SaveThread();
        } else {
            ffi::PyOS_AfterFork_Parent();
            ffi::PyGILState_Release(gil);
        }
    }
}
