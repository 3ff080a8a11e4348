//! What `python -m berth --workers N` needs from Rust: the port, bound once by the parent and
//! shared by its workers, and a worker's tie to its parent.
//!
//! The parent binds the listening socket itself, *without* `SO_REUSEPORT`: the kernel refuses
//! that bind while any other socket listens on the address (another berth, whose listeners have
//! `SO_REUSEPORT`, included), and while it is held no socket can join the port (`SO_REUSEPORT`
//! needs every listener on the port to have it). So a port another server holds is refused
//! before any worker starts, and two servers can never split one port's requests. The workers
//! inherit the socket across `fork` and serve it (berth's `ListenConfig::inherited`: one accept
//! queue for all, as gunicorn's and uvicorn's workers share theirs); the parent keeps it open,
//! so the port takes connections while a worker is replaced, even while none is alive.

use std::net::SocketAddr;
use std::os::fd::IntoRawFd;
use std::sync::Arc;

use berth::net::{bind, bind_tcp, Addr, ListenConfig, Listener};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Binds and listens on `host:port` for workers to share (see the module docs). Returns the
/// socket's descriptor (the caller owns it) and the address bound (port 0: the one chosen).
/// `OSError` with berth's wording (`address 127.0.0.1:9000 already in use`) if it cannot.
/// `backlog`: the listen backlog (`--backlog`).
#[pyfunction]
#[pyo3(signature = (host, port, backlog=None))]
pub fn listen_shared(host: &str, port: u16, backlog: Option<i32>) -> PyResult<(i32, String, u16)> {
    let addr = address(host, port)?;
    let defaults = ListenConfig::default();
    let config = ListenConfig {
        backlog: backlog.unwrap_or(defaults.backlog),
        reuse_port: false,
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
/// caller owns it, and removes the file when done: the workers leave it alone).
#[pyfunction]
#[pyo3(signature = (path, backlog=None))]
pub fn listen_unix(path: std::path::PathBuf, backlog: Option<i32>) -> PyResult<i32> {
    let defaults = ListenConfig::default();
    let config = ListenConfig {
        backlog: backlog.unwrap_or(defaults.backlog),
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
