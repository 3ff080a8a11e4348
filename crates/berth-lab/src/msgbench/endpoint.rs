//! Where `berth msg bench` connects: a [`berth::net::Endpoint`], parsed by the one parser
//! every part of berth uses, of the schemes the load client speaks: `tcp://HOST:PORT`,
//! `unix:///PATH`, and `ws://HOST:PORT/PATH` for a WebSocket echo server such as `serve`'s
//! `/ws/echo` (without a path, `/ws/relay`, as every `ws://` endpoint: this was `/` before the
//! bench took the shared parser). Host names are resolved once, before
//! any load starts. Listener options (`?raw`, `?anonymous=no`, ...) describe servers, not
//! clients, so a client endpoint refuses them.

use berth::net::{Endpoint, Scheme};

/// Parses and resolves `s`, and refuses what the load client cannot connect to (other
/// schemes, listener options). Errors are said as a user would fix them.
pub fn parse(s: &str) -> Result<Endpoint, String> {
    if s.contains('?') {
        return Err(format!(
            "{s:?}: options after '?' are for listeners; a client endpoint is tcp://HOST:PORT, \
             unix:///PATH or ws://HOST:PORT/PATH"
        ));
    }
    let endpoint = Endpoint::parse(s)?;
    check(&endpoint)?;
    Ok(endpoint)
}

/// Whether the load client can connect to `endpoint`: `tcp://`, `unix://` and `ws://`, with
/// no listener options.
pub fn check(endpoint: &Endpoint) -> Result<(), String> {
    match endpoint.scheme() {
        Scheme::Tcp | Scheme::Unix | Scheme::Ws => {}
        Scheme::Udp => {
            return Err(format!(
                "{endpoint}: the bench measures stream servers (tcp://, unix:// or ws://), not UDP"
            ))
        }
        other => {
            return Err(format!(
                "{endpoint}: the bench connects over tcp://, unix:// and ws://, not {other}"
            ))
        }
    }
    if endpoint.raw || endpoint.no_anonymous || endpoint.expected_only || !endpoint.deflate {
        return Err(format!(
            "{endpoint}: options are for listeners; a client endpoint takes none"
        ));
    }
    Ok(())
}

/// `HOST:PORT` as written (IPv6 in brackets), for a WebSocket handshake's `Host`.
pub fn authority(endpoint: &Endpoint) -> String {
    let port = endpoint.address.ip().map_or(0, |a| a.port());
    match endpoint.host.contains(':') {
        true => format!("[{}]:{port}", endpoint.host),
        false => format!("{}:{port}", endpoint.host),
    }
}

#[cfg(test)]
mod tests {
    use berth::net::Addr;

    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!(
            parse("tcp://127.0.0.1:9100").unwrap().address,
            Addr::Tcp("127.0.0.1:9100".parse().unwrap())
        );
        assert_eq!(
            parse("tcp://[::1]:9100").unwrap().address,
            Addr::Tcp("[::1]:9100".parse().unwrap())
        );
        assert!(matches!(
            parse("tcp://localhost:9100").unwrap().address,
            Addr::Tcp(a) if a.port() == 9100
        ));
        let unix = parse("unix:///tmp/b.sock").unwrap();
        assert_eq!(unix.address, Addr::Unix("/tmp/b.sock".into()));
        assert_eq!(unix.to_string(), "unix:///tmp/b.sock");
        let ws = parse("ws://localhost:9000/ws/echo").unwrap();
        assert_eq!(ws.websocket.as_deref(), Some("/ws/echo"));
        assert_eq!(authority(&ws), "localhost:9000");
        let ws = parse("ws://[::1]:9000").unwrap();
        assert_eq!(ws.websocket.as_deref(), Some("/ws/relay"));
        assert_eq!(authority(&ws), "[::1]:9000");
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
            "tls://127.0.0.1:9100",
            "wss://127.0.0.1:9100",
            "quic://127.0.0.1:9100",
            "http://127.0.0.1:9100/",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
