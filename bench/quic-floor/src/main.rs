//! How many heap bytes an idle QUIC server connection holds in quinn-proto and rustls alone:
//! N clients handshake with one server endpoint in memory (no sockets, no berth), as berth's
//! endpoint would be set up (TLS 1.3 on ring, ALPN h3, 16 request streams and 3
//! unidirectional ones allowed, migration off); the clients are then dropped, and the live
//! heap the server's connections keep is counted by a counting allocator, and divided by N.
//!
//!     cargo run --release -- N

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use quinn_proto::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn_proto::{
    ClientConfig, Connection, ConnectionHandle, DatagramEvent, Dir, Endpoint, EndpointConfig,
    ServerConfig, StreamId, TransportConfig,
};

// The tests' counting allocator (berth's `tests/support`), not a copy of it.
#[path = "../../../crates/berth/tests/support/counting.rs"]
mod counting;

#[global_allocator]
static A: counting::Counting = counting::Counting;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    // `streams`: HTTP/3's streams opened and one request answered, as berth's idle
    // connections in idle.py had (else the handshake alone).
    let streams = std::env::args().nth(2).as_deref() == Some("streams");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let der = cert.cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![der.clone()], key)
        .unwrap();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    tls.max_early_data_size = 0;
    let mut server_config =
        ServerConfig::with_crypto(Arc::new(QuicServerConfig::try_from(tls).unwrap()));
    let mut transport = TransportConfig::default();
    transport
        .max_concurrent_bidi_streams(16u32.into())
        .max_concurrent_uni_streams(3u32.into());
    server_config.transport_config(Arc::new(transport));
    server_config.migration(false);

    let mut roots = rustls::RootCertStore::empty();
    roots.add(der).unwrap();
    let mut client_tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client_tls.alpn_protocols = vec![b"h3".to_vec()];
    let client_config =
        ClientConfig::new(Arc::new(QuicClientConfig::try_from(client_tls).unwrap()));

    let server_addr: SocketAddr = "127.0.0.1:4433".parse().unwrap();
    let mut server = Endpoint::new(
        Arc::new(EndpointConfig::default()),
        Some(Arc::new(server_config)),
        true,
        None,
    );
    let mut conns: Vec<(ConnectionHandle, Connection)> = Vec::with_capacity(n);
    let mut now = Instant::now();
    let before = counting::live_bytes();
    {
        let mut client = Endpoint::new(Arc::new(EndpointConfig::default()), None, true, None);
        for i in 0..n {
            let client_addr: SocketAddr = format!("127.0.0.2:{}", 10_000 + i).parse().unwrap();
            let (ch, mut c) = client
                .connect(now, client_config.clone(), server_addr, "localhost")
                .unwrap();
            let mut server_side = None;
            // Carries the datagrams both ways until both sides are quiet.
            macro_rules! pump {
                () => {
                    pump(
                        &mut client,
                        ch,
                        &mut c,
                        &mut server,
                        &mut server_side,
                        client_addr,
                        server_addr,
                        &mut now,
                    )
                };
            }
            pump!();
            assert!(
                !server_of(&mut server_side).is_handshaking(),
                "connection {i} still handshaking"
            );
            if streams {
                // As an HTTP/3 connection that served one request: each side's control and
                // QPACK streams open with a few bytes on them (they stay open), and one request
                // stream, answered and finished.
                for _ in 0..3 {
                    for conn in [&mut c, server_of(&mut server_side)] {
                        let id = conn.streams().open(Dir::Uni).unwrap();
                        conn.send_stream(id).write(&[0; 8]).unwrap();
                    }
                }
                let req = c.streams().open(Dir::Bi).unwrap();
                c.send_stream(req).write(&[0; 40]).unwrap();
                c.send_stream(req).finish().unwrap();
                pump!();
                let s = server_of(&mut server_side);
                read_all(s, Dir::Uni);
                let id = s.streams().accept(Dir::Bi).unwrap();
                drain(s, id);
                s.send_stream(id).write(&[0; 100]).unwrap();
                s.send_stream(id).finish().unwrap();
                pump!();
                read_all(&mut c, Dir::Uni);
                drain(&mut c, req);
                pump!();
            }
            conns.push(server_side.take().expect("kept"));
        }
        // The clients go; only the server's side stays.
        drop(client);
    }
    let after = counting::live_bytes();
    let per = (after - before) as f64 / n as f64;
    println!(
        "{n} idle QUIC server connections (quinn-proto 0.11.19, rustls, ring{}): {per:.0} heap \
         bytes each ({} of them the Connection itself)",
        if streams {
            "; HTTP/3's six streams and one request"
        } else {
            ""
        },
        std::mem::size_of::<(ConnectionHandle, Connection)>()
    );
}

/// The server's side of the connection, once the handshake made it.
fn server_of(side: &mut Option<(ConnectionHandle, Connection)>) -> &mut Connection {
    &mut side.as_mut().expect("the handshake reached the server").1
}

/// Reads what `conn` received on `id`, to the end.
fn drain(conn: &mut Connection, id: StreamId) {
    let mut r = conn.recv_stream(id);
    let mut chunks = r.read(true).unwrap();
    while let Ok(Some(_)) = chunks.next(usize::MAX) {}
    let _ = chunks.finalize();
}

/// Accepts the peer's new streams of `dir` and reads them.
fn read_all(conn: &mut Connection, dir: Dir) {
    while let Some(id) = conn.streams().accept(dir) {
        drain(conn, id);
    }
}

/// Carries datagrams both ways until neither side has anything to send; the server's side
/// of the connection is made by the first datagram that reaches it (`server_side`).
#[allow(clippy::too_many_arguments)]
fn pump(
    client: &mut Endpoint,
    ch: ConnectionHandle,
    c: &mut Connection,
    server: &mut Endpoint,
    server_side: &mut Option<(ConnectionHandle, Connection)>,
    client_addr: SocketAddr,
    server_addr: SocketAddr,
    now: &mut Instant,
) {
    for _ in 0..100 {
        let mut moved = false;
        let mut buf = Vec::new();
        while let Some(t) = c.poll_transmit(*now, 1, &mut buf) {
            moved = true;
            let data = BytesMut::from(&buf[..t.size]);
            buf.clear();
            let mut out = Vec::new();
            match server.handle(*now, client_addr, None, None, data, &mut out) {
                Some(DatagramEvent::NewConnection(incoming)) => {
                    *server_side = Some(server.accept(incoming, *now, &mut out, None).unwrap());
                }
                Some(DatagramEvent::ConnectionEvent(_, e)) => {
                    if let Some((_, s)) = server_side.as_mut() {
                        s.handle_event(e);
                    }
                }
                _ => {}
            }
        }
        if let Some((sh, s)) = server_side.as_mut() {
            while let Some(t) = s.poll_transmit(*now, 1, &mut buf) {
                moved = true;
                let data = BytesMut::from(&buf[..t.size]);
                buf.clear();
                let mut out = Vec::new();
                if let Some(DatagramEvent::ConnectionEvent(_, e)) =
                    client.handle(*now, server_addr, None, None, data, &mut out)
                {
                    c.handle_event(e);
                }
            }
            while let Some(e) = s.poll_endpoint_events() {
                if let Some(e) = server.handle_event(*sh, e) {
                    s.handle_event(e);
                }
            }
            while s.poll().is_some() {}
        }
        while let Some(e) = c.poll_endpoint_events() {
            if let Some(e) = client.handle_event(ch, e) {
                c.handle_event(e);
            }
        }
        while c.poll().is_some() {}
        if !moved {
            break;
        }
        *now += Duration::from_micros(100);
    }
}
