//! `prefork`: N long-lived worker processes, each binding its own `SO_REUSEPORT` listener on the
//! same port and running an event loop (seed 003's "multiple instances share one port"). A UNIX
//! socket cannot be shared through `SO_REUSEPORT` (an inet option): its path is bound once, by
//! the parent, and every worker serves a copy of that one socket, all taking connections from
//! its one accept queue. The
//! parent holds the port with a bound, non-listening socket (so it takes no connections),
//! supervises the children — restarting one that dies, with a backoff that grows while children
//! keep dying young — and on shutdown sends them SIGTERM and waits for them. Children follow
//! their master: if it dies without a word (SIGKILL, the OOM killer), the kernel sends each of
//! them SIGTERM (`PR_SET_PDEATHSIG`) and they drain and exit, freeing the port.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{evloop, Common, Server, Service};
use crate::process::signal;
use crate::net::{bind, check_unshared, reserve_port, Addr, BindError, ListenConfig, Listener};
use crate::rt::Control;
use crate::stats::Stats;
use crate::sys::process::{self, Fork};

/// Settings of the `prefork` model of its own. Accept threads (per process), listening,
/// capacity, workers, limits and timeouts come from [`Common`].
#[derive(Debug, Clone)]
pub struct Config {
    /// Worker processes (`--processes`).
    pub processes: usize,
    /// The event loop's own settings, in each process.
    pub evloop: evloop::Config,
    /// How long children get to exit after SIGTERM before SIGKILL, when stopping at once.
    pub stop_grace: Duration,
    /// How long a child finishes requests in flight after SIGTERM (it drains gracefully).
    pub drain_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            processes: 2,
            evloop: evloop::Config::default(),
            stop_grace: Duration::from_secs(5),
            drain_timeout: Duration::from_secs(30),
        }
    }
}

/// First delay before restarting a child that died; doubled for each further early death.
const RESTART_MIN: Duration = Duration::from_millis(100);
const RESTART_MAX: Duration = Duration::from_secs(5);
/// A child that lived this long counts as healthy: its death resets the backoff.
const HEALTHY: Duration = Duration::from_secs(10);
const SUPERVISE_TICK: Duration = Duration::from_millis(20);

struct Child {
    pid: Option<libc::pid_t>,
    started: Instant,
    restart_at: Option<Instant>,
    backoff: Duration,
}

/// Reserves `addr`, starts the children and a supervising thread. Returns the bound address.
/// Each child binds [`Common::accept_threads`] listeners and runs an event loop on them.
///
/// With [`ListenConfig::exclusive`] an address another process listens on is refused before
/// anything is started; the children then join the port their master checked without checking
/// again. The children are forked by the supervising thread, which lives as long as they
/// should: each asks the kernel for SIGTERM when that thread (and so the master) is gone, and
/// drains and exits on it.
pub fn spawn<S: Service>(
    addr: &Addr,
    service: S,
    common: &Common,
    config: Config,
    stats: Arc<Stats>,
) -> Result<(Server, Addr), BindError> {
    // What holds the address for the children: a bound, non-listening TCP socket on the port
    // (each worker slot binds its own listeners on it), or the one UNIX socket, bound here
    // (every slot serves copies of it). `bind` refuses a UDP address.
    let (reservation, shared, bound) = match (addr, &common.listen.inherited) {
        (Addr::Unix(_) | Addr::Udp(_), _) => {
            let listeners = bind(addr, common.accept_threads.max(1), common.listen.clone())?;
            let error = |source| BindError {
                addr: addr.clone(),
                source,
            };
            let bound = listeners[0].local_addr().map_err(error)?;
            (None, Some(listeners), bound)
        }
        // A socket passed in (systemd) holds the port already: a copy of it is the reservation.
        (Addr::Tcp(tcp), Some(socket)) => {
            let error = |source| BindError {
                addr: addr.clone(),
                source,
            };
            let bound = socket.local_addr().map_err(error)?.as_socket().unwrap_or(*tcp);
            (Some(socket.try_clone().map_err(error)?), None, Addr::Tcp(bound))
        }
        (Addr::Tcp(tcp), None) => {
            if common.listen.exclusive {
                check_unshared(*tcp)?;
            }
            let (socket, bound) = reserve_port(*tcp)?;
            (Some(socket), None, Addr::Tcp(bound))
        }
    };
    let shared = Arc::new(std::sync::Mutex::new(shared));
    let ctl = Arc::new(Control::default());
    let child_common = Common {
        listen: ListenConfig {
            exclusive: false,
            ..common.listen.clone()
        },
        ..common.clone()
    };
    let child_config = config.clone();
    // Each worker slot's listeners are bound once, here in the master, and inherited by
    // every worker that serves the slot: a worker that is replaced (a restart, a renewal)
    // closes only its copy, so connections waiting in the slot's accept queue are taken by
    // its successor instead of being reset with the socket.
    let slots: Arc<std::sync::Mutex<Vec<Option<Vec<Listener>>>>> = Arc::default();
    // A stop closes the master's copies at once, so that once the workers have closed theirs
    // the port refuses new connections (instead of queueing them for nobody).
    ctl.on_stop({
        let (slots, shared) = (slots.clone(), shared.clone());
        move |_| {
            slots.lock().unwrap_or_else(|e| e.into_inner()).clear();
            *shared.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    });
    let slot_bound = bound.clone();
    // Each child says it is listening over a socket pair: the server is reported started
    // only once every worker takes connections, never between a fork and its bind.
    let start = move |index: usize| -> io::Result<(libc::pid_t, UnixStream)> {
        let master = process::pid();
        let listeners = {
            let mut slots = slots.lock().unwrap_or_else(|e| e.into_inner());
            if slots.len() <= index {
                slots.resize_with(index + 1, || None);
            }
            if slots[index].is_none() {
                let shared = shared.lock().unwrap_or_else(|e| e.into_inner());
                let bound_here = match shared.as_ref() {
                    Some(one) => one.iter().map(Listener::try_clone).collect::<io::Result<_>>()?,
                    None => bind(
                        &slot_bound,
                        child_common.accept_threads.max(1),
                        child_common.listen.clone(),
                    )
                    .map_err(|e| io::Error::other(e.to_string()))?,
                };
                slots[index] = Some(bound_here);
            }
            let slot = slots[index].as_ref().expect("bound above");
            slot.iter()
                .map(Listener::try_clone)
                .collect::<io::Result<Vec<_>>>()?
        };
        let (ours, theirs) = UnixStream::pair()?;
        let mut forked = None;
        service.around_fork(&mut || {
            let result = process::fork();
            let child = matches!(result, Ok(Fork::Child));
            forked = Some(result);
            child
        });
        match forked.expect("around_fork calls fork")? {
            Fork::Child => {
                drop(ours);
                let ready = Ready(theirs);
                run_child(
                    index,
                    master,
                    listeners,
                    &service,
                    &child_common,
                    &child_config,
                    stats.clone(),
                    ready,
                )
            }
            Fork::Parent(pid) => Ok((pid, ours)),
        }
    };
    let (started_tx, started_rx) = std::sync::mpsc::sync_channel::<io::Result<()>>(1);
    let supervisor = {
        let ctl = ctl.clone();
        std::thread::Builder::new()
            .name("berth-prefork".into())
            .spawn(move || {
                let _reservation = reservation;
                let mut children = Vec::with_capacity(config.processes);
                for i in 0..config.processes.max(1) {
                    let started = start(i).and_then(|(pid, ready)| {
                        Ready::wait(ready, READY_TIMEOUT)
                            .map(|()| pid)
                            .map_err(|e| {
                                io::Error::new(e.kind(), format!("worker process {i}: {e}"))
                            })
                    });
                    match started {
                        Ok(pid) => children.push(Child {
                            pid: Some(pid),
                            started: Instant::now(),
                            restart_at: None,
                            backoff: RESTART_MIN,
                        }),
                        Err(e) => {
                            let mut pids: Vec<_> = children.iter().filter_map(|c| c.pid).collect();
                            process::stop_children(&mut pids, config.stop_grace);
                            let _ = started_tx.send(Err(e));
                            return;
                        }
                    }
                }
                let _ = started_tx.send(Ok(()));
                let retiring = supervise(&mut children, &ctl, &start);
                let mut pids: Vec<_> = children.iter().filter_map(|c| c.pid).collect();
                pids.extend(retiring);
                // SIGTERM makes each child drain; a drain here gives them until its deadline,
                // then a second SIGTERM stops them at once: their connections are closed by
                // their loops (reset, with bytes unsent) rather than left to the kernel as
                // orphans by a SIGKILL. SIGKILL is for a child that does not stop after that.
                let grace = match ctl.deadline() {
                    Some(deadline) => {
                        for &pid in &pids {
                            process::kill(pid, libc::SIGTERM);
                        }
                        while !pids.is_empty() && Instant::now() < deadline {
                            pids.retain(|&pid| process::try_reap(pid).is_none());
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        Duration::from_secs(1)
                    }
                    None => config.stop_grace,
                };
                process::stop_children(&mut pids, grace);
            })
            .map_err(|source| BindError {
                addr: bound.clone(),
                source,
            })?
    };
    let started = started_rx
        .recv()
        .unwrap_or_else(|_| Err(io::Error::other("the prefork supervisor thread ended")));
    if let Err(source) = started {
        let _ = supervisor.join();
        return Err(BindError {
            addr: bound,
            source,
        });
    }
    Ok((Server::new(ctl, vec![supervisor]), bound))
}

fn supervise(
    children: &mut [Child],
    ctl: &Control,
    start: &impl Fn(usize) -> io::Result<(libc::pid_t, UnixStream)>,
) -> Vec<libc::pid_t> {
    let mut renewed = ctl.renewals();
    // Workers replaced by a renewal, draining their connections; reaped as they exit.
    let mut retiring: Vec<libc::pid_t> = Vec::new();
    while !ctl.stopping() {
        let now = Instant::now();
        retiring.retain(|&pid| process::try_reap(pid).is_none());
        if ctl.renewals() != renewed {
            renewed = ctl.renewals();
            // A new worker per slot first (it inherits the reloaded configuration and joins
            // the port with SO_REUSEPORT), then the old one drains: no gap in listening.
            for (i, child) in children.iter_mut().enumerate() {
                match start(i) {
                    Ok((pid, _)) => {
                        if let Some(old) = child.pid.replace(pid) {
                            process::kill(old, libc::SIGTERM);
                            retiring.push(old);
                        }
                        child.started = now;
                        child.restart_at = None;
                    }
                    Err(e) => log::error!("cannot start a renewed worker process {i}: {e}"),
                }
            }
            log::info!("worker processes renewed");
        }
        for (i, child) in children.iter_mut().enumerate() {
            if let Some(pid) = child.pid {
                if let Some(status) = process::try_reap(pid) {
                    let lived = now - child.started;
                    child.backoff = if lived >= HEALTHY {
                        RESTART_MIN
                    } else {
                        (child.backoff * 2).min(RESTART_MAX)
                    };
                    let delay = if lived >= HEALTHY {
                        Duration::ZERO
                    } else {
                        child.backoff
                    };
                    log::warn!("worker process {i} (pid {pid}) exited with status {status}; restarting in {delay:?}");
                    child.pid = None;
                    child.restart_at = Some(now + delay);
                }
            }
            if child.pid.is_none() && child.restart_at.is_some_and(|t| t <= now) {
                // A restarted worker joins the others when it is ready; nobody waits for it.
                match start(i) {
                    Ok((pid, _)) => {
                        child.pid = Some(pid);
                        child.started = now;
                        child.restart_at = None;
                    }
                    Err(e) => {
                        log::error!("cannot restart worker process {i}: {e}");
                        child.restart_at = Some(now + RESTART_MAX);
                    }
                }
            }
        }
        std::thread::sleep(SUPERVISE_TICK);
    }
    retiring
}

/// How long the master waits for a new worker to say it is listening.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// A worker's end of the socket pair it says "listening" on: one byte, then it is closed. A
/// worker that dies first closes it without the byte.
struct Ready(UnixStream);

impl Ready {
    fn fd(&self) -> i32 {
        self.0.as_raw_fd()
    }

    /// Tells the master this worker's listeners take connections.
    fn say(self) {
        let mut s = self.0;
        let _ = s.write_all(b"R");
    }

    /// The master's side: waits up to `timeout` for the worker's byte.
    fn wait(mut ours: UnixStream, timeout: Duration) -> io::Result<()> {
        ours.set_read_timeout(Some(timeout))?;
        let mut byte = [0u8; 1];
        match ours.read(&mut byte) {
            Ok(1) => Ok(()),
            Ok(_) => Err(io::Error::other("exited before it was listening")),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("not listening after {timeout:?}"),
                ))
            }
            Err(e) => Err(e),
        }
    }
}

/// The life of a worker process: its slot's listeners on the shared port (bound by the
/// master), an event loop, and an orderly stop on SIGTERM. Never returns.
#[allow(clippy::too_many_arguments)] // what a forked child starts from, all of it
fn run_child<S: Service>(
    index: usize,
    master: libc::pid_t,
    listeners: Vec<Listener>,
    service: &S,
    common: &Common,
    config: &Config,
    stats: Arc<Stats>,
    ready: Ready,
) -> ! {
    // The files root stays open: the event loops open files relative to it; and the socket
    // this process says it is ready on.
    let files = service.files();
    let keep: Vec<_> = files
        .descriptors()
        .chain([ready.fd()])
        .chain(listeners.iter().map(|l| l.as_raw_fd()))
        .collect();
    process::close_inherited(&keep);
    // Termination signals are collected by this thread with sigwait, not delivered at random.
    if signal::block_termination().is_err() {
        process::exit_child(70);
    }
    // The master's death is a SIGTERM like any other: collected below, it drains this process.
    match process::follow_parent(master, libc::SIGTERM) {
        Ok(true) => {}
        // The master died before we could ask: nothing is served yet, so just go.
        Ok(false) => process::exit_child(0),
        Err(_) => process::exit_child(73),
    }
    // Each process counts into its own shards of the (shared) counters.
    let evloop = evloop::Config {
        first_thread: index * common.accept_threads.max(1),
        ..config.evloop.clone()
    };
    let server = match evloop::spawn(listeners, service.clone(), common, &evloop, stats) {
        Ok(s) => s,
        Err(_) => process::exit_child(72),
    };
    ready.say();
    let _ = signal::wait_for_termination();
    server.drain(config.drain_timeout);
    // A second one (the master's, once its own deadline has passed) stops at once.
    let stop = server.stopper();
    let _ = std::thread::Builder::new()
        .name("berth-stop".into())
        .spawn(move || {
            if signal::wait_for_termination().is_ok() {
                stop.shutdown();
            }
        });
    server.join();
    process::exit_child(0)
}

/// The `prefork` model in the registry.
pub struct Prefork;

impl super::Driver for Prefork {
    const INFO: super::Info = super::Info {
        name: "prefork",
        about: "N processes sharing the port, each an event loop",
        needs: super::Needs {
            forks: true,
            children_listen: true,
            accept_threads: super::AcceptThreads::PerProcess,
            workers: true,
        },
        caps: super::Caps {
            allocation_free: true,
            ..super::Caps::READINESS
        },
        flags: &[super::Flag {
            long: "processes",
            value_name: "N",
            help: "`prefork` model: worker processes, each with its own listeners on the shared \
                   port.",
            get: |m| m.prefork.processes,
            set: |m, n| m.prefork.processes = n.get(),
        }],
        shards: |common, m| common.accept_threads * m.prefork.processes,
        listeners: |common, m| m.prefork.processes * common.accept_threads,
        describe: |common, m| {
            use super::registry::{count, count_as};
            format!(
                "{} x {}, {} and capacity {} per thread",
                count_as(m.prefork.processes, "process", "processes"),
                count(common.accept_threads, "accept thread"),
                count(common.workers, "worker"),
                common.sizing.capacity
            )
        },
    };
    type Config = Config;

    fn spawn<S: Service>(
        addr: &Addr,
        common: &Common,
        config: &Config,
        service: S,
        stats: Arc<Stats>,
    ) -> Result<(Server, Addr), BindError> {
        spawn(addr, service, common, config.clone(), stats)
    }
}
