//! Taking the next connection from a non-blocking listener, for the models that accept on a
//! readiness loop (`evloop`, `actor`). Retries what is transient; on anything else (out of
//! descriptors or memory) reports "paused" so the loop retries on a timer: the listener is
//! edge-triggered, and nothing would wake it for connections already waiting (nginx does the
//! same).

use std::io;

use mio::net::{TcpListener, TcpStream};

use crate::stats::Shard;

/// Turns away a connection accepted over the capacity (`-C`), the same way in every model that
/// accepts on a readiness loop: the service's refusal is written (best effort, the socket is
/// new and empty), the refusal counted, and the socket closed by dropping it. Never left to
/// rot in the backlog.
pub(crate) fn refuse(
    mut stream: TcpStream,
    refusal: &[u8],
    shard: Shard<'_>,
    capacity: usize,
    who: impl std::fmt::Display,
) {
    let _ = io::Write::write(&mut stream, refusal);
    shard.connection_refused();
    log::debug!("{who}: at capacity ({capacity}), refused a connection");
}

/// The next waiting connection, or `None` when there is none now (`*paused` cleared) or
/// accepting failed (`*paused` set, the failure logged once per pause with `who`).
pub(crate) fn next(
    listener: &TcpListener,
    paused: &mut bool,
    who: impl std::fmt::Display,
) -> Option<TcpStream> {
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                *paused = false;
                return Some(stream);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                *paused = false;
                return None;
            }
            Err(e)
                if e.kind() == io::ErrorKind::Interrupted
                    || e.kind() == io::ErrorKind::ConnectionAborted => {}
            Err(e) => {
                if !*paused {
                    log::warn!("{who}: accept failed, retrying on a timer: {e}");
                }
                *paused = true;
                return None;
            }
        }
    }
}
