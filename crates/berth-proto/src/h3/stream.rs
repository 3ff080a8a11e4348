//! Stream types (RFC 9114 §6): the unidirectional stream header, and the rules on which
//! unidirectional streams a peer may open.
//!
//! QUIC stream IDs say who opened a stream and in which directions (RFC 9000 §2.1): bit 0 is
//! the initiator (0 client, 1 server), bit 1 the direction (0 bidirectional). Every
//! client-initiated bidirectional stream is a request stream (RFC 9114 §6.1); every
//! unidirectional stream starts with its type.

use super::error::{is_grease, Error, ErrorCode, H3Error};
use super::varint;
use super::Role;

/// Unidirectional stream types (RFC 9114 §6.2, RFC 9204 §4.2).
pub mod kind {
    /// The control stream (RFC 9114 §6.2.1).
    pub const CONTROL: u64 = 0x00;
    /// A push stream (RFC 9114 §6.2.2), followed by its push ID.
    pub const PUSH: u64 = 0x01;
    /// The QPACK encoder stream (RFC 9204 §4.2).
    pub const QPACK_ENCODER: u64 = 0x02;
    /// The QPACK decoder stream (RFC 9204 §4.2).
    pub const QPACK_DECODER: u64 = 0x03;
}

/// Whether `id` is a client-initiated bidirectional stream: a request stream (RFC 9114 §6.1).
pub fn is_request(id: u64) -> bool {
    id & 0b11 == 0
}

/// Whether `id` is a unidirectional stream.
pub fn is_unidirectional(id: u64) -> bool {
    id & 0b10 != 0
}

/// Whether `id` was opened by `role`.
pub fn opened_by(id: u64, role: Role) -> bool {
    (id & 1 == 0) == (role == Role::Client)
}

/// What a unidirectional stream carries, from its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UniStream {
    /// The control stream: frames, SETTINGS first.
    Control,
    /// A push stream fulfilling the promise `push_id`: frames.
    Push {
        /// The push ID.
        push_id: u64,
    },
    /// The QPACK encoder stream: encoder instructions.
    QpackEncoder,
    /// The QPACK decoder stream: decoder instructions.
    QpackDecoder,
    /// A type this module does not know, reserved (`0x1f * N + 0x21`, §6.2.3) or an
    /// extension's: its bytes are meaningless here.
    Unknown(u64),
}

impl UniStream {
    /// Reads the header at the front of a unidirectional stream: `Some((type, bytes
    /// used))`, or `None` when the stream has not given enough bytes yet (a push stream's
    /// header is two integers).
    pub fn parse(buf: &[u8]) -> Option<(UniStream, usize)> {
        let (ty, n) = varint::read(buf)?;
        Some(match ty {
            kind::CONTROL => (UniStream::Control, n),
            kind::PUSH => {
                let (push_id, m) = varint::read(&buf[n..])?;
                (UniStream::Push { push_id }, n + m)
            }
            kind::QPACK_ENCODER => (UniStream::QpackEncoder, n),
            kind::QPACK_DECODER => (UniStream::QpackDecoder, n),
            other => (UniStream::Unknown(other), n),
        })
    }

    /// The stream type.
    pub fn kind(&self) -> u64 {
        match *self {
            UniStream::Control => kind::CONTROL,
            UniStream::Push { .. } => kind::PUSH,
            UniStream::QpackEncoder => kind::QPACK_ENCODER,
            UniStream::QpackDecoder => kind::QPACK_DECODER,
            UniStream::Unknown(k) => k,
        }
    }

    /// Appends the header. An `Unknown` type must be a reserved one (grease, §6.2.3), and
    /// integers past 2^62 - 1 cannot be written: both are [`Error::Misuse`].
    pub fn write(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        match *self {
            UniStream::Unknown(k) if !is_grease(k) => {
                return Err(Error::Misuse("an unknown stream type that is not reserved"))
            }
            UniStream::Push { push_id } if push_id > varint::MAX => {
                return Err(Error::Misuse("a push ID past 2^62 - 1"))
            }
            _ => {}
        }
        varint::write(self.kind(), out);
        if let UniStream::Push { push_id } = *self {
            varint::write(push_id, out);
        }
        Ok(())
    }

    /// Whether the connection cannot live without it: closing it is a connection error of
    /// type H3_CLOSED_CRITICAL_STREAM (RFC 9114 §6.2.1, RFC 9204 §4.2).
    pub fn is_critical(&self) -> bool {
        matches!(
            self,
            UniStream::Control | UniStream::QpackEncoder | UniStream::QpackDecoder
        )
    }
}

/// What to do with a peer's unidirectional stream once its header is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accept {
    /// Read it: its bytes go to the control frame reader, the QPACK decoder (the peer's
    /// encoder stream) or encoder (the peer's decoder stream), or a push's frame reader.
    Read(UniStream),
    /// A type with no meaning here: stop reading it with STOP_SENDING and this code
    /// (RFC 9114 §6.2: "SHOULD use the H3_STREAM_CREATION_ERROR error code"); never a
    /// connection error.
    Ignore(ErrorCode),
}

/// The peer's unidirectional streams so far, for the rules of RFC 9114 §6.2 and RFC 9204
/// §4.2: one control, one encoder and one decoder stream at most, none of them ever closed,
/// and push streams from servers only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerStreams {
    control: bool,
    encoder: bool,
    decoder: bool,
}

impl PeerStreams {
    /// A peer's unidirectional stream of type `ty` arrived at an endpoint of `role`.
    ///
    /// A second control, encoder or decoder stream, or a push stream a client opened, is a
    /// connection error of type H3_STREAM_CREATION_ERROR.
    pub fn open(&mut self, ty: UniStream, role: Role) -> Result<Accept, H3Error> {
        let seen = match ty {
            UniStream::Control => &mut self.control,
            UniStream::QpackEncoder => &mut self.encoder,
            UniStream::QpackDecoder => &mut self.decoder,
            UniStream::Push { .. } if role == Role::Server => {
                return Err(H3Error::conn(
                    ErrorCode::H3_STREAM_CREATION_ERROR,
                    "a push stream from a client",
                ))
            }
            UniStream::Push { .. } => return Ok(Accept::Read(ty)),
            UniStream::Unknown(_) => {
                return Ok(Accept::Ignore(ErrorCode::H3_STREAM_CREATION_ERROR))
            }
        };
        if std::mem::replace(seen, true) {
            return Err(H3Error::conn(
                ErrorCode::H3_STREAM_CREATION_ERROR,
                "a second control, QPACK encoder or QPACK decoder stream",
            ));
        }
        Ok(Accept::Read(ty))
    }

    /// A peer's unidirectional stream of type `ty` ended or was reset: a connection error of
    /// type H3_CLOSED_CRITICAL_STREAM for a critical one.
    pub fn closed(&self, ty: UniStream) -> Result<(), H3Error> {
        if ty.is_critical() {
            return Err(H3Error::conn(
                ErrorCode::H3_CLOSED_CRITICAL_STREAM,
                "the peer closed a control or QPACK stream",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_are_partial() {
        let all = [
            UniStream::Control,
            UniStream::Push { push_id: 0 },
            UniStream::Push { push_id: 1 << 40 },
            UniStream::QpackEncoder,
            UniStream::QpackDecoder,
            UniStream::Unknown(0x21),
            UniStream::Unknown(0x1f * 1000 + 0x21),
        ];
        for ty in all {
            let mut out = Vec::new();
            ty.write(&mut out).unwrap();
            assert_eq!(UniStream::parse(&out), Some((ty, out.len())), "{ty:?}");
            for cut in 0..out.len() {
                assert_eq!(UniStream::parse(&out[..cut]), None, "{ty:?} cut at {cut}");
            }
        }
        // An extension's type this module does not know reads as unknown.
        assert_eq!(
            UniStream::parse(&[0x14]),
            Some((UniStream::Unknown(0x14), 1))
        );
        assert!(UniStream::Unknown(0x14).write(&mut Vec::new()).is_err());
    }

    #[test]
    fn one_critical_stream_of_each_type() {
        for ty in [
            UniStream::Control,
            UniStream::QpackEncoder,
            UniStream::QpackDecoder,
        ] {
            let mut peer = PeerStreams::default();
            assert_eq!(peer.open(ty, Role::Server), Ok(Accept::Read(ty)));
            let e = peer.open(ty, Role::Server).unwrap_err();
            assert_eq!(e.code, ErrorCode::H3_STREAM_CREATION_ERROR);
            assert_eq!(
                peer.closed(ty).unwrap_err().code,
                ErrorCode::H3_CLOSED_CRITICAL_STREAM
            );
        }
    }

    #[test]
    fn pushes_only_from_servers_and_unknown_streams_ignored() {
        let mut peer = PeerStreams::default();
        let push = UniStream::Push { push_id: 3 };
        assert_eq!(
            peer.open(push, Role::Server).unwrap_err().code,
            ErrorCode::H3_STREAM_CREATION_ERROR
        );
        assert_eq!(peer.open(push, Role::Client), Ok(Accept::Read(push)));
        assert_eq!(peer.closed(push), Ok(()));
        for _ in 0..3 {
            assert_eq!(
                peer.open(UniStream::Unknown(0x21), Role::Server),
                Ok(Accept::Ignore(ErrorCode::H3_STREAM_CREATION_ERROR))
            );
        }
    }

    #[test]
    fn stream_ids() {
        assert!(is_request(0) && is_request(4) && !is_request(1) && !is_request(2));
        assert!(is_unidirectional(2) && is_unidirectional(3) && !is_unidirectional(4));
        assert!(opened_by(0, Role::Client) && opened_by(2, Role::Client));
        assert!(opened_by(1, Role::Server) && opened_by(3, Role::Server));
        assert!(!opened_by(3, Role::Client));
    }
}
