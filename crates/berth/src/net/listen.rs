//! Binding TCP listeners: one per accept thread or process, all on the same address through
//! `SO_REUSEPORT`, so the kernel spreads incoming connections over them (seed 001, seed 003).

use std::io;
use std::net::{SocketAddr, TcpListener};

use socket2::{Domain, Protocol, Socket, Type};

/// How listeners are bound.
#[derive(Debug, Clone, Copy)]
pub struct ListenConfig {
    /// Listen backlog passed to `listen(2)` (the kernel caps it at `net.core.somaxconn`).
    pub backlog: i32,
    /// Set `SO_REUSEPORT`, so several listeners (threads or processes) share the port.
    pub reuse_port: bool,
    /// Set `TCP_NODELAY` on the listener. Linux copies it to every accepted connection, which
    /// saves a `setsockopt` per connection.
    pub nodelay: bool,
    /// Hold new connections in the kernel until their first bytes arrive, for up to this many
    /// seconds (`TCP_DEFER_ACCEPT`; 0 = off). For protocols where the client speaks first
    /// (HTTP), the server then accepts a connection and reads its request in one go.
    pub defer_accept_secs: u32,
}

impl Default for ListenConfig {
    fn default() -> Self {
        ListenConfig {
            backlog: 1024,
            reuse_port: true,
            nodelay: true,
            defer_accept_secs: 0,
        }
    }
}

/// Why binding failed, worded for a person: `address 127.0.0.1:9000 already in use`.
#[derive(Debug)]
pub struct BindError {
    /// The address that could not be bound.
    pub addr: SocketAddr,
    /// The underlying error.
    pub source: io::Error,
}

impl std::fmt::Display for BindError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.source.kind() {
            io::ErrorKind::AddrInUse => write!(f, "address {} already in use", self.addr),
            io::ErrorKind::AddrNotAvailable => {
                write!(f, "address {} is not available on this host", self.addr)
            }
            io::ErrorKind::PermissionDenied => write!(f, "permission denied binding {}", self.addr),
            _ => write!(f, "cannot listen on {}: {}", self.addr, self.source),
        }
    }
}

impl std::error::Error for BindError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Binds `count` non-blocking, close-on-exec listeners on `addr`. With port 0 the first listener
/// picks a free port and the others join it, so all share one port.
pub fn bind_tcp(
    addr: SocketAddr,
    count: usize,
    config: ListenConfig,
) -> Result<Vec<TcpListener>, BindError> {
    let mut listeners = Vec::with_capacity(count);
    let mut addr = addr;
    for _ in 0..count.max(1) {
        let listener = bind_one(addr, config).map_err(|source| BindError { addr, source })?;
        if addr.port() == 0 {
            addr = listener
                .local_addr()
                .map_err(|source| BindError { addr, source })?;
        }
        listeners.push(listener);
    }
    Ok(listeners)
}

/// Binds a `SO_REUSEPORT` socket on `addr` without listening on it. It holds the port (and
/// resolves port 0) for processes that will each bind their own listener on it, while taking no
/// connections itself: the kernel spreads connections over listening sockets only.
pub fn reserve_port(addr: SocketAddr) -> Result<(Socket, SocketAddr), BindError> {
    let reserve = || -> io::Result<(Socket, SocketAddr)> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.bind(&addr.into())?;
        let bound = socket.local_addr()?.as_socket().unwrap_or(addr);
        Ok((socket, bound))
    };
    reserve().map_err(|source| BindError { addr, source })
}

fn bind_one(addr: SocketAddr, config: ListenConfig) -> io::Result<TcpListener> {
    // socket2 creates sockets with SOCK_CLOEXEC, so forked children never inherit them by accident.
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    // SO_REUSEADDR lets a restarted server bind while old connections sit in TIME_WAIT.
    socket.set_reuse_address(true)?;
    if config.reuse_port {
        socket.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    if config.nodelay {
        socket.set_tcp_nodelay(true)?;
    }
    if config.defer_accept_secs > 0 {
        set_defer_accept(&socket, config.defer_accept_secs)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(config.backlog)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

fn set_defer_accept(socket: &Socket, secs: u32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let value = libc::c_int::try_from(secs).unwrap_or(libc::c_int::MAX);
    // SAFETY: the descriptor is open for the duration of the call, and the option value points
    // to a live c_int whose size is passed alongside it.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_zero_listeners_share_the_chosen_port() {
        let ls = bind_tcp("127.0.0.1:0".parse().unwrap(), 3, ListenConfig::default()).unwrap();
        let port = ls[0].local_addr().unwrap().port();
        assert_ne!(port, 0);
        assert!(ls.iter().all(|l| l.local_addr().unwrap().port() == port));
    }

    #[test]
    fn address_in_use_is_worded_for_people() {
        let ls = bind_tcp(
            "127.0.0.1:0".parse().unwrap(),
            1,
            ListenConfig {
                reuse_port: false,
                ..Default::default()
            },
        )
        .unwrap();
        let addr = ls[0].local_addr().unwrap();
        let err = bind_tcp(
            addr,
            1,
            ListenConfig {
                reuse_port: false,
                ..Default::default()
            },
        )
        .unwrap_err();
        assert_eq!(err.to_string(), format!("address {addr} already in use"));
    }
}
