//! Taking the next connection from a non-blocking listener, for the models that accept on a
//! readiness loop (`evloop`, `actor`); and turning a connection away at a cap, for every model
//! ([`refuse`]). Retries what is transient; on anything else (out of
//! descriptors or memory) reports "paused" so the loop retries on a timer: the listener is
//! edge-triggered, and nothing would wake it for connections already waiting (nginx does the
//! same).
//!
//! Out of descriptors (`EMFILE`, `ENFILE`), a waiting client is not left in the backlog until
//! it gives up: one descriptor is kept in reserve, closed to accept it, and opened again once
//! it has been refused with the service's 503 (libuv's and haproxy's trick). Said once in the
//! log.

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};

use crate::net::{EventedListener, Socket, Transport};
use crate::stats::Shard;

/// Turns away a connection accepted over a cap (`-C`, `--max-threads`, `--max-children`), the
/// same way in every model: the service's refusal is written (best effort: the socket is new
/// and empty), our side shut, what the client already sent read and dropped — unread request
/// bytes would turn the close into a reset that can destroy the refusal before the client
/// reads it — and the refusal counted. Never left to rot in the backlog. `stream` must be
/// non-blocking: the caller is an acceptor with other clients to serve.
pub(crate) fn refuse<T: Transport>(
    stream: T,
    refusal: &[u8],
    shard: Shard<'_>,
    cap: usize,
    who: impl std::fmt::Display,
) {
    turn_away(stream, refusal, shard);
    log::debug!("{who}: at its cap ({cap}), refused a connection");
}

/// [`refuse`]'s answer and close, and its count.
fn turn_away<T: Transport>(mut stream: T, refusal: &[u8], shard: Shard<'_>) {
    // Counted before the answer goes: whoever reads the 503 and then `/stats` sees it counted
    // (a test that did so failed when the count came after).
    shard.connection_refused();
    let _ = stream.write(refusal);
    let _ = stream.shutdown_write();
    let mut sink = [0u8; 4096];
    while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
}

/// The descriptor kept in reserve for the moment the process runs out (see the module docs).
static SPARE: Mutex<Option<File>> = Mutex::new(None);
static SPARE_OPENED: Once = Once::new();
/// The log said that descriptors ran out.
static TOLD: AtomicBool = AtomicBool::new(false);

fn open_spare() -> Option<File> {
    File::open("/dev/null").ok()
}

fn out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// Out of descriptors: frees the one in reserve, accepts the client waiting and turns it away
/// with `refusal` (counted in `shard`), then takes the reserve again. False if there was none
/// to free (another thread has it, or it could not be opened again) or no client waited.
fn refuse_with_spare(listener: &EventedListener, refusal: &[u8], shard: Shard<'_>) -> bool {
    let mut spare = SPARE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(freed) = spare.take() else {
        return false;
    };
    drop(freed);
    let refused = match listener.accept() {
        Ok(stream) => {
            turn_away(stream, refusal, shard);
            true
        }
        Err(_) => false,
    };
    *spare = open_spare();
    if refused && !TOLD.swap(true, Ordering::Relaxed) {
        log::warn!(
            "out of file descriptors: new connections are answered 503 until some close \
             (raise `ulimit -n`, or lower -C or --max-open-files); said once"
        );
    }
    refused
}

/// The next waiting connection, or `None` when there is none now (`*paused` cleared) or
/// accepting failed (`*paused` set, the failure logged once per pause with `who`).
///
/// Out of descriptors, each client waiting is turned away with `refusal` (counted in `shard`)
/// while the reserve allows, rather than left waiting (see the module docs).
pub(crate) fn next(
    listener: &EventedListener,
    paused: &mut bool,
    who: impl std::fmt::Display,
    refusal: &[u8],
    shard: Shard<'_>,
) -> Option<Socket> {
    SPARE_OPENED.call_once(|| *SPARE.lock().unwrap_or_else(|e| e.into_inner()) = open_spare());
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
            Err(e) if out_of_descriptors(&e) && refuse_with_spare(listener, refusal, shard) => {}
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
