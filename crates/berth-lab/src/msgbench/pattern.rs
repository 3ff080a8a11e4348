//! The bytes every bench message carries, and the check that an echo carries them back.
//!
//! Byte `i` of message `seq` is `TABLE[(i + seq * STRIDE) % PERIOD]`, where `TABLE` is fixed
//! pseudo-random bytes. So every message of a connection differs from its neighbours (an echo of
//! the wrong message fails the check), a byte that moved fails it, and nothing is allocated per
//! message: [`Pattern`] holds the table once, extended by [`CHUNK`] bytes so that any run of up
//! to `CHUNK` pattern bytes is one contiguous slice, written straight to a socket or compared
//! straight against what a socket returned.

/// The pattern's period. Prime, so no power-of-two size, chunk or stride lines up with it: a
/// server that drops or repeats a power-of-two block cannot land back in step.
const PERIOD: usize = 65_521;

/// How far each message's pattern is shifted from the previous one's.
const STRIDE: u64 = 4_099;

/// Longest slice [`Pattern::slice`] returns.
pub const CHUNK: usize = 256 * 1024;

/// The shared, read-only pattern (about 320 KiB, one per run).
#[derive(Debug, Clone)]
pub struct Pattern {
    bytes: Vec<u8>,
}

impl Default for Pattern {
    fn default() -> Self {
        Pattern::new()
    }
}

impl Pattern {
    /// Builds the table (a fixed xorshift sequence, the same in every run and every process).
    pub fn new() -> Pattern {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut table = Vec::with_capacity(PERIOD);
        for _ in 0..PERIOD {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            table.push((x >> 32) as u8);
        }
        let mut bytes = Vec::with_capacity(PERIOD + CHUNK);
        while bytes.len() < PERIOD + CHUNK {
            let n = (PERIOD + CHUNK - bytes.len()).min(PERIOD);
            bytes.extend_from_slice(&table[..n]);
        }
        Pattern { bytes }
    }

    fn offset(seq: u64, at: u64) -> usize {
        let p = PERIOD as u64;
        ((at % p + (seq % p) * STRIDE % p) % p) as usize
    }

    /// The bytes of message `seq` from payload offset `at`, at most `max` (and 256 KiB).
    pub fn slice(&self, seq: u64, at: u64, max: usize) -> &[u8] {
        let start = Pattern::offset(seq, at);
        &self.bytes[start..start + max.min(CHUNK)]
    }

    /// The offset within `data` of the first byte that differs from message `seq` at payload
    /// offset `at`, or `None` when all of `data` is as sent.
    pub fn mismatch(&self, seq: u64, at: u64, data: &[u8]) -> Option<usize> {
        let mut done = 0;
        while done < data.len() {
            let part = &data[done..(done + CHUNK).min(data.len())];
            let want = self.slice(seq, at + done as u64, part.len());
            // The slice compare is a memcmp; only a failure pays for finding the byte.
            if part != want {
                let i = part.iter().zip(want).position(|(a, b)| a != b);
                return Some(done + i.unwrap_or(0));
            }
            done += part.len();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Message `seq`'s first `len` bytes, built one slice at a time of `step` bytes.
    fn message(p: &Pattern, seq: u64, len: usize, step: usize) -> Vec<u8> {
        let mut m = Vec::with_capacity(len);
        while m.len() < len {
            m.extend_from_slice(p.slice(seq, m.len() as u64, step.min(len - m.len())));
        }
        m
    }

    #[test]
    fn slices_agree_however_the_message_is_cut() {
        let p = Pattern::new();
        let whole = message(&p, 3, 1_000_000, CHUNK);
        for step in [1, 7, 4096, 65_521, 100_000] {
            assert!(message(&p, 3, 1_000_000, step) == whole, "step {step}");
        }
        assert_eq!(p.mismatch(3, 0, &whole), None);
        assert_eq!(p.mismatch(3, 500_000, &whole[500_000..]), None);
    }

    #[test]
    fn catches_a_changed_byte_and_the_wrong_message() {
        let p = Pattern::new();
        let mut m = message(&p, 0, 8_760_000, CHUNK);
        m[8_759_999] ^= 1;
        assert_eq!(p.mismatch(0, 0, &m), Some(8_759_999));
        m[300_000] ^= 0x80;
        assert_eq!(p.mismatch(0, 0, &m), Some(300_000));
        let next = message(&p, 1, 64, 64);
        assert!(p.mismatch(0, 0, &next).is_some(), "neighbours differ");
        // A block dropped from the middle shifts the rest; it must not line up again.
        let m = message(&p, 5, 3 << 20, CHUNK);
        let mut dropped = m[..1 << 20].to_vec();
        dropped.extend_from_slice(&m[(1 << 20) + 65_536..]);
        assert_eq!(p.mismatch(5, 0, &dropped), Some(1 << 20));
    }
}
