//! Per-thread pool of I/O buffers (an `evloop` thread's, an actor's, a msg engine's). A
//! connection borrows a read and a write buffer only while it has bytes in flight and gives
//! them back when idle, so idle connections hold no buffers and a steady stream of requests
//! never reaches the allocator. Only the owning thread touches its pool, so it needs no lock.
//! It owns spare buffers only, never one in use.

/// Free buffers of one I/O thread.
pub(crate) struct BufPool {
    free: Vec<Vec<u8>>,
    size: usize,
    max_free: usize,
}

impl BufPool {
    /// A pool handing out buffers of `size` bytes, holding at most `max_free` spare ones and
    /// starting with `prefill` of them.
    pub(crate) fn new(size: usize, max_free: usize, prefill: usize) -> Self {
        let free = (0..prefill.min(max_free))
            .map(|_| Vec::with_capacity(size))
            .collect();
        BufPool {
            free,
            size,
            max_free,
        }
    }

    /// An empty buffer with at least the pool's size of capacity.
    pub(crate) fn take(&mut self) -> Vec<u8> {
        self.free
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(self.size))
    }

    /// Returns a buffer. Buffers grown far past the pool's size (a large body) are freed rather
    /// than kept, so one big request does not pin memory for the thread's lifetime.
    pub(crate) fn put(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() < self.size
            || buf.capacity() > 4 * self.size
            || self.free.len() >= self.max_free
        {
            return;
        }
        buf.clear();
        self.free.push(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_buffers_and_drops_oversized_ones() {
        let mut pool = BufPool::new(1024, 2, 1);
        let a = pool.take();
        let ptr = a.as_ptr();
        pool.put(a);
        let b = pool.take();
        assert_eq!(b.as_ptr(), ptr);
        let mut big = pool.take();
        big.reserve(10 * 1024);
        pool.put(big);
        assert!(pool.free.is_empty());
    }
}
