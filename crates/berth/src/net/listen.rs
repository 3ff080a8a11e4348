//! Binding listeners: [`bind`] takes an [`Addr`] (TCP or a UNIX socket's path; a UDP address
//! has no listener, [`bind_udp`](super::bind_udp) binds it) and gives [`Listener`]s, the one
//! listener type every model holds.
//!
//! TCP: one listener per accept thread or process, all on the same address through
//! `SO_REUSEPORT`, so the kernel spreads incoming connections over them (seed 001, seed 003).
//! A UNIX socket cannot be shared that way (`SO_REUSEPORT` is an inet option): its path is bound
//! once ([`bind_unix`](super::bind_unix), which replaces a stale socket file and refuses a live
//! one or anything that is not a socket), and every thread gets a copy of the one socket, so
//! they share one accept queue, as with a socket passed by systemd.
//!
//! # Whose port it is
//!
//! `SO_REUSEPORT` lets *any* socket of the same user join a port, so on its own it would let a
//! second berth started by mistake quietly take half of the first one's connections. By default
//! ([`ListenConfig::exclusive`]) berth therefore first checks that nobody listens on the address:
//! it binds a probe socket *without* `SO_REUSEPORT` (the kernel refuses that bind, `EADDRINUSE`,
//! while any socket listens there, `SO_REUSEPORT` or not), closes it, then binds its own
//! listeners with `SO_REUSEPORT`, which its other threads and processes join afterwards without
//! a probe. The probe has `SO_REUSEADDR`, so connections of an earlier server still in
//! `TIME_WAIT` do not count as a listener.
//!
//! The check and the bind are two steps: two servers started in the same instant (within
//! microseconds) could both pass the check and then share the port. That race needs two starts
//! at once by the same user; a server started while another listens is always refused. Turning
//! `exclusive` off (`--reuse-port`) skips the check on purpose, to share the port with another
//! process — the old server during a zero-downtime restart.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::sync::Arc;

use socket2::{Domain, Protocol, Socket, Type};

use super::transport::BlockingSocket;
use super::{Acceptor, Addr};

/// A listening socket of either family, the one listener type of every model: std sockets by
/// default (the blocking models accept on it; [`Listener::accept`] gives a blocking socket),
/// [`EventedListener`] once a readiness model has made it mio's ([`Listener::into_evented`]).
/// uring accepts on its descriptor. A new transport family is a variant here and in
/// [`Socket`](super::Socket), bound in [`bind`].
#[derive(Debug)]
pub enum Listener<T = TcpListener, U = UnixListener> {
    /// TCP.
    Tcp(T),
    /// A UNIX stream socket.
    Unix(U),
}

/// A [`Listener`] registered with a mio poll (the readiness models): accepts non-blocking
/// sockets ([`EventedListener::accept`]).
pub type EventedListener = Listener<mio::net::TcpListener, mio::net::UnixListener>;

/// Calls `$body` with `$l` bound to the socket inside a [`Listener`].
macro_rules! either {
    ($listener:expr, $l:ident => $body:expr) => {
        match $listener {
            Listener::Tcp($l) => $body,
            Listener::Unix($l) => $body,
        }
    };
}

impl Listener {
    /// Another handle on the same listening socket (its accept queue is shared).
    pub fn try_clone(&self) -> io::Result<Listener> {
        Ok(match self {
            Listener::Tcp(l) => Listener::Tcp(l.try_clone()?),
            Listener::Unix(l) => Listener::Unix(l.try_clone()?),
        })
    }

    /// What it listens on.
    pub fn local_addr(&self) -> io::Result<Addr> {
        match self {
            Listener::Tcp(l) => l.local_addr().map(Addr::Tcp),
            Listener::Unix(l) => {
                let addr = l.local_addr()?;
                let path = addr.as_pathname().ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidInput, "an unnamed UNIX socket")
                })?;
                Ok(Addr::Unix(path.to_owned()))
            }
        }
    }

    /// Sets `O_NONBLOCK` on the listening socket.
    pub fn set_nonblocking(&self, yes: bool) -> io::Result<()> {
        either!(self, l => l.set_nonblocking(yes))
    }

    /// Accepts a connection as a blocking socket (`accept4(2)` without `SOCK_NONBLOCK`: the
    /// listener's own `O_NONBLOCK` is not inherited).
    pub fn accept(&self) -> io::Result<BlockingSocket> {
        use super::Socket;
        match self {
            Listener::Tcp(l) => l.accept().map(|(s, _)| Socket::Tcp(s)),
            Listener::Unix(l) => l.accept().map(|(s, _)| Socket::Unix(s)),
        }
    }

    /// The same socket as mio's, to register with a poll (it must be non-blocking).
    pub fn into_evented(self) -> EventedListener {
        match self {
            Listener::Tcp(l) => Listener::Tcp(mio::net::TcpListener::from_std(l)),
            Listener::Unix(l) => Listener::Unix(mio::net::UnixListener::from_std(l)),
        }
    }
}

impl EventedListener {
    /// Accepts a connection as a non-blocking socket (one `accept4(2)` with `SOCK_NONBLOCK`).
    pub fn accept(&self) -> io::Result<super::Socket> {
        use super::Socket;
        match self {
            Listener::Tcp(l) => l.accept().map(|(s, _)| Socket::Tcp(s)),
            Listener::Unix(l) => l.accept().map(|(s, _)| Socket::Unix(s)),
        }
    }
}

impl<T: AsRawFd, U: AsRawFd> AsRawFd for Listener<T, U> {
    fn as_raw_fd(&self) -> RawFd {
        either!(self, l => l.as_raw_fd())
    }
}

impl<T: AsFd, U: AsFd> AsFd for Listener<T, U> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        either!(self, l => l.as_fd())
    }
}

impl mio::event::Source for EventedListener {
    fn register(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        either!(self, l => l.register(registry, token, interests))
    }
    fn reregister(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        either!(self, l => l.reregister(registry, token, interests))
    }
    fn deregister(&mut self, registry: &mio::Registry) -> io::Result<()> {
        either!(self, l => l.deregister(registry))
    }
}

/// How listeners are bound, and what their connections are served over.
#[derive(Debug, Clone)]
pub struct ListenConfig {
    /// Listen backlog passed to `listen(2)` (the kernel caps it at `net.core.somaxconn`).
    pub backlog: i32,
    /// Set `SO_REUSEPORT`, so several listeners (threads or processes) share the port.
    pub reuse_port: bool,
    /// Refuse the address when any other socket already listens on it (checked once per
    /// [`bind_tcp`] call, before its first bind; see the module docs). Off, a server joins a port
    /// that another process of the same user listens on with `SO_REUSEPORT` (`--reuse-port`).
    /// Processes that join a port their own parent checked (prefork workers) turn it off.
    pub exclusive: bool,
    /// Set `TCP_NODELAY` on the listener. Linux copies it to every accepted connection, which
    /// saves a `setsockopt` per connection.
    pub nodelay: bool,
    /// Hold new connections in the kernel until their first bytes arrive, for up to this many
    /// seconds (`TCP_DEFER_ACCEPT`; 0 = off). For protocols where the client speaks first
    /// (HTTP), the server then accepts a connection and reads its request in one go.
    pub defer_accept_secs: u32,
    /// What accepted connections are served over ([`Acceptor::Plain`]: the socket itself).
    /// Binding ignores it; every model hands each accepted socket to it.
    pub transport: Acceptor,
    /// A listening socket opened by someone else (systemd's socket activation:
    /// [`activation::listen_fds`](super::activation::listen_fds)): [`bind_tcp`] hands out
    /// copies of it instead of binding, its address is the server's, and no check or
    /// reservation of the port is made (it is held already). Its threads and processes then
    /// share one accept queue instead of one each.
    pub inherited: Option<Arc<Socket>>,
    /// The mode of a UNIX socket's file (`0o660`: the owner and its group may connect),
    /// set before the socket listens; `None`: what the umask leaves (0777 & !umask). TCP
    /// ignores it.
    pub unix_mode: Option<u32>,
}

impl Default for ListenConfig {
    fn default() -> Self {
        ListenConfig {
            backlog: 1024,
            reuse_port: true,
            exclusive: true,
            nodelay: true,
            defer_accept_secs: 0,
            transport: Acceptor::Plain,
            inherited: None,
            unix_mode: None,
        }
    }
}

/// Why binding failed, worded for a person: `address 127.0.0.1:9000 already in use`,
/// `address unix:///run/berth.sock already in use`.
#[derive(Debug)]
pub struct BindError {
    /// The address that could not be bound.
    pub addr: Addr,
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
            // A UNIX socket's own reasons (a file that is not a socket, a missing directory)
            // are worded by `bind_unix`.
            _ => write!(f, "cannot listen on {}: {}", self.addr, self.source),
        }
    }
}

impl std::error::Error for BindError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Binds `count` non-blocking, close-on-exec listeners on `addr`, as [`bind_tcp`] does for a
/// TCP address. A UNIX socket's path is bound once ([`bind_unix`](super::bind_unix): a stale
/// socket file is replaced, a live one or anything else at the path refused) and the others
/// are copies of it, sharing its accept queue: `SO_REUSEPORT` does not apply to UNIX sockets.
/// `config`'s TCP options (`reuse_port`, `nodelay`, `defer_accept_secs`) do not apply to a
/// path. An inherited UNIX socket ([`ListenConfig::inherited`], e.g. bound by a supervisor for
/// its workers) is served as it is, in copies: nothing is bound, and its file is not touched.
pub fn bind(addr: &Addr, count: usize, config: ListenConfig) -> Result<Vec<Listener>, BindError> {
    let path = match addr {
        Addr::Tcp(tcp) => {
            return Ok(bind_tcp(*tcp, count, config)?
                .into_iter()
                .map(Listener::Tcp)
                .collect())
        }
        Addr::Unix(path) => path,
        // Datagrams have no listener to accept on: UDP sockets are bound by `bind_udp`.
        Addr::Udp(_) => {
            return Err(BindError {
                addr: addr.clone(),
                source: io::Error::new(
                    io::ErrorKind::Unsupported,
                    "not a stream address (tcp:// or unix://)",
                ),
            })
        }
    };
    let error = |source| BindError {
        addr: addr.clone(),
        source,
    };
    let first = match &config.inherited {
        Some(socket) => {
            socket.set_nonblocking(true).map_err(error)?;
            UnixListener::from(socket.try_clone().map_err(error)?)
        }
        None => {
            super::local::bind_unix_with(path, config.backlog, config.unix_mode).map_err(error)?
        }
    };
    let mut listeners = Vec::with_capacity(count.max(1));
    for _ in 1..count.max(1) {
        listeners.push(Listener::Unix(first.try_clone().map_err(error)?));
    }
    listeners.insert(0, Listener::Unix(first));
    Ok(listeners)
}

/// Binds `count` non-blocking, close-on-exec listeners on `addr`. With port 0 the first listener
/// picks a free port and the others join it, so all share one port. With
/// [`ListenConfig::exclusive`] (the default) an address another socket listens on is refused
/// first, `SO_REUSEPORT` or not.
pub fn bind_tcp(
    addr: SocketAddr,
    count: usize,
    config: ListenConfig,
) -> Result<Vec<TcpListener>, BindError> {
    if let Some(socket) = &config.inherited {
        return adopt(socket, count, &config);
    }
    if config.exclusive && config.reuse_port {
        check_unshared(addr)?;
    }
    let mut listeners = Vec::with_capacity(count);
    let mut addr = addr;
    for _ in 0..count.max(1) {
        let listener = bind_one(addr, &config).map_err(|source| BindError {
            addr: Addr::Tcp(addr),
            source,
        })?;
        if addr.port() == 0 {
            addr = listener.local_addr().map_err(|source| BindError {
                addr: Addr::Tcp(addr),
                source,
            })?;
        }
        listeners.push(listener);
    }
    Ok(listeners)
}

/// Fails with `already in use` if any socket listens on `addr`, whatever its options: a socket
/// bound without `SO_REUSEPORT` conflicts with every listener on the same address. (Without
/// `SO_REUSEPORT` a bind makes this check itself, so [`bind_tcp`] needs it only with it.) Port 0
/// is always free: the kernel picks an unused port.
pub fn check_unshared(addr: SocketAddr) -> Result<(), BindError> {
    if addr.port() == 0 {
        return Ok(());
    }
    let probe = || -> io::Result<()> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        // TIME_WAIT leftovers of an earlier server are not a listener: they must not count.
        socket.set_reuse_address(true)?;
        if addr.is_ipv6() {
            socket.set_only_v6(true)?;
        }
        socket.bind(&addr.into())
        // Closed here: the probe never listens, so it never takes a connection.
    };
    probe().map_err(|source| BindError {
        addr: Addr::Tcp(addr),
        source,
    })
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
    reserve().map_err(|source| BindError {
        addr: Addr::Tcp(addr),
        source,
    })
}

/// `count` copies of an inherited listening socket, with berth's options set on it.
fn adopt(
    socket: &Socket,
    count: usize,
    config: &ListenConfig,
) -> Result<Vec<TcpListener>, BindError> {
    let addr = socket
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
    let prepare = || -> io::Result<Vec<TcpListener>> {
        if config.nodelay {
            socket.set_tcp_nodelay(true)?;
        }
        if config.defer_accept_secs > 0 {
            crate::sys::socket::set_defer_accept(socket, config.defer_accept_secs)?;
        }
        socket.set_nonblocking(true)?;
        (0..count.max(1))
            .map(|_| Ok(socket.try_clone()?.into()))
            .collect()
    };
    prepare().map_err(|source| BindError {
        addr: Addr::Tcp(addr),
        source,
    })
}

fn bind_one(addr: SocketAddr, config: &ListenConfig) -> io::Result<TcpListener> {
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
        crate::sys::socket::set_defer_accept(&socket, config.defer_accept_secs)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(config.backlog)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
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
    fn a_udp_address_has_no_stream_listener() {
        let addr = Addr::Udp("127.0.0.1:0".parse().unwrap());
        let err = bind(&addr, 1, ListenConfig::default()).unwrap_err();
        assert_eq!(err.source.kind(), io::ErrorKind::Unsupported);
        assert_eq!(
            err.to_string(),
            "cannot listen on udp://127.0.0.1:0: not a stream address (tcp:// or unix://)"
        );
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

    #[test]
    fn a_port_another_server_listens_on_is_refused_unless_sharing_is_asked_for() {
        let first = bind_tcp("127.0.0.1:0".parse().unwrap(), 2, ListenConfig::default()).unwrap();
        let addr = first[0].local_addr().unwrap();
        // The first server's listeners have SO_REUSEPORT, and so would ours: without the check
        // the kernel would let us join them.
        let err = bind_tcp(addr, 2, ListenConfig::default()).unwrap_err();
        assert_eq!(err.to_string(), format!("address {addr} already in use"));
        assert!(check_unshared(addr).is_err());
        let joined = bind_tcp(
            addr,
            2,
            ListenConfig {
                exclusive: false,
                ..Default::default()
            },
        )
        .unwrap();
        assert!(joined.iter().all(|l| l.local_addr().unwrap() == addr));
        drop((first, joined));
        // Nothing listens any more: the address is free again.
        check_unshared(addr).unwrap();
    }

    #[test]
    fn a_reserved_port_that_nobody_listens_on_is_not_in_use() {
        // prefork's master holds its port with a bound socket that never listens; connections
        // left in TIME_WAIT are similar. Neither is a server taking connections.
        let (_reservation, addr) = reserve_port("127.0.0.1:0".parse().unwrap()).unwrap();
        check_unshared(addr).unwrap();
    }

    #[test]
    fn connections_left_in_time_wait_do_not_hold_the_port() {
        let ls = bind_tcp("127.0.0.1:0".parse().unwrap(), 1, ListenConfig::default()).unwrap();
        let addr = ls[0].local_addr().unwrap();
        let client = std::net::TcpStream::connect(addr).unwrap();
        ls[0].set_nonblocking(false).unwrap();
        let (served, _) = ls[0].accept().unwrap();
        // The server closes first, so its side of the connection enters TIME_WAIT.
        drop(served);
        let mut buf = [0u8; 1];
        assert_eq!(std::io::Read::read(&mut &client, &mut buf).unwrap(), 0);
        drop(client);
        drop(ls);
        check_unshared(addr).unwrap();
        bind_tcp(addr, 2, ListenConfig::default()).unwrap();
    }
}
