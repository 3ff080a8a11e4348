//! What `python -m berth --workers N` needs from Rust: the port, bound once by the parent and
//! shared by its workers, and a worker's tie to its parent.
//!
//! The parent binds the listening sockets itself. Over TCP, one per worker slot, each with
//! `SO_REUSEPORT` (issue 43): the kernel spreads new connections over them (a hash of each
//! connection's addresses), so each worker drains a queue of its own and a burst of
//! connections is shared out, where one queue for all let whichever worker woke first take the
//! whole burst (32:0). The first is bound only if nothing listens on the port (berth's
//! exclusive check), so a port another server holds is refused before any worker starts. Over
//! a UNIX socket (no such balancing there) or a socket passed in, one socket without
//! `SO_REUSEPORT`, shared by all. The workers inherit their slot's socket across `fork` and
//! serve it (berth's `ListenConfig::inherited`); the parent keeps every one open, so the port
//! takes connections while a worker is replaced, even while none is alive (they wait in the
//! slot's queue for its next worker), and a successor and the worker it replaces share the
//! slot's queue while one starts and the other drains.

use std::net::SocketAddr;
use std::os::fd::IntoRawFd;
use std::sync::Arc;

use berth::net::{bind, bind_tcp, Addr, ListenConfig, Listener};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Binds and listens on `host:port` for workers to share (see the module docs). Returns the
/// socket's descriptor (the caller owns it) and the address bound (port 0: the one chosen).
/// `OSError` with berth's wording (`address 127.0.0.1:9000 already in use`) if it cannot.
/// `backlog`: the listen backlog (`--backlog`). With `reuse_port`, the socket has
/// `SO_REUSEPORT` (one listener per worker slot: the kernel spreads connections over them);
/// `join` then skips the check that nothing listens on the port (the slots after the first
/// join it).
#[pyfunction]
#[pyo3(signature = (host, port, backlog=None, reuse_port=false, join=false))]
pub fn listen_shared(
    host: &str,
    port: u16,
    backlog: Option<i32>,
    reuse_port: bool,
    join: bool,
) -> PyResult<(i32, String, u16)> {
    let addr = address(host, port)?;
    let defaults = ListenConfig::default();
    let config = ListenConfig {
        backlog: backlog.unwrap_or(defaults.backlog),
        reuse_port,
        exclusive: !join,
        ..defaults
    };
    let mut listeners = bind_tcp(addr, 1, config).map_err(crate::bind_error)?;
    let listener = listeners.remove(0);
    let bound = listener.local_addr().map_err(|e| crate::os_error("", e))?;
    Ok((listener.into_raw_fd(), bound.ip().to_string(), bound.port()))
}

/// Binds and listens on the UNIX socket `path` for workers to share (`--uds` with
/// `--workers`): a stale socket file is replaced, a live one (another server's) or anything
/// else at the path refused, with berth's wording. Returns the socket's descriptor (the
/// caller owns it, and removes the file when done: the workers leave it alone). `mode`: the
/// socket file's mode (`--uds-permissions`), else the umask's.
#[pyfunction]
#[pyo3(signature = (path, backlog=None, mode=None))]
pub fn listen_unix(
    path: std::path::PathBuf,
    backlog: Option<i32>,
    mode: Option<u32>,
) -> PyResult<i32> {
    let defaults = ListenConfig::default();
    if mode.is_some_and(|m| m > 0o777) {
        return Err(PyValueError::new_err("mode: from 0 to 0o777"));
    }
    let config = ListenConfig {
        backlog: backlog.unwrap_or(defaults.backlog),
        unix_mode: mode,
        ..defaults
    };
    let mut listeners = bind(&Addr::Unix(path), 1, config).map_err(crate::bind_error)?;
    match listeners.remove(0) {
        Listener::Unix(l) => Ok(l.into_raw_fd()),
        Listener::Tcp(l) => Ok(l.into_raw_fd()),
    }
}

/// Asks the kernel for SIGTERM when the parent (the process that forked this one, `parent`)
/// dies, so that a worker whose parent was killed outright drains and exits instead of holding
/// the port for nobody. False if the parent is already gone.
#[pyfunction]
pub fn follow_parent(parent: i32) -> PyResult<bool> {
    berth::process::signal::terminate_with_parent(parent).map_err(|e| crate::os_error("", e))
}

/// `host:port` as an address, or a `ValueError`.
pub fn address(host: &str, port: u16) -> PyResult<SocketAddr> {
    let text = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    text.parse()
        .map_err(|_| PyValueError::new_err(format!("not an address: {host}:{port}")))
}

/// The listening socket `fd` a parent bound for its workers ([`listen_shared`]), taken over:
/// from here it is closed when berth is done with it (a drain closes the port once every
/// worker's copy is closed).
pub fn inherited(fd: i32) -> PyResult<Arc<socket2::Socket>> {
    berth::net::activation::inherited_listener(fd)
        .map_err(|e| PyValueError::new_err(format!("descriptor {fd}: {e}")))
}
