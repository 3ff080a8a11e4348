//! Whole-message receipt (issue 15): a message up to `max_held` that does not arrive in one
//! read is assembled before the application sees any of it, within a budget of held bytes
//! shared by the engine's clients.
//!
//! Why: a streaming echo answers while the message is still arriving. A blocking client that
//! sends a whole message before it reads (`sendall` then `recv`, as FI-ASockIOCore's users and
//! ZeroMQ's do) does not read that answer, so its queue fills, backpressure stops reading it,
//! and both sides wait for each other for good. Received whole, the message is answered only
//! after its last byte, when such a client reads.
//!
//! The budget (`max_held_total`) keeps this from becoming unbounded memory: a client whose
//! message does not fit what is left is paused (its socket not read, so the kernel pushes back
//! on it) and waits in line until enough held bytes are delivered. One message may exceed the
//! budget when nothing else is held, so every message within the limits gets through; a client
//! waiting its turn holds at most the rest of one read.
//!
//! A delivered message often lives on as its answer in a queue (an echo of 64 MiB is 64 MiB of
//! output): when delivering it left its sender paused by backpressure, its bytes go back to the
//! budget only once that sender is read again, i.e. once the queue has drained. So the budget
//! bounds what is held and what its answers queue, not just the former.

use berth_proto::msg::Piece;

use super::{ClientId, Core, Sink};
use crate::msg::client::Hold;

/// Assembly buffers up to this size are kept for the client's next message; bigger ones are
/// freed once delivered.
const KEEP_BUFFER: usize = 1 << 20;
/// Buffers from this size up are asked to be backed by huge pages (see `sys::mem`).
const HUGE_FROM: usize = 4 << 20;

/// Makes room for a held message of `len` bytes.
fn reserve_for(buf: &mut Vec<u8>, len: u64) {
    let want = len as usize - buf.len();
    buf.reserve_exact(want);
    if buf.capacity() >= HUGE_FROM {
        crate::sys::mem::advise_huge_pages(buf);
    }
}

impl Core {
    /// Starts receiving a message of `len` bytes whole: counted against the budget if it fits,
    /// else the client stops being read until it does.
    pub(super) fn begin_hold(&mut self, id: ClientId, len: u64) {
        let reserved = self.try_reserve(len);
        let Some(c) = self.clients.get_mut(id.key()).filter(|c| c.gen == id.gen()) else {
            return;
        };
        c.assembling.clear();
        if reserved {
            reserve_for(&mut c.assembling, len);
        } else {
            c.paused = true;
            self.held_waiters.push_back(id);
        }
        c.hold = Some(Hold { len, reserved });
    }

    /// Whether `len` more bytes may be held now.
    fn try_reserve(&mut self, len: u64) -> bool {
        if self.held_used == 0 || self.held_used + len <= self.config.max_held_total {
            self.held_used += len;
            self.stats.held(self.held_used);
            true
        } else {
            false
        }
    }

    /// Bytes of a held message, as they arrive.
    pub(super) fn hold_chunk(&mut self, id: ClientId, bytes: &[u8]) {
        if let Some(c) = self.get_mut(id) {
            c.assembling.extend_from_slice(bytes);
        }
    }

    /// The held message is complete: hands it over (in pieces to a streaming sink, whole to
    /// the others) and gives its bytes back to the budget.
    pub(super) fn deliver_held(&mut self, id: ClientId, sink: &mut dyn Sink) {
        let Some(c) = self.get_mut(id) else { return };
        let Some(hold) = c.hold.take() else { return };
        let whole = std::mem::take(&mut c.assembling);
        if sink.streams() {
            sink.piece(self, id, Piece::Start(hold.len));
            if !whole.is_empty() {
                sink.piece(self, id, Piece::Chunk(&whole));
            }
            sink.piece(self, id, Piece::End);
        } else {
            sink.message(self, id, &whole);
        }
        if hold.reserved {
            match self.get_mut(id) {
                // What it sent now fills a queue (its own, for an echo) over `out_high`: the
                // bytes live on there, so the budget gets them back only once that queue has
                // drained enough to read this client again.
                Some(c) if c.paused => c.held_debt += hold.len,
                _ => self.release(hold.len),
            }
        }
        if whole.capacity() <= KEEP_BUFFER {
            if let Some(c) = self.get_mut(id) {
                let mut whole = whole;
                whole.clear();
                c.assembling = whole;
            }
        }
    }

    /// Forgets a held message that will not be completed (the client is ending or gone), and
    /// any debt.
    pub(super) fn drop_hold(&mut self, id: ClientId) {
        let Some(c) = self.get_mut(id) else { return };
        let mut back = std::mem::take(&mut c.held_debt);
        if let Some(hold) = c.hold.take() {
            c.assembling = Vec::new();
            if hold.reserved {
                back += hold.len;
            }
        }
        if back > 0 {
            self.release(back);
        }
    }

    /// Pays back a client's debt once it is read again.
    pub(super) fn repay(&mut self, id: ClientId) {
        if let Some(debt) = self.get_mut(id).map(|c| std::mem::take(&mut c.held_debt)) {
            if debt > 0 {
                self.release(debt);
            }
        }
    }

    /// Gives `len` bytes back to the budget and lets waiting clients in, in order, while they
    /// fit.
    pub(super) fn release(&mut self, len: u64) {
        self.held_used -= len;
        while let Some(&w) = self.held_waiters.front() {
            let Some(want) = self
                .get(w)
                .and_then(|c| c.hold)
                .filter(|h| !h.reserved)
                .map(|h| h.len)
            else {
                // Gone, or no longer waiting.
                self.held_waiters.pop_front();
                continue;
            };
            if !self.try_reserve(want) {
                return;
            }
            self.held_waiters.pop_front();
            let c = self.get_mut(w).expect("checked above");
            let hold = c.hold.as_mut().expect("checked above");
            hold.reserved = true;
            reserve_for(&mut c.assembling, want);
            c.paused = false;
            self.resumed.push(w);
        }
    }
}
