//! The kernel boundary: every libc call and every `unsafe` block of this crate lives here, and
//! only safe functions and types leave it. The rest of the crate is `#![deny(unsafe_code)]`
//! (CI also fails on the word `unsafe` anywhere outside this folder).
//!
//! ```text
//!   net/  drive/  stats  msg/          safe callers: descriptors by borrow (`AsFd`, `AsRawFd`),
//!     │     │       │     │            buffers by `&mut`, results as `io::Result`
//!     └─────┴───────┴─────┴──> sys/ ──> libc (Linux)
//! ```
//!
//! | module | what it wraps |
//! |---|---|
//! | [`io`] | `read(2)` into a `Vec`'s spare capacity; `poll(2)` for one or two descriptors |
//! | [`fs`] | `openat2(2)` confined below a directory; `sendfile(2)` |
//! | [`socket`] | the socket options `socket2` does not cover (`TCP_DEFER_ACCEPT`) |
//! | [`process`] | `fork`, `_exit`, `waitpid`, `kill`, `prctl(PR_SET_PDEATHSIG)`, `getppid`, `setsid`, `close_range` |
//! | [`fd`] | descriptor plumbing: `pipe2(O_CLOEXEC)`, `dup2` |
//! | [`signal`] | the termination signals: `pthread_sigmask`, `sigwait`, `sigaction` |
//! | [`shm`] | a value in an anonymous `MAP_SHARED` mapping, seen by every process forked later |
//! | [`mem`] | `madvise(MADV_HUGEPAGE)` for a large buffer about to be filled |
//! | [`uring`] | io_uring (the `io-uring` crate): a ring, its provided buffer ring, sends that own their buffers |
//!
//! # The contract
//!
//! What every function here promises:
//! - **Safe to call from safe code.** Whatever the arguments, no call can cause undefined
//!   behaviour: pointers handed to the kernel come from live Rust values of the right size, and
//!   descriptors are borrowed for the duration of the call only (a closed or wrong descriptor
//!   is an `EBADF`, not memory corruption). Each `unsafe` block carries a `// SAFETY:` note
//!   saying why (clippy's `undocumented_unsafe_blocks` is denied).
//! - **One syscall, same flags.** A wrapper makes exactly the call its name says, with the
//!   flags its documentation gives, and adds no policy (no retry on `EINTR`, no logging)
//!   unless its documentation says so. A failure is `io::Error::last_os_error()` (or the
//!   returned error number, for `pthread_sigmask` and `sigwait`), except where the
//!   documentation says the result is ignored or folded (`kill`, `close_range`, `waitpid`).
//!   The hot-path wrappers ([`io::read_into_spare`], [`fs::sendfile`]) are `#[inline]` and cost
//!   nothing over the raw call.
//! - **Descriptors it creates are close-on-exec** and come back as `OwnedFd` (or a type that
//!   owns them), so a forked or exec'd child never inherits one by accident.
//!
//! What callers must uphold (these are about *correct programs*, not memory safety, which the
//! types already guarantee):
//! - [`process::fork`] is called while the process has one thread (or in a child that will
//!   only call async-signal-safe code and the wrappers here), and a forked child leaves through
//!   [`process::exit_child`], never by returning into code that expects the parent's threads.
//! - [`process::close_inherited`] is called only in a freshly forked child: it closes
//!   descriptors behind the back of any Rust value that still owns them, so none may be used
//!   afterwards.
//! - [`signal::wait_for_termination`] needs the signals blocked first
//!   ([`signal::block_termination`]), or they kill the process instead.
//! - [`shm::SharedBox`] holds only [`shm::ProcessShared`] types, which this module defines for
//!   atomics and fixed-size compositions of them; it is the only way memory is shared between
//!   processes.
//!
//! Only Linux is supported (`openat2`, `sendfile`, `PR_SET_PDEATHSIG`, `close_range`,
//! `TCP_DEFER_ACCEPT`). A new OS would mean new bodies for these functions behind the same
//! signatures; nothing outside this folder would change.

pub(crate) mod fd;
pub(crate) mod fs;
pub(crate) mod io;
pub(crate) mod mem;
pub(crate) mod process;
pub(crate) mod shm;
pub(crate) mod signal;
pub(crate) mod socket;
pub(crate) mod uring;
