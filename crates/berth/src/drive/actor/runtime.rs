//! A small actor runtime, after the Flynn runtime of seed 002: actors with mailboxes, run by a
//! pool of scheduler threads, each actor at most `batch` messages at a time before it yields
//! its thread to the next actor in line. It knows nothing of sockets or HTTP.
//!
//! ```text
//!   Addr::send(msg) ──> mailbox (FIFO) ──┐ first message of an idle actor
//!                                        v
//!            run queue (FIFO of actors, each at most once) ──> scheduler threads
//!                 ^                                               │ up to `batch` messages
//!                 └────────── still has mail: back of the line ───┘
//! ```
//!
//! Guarantees, each with a test below:
//! - a mailbox is FIFO: messages from one sender are handled in the order sent;
//! - an actor is run by one thread at a time, so `handle` needs no locking;
//! - fairness: an actor that keeps sending itself messages (seed 002's "recursive" behaviour)
//!   goes to the back of the run queue after `batch` of them, so with batch 1 every other ready
//!   actor runs before its next message; with a large batch it holds its thread that long. That
//!   is the latency/throughput trade-off the seed describes.
//!
//! An actor stops when it calls [`Context::stop`]: it is dropped at once (closing whatever it
//! owns), its mailbox is emptied, and later sends return `false`.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

/// Something run by the runtime: owns its state, handles one message at a time.
pub trait Actor: Send + 'static {
    /// What it is sent.
    type Msg: Send + 'static;

    /// Handles one message. Runs on some scheduler thread; never on two at once.
    fn handle(&mut self, msg: Self::Msg, cx: &mut Context<'_, Self>)
    where
        Self: Sized;
}

/// What an actor may do while it handles a message.
pub struct Context<'a, A: Actor> {
    cell: &'a Arc<Cell<A>>,
    stop: bool,
}

impl<A: Actor> Context<'_, A> {
    /// The actor's own address (to send itself a message: "do the rest later, after others").
    pub fn addr(&self) -> Addr<A::Msg> {
        Addr {
            cell: self.cell.clone(),
        }
    }

    /// Stops the actor once this message is handled: it is dropped and its mailbox emptied.
    pub fn stop(&mut self) {
        self.stop = true;
    }
}

/// Where to send an actor messages. Cheap to clone.
pub struct Addr<M> {
    cell: Arc<dyn Deliver<M>>,
}

impl<M> Clone for Addr<M> {
    fn clone(&self) -> Self {
        Addr {
            cell: self.cell.clone(),
        }
    }
}

impl<M: Send + 'static> Addr<M> {
    /// Puts `msg` in the mailbox and, if the actor was idle, in line to run. Returns `false`
    /// (dropping `msg`) if the actor has stopped.
    pub fn send(&self, msg: M) -> bool {
        self.cell.deliver(msg)
    }

    /// Whether the actor has stopped (a send would return `false`).
    pub fn is_stopped(&self) -> bool {
        self.cell.is_stopped()
    }
}

/// The typed side of a cell: delivering a message.
trait Deliver<M>: Send + Sync {
    fn deliver(&self, msg: M) -> bool;
    fn is_stopped(&self) -> bool;
}

/// The untyped side of a cell: being run by a scheduler thread.
trait Run: Send + Sync {
    fn run(self: Arc<Self>);
    /// Drops the actor and its mail without running it (the runtime is shutting down).
    fn discard(&self);
}

/// A mailbox and its scheduling state, under one lock so that "deliver" and "go idle" cannot
/// miss each other.
struct Mailbox<M> {
    queue: VecDeque<M>,
    /// In the run queue or running: a new message needs no scheduling.
    scheduled: bool,
    stopped: bool,
}

/// One actor: its state, its mailbox, and its way back into the run queue.
struct Cell<A: Actor> {
    mailbox: Mutex<Mailbox<A::Msg>>,
    /// Taken by the one thread running the actor; `None` once stopped.
    actor: Mutex<Option<A>>,
    batch: usize,
    shared: Arc<Shared>,
    me: Weak<Cell<A>>,
}

/// What every cell shares: the run queue and the count of live actors.
struct Shared {
    queue: Sender<Task>,
    live: AtomicUsize,
}

enum Task {
    Run(Arc<dyn Run>),
    /// Ends one scheduler thread.
    Exit,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic inside `handle` is caught before it can poison anything; recover regardless.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<A: Actor> Deliver<A::Msg> for Cell<A> {
    fn deliver(&self, msg: A::Msg) -> bool {
        let mut mb = lock(&self.mailbox);
        if mb.stopped {
            return false;
        }
        mb.queue.push_back(msg);
        let idle = !mb.scheduled;
        mb.scheduled = true;
        drop(mb);
        if idle {
            if let Some(me) = self.me.upgrade() {
                let _ = self.shared.queue.send(Task::Run(me));
            }
        }
        true
    }

    fn is_stopped(&self) -> bool {
        lock(&self.mailbox).stopped
    }
}

impl<A: Actor> Run for Cell<A> {
    fn run(self: Arc<Self>) {
        let mut slot = lock(&self.actor);
        let mut stop = false;
        if let Some(actor) = slot.as_mut() {
            let mut cx = Context {
                cell: &self,
                stop: false,
            };
            for _ in 0..self.batch {
                let Some(msg) = lock(&self.mailbox).queue.pop_front() else {
                    break;
                };
                let handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    actor.handle(msg, &mut cx)
                }));
                if handled.is_err() {
                    log::error!("an actor panicked; it is stopped");
                    cx.stop = true;
                }
                if cx.stop {
                    break;
                }
            }
            stop = cx.stop;
        }
        if stop {
            let actor = slot.take();
            drop(slot);
            self.stopped(actor);
            return;
        }
        drop(slot);
        let mut mb = lock(&self.mailbox);
        if mb.queue.is_empty() || mb.stopped {
            mb.scheduled = false;
            return;
        }
        drop(mb);
        // Still has mail: yield, to the back of the line.
        let queue = self.shared.queue.clone();
        let _ = queue.send(Task::Run(self));
    }

    fn discard(&self) {
        let actor = lock(&self.actor).take();
        self.stopped(actor);
    }
}

impl<A: Actor> Cell<A> {
    /// Marks the actor stopped, empties its mailbox and drops it (outside the locks: dropping
    /// either may send messages to other actors).
    fn stopped(&self, actor: Option<A>) {
        let mail = {
            let mut mb = lock(&self.mailbox);
            let was = mb.stopped;
            mb.stopped = true;
            mb.scheduled = true;
            (!was).then(|| std::mem::take(&mut mb.queue))
        };
        if let Some(mail) = mail {
            self.shared.live.fetch_sub(1, Ordering::AcqRel);
            drop(mail);
        }
        drop(actor);
    }
}

/// Starts actors on a [`Runtime`]'s threads. Cheap to clone and `Send`, so actors and other
/// threads can start actors too.
#[derive(Clone)]
pub struct Spawner {
    shared: Arc<Shared>,
}

impl Spawner {
    /// Starts `actor`, running it at most `batch` messages at a time (at least 1).
    pub fn spawn<A: Actor>(&self, actor: A, batch: usize) -> Addr<A::Msg> {
        self.shared.live.fetch_add(1, Ordering::AcqRel);
        let cell = Arc::new_cyclic(|me| Cell {
            mailbox: Mutex::new(Mailbox {
                queue: VecDeque::new(),
                scheduled: false,
                stopped: false,
            }),
            actor: Mutex::new(Some(actor)),
            batch: batch.max(1),
            shared: self.shared.clone(),
            me: me.clone(),
        });
        Addr { cell }
    }

    /// Actors started and not yet stopped.
    pub fn live(&self) -> usize {
        self.shared.live.load(Ordering::Acquire)
    }
}

/// The scheduler threads. Dropping it (or [`Runtime::shutdown`]) stops them after the actor
/// each is running, and drops every actor still waiting to run.
pub struct Runtime {
    spawner: Spawner,
    queue: Receiver<Task>,
    threads: Vec<JoinHandle<()>>,
}

impl Runtime {
    /// Starts `threads` scheduler threads (at least 1) named `{name}-{i}`.
    pub fn new(threads: usize, name: &str) -> io::Result<Runtime> {
        let (tx, rx) = crossbeam_channel::unbounded::<Task>();
        let shared = Arc::new(Shared {
            queue: tx,
            live: AtomicUsize::new(0),
        });
        let threads = (0..threads.max(1))
            .map(|i| {
                let rx = rx.clone();
                std::thread::Builder::new()
                    .name(format!("{name}-{i}"))
                    .spawn(move || {
                        for task in rx {
                            match task {
                                Task::Run(cell) => cell.run(),
                                Task::Exit => return,
                            }
                        }
                    })
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Runtime {
            spawner: Spawner { shared },
            queue: rx,
            threads,
        })
    }

    /// A handle for starting actors.
    pub fn spawner(&self) -> Spawner {
        self.spawner.clone()
    }

    /// Stops the scheduler threads and drops the actors still in line.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        for _ in &self.threads {
            let _ = self.spawner.shared.queue.send(Task::Exit);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // Actors still queued hold the queue's sender (and may hold each other): break the
        // cycles by dropping them now.
        while let Ok(task) = self.queue.try_recv() {
            if let Task::Run(cell) = task {
                cell.discard();
            }
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Records what it is sent.
    struct Recorder(mpsc::Sender<(usize, u32)>, usize);

    impl Actor for Recorder {
        type Msg = u32;
        fn handle(&mut self, msg: u32, _: &mut Context<'_, Self>) {
            let _ = self.0.send((self.1, msg));
        }
    }

    #[test]
    fn a_mailbox_is_fifo_per_sender() {
        let rt = Runtime::new(4, "test-fifo").unwrap();
        let (tx, rx) = mpsc::channel();
        let addr = rt.spawner().spawn(Recorder(tx, 0), 3);
        let senders: Vec<_> = (0..4u32)
            .map(|s| {
                let addr = addr.clone();
                std::thread::spawn(move || {
                    for i in 0..1000u32 {
                        assert!(addr.send(s * 10_000 + i));
                    }
                })
            })
            .collect();
        for t in senders {
            t.join().unwrap();
        }
        let got: Vec<u32> = (0..4000)
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap().1)
            .collect();
        for s in 0..4u32 {
            let mine: Vec<u32> = got.iter().copied().filter(|m| m / 10_000 == s).collect();
            let want: Vec<u32> = (0..1000).map(|i| s * 10_000 + i).collect();
            assert_eq!(mine, want, "sender {s}'s messages out of order");
        }
    }

    /// Sends itself `n - 1` for each `n > 0` (seed 002's recursive behaviour), recording each.
    struct Spinner(mpsc::Sender<(usize, u32)>);

    impl Actor for Spinner {
        type Msg = u32;
        fn handle(&mut self, n: u32, cx: &mut Context<'_, Self>) {
            let _ = self.0.send((1, n));
            if n > 0 {
                cx.addr().send(n - 1);
            }
        }
    }

    /// Holds the (only) scheduler thread until told to go on.
    struct Gate(mpsc::Receiver<()>);

    impl Actor for Gate {
        type Msg = ();
        fn handle(&mut self, _: (), _: &mut Context<'_, Self>) {
            let _ = self.0.recv_timeout(Duration::from_secs(10));
        }
    }

    /// With one scheduler thread: a busy actor and a quiet one with one message. Returns how
    /// many of the busy actor's messages were handled before the quiet one's.
    fn busy_before_quiet(batch: usize) -> usize {
        let rt = Runtime::new(1, "test-fair").unwrap();
        let sp = rt.spawner();
        let (tx, rx) = mpsc::channel();
        let (open, gate) = mpsc::channel();
        // The gate occupies the thread while both actors get their mail, so the run queue
        // holds busy, then quiet, deterministically.
        sp.spawn(Gate(gate), 1).send(());
        let busy = sp.spawn(Spinner(tx.clone()), batch);
        let quiet = sp.spawn(Recorder(tx, 2), batch);
        busy.send(5_000);
        quiet.send(0);
        open.send(()).unwrap();
        let mut before = 0;
        loop {
            match rx.recv_timeout(Duration::from_secs(10)).unwrap() {
                (2, _) => return before,
                _ => before += 1,
            }
        }
    }

    #[test]
    fn with_batch_1_a_busy_actor_cannot_starve_another() {
        assert_eq!(
            busy_before_quiet(1),
            1,
            "the quiet actor ran after one busy message"
        );
    }

    #[test]
    fn a_batch_is_how_long_a_busy_actor_keeps_its_thread() {
        assert_eq!(busy_before_quiet(2), 2);
        assert_eq!(busy_before_quiet(1000), 1000);
    }

    /// Stops itself on 0; counts drops.
    struct Stopper(Arc<AtomicUsize>);

    impl Actor for Stopper {
        type Msg = u32;
        fn handle(&mut self, n: u32, cx: &mut Context<'_, Self>) {
            if n == 0 {
                cx.stop();
            }
        }
    }

    impl Drop for Stopper {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::AcqRel);
        }
    }

    #[test]
    fn a_stopped_actor_is_dropped_and_refuses_mail() {
        let rt = Runtime::new(2, "test-stop").unwrap();
        let sp = rt.spawner();
        let drops = Arc::new(AtomicUsize::new(0));
        let addr = sp.spawn(Stopper(drops.clone()), 2);
        assert_eq!(sp.live(), 1);
        assert!(!addr.is_stopped());
        assert!(addr.send(1));
        assert!(addr.send(0));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while drops.load(Ordering::Acquire) == 0 {
            assert!(std::time::Instant::now() < deadline, "never stopped");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(sp.live(), 0);
        assert!(addr.is_stopped());
        assert!(!addr.send(5), "a stopped actor took a message");
    }

    #[test]
    fn shutdown_drops_actors_still_in_line() {
        let rt = Runtime::new(1, "test-shutdown").unwrap();
        let sp = rt.spawner();
        let drops = Arc::new(AtomicUsize::new(0));
        let (open, gate) = mpsc::channel();
        sp.spawn(Gate(gate), 1).send(());
        let addr = sp.spawn(Stopper(drops.clone()), 1);
        addr.send(1);
        open.send(()).unwrap();
        rt.shutdown();
        // Either it ran and waits idle (its address keeps it) or it was dropped unrun; either
        // way nothing keeps it once the address goes: no cycle through the run queue.
        drop(addr);
        assert_eq!(drops.load(Ordering::Acquire), 1);
    }

    #[test]
    fn many_actors_on_many_threads_lose_nothing() {
        let rt = Runtime::new(4, "test-many").unwrap();
        let sp = rt.spawner();
        let (tx, rx) = mpsc::channel();
        let addrs: Vec<_> = (0..50)
            .map(|i| sp.spawn(Recorder(tx.clone(), i), 2))
            .collect();
        for round in 0..100 {
            for a in &addrs {
                a.send(round);
            }
        }
        let mut count = vec![0usize; 50];
        for _ in 0..5000 {
            let (who, _) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
            count[who] += 1;
        }
        assert!(count.iter().all(|&c| c == 100), "{count:?}");
    }
}
