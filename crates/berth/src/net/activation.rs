//! Running under a service manager: systemd's socket activation (`sd_listen_fds(3)`), where
//! the manager opens the listening socket and passes it to berth as descriptor 3 (so the port
//! is held across restarts, and connections wait in its queue while berth starts), and its
//! readiness protocol (`sd_notify(3)`: `READY=1`, `RELOADING=1`, `STOPPING=1` on the datagram
//! socket `$NOTIFY_SOCKET`), which `Type=notify` units wait for.
//!
//! Both speak through environment variables the manager sets, and are no-ops without them.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::sync::Arc;

use socket2::Socket;

/// The first descriptor a service manager passes (`SD_LISTEN_FDS_START`).
const LISTEN_FDS_START: i32 = 3;

/// The listening sockets passed to this process (`LISTEN_PID` names it and `LISTEN_FDS` says
/// how many, from descriptor 3), in order; none when the variables are absent or meant for
/// another process. The variables are removed, so that nothing started later (a forked worker
/// that execs, a child process) takes the sockets as its own. Call it once, early.
pub fn listen_fds() -> io::Result<Vec<Arc<Socket>>> {
    let pid = std::env::var("LISTEN_PID").ok();
    let count = std::env::var("LISTEN_FDS").ok();
    // Removed before any thread starts (berth calls this first), as
    // `sd_listen_fds(unset_environment=1)` does: no other thread reads the environment now.
    std::env::remove_var("LISTEN_PID");
    std::env::remove_var("LISTEN_FDS");
    std::env::remove_var("LISTEN_FDNAMES");
    let (Some(pid), Some(count)) = (pid, count) else {
        return Ok(Vec::new());
    };
    if pid.trim().parse::<u32>().ok() != Some(std::process::id()) {
        return Ok(Vec::new());
    }
    let count: i32 = count.trim().parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("LISTEN_FDS={count:?} is not a number of descriptors"),
        )
    })?;
    (0..count.max(0))
        .map(|i| {
            let fd = LISTEN_FDS_START + i;
            let owned = crate::sys::fd::adopt_inherited(fd).map_err(|e| {
                io::Error::new(e.kind(), format!("descriptor {fd} of LISTEN_FDS: {e}"))
            })?;
            let socket = Socket::from(owned);
            check_listening(&socket).map_err(|e| {
                io::Error::new(e.kind(), format!("descriptor {fd} of LISTEN_FDS: {e}"))
            })?;
            Ok(Arc::new(socket))
        })
        .collect()
}

/// Takes over the listening socket `fd` this process inherited from the one that forked it
/// (a supervisor that bound the port once for all its workers, as `python -m berth --workers`
/// does): checked to be open and listening, marked close-on-exec. The caller owns `fd` and
/// hands it over; it is closed when the returned socket is. A TCP socket, or a UNIX socket
/// bound to a path ([`unix_path`] tells which: serve it at [`Addr::Unix`](super::Addr)).
pub fn inherited_listener(fd: i32) -> io::Result<Arc<Socket>> {
    let socket = Socket::from(crate::sys::fd::adopt_inherited(fd)?);
    if unix_path(&socket).is_none() {
        check_listening(&socket)?;
    } else if !socket.is_listener()? {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a socket that is not listening",
        ));
    }
    Ok(Arc::new(socket))
}

/// The path a UNIX socket is bound to; `None` for any other socket (or an unnamed one).
pub fn unix_path(socket: &Socket) -> Option<std::path::PathBuf> {
    let addr = socket.local_addr().ok()?;
    addr.as_pathname().map(ToOwned::to_owned)
}

/// A passed descriptor must be a listening TCP socket: a unit with `ListenDatagram=`, or a
/// socket that was never `listen`ed, is a configuration mistake to name at startup.
fn check_listening(socket: &Socket) -> io::Result<()> {
    let invalid = |what: &str| Err(io::Error::new(io::ErrorKind::InvalidInput, what.to_owned()));
    match socket.r#type() {
        Ok(socket2::Type::STREAM) => {}
        Ok(_) => return invalid("not a stream socket (ListenStream= is needed)"),
        Err(_) => return invalid("not a socket"),
    }
    if !socket.is_listener()? {
        return invalid("a socket that is not listening");
    }
    match socket.local_addr()?.as_socket() {
        Some(_) => Ok(()),
        None => invalid("not a TCP socket (an IP address and port are needed)"),
    }
}

/// Tells the service manager about a change of state (`READY=1`, `RELOADING=1`,
/// `STOPPING=1`, `STATUS=...`), if it asked to be told (`$NOTIFY_SOCKET`). Errors are
/// returned for the caller to log; without `$NOTIFY_SOCKET` nothing is sent.
pub fn notify(state: &str) -> io::Result<()> {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(());
    };
    let sock = UnixDatagram::unbound()?;
    let bytes = path.as_encoded_bytes();
    match bytes.strip_prefix(b"@") {
        // An abstract socket: its name is what follows the `@`.
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            sock.send_to_addr(state.as_bytes(), &addr)?;
        }
        None => {
            sock.send_to(state.as_bytes(), &path)?;
        }
    }
    Ok(())
}
