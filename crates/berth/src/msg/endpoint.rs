//! Endpoints as URLs (docs/msg-protocol.md §7): `tcp://HOST:PORT`, `unix:///path`,
//! `udp://HOST:PORT`, `tls://HOST:PORT` (TCP with TLS), and `ws://HOST:PORT/PATH` and
//! `wss://HOST:PORT/PATH` (WebSocket clients, a browser among them, at `PATH`, by default
//! `/ws/relay`; `wss` inside TLS), with the options `?raw`,
//! `?anonymous=no` and `?expected-only`, and for TLS `cert=FILE`, `key=FILE` (a listener's
//! certificate and key, PEM) and `client-ca=FILE` (ask clients for a certificate signed by this
//! CA).

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use berth_proto::msg::Transport;
use percent_encoding::percent_decode_str;
use url::Url;

/// Where to listen or connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A UNIX stream socket's path.
    Unix(PathBuf),
    /// A UDP address.
    Udp(SocketAddr),
}

/// An endpoint and its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The address.
    pub address: Address,
    /// No framing and no handshake (stream transports only).
    pub raw: bool,
    /// Anonymous clients are refused on this listener.
    pub no_anonymous: bool,
    /// Names not expected in advance are refused on this listener.
    pub expected_only: bool,
    /// TLS over TCP (`tls://`, `wss://`), and the files it takes.
    pub tls: Option<TlsFiles>,
    /// WebSocket (`ws://`, `wss://`): clients open with a WebSocket handshake for this path,
    /// and each message is a WebSocket message (listeners only).
    pub websocket: Option<String>,
    /// WebSocket listeners only: permessage-deflate may be negotiated (`?deflate=off` turns
    /// it off for this listener; the engine's `ws_deflate` decides otherwise).
    pub deflate: bool,
}

/// The path a `ws://` endpoint serves when its URL names none.
pub const WS_DEFAULT_PATH: &str = "/ws/relay";

/// The files of a TLS endpoint. A listener needs a certificate and a key (here, or given to
/// the whole server); a client needs neither.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain (PEM).
    pub cert: Option<PathBuf>,
    /// The private key (PEM).
    pub key: Option<PathBuf>,
    /// Clients are asked for a certificate signed by this CA (PEM).
    pub client_ca: Option<PathBuf>,
    /// Client mode: the CA (PEM) the server's certificate must be signed by.
    pub ca: Option<PathBuf>,
    /// Client mode: accept any server certificate (`?insecure`; for tests).
    pub insecure: bool,
    /// The host as written, which a client checks the server's certificate against.
    pub host: String,
}

impl Endpoint {
    /// Parses `tcp://127.0.0.1:9100?raw` and the like (as a URL, by the `url` crate: a space or
    /// another character a URL escapes may be written `%XX`). Host names are resolved (first
    /// address).
    pub fn parse(s: &str) -> Result<Endpoint, String> {
        let bad = |why: &str| format!("bad endpoint {s:?}: {why}");
        let expected = "expected tcp://HOST:PORT, tls://HOST:PORT, unix:///PATH, udp://HOST:PORT \
                        or ws://HOST:PORT/PATH";
        if !s.contains("://") {
            return Err(bad(expected));
        }
        let scheme_written = s.split_once("://").map_or("", |(scheme, _)| scheme);
        if !matches!(
            scheme_written,
            "tcp" | "tls" | "udp" | "unix" | "ws" | "wss"
        ) {
            return Err(bad(&format!("unknown scheme {scheme_written:?}")));
        }
        let url = Url::parse(s).map_err(|e| bad(&format!("{e}; {expected}")))?;
        let scheme = url.scheme();
        if url.fragment().is_some() {
            return Err(bad("a #fragment means nothing here"));
        }
        let query = url.query().unwrap_or("");
        let websocket = matches!(scheme, "ws" | "wss");
        let decoded = |text: &str| percent_decode_str(text).decode_utf8_lossy().into_owned();
        // What stands between `://` and the path or query, as written: `url` leaves out a
        // port that is the scheme's default (80 for ws://), and gives ws:// a path `/` when
        // none is written.
        let authority = s[scheme_written.len() + 3..]
            .split(['/', '?', '#'])
            .next()
            .unwrap_or("");
        let port_written = authority.rsplit_once(':').is_some_and(|(host, port)| {
            !port.is_empty() && (!host.starts_with('[') || host.ends_with(']'))
        });
        // HOST:PORT for the IP schemes (IPv6 in brackets), the path for unix://.
        let place = match (url.host_str(), url.port_or_known_default()) {
            _ if scheme == "unix" => {
                decoded(&format!("{}{}", url.host_str().unwrap_or(""), url.path()))
            }
            _ if !port_written => return Err(bad("no port")),
            (Some(host), Some(port)) if !host.is_empty() => format!("{}:{port}", decoded(host)),
            _ => return Err(bad("no host")),
        };
        let path_written = s[scheme_written.len() + 3 + authority.len()..].starts_with('/');
        let path = match url.path() {
            _ if !path_written => WS_DEFAULT_PATH.to_owned(),
            path if websocket => decoded(path),
            _ if scheme == "unix" => String::new(),
            path => {
                return Err(bad(&format!(
                    "a path ({path}) means nothing for {scheme}://"
                )))
            }
        };
        let place = place.as_str();
        let mut endpoint = Endpoint {
            address: match scheme {
                "tcp" | "tls" | "ws" | "wss" => {
                    Address::Tcp(socket_addr(place).map_err(|e| bad(&e))?)
                }
                "udp" => Address::Udp(socket_addr(place).map_err(|e| bad(&e))?),
                "unix" if place.is_empty() => return Err(bad("no socket path")),
                "unix" => Address::Unix(PathBuf::from(place)),
                other => return Err(bad(&format!("unknown scheme {other:?}"))),
            },
            raw: false,
            no_anonymous: false,
            expected_only: false,
            tls: matches!(scheme, "tls" | "wss").then(|| TlsFiles {
                host: host_of(place),
                ..TlsFiles::default()
            }),
            websocket: websocket.then_some(path),
            deflate: true,
        };
        for option in query.split('&').filter(|o| !o.is_empty()) {
            match option {
                "raw" | "raw=yes" => endpoint.raw = true,
                "anonymous=no" => endpoint.no_anonymous = true,
                "anonymous=yes" => endpoint.no_anonymous = false,
                "expected-only" | "expected-only=yes" => endpoint.expected_only = true,
                "deflate=on" | "deflate=off" if websocket => {
                    endpoint.deflate = option == "deflate=on";
                }
                other => {
                    let (name, path) = other.split_once('=').unwrap_or((other, ""));
                    if let ("insecure", Some(tls)) = (name, endpoint.tls.as_mut()) {
                        tls.insecure = true;
                        continue;
                    }
                    let file = match (name, endpoint.tls.as_mut()) {
                        ("ca", Some(tls)) => &mut tls.ca,
                        ("cert", Some(tls)) => &mut tls.cert,
                        ("key", Some(tls)) => &mut tls.key,
                        ("client-ca", Some(tls)) => &mut tls.client_ca,
                        _ => {
                            return Err(bad(&format!(
                                "unknown option {other:?} (known: raw, anonymous=no, \
                                 expected-only; for tls:// and wss://, cert=, key=, \
                                 client-ca=, ca=, insecure; for ws:// and wss://, \
                                 deflate=on|off)"
                            )))
                        }
                    };
                    if path.is_empty() {
                        return Err(bad(&format!("{other:?} names no file")));
                    }
                    *file = Some(PathBuf::from(decoded(path)));
                }
            }
        }
        if endpoint.raw && (matches!(endpoint.address, Address::Udp(_)) || websocket) {
            return Err(bad("raw applies to tcp:// and unix:// only"));
        }
        Ok(endpoint)
    }

    /// The transport, as rules name it.
    pub fn transport(&self) -> Transport {
        match self.address {
            Address::Tcp(_) if self.tls.is_some() => Transport::Tls,
            Address::Tcp(_) => Transport::Tcp,
            Address::Unix(_) => Transport::Unix,
            Address::Udp(_) => Transport::Udp,
        }
    }
}

/// The host part of `HOST:PORT` (`[::1]:9` gives `::1`).
fn host_of(place: &str) -> String {
    let host = place.rsplit_once(':').map_or(place, |(h, _)| h);
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned()
}

fn socket_addr(place: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = place.parse() {
        return Ok(addr);
    }
    place
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {place:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{place:?} resolves to no address"))
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.address, &self.websocket) {
            (Address::Tcp(a), Some(path)) if self.tls.is_some() => write!(f, "wss://{a}{path}")?,
            (Address::Tcp(a), Some(path)) => write!(f, "ws://{a}{path}")?,
            (address, _) => match address {
                Address::Tcp(a) if self.tls.is_some() => write!(f, "tls://{a}")?,
                Address::Tcp(a) => write!(f, "tcp://{a}")?,
                Address::Udp(a) => write!(f, "udp://{a}")?,
                Address::Unix(p) => write!(f, "unix://{}", p.display())?,
            },
        }
        let options = [
            (self.raw, "raw"),
            (self.no_anonymous, "anonymous=no"),
            (self.expected_only, "expected-only"),
        ];
        let mut sep = '?';
        for (on, name) in options {
            if on {
                write!(f, "{sep}{name}")?;
                sep = '&';
            }
        }
        let files = self.tls.iter().flat_map(|t| {
            [
                ("cert", &t.cert),
                ("key", &t.key),
                ("client-ca", &t.client_ca),
                ("ca", &t.ca),
            ]
        });
        for (name, path) in files {
            if let Some(path) = path {
                write!(f, "{sep}{name}={}", path.display())?;
                sep = '&';
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        let e = Endpoint::parse("tcp://127.0.0.1:9100").unwrap();
        assert_eq!(e.address, Address::Tcp("127.0.0.1:9100".parse().unwrap()));
        assert!(!e.raw);
        let e = Endpoint::parse("tcp://[::1]:9100?raw").unwrap();
        assert_eq!(e.address, Address::Tcp("[::1]:9100".parse().unwrap()));
        assert!(e.raw);
        let e = Endpoint::parse("unix:///tmp/berth.sock?anonymous=no&expected-only").unwrap();
        assert_eq!(e.address, Address::Unix("/tmp/berth.sock".into()));
        assert!(e.no_anonymous && e.expected_only);
        assert_eq!(
            e.to_string(),
            "unix:///tmp/berth.sock?anonymous=no&expected-only"
        );
        let e = Endpoint::parse("udp://localhost:9101").unwrap();
        assert_eq!(e.transport(), Transport::Udp);
        let e = Endpoint::parse("unix://relative.sock").unwrap();
        assert_eq!(e.address, Address::Unix("relative.sock".into()));
        // What a URL escapes may be written escaped.
        let e = Endpoint::parse("unix:///tmp/my%20berth.sock").unwrap();
        assert_eq!(e.address, Address::Unix("/tmp/my berth.sock".into()));
    }

    #[test]
    fn parses_tls_endpoints_and_their_files() {
        let e = Endpoint::parse("tls://127.0.0.1:9443?cert=/c.pem&key=/k.pem&client-ca=/ca.pem")
            .unwrap();
        assert_eq!(e.address, Address::Tcp("127.0.0.1:9443".parse().unwrap()));
        let tls = e.tls.as_ref().unwrap();
        assert_eq!(tls.cert.as_deref(), Some(std::path::Path::new("/c.pem")));
        assert_eq!(tls.key.as_deref(), Some(std::path::Path::new("/k.pem")));
        assert_eq!(
            tls.client_ca.as_deref(),
            Some(std::path::Path::new("/ca.pem"))
        );
        assert_eq!(
            e.to_string(),
            "tls://127.0.0.1:9443?cert=/c.pem&key=/k.pem&client-ca=/ca.pem"
        );
        let e = Endpoint::parse("tls://127.0.0.1:9443").unwrap();
        assert_eq!(e.tls.as_ref().map(|t| t.host.as_str()), Some("127.0.0.1"));
        assert_eq!(e.transport(), Transport::Tls);
        assert!(Endpoint::parse("tcp://127.0.0.1:9?cert=/c.pem").is_err());
        assert!(Endpoint::parse("tls://127.0.0.1:9?cert=").is_err());
    }

    #[test]
    fn parses_websocket_endpoints_and_their_paths() {
        let e = Endpoint::parse("ws://127.0.0.1:9102").unwrap();
        assert_eq!(e.address, Address::Tcp("127.0.0.1:9102".parse().unwrap()));
        assert_eq!(e.websocket.as_deref(), Some("/ws/relay"));
        assert_eq!(e.transport(), Transport::Tcp);
        assert_eq!(e.to_string(), "ws://127.0.0.1:9102/ws/relay");
        let e = Endpoint::parse("wss://127.0.0.1:9443/chat?anonymous=no").unwrap();
        assert_eq!(e.websocket.as_deref(), Some("/chat"));
        assert_eq!(e.transport(), Transport::Tls);
        assert!(e.no_anonymous);
        assert_eq!(e.to_string(), "wss://127.0.0.1:9443/chat?anonymous=no");
        assert!(Endpoint::parse("tcp://127.0.0.1:9100")
            .unwrap()
            .websocket
            .is_none());
        assert!(Endpoint::parse("ws://127.0.0.1:9?raw").is_err());
        // The scheme's default port, written, is still a port; none written is none.
        let e = Endpoint::parse("ws://127.0.0.1:80/").unwrap();
        assert_eq!(e.address, Address::Tcp("127.0.0.1:80".parse().unwrap()));
        assert_eq!(e.websocket.as_deref(), Some("/"));
        assert!(Endpoint::parse("ws://127.0.0.1/chat").is_err());
        assert!(Endpoint::parse("tcp://127.0.0.1:9/x").is_err());
    }

    #[test]
    fn refuses_what_it_cannot_mean() {
        for bad in [
            "127.0.0.1:9100",
            "http://127.0.0.1:80",
            "tcp://127.0.0.1",
            "unix://",
            "udp://127.0.0.1:9?raw",
            "tcp://127.0.0.1:9?fast",
            "tcp://127.0.0.1:9/x",
            "tcp://:9",
            "tcp://[::1]",
            "unix:///tmp/a#b",
        ] {
            let err = Endpoint::parse(bad).unwrap_err();
            assert!(err.contains(bad), "{err}");
        }
    }
}
