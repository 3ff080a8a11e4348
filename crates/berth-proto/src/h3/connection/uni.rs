//! The client's unidirectional streams (RFC 9114 §6.2, RFC 9204 §4.2): the type first, then
//! the control stream's frames (SETTINGS first, then GOAWAY and what is ignored), the QPACK
//! encoder stream into our decoder and the decoder stream into our encoder. One of each at
//! most (H3_STREAM_CREATION_ERROR), none ever closed (H3_CLOSED_CRITICAL_STREAM); a push
//! stream from a client is an error, an unknown type is stopped and ignored.

use super::*;
use crate::h3::frame::{Event, Frame};
use crate::h3::stream::Accept;

impl Connection {
    /// Reads what a unidirectional stream of the client's brought.
    pub(super) fn read_uni(&mut self, id: u64) -> Result<(), Fail> {
        let max = self.max_section.max(64);
        let Some(u) = self.uni.get_mut(&id) else {
            return Ok(());
        };
        let mut inbox = std::mem::take(&mut u.inbox);
        if let UniKind::Header = u.kind {
            let Some((ty, n)) = UniStream::parse(&inbox) else {
                u.inbox = inbox;
                if u.fin {
                    // Ended before its type: it carried nothing.
                    self.uni.remove(&id);
                }
                return Ok(());
            };
            inbox.drain(..n);
            u.ty = Some(ty);
            u.kind = match self.peer_streams.open(ty, Role::Server)? {
                Accept::Read(UniStream::Control) => {
                    UniKind::Control(FrameReader::new(StreamKind::Control, Role::Server, max))
                }
                Accept::Read(UniStream::QpackEncoder) => UniKind::Encoder,
                Accept::Read(UniStream::QpackDecoder) => UniKind::Decoder,
                Accept::Read(_) => UniKind::Ignored,
                Accept::Ignore(code) => {
                    // §6.2: an unknown type is not an error; its sender is asked to stop.
                    self.actions.push_back(Quic::Stop { stream: id, code });
                    UniKind::Ignored
                }
            };
        }
        match &mut u.kind {
            UniKind::Header | UniKind::Ignored => {}
            UniKind::Encoder => {
                self.decoder
                    .handle_encoder_stream(&inbox)
                    .map_err(qpack_fail)?;
            }
            UniKind::Decoder => {
                self.encoder
                    .handle_decoder_stream(&inbox)
                    .map_err(qpack_fail)?;
            }
            UniKind::Control(reader) => {
                let mut at = 0;
                loop {
                    let (used, ev) = reader.read(&inbox[at..])?;
                    at += used;
                    match ev {
                        None => break,
                        Some(Event::Frame(Frame::Settings(settings))) => {
                            self.peer_settings = Some(settings);
                            // Answers use the static table; the client's limits are
                            // recorded for an encoder that would use more.
                            self.encoder
                                .peer_settings(
                                    settings.qpack_max_table_capacity,
                                    settings.qpack_blocked_streams,
                                )
                                .map_err(qpack_fail)?;
                        }
                        // A client's GOAWAY names a push id (§7.2.6): berth pushes nothing,
                        // and the client opens no more requests.
                        Some(Event::Frame(Frame::Goaway(_))) => self.peer_gone = true,
                        // MAX_PUSH_ID, CANCEL_PUSH: about pushes, which berth never makes.
                        Some(_) => {}
                    }
                }
            }
        }
        let fin = u.fin;
        let ty = u.ty;
        if fin {
            self.uni.remove(&id);
            if let Some(ty) = ty {
                self.peer_streams.closed(ty)?;
            }
        }
        Ok(())
    }
}
