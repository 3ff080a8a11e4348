//! Taking the next connection from a non-blocking listener, for the models that accept on a
//! readiness loop (`evloop`, `actor`); and turning a connection away at a cap, for every model
//! ([`refuse`]). Retries what is transient; on anything else (out of
//! descriptors or memory) reports "paused" so the loop retries on a timer: the listener is
//! edge-triggered, and nothing would wake it for connections already waiting (nginx does the
//! same).

use std::io;

use crate::net::{EventedListener, Socket, Transport};
use crate::stats::Shard;

/// Turns away a connection accepted over a cap (`-C`, `--max-threads`, `--max-children`), the
/// same way in every model: the service's refusal is written (best effort: the socket is new
/// and empty), our side shut, what the client already sent read and dropped — unread request
/// bytes would turn the close into a reset that can destroy the refusal before the client
/// reads it — and the refusal counted. Never left to rot in the backlog. `stream` must be
/// non-blocking: the caller is an acceptor with other clients to serve.
pub(crate) fn refuse<T: Transport>(
    mut stream: T,
    refusal: &[u8],
    shard: Shard<'_>,
    cap: usize,
    who: impl std::fmt::Display,
) {
    let _ = stream.write(refusal);
    let _ = stream.shutdown_write();
    let mut sink = [0u8; 4096];
    while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
    shard.connection_refused();
    log::debug!("{who}: at its cap ({cap}), refused a connection");
}

/// The next waiting connection, or `None` when there is none now (`*paused` cleared) or
/// accepting failed (`*paused` set, the failure logged once per pause with `who`).
pub(crate) fn next(
    listener: &EventedListener,
    paused: &mut bool,
    who: impl std::fmt::Display,
) -> Option<Socket> {
    loop {
        match listener.accept() {
            Ok(stream) => {
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
