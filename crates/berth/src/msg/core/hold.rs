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
//! budget only once that sender is read again and its own queue is empty (an echo's buffer
//! stays whole in memory until its last byte is written). So the budget bounds what is held
//! and what its answers queue, not just the former.
//!
//! Large buffers are reused: a message of 1 MiB or more reaches a streaming handler as a buffer
//! it owns ([`Sink::whole`]; an echo queues it as it is), and once such a buffer has been
//! written out (or delivered to a handler that takes whole messages) it waits in a pool for the
//! next large message. Fresh memory costs a zeroed page per 4 KiB (and a page fault, but for
//! huge pages), which was most of the cost of a held 64 MiB echo. The pool keeps at most a
//! quarter of `max_held_total` (beside it: the bound on memory is the budget plus that).

use berth_proto::msg::Piece;

use super::{ClientId, Core, Sink};
use crate::msg::client::Hold;
use crate::msg::outq::RECYCLE_FROM;

/// Assembly buffers up to this size are kept by their client for its next message; bigger ones
/// go to the engine's pool once delivered.
const KEEP_BUFFER: usize = 1 << 20;
/// Buffers from this size up are asked to be backed by huge pages (see `sys::mem`).
const HUGE_FROM: usize = 4 << 20;
/// Most buffers the pool keeps.
const POOL_MAX: usize = 64;

/// Makes room in `buf` for a held message of `len` bytes.
fn reserve_for(buf: &mut Vec<u8>, len: u64) {
    buf.clear();
    buf.reserve_exact(len as usize);
    if buf.capacity() >= HUGE_FROM {
        crate::sys::mem::advise_huge_pages(buf);
    }
}

impl Core {
    /// Starts receiving a message of `len` bytes whole: counted against the budget if it fits,
    /// else the client stops being read until it does.
    pub(super) fn begin_hold(&mut self, id: ClientId, len: u64) {
        let granted = self.try_reserve(len);
        let Some(c) = self.clients.get_mut(id.key()).filter(|c| c.gen == id.gen()) else {
            if let Some((charge, buf)) = granted {
                self.pool_put(buf);
                self.release(charge);
            }
            return;
        };
        let reserved = granted.is_some();
        let charge = match granted {
            Some((charge, buf)) => {
                if let Some(buf) = buf {
                    c.assembling = buf;
                }
                reserve_for(&mut c.assembling, len);
                charge
            }
            None => {
                c.assembling.clear();
                c.paused = true;
                self.held_waiters.push_back(id);
                0
            }
        };
        c.hold = Some(Hold {
            len,
            reserved,
            charge,
        });
    }

    /// Room for `len` more bytes now, if there is: the bytes it counts against the budget, and
    /// a pooled buffer to fill if one is big enough.
    fn try_reserve(&mut self, len: u64) -> Option<(u64, Option<Vec<u8>>)> {
        let total = self.config.max_held_total;
        if self.held_used != 0 && self.held_used + len > total {
            return None;
        }
        let mut buf = None;
        let mut charge = len;
        if len >= RECYCLE_FROM as u64 {
            let fit = self
                .held_pool
                .iter()
                .enumerate()
                .filter(|(_, b)| b.capacity() as u64 >= len)
                .min_by_key(|(_, b)| b.capacity())
                .map(|(i, _)| i);
            if let Some(i) = fit {
                let b = self.held_pool.swap_remove(i);
                self.pool_bytes -= b.capacity() as u64;
                charge = b.capacity() as u64;
                buf = Some(b);
            }
        }
        self.held_used += charge;
        self.stats.held(self.held_used);
        Some((charge, buf))
    }

    /// Keeps a large buffer for the next held message, if the pool (a quarter of the budget,
    /// beside it) has room.
    pub(crate) fn pool_put(&mut self, buf: Option<Vec<u8>>) {
        let Some(mut buf) = buf else { return };
        let cap = buf.capacity() as u64;
        if cap < RECYCLE_FROM as u64
            || self.held_pool.len() >= POOL_MAX
            || self.pool_bytes + cap > self.config.max_held_total / 4
        {
            return;
        }
        buf.clear();
        self.pool_bytes += cap;
        self.held_pool.push(buf);
    }

    /// Bytes of a held message, as they arrive.
    pub(super) fn hold_chunk(&mut self, id: ClientId, bytes: &[u8]) {
        if let Some(c) = self.get_mut(id) {
            c.assembling.extend_from_slice(bytes);
        }
    }

    /// The held message is complete: hands it over (owned or in pieces to a streaming sink,
    /// whole to the others) and gives its bytes back to the budget.
    pub(super) fn deliver_held(&mut self, id: ClientId, sink: &mut dyn Sink) {
        let Some(c) = self.get_mut(id) else { return };
        let Some(hold) = c.hold.take() else { return };
        let mut whole = std::mem::take(&mut c.assembling);
        let mut left = None;
        if sink.streams() && whole.len() >= RECYCLE_FROM {
            sink.whole(self, id, whole);
        } else if whole.len() >= RECYCLE_FROM {
            // A large whole message is handed over as it is, not copied (a polling engine's
            // inbox keeps it; its buffer comes back through `pool_put` once read).
            sink.message_owned(self, id, whole);
        } else {
            if sink.streams() {
                sink.piece(self, id, Piece::Start(hold.len));
                if !whole.is_empty() {
                    sink.piece(self, id, Piece::Chunk(&whole));
                }
                sink.piece(self, id, Piece::End);
            } else {
                sink.message(self, id, &whole);
            }
            whole.clear();
            left = Some(whole);
        }
        if hold.reserved {
            match self.get_mut(id) {
                // What it sent now fills a queue (its own, for an echo) over `out_high`: the
                // bytes live on there, so the budget gets them back only once that queue has
                // drained enough to read this client again.
                Some(c) if c.paused => c.held_debt += hold.charge,
                _ => self.release(hold.charge),
            }
        }
        match left {
            Some(buf) if buf.capacity() <= KEEP_BUFFER => {
                if let Some(c) = self.get_mut(id) {
                    c.assembling = buf;
                }
            }
            buf => self.pool_put(buf),
        }
    }

    /// Forgets a held message that will not be completed (the client is ending or gone), and
    /// any debt.
    pub(super) fn drop_hold(&mut self, id: ClientId) {
        let Some(c) = self.get_mut(id) else { return };
        let mut back = std::mem::take(&mut c.held_debt);
        let mut buf = None;
        if let Some(hold) = c.hold.take() {
            buf = Some(std::mem::take(&mut c.assembling));
            if hold.reserved {
                back += hold.charge;
            }
        }
        if back > 0 {
            self.release(back);
        }
        self.pool_put(buf);
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
            let Some((charge, buf)) = self.try_reserve(want) else {
                return;
            };
            self.held_waiters.pop_front();
            let c = self.get_mut(w).expect("checked above");
            // What arrived while it waited (at most the rest of one read) moves along.
            let arrived = std::mem::take(&mut c.assembling);
            if let Some(buf) = buf {
                c.assembling = buf;
            }
            reserve_for(&mut c.assembling, want);
            c.assembling.extend_from_slice(&arrived);
            let hold = c.hold.as_mut().expect("checked above");
            hold.reserved = true;
            hold.charge = charge;
            c.paused = false;
            self.resumed.push(w);
        }
    }
}
