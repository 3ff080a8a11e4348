//! Binding the message protocol's other listeners: UNIX stream sockets and UDP sockets.
//!
//! A UNIX socket path left behind by a server that died is taken over (nothing answers on it);
//! a path where a live server answers is refused as in use, so two servers never silently steal
//! each other's clients; a path holding anything but a socket (a regular file, a directory, a
//! symlink) is refused and left alone.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// Binds a non-blocking UNIX stream listener at `path` (backlog 1024), for the message
/// engine. Errors name the path.
pub fn bind_unix(path: &Path) -> io::Result<UnixListener> {
    bind_unix_with(path, 1024, None)
        .map_err(|e| io::Error::new(e.kind(), format!("unix://{}: {e}", path.display())))
}

/// Binds a non-blocking, close-on-exec UNIX stream listener at `path` with `backlog`: the one
/// binder of UNIX sockets, for [`bind_unix`] and [`bind`](super::bind). A stale socket file
/// (nobody accepts on it) is replaced; a live one is refused (`AddrInUse`), and so is anything
/// else at the path (`AlreadyExists`: berth removes nothing but a stale socket). The file
/// gets `mode` if given, set before the socket listens (so no client connects under another
/// mode), else the mode the umask leaves (0777 & !umask, as `bind(2)` makes it); connecting
/// needs write permission on it. Errors do not name the path (the caller does).
pub(crate) fn bind_unix_with(
    path: &Path,
    backlog: i32,
    mode: Option<u32>,
) -> io::Result<UnixListener> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "the path exists and is not a socket; berth removes only a stale socket",
            ));
        }
        match UnixStream::connect(path) {
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "a server is already listening there",
                ))
            }
            // Nobody answers: a stale socket file from a server that did not clean up.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                std::fs::remove_file(path)?;
            }
            Err(e) => return Err(e),
        }
    }
    let bind = || -> io::Result<UnixListener> {
        // socket2 creates sockets with SOCK_CLOEXEC, so forked children never inherit them by
        // accident.
        let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
        socket.bind(&SockAddr::unix(path)?)?;
        if let Some(mode) = mode {
            // The file bind(2) made; a socket's own fchmod would not change it.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
        }
        socket.listen(backlog)?;
        socket.set_nonblocking(true)?;
        Ok(socket.into())
    };
    bind().map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => {
            let dir = path.parent().unwrap_or(Path::new("."));
            io::Error::new(
                e.kind(),
                format!("the directory {} does not exist", dir.display()),
            )
        }
        _ => e,
    })
}

/// A UNIX socket's file as its server bound it, to remove when the server stops listening
/// ([`SocketFile::remove`]), so the next start finds no stale file (uvicorn and nginx do the
/// same). Only that very file is removed: the device and inode seen at bind time must still
/// be at the path. Remove it while the socket still listens: until then no other server can
/// have taken the path over (a live socket is refused), and a file removed by someone else
/// cannot have freed its inode number for a newcomer's file. Removed once: a later call
/// (a drain's stop, then its deadline's) does nothing, the path being a newcomer's by then.
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    id: (u64, u64),
    removed: std::sync::atomic::AtomicBool,
}

impl SocketFile {
    /// The socket file at `path`, just bound by this process.
    pub fn bound(path: &Path) -> io::Result<SocketFile> {
        let meta = std::fs::symlink_metadata(path)?;
        Ok(SocketFile {
            path: path.to_owned(),
            id: (meta.dev(), meta.ino()),
            removed: Default::default(),
        })
    }

    /// Removes the file if it is still the one bound; quietly does nothing otherwise (gone
    /// already, or replaced by someone else's).
    pub fn remove(&self) {
        if self.removed.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return;
        }
        let ours = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|m| m.file_type().is_socket() && (m.dev(), m.ino()) == self.id);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Binds a non-blocking UDP socket on `addr`, with `SO_REUSEPORT` when `reuse_port` (several
/// processes may then share the port; the kernel keeps each source address on one of them).
pub fn bind_udp(addr: SocketAddr, reuse_port: bool) -> io::Result<UdpSocket> {
    let bind = || -> io::Result<UdpSocket> {
        let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        // No SO_REUSEADDR: on UDP it would let a second server bind the port silently.
        if reuse_port {
            socket.set_reuse_port(true)?;
        }
        if addr.is_ipv6() {
            socket.set_only_v6(true)?;
        }
        socket.bind(&addr.into())?;
        socket.set_nonblocking(true)?;
        Ok(socket.into())
    };
    bind().map_err(|e| io::Error::new(e.kind(), format!("udp://{addr}: {e}")))
}

/// The kernel buffers a QUIC socket asks for, each way: 4 MiB (capped at `net.core.rmem_max`
/// and `wmem_max`; quic-go asks for 7 MB). One socket carries every connection of a loop, and
/// a connection sends bursts of up to 45 packets in one `sendmsg` (GSO): with the default
/// ~208 KiB, ten 1 MiB answers at once overflowed the receiving side (`UdpRcvbufErrors`), and
/// every packet dropped there is a loss QUIC repairs only after its loss timer.
pub const QUIC_SOCKET_BUFFER: usize = 4 * 1024 * 1024;

/// Asks for [`QUIC_SOCKET_BUFFER`] bytes of receive and send buffer on `socket` (the kernel
/// may give less: no error for that).
pub fn size_quic_buffers(socket: &UdpSocket) -> io::Result<()> {
    let s = socket2::SockRef::from(socket);
    s.set_recv_buffer_size(QUIC_SOCKET_BUFFER)?;
    s.set_send_buffer_size(QUIC_SOCKET_BUFFER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_unix_socket_is_taken_over_and_a_live_one_is_not() {
        let dir = std::env::temp_dir().join(format!("berth-local-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let first = bind_unix(&path).unwrap();
        let err = bind_unix(&path).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        assert!(err.to_string().contains("already listening"), "{err}");
        drop(first); // the file stays behind, as after a crash
        assert!(path.exists());
        let _second = bind_unix(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Issue 12: a listener at the path of a regular file replaced the file with its socket.
    #[test]
    fn anything_but_a_socket_at_the_path_is_left_alone() {
        let dir = std::env::temp_dir().join(format!("berth-local-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("precious.txt");
        std::fs::write(&file, b"keep me").unwrap();
        let err = bind_unix(&file).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert!(err.to_string().contains("not a socket"), "{err}");
        assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
        let link = dir.join("link.sock");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(bind_unix(&link).is_err());
        assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
        let sub = dir.join("sub");
        std::fs::create_dir_all(&sub).unwrap();
        assert!(bind_unix(&sub).is_err());
        assert!(sub.is_dir());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_socket_file_is_removed_only_while_it_is_the_one_bound() {
        let dir = std::env::temp_dir().join(format!("berth-local-rm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let _first = bind_unix(&path).unwrap();
        let file = SocketFile::bound(&path).unwrap();
        // Someone moved ours away and bound another at the path: not ours to remove.
        std::fs::rename(&path, dir.join("moved.sock")).unwrap();
        let _second = bind_unix(&path).unwrap();
        file.remove();
        assert!(path.exists());
        std::fs::remove_file(dir.join("moved.sock")).unwrap();
        SocketFile::bound(&path).unwrap().remove();
        assert!(!path.exists());
        let err = bind_unix(&dir.join("missing/s.sock")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("does not exist"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn udp_sockets_share_a_port_with_reuse_port() {
        let a = bind_udp("127.0.0.1:0".parse().unwrap(), true).unwrap();
        let port = a.local_addr().unwrap();
        let _b = bind_udp(port, true).unwrap();
        let c = bind_udp(a.local_addr().unwrap(), false);
        assert!(c.is_err());
    }
}
