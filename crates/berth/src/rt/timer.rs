//! A hashed timing wheel with intrusive lists: per-connection deadlines for one poll loop (an
//! `evloop` thread, or a msg engine), with O(1) arm, re-arm and disarm, no allocation after
//! start-up, and no scan of all connections per tick. It owns the deadlines only: what a
//! deadline means (408, close, a handshake timeout) is its loop's business.
//!
//! Each slot is a doubly linked list threaded through arrays indexed by the connection's slab
//! key (preallocated to the loop's capacity, zero-filled so untouched pages cost nothing).
//! Deadlines are rounded up to ticks of `resolution`, so a timeout fires up to one tick late and
//! never early. A deadline more than one lap away waits in its slot for its lap.

use std::time::{Duration, Instant};

/// "No key" in the link arrays and slot heads (keys are stored plus one).
const NIL: u32 = 0;

/// The wheel.
pub(crate) struct Wheel {
    /// Per slot: the first key (plus one) of its list, or NIL.
    heads: Vec<u32>,
    /// Per key: the next and previous keys (plus one) in its slot's list.
    next: Vec<u32>,
    prev: Vec<u32>,
    /// Per key: the armed tick plus one, or 0 when not armed.
    armed: Vec<u64>,
    resolution: Duration,
    /// `resolution` in nanoseconds (at least 1): ticks are counted in 64-bit arithmetic, not
    /// `Duration::as_nanos`'s 128-bit division, on every request's deadline.
    res_ns: u64,
    start: Instant,
    /// The next tick whose slot has not been processed.
    current: u64,
    /// The last deadline [`Wheel::set`] turned into a tick, and its tick: the connections a
    /// loop serves in one turn share its `now`, so most ask for the same deadline in a row,
    /// and the subtraction and division of the conversion are done once for them.
    last: Option<(Instant, u64)>,
}

impl Wheel {
    /// A wheel of `slots` slots of `resolution`, for keys below `capacity`.
    pub(crate) fn new(resolution: Duration, slots: usize, capacity: usize, now: Instant) -> Self {
        Wheel {
            heads: vec![NIL; slots.max(1)],
            next: vec![NIL; capacity],
            prev: vec![NIL; capacity],
            armed: vec![0; capacity],
            resolution,
            res_ns: nanos(resolution).max(1),
            start: now,
            current: 0,
            last: None,
        }
    }

    fn now_tick(&self, now: Instant) -> u64 {
        nanos(now.saturating_duration_since(self.start)) / self.res_ns
    }

    /// Arms `key` to expire at `at` (replacing any earlier deadline), or disarms it with `None`.
    pub(crate) fn set(&mut self, key: usize, at: Option<Instant>) {
        let Some(at) = at else {
            return self.disarm(key);
        };
        let tick = match self.last {
            Some((last, tick)) if last == at => tick,
            _ => {
                let tick = nanos(at.saturating_duration_since(self.start)).div_ceil(self.res_ns);
                self.last = Some((at, tick));
                tick
            }
        }
        .max(self.current);
        if self.armed[key] == tick + 1 {
            return;
        }
        self.disarm(key);
        let slot = (tick % self.heads.len() as u64) as usize;
        let id = key as u32 + 1;
        let head = self.heads[slot];
        self.next[key] = head;
        self.prev[key] = NIL;
        if head != NIL {
            self.prev[head as usize - 1] = id;
        }
        self.heads[slot] = id;
        self.armed[key] = tick + 1;
    }

    /// Removes `key`'s deadline, if it has one.
    pub(crate) fn disarm(&mut self, key: usize) {
        let tick = self.armed[key];
        if tick == 0 {
            return;
        }
        let slot = ((tick - 1) % self.heads.len() as u64) as usize;
        let (prev, next) = (self.prev[key], self.next[key]);
        if prev == NIL {
            self.heads[slot] = next;
        } else {
            self.next[prev as usize - 1] = next;
        }
        if next != NIL {
            self.prev[next as usize - 1] = prev;
        }
        self.armed[key] = 0;
    }

    /// Disarms and moves into `due` every key whose deadline is at or before `now`.
    pub(crate) fn advance(&mut self, now: Instant, due: &mut Vec<usize>) {
        let now_tick = self.now_tick(now);
        let n = self.heads.len() as u64;
        // After a long sleep, one lap covers every slot.
        let first = self.current.max(now_tick.saturating_sub(n - 1));
        for tick in first..=now_tick {
            let mut cursor = self.heads[(tick % n) as usize];
            while cursor != NIL {
                let key = cursor as usize - 1;
                cursor = self.next[key];
                if self.armed[key] - 1 <= now_tick {
                    self.disarm(key);
                    due.push(key);
                }
            }
        }
        self.current = self.current.max(now_tick + 1);
    }

    /// The wheel's precision: how long a loop with armed deadlines may sleep.
    pub(crate) fn resolution(&self) -> Duration {
        self.resolution
    }
}

/// `d` in nanoseconds, saturating (at 584 years).
fn nanos(d: Duration) -> u64 {
    d.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(d.subsec_nanos()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn expires_in_order_and_keeps_later_laps() {
        let t0 = Instant::now();
        let mut w = Wheel::new(10 * MS, 4, 8, t0);
        w.set(1, Some(t0 + 15 * MS));
        w.set(2, Some(t0 + 55 * MS)); // the same slot, one lap later
        let mut due = Vec::new();
        w.advance(t0 + 9 * MS, &mut due);
        assert!(due.is_empty(), "nothing is due before its tick");
        w.advance(t0 + 25 * MS, &mut due);
        assert_eq!(due, vec![1]);
        due.clear();
        w.advance(t0 + 45 * MS, &mut due);
        assert!(due.is_empty());
        w.advance(t0 + 65 * MS, &mut due);
        assert_eq!(due, vec![2]);
    }

    #[test]
    fn never_fires_early_and_rearming_moves_the_deadline() {
        let t0 = Instant::now();
        let mut w = Wheel::new(10 * MS, 8, 4, t0);
        w.set(3, Some(t0 + 21 * MS));
        w.set(3, Some(t0 + 41 * MS));
        let mut due = Vec::new();
        w.advance(t0 + 35 * MS, &mut due);
        assert!(due.is_empty(), "the earlier deadline was replaced");
        w.advance(t0 + 50 * MS, &mut due);
        assert_eq!(due, vec![3]);
    }

    #[test]
    fn disarm_unlinks_from_the_middle_of_a_slot() {
        let t0 = Instant::now();
        let mut w = Wheel::new(10 * MS, 2, 4, t0);
        for key in 0..4 {
            w.set(key, Some(t0 + 10 * MS));
        }
        w.disarm(2);
        w.set(1, None);
        let mut due = Vec::new();
        w.advance(t0 + 20 * MS, &mut due);
        due.sort();
        assert_eq!(due, vec![0, 3]);
    }
}
