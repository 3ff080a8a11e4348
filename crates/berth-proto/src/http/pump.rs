//! The [`Step`] loop, in memory: a driver with no sockets, no clock and no threads, for the
//! vector tests and the fuzz targets. Bytes go in with [`Pump::feed`]; what the session writes
//! collects in [`Pump::written`]; jobs run inline at once, or are held until
//! [`Pump::finish`] to play a slow worker; files come from a [`FileSource`].
//!
//! It also checks what every driver relies on, and reports a breach as a [`Violation`]
//! instead of going on: nothing is written after `Close`; nothing is answered while a job is
//! out; `Close` means the session is closed and `Offload` that it waits; `Flush` makes
//! progress (no livelock). The socket drivers (`berth::drive`) act on the same steps with
//! real I/O and trust these rules.
//!
//! ```text
//!   feed(bytes) ─> Session::process ─> Step ─┬─ Read      : wait for more bytes
//!                      ^                      ├─ Flush     : move output to `written`, again
//!                      │                      ├─ Offload   : job.run() (or hold) -> complete
//!                      └──────────────────────┼─ Open      : FileSource::open -> file
//!                                             ├─ SendFile  : FileSource::read -> `written`
//!                                             └─ Close     : closed; later input ignored
//! ```

use std::fmt;

use super::files::{FileError, FileMeta, FileRequest};
use super::limits::Limits;
use super::session::{Context, Handler, Job, Session, Step};
use crate::upgrade::{Flow, Handover, Upgraded};

/// `Flush` steps in a row with nothing written before the pump calls it a livelock.
const SPIN_LIMIT: usize = 1_000;

/// Where a pumped session's files come from.
pub trait FileSource {
    /// What opening the file `req` names finds.
    fn open(&mut self, req: &FileRequest) -> Result<FileMeta, FileError>;
    /// Appends `len` bytes of the file last opened, from `offset`, to `out`.
    fn read(&mut self, offset: u64, len: u64, out: &mut Vec<u8>);
}

/// No files at all: every file request finds nothing (404).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFiles;

impl FileSource for NoFiles {
    fn open(&mut self, _: &FileRequest) -> Result<FileMeta, FileError> {
        Err(FileError::NotFound)
    }
    fn read(&mut self, _: u64, _: u64, _: &mut Vec<u8>) {
        unreachable!("no file is ever opened")
    }
}

/// A rule of the step protocol the session broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation(pub String);

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Violation {}

/// One connection's session and handler, driven in memory.
pub struct Pump<H: Handler> {
    session: Session,
    handler: H,
    limits: Limits,
    date: Vec<u8>,
    input: Vec<u8>,
    /// The buffer lent to the session; moved to `written` after every call.
    out: Vec<u8>,
    written: Vec<u8>,
    /// A `Close` step was returned.
    closed: bool,
    /// Hold offloaded jobs until [`Pump::finish`] instead of running them at once.
    hold_jobs: bool,
    held: Option<H::Job>,
    /// The protocol the connection was handed to, once it was.
    upgraded: Option<Box<dyn Upgraded>>,
}

impl<H: Handler> Pump<H> {
    /// A new connection served by `handler` under `limits`, with `date` as every response's
    /// `Date`. With `hold_jobs`, offloaded jobs wait for [`Pump::finish`].
    pub fn new(handler: H, limits: Limits, date: &[u8], hold_jobs: bool) -> Self {
        Pump {
            session: Session::new(),
            handler,
            limits,
            date: date.to_vec(),
            input: Vec::new(),
            out: Vec::new(),
            written: Vec::new(),
            closed: false,
            hold_jobs,
            held: None,
            upgraded: None,
        }
    }

    /// Everything the session has written so far.
    pub fn written(&self) -> &[u8] {
        &self.written
    }

    /// Takes what the session has written so far.
    pub fn take_written(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.written)
    }

    /// Input received and not yet consumed by the session.
    pub fn unread(&self) -> &[u8] {
        &self.input
    }

    /// A `Close` step was returned: the connection is over.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// The session itself, for checks on its state.
    pub fn session(&self) -> &Session {
        &self.session
    }

    fn process(&mut self) -> Step<H::Job> {
        let cx = Context {
            limits: &self.limits,
            date: &self.date,
        };
        self.session
            .process(&mut self.input, &mut self.out, &cx, &mut self.handler)
    }

    fn complete(&mut self, job: H::Job) -> Step<H::Job> {
        let reply = job.run();
        let cx = Context {
            limits: &self.limits,
            date: &self.date,
        };
        self.session.complete(
            reply,
            &mut self.input,
            &mut self.out,
            &cx,
            &mut self.handler,
        )
    }

    /// Moves what the session wrote to `written`; returns how many bytes that was.
    fn collect(&mut self) -> usize {
        let n = self.out.len();
        self.written.append(&mut self.out);
        n
    }

    /// Bytes arrive from the peer; runs the session until it wants more.
    pub fn feed(&mut self, bytes: &[u8], files: &mut dyn FileSource) -> Result<(), Violation> {
        self.input.extend_from_slice(bytes);
        if self.upgraded.is_some() && !self.closed {
            return self.pump_upgraded();
        }
        if self.closed {
            // After `Close` a driver does not read; one that still calls `process` must get
            // `Close` again and no output.
            let step = self.process();
            if self.collect() != 0 || !matches!(step, Step::Close) {
                return Err(Violation(format!(
                    "after Close, process gave {} and wrote bytes",
                    step_name(&step)
                )));
            }
            return Ok(());
        }
        if self.held.is_some() {
            // A job is outstanding: nothing may be answered until it completes.
            let step = self.process();
            let n = self.collect();
            if n != 0 || !matches!(step, Step::Read) || !self.session.is_waiting() {
                return Err(Violation(format!(
                    "while a job was outstanding, process gave {} and wrote {n} byte(s)",
                    step_name(&step)
                )));
            }
            return Ok(());
        }
        let step = self.process();
        self.drive(step, files)
    }

    /// Runs the upgraded protocol on the input there is.
    fn pump_upgraded(&mut self) -> Result<(), Violation> {
        let Some(session) = &mut self.upgraded else {
            return Ok(());
        };
        if !self.input.is_empty()
            && session.receive(&mut self.input, &mut self.written) == Flow::Close
        {
            self.closed = true;
        }
        Ok(())
    }

    /// All input is in: runs a held job, if any (and any job its completion leads to).
    pub fn finish(&mut self, files: &mut dyn FileSource) -> Result<(), Violation> {
        self.hold_jobs = false;
        if let Some(job) = self.held.take() {
            let step = self.complete(job);
            self.drive(step, files)?;
        }
        Ok(())
    }

    /// Does what `step` asks, as a driver would, until the session wants more input.
    fn drive(
        &mut self,
        mut step: Step<H::Job>,
        files: &mut dyn FileSource,
    ) -> Result<(), Violation> {
        let mut spins = 0;
        loop {
            let wrote = self.collect();
            match step {
                Step::Read => return Ok(()),
                Step::Close => {
                    if !self.session.is_closed() {
                        return Err(Violation(
                            "Step::Close but the session is not closed".into(),
                        ));
                    }
                    self.closed = true;
                    return Ok(());
                }
                Step::Flush => {
                    spins = if wrote == 0 { spins + 1 } else { 0 };
                    if spins > SPIN_LIMIT {
                        return Err(Violation(format!(
                            "livelock: {SPIN_LIMIT} Flush steps in a row with no output"
                        )));
                    }
                    step = self.process();
                }
                Step::Open(request) => {
                    let found = files.open(&request);
                    let cx = Context {
                        limits: &self.limits,
                        date: &self.date,
                    };
                    step = self.session.file(
                        &request,
                        found.as_ref().map_err(|e| *e),
                        &mut self.input,
                        &mut self.out,
                        &cx,
                        &mut self.handler,
                    );
                }
                Step::SendFile { offset, len } => {
                    files.read(offset, len, &mut self.written);
                    step = self.process();
                }
                Step::Upgrade(Handover(session)) => {
                    if !self.session.is_upgraded() {
                        return Err(Violation(
                            "Step::Upgrade but the session was not handed over".into(),
                        ));
                    }
                    self.upgraded = Some(session);
                    return self.pump_upgraded();
                }
                Step::Offload(job) => {
                    if !self.session.is_waiting() {
                        return Err(Violation(
                            "Step::Offload but the session is not waiting".into(),
                        ));
                    }
                    if self.hold_jobs {
                        self.held = Some(job);
                        return Ok(());
                    }
                    step = self.complete(job);
                }
            }
        }
    }
}

/// A step's name, for violations (jobs need not be `Debug`).
fn step_name<J>(step: &Step<J>) -> &'static str {
    match step {
        Step::Read => "Read",
        Step::Flush => "Flush",
        Step::Offload(_) => "Offload",
        Step::Close => "Close",
        Step::Open(_) => "Open",
        Step::SendFile { .. } => "SendFile",
        Step::Upgrade(_) => "Upgrade",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::{Handled, Reply, Request, Response};
    use crate::upgrade::{Echo, Switch};

    struct Upgrader;
    struct NoJob;
    impl Job for NoJob {
        fn run(self) -> Reply {
            Reply::failed()
        }
    }
    impl Handler for Upgrader {
        type Job = NoJob;
        fn handle(&mut self, _: &Request<'_>, _: &mut Response<'_>) -> Handled<NoJob> {
            Handled::Upgrade(Switch {
                protocol: "echo",
                headers: vec![("X-Tunnel".into(), "yes".into())],
                session: Box::new(Echo),
            })
        }
    }

    const DATE: &[u8] = b"Sun, 06 Nov 1994 08:49:37 GMT";

    /// The seam in memory: 101, then the bytes behind the request and every later byte go to
    /// the upgraded protocol, whole or split anywhere.
    #[test]
    fn an_upgrade_hands_the_rest_of_the_input_over() {
        let input: &[u8] =
            b"GET /t HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\nUpgrade: h2c, echo\r\n\r\nfirst";
        for split in 1..input.len() {
            let mut p = Pump::new(Upgrader, Limits::default(), DATE, false);
            p.feed(&input[..split], &mut NoFiles).unwrap();
            p.feed(&input[split..], &mut NoFiles).unwrap();
            p.feed(b" then more", &mut NoFiles).unwrap();
            let text = String::from_utf8(p.take_written()).unwrap();
            assert!(
                text.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
                "{text}"
            );
            assert!(
                text.contains("\r\nUpgrade: echo\r\nX-Tunnel: yes\r\n\r\n"),
                "{text}"
            );
            assert!(
                text.ends_with("\r\n\r\nfirst then more"),
                "split {split}: {text}"
            );
            assert!(p.session().is_upgraded());
        }
    }

    /// A handler may only switch a request that asked for it.
    #[test]
    fn an_upgrade_nobody_asked_for_is_400() {
        for head in [
            "GET /t HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET /t HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\n\r\n",
            "GET /t HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
            "GET /t HTTP/1.0\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n",
        ] {
            let mut p = Pump::new(Upgrader, Limits::default(), DATE, false);
            p.feed(head.as_bytes(), &mut NoFiles).unwrap();
            let text = String::from_utf8(p.take_written()).unwrap();
            assert!(text.starts_with("HTTP/1.1 400 "), "{head:?}: {text}");
            assert!(!p.session().is_upgraded());
        }
    }
}
