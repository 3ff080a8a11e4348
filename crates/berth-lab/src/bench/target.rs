//! What `berth bench` sends and where: the URL resolved to a socket address, and the request
//! bytes built once, so the load loop only copies a prepared slice into the socket.

use std::net::{SocketAddr, ToSocketAddrs};

/// A resolved `http://` URL.
#[derive(Debug, Clone)]
pub struct Target {
    /// The URL as given, for reports.
    pub url: String,
    /// Where connections go.
    pub addr: SocketAddr,
    /// `Host` header value: the URL's authority.
    pub host: String,
    /// Origin-form request target: path and query.
    pub path: String,
    /// `https://`: the host name the server's certificate is checked against (TLS), else
    /// `None`.
    pub tls_host: Option<String>,
}

impl Target {
    /// Parses and resolves `url`. Only `http://` is served by berth's peers; anything else is a
    /// usage error, said as such.
    pub fn parse(url: &str) -> Result<Target, String> {
        let uri: http::Uri = url
            .parse()
            .map_err(|e| format!("invalid URL {url:?}: {e}"))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            Some(other) => {
                return Err(format!(
                    "unsupported scheme {other:?} (http:// or https://)"
                ))
            }
            None => return Err(format!("URL {url:?} needs a scheme, e.g. http://{url}")),
        };
        let authority = uri
            .authority()
            .ok_or_else(|| format!("URL {url:?} has no host"))?;
        let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
        // `[::1]` keeps its brackets in the authority; the resolver wants them off.
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let addr = (host, port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve {host}: {e}"))?
            .next()
            .ok_or_else(|| format!("{host} resolves to no address"))?;
        let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
        Ok(Target {
            url: url.to_owned(),
            addr,
            host: authority.as_str().to_owned(),
            path,
            tls_host: tls.then(|| host.to_owned()),
        })
    }
}

/// What to send on each request.
#[derive(Debug, Clone)]
pub struct RequestSpec {
    /// Method token, e.g. `GET`.
    pub method: String,
    /// Extra header fields, in order.
    pub headers: Vec<(String, String)>,
    /// Body; sent with a Content-Length when non-empty or when the method usually has one.
    pub body: Vec<u8>,
}

impl Default for RequestSpec {
    fn default() -> Self {
        RequestSpec {
            method: "GET".to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }
}

impl RequestSpec {
    /// Checks what a server would refuse before the first byte is sent: a method that is not a
    /// token, header names that are not tokens, values with line breaks.
    pub fn validate(&self) -> Result<(), String> {
        let token = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        };
        if !token(&self.method) {
            return Err(format!("invalid method {:?}", self.method));
        }
        for (name, value) in &self.headers {
            if !token(name) {
                return Err(format!("invalid header name {name:?}"));
            }
            if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return Err(format!(
                    "header {name} has a line break or NUL in its value"
                ));
            }
        }
        Ok(())
    }

    /// Whether responses to this request carry no body.
    pub fn is_head(&self) -> bool {
        self.method.eq_ignore_ascii_case("HEAD")
    }

    /// The request's bytes. A user's own `Host`, `Content-Length` or `Connection` replaces the
    /// one berth would add.
    pub fn encode(&self, target: &Target, keep_alive: bool) -> Vec<u8> {
        let has = |name: &str| {
            self.headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case(name))
        };
        let mut out = Vec::with_capacity(128 + self.body.len());
        out.extend_from_slice(format!("{} {} HTTP/1.1\r\n", self.method, target.path).as_bytes());
        if !has("host") {
            out.extend_from_slice(format!("Host: {}\r\n", target.host).as_bytes());
        }
        for (name, value) in &self.headers {
            out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
        }
        let wants_length = !self.body.is_empty()
            || ["POST", "PUT", "PATCH"]
                .iter()
                .any(|m| self.method.eq_ignore_ascii_case(m));
        if wants_length && !has("content-length") {
            out.extend_from_slice(format!("Content-Length: {}\r\n", self.body.len()).as_bytes());
        }
        if !keep_alive && !has("connection") {
            out.extend_from_slice(b"Connection: close\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
        out
    }

    /// The request's fields as HTTP/2 and HTTP/3 send them, pseudo-fields first. A user's
    /// `Host` becomes `:authority`; the fields both forbid (RFC 9113 §8.2.2, RFC 9114 §4.2:
    /// `Connection` and those it would name) are left out, since a server must refuse a
    /// request carrying them; names are lowercased, as both require.
    pub fn fields(&self, target: &Target) -> Vec<(String, String)> {
        const HOP_BY_HOP: [&str; 5] = [
            "connection",
            "keep-alive",
            "proxy-connection",
            "transfer-encoding",
            "upgrade",
        ];
        let authority = self
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("host"))
            .map_or(target.host.as_str(), |(_, v)| v.as_str());
        let scheme = if target.tls_host.is_some() {
            "https"
        } else {
            "http"
        };
        let mut fields: Vec<(String, String)> = vec![
            (":method".into(), self.method.clone()),
            (":scheme".into(), scheme.into()),
            (":authority".into(), authority.into()),
            (":path".into(), target.path.clone()),
        ];
        for (name, value) in &self.headers {
            let name = name.to_ascii_lowercase();
            if name == "host" || HOP_BY_HOP.contains(&name.as_str()) {
                continue;
            }
            // `TE` may only say `trailers` in HTTP/2 and HTTP/3.
            if name == "te" && !value.eq_ignore_ascii_case("trailers") {
                continue;
            }
            fields.push((name, value.clone()));
        }
        let wants_length = !self.body.is_empty()
            || ["POST", "PUT", "PATCH"]
                .iter()
                .any(|m| self.method.eq_ignore_ascii_case(m));
        if wants_length && !fields.iter().any(|(n, _)| n == "content-length") {
            fields.push(("content-length".into(), self.body.len().to_string()));
        }
        fields
    }

    /// The request's HTTP/2 header block (HPACK, berth-proto's encoder, which keeps no
    /// dynamic table: the same bytes serve every request of a run): [`RequestSpec::fields`].
    pub fn encode_h2(&self, target: &Target) -> Vec<u8> {
        let fields = self.fields(target);
        let mut block = Vec::with_capacity(64);
        berth_proto::h2::hpack::encode(
            fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
            &mut block,
        );
        block
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let t = Target::parse("http://127.0.0.1:8080/hello/world?x=1").unwrap();
        assert_eq!(t.addr, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(
            (t.host.as_str(), t.path.as_str()),
            ("127.0.0.1:8080", "/hello/world?x=1")
        );
        let t = Target::parse("http://[::1]:9/").unwrap();
        assert_eq!(t.addr, "[::1]:9".parse().unwrap());
        assert_eq!(Target::parse("http://127.0.0.1").unwrap().path, "/");
        // https:// is measured too now (issue 16), on 443 by default.
        let t = Target::parse("https://127.0.0.1/").unwrap();
        assert_eq!(t.addr, "127.0.0.1:443".parse().unwrap());
        assert_eq!(t.tls_host.as_deref(), Some("127.0.0.1"));
        assert_eq!(Target::parse("http://127.0.0.1/").unwrap().tls_host, None);
        assert!(Target::parse("ftp://127.0.0.1/")
            .unwrap_err()
            .contains("scheme"));
        assert!(Target::parse("127.0.0.1:80/x").is_err());
        assert!(Target::parse("http://").is_err());
    }

    #[test]
    fn encodes_requests() {
        let t = Target::parse("http://127.0.0.1:1/r").unwrap();
        let spec = RequestSpec {
            method: "POST".into(),
            headers: vec![("X-A".into(), "1".into())],
            body: b"{}".to_vec(),
        };
        assert_eq!(
            String::from_utf8(spec.encode(&t, false)).unwrap(),
            "POST /r HTTP/1.1\r\nHost: 127.0.0.1:1\r\nX-A: 1\r\nContent-Length: 2\r\n\
             Connection: close\r\n\r\n{}"
        );
        let get = RequestSpec::default();
        assert_eq!(
            get.encode(&t, true),
            b"GET /r HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n"
        );
        let own_host = RequestSpec {
            headers: vec![("host".into(), "example".into())],
            ..RequestSpec::default()
        };
        assert_eq!(
            own_host.encode(&t, true),
            b"GET /r HTTP/1.1\r\nhost: example\r\n\r\n"
        );
    }

    #[test]
    fn encodes_http2_header_blocks() {
        use berth_proto::h2::hpack::{Decoder, ListLimits};
        let decode = |block: &[u8]| {
            let mut fields = Vec::new();
            let limits = ListLimits {
                max_size: 1 << 16,
                max_fields: 64,
            };
            Decoder::new(4096)
                .decode(block, limits, &mut fields)
                .unwrap();
            fields
                .into_iter()
                .map(|f| {
                    format!(
                        "{}: {}",
                        String::from_utf8(f.name).unwrap(),
                        String::from_utf8(f.value).unwrap()
                    )
                })
                .collect::<Vec<_>>()
        };
        let t = Target::parse("https://127.0.0.1:1/r?x=1").unwrap();
        let spec = RequestSpec {
            method: "POST".into(),
            headers: vec![
                ("X-A".into(), "1".into()),
                ("Connection".into(), "keep-alive".into()),
                ("Host".into(), "example".into()),
            ],
            body: b"{}".to_vec(),
        };
        assert_eq!(
            decode(&spec.encode_h2(&t)),
            [
                ":method: POST",
                ":scheme: https",
                ":authority: example",
                ":path: /r?x=1",
                "x-a: 1",
                "content-length: 2"
            ]
        );
        let get = RequestSpec::default();
        let plain = Target::parse("http://127.0.0.1:1/").unwrap();
        assert_eq!(
            decode(&get.encode_h2(&plain)),
            [
                ":method: GET",
                ":scheme: http",
                ":authority: 127.0.0.1:1",
                ":path: /"
            ]
        );
    }

    #[test]
    fn refuses_what_would_corrupt_the_request() {
        let bad = |method: &str, name: &str, value: &str| RequestSpec {
            method: method.into(),
            headers: vec![(name.into(), value.into())],
            body: Vec::new(),
        };
        assert!(bad("GET", "X", "ok").validate().is_ok());
        assert!(bad("GE T", "X", "ok").validate().is_err());
        assert!(bad("GET", "X Y", "ok").validate().is_err());
        assert!(bad("GET", "X", "a\r\nInjected: 1").validate().is_err());
    }
}
