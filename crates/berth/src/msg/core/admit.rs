//! Admission: accepting stream connections (and refusing them at capacity), the handshake
//! decision (policy, listener settings, names in use, claimed atomically), and refusals.

use std::io;

use berth_proto::msg::handshake::encode_refusal;
use berth_proto::msg::{
    Admission, BadName, Ending, Keyword, Listener as ListenerFlags, Name, NameTaken, Peer, Refusal,
    ServerSession, Transport,
};
use mio::{Interest, Token};

use super::{Arrival, Client, ClientId, Core, Io, ListenSock, Note, Phase, Proto, WsPeer};
use crate::msg::directory::Post;
use crate::msg::outq::{Framing, OutQueue};
use crate::net::{Evented, Socket};

impl Core {
    pub(super) fn accept(&mut self, index: usize) {
        loop {
            let listener = &self.listeners[index];
            let accepted = match &listener.sock {
                ListenSock::Tcp(l) => l.accept().map(|(s, a)| (Socket::Tcp(s), Some(a.ip()))),
                ListenSock::Unix(l, _) => l.accept().map(|(s, _)| (Socket::Unix(s), None)),
                ListenSock::Udp(_) | ListenSock::Closed => return,
            };
            // Through the listener's acceptor, as every model's connections are.
            let (stream, ip) =
                match accepted.and_then(|(s, ip)| Ok((listener.transport.accept(s)?, ip))) {
                    Ok(accepted) => accepted,
                    Err(e) => return self.accept_failed(index, e),
                };
            // What the protocol's rules see (`from=tls`...): encrypted or not, then the family.
            let transport = match (stream.tls().is_some(), ip) {
                (true, _) => Transport::Tls,
                (false, Some(_)) => Transport::Tcp,
                (false, None) => Transport::Unix,
            };
            let peer = Peer { transport, ip };
            self.stats.connection();
            let raw = self.listeners[index].endpoint.raw;
            let websocket = self.listeners[index].endpoint.websocket.is_some();
            if self.clients.len() >= self.config.sizing.capacity {
                self.stats.refused(Refusal::Capacity);
                if !raw {
                    let mut stream = stream;
                    let mut out = Vec::new();
                    let text = format!(
                        "the server holds its limit of {} clients",
                        self.config.sizing.capacity
                    );
                    match websocket {
                        true => out = super::ws::busy(&self.http_date()),
                        false => encode_refusal(Refusal::Capacity, &text, &mut out),
                    }
                    // Best effort: a fresh socket's buffer takes a short frame whole.
                    let _ = io::Write::write(&mut stream, &out);
                }
                continue;
            }
            let undecided = self.deciding && !raw && !websocket;
            let (proto, framing) = if raw {
                (Proto::Raw, Framing::Raw)
            } else if undecided {
                (Proto::Undecided, Framing::Frames)
            } else if websocket {
                let ws = WsPeer::new(self.config.max_message);
                (Proto::Ws(Box::new(ws)), Framing::WebSocket)
            } else {
                let session = ServerSession::with_names(self.limit, self.config.policy.names);
                (Proto::Server(session), Framing::Frames)
            };
            let io = Io::Stream {
                stream,
                proto,
                hup: false,
                readable: false,
            };
            let Some(id) = self.insert(io, peer, Some(index), framing) else {
                continue;
            };
            if raw {
                self.admit(id, None, Arrival::Anonymous);
            } else {
                // An undecided connection has the handshake's time for its decision and its
                // keyword together.
                let at = self.now + self.config.handshake_timeout;
                self.wheel.set(id.key(), Some(at));
                if undecided {
                    self.undecided.push(id);
                }
            }
        }
    }

    /// Decides how an undecided connection is read: raw (admitted at once, anonymous, its
    /// bytes delivered as they come and its output unframed) or framed (its handshake starts).
    /// `false` if it is gone or was not undecided.
    pub(crate) fn decide_framing(&mut self, id: ClientId, raw: bool) -> bool {
        let limit = self.limit;
        let names = self.config.policy.names;
        let Some(c) = self.get_mut(id) else {
            return false;
        };
        let Io::Stream { proto, .. } = &mut c.io else {
            return false;
        };
        if c.phase != Phase::Handshake || !matches!(proto, Proto::Undecided) {
            return false;
        }
        if raw {
            *proto = Proto::Raw;
            c.out = OutQueue::new(Framing::Raw);
            self.admit(id, None, Arrival::Anonymous);
        } else {
            *proto = Proto::Server(ServerSession::with_names(limit, names));
        }
        // What it sent while undecided is read now.
        self.resumed.push(id);
        true
    }

    /// The address of a TCP (or TLS) client's peer.
    pub(crate) fn peer_addr(&self, id: ClientId) -> Option<std::net::SocketAddr> {
        match &self.get(id)?.io {
            Io::Stream { stream, .. } => stream.socket().peer_addr().ok().flatten(),
            Io::Udp { addr, .. } => Some(*addr),
        }
    }

    pub(super) fn accept_failed(&mut self, index: usize, e: io::Error) {
        match e.kind() {
            io::ErrorKind::WouldBlock => {}
            io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted => self.accept(index),
            _ => log::warn!("{}: accept failed: {e}", self.listeners[index].endpoint),
        }
    }

    /// Adds a client with a stream or UDP address; registers streams with the poll.
    pub(crate) fn insert(
        &mut self,
        mut io: Io,
        peer: Peer,
        listener: Option<usize>,
        framing: Framing,
    ) -> Option<ClientId> {
        let entry = self.clients.vacant_entry();
        let key = entry.key();
        if key >= self.config.sizing.capacity {
            return None;
        }
        if let Io::Stream { stream, .. } = &mut io {
            if let Err(e) = self.registry.register(
                stream.source(),
                Token(key),
                Interest::READABLE | Interest::WRITABLE,
            ) {
                log::warn!("cannot register a connection: {e}");
                return None;
            }
        }
        let datagram = match framing {
            Framing::Datagram => ClientId::DATAGRAM,
            _ => 0,
        };
        let gen = self.next_gen | datagram | ((self.thread as u32) << 24);
        self.next_gen = (self.next_gen + 1) & ClientId::GEN_MASK;
        self.next_gen = self.next_gen.max(1);
        entry.insert(Client::new(gen, io, peer, listener, OutQueue::new(framing)));
        Some(ClientId::new(key, gen))
    }

    /// Marks a client admitted under `name`; `false` if another thread claimed the name
    /// between the decision and now. A name whose policy is to replace is taken over from
    /// whoever holds it, who is ended with `name-replaced` after its queued output.
    pub(crate) fn admit(&mut self, id: ClientId, name: Option<Name>, arrival: Arrival) -> bool {
        if let Some(name) = &name {
            if self.config.policy.on_taken(name.as_bytes()) == NameTaken::Replace {
                if let Some(old) = self.directory.take_over(name, id) {
                    log::debug!("client {id} takes the name {name} from {old}");
                    if self.is_remote(old) {
                        self.post(Post::Replaced(old), old);
                    } else {
                        self.name_replaced(old);
                    }
                }
            } else if !self.directory.claim(name, id) {
                return false;
            }
        }
        self.wheel.disarm(id.key());
        let c = self.get_mut(id).expect("admitting a live client");
        c.phase = Phase::Open;
        c.admitted = true;
        c.name = name;
        log::debug!(
            "client {id} admitted: {} ({arrival:?}, {:?})",
            c.shown(),
            c.peer.transport
        );
        self.stats.admitted();
        self.notes.push_back(Note::Connected(id, arrival));
        true
    }

    /// A newcomer took `id`'s name: it gets its queued output, then `name-replaced`.
    pub(crate) fn name_replaced(&mut self, id: ClientId) {
        if self.get(id).is_some_and(|c| c.phase == Phase::Open) {
            self.end(id, Ending::NameReplaced, "a new connection took this name");
        }
    }

    /// Decides on a keyword: the policy, this listener's settings, the names in use.
    pub(super) fn decide(
        &mut self,
        id: ClientId,
        keyword: Result<Keyword, BadName>,
    ) -> Result<(Option<Name>, Arrival), (Refusal, String)> {
        let c = self.get(id).expect("deciding on a live client");
        let (peer, listener) = (c.peer, c.listener);
        let flags = listener.map_or(ListenerFlags::default(), |i| {
            let e = &self.listeners[i].endpoint;
            ListenerFlags {
                no_anonymous: e.no_anonymous,
                expected_only: e.expected_only,
            }
        });
        // The name rule itself was applied by the session (or the UDP hello) as it read the
        // keyword; what it found wrong is the explanation.
        let keyword = keyword.map_err(|bad| {
            log::debug!("client {id} refused: name-invalid: {bad}");
            (Refusal::NameInvalid, bad.to_string())
        })?;
        // The common name of a TLS client's certificate, for a rule that asks for one.
        let cert = match &c.io {
            Io::Stream { stream, .. } => stream.tls().and_then(|t| t.peer_common_name()),
            Io::Udp { .. } => None,
        };
        let directory = &self.directory;
        let cert = cert.as_deref().map(str::as_bytes);
        match self
            .config
            .policy
            .admit_certified(&keyword, peer, flags, cert, |n| {
                directory.lookup(n.as_bytes()).is_some()
            }) {
            Ok(Admission::Expected(name)) => Ok((Some(name), Arrival::Expected)),
            Ok(Admission::Unknown(name)) => Ok((Some(name), Arrival::Unknown)),
            Ok(Admission::Anonymous) => Ok((None, Arrival::Anonymous)),
            Err(r) => {
                let name = match &keyword {
                    Keyword::Named(n) => Some(n),
                    Keyword::Anonymous => None,
                };
                Err((r, why(r, name, peer)))
            }
        }
    }

    pub(super) fn handshake(&mut self, id: ClientId, keyword: Result<Keyword, BadName>) {
        let decision = match self.decide(id, keyword) {
            // Claimed by another thread between the decision and the admission.
            Ok((Some(name), arrival)) if !self.admit(id, Some(name.clone()), arrival) => {
                Err((Refusal::NameTaken, held(&name)))
            }
            Ok((None, arrival)) => {
                self.admit(id, None, arrival);
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(refusal) => Err(refusal),
        };
        match decision {
            Ok(()) => {
                let c = self.get_mut(id).expect("handshake of a live client");
                // A WebSocket client is not told (a refused one gets the close).
                if let Io::Stream {
                    proto: Proto::Server(session),
                    ..
                } = &mut c.io
                {
                    let mut answer = Vec::new();
                    session.accept(&mut answer);
                    // In front of anything the application may already have queued for it.
                    c.out.push_wire(&answer);
                    self.dirty.push(id);
                }
            }
            Err((r, text)) => {
                log::debug!("client {id} refused: {} {text}", r.code());
                self.refuse_now(id, r, &text);
                self.wheel.disarm(id.key());
            }
        }
    }

    pub(super) fn refuse_now(&mut self, id: ClientId, why: Refusal, text: &str) {
        let Some(c) = self.get_mut(id) else { return };
        let mut frame = Vec::new();
        match &mut c.io {
            Io::Stream {
                proto: Proto::Server(session),
                ..
            } => session.refuse(why, text, &mut frame),
            Io::Stream {
                proto: Proto::Ws(ws),
                ..
            } => ws.refuse(why, text, &mut frame),
            _ => {}
        }
        if !frame.is_empty() {
            c.out.push_wire(&frame);
        }
        c.phase = Phase::Closing;
        self.stats.refused(why);
        self.dirty.push(id);
    }
}

/// Most bytes of a name's escaped form quoted in a refusal text: a name may be 4 KiB of
/// bytes that escape to four times that, and a client reads a control frame with a limit
/// (berth's own, 4 KiB).
const NAME_IN_TEXT: usize = 64;

/// The explanation of `name-taken`.
pub(crate) fn held(name: &Name) -> String {
    format!(
        "name {:?} is held by a live connection",
        name.short(NAME_IN_TEXT)
    )
}

/// The explanation sent with a refusal (`name-invalid` is explained by its [`BadName`]).
fn why(r: Refusal, name: Option<&Name>, peer: Peer) -> String {
    let empty = Name::default();
    let name = name.unwrap_or(&empty).short(NAME_IN_TEXT);
    match r {
        Refusal::NameInvalid => "not a name".to_owned(),
        Refusal::AnonymousRefused => "this listener does not accept anonymous clients".to_owned(),
        Refusal::TransportRefused => {
            let transport = format!("{:?}", peer.transport).to_lowercase();
            format!("name {name:?} may not connect over {transport}")
        }
        Refusal::AddressRefused => match peer.ip {
            Some(ip) => format!("name {name:?} may not connect from {ip}"),
            None => format!("name {name:?} may not connect from here"),
        },
        Refusal::CertRefused => {
            format!("name {name:?} needs a TLS client certificate issued to it")
        }
        Refusal::NotExpected => format!("name {name:?} was not expected here"),
        Refusal::NameTaken => format!("name {name:?} is held by a live connection"),
        Refusal::Capacity => "the server is at its client limit".to_owned(),
        Refusal::Timeout => "no keyword in time".to_owned(),
    }
}
