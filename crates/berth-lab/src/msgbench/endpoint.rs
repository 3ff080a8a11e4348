//! Where `berth msg bench` connects: the `tcp://HOST:PORT` and `unix:///path` forms of
//! docs/msg-protocol.md §7, and `ws://HOST:PORT/PATH` for a WebSocket echo server, resolved
//! once, before any load starts. Listener options (`?raw`,
//! `?anonymous=no`, ...) describe servers, not clients, so a client endpoint refuses them.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

/// A resolved client endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `tcp://HOST:PORT`, resolved to its first address.
    Tcp(SocketAddr),
    /// `unix:///path`: a UNIX stream socket.
    Unix(PathBuf),
    /// `ws://HOST:PORT/PATH`: a WebSocket server (the address, and the host and path the
    /// handshake names).
    Ws {
        /// The first address `HOST` resolves to.
        addr: SocketAddr,
        /// `HOST:PORT`, for the `Host` field.
        host: String,
        /// The request path (`/` if none).
        path: String,
    },
}

impl Endpoint {
    /// Parses and resolves `s`. Errors are said as a user would fix them.
    pub fn parse(s: &str) -> Result<Endpoint, String> {
        if s.contains('?') {
            return Err(format!(
                "{s:?}: options after '?' are for listeners; a client endpoint is tcp://HOST:PORT or unix:///PATH"
            ));
        }
        if let Some(rest) = s.strip_prefix("ws://") {
            let (host, path) = match rest.find('/') {
                Some(i) => (&rest[..i], &rest[i..]),
                None => (rest, "/"),
            };
            let Endpoint::Tcp(addr) = Endpoint::parse(&format!("tcp://{host}"))
                .map_err(|e| e.replace("tcp://", "ws://"))?
            else {
                unreachable!("tcp:// parses to Tcp");
            };
            return Ok(Endpoint::Ws {
                addr,
                host: host.to_owned(),
                path: path.to_owned(),
            });
        }
        if let Some(rest) = s.strip_prefix("tcp://") {
            let (host, port) = rest
                .rsplit_once(':')
                .ok_or_else(|| format!("{s:?} needs a port, e.g. tcp://127.0.0.1:9100"))?;
            let port: u16 = port
                .parse()
                .map_err(|_| format!("{s:?}: {port:?} is not a port number"))?;
            // IPv6 hosts come in brackets (`tcp://[::1]:9100`); the resolver wants them off.
            let host = match host.strip_prefix('[') {
                Some(h) => h
                    .strip_suffix(']')
                    .ok_or_else(|| format!("{s:?}: unclosed '[' in the host"))?,
                None if host.contains(':') => {
                    return Err(format!(
                        "{s:?}: put an IPv6 host in brackets, e.g. tcp://[::1]:9100"
                    ))
                }
                None => host,
            };
            if host.is_empty() {
                return Err(format!("{s:?} has no host"));
            }
            let addr = (host, port)
                .to_socket_addrs()
                .map_err(|e| format!("cannot resolve {host}: {e}"))?
                .next()
                .ok_or_else(|| format!("{host} resolves to no address"))?;
            return Ok(Endpoint::Tcp(addr));
        }
        if let Some(path) = s.strip_prefix("unix://") {
            if path.is_empty() {
                return Err(format!("{s:?} has no path, e.g. unix:///tmp/berth.sock"));
            }
            return Ok(Endpoint::Unix(PathBuf::from(path)));
        }
        if s.starts_with("udp://") {
            return Err(format!(
                "{s:?}: the bench measures stream servers (tcp:// or unix://), not UDP"
            ));
        }
        Err(format!(
            "{s:?} is not an endpoint: expected tcp://HOST:PORT, unix:///PATH or ws://HOST:PORT/PATH"
        ))
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "tcp://{a}"),
            Endpoint::Unix(p) => write!(f, "unix://{}", p.display()),
            Endpoint::Ws { host, path, .. } => write!(f, "ws://{host}{path}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!(
            Endpoint::parse("tcp://127.0.0.1:9100").unwrap(),
            Endpoint::Tcp("127.0.0.1:9100".parse().unwrap())
        );
        assert_eq!(
            Endpoint::parse("tcp://[::1]:9100").unwrap(),
            Endpoint::Tcp("[::1]:9100".parse().unwrap())
        );
        assert!(matches!(
            Endpoint::parse("tcp://localhost:9100").unwrap(),
            Endpoint::Tcp(a) if a.port() == 9100
        ));
        assert_eq!(
            Endpoint::parse("unix:///tmp/b.sock").unwrap(),
            Endpoint::Unix("/tmp/b.sock".into())
        );
        assert_eq!(
            Endpoint::parse("unix:///tmp/b.sock").unwrap().to_string(),
            "unix:///tmp/b.sock"
        );
    }

    #[test]
    fn refuses_what_a_client_cannot_use() {
        for bad in [
            "127.0.0.1:9100",
            "tcp://127.0.0.1",
            "tcp://127.0.0.1:port",
            "tcp://127.0.0.1:70000",
            "tcp://:9100",
            "tcp://::1:9100",
            "tcp://[::1:9100",
            "tcp://127.0.0.1:9100?raw",
            "unix://",
            "udp://127.0.0.1:9100",
            "http://127.0.0.1:9100/",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }
}
