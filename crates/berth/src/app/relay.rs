//! The message demo (`berth msg serve`): echo, and relay to named clients
//! (docs/msg-protocol.md §9). A message starting `@NAME ` goes to the client named `NAME`
//! with the prefix replaced by `@SENDER `; anything else comes back to its sender.
//!
//! It streams: only the first 257 bytes of a message (enough for the longest prefix) are held
//! before it knows where the message goes; the rest passes through as it arrives, so a 1 GiB
//! message crosses the server in bounded memory. A target already receiving another streamed
//! message gets this one whole, queued behind it, if it is at most `hold_limit` bytes.

use std::collections::HashMap;

use berth_proto::msg::handshake::MAX_NAME;

use crate::msg::{ClientId, MsgHandler, Out, Piece};

/// Longest prefix: `@`, a name, a space.
const PREFIX_MAX: usize = 1 + MAX_NAME + 1;

/// Where the rest of a client's current message goes.
enum Incoming {
    /// Reading the first bytes to decide.
    Head { len: u64, head: Vec<u8> },
    /// Streaming to `to`.
    Pass { to: ClientId },
    /// `to` is busy with another stream: assemble, then queue whole.
    Hold { to: ClientId, buf: Vec<u8> },
    /// Nowhere: the target is unknown or gone.
    Drop,
}

/// The echo and relay service.
pub struct EchoRelay {
    incoming: HashMap<ClientId, Incoming>,
    /// Largest message assembled for a busy target.
    hold_limit: u64,
}

impl EchoRelay {
    /// A service assembling at most `hold_limit` bytes for a busy target.
    pub fn new(hold_limit: u64) -> EchoRelay {
        EchoRelay {
            incoming: HashMap::new(),
            hold_limit,
        }
    }

    /// Decides where a message goes from its first bytes, and sends those on.
    fn route(&mut self, from: ClientId, len: u64, head: &[u8], out: &mut Out<'_>) -> Incoming {
        let relay = (head.first() == Some(&b'@'))
            .then(|| head.iter().position(|&b| b == b' '))
            .flatten()
            .filter(|&space| space > 1)
            .and_then(|space| Some((std::str::from_utf8(&head[1..space]).ok()?, space)));
        let (to, prefix, body) = match relay {
            Some((name, space)) => match out.client(name) {
                Some(to) => {
                    let sender = match out.name(from) {
                        Some(n) => format!("@{n} "),
                        None => format!("@{from} "),
                    };
                    (to, sender.into_bytes(), &head[space + 1..])
                }
                None => {
                    out.send(from, format!("@! no client named {name}").as_bytes());
                    return Incoming::Drop;
                }
            },
            None => (from, Vec::new(), head),
        };
        let dropped = (head.len() - body.len()) as u64;
        let total = len - dropped + prefix.len() as u64;
        if total > to.max_message() {
            // A UDP client: the message fits no datagram. Say so rather than lose it.
            let text = format!(
                "@! a message of {total} bytes cannot reach a UDP client (at most {})",
                to.max_message()
            );
            out.send(from, text.as_bytes());
            return Incoming::Drop;
        }
        if out.open_stream(to, total) {
            out.stream_chunk(to, &prefix);
            out.stream_chunk(to, body);
            return Incoming::Pass { to };
        }
        if total > self.hold_limit {
            let text = "@! the target is receiving another large message; try again";
            out.send(from, text.as_bytes());
            return Incoming::Drop;
        }
        let mut buf = Vec::with_capacity(total.min(1 << 20) as usize);
        buf.extend_from_slice(&prefix);
        buf.extend_from_slice(body);
        Incoming::Hold { to, buf }
    }

    /// Takes payload bytes in the current state.
    fn take(&mut self, from: ClientId, mut bytes: &[u8], out: &mut Out<'_>) {
        while !bytes.is_empty() {
            let Some(state) = self.incoming.get_mut(&from) else {
                return;
            };
            match state {
                Incoming::Head { len, head } => {
                    let want = (*len).min(PREFIX_MAX as u64) as usize;
                    let n = (want - head.len()).min(bytes.len());
                    head.extend_from_slice(&bytes[..n]);
                    bytes = &bytes[n..];
                    if head.len() == want {
                        let (len, head) = (*len, std::mem::take(head));
                        let next = self.route(from, len, &head, out);
                        self.incoming.insert(from, next);
                    }
                }
                Incoming::Pass { to } => {
                    if !out.stream_chunk(*to, bytes) {
                        *state = Incoming::Drop;
                    }
                    return;
                }
                Incoming::Hold { buf, .. } => {
                    buf.extend_from_slice(bytes);
                    return;
                }
                Incoming::Drop => return,
            }
        }
    }
}

impl MsgHandler for EchoRelay {
    fn streams(&self) -> bool {
        true
    }

    fn on_data(&mut self, client: ClientId, msg: &[u8], out: &mut Out<'_>) {
        // Only reached if the engine delivers whole messages anyway; same routing.
        self.on_piece(client, Piece::Start(msg.len() as u64), out);
        self.on_piece(client, Piece::Chunk(msg), out);
        self.on_piece(client, Piece::End, out);
    }

    fn on_whole(&mut self, client: ClientId, msg: Vec<u8>, out: &mut Out<'_>) {
        if msg.first() == Some(&b'@') {
            // A relay: routed (and its prefix rewritten) as pieces.
            self.on_piece(client, Piece::Start(msg.len() as u64), out);
            self.on_piece(client, Piece::Chunk(&msg), out);
            self.on_piece(client, Piece::End, out);
        } else {
            // An echo: the buffer itself is queued, not a copy of it.
            out.send_owned(client, msg);
        }
    }

    fn on_piece(&mut self, client: ClientId, piece: Piece<'_>, out: &mut Out<'_>) {
        match piece {
            Piece::Start(0) => {
                out.send(client, b"");
                self.incoming.insert(client, Incoming::Drop);
            }
            Piece::Start(len) => {
                let head = Vec::with_capacity(PREFIX_MAX.min(len as usize));
                self.incoming.insert(client, Incoming::Head { len, head });
            }
            Piece::Chunk(bytes) => self.take(client, bytes, out),
            Piece::End | Piece::Control(_) => {
                if let Some(Incoming::Hold { to, buf }) = self.incoming.remove(&client) {
                    out.send_owned(to, buf);
                }
            }
        }
    }

    fn on_connection_lost(&mut self, client: ClientId, _: Option<&str>, out: &mut Out<'_>) {
        // A message it was streaming to someone will never be finished: that stream cannot be
        // resumed, so its receiver is closed (it sees the connection end mid-message).
        if let Some(Incoming::Pass { to }) = self.incoming.remove(&client) {
            if to != client {
                out.close(to);
            }
        }
    }
}
