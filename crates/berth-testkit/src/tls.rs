//! A TLS client (berth's own connector, rustls) that trusts a test CA.

use std::net::{SocketAddr, TcpStream};
use std::path::Path;

use berth::net::tls::{TlsConnector, TlsStream};

use crate::wait::LIMIT;

/// A TLS connection to `addr` as `127.0.0.1`, trusting `ca`, offering `alpn`, the handshake
/// done; reads time out after [`LIMIT`].
pub fn connect(ca: &Path, alpn: &[&[u8]], addr: SocketAddr) -> TlsStream<TcpStream> {
    let sock = TcpStream::connect(addr).expect("connect");
    sock.set_read_timeout(Some(LIMIT)).unwrap();
    let mut tls = TlsConnector::new(Some(ca), alpn)
        .expect("a TLS connector")
        .connect("127.0.0.1", sock)
        .expect("a TLS client");
    tls.complete_handshake().expect("the TLS handshake");
    tls
}

/// A TLS connection to `addr` presenting the client certificate `identity` (certificate file,
/// key file), trusting `ca`; `Err` with the cause if the handshake fails.
pub fn connect_as(
    ca: &Path,
    identity: (&Path, &Path),
    addr: SocketAddr,
) -> Result<TlsStream<TcpStream>, String> {
    let sock = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(LIMIT)).unwrap();
    let mut tls = TlsConnector::with_identity(Some(ca), &[], identity.0, identity.1)
        .map_err(|e| e.to_string())?
        .connect("127.0.0.1", sock)
        .map_err(|e| e.to_string())?;
    tls.complete_handshake().map_err(|e| e.to_string())?;
    Ok(tls)
}
