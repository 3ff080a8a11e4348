//! The message demo (`berth msg serve`): echo, and relay to named clients
//! (docs/msg-protocol.md §10). A message starting `@NAME ` goes to the client named `NAME`
//! with the prefix replaced by `@SENDER `; anything else comes back to its sender.
//!
//! Names are bytes, any bytes (issue 15), and both `NAME` and `SENDER` are in the escaped form
//! of docs/msg-protocol.md §2: a name that is printable UTF-8 without a space or a backslash
//! is written as it is (so `@bob hi` works as it always has), a backslash is `\\`, and any
//! byte may be written `\xNN` (a space must be: `@a\x20b hi`). The escaped form holds no
//! space or control character, so `SENDER` ends at the first space, and a reply can copy it as
//! it is: every client can be reached by relay, whatever its name. A `@` message whose target
//! is not such text (not UTF-8, a control character) is echoed like any other.
//!
//! It streams: it holds the first bytes of a message only until it knows where the message
//! goes (the first byte, if it is not `@`; else up to the space after the target, at most
//! `@`, the longest escaped name and a space: about 16 KiB with 4 KiB names), and the rest
//! passes through as it arrives, so a 1 GiB message crosses the server in bounded memory. A
//! target already receiving another streamed message gets this one whole, queued behind it, if
//! it is at most `hold_limit` bytes.
//!
//! A message over `hold_limit` streams to another client only if that client's rule takes it
//! (`NAME:streams=SIZE`); otherwise its sender is answered `@!` (issue 29: a sender that stopped
//! halfway left its receiver inside a frame for ever). If a stream's sender stops before its
//! last byte anyway, the engine completes the frame with zeros and the receiver gets an `@!`
//! message saying so, right behind it.

use std::collections::HashMap;

use berth_proto::msg::name::DEFAULT_MAX_NAME;

use crate::msg::{ClientId, MsgHandler, Name, Out, Piece};

/// Longest prefix for names of up to `max_name` bytes: `@`, the name escaped (at most four
/// bytes, `\xNN`, per byte of it), a space.
fn prefix_max(max_name: usize) -> u64 {
    (max_name as u64).saturating_mul(4).saturating_add(2)
}

/// Where the rest of a client's current message goes.
enum Incoming {
    /// Reading the first bytes to decide (`head` is empty until a read leaves it undecided).
    Head { len: u64, head: Vec<u8> },
    /// Streaming `len` bytes to `to`.
    Pass { to: ClientId, len: u64 },
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
    /// Most bytes held to find a relay's target.
    prefix_max: u64,
}

impl EchoRelay {
    /// A service assembling at most `hold_limit` bytes for a busy target, relaying to names
    /// of up to [`DEFAULT_MAX_NAME`] bytes.
    pub fn new(hold_limit: u64) -> EchoRelay {
        EchoRelay {
            incoming: HashMap::new(),
            hold_limit,
            prefix_max: prefix_max(DEFAULT_MAX_NAME),
        }
    }

    /// Relays to names of up to `max_name` bytes (the server's `--max-name`); a longer target
    /// is not looked for, and the message is echoed.
    pub fn with_max_name(mut self, max_name: usize) -> EchoRelay {
        self.prefix_max = prefix_max(max_name);
        self
    }

    /// Decides where a message goes from its first bytes, and sends those on.
    fn route(&mut self, from: ClientId, len: u64, head: &[u8], out: &mut Out<'_>) -> Incoming {
        let relay = (head.first() == Some(&b'@'))
            .then(|| head.iter().position(|&b| b == b' '))
            .flatten()
            .filter(|&space| space > 1 && Name::is_escaped_text(&head[1..space]));
        let (to, prefix, body, name) = match relay {
            Some(space) => {
                let name = Name::unescape(&head[1..space]);
                match out.client(&name) {
                    Some(to) => {
                        // Escaped (Display), so the receiver can send `@SENDER ...` back.
                        let sender = match out.name(from) {
                            Some(n) => format!("@{n} "),
                            None => format!("@{from} "),
                        };
                        (to, sender.into_bytes(), &head[space + 1..], name)
                    }
                    None => {
                        out.send(from, format!("@! no client named {name}").as_bytes());
                        return Incoming::Drop;
                    }
                }
            }
            None => (from, Vec::new(), head, Name::from("")),
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
            return Incoming::Pass { to, len: total };
        }
        if let Some(limit) = out.stream_refusal(to, total) {
            // Issue 29: over what is held whole, and the target did not say it takes streams
            // this big; streamed, a sender that stops halfway would leave it inside the frame.
            let text = match limit {
                0 => format!(
                    "@! a message of {total} bytes is over what the server holds whole ({}), \
                     and {name} takes no streamed messages",
                    self.hold_limit
                ),
                limit => format!(
                    "@! a message of {total} bytes is over what {name} takes streamed ({limit})"
                ),
            };
            out.send(from, text.as_bytes());
            return Incoming::Drop;
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
                    let len = *len;
                    let want = len.min(self.prefix_max) as usize;
                    let n = (want - head.len()).min(bytes.len());
                    let (new, rest) = bytes.split_at(n);
                    // Enough to decide: not a `@` message, the space after the target (`@`
                    // itself is no space, so only the new bytes need looking at), or as much
                    // as the longest target.
                    let first = head.first().or(new.first());
                    let decided =
                        first != Some(&b'@') || new.contains(&b' ') || head.len() + n == want;
                    if !decided {
                        head.extend_from_slice(new);
                        return;
                    }
                    // Most messages are decided by their first read: routed from it as it
                    // is, without a copy.
                    let next = if head.is_empty() {
                        self.route(from, len, new, out)
                    } else {
                        let mut head = std::mem::take(head);
                        head.extend_from_slice(new);
                        self.route(from, len, &head, out)
                    };
                    self.incoming.insert(from, next);
                    bytes = rest;
                }
                Incoming::Pass { to, .. } => {
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
                let head = Vec::new();
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

    fn on_connection_lost(&mut self, client: ClientId, name: Option<&Name>, out: &mut Out<'_>) {
        // A message it was streaming to someone will never be finished: the engine completed
        // it with zeros (so the receiver's framing survives); the receiver is told which one,
        // right behind it.
        if let Some(Incoming::Pass { to, len }) = self.incoming.remove(&client) {
            if to != client {
                let sender = match name {
                    Some(n) => format!("@{n}"),
                    None => format!("@{client}"),
                };
                let text = format!(
                    "@! the message of {len} bytes from {sender} was cut short: its sender \
                     stopped before the end, and the bytes it did not send came as zeros"
                );
                out.send(to, text.as_bytes());
            }
        }
    }
}
