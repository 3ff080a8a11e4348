//! The UDP sockets of a QUIC listener: one per event loop, all on one port through
//! `SO_REUSEPORT` (the kernel then keeps each client address on one of them: see the module
//! docs of `drive::quic`), bound with `net::bind_udp`, which sets the options through socket2.
//!
//! Whose port it is, as for TCP (`net::listen`): `SO_REUSEPORT` lets any socket of the same
//! user join a port, so unless told to share it (`ListenConfig::exclusive` off: `--reuse-port`)
//! berth first binds a probe without the option, which the kernel refuses while anyone has the
//! port, and only then its own sockets.

use std::io;
use std::net::{SocketAddr, UdpSocket};

use crate::net::{bind_udp, size_quic_buffers, Addr, BindError, ListenConfig};

/// Binds `count` non-blocking UDP sockets on `addr` sharing its port (port 0: the kernel picks
/// one, which the others then join). Returns them and the address bound.
pub(crate) fn bind_sockets(
    addr: SocketAddr,
    count: usize,
    listen: &ListenConfig,
) -> Result<(Vec<UdpSocket>, SocketAddr), BindError> {
    let error = |source: io::Error| BindError {
        addr: Addr::Udp(addr),
        source,
    };
    if listen.exclusive && addr.port() != 0 {
        // Dropped at once: it only asks whether the port is free (`BindError` words a refusal
        // as `address udp://... already in use`).
        let probe = bind_udp(addr, false).map_err(error)?;
        drop(probe);
    }
    let first = bind_udp(addr, true).map_err(error)?;
    let bound = first.local_addr().map_err(error)?;
    let mut sockets = Vec::with_capacity(count.max(1));
    sockets.push(first);
    for _ in 1..count.max(1) {
        sockets.push(bind_udp(bound, true).map_err(error)?);
    }
    for socket in &sockets {
        size_quic_buffers(socket).map_err(error)?;
    }
    Ok((sockets, bound))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockets_share_one_port_and_a_taken_port_is_refused() {
        let listen = ListenConfig::default();
        let (sockets, bound) = bind_sockets("127.0.0.1:0".parse().unwrap(), 3, &listen).unwrap();
        assert_eq!(sockets.len(), 3);
        assert_ne!(bound.port(), 0);
        for s in &sockets {
            assert_eq!(s.local_addr().unwrap(), bound);
        }
        let err = bind_sockets(bound, 1, &listen).unwrap_err();
        assert_eq!(err.source.kind(), io::ErrorKind::AddrInUse, "{err}");
        assert!(err.to_string().contains("already in use"), "{err}");
        // Told to share, it joins.
        let shared = ListenConfig {
            exclusive: false,
            ..ListenConfig::default()
        };
        assert!(bind_sockets(bound, 1, &shared).is_ok());
    }
}
