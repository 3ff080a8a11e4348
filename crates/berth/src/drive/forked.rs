//! `forked`: a process per connection (seed 000's `-type f`). The parent accepts and forks; the
//! child closes everything it inherited but its connection (the listener included), serves that
//! one connection and exits; the parent closes its copy of the connection and reaps children as
//! they exit, so none lingers as a zombie. A child that crashes takes only its own connection
//! down. At `max_children` live children, new connections get the service's refusal. A child
//! follows its server: if the server dies without a word (SIGKILL), the kernel sends the child
//! SIGTERM (`PR_SET_PDEATHSIG`), and it finishes the request in flight and exits.
//!
//! Counters reach the parent only if `stats` lives in shared memory ([`Stats::new_shared`]).

use std::io;
use std::os::fd::AsRawFd;

use std::sync::Arc;
use std::time::Duration;

use super::blocking::{self, ConnConfig};
use crate::rt::DateCache;
use super::{Server, Service};
use crate::process::signal;
use crate::net::{Acceptor, Listener};
use crate::rt::Control;
use crate::stats::Stats;
use crate::sys::process::{self, Fork};

/// Settings of the `forked` model of its own (the connection settings, used in each child,
/// come from [`Common`](super::Common)).
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Most children alive at once (`--max-children`).
    pub max_children: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config { max_children: 1024 }
    }
}

/// Accepts on a thread of the calling process and forks a child per connection, which serves
/// it over `transport`.
pub fn spawn<S: Service>(
    listener: Listener,
    transport: Acceptor,
    service: S,
    conn: ConnConfig,
    config: Config,
    stats: Arc<Stats>,
) -> io::Result<Server> {
    let ctl = Arc::new(Control::default());
    let listener_handle = listener.try_clone().ok();
    let acceptor = {
        let ctl = ctl.clone();
        std::thread::Builder::new()
            .name("berth-fork".into())
            .spawn(move || {
                let refusal = transport.refusal(service.refusal());
                let mut children: Vec<libc::pid_t> = Vec::new();
                let mut serial = 0usize;
                let parent = stats.shard(0);
                let reap = |children: &mut Vec<libc::pid_t>| {
                    children.retain(|&pid| match process::try_reap(pid) {
                        None => true,
                        Some(code) => {
                            if code != 0 {
                                log::debug!("connection process {pid} ended with status {code}");
                            }
                            parent.connection_closed();
                            false
                        }
                    })
                };
                loop {
                    let Some(stream) = blocking::accept(&listener, &ctl, || reap(&mut children))
                    else {
                        break;
                    };
                    reap(&mut children);
                    if children.len() >= config.max_children {
                        let cap = config.max_children;
                        blocking::refuse(stream, refusal, parent, cap, "forked");
                        continue;
                    }
                    serial = serial.wrapping_add(1);
                    // Counted before the fork, so that the child's own `/stats` includes it.
                    parent.connection_opened();
                    let server = process::pid();
                    let mut forked = None;
                    service.around_fork(&mut || {
                        let result = process::fork();
                        let child = matches!(result, Ok(Fork::Child));
                        forked = Some(result);
                        child
                    });
                    match forked.expect("around_fork calls fork") {
                        Ok(Fork::Child) => {
                            let files = service.files();
                            // The files root stays open too: files are opened relative to it.
                            let keep: Vec<_> = [stream.as_raw_fd()]
                                .into_iter()
                                .chain(files.descriptors())
                                .collect();
                            process::close_inherited(&keep);
                            // SIGTERM from a draining parent: finish the request in flight, then go.
                            let Ok(terminated) = signal::interrupt_on_termination(&stream) else {
                                process::exit_child(70);
                            };
                            // The same when the server dies without a word (SIGKILL): the
                            // kernel sends SIGTERM, and the request in flight is finished.
                            if !process::follow_parent(server, libc::SIGTERM).unwrap_or(true) {
                                terminated.store(true, std::sync::atomic::Ordering::Release);
                            }
                            let served =
                                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                    let mut handler = service.handler(serial);
                                    let mut date = DateCache::default();
                                    let serving = blocking::Serving {
                                        handler: &mut handler,
                                        files: &files,
                                        date: &mut date,
                                        stats: &stats,
                                        going: &|| {
                                            terminated
                                                .load(std::sync::atomic::Ordering::Acquire)
                                        },
                                    };
                                    blocking::serve_connection(
                                        stream,
                                        &transport,
                                        serving,
                                        &conn,
                                        || terminated.load(std::sync::atomic::Ordering::Acquire),
                                        None,
                                        None,
                                    )
                                }));
                            process::exit_child(if served.is_ok() { 0 } else { 101 });
                        }
                        Ok(Fork::Parent(pid)) => {
                            drop(stream);
                            children.push(pid);
                        }
                        Err(e) => {
                            log::warn!("cannot fork a connection process: {e}");
                            parent.connection_closed();
                            let cap = config.max_children;
                            blocking::refuse(stream, refusal, parent, cap, "forked");
                        }
                    }
                }
                // Stopping. In a drain, connection processes finish their connection until the
                // deadline; then they are told to end, so none outlives the server.
                for &pid in &children {
                    process::kill(pid, libc::SIGTERM);
                }
                blocking::wait_drained(&ctl, || {
                    reap(&mut children);
                    children.is_empty()
                });
                let before = children.len();
                process::stop_children(&mut children, Duration::from_secs(2));
                for _ in 0..before {
                    parent.connection_closed();
                }
            })?
    };
    let server = Server::new(ctl, vec![acceptor]);
    server.ctl.on_stop(move |_| {
        if let Some(l) = &listener_handle {
            blocking::stop_listening(l);
        }
    });
    Ok(server)
}

/// The `forked` model in the registry.
pub struct Forked;

impl super::Driver for Forked {
    const INFO: super::Info = super::Info {
        name: "forked",
        about: "A process per connection",
        needs: super::Needs {
            forks: true,
            children_listen: false,
            accept_threads: super::AcceptThreads::Unused,
            workers: false,
        },
        caps: super::Caps::BLOCKING,
        flags: &[super::Flag {
            long: "max-children",
            value_name: "N",
            help: "`forked` model: most connection processes at once; more are answered 503 \
                   and closed.",
            get: |m| m.forked.max_children,
            set: |m, n| m.forked.max_children = n.get(),
        }],
        shards: |_, _| 1,
        listeners: super::registry::one_listener,
        describe: |_, m| format!("a process per connection, at most {}", m.forked.max_children),
    };
    type Config = Config;

    fn spawn<S: Service>(
        addr: &crate::net::Addr,
        common: &super::Common,
        config: &Config,
        service: S,
        stats: Arc<Stats>,
    ) -> Result<(Server, crate::net::Addr), crate::net::BindError> {
        super::registry::on_one_listener(addr, common, |listener| {
            let transport = common.listen.transport.clone();
            spawn(listener, transport, service, common.conn(), *config, stats)
        })
    }
}
