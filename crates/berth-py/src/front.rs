//! What the WSGI and ASGI fronts share: the answer at capacity, the request path decoded, and
//! an application's header fields turned into berth's reply (dropping the ones berth writes
//! itself).

use berth::proto::http::Reply;
use pyo3::exceptions::PyValueError;
use pyo3::PyResult;

/// Written to a connection refused at capacity.
pub const REFUSAL: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nServer: berth\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// The request path with `%XX` decoded, as bytes (WSGI makes them latin-1 characters, ASGI
/// UTF-8). A `%` not followed by two hex digits stays as it is.
pub fn percent_decode(path: &str) -> Vec<u8> {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
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
