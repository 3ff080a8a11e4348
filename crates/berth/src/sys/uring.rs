//! io_uring, for the `uring` model: one ring per loop thread, with a provided buffer ring for
//! receives, and a safe surface over the `io-uring` crate. What it owns: the ring, the memory
//! the kernel writes received bytes into, and the buffers of sends in flight — each until the
//! kernel is done with it. What it does not: what a completion means to a connection (the
//! model's business, `drive::uring`).
//!
//! ```text
//!   drive::uring ── accept_multi / recv_multi / send(Vec) / poll_* / cancel ──────> SQ
//!        ^                                                                          │ one
//!        └── Completion (Accepted fd | Received bytes (copied out) | Sent Vec back) <── CQ  enter
//! ```
//!
//! Why it is safe to call from safe code:
//! - A send takes its buffer by value and keeps it until its completion hands it back
//!   ([`Completion::Sent`]): the kernel never reads memory Rust could free or change.
//! - Received bytes land in the provided buffer ring, memory only this type owns. Rust reads a
//!   buffer only once a completion has handed it over (tracked per buffer), and gives it back
//!   to the kernel at once ([`Ring::consume`]).
//! - Descriptors are passed as numbers: a closed or reused one is an error or another
//!   socket's bytes, never memory corruption (the caller closes a connection's descriptor
//!   only once it has no operation in flight that it still cares about).
//! - Dropping a ring cancels everything in flight and waits for the kernel to let go of the
//!   buffers before freeing them.
//!
//! [`Ring::new`] refuses where io_uring cannot serve the model (an old kernel, seccomp,
//! `/proc/sys/kernel/io_uring_disabled`), with the cause in the error, so that the model can
//! refuse to start rather than fail later. `BERTH_URING_UNAVAILABLE=<cause>` in the environment
//! makes it refuse with that cause: the refusal path is tested through it.

use std::alloc::{self, Layout};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use slab::Slab;

/// The environment variable that makes [`Ring::new`] fail with its value as the cause (tests of
/// the refusal path; nothing else should set it).
pub const FORCE_UNAVAILABLE: &str = "BERTH_URING_UNAVAILABLE";

/// The top byte of a `user_data` says what the operation was; the rest is the caller's tag (or,
/// for sends, the slot of the buffer).
const KIND_SHIFT: u32 = 56;
/// The caller's part of a `user_data`.
pub(crate) const TAG_MASK: u64 = (1 << KIND_SHIFT) - 1;

const ACCEPT: u64 = 1;
const RECV: u64 = 2;
const SEND: u64 = 3;
const POLL: u64 = 4;
const CANCEL: u64 = 5;
const NOP: u64 = 6;
const WRITABLE: u64 = 7;

/// The buffer group id of the provided buffer ring (one per ring).
const GROUP: u16 = 0;

/// What the ring is made with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RingConfig {
    /// Submission queue entries (the completion queue is twice this, and grows by overflow
    /// rather than dropping completions on kernels with `IORING_FEAT_NODROP`).
    pub entries: u32,
    /// Provided buffers for receives: a power of two, at most 32768.
    pub buffers: u16,
    /// Size of each provided buffer.
    pub buffer_size: u32,
}

/// A finished operation, as [`Ring::next`] hands it back.
#[derive(Debug)]
pub(crate) enum Completion {
    /// A multishot accept produced a connection (or failed). `more`: the accept is still armed.
    Accepted {
        tag: u64,
        result: io::Result<OwnedFd>,
        more: bool,
    },
    /// A multishot receive produced bytes (`Ok(Some(buf))`, to [`Ring::consume`]), reached the
    /// end of the stream (`Ok(None)`), or failed. `more`: the receive is still armed.
    Received {
        tag: u64,
        result: io::Result<Option<Buffer>>,
        more: bool,
    },
    /// A send ended: how many bytes went, and the buffer it was given back.
    Sent {
        tag: u64,
        result: io::Result<usize>,
        buf: Vec<u8>,
    },
    /// A multishot poll fired (or ended). `more`: it is still armed.
    Polled { tag: u64, more: bool },
    /// A descriptor polled with [`Ring::poll_writable`] has room to write (or failed: the
    /// write that follows says how).
    Writable { tag: u64 },
    /// A no-op ended (no-ops are queued by tests only).
    #[cfg_attr(not(test), allow(dead_code))]
    Nop { tag: u64 },
}

/// A provided buffer the kernel filled and handed over: give it back with [`Ring::consume`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Buffer {
    id: u16,
    len: usize,
}

/// One io_uring with its provided buffer ring and its sends in flight.
pub(crate) struct Ring {
    ring: IoUring,
    bufs: BufRing,
    /// Buffers of sends in flight, by slot; the slot is the send's `user_data` tag.
    sends: Slab<(u64, Vec<u8>)>,
    /// Operations in flight whose last completion has not come (a multishot one counts once):
    /// what a drop waits for.
    live: usize,
    /// Receives are armed with a byte limit ([`Ring::recv_multi`]): on Linux 6.17 and later,
    /// until the kernel refuses one (a kernel that says it is newer but lacks the limit).
    recv_limit: bool,
}

/// Whether the running kernel's release (`uname -r`) is at least `major.minor`. Where the
/// release cannot be read or parsed, false: a feature is only used where it is known to be.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    // SAFETY: utsname is plain bytes; all zeroes is a valid value, and uname fills it.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `uts` is a live utsname for the call to fill.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return false;
    }
    let release: Vec<u8> = uts
        .release
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    let release = String::from_utf8_lossy(&release);
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let (Some(Ok(have_major)), Some(Ok(have_minor))) = (
        parts.next().map(str::parse::<u32>),
        parts.next().map(str::parse::<u32>),
    ) else {
        return false;
    };
    (have_major, have_minor) >= (major, minor)
}

/// `entry` with its `optlen` set: the field io-uring's `RecvMulti` does not expose, a
/// multishot receive's total byte limit (Linux 6.17). The layout is the kernel's ABI:
/// `struct io_uring_sqe` is 64 bytes, and `optlen` (in a union with `splice_fd_in` and
/// `file_index`) is the `u32` at byte 44.
fn with_optlen(entry: squeue::Entry, optlen: u32) -> squeue::Entry {
    const OPTLEN_AT: usize = 44;
    const _: () = assert!(std::mem::size_of::<squeue::Entry>() == 64);
    // SAFETY: `Entry` is `#[repr(C)]` around the 64-byte `io_uring_sqe` (asserted above), made
    // of plain integers and unions of them, so any 64 bytes are a valid value and its bytes
    // may be read as an array.
    let mut raw: [u8; 64] = unsafe { std::mem::transmute(entry) };
    raw[OPTLEN_AT..OPTLEN_AT + 4].copy_from_slice(&optlen.to_ne_bytes());
    // SAFETY: as above, in the other direction; only `optlen` changed.
    unsafe { std::mem::transmute::<[u8; 64], squeue::Entry>(raw) }
}

impl Ring {
    /// Sets up a ring and registers its buffer ring. Fails, with the cause, where io_uring is
    /// missing, disabled or too old for the model (it needs multishot accept and receive and
    /// provided buffer rings: Linux 6.0; and waits with a timeout: `IORING_FEAT_EXT_ARG`).
    pub(crate) fn new(config: RingConfig) -> io::Result<Ring> {
        if let Some(cause) = std::env::var_os(FORCE_UNAVAILABLE) {
            return Err(io::Error::other(format!(
                "io_uring is unavailable: {} (forced by {FORCE_UNAVAILABLE})",
                cause.to_string_lossy()
            )));
        }
        let unavailable = |what: &str, e: io::Error| {
            io::Error::new(e.kind(), format!("io_uring is unavailable: {what}: {e}"))
        };
        let ring = IoUring::builder()
            .setup_cqsize(config.entries.saturating_mul(2))
            .setup_single_issuer()
            .setup_coop_taskrun()
            .build(config.entries)
            .map_err(|e| {
                unavailable(
                    "io_uring_setup failed (kernel.io_uring_disabled set, seccomp, or no \
                     io_uring in this kernel)",
                    e,
                )
            })?;
        let too_old = |what: &str| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "io_uring is unavailable: this kernel lacks {what} (Linux 6.0 or later needed)"
                ),
            )
        };
        if !ring.params().is_feature_ext_arg() {
            return Err(too_old("IORING_FEAT_EXT_ARG"));
        }
        let mut probe = io_uring::Probe::new();
        ring.submitter()
            .register_probe(&mut probe)
            .map_err(|e| unavailable("probing opcodes failed", e))?;
        // Multishot receive came in 6.0 with SEND_ZC; the probe cannot see flags, so the
        // opcode stands for the kernel.
        for (code, name) in [
            (opcode::AcceptMulti::CODE, "accept"),
            (opcode::Send::CODE, "send"),
            (opcode::AsyncCancel::CODE, "async cancel"),
            (opcode::SendZc::CODE, "multishot receive"),
        ] {
            if !probe.is_supported(code) {
                return Err(too_old(name));
            }
        }
        let bufs = BufRing::new(config.buffers, config.buffer_size)?;
        // SAFETY: the ring of entries lives as long as `bufs`, which is dropped after the ring
        // of this `Ring` has been unregistered from it (see `Drop`), and is page-aligned with
        // `buffers` entries, as registered.
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(bufs.entries as u64, bufs.count, GROUP, 0)
        }
        .map_err(|e| unavailable("registering a provided buffer ring failed", e))?;
        Ok(Ring {
            ring,
            bufs,
            sends: Slab::new(),
            live: 0,
            recv_limit: kernel_at_least(6, 17),
        })
    }

    /// Queues `entry`, submitting what is queued first if the submission queue is full.
    ///
    /// # Safety
    /// Every pointer in `entry` must stay valid until the operation's last completion.
    unsafe fn push(&mut self, entry: squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: the caller vouches for the entry's pointers.
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                return Ok(());
            }
            self.ring.submit()?;
        }
    }

    /// Arms a multishot accept on the listener `fd`; each connection comes back as
    /// [`Completion::Accepted`] with `tag`, close-on-exec and non-blocking (the ring does not
    /// need it, but a connection refused at capacity is written and drained with plain calls
    /// that must not block the loop).
    pub(crate) fn accept_multi(&mut self, fd: RawFd, tag: u64) -> io::Result<()> {
        let entry = opcode::AcceptMulti::new(types::Fd(fd))
            .flags(libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK)
            .build()
            .user_data(ACCEPT << KIND_SHIFT | (tag & TAG_MASK));
        // SAFETY: no pointers in the entry.
        unsafe { self.push(entry)? };
        self.live += 1;
        Ok(())
    }

    /// Arms a multishot receive on `fd` into the provided buffers; bytes come back as
    /// [`Completion::Received`] with `tag`. It ends (a completion without `more`) before it
    /// has received more than `limit` bytes, where the kernel can (Linux 6.17: the receive's `optlen`, see
    /// [`Ring::drop_recv_limit`]): cancelling a multishot receive does not stop it while a
    /// flood keeps it busy (the kernel finds it between polls: ENOENT), so without a limit a
    /// connection whose reading is paused would go on taking whatever the provided buffers
    /// hold, megabytes at a time.
    pub(crate) fn recv_multi(&mut self, fd: RawFd, tag: u64, limit: u32) -> io::Result<()> {
        // The kernel checks the total after each receive, so the last one may take a whole
        // receive's worth past it: with both the total and each receive (`len`, Linux 6.11)
        // at half of `limit`, no more than `limit` bytes come in all (for a `limit` of 2 or
        // more).
        let half = (limit / 2).max(1);
        let mut recv = opcode::RecvMulti::new(types::Fd(fd), GROUP);
        if self.recv_limit {
            recv = recv.len(half);
        }
        let mut entry = recv
            .build()
            .user_data(RECV << KIND_SHIFT | (tag & TAG_MASK));
        if self.recv_limit {
            entry = with_optlen(entry, half);
        }
        // SAFETY: the only memory is the provided buffer ring, which outlives every operation
        // (see `Drop`).
        unsafe { self.push(entry)? };
        self.live += 1;
        Ok(())
    }

    /// Sends `buf[from..]` on `fd` (`MSG_NOSIGNAL`: a departed peer is an error, not a
    /// signal). The buffer comes back in [`Completion::Sent`] with `tag`.
    pub(crate) fn send(
        &mut self,
        fd: RawFd,
        buf: Vec<u8>,
        from: usize,
        tag: u64,
    ) -> io::Result<()> {
        let from = from.min(buf.len());
        let len = u32::try_from(buf.len() - from).unwrap_or(u32::MAX);
        let ptr = buf[from..].as_ptr();
        let slot = self.sends.insert((tag, buf));
        let entry = opcode::Send::new(types::Fd(fd), ptr, len)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(SEND << KIND_SHIFT | slot as u64);
        // SAFETY: `ptr` points into the heap memory of a vector now held in `sends`, which
        // neither moves nor frees it until the send's completion takes it out (or the ring,
        // having waited for every operation, is dropped); `len` stays within it.
        if let Err(e) = unsafe { self.push(entry) } {
            self.sends.remove(slot);
            return Err(e);
        }
        self.live += 1;
        Ok(())
    }

    /// Arms a multishot poll for readability of `fd`; each wake-up comes back as
    /// [`Completion::Polled`] with `tag`.
    pub(crate) fn poll_multi(&mut self, fd: RawFd, tag: u64) -> io::Result<()> {
        let entry = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32)
            .multi(true)
            .build()
            .user_data(POLL << KIND_SHIFT | (tag & TAG_MASK));
        // SAFETY: no pointers in the entry.
        unsafe { self.push(entry)? };
        self.live += 1;
        Ok(())
    }

    /// Polls `fd` once for room to write; it comes back as [`Completion::Writable`] with `tag`.
    pub(crate) fn poll_writable(&mut self, fd: RawFd, tag: u64) -> io::Result<()> {
        let entry = opcode::PollAdd::new(types::Fd(fd), libc::POLLOUT as u32)
            .build()
            .user_data(WRITABLE << KIND_SHIFT | (tag & TAG_MASK));
        // SAFETY: no pointers in the entry.
        unsafe { self.push(entry)? };
        self.live += 1;
        Ok(())
    }

    /// The kernel refused a receive's limits (EINVAL: older than 6.17): receives are armed
    /// without one from now on, and the caller arms again. False if they already were.
    pub(crate) fn drop_recv_limit(&mut self) -> bool {
        std::mem::replace(&mut self.recv_limit, false)
    }

    /// Cancels the multishot receive armed with `tag` (it ends with a last completion).
    pub(crate) fn cancel_recv(&mut self, tag: u64) -> io::Result<()> {
        self.cancel(RECV << KIND_SHIFT | (tag & TAG_MASK))
    }

    /// Completions ready now (more may arrive while they are taken).
    pub(crate) fn ready(&mut self) -> usize {
        self.ring.completion().len()
    }

    /// Cancels the multishot accept armed with `tag`: until it ends, the kernel holds the
    /// listening socket open, whoever closes its descriptor.
    pub(crate) fn cancel_accept(&mut self, tag: u64) -> io::Result<()> {
        self.cancel(ACCEPT << KIND_SHIFT | (tag & TAG_MASK))
    }

    /// Cancels every operation on `fd` (receive, sends, polls) and submits the cancellation
    /// at once, so that it reaches the kernel while `fd` still names the socket: the caller is
    /// about to close it.
    pub(crate) fn cancel_fd(&mut self, fd: RawFd) -> io::Result<()> {
        let entry = opcode::AsyncCancel2::new(types::CancelBuilder::fd(types::Fd(fd)).all())
            .build()
            .user_data(CANCEL << KIND_SHIFT);
        // SAFETY: no pointers in the entry.
        unsafe { self.push(entry)? };
        self.ring.submit().map(|_| ())
    }

    fn cancel(&mut self, user_data: u64) -> io::Result<()> {
        let entry = opcode::AsyncCancel::new(user_data)
            .build()
            .user_data(CANCEL << KIND_SHIFT);
        // SAFETY: no pointers in the entry.
        unsafe { self.push(entry) }
    }

    /// Queues a no-op; it completes as [`Completion::Nop`] with `tag`.
    #[cfg(test)]
    pub(crate) fn nop(&mut self, tag: u64) -> io::Result<()> {
        let entry = opcode::Nop::new()
            .build()
            .user_data(NOP << KIND_SHIFT | (tag & TAG_MASK));
        // SAFETY: no pointers in the entry.
        unsafe { self.push(entry)? };
        self.live += 1;
        Ok(())
    }

    /// Submits what is queued and, if `wait` and no completion is ready, waits for one, up to
    /// `timeout` (`None`: no limit): the one `io_uring_enter` of a loop turn. An interrupted
    /// or timed-out wait is not an error.
    pub(crate) fn submit_and_wait(
        &mut self,
        wait: bool,
        timeout: Option<Duration>,
    ) -> io::Result<()> {
        let want = usize::from(wait && self.ring.completion().is_empty());
        let result = match timeout {
            Some(t) if want > 0 => {
                let ts = types::Timespec::from(t);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(want, &args)
            }
            _ => self.ring.submitter().submit_and_wait(want),
        };
        match result {
            Ok(_) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            // The completion queue is full: the caller takes completions, then comes back.
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The next completion, if one is ready.
    pub(crate) fn next(&mut self) -> Option<Completion> {
        loop {
            let cqe = self.ring.completion().next()?;
            let (ud, res, flags) = (cqe.user_data(), cqe.result(), cqe.flags());
            let more = cqueue::more(flags);
            let tag = ud & TAG_MASK;
            let error = || io::Error::from_raw_os_error(-res);
            let kind = ud >> KIND_SHIFT;
            if kind != CANCEL && !more {
                self.live = self.live.saturating_sub(1);
            }
            return Some(match kind {
                ACCEPT => Completion::Accepted {
                    tag,
                    // SAFETY: a successful accept's result is a new descriptor nobody owns.
                    result: (res >= 0)
                        .then(|| unsafe { OwnedFd::from_raw_fd(res) })
                        .ok_or_else(error),
                    more,
                },
                RECV => {
                    let result = match cqueue::buffer_select(flags) {
                        Some(id) => {
                            // A buffer comes with bytes only; hand it over either way.
                            self.bufs.hand_over(id);
                            let buf = Buffer {
                                id,
                                len: usize::try_from(res).unwrap_or(0),
                            };
                            if res > 0 {
                                Ok(Some(buf))
                            } else {
                                self.bufs.recycle(buf.id);
                                if res == 0 {
                                    Ok(None)
                                } else {
                                    Err(error())
                                }
                            }
                        }
                        None if res == 0 => Ok(None),
                        None => Err(error()),
                    };
                    Completion::Received { tag, result, more }
                }
                SEND => {
                    let slot = tag as usize;
                    let Some((tag, buf)) = self.sends.try_remove(slot) else {
                        debug_assert!(false, "a send completion without its buffer");
                        continue;
                    };
                    Completion::Sent {
                        tag,
                        result: usize::try_from(res).map_err(|_| error()),
                        buf,
                    }
                }
                POLL => Completion::Polled { tag, more },
                WRITABLE => Completion::Writable { tag },
                NOP => Completion::Nop { tag },
                _ => continue,
            });
        }
    }

    /// Gives `f` the bytes of a received buffer, then gives the buffer back to the kernel.
    pub(crate) fn consume<R>(&mut self, buf: Buffer, f: impl FnOnce(&[u8]) -> R) -> R {
        let r = f(self.bufs.bytes(&buf));
        self.bufs.recycle(buf.id);
        r
    }

    /// Provided buffers the kernel may fill now.
    #[cfg(test)]
    fn buffers_free(&self) -> usize {
        self.bufs.held.iter().filter(|h| !**h).count()
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Cancel everything, then wait (boundedly) for the kernel to finish with every buffer
        // before the memory goes.
        let any = opcode::AsyncCancel2::new(types::CancelBuilder::any())
            .build()
            .user_data(CANCEL << KIND_SHIFT);
        // SAFETY: no pointers in the entry.
        if unsafe { self.push(any) }.is_ok() {
            for _ in 0..100 {
                if self.live == 0 {
                    break;
                }
                if self
                    .submit_and_wait(true, Some(Duration::from_millis(10)))
                    .is_err()
                {
                    break;
                }
                while let Some(c) = self.next() {
                    if let Completion::Received {
                        result: Ok(Some(buf)),
                        ..
                    } = c
                    {
                        self.bufs.recycle(buf.id);
                    }
                }
            }
        }
        if self.live > 0 {
            // The kernel may still write into the buffers: leak them rather than free memory
            // it could use.
            log::warn!(
                "io_uring: {} operations still in flight at close",
                self.live
            );
            std::mem::forget(std::mem::take(&mut self.sends));
            self.bufs.leak = true;
        }
        let _ = self.ring.submitter().unregister_buf_ring(GROUP);
    }
}

/// A provided buffer ring: `count` entries, page-aligned as the kernel wants them, and `count`
/// buffers of `size` bytes in one allocation. Memory the kernel writes into: Rust reads a
/// buffer only while `held` says the kernel handed it over.
struct BufRing {
    entries: *mut types::BufRingEntry,
    data: *mut u8,
    count: u16,
    size: u32,
    /// Per buffer: handed over by a completion and not yet given back.
    held: Vec<bool>,
    /// The ring's tail as this side last published it.
    tail: u16,
    /// The kernel may still use the memory: never free it.
    leak: bool,
}

impl BufRing {
    fn entries_layout(count: u16) -> Layout {
        let size = usize::from(count) * std::mem::size_of::<types::BufRingEntry>();
        Layout::from_size_align(size, 4096).expect("a small page-aligned layout")
    }

    fn data_layout(count: u16, size: u32) -> Layout {
        Layout::from_size_align(usize::from(count) * size as usize, 64).expect("a buffer layout")
    }

    fn new(count: u16, size: u32) -> io::Result<BufRing> {
        if !count.is_power_of_two() || count > 32768 || size == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "provided buffers: a power of two up to 32768, of a nonzero size",
            ));
        }
        // SAFETY: both layouts have a nonzero size (count and size are nonzero).
        let (entries, data) = unsafe {
            (
                alloc::alloc_zeroed(Self::entries_layout(count)).cast::<types::BufRingEntry>(),
                alloc::alloc(Self::data_layout(count, size)),
            )
        };
        if entries.is_null() || data.is_null() {
            return Err(io::ErrorKind::OutOfMemory.into());
        }
        let mut ring = BufRing {
            entries,
            data,
            count,
            size,
            held: vec![true; usize::from(count)],
            tail: 0,
            leak: false,
        };
        for id in 0..count {
            ring.recycle(id);
        }
        Ok(ring)
    }

    /// A completion handed buffer `id` over.
    fn hand_over(&mut self, id: u16) {
        if let Some(h) = self.held.get_mut(usize::from(id)) {
            *h = true;
        }
    }

    /// The received bytes of a buffer handed over.
    fn bytes(&self, buf: &Buffer) -> &[u8] {
        let id = usize::from(buf.id);
        assert!(self.held.get(id) == Some(&true), "a buffer the kernel owns");
        let len = buf.len.min(self.size as usize);
        // SAFETY: buffer `id` lies within the data allocation (id < count), the kernel handed
        // it over (held) and will not write it until `recycle` gives it back, and it wrote `len`
        // bytes of it (the completion's result, at most the buffer's size).
        unsafe { std::slice::from_raw_parts(self.data.add(id * self.size as usize), len) }
    }

    /// Gives buffer `id` back to the kernel (nothing if it already has it).
    fn recycle(&mut self, id: u16) {
        let Some(held) = self.held.get_mut(usize::from(id)) else {
            return;
        };
        if !*held {
            return;
        }
        *held = false;
        let mask = self.count - 1;
        // SAFETY: the slot index is masked below `count`, within the entries allocation; the
        // kernel reads entries only between the head and the published tail, and this slot is
        // past the tail until the store below publishes it.
        let entry = unsafe { &mut *self.entries.add(usize::from(self.tail & mask)) };
        entry.set_addr(self.data as u64 + u64::from(id) * u64::from(self.size));
        entry.set_len(self.size);
        entry.set_bid(id);
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail field overlays the first entry's reserved field, within the
        // allocation, and is aligned for a u16; the kernel reads it concurrently, hence the
        // atomic store with release ordering (the entry's fields before it).
        unsafe {
            let tail = types::BufRingEntry::tail(self.entries).cast_mut();
            (*tail.cast::<std::sync::atomic::AtomicU16>())
                .store(self.tail, std::sync::atomic::Ordering::Release);
        }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        if self.leak {
            return;
        }
        // SAFETY: both were allocated in `new` with these layouts, and the ring that could
        // write into them has let go (see `Ring`'s `Drop`).
        unsafe {
            alloc::dealloc(self.entries.cast(), Self::entries_layout(self.count));
            alloc::dealloc(self.data, Self::data_layout(self.count, self.size));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;

    fn ring() -> Ring {
        Ring::new(RingConfig {
            entries: 8,
            buffers: 4,
            buffer_size: 16,
        })
        .expect("io_uring set up")
    }

    /// Waits for the next completion, up to a second.
    fn next(r: &mut Ring) -> Completion {
        for _ in 0..100 {
            r.submit_and_wait(true, Some(Duration::from_millis(10)))
                .unwrap();
            if let Some(c) = r.next() {
                return c;
            }
        }
        panic!("no completion");
    }

    #[test]
    fn the_kernel_release_is_read() {
        assert!(
            kernel_at_least(3, 0),
            "this runs on io_uring, so on 5.1 at least"
        );
        assert!(!kernel_at_least(999, 0));
    }

    #[test]
    fn a_nop_completes() {
        let mut r = ring();
        r.nop(42).unwrap();
        assert!(matches!(next(&mut r), Completion::Nop { tag: 42 }));
    }

    /// Accept, receive into provided buffers (recycled as consumed, more bytes than one buffer
    /// holds), send, end of stream.
    #[test]
    fn accepts_receives_and_sends() {
        let mut r = ring();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        r.accept_multi(listener.as_raw_fd(), 1).unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let Completion::Accepted {
            tag: 1,
            result: Ok(fd),
            more: true,
        } = next(&mut r)
        else {
            panic!("no connection");
        };
        r.recv_multi(fd.as_raw_fd(), 7, 1 << 20).unwrap();
        let sent: Vec<u8> = (0..100u8).collect();
        client.write_all(&sent).unwrap();
        let mut got = Vec::new();
        while got.len() < sent.len() {
            match next(&mut r) {
                Completion::Received {
                    tag: 7,
                    result: Ok(Some(buf)),
                    more,
                } => {
                    r.consume(buf, |b| got.extend_from_slice(b));
                    if !more {
                        r.recv_multi(fd.as_raw_fd(), 7, 1 << 20).unwrap();
                    }
                }
                // Out of buffers (100 bytes, 4 of 16): the receive ends; consumed buffers are
                // back, so it is armed again.
                Completion::Received {
                    tag: 7,
                    result: Err(e),
                    more: false,
                } if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    r.recv_multi(fd.as_raw_fd(), 7, 1 << 20).unwrap()
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(got, sent);
        assert_eq!(r.buffers_free(), 4, "every buffer given back");

        r.send(fd.as_raw_fd(), b"hello".to_vec(), 1, 9).unwrap();
        let Completion::Sent {
            tag: 9,
            result: Ok(4),
            buf,
        } = next(&mut r)
        else {
            panic!("not sent");
        };
        assert_eq!(buf, b"hello");
        let mut four = [0u8; 4];
        client.read_exact(&mut four).unwrap();
        assert_eq!(&four, b"ello");

        drop(client);
        loop {
            match next(&mut r) {
                Completion::Received {
                    result: Ok(None), ..
                } => break,
                Completion::Received { more: false, .. } => {
                    r.recv_multi(fd.as_raw_fd(), 7, 1 << 20).unwrap()
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
