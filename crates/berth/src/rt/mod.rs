//! The runtime pieces the event-loop models ([`evloop`](crate::drive::evloop),
//! [`actor`](crate::drive::actor), [`prefork`](crate::drive::prefork)'s children) and the
//! message engine ([`msg`](crate::msg)) share, so that both run on the same machinery:
//!
//! - [`Wheel`] (`timer`): per-connection deadlines of one poll loop, O(1) and allocation-free.
//! - [`BufPool`] (`pool`): one thread's spare I/O buffers, lent to connections with bytes in
//!   flight.
//! - [`DateCache`] (`clock`): the `Date` header value, formatted at most once a second per
//!   thread (HTTP responses, the msg engine's WebSocket handshakes).
//! - [`Control`] (`control`): drain and stop — the flags a server's threads read, the wakers
//!   and hooks that tell them at once. Every HTTP model and the msg server are stopped through
//!   it.
//!
//! What rt/ is not: a driver (no poll loop, no sockets, no threads of its own), a protocol, or
//! the kernel boundary (libc calls and their safety obligations are sys/'s). Its types are per
//! thread (the wheel, the pool) or per server (the control), never global.

mod clock;
mod control;
mod pool;
mod timer;

pub(crate) use self::clock::DateCache;
pub(crate) use self::control::{Control, StopKind, DRAIN_GRACE};
pub(crate) use self::pool::BufPool;
pub(crate) use self::timer::Wheel;
