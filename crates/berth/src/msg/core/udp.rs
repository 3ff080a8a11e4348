//! UDP peers (docs/msg-protocol.md §6): a datagram is one message after its kind byte;
//! `H` registers the sending address under a keyword (answered `O` or `N`, again for every
//! repeated `H` so a lost answer costs one retry), `D` carries data, `B` says goodbye.

use std::io;
use std::net::SocketAddr;

use berth_proto::msg::handshake::{encode_refusal, parse_keyword_with};
use berth_proto::msg::{Keyword, Peer, Refusal, Transport};

use super::{ClientId, Core, Io, ListenSock, Sink, MAX_DATAGRAM};
use crate::msg::outq::Framing;

impl Core {
    pub(super) fn receive_datagrams(&mut self, index: usize, sink: &mut dyn Sink) {
        let mut buf = std::mem::take(&mut self.scratch);
        buf.resize(MAX_DATAGRAM + 1, 0);
        while let ListenSock::Udp(sock) = &self.listeners[index].sock {
            match sock.recv_from(&mut buf) {
                Ok((n, from)) => self.datagram(index, from, &buf[..n], sink),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // ICMP errors for earlier sends surface here; they concern no one now.
                Err(e) => log::debug!("{}: {e}", self.listeners[index].endpoint),
            }
        }
        self.scratch = buf;
    }

    fn datagram(&mut self, index: usize, from: SocketAddr, data: &[u8], sink: &mut dyn Sink) {
        let known = self.listeners[index].udp_peers.get(&from).copied();
        let known = known.map(|key| self.clients[key].id(key));
        match (data.first(), known) {
            (Some(b'H'), _) => self.udp_hello(index, from, &data[1..], known),
            (Some(b'D'), Some(id)) => {
                let at = self.now + self.config.udp_idle;
                self.wheel.set(id.key(), Some(at));
                self.stats.message(data.len() - 1);
                self.source = Some(id);
                self.whole_or_pieces(id, &data[1..], sink);
                self.source = None;
            }
            (Some(b'B'), Some(id)) => self.remove(id),
            _ => self.stats.udp_dropped(),
        }
    }

    fn udp_hello(
        &mut self,
        index: usize,
        from: SocketAddr,
        keyword: &[u8],
        known: Option<ClientId>,
    ) {
        self.stats.connection();
        let parsed = parse_keyword_with(keyword, self.config.policy.names);
        let answer: Result<(), (Refusal, String)> = match known {
            // A repeated hello (our `O` was lost): the same answer again.
            Some(id) => {
                let same = match &parsed {
                    Ok(Keyword::Named(n)) => self.get(id).and_then(|c| c.name.as_ref()) == Some(n),
                    Ok(Keyword::Anonymous) => self.get(id).is_some_and(|c| c.name.is_none()),
                    Err(_) => false,
                };
                if same {
                    Ok(())
                } else {
                    Err((
                        Refusal::NameTaken,
                        "this address is registered under another keyword".to_owned(),
                    ))
                }
            }
            None if self.clients.len() >= self.config.sizing.capacity => Err((
                Refusal::Capacity,
                format!(
                    "the server holds its limit of {} clients",
                    self.config.sizing.capacity
                ),
            )),
            None => {
                let peer = Peer {
                    transport: Transport::Udp,
                    ip: Some(from.ip()),
                };
                let io = Io::Udp {
                    listener: index,
                    addr: from,
                };
                match self.insert(io, peer, Some(index), Framing::Datagram) {
                    None => Err((Refusal::Capacity, "no room for another client".to_owned())),
                    Some(id) => match self.decide(id, parsed) {
                        Ok((name, arrival)) if self.admit(id, name.clone(), arrival) => {
                            self.listeners[index].udp_peers.insert(from, id.key());
                            let at = self.now + self.config.udp_idle;
                            self.wheel.set(id.key(), Some(at));
                            Ok(())
                        }
                        Ok((name, _)) => {
                            self.clients.remove(id.key());
                            let name = name.unwrap_or_default();
                            Err((Refusal::NameTaken, super::admit::held(&name)))
                        }
                        Err(refusal) => {
                            self.clients.remove(id.key());
                            Err(refusal)
                        }
                    },
                }
            }
        };
        let ListenSock::Udp(sock) = &self.listeners[index].sock else {
            return;
        };
        let mut out = Vec::new();
        match answer {
            Ok(()) => out.push(b'O'),
            Err((r, text)) => {
                self.stats.refused(r);
                encode_refusal(r, &text, &mut out);
                // The datagram form carries the control payload without the length field.
                out.drain(..8);
                out.insert(0, b'N');
            }
        }
        // Best effort: a lost answer is recovered by the client's repeated hello.
        let _ = sock.send_to(&out, from);
    }
}
