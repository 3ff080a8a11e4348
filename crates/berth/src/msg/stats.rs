//! Counters of a message server: connections, admissions, refusals by code, messages. Shared
//! by every engine of a server (they are atomics), read as a [`MsgCounts`] snapshot.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use berth_proto::msg::Refusal;

/// The counters.
#[derive(Debug, Default)]
pub struct MsgStats {
    connections: AtomicU64,
    admitted: AtomicU64,
    disconnected: AtomicU64,
    refused: [AtomicU64; Refusal::ALL.len()],
    too_large: AtomicU64,
    messages_in: AtomicU64,
    bytes_in: AtomicU64,
    udp_dropped: AtomicU64,
    write_timeouts: AtomicU64,
    read_timeouts: AtomicU64,
    stall_timeouts: AtomicU64,
    streams_cut: AtomicU64,
    held_peak: AtomicU64,
}

/// A reading of [`MsgStats`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MsgCounts {
    /// Stream connections accepted and UDP hellos received.
    pub connections: u64,
    /// Clients admitted (handshake answered `OK`, or raw).
    pub admitted: u64,
    /// Admitted clients gone.
    pub disconnected: u64,
    /// Refusals by code, in [`Refusal::ALL`] order.
    pub refused: Vec<(&'static str, u64)>,
    /// Connections ended for an over-limit frame.
    pub too_large: u64,
    /// Messages read from clients.
    pub messages_in: u64,
    /// Payload bytes read from clients.
    pub bytes_in: u64,
    /// UDP datagrams dropped (unknown sender, unknown kind).
    pub udp_dropped: u64,
    /// Clients dropped for taking none of their output for `--write-timeout`.
    pub write_timeouts: u64,
    /// Clients ended for stopping in the middle of a message for `--read-timeout`.
    pub read_timeouts: u64,
    /// Clients ended for stopping, for `--stall-timeout`, in the middle of a message others
    /// waited on.
    pub stall_timeouts: u64,
    /// Streamed messages completed with zeros because their sender could not finish them.
    pub streams_cut: u64,
    /// The most bytes one engine thread has held at once for whole-message receipt (messages
    /// being received whole, and the answers of delivered ones still queued).
    pub held_peak: u64,
}

impl MsgCounts {
    /// Refusals with this code.
    pub fn refused(&self, code: &str) -> u64 {
        self.refused
            .iter()
            .find(|(c, _)| *c == code)
            .map_or(0, |(_, n)| *n)
    }
}

impl MsgStats {
    pub(crate) fn connection(&self) {
        self.connections.fetch_add(1, Relaxed);
    }
    pub(crate) fn admitted(&self) {
        self.admitted.fetch_add(1, Relaxed);
    }
    pub(crate) fn disconnected(&self) {
        self.disconnected.fetch_add(1, Relaxed);
    }
    pub(crate) fn refused(&self, why: Refusal) {
        let i = Refusal::ALL.iter().position(|r| *r == why).unwrap_or(0);
        self.refused[i].fetch_add(1, Relaxed);
    }
    pub(crate) fn too_large(&self) {
        self.too_large.fetch_add(1, Relaxed);
    }
    pub(crate) fn message(&self, bytes: usize) {
        self.messages_in.fetch_add(1, Relaxed);
        self.bytes_in.fetch_add(bytes as u64, Relaxed);
    }
    pub(crate) fn udp_dropped(&self) {
        self.udp_dropped.fetch_add(1, Relaxed);
    }
    pub(crate) fn write_timeout(&self) {
        self.write_timeouts.fetch_add(1, Relaxed);
    }
    pub(crate) fn read_timeout(&self) {
        self.read_timeouts.fetch_add(1, Relaxed);
    }
    pub(crate) fn stall_timeout(&self) {
        self.stall_timeouts.fetch_add(1, Relaxed);
    }
    pub(crate) fn stream_cut(&self) {
        self.streams_cut.fetch_add(1, Relaxed);
    }
    pub(crate) fn held(&self, bytes: u64) {
        self.held_peak.fetch_max(bytes, Relaxed);
    }

    /// Reads every counter.
    pub fn snapshot(&self) -> MsgCounts {
        MsgCounts {
            connections: self.connections.load(Relaxed),
            admitted: self.admitted.load(Relaxed),
            disconnected: self.disconnected.load(Relaxed),
            refused: Refusal::ALL
                .iter()
                .zip(&self.refused)
                .map(|(r, n)| (r.code(), n.load(Relaxed)))
                .collect(),
            too_large: self.too_large.load(Relaxed),
            messages_in: self.messages_in.load(Relaxed),
            bytes_in: self.bytes_in.load(Relaxed),
            udp_dropped: self.udp_dropped.load(Relaxed),
            write_timeouts: self.write_timeouts.load(Relaxed),
            read_timeouts: self.read_timeouts.load(Relaxed),
            stall_timeouts: self.stall_timeouts.load(Relaxed),
            streams_cut: self.streams_cut.load(Relaxed),
            held_peak: self.held_peak.load(Relaxed),
        }
    }
}

impl std::fmt::Display for MsgCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "connections {} admitted {} disconnected {} too-large {} messages {} bytes {} \
             udp-dropped {} write-timeout {} read-timeout {} stall-timeout {} streams-cut {} \
             held-peak {}",
            self.connections,
            self.admitted,
            self.disconnected,
            self.too_large,
            self.messages_in,
            self.bytes_in,
            self.udp_dropped,
            self.write_timeouts,
            self.read_timeouts,
            self.stall_timeouts,
            self.streams_cut,
            self.held_peak
        )?;
        for (code, n) in self.refused.iter().filter(|(_, n)| *n > 0) {
            write!(f, " refused:{code} {n}")?;
        }
        Ok(())
    }
}
