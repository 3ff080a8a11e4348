//! The protocol seam: what a connection speaks after HTTP hands it over (`Upgrade`, RFC 9110
//! §7.8), sans-IO like the rest. A handler answers a request with
//! [`Handled::Upgrade`](crate::http::Handled::Upgrade); the HTTP session writes
//! `101 Switching Protocols` and gives the driver [`Action::Switched`](crate::http::Action::Switched);
//! from then on the driver pumps the [`Upgraded`] session it got, over the same transport and
//! with the bytes the client sent behind the request still in its input. No driver knows what
//! the new protocol is (a raw tunnel, WebSocket, ...): it moves bytes and honours [`Flow`].
//!
//! ```text
//!   driver: input ──> Upgraded::receive ──> output ──> transport
//!           peer's end-of-stream ──> Upgraded::peer_closed ──> last output, close
//!           poll_timeout(now) ... handle_timeout(now)
//! ```

use std::time::Instant;

use crate::http::Timeouts;

/// What the driver does next with an upgraded connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Write the output, then wait for more input (or the deadline).
    Continue,
    /// Write the output, then close the connection.
    Close,
}

/// A protocol spoken on a connection after an HTTP upgrade.
pub trait Upgraded: Send {
    /// Bytes arrived (appended to `input`): consume what can be used (drain it from the
    /// front), append what to send to `output`.
    fn receive(&mut self, input: &mut Vec<u8>, output: &mut Vec<u8>) -> Flow;

    /// [`Upgraded::receive`] for a driver whose output is empty, which lets the protocol answer
    /// a message with its own bytes without copying them: it may swap `input` and `output`
    /// (leaving the answer in `output`, and in `input` what is left to read, if anything) and
    /// return how many bytes at the front of `output` are not to be sent. The default calls
    /// `receive` and skips nothing.
    fn receive_in_place(&mut self, input: &mut Vec<u8>, output: &mut Vec<u8>) -> (Flow, usize) {
        (self.receive(input, output), 0)
    }

    /// The peer will send nothing more: append any last words to `output`; the driver writes
    /// them and closes the connection.
    fn peer_closed(&mut self, output: &mut Vec<u8>) {
        let _ = output;
    }

    /// When [`Upgraded::handle_timeout`] is due, given `now` and the server's timeouts. The
    /// default gives an idle connection the server's idle timeout.
    fn poll_timeout(&mut self, now: Instant, t: &Timeouts) -> Option<Instant> {
        Some(now + t.idle)
    }

    /// Something outside the connection has news for it: the driver was woken for this
    /// connection (a session that produces output on its own, an application's messages say,
    /// calls the waker its creator got, e.g. [`Answer::waker`](crate::http::Answer::waker)).
    /// Append what to send to `output`. The default has nothing to add.
    fn wake(&mut self, output: &mut Vec<u8>) -> Flow {
        let _ = output;
        Flow::Continue
    }

    /// The server is shutting down (a drain): append to `output` whatever tells the peer so
    /// (WebSocket: a close with 1001), and say whether the connection ends once it is out
    /// (`Close`) or waits for the peer's answer (`Continue`, until it comes or the deadline of
    /// [`Upgraded::poll_timeout`]). Asked once. The default says nothing and carries on, as
    /// a raw tunnel has no way to say it (the drain's deadline ends it).
    fn going_away(&mut self, output: &mut Vec<u8>) -> Flow {
        let _ = output;
        Flow::Continue
    }

    /// The deadline passed. The default closes.
    fn handle_timeout(&mut self, now: Instant, output: &mut Vec<u8>) -> Flow {
        let _ = (now, output);
        Flow::Close
    }
}

/// A raw tunnel that echoes every byte: the simplest upgraded protocol, used by the demo's
/// `GET /echo` (`Upgrade: echo`) and the tests that prove every model can switch protocol.
#[derive(Debug, Default)]
pub struct Echo;

impl Upgraded for Echo {
    fn receive(&mut self, input: &mut Vec<u8>, output: &mut Vec<u8>) -> Flow {
        output.append(input);
        Flow::Continue
    }

    fn receive_in_place(&mut self, input: &mut Vec<u8>, output: &mut Vec<u8>) -> (Flow, usize) {
        // Everything read goes back: the buffers change places, nothing is copied.
        std::mem::swap(input, output);
        (Flow::Continue, 0)
    }
}

/// A handler's answer that switches the connection to another protocol: the session checks
/// that the request asked for `protocol` (`Connection: upgrade`, `Upgrade: protocol`, HTTP/1.1,
/// no body), writes `101 Switching Protocols` with `headers`, and hands `session` over.
pub struct Switch {
    /// The protocol token the client must have offered in `Upgrade` (compared
    /// case-insensitively), and that the 101 names.
    pub protocol: &'static str,
    /// More header fields for the 101 (e.g. `Sec-WebSocket-Accept`).
    pub headers: Vec<(String, String)>,
    /// What the connection speaks from then on.
    pub session: Box<dyn Upgraded>,
}

impl std::fmt::Debug for Switch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Switch")
            .field("protocol", &self.protocol)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

/// Two switches are equal only if they hand over the same session.
impl PartialEq for Switch {
    fn eq(&self, other: &Self) -> bool {
        self.protocol == other.protocol
            && self.headers == other.headers
            && std::ptr::addr_eq(&*self.session, &*other.session)
    }
}

impl Eq for Switch {}

/// The upgraded session [`Action::Switched`](crate::http::Action::Switched) hands the driver.
pub struct Handover(pub Box<dyn Upgraded>);

impl std::fmt::Debug for Handover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Handover(..)")
    }
}

/// Two handovers are equal only if they are the same session.
impl PartialEq for Handover {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::addr_eq(&*self.0, &*other.0)
    }
}

impl Eq for Handover {}
