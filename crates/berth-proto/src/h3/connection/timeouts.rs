//! What a connection waits for and for how long, per request stream (QUIC multiplexes, so
//! one slow stream is that stream's problem, not the connection's): the header timeout from
//! a stream's first byte until its head is complete (not extended by each byte, so a head
//! dribbled a byte at a time cannot hold a stream), the body timeout for the silence while
//! its body arrives. Jobs, files and answers waiting for QUIC are not timed here: an answer
//! the client does not read is QUIC's flow control and idle timeout's, as is an idle
//! connection.

use super::*;
use crate::http::Timeouts;

impl Connection {
    /// The deadline for a stream still receiving its request, if it is the client's turn.
    fn deadline(s: &Req, t: &Timeouts) -> Option<Instant> {
        let waiting = s.recv != Recv::Closed
            && (s.turn.stage == Stage::Pending || s.turn.feed.is_some())
            && !s.turn.reset
            && !s.turn.intake.discard
            // A job that has not taken what it was fed holds the stream, not the client.
            && s.turn.feed.as_ref().is_none_or(|f| !f.is_full());
        if !waiting {
            return None;
        }
        let clock = s.clock?;
        Some(clock + if s.head_done { t.body } else { t.header })
    }

    /// When [`Connection::expire`] is due if nothing happens first: the earliest of the
    /// request streams' header and body deadlines; `None` when no stream waits for the
    /// client (QUIC's idle timeout covers the rest).
    pub fn poll_timeout(&self, t: &Timeouts) -> Option<Instant> {
        if self.phase == Phase::Closed {
            return None;
        }
        self.requests
            .values()
            .filter_map(|s| Self::deadline(s, t))
            .min()
    }

    /// The deadline of [`Connection::poll_timeout`] passed (`cx.now` says when it is): a
    /// stream whose head did not complete in time is reset (H3_REQUEST_INCOMPLETE: there
    /// is no request to answer), as is one whose body, going to its job, stopped arriving;
    /// one whose body stopped arriving before the handler was asked is answered 408; the rest
    /// go on as [`Connection::process`] does.
    pub fn expire<H: Handler>(
        &mut self,
        t: &Timeouts,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        let late: Vec<(u64, bool)> = self
            .requests
            .iter()
            .filter(|(_, s)| Self::deadline(s, t).is_some_and(|d| d <= cx.now))
            .map(|(&id, s)| (id, s.head_done))
            .collect();
        for (id, head_done) in late {
            let fed = self
                .requests
                .get(&id)
                .is_some_and(|s| s.turn.feed.is_some());
            if head_done && !fed {
                self.mark_discard(id);
                hand_off::refuse(
                    self,
                    id,
                    408,
                    "request body not received in time",
                    cx,
                    handler,
                );
            } else {
                // No head, or a body going to a job that is out already: the stream is
                // reset, and the job told its body was cut short (the feed aborts).
                self.stream_error(id, ErrorCode::H3_REQUEST_INCOMPLETE);
            }
        }
        self.process(cx, handler)
    }
}
