//! The UDP sockets of QUIC: binding a listener's, one per event loop, all on one port through
//! `SO_REUSEPORT` (the kernel then keeps each client address on one of them: see the module
//! docs of `drive::quic`), bound with `net::bind_udp`, which sets the options through socket2;
//! and [`QuicSocket`], one socket's datagrams in and out through quinn-udp, which the server's
//! endpoints and the client role's driver (`berth bench --h3`) both use.
//!
//! Whose port it is, as for TCP (`net::listen`): `SO_REUSEPORT` lets any socket of the same
//! user join a port, so unless told to share it (`ListenConfig::exclusive` off: `--reuse-port`)
//! berth first binds a probe without the option, which the kernel refuses while anyone has the
//! port, and only then its own sockets.

use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::ops::Range;
use std::time::Instant;

use quinn_proto::EcnCodepoint;
use quinn_udp::{RecvMeta, UdpSocketState};

use crate::net::{bind_udp, size_quic_buffers, Addr, BindError, ListenConfig};

/// The largest UDP payload (a datagram bigger than any QUIC packet is read whole, then dropped
/// by QUIC).
const MAX_DATAGRAM: usize = 65_527;

/// The largest datagram a peer sends: quinn-proto's default `max_udp_payload_size`, which it
/// announces to peers. A receive buffer of this times the GRO segment count holds any batch
/// the kernel coalesces (quinn-udp turns UDP_GRO on where it can).
const MAX_PEER_DATAGRAM: usize = 1472;

/// Most bytes one UDP send carries over IPv4 (65,535 less the IP and UDP headers).
const MAX_UDP_SEND: usize = 65_507;

/// Datagrams in one GSO `sendmsg` for a connection whose packets are up to `mtu` bytes: as
/// many as the socket takes (`max_segments`, quinn-udp's `max_gso_segments`), but no more than
/// one UDP send holds. The kernel refuses a larger send whole (EMSGSIZE) and quinn-udp drops
/// it, as UDP may, so QUIC saw the burst lost only when its loss timer fired: ~25 ms of
/// silence each time, about once a MiB (64 packets of 1,452 bytes are 92,928 bytes).
pub fn gso_batch(max_segments: usize, mtu: u16) -> usize {
    (MAX_UDP_SEND / usize::from(mtu).max(1)).clamp(1, max_segments.max(1))
}

/// What a datagram (or a GSO batch of them) is sent with: quinn-proto's `Transmit` without
/// its size.
#[derive(Clone, Copy)]
struct Dest {
    to: SocketAddr,
    ecn: Option<EcnCodepoint>,
    segment_size: Option<usize>,
    src_ip: Option<IpAddr>,
}

/// One read: a datagram, or (GRO) several of `stride` bytes each, the last perhaps shorter, in
/// the socket's buffer ([`QuicSocket::datagram`]).
#[derive(Clone, Copy)]
pub struct Received {
    /// Who sent it.
    pub from: SocketAddr,
    /// The address it was sent to (IP_PKTINFO), answered from.
    pub local: Option<IpAddr>,
    /// Its ECN marks.
    pub ecn: Option<EcnCodepoint>,
    len: usize,
    stride: usize,
}

impl Received {
    /// The bytes read, every datagram's together.
    pub fn bytes(&self) -> usize {
        self.len
    }

    /// Where each datagram of the read lies in the socket's buffer.
    pub fn datagrams(&self) -> impl Iterator<Item = Range<usize>> {
        let (len, stride) = (self.len, self.stride.max(1));
        (0..len)
            .step_by(stride)
            .map(move |at| at..(at + stride).min(len))
    }
}

/// One QUIC endpoint's UDP socket, through quinn-udp: a connection's burst leaves in one
/// `sendmsg` (UDP GSO, within one UDP send: [`gso_batch`]), reads take GRO batches apart, the
/// socket sets don't-fragment where it can (so that quinn-proto may probe for a larger MTU
/// than 1,200), its buffers are 4 MiB each way (`net::size_quic_buffers`), and a send the socket
/// refuses because it is full is kept, and sent first once it is writable.
pub struct QuicSocket {
    socket: mio::net::UdpSocket,
    udp: UdpSocketState,
    recv_buf: Vec<u8>,
    /// A datagram (or GSO batch) the socket would not take (it was full).
    blocked: Option<(Dest, Vec<u8>)>,
    /// Where [`Self::transmit`] has quinn-proto write.
    transmit_buf: Vec<u8>,
}

impl QuicSocket {
    /// Takes a bound, non-blocking socket.
    pub fn new(socket: UdpSocket) -> io::Result<QuicSocket> {
        size_quic_buffers(&socket)?;
        let udp = UdpSocketState::new((&socket).into())?;
        let recv_len = MAX_DATAGRAM.max(MAX_PEER_DATAGRAM * udp.gro_segments());
        Ok(QuicSocket {
            socket: mio::net::UdpSocket::from_std(socket),
            udp,
            recv_buf: vec![0; recv_len],
            blocked: None,
            transmit_buf: Vec::new(),
        })
    }

    /// The socket, to register with a poll (readable, and writable for [`Self::resend`]).
    pub fn source(&mut self) -> &mut mio::net::UdpSocket {
        &mut self.socket
    }

    /// Whether the kernel may fragment what is sent: MTU discovery runs only where it may not
    /// (a probe bigger than the path must be lost, not fragmented).
    pub fn may_fragment(&self) -> bool {
        self.udp.may_fragment()
    }

    /// Datagrams one `poll_transmit` may put in a send for a connection of this `mtu`.
    pub fn batch(&self, mtu: u16) -> usize {
        gso_batch(self.udp.max_gso_segments(), mtu)
    }

    /// A send is waiting for the socket to have room.
    pub fn is_blocked(&self) -> bool {
        self.blocked.is_some()
    }

    /// Sends what quinn-proto made (`bytes`, as `t` says); false if the socket was full, and
    /// the send is kept for [`Self::resend`] (or another was kept already).
    pub fn send(&mut self, t: &quinn_proto::Transmit, bytes: &[u8]) -> bool {
        let dest = Dest {
            to: t.destination,
            ecn: t.ecn,
            segment_size: t.segment_size,
            src_ip: t.src_ip,
        };
        self.send_dest(dest, bytes)
    }

    fn send_dest(&mut self, dest: Dest, bytes: &[u8]) -> bool {
        if self.blocked.is_some() {
            return false;
        }
        let transmit = quinn_udp::Transmit {
            destination: dest.to,
            ecn: dest
                .ecn
                .and_then(|e| quinn_udp::EcnCodepoint::from_bits(e as u8)),
            contents: bytes,
            segment_size: dest.segment_size,
            src_ip: dest.src_ip,
        };
        loop {
            // quinn-udp's `send` drops what UDP may drop (an error other than a full socket
            // is logged once in a while, and QUIC sends again what mattered), and turns GSO
            // off for good where the kernel or the device refuses it.
            match self.udp.send((&self.socket).into(), &transmit) {
                Ok(()) => return true,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.blocked = Some((dest, bytes.to_vec()));
                    return false;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    log::debug!("QUIC: send to {}: {e}", dest.to);
                    return true;
                }
            }
        }
    }

    /// Sends what connection `quic` has to send, a GSO batch at a time, until it has nothing
    /// left or the socket is full: false then (the rest waits for [`Self::resend`]).
    pub fn transmit(&mut self, quic: &mut quinn_proto::Connection, now: Instant) -> bool {
        let mut buf = std::mem::take(&mut self.transmit_buf);
        let mut room = true;
        while room {
            if self.blocked.is_some() {
                room = false;
                break;
            }
            buf.clear();
            let batch = self.batch(quic.current_mtu());
            let Some(t) = quic.poll_transmit(now, batch, &mut buf) else {
                break;
            };
            room = self.send(&t, &buf[..t.size]);
        }
        self.transmit_buf = buf;
        room
    }

    /// The socket is writable: the send it refused goes first. False if it is still full.
    pub fn resend(&mut self) -> bool {
        match self.blocked.take() {
            Some((dest, bytes)) => self.send_dest(dest, &bytes),
            None => true,
        }
    }

    /// Reads one datagram or GRO batch into the socket's buffer: `Ok(None)` once the socket is
    /// drained. An error is one the socket reports (an ICMP error from an earlier send).
    pub fn recv(&mut self) -> io::Result<Option<Received>> {
        loop {
            let mut meta = [RecvMeta::default()];
            let got = {
                let mut bufs = [IoSliceMut::new(&mut self.recv_buf)];
                self.udp.recv((&self.socket).into(), &mut bufs, &mut meta)
            };
            return match got {
                Ok(_) => {
                    let m = meta[0];
                    Ok(Some(Received {
                        from: m.addr,
                        local: m.dst_ip,
                        ecn: m.ecn.and_then(|e| EcnCodepoint::from_bits(e as u8)),
                        len: m.len,
                        stride: if m.stride == 0 { m.len } else { m.stride },
                    }))
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => Err(e),
            };
        }
    }

    /// The bytes of one datagram of the last read ([`Received::datagrams`]).
    pub fn datagram(&self, at: Range<usize>) -> &[u8] {
        &self.recv_buf[at]
    }
}

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

    #[test]
    fn a_gso_send_stays_within_one_udp_send() {
        assert_eq!(gso_batch(64, 1452), 45);
        assert_eq!(gso_batch(64, 1200), 54);
        assert_eq!(gso_batch(10, 1200), 10);
        assert_eq!(gso_batch(1, 1452), 1);
        assert_eq!(gso_batch(0, 0), 1);
        assert!(gso_batch(64, 1452) * 1452 <= 65_507);
    }

    #[test]
    fn a_read_is_split_into_its_datagrams() {
        let r = Received {
            from: "127.0.0.1:1".parse().unwrap(),
            local: None,
            ecn: None,
            len: 2500,
            stride: 1200,
        };
        let got: Vec<_> = r.datagrams().collect();
        assert_eq!(got, vec![0..1200, 1200..2400, 2400..2500]);
    }
}
