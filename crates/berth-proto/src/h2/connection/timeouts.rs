//! What a connection waits for and for how long: the header, body, write and idle timeouts,
//! and what their expiry does.

use super::*;

impl Connection {
    /// When [`Connection::expire`] is due if nothing happens first (see
    /// [`Session::poll_timeout`](crate::http::Session::poll_timeout) for the rules' names):
    /// the write timeout while output waits or a response waits for a window the client does not
    /// open (counted from the last DATA sent); the header timeout from the first byte of the
    /// preface, of a header block or of any frame other than DATA until it is complete; the
    /// body timeout while a request body is arriving; nothing while only jobs (or streamed
    /// answers' producers) are awaited; else the idle timeout.
    pub fn poll_timeout(
        &mut self,
        input: &[u8],
        output_pending: bool,
        now: Instant,
        t: &Timeouts,
    ) -> Option<Instant> {
        if output_pending || self.phase == Phase::Closed {
            return Some(now + t.write);
        }
        if matches!(self.phase, Phase::Preface | Phase::Settings) || self.block.is_some() {
            return Some(*self.head_since.get_or_insert(now) + t.header);
        }
        // A frame cut short in the input (`process` takes every whole one): a DATA frame is
        // body arriving; any other is held to the header timeout from its first byte, so that
        // a frame dribbled a byte at a time cannot hold the connection forever.
        if !input.is_empty() {
            let data = Header::parse(input).is_some_and(|h| h.kind == frame::kind::DATA);
            if data {
                return Some(now + t.body);
            }
            return Some(*self.head_since.get_or_insert(now) + t.header);
        }
        self.head_since = None;
        if self.stalled {
            return Some(*self.stall_since.get_or_insert(now) + t.write);
        }
        if self.streams.values().any(|s| {
            !s.recv_closed && !s.turn.reset && s.turn.feed.as_ref().is_none_or(|f| !f.is_full())
        }) {
            return Some(now + t.body);
        }
        if !self.streams.is_empty() {
            return None;
        }
        Some(now + t.idle)
    }

    /// The deadline of [`Connection::poll_timeout`] passed. A preface or header block that
    /// never completed, a body that stopped arriving or an idle connection: GOAWAY and close
    /// (bodies that stopped are answered 408 first); a response whose window stayed shut
    /// past the write timeout: GOAWAY and close. Jobs are not timed.
    pub fn expire<H: Handler>(
        &mut self,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        if self.phase == Phase::Closed {
            return Action::Close;
        }
        if self.stalled {
            // The client left a window shut past the write timeout: told, and closed.
            frame::write_goaway(output, self.last_stream, ErrorCode::NO_ERROR, b"timeout");
            self.close_all();
            input.clear();
            return Action::Close;
        }
        if self.phase == Phase::Open && self.block.is_none() {
            let slow: Vec<u32> = self
                .streams
                .iter()
                .filter(|(_, s)| !s.recv_closed && !s.turn.reset && s.turn.stage == Stage::Pending)
                .map(|(&id, _)| id)
                .collect();
            if slow.is_empty() && !self.streams.is_empty() {
                return Action::Read;
            }
            for id in slow {
                self.answer_status(
                    id,
                    408,
                    "request body not received in time",
                    output,
                    cx,
                    handler,
                );
            }
            // The 408s go out whole, as far as the windows allow, before the GOAWAY.
            self.send_data(output, cx);
        }
        if self.started {
            frame::write_goaway(output, self.last_stream, ErrorCode::NO_ERROR, b"timeout");
        }
        self.close_all();
        input.clear();
        Action::Close
    }
}
