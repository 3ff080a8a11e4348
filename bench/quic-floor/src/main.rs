//! How many heap bytes an idle QUIC server connection holds in quinn-proto and rustls alone:
//! N clients handshake with one server endpoint in memory (no sockets, no berth), as berth's
//! endpoint would be set up (TLS 1.3 on ring, ALPN h3, 16 request streams and 3
//! unidirectional ones allowed, migration off); the clients are then dropped, and the live
//! heap the server's connections keep is counted by a counting allocator, and divided by N.
//!
//!     cargo run --release -- N

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use quinn_proto::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn_proto::{
    ClientConfig, Connection, ConnectionHandle, DatagramEvent, Endpoint, EndpointConfig,
    ServerConfig, TransportConfig, Dir,
};

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Relaxed);
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Relaxed);
        System.realloc(p, l, new)
    }
}

#[global_allocator]
static A: Counting = Counting;

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(200);
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
    let before = LIVE.load(Relaxed);
    {
        let mut client = Endpoint::new(Arc::new(EndpointConfig::default()), None, true, None);
        for i in 0..n {
            let client_addr: SocketAddr = format!("127.0.0.2:{}", 10_000 + i).parse().unwrap();
            let (ch, mut c) = client
                .connect(now, client_config.clone(), server_addr, "localhost")
                .unwrap();
            let mut server_side: Option<(ConnectionHandle, Connection)> = None;
            // Until neither side has anything to send.
            for _ in 0..100 {
                let mut moved = false;
                let mut buf = Vec::new();
                while let Some(t) = c.poll_transmit(now, 1, &mut buf) {
                    moved = true;
                    let data = BytesMut::from(&buf[..t.size]);
                    buf.clear();
                    let mut out = Vec::new();
                    match server.handle(now, client_addr, None, None, data, &mut out) {
                        Some(DatagramEvent::NewConnection(incoming)) => {
                            let (h, s) = server.accept(incoming, now, &mut out, None).unwrap();
                            server_side = Some((h, s));
                        }
                        Some(DatagramEvent::ConnectionEvent(h, e)) => {
                            if let Some((sh, s)) = server_side.as_mut() {
                                assert_eq!(*sh, h);
                                s.handle_event(e);
                            }
                        }
                        _ => {}
                    }
                }
                if let Some((sh, s)) = server_side.as_mut() {
                    while let Some(e) = s.poll_endpoint_events() {
                        if let Some(e) = server.handle_event(*sh, e) {
                            s.handle_event(e);
                        }
                    }
                    while let Some(t) = s.poll_transmit(now, 1, &mut buf) {
                        moved = true;
                        let data = BytesMut::from(&buf[..t.size]);
                        buf.clear();
                        let mut out = Vec::new();
                        if let Some(DatagramEvent::ConnectionEvent(h, e)) =
                            client.handle(now, server_addr, None, None, data, &mut out)
                        {
                            assert_eq!(h, ch);
                            c.handle_event(e);
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
                now += Duration::from_micros(100);
            }
            let (sh, mut s) = server_side.expect("the handshake reached the server");
            assert!(!s.is_handshaking(), "connection {i} still handshaking");
            if streams {
                // As an HTTP/3 connection that served one request: each side's control and
                // QPACK streams open with a few bytes on them (they stay open), and one request
                // stream, answered and finished.
                for _ in 0..3 {
                    let id = c.streams().open(Dir::Uni).unwrap();
                    c.send_stream(id).write(&[0; 8]).unwrap();
                    let id = s.streams().open(Dir::Uni).unwrap();
                    s.send_stream(id).write(&[0; 8]).unwrap();
                }
                let req = c.streams().open(Dir::Bi).unwrap();
                c.send_stream(req).write(&[0; 40]).unwrap();
                c.send_stream(req).finish().unwrap();
                pump(&mut client, ch, &mut c, &mut server, sh, &mut s, client_addr, server_addr, &mut now);
                while let Some(id) = s.streams().accept(Dir::Uni) {
                    let mut r = s.recv_stream(id);
                    let mut chunks = r.read(true).unwrap();
                    while let Ok(Some(_)) = chunks.next(usize::MAX) {}
                    let _ = chunks.finalize();
                }
                let id = s.streams().accept(Dir::Bi).unwrap();
                {
                    let mut r = s.recv_stream(id);
                    let mut chunks = r.read(true).unwrap();
                    while let Ok(Some(_)) = chunks.next(usize::MAX) {}
                    let _ = chunks.finalize();
                }
                s.send_stream(id).write(&[0; 100]).unwrap();
                s.send_stream(id).finish().unwrap();
                pump(&mut client, ch, &mut c, &mut server, sh, &mut s, client_addr, server_addr, &mut now);
                while let Some(id) = c.streams().accept(Dir::Uni) {
                    let mut r = c.recv_stream(id);
                    let mut chunks = r.read(true).unwrap();
                    while let Ok(Some(_)) = chunks.next(usize::MAX) {}
                    let _ = chunks.finalize();
                }
                {
                    let mut r = c.recv_stream(req);
                    let mut chunks = r.read(true).unwrap();
                    while let Ok(Some(_)) = chunks.next(usize::MAX) {}
                    let _ = chunks.finalize();
                }
                pump(&mut client, ch, &mut c, &mut server, sh, &mut s, client_addr, server_addr, &mut now);
            }
            conns.push((sh, s));
        }
        // The clients go; only the server's side stays.
        drop(client);
    }
    let after = LIVE.load(Relaxed);
    let per = (after - before) as f64 / n as f64;
    println!(
        "{n} idle QUIC server connections (quinn-proto {}, rustls, ring{}): {per:.0} heap bytes \
         each ({} of them the Connection itself)",
        "0.11.19",
        if streams { "; HTTP/3's six streams and one request" } else { "" },
        std::mem::size_of::<(ConnectionHandle, Connection)>()
    );
}

/// Carries datagrams both ways until neither side has anything to send.
#[allow(clippy::too_many_arguments)]
fn pump(
    client: &mut Endpoint,
    ch: ConnectionHandle,
    c: &mut Connection,
    server: &mut Endpoint,
    sh: ConnectionHandle,
    s: &mut Connection,
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
            if let Some(DatagramEvent::ConnectionEvent(_, e)) =
                server.handle(*now, client_addr, None, None, data, &mut out)
            {
                s.handle_event(e);
            }
        }
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
        for (end, conn, h) in [(&mut *server, &mut *s, sh), (&mut *client, &mut *c, ch)] {
            while let Some(e) = conn.poll_endpoint_events() {
                if let Some(e) = end.handle_event(h, e) {
                    conn.handle_event(e);
                }
            }
            while conn.poll().is_some() {}
        }
        if !moved {
            break;
        }
        *now += Duration::from_micros(100);
    }
}
