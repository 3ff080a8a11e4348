//! Flow control (RFC 9113 §5.2, §6.9): the client's WINDOW_UPDATEs, the windows berth grants
//! back as the application takes request bodies, and sending answers' bodies within the
//! windows, round-robin across streams, pulled from their sources a piece at a time (a
//! producer's by the connection; a file's by the driver, asked with [`Action::Pull`]).

use super::*;

/// A streamed reply's bytes are taken from its producer this much at a time, and at most this
/// much of a file is pulled at a time.
const TAKE: usize = 64 * 1024;

/// The most window the one stream let past the budget of bodies held whole is opened to
/// ([`WholeBodies::alone`]): a mebibyte a round trip.
const ALONE_WINDOW: i64 = 1 << 20;

impl Connection {
    pub(super) fn local_window(&self) -> i64 {
        if self.acked {
            i64::from(self.config.initial_window)
        } else {
            i64::from(DEFAULT_WINDOW)
        }
    }

    pub(super) fn on_window_update(
        &mut self,
        id: u32,
        increment: u32,
        output: &mut Vec<u8>,
    ) -> Result<(), Fail> {
        self.window_updates += 1;
        let allowed = u64::from(self.config.window_update_allowance) + 10 * self.data_frames_sent;
        if self.window_updates > allowed {
            return Err(Fail::Calm(Abuse::WindowUpdateFlood));
        }
        if id == 0 {
            if increment == 0 {
                return Err(Fail::Conn(ErrorCode::PROTOCOL_ERROR, "WINDOW_UPDATE of 0"));
            }
            self.send_window += i64::from(increment);
            if self.send_window > MAX_WINDOW {
                return Err(Fail::Conn(
                    ErrorCode::FLOW_CONTROL_ERROR,
                    "connection window overflow",
                ));
            }
            return Ok(());
        }
        if id > self.highest {
            return Err(Fail::Conn(
                ErrorCode::PROTOCOL_ERROR,
                "WINDOW_UPDATE on an idle stream",
            ));
        }
        let Some(s) = self.streams.get_mut(&id) else {
            return Ok(());
        };
        if s.turn.reset {
            return Ok(());
        }
        if increment == 0 {
            return self.reset_stream(id, ErrorCode::PROTOCOL_ERROR, output);
        }
        s.send_window += i64::from(increment);
        if s.send_window > MAX_WINDOW {
            return self.reset_stream(id, ErrorCode::FLOW_CONTROL_ERROR, output);
        }
        Ok(())
    }

    /// Sends WINDOW_UPDATE for what the application has taken, in batches of half a window;
    /// a body taken whole only while the connection holds less than `budget` bytes of such
    /// bodies ([`WholeBodies`]).
    pub(super) fn grant_windows(&mut self, output: &mut Vec<u8>, budget: usize) {
        let half = (self.local_window() / 2).max(1) as u32;
        let held = WholeBodies::of(self.streams.iter().map(|(&id, s)| (id.into(), &s.turn)));
        for (&id, s) in self.streams.iter_mut() {
            if s.held > 0 {
                // What the job took of what it was given is consumed (all of it once the
                // stream is gone: the job dropped it, or the body was refused).
                let queued = s
                    .turn
                    .feed
                    .as_ref()
                    .map_or(0, |f| f.queued())
                    .min(s.held as usize);
                s.grant += s.held - queued as u32;
                s.held = queued as u32;
            }
            if s.recv_closed || s.turn.reset || !held.may_take(id.into(), &s.turn, budget) {
                continue;
            }
            let mut grant = i64::from(s.grant);
            if held.alone(id.into(), budget) {
                // The one stream that goes on past the budget sends the rest of its body at
                // the pace of a round trip, not of a window a round trip (as one HTTP/1.1
                // upload goes at TCP's): its window opens to what the limit leaves it.
                let room = budget.saturating_sub(s.turn.intake.body.len()) as i64;
                grant = grant.max(room.min(ALONE_WINDOW) - s.recv_window);
            }
            if grant >= i64::from(half) {
                frame::write_window_update(output, id, grant as u32);
                s.recv_window += grant;
                s.grant = 0;
            }
        }
        let conn_half = (self.config.connection_window.max(DEFAULT_WINDOW) / 2).max(1);
        if self.conn_grant >= conn_half {
            frame::write_window_update(output, 0, self.conn_grant);
            self.recv_window += i64::from(self.conn_grant);
            self.conn_grant = 0;
        }
    }

    /// Whether `stream` still takes its body from the source the driver holds for it
    /// ([`Action::Body`]): false once it is complete, reset or gone, and the driver drops the
    /// source (its file descriptor with it).
    pub fn pulls(&self, stream: u64) -> bool {
        let stream = u32::try_from(stream).unwrap_or(u32::MAX);
        self.streams.get(&stream).is_some_and(|s| s.turn.pulls())
    }

    /// The driver was woken (a producer pushed or ended): parked streams are asked again.
    pub fn wake_bodies(&mut self) {
        self.streams.values_mut().for_each(|s| s.turn.wake());
    }

    /// The driver read what [`Action::Pull`] asked for `stream` into `bytes` (swapped with an
    /// empty buffer in return, so no byte is copied), and at the end the producer's
    /// `trailers`; the connection sends them as its windows allow and goes on as
    /// [`Connection::process`] does.
    #[allow(clippy::too_many_arguments)]
    pub fn pulled<H: Handler>(
        &mut self,
        stream: u64,
        bytes: &mut Vec<u8>,
        pulled: Pulled,
        trailers: Vec<(String, Vec<u8>)>,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
        cx: &Context<'_>,
        handler: &mut H,
    ) -> Action<H::Job> {
        if self.pulls(stream) {
            let stream = stream as u32;
            let s = self.streams.get_mut(&stream).expect("checked above");
            if pulled == Pulled::Failed {
                // The head promised a length the body cannot meet: the client must not take
                // what came for complete.
                frame::write_rst(output, stream, ErrorCode::INTERNAL_ERROR);
                self.forget(stream);
            } else {
                debug_assert!(s.out_pos >= s.out.len(), "pulled over unsent bytes");
                std::mem::swap(&mut s.out, bytes);
                s.out_pos = 0;
                s.out_end = s.turn.took(pulled, trailers);
            }
        }
        bytes.clear();
        self.process(input, output, cx, handler)
    }

    /// Sends response bodies within the windows, round-robin across streams, until the
    /// windows close, the bodies run out, or the output is full (true). A file's stream that
    /// has sent all it was given and has a window is noted for the driver ([`Action::Pull`]):
    /// the first after the one pulled last, so that files share the windows.
    pub(super) fn send_data(&mut self, output: &mut Vec<u8>, cx: &Context<'_>) -> bool {
        let high = cx.limits.output_high_water.max(1);
        let mut stalled = false;
        let mut sent = false;
        let (mut first_pull, mut next_pull) = (None, None);
        self.pull = None;
        loop {
            let mut progress = false;
            let ids: Vec<u32> = self
                .streams
                .iter()
                .filter(|(_, s)| s.turn.stage == Stage::Sending && !s.turn.reset)
                .map(|(&id, _)| id)
                .collect();
            if ids.is_empty() {
                break;
            }
            for id in ids {
                if output.len() >= high {
                    self.stall_since = None;
                    return true;
                }
                let Some(s) = self.streams.get_mut(&id) else {
                    continue;
                };
                if s.out_pos >= s.out.len() {
                    s.out.clear();
                    s.out_pos = 0;
                    let room = self.send_window.min(s.send_window);
                    match s.turn.source {
                        None => {}
                        // A producer with nothing yet waits for the driver's wake.
                        Some(Source::Stream { parked: true }) => continue,
                        // A body is read as the windows open, no further: a stream holds at
                        // most one piece, and a client that opens no window has nothing read.
                        Some(_) if room <= 0 => {
                            stalled = true;
                            continue;
                        }
                        Some(_) => {
                            // At most TAKE (64 KiB): fits the u32 the connection keeps.
                            let max = usize::try_from(room).map_or(TAKE, |r| r.min(TAKE)) as u32;
                            if first_pull.is_none() {
                                first_pull = Some((id, max));
                            }
                            if next_pull.is_none() && id > self.last_pull {
                                next_pull = Some((id, max));
                            }
                            continue;
                        }
                    }
                }
                let left = s.out.len() - s.out_pos;
                if left == 0 {
                    if s.out_end {
                        s.turn.stage = Stage::Done;
                        let trailers = std::mem::take(&mut s.turn.trailers);
                        if trailers.is_empty() {
                            frame::write_data(output, id, &[], true);
                        } else {
                            self.answer_block.clear();
                            answer::trailer_block(
                                &mut self.encoder,
                                &trailers,
                                &mut self.answer_block,
                            );
                            let block = &self.answer_block;
                            frame::write_headers(output, id, block, true, self.peer_max_frame);
                        }
                        self.stream_done(id, output);
                        progress = true;
                    }
                    continue;
                }
                let n = (left as i64)
                    .min(self.send_window)
                    .min(s.send_window)
                    .min(self.peer_max_frame as i64);
                if n <= 0 {
                    stalled = true;
                    continue;
                }
                let n = n as usize;
                // With trailers to follow, the last DATA frame does not end the stream.
                let end = n == left && s.out_end && s.turn.trailers.is_empty();
                frame::write_data(output, id, &s.out[s.out_pos..s.out_pos + n], end);
                self.data_frames_sent += 1;
                sent = true;
                s.out_pos += n;
                s.send_window -= n as i64;
                self.send_window -= n as i64;
                progress = true;
                if end {
                    s.turn.stage = Stage::Done;
                    self.stream_done(id, output);
                }
            }
            if !progress {
                break;
            }
        }
        self.pull = next_pull.or(first_pull);
        if !stalled && self.waiting > 0 {
            // A file that waits for a window the client keeps shut is stalled too.
            let conn_shut = self.send_window <= 0;
            stalled = self.streams.values().any(|s| {
                s.turn.stage == Stage::FileQueued
                    && !s.turn.head_only
                    && (conn_shut || s.send_window <= 0)
            });
        }
        if !stalled || sent {
            // The write timeout runs from when the windows stopped all progress, not from the
            // first stall: a long answer to a client that keeps opening its window lives.
            self.stall_since = None;
        }
        self.stalled = stalled;
        false
    }
}
