//! `threaded`: a thread per connection (seed 000's `-type t`, seed 004's threaded server),
//! capped at `max_threads`; a connection beyond the cap gets the service's refusal (503) and is
//! closed and counted, rather than left to queue behind threads that may never finish.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::blocking::{self, Active, ConnConfig};
use crate::rt::DateCache;
use super::{Server, Service};
use crate::net::{Acceptor, Listener};
use crate::rt::{Control, StopKind};
use crate::stats::Stats;

/// Settings of the `threaded` model of its own (the connection settings come from
/// [`Common`](super::Common)).
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Most connection threads alive at once (`--max-threads`).
    pub max_threads: usize,
    /// Stack size of each connection thread. The HTTP path needs little; a small stack lets
    /// thousands of threads fit.
    pub stack_size: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_threads: 1024,
            stack_size: 256 * 1024,
        }
    }
}

/// Accepts on one thread and serves each connection on a thread of its own, over `transport`.
pub fn spawn<S: Service>(
    listener: Listener,
    transport: Acceptor,
    service: S,
    conn: ConnConfig,
    config: Config,
    stats: Arc<Stats>,
) -> io::Result<Server> {
    let ctl = Arc::new(Control::default());
    let active = Arc::new(Active::default());
    let listener_handle = listener.try_clone().ok();
    let live = Arc::new(AtomicUsize::new(0));
    let acceptor = {
        let (ctl, active) = (ctl.clone(), active.clone());
        std::thread::Builder::new()
            .name("berth-accept".into())
            .spawn(move || {
                let refusal = transport.refusal(service.refusal());
                let mut serial = 0usize;
                while let Some(stream) = blocking::accept(&listener, &ctl, || {}) {
                    if live.load(Ordering::Acquire) >= config.max_threads {
                        let (shard, cap) = (stats.shard(0), config.max_threads);
                        blocking::refuse(stream, refusal, shard, cap, "threaded");
                        continue;
                    }
                    serial = serial.wrapping_add(1);
                    let id = serial;
                    let (service, conn_stats, active, live_now, transport, going) = (
                        service.clone(),
                        stats.clone(),
                        active.clone(),
                        live.clone(),
                        transport.clone(),
                        ctl.clone(),
                    );
                    live.fetch_add(1, Ordering::AcqRel);
                    let spawned = std::thread::Builder::new()
                        .stack_size(config.stack_size)
                        .spawn(move || {
                            let shard = conn_stats.shard(id);
                            shard.connection_opened();
                            let key = active.insert(&stream);
                            let mut handler = service.handler(id);
                            let files = service.files();
                            let mut date = DateCache::default();
                            let serving = blocking::Serving {
                                handler: &mut handler,
                                files: &files,
                                date: &mut date,
                                stats: &conn_stats,
                                going: &|| going.stopping(),
                            };
                            if let Err(e) = blocking::serve_connection(
                                stream,
                                &transport,
                                serving,
                                &conn,
                                || false,
                                None,
                                None,
                            ) {
                                log::debug!("connection ended with an error: {e}");
                            }
                            if let Some(key) = key {
                                active.remove(key);
                            }
                            shard.connection_closed();
                            live_now.fetch_sub(1, Ordering::AcqRel);
                        });
                    if let Err(e) = spawned {
                        // The stream moved into the closure and was dropped with it: closed.
                        live.fetch_sub(1, Ordering::AcqRel);
                        stats.shard(0).connection_refused();
                        log::warn!("cannot start a connection thread: {e}");
                    }
                }
                // Stopping. In a drain, connection threads finish the request they are on (their
                // reading side is shut, so idle ones end at once); at the deadline the rest go.
                blocking::wait_drained(&ctl, || live.load(Ordering::Acquire) == 0);
                if live.load(Ordering::Acquire) > 0 {
                    active.shutdown_all(StopKind::Now);
                }
            })?
    };
    let server = Server::new(ctl, vec![acceptor]);
    server.ctl.on_stop(move |kind| {
        if let Some(l) = &listener_handle {
            blocking::stop_listening(l);
        }
        active.shutdown_all(kind)
    });
    Ok(server)
}

/// The `threaded` model in the registry.
pub struct Threaded;

impl super::Driver for Threaded {
    const INFO: super::Info = super::Info {
        name: "threaded",
        about: "A thread per connection",
        needs: super::Needs {
            forks: false,
            children_listen: false,
            accept_threads: super::AcceptThreads::Unused,
            workers: false,
        },
        caps: super::Caps::BLOCKING,
        flags: &[super::Flag {
            long: "max-threads",
            value_name: "N",
            help: "`threaded` model: most connection threads at once; more are answered 503 \
                   and closed.",
            get: |m| m.threaded.max_threads,
            set: |m, n| m.threaded.max_threads = n.get(),
        }],
        // Connection threads count into shards by their serial number.
        shards: |_, _| crate::stats::MAX_SHARDS,
        listeners: super::registry::one_listener,
        describe: |_, m| format!("a thread per connection, at most {}", m.threaded.max_threads),
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
