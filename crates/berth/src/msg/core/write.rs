//! Writing and ending: flushing queues (with the write-stall deadline), ending clients with a
//! control frame, lingering closes, removal, shutdown, and the timers that expire them.

use std::io::{self, Write};
use std::time::{Duration, Instant};

use berth_proto::msg::{Ending, Name, Refusal};

use super::{ClientId, Core, Io, ListenSock, Note, Phase, Proto, LINGER};
use crate::msg::client::Shown;
use crate::net::Transport;

impl Core {
    /// Ends an admitted client with a control frame after its queued output.
    pub(super) fn end(&mut self, id: ClientId, why: Ending, text: &str) {
        self.drop_hold(id);
        self.cut_feed(id, text);
        let Some(c) = self.get_mut(id) else { return };
        let mut frame = Vec::new();
        match &mut c.io {
            Io::Stream {
                proto: Proto::Server(session),
                ..
            } => session.end(why, text, &mut frame),
            Io::Stream {
                proto: Proto::Ws(ws),
                ..
            } => ws.end(why, text, &mut frame),
            _ => {}
        }
        // Queued behind a stream still arriving, if one is open: after its last byte.
        if !frame.is_empty() {
            c.out.push_wire(&frame);
        }
        if why == Ending::TooLarge {
            self.stats.too_large();
        }
        if why != Ending::Shutdown {
            log::debug!("client {id}: {text}");
        }
        if let Some(c) = self.get_mut(id) {
            c.phase = Phase::Closing;
        }
        self.dirty.push(id);
    }

    /// Stops accepting: stream listeners are closed (a UNIX socket's file removed); UDP
    /// sockets stay open to say goodbye to their clients.
    pub(crate) fn stop_listening(&mut self) {
        for l in &mut self.listeners {
            if matches!(l.sock, ListenSock::Udp(_)) {
                continue;
            }
            // Only our socket: something else may have been put there since.
            if let ListenSock::Unix(_, file) = &l.sock {
                file.remove();
            }
            // Dropping the socket closes it, which also takes it out of the poll.
            l.sock = ListenSock::Closed;
        }
    }

    /// Begins a shutdown: stops listening, lets handshakes go and says goodbye to UDP clients.
    /// Stream clients stay open until [`Core::shutdown_step`] ends them: first every client in
    /// the middle of sending a message may finish it (and no new message is read), so that
    /// what it streams to others, and what waits behind that, arrives whole.
    pub(crate) fn begin_shutdown(&mut self) {
        self.stop_listening();
        self.stopping = true;

        let ids: Vec<_> = self.clients.iter().map(|(k, c)| c.id(k)).collect();
        for id in ids {
            match self
                .get(id)
                .map(|c| (c.phase, matches!(c.io, Io::Udp { .. })))
            {
                Some((Phase::Open, true)) => self.close(id),
                Some((Phase::Handshake, _)) => self.remove(id),
                _ => {}
            }
        }
    }

    /// Ends every open stream client with the `shutdown` frame after its queued output, once
    /// no client of any engine thread is in the middle of a message, or at once if `force`.
    /// Forced, a client receiving a message that can no longer be finished is closed without
    /// the frame: it would land inside that message. `true` once everyone has been ended.
    pub(crate) fn shutdown_step(&mut self, force: bool) -> bool {
        if self.ended_all {
            return true;
        }
        if !self.quiet {
            let busy = self.clients.iter().any(|(_, c)| c.mid_message());
            if busy || !self.outbox.is_empty() {
                if !force {
                    return false;
                }
            } else {
                self.quiet = true;
                self.directory.thread_quiet();
            }
        }
        if !force && !self.directory.all_quiet() {
            return false;
        }
        // Posts other threads sent before they went quiet.
        self.exchange_mail();
        let ids: Vec<_> = self.clients.iter().map(|(k, c)| c.id(k)).collect();
        for id in ids {
            match self.get(id).map(|c| (c.phase, c.out.stream_open())) {
                Some((Phase::Open, true)) if force => self.close(id),
                Some((Phase::Open, _)) => self.end(id, Ending::Shutdown, "the server is stopping"),
                _ => {}
            }
        }
        self.ended_all = true;
        true
    }

    /// Writes what a client has queued; closes it when done closing; reports a drained queue
    /// and wakes clients paused on it.
    pub(super) fn flush(&mut self, id: ClientId) {
        let low = (self.config.out_high / 4).max(1);
        let Some(c) = self.clients.get_mut(id.key()).filter(|c| c.gen == id.gen()) else {
            return;
        };
        let stall = self.now + self.config.write_timeout;
        // A client still in its handshake (a WebSocket client being sent its 101) is timed by
        // the handshake timeout alone: the wheel holds one deadline per client, and the write
        // timer would put that one off.
        let is_stream = matches!(c.io, Io::Stream { .. }) && c.phase != Phase::Handshake;
        // A stream client with output waiting has `write_timeout` from its last progress to
        // take some (closing ones too, from the moment they start closing, and for as long as
        // anything is queued). An open client whose queue holds only a stream waiting for its
        // sender's next bytes has no output waiting: a stalled upload (its own, echoed) is not
        // its reader's fault (issue 15).
        if is_stream && c.waits_on_reader() && c.write_due.is_none() {
            c.write_due = Some(stall);
            self.wheel.set(id.key(), earliest(Some(stall), c.read_due));
        }
        match &mut c.io {
            Io::Stream { stream, .. } => {
                loop {
                    c.out.refill(low);
                    match c.out.write_to(stream) {
                        Ok(0) => break,
                        Ok(_) if is_stream => {
                            c.write_due = Some(stall);
                            self.wheel.set(id.key(), earliest(Some(stall), c.read_due));
                        }
                        Ok(_) => {}
                        Err(e) => {
                            log::debug!("client {id}: write failed: {e}");
                            return self.remove(id);
                        }
                    }
                }
                // Records a TLS stream still holds go out as the socket takes them (the rest
                // on the next writable event).
                if stream.has_pending() {
                    match stream.flush() {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => {
                            log::debug!("client {id}: write failed: {e}");
                            return self.remove(id);
                        }
                    }
                }
            }
            Io::Udp { listener, addr } => {
                let (listener, addr) = (*listener, *addr);
                let ListenSock::Udp(sock) = &self.listeners[listener].sock else {
                    return;
                };
                loop {
                    c.out.refill(low);
                    let Some(datagram) = c.out.front_datagram() else {
                        break;
                    };
                    match sock.send_to(datagram, addr) {
                        Ok(_) => c.out.pop_datagram(),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            self.listeners[listener].udp_blocked.push_back(id);
                            return;
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        // An ICMP error from an earlier datagram, or a message too big: drop
                        // this datagram, as UDP would.
                        Err(e) => {
                            log::debug!("client {id}: datagram not sent: {e}");
                            c.out.pop_datagram();
                        }
                    }
                }
            }
        }
        let recycled = self.get_mut(id).and_then(|c| c.out.take_recycled());
        if recycled.is_some() {
            self.pool_put(recycled);
        }
        if self
            .get(id)
            .is_some_and(|c| c.held_debt > 0 && !c.paused && c.out.queued() == 0)
        {
            self.repay(id);
        }
        self.wake_waiters(id, low);
        self.sync_slot(id);
        let c = self.get_mut(id).expect("still here");
        if is_stream && !c.waits_on_reader() && c.write_due.take().is_some() {
            let at = c.read_due;
            self.wheel.set(id.key(), at);
        }
        let c = self.get_mut(id).expect("still here");
        let held_back = matches!(&c.io, Io::Stream { stream, .. } if stream.has_pending());
        if !c.out.is_empty() || held_back {
            return;
        }
        let c = self.get_mut(id).expect("still here");
        match c.phase {
            Phase::Closing => self.close_now(id),
            Phase::Open if c.owes_drain => {
                c.owes_drain = false;
                self.notes.push_back(Note::Drained(id));
            }
            _ => {}
        }
    }

    /// Resumes the clients waiting on `id`'s queue that may go on: all of them once the whole
    /// queue is below `low`; a client feeding an open stream as soon as the *ready* bytes are
    /// (held bytes move only when that stream ends, see the module docs of `core`).
    /// Senders on other threads waiting on it are acknowledged by the same rule.
    fn wake_waiters(&mut self, id: ClientId, low: usize) {
        let Some((ready, total, idle)) = self
            .get(id)
            .map(|c| (c.out.ready(), c.out.queued(), c.waiters.is_empty()))
        else {
            return;
        };
        self.wake_remote_waiters(id, low);
        if ready > low || idle {
            return;
        }
        let waiters = std::mem::take(&mut self.get_mut(id).expect("checked").waiters);
        let mut still = Vec::new();
        for w in waiters {
            let feeding = self.get(w).and_then(|wc| wc.feeding);
            let feeds_a_stream =
                feeding.is_some_and(|f| self.get(f).is_some_and(|fc| fc.out.stream_open()));
            if total > low && !feeds_a_stream {
                still.push(w);
            } else if let Some(wc) = self.get_mut(w) {
                wc.paused = false;
                self.resumed.push(w);
            }
        }
        self.get_mut(id).expect("checked").waiters = still;
    }

    /// Output is written and the client is to go: UDP clients go now; stream clients stop
    /// writing and linger, reading and dropping what still arrives until the peer closes.
    pub(super) fn close_now(&mut self, id: ClientId) {
        let Some(c) = self.get_mut(id) else { return };
        let Io::Stream {
            stream,
            hup,
            readable,
            ..
        } = &mut c.io
        else {
            return self.remove(id);
        };
        if *hup {
            return self.remove(id);
        }
        let _ = stream.shutdown_write();
        let read_now = *readable;
        c.paused = false;
        c.phase = Phase::Lingering;
        self.forget_name(id);
        let at = self.now + LINGER;
        self.wheel.set(id.key(), Some(at));
        if read_now {
            self.resumed.push(id);
        }
    }

    pub(super) fn forget_name(&mut self, id: ClientId) {
        if let Some(name) = self.get(id).and_then(|c| c.name.as_ref()) {
            self.directory.release(name.as_bytes(), id);
        }
    }

    /// An open stream client's timer fired: its write deadline, the look at a message it is
    /// in the middle of, or one of them moved later since the timer was set.
    fn stream_timer(&mut self, id: ClientId) {
        let now = self.now;
        let (write_timeout, first) = (self.config.write_timeout, self.first_look());
        let Some(c) = self.get_mut(id) else { return };
        if c.write_due.is_some_and(|due| due <= now) {
            // Its socket takes nothing, so no frame can tell it why: the log does.
            let waiting = c.out.queued();
            log::info!(
                "client {id} ({}) took none of its output for {:?} ({waiting} bytes waiting): \
                 dropped (--write-timeout)",
                display_name(c.name.as_ref()),
                write_timeout
            );
            self.stats.write_timeout();
            return self.remove(id);
        }
        if c.read_due.is_some_and(|due| due <= now) {
            if !c.mid_message() {
                c.read_due = None;
            } else if c.paused {
                // The engine is not reading it (backpressure, or its turn for the held
                // budget): not its stall. The time starts again when reading does.
                c.input_at = now;
                c.window_at = now;
                c.window_bytes = 0;
                c.read_due = Some(now + first);
            } else {
                return self.look_at_silence(id);
            }
        }
        let c = self.get_mut(id).expect("checked above");
        let at = earliest(c.write_due, c.read_due);
        self.wheel.set(id.key(), at);
    }

    /// How long after its last bytes a client in the middle of a message is first looked at:
    /// the shorter of the two timeouts that may end it.
    fn first_look(&self) -> Duration {
        let stall = self.config.stall_timeout;
        self.config.read_timeout.map_or(stall, |t| t.min(stall))
    }

    /// A client in the middle of a message has sent nothing since `input_at`: ended if that is
    /// `read_timeout`, or `stall_timeout` while others wait on the message; else looked at
    /// again when the next of them could be due. While others wait, a window of
    /// `stall_timeout` that brought less than `stall_min_bytes` is a stall too: a trickle must
    /// not hold them longer than silence may.
    fn look_at_silence(&mut self, id: ClientId) {
        let now = self.now;
        let (read_timeout, stall) = (self.config.read_timeout, self.config.stall_timeout);
        let min_bytes = self.config.stall_min_bytes;
        let Some(c) = self.get(id) else { return };
        let silent = now.saturating_duration_since(c.input_at);
        let window_over = now.saturating_duration_since(c.window_at) >= stall;
        if window_over && silent < stall && c.window_bytes < min_bytes {
            let brought = c.window_bytes;
            if let Some(whom) = self.waiting_on(id) {
                let text = format!(
                    "sent {brought} bytes in {stall:?} (under --stall-min-bytes {min_bytes}) \
                     in the middle of a message {whom} waits on"
                );
                return self.timed_out(id, &text, "--stall-timeout");
            }
        }
        if window_over {
            let c = self.get_mut(id).expect("checked above");
            c.window_at = now;
            c.window_bytes = 0;
        }
        let Some(c) = self.get(id) else { return };
        if let Some(timeout) = read_timeout.filter(|&t| silent >= t) {
            let text = format!("sent nothing for {timeout:?} in the middle of a message");
            return self.timed_out(id, &text, "--read-timeout");
        }
        if silent >= stall {
            if let Some(whom) = self.waiting_on(id) {
                let text = format!(
                    "sent nothing for {stall:?} in the middle of a message {whom} waits on"
                );
                return self.timed_out(id, &text, "--stall-timeout");
            }
        }
        // Nobody waits on it yet, or a timeout is still to come: look again then (and, past
        // the stall timeout, every stall timeout, in case someone starts waiting).
        let input_at = c.input_at;
        let window_end = (min_bytes > 0).then_some(c.window_at + stall);
        let next = [read_timeout, Some(stall)]
            .into_iter()
            .flatten()
            .map(|t| input_at + t)
            .chain(window_end)
            .filter(|&at| at > now)
            .min()
            .unwrap_or(now + stall);
        let c = self.get_mut(id).expect("checked above");
        c.read_due = Some(next);
        let at = earliest(c.write_due, c.read_due);
        self.wheel.set(id.key(), at);
    }

    /// Whom a client's unfinished message holds up, if anyone: another client its message is
    /// streaming to (inside that frame until the last byte), or clients waiting for the held
    /// budget its message has a share of.
    fn waiting_on(&self, id: ClientId) -> Option<&'static str> {
        let c = self.get(id)?;
        let feeds_another = c.feeding.filter(|&to| to != id).is_some_and(|to| {
            match to.thread() == self.thread {
                true => self.get(to).is_some_and(|to| to.out.stream_open()),
                // On another thread: open until its last byte is posted (or it is gone).
                false => c.feed_left > 0,
            }
        });
        if feeds_another {
            return Some("another client is receiving");
        }
        let holds_budget = c.hold.is_some_and(|h| h.reserved) && !self.held_waiters.is_empty();
        holds_budget.then_some("other clients wait for the held budget of")
    }

    /// Ends a client that stopped in the middle of a message: the `read-timeout` error frame
    /// after its queued output, unless a message to it is itself unfinished (a frame would land
    /// inside it), when it is closed without one.
    fn timed_out(&mut self, id: ClientId, text: &str, flag: &str) {
        let Some(c) = self.get(id) else { return };
        log::info!(
            "client {id} ({}) {text}: ended ({flag})",
            display_name(c.name.as_ref())
        );
        if flag == "--stall-timeout" {
            self.stats.stall_timeout();
        } else {
            self.stats.read_timeout();
        }
        if c.out.stream_open() {
            self.drop_hold(id);
            self.cut_feed(id, text);
            self.close(id);
        } else {
            self.end(id, Ending::ReadTimeout, text);
        }
    }

    /// The client read bytes: in the middle of a message, its last input moves (and its timer
    /// is set if none was: the timer reads `input_at` when it fires); at a message boundary the
    /// look is off.
    pub(super) fn note_input(&mut self, id: ClientId, bytes: usize) {
        let now = self.now;
        let first = self.first_look();
        let Some(c) = self.get_mut(id) else { return };
        if c.phase != Phase::Open {
            return;
        }
        if c.mid_message() {
            c.input_at = now;
            c.window_bytes += bytes as u64;
            if c.read_due.is_none() {
                // A message begins: so does its first window.
                c.window_at = now;
                c.window_bytes = bytes as u64;
                c.read_due = Some(now + first);
                let at = earliest(c.write_due, c.read_due);
                self.wheel.set(id.key(), at);
            }
        } else if c.read_due.take().is_some() {
            let at = c.write_due;
            self.wheel.set(id.key(), at);
        }
    }

    /// `id` can no longer finish the message it is streaming to another client (it is ending,
    /// gone, or stalled): that stream is completed with zero bytes up to its announced length
    /// (drawn as the receiver's queue drains, never held), so that the receiver's framing
    /// survives and what waits behind the stream moves (issue 29). The receiver's application
    /// (the demo relay) tells it when it hears that `id` is gone.
    pub(super) fn cut_feed(&mut self, id: ClientId, why: &str) {
        let Some(c) = self.get_mut(id) else { return };
        let Some(to) = c.feeding.take().filter(|&to| to != id) else {
            return;
        };
        if to.thread() != self.thread {
            // Completed by its own thread (see `cross`).
            log::debug!("client {id}: the stream to {to} was cut, {why}");
            return self.cut_remote_feed(id, to);
        }
        self.cut_stream_to(to, id, why);
    }

    /// Completes the stream open to `to` with zeros (see [`Core::cut_feed`]); `from` fed it.
    pub(super) fn cut_stream_to(&mut self, to: ClientId, from: ClientId, why: &str) {
        let Some(r) = self.get_mut(to).filter(|r| r.phase == Phase::Open) else {
            return;
        };
        let filled = r.out.cut_stream();
        if filled == 0 {
            return;
        }
        log::info!(
            "client {to} ({}): the message streaming to it from {from} was cut, {why}; its \
             last {filled} bytes are sent as zeros",
            display_name(r.name.as_ref())
        );
        self.stats.stream_cut();
        self.dirty.push(to);
    }

    /// Frees a client now; an admitted one is reported lost.
    pub(crate) fn remove(&mut self, id: ClientId) {
        if self.get(id).is_none() {
            return;
        }
        self.drop_hold(id);
        self.cut_feed(id, "its connection ended");
        self.forget_name(id);
        let key = id.key();
        self.wheel.disarm(key);
        let c = self.clients.remove(key);
        if let Io::Udp { listener, addr } = c.io {
            self.listeners[listener].udp_peers.remove(&addr);
        }
        for w in c.waiters {
            if let Some(wc) = self.get_mut(w) {
                wc.paused = false;
                self.resumed.push(w);
            }
        }
        self.settle_remote(id, c.remote_waiters, c.inbound);
        if c.admitted && !c.inbox.is_empty() {
            self.left_inboxes.push((id, c.inbox));
        }
        if c.admitted {
            log::debug!("client {id} gone: {}", Shown(c.name.as_ref()));
            self.stats.disconnected();
            self.notes.push_back(Note::Lost(id, c.name, c.ending));
        }
    }

    /// Expires handshakes, idle UDP clients and lingering closes whose time has come.
    pub(crate) fn expire(&mut self, due: &mut Vec<usize>) {
        self.wheel.advance(self.now, due);
        for &key in due.iter() {
            let Some(c) = self.clients.get(key) else {
                continue;
            };
            let id = c.id(key);
            match (c.phase, &c.io) {
                (Phase::Handshake, _) => {
                    let text = format!(
                        "no keyword within {:?} of connecting",
                        self.config.handshake_timeout
                    );
                    self.refuse_now(id, Refusal::Timeout, &text);
                }
                (Phase::Open, Io::Udp { .. }) => self.remove(id),
                (Phase::Open, Io::Stream { .. }) => self.stream_timer(id),
                (Phase::Closing | Phase::Lingering, _) => self.remove(id),
            }
        }
        due.clear();
    }
}

/// The earlier of two optional deadlines.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A client's name for the log.
fn display_name(name: Option<&Name>) -> String {
    name.map_or_else(|| "anonymous".to_owned(), |n| n.to_string())
}
