//! Picking a model by name and starting it: the one entry point the CLI and the conformance
//! tests share, so every model is bound, configured and counted the same way.

use std::net::SocketAddr;
use std::sync::Arc;

use super::{actor, blocking, evloop, forked, prefork, single, threaded, Server, Service};
use crate::net::{bind_tcp, BindError, ListenConfig};
use crate::stats::Stats;

/// The concurrency models berth runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Model {
    /// One thread accepts and serves one connection at a time.
    Single,
    /// A thread per connection, capped.
    Threaded,
    /// A process per connection, capped.
    Forked,
    /// N long-lived processes sharing the port through `SO_REUSEPORT`, each an event loop.
    Prefork,
    /// Accept threads with their own listeners and mio loops, plus a worker pool.
    Evloop,
    /// A connection is an actor; scheduler threads run actors a batch of messages at a time.
    Actor,
}

impl Model {
    /// Every model, in the order tables list them.
    pub const ALL: [Model; 6] = [
        Model::Single,
        Model::Threaded,
        Model::Forked,
        Model::Prefork,
        Model::Evloop,
        Model::Actor,
    ];

    /// The model's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Model::Single => "single",
            Model::Threaded => "threaded",
            Model::Forked => "forked",
            Model::Prefork => "prefork",
            Model::Evloop => "evloop",
            Model::Actor => "actor",
        }
    }

    /// Whether its children are separate processes (their counters need shared memory).
    pub fn forks(self) -> bool {
        matches!(self, Model::Forked | Model::Prefork)
    }
}

impl std::fmt::Display for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Model {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Model::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown model '{s}' (one of: single, threaded, forked, prefork, evloop, actor)"
                )
            })
    }
}

/// Everything needed to start any model.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Which model.
    pub model: Model,
    /// Where to listen.
    pub addr: SocketAddr,
    /// How listeners are bound.
    pub listen: ListenConfig,
    /// Accept threads (`evloop`, and per process in `prefork`); scheduler threads (`actor`).
    pub accept_threads: usize,
    /// The event loop settings (`evloop`, `prefork`); its limits are used by every model.
    pub evloop: evloop::Config,
    /// Connection settings of the blocking models (limits are taken from `evloop.limits`).
    pub conn: blocking::ConnConfig,
    /// Thread cap of `threaded`.
    pub max_threads: usize,
    /// Process cap of `forked`.
    pub max_children: usize,
    /// Worker processes of `prefork`.
    pub processes: usize,
    /// Most messages an actor handles before yielding its thread (`actor`).
    pub actor_batch: usize,
}

impl Settings {
    /// Defaults for `model` on `addr`.
    pub fn new(model: Model, addr: SocketAddr) -> Self {
        Settings {
            model,
            addr,
            listen: ListenConfig::default(),
            accept_threads: 1,
            evloop: evloop::Config::default(),
            conn: blocking::ConnConfig::default(),
            max_threads: threaded::Config::default().max_threads,
            max_children: forked::Config::default().max_children,
            processes: prefork::Config::default().processes,
            actor_batch: actor::Config::default().batch,
        }
    }

    /// Counters fit for the model: in shared memory when children are processes, so their
    /// counts reach `/stats` wherever it is asked.
    pub fn new_stats(&self) -> std::io::Result<Arc<Stats>> {
        let shards = match self.model {
            Model::Evloop => self.accept_threads,
            Model::Prefork => self.accept_threads * self.processes,
            Model::Threaded | Model::Actor => crate::stats::MAX_SHARDS,
            Model::Single | Model::Forked => 1,
        };
        Ok(Arc::new(if self.model.forks() {
            Stats::new_shared(shards)?
        } else {
            Stats::new(shards)
        }))
    }
}

/// Binds and starts the model `settings` names. Returns the server and the bound address.
/// (Handlers must be `Send`: in the `actor` model a connection moves between threads.)
pub fn serve<S: Service>(
    settings: &Settings,
    service: S,
    stats: Arc<Stats>,
) -> Result<(Server, SocketAddr), BindError>
where
    S::Handler: Send + 'static,
{
    let conn = blocking::ConnConfig {
        limits: settings.evloop.limits,
        timeouts: settings.evloop.timeouts,
        ..settings.conn
    };
    let addr = settings.addr;
    let io = |source| BindError { addr, source };
    let one = || -> Result<_, BindError> {
        let mut listeners = bind_tcp(addr, 1, settings.listen)?;
        let listener = listeners.remove(0);
        let bound = listener.local_addr().map_err(io)?;
        Ok((listener, bound))
    };
    match settings.model {
        Model::Single => {
            let (listener, bound) = one()?;
            Ok((
                single::spawn(listener, service, conn, stats).map_err(io)?,
                bound,
            ))
        }
        Model::Threaded => {
            let (listener, bound) = one()?;
            let config = threaded::Config {
                conn,
                max_threads: settings.max_threads,
                ..threaded::Config::default()
            };
            Ok((
                threaded::spawn(listener, service, config, stats).map_err(io)?,
                bound,
            ))
        }
        Model::Forked => {
            let (listener, bound) = one()?;
            let config = forked::Config {
                conn,
                max_children: settings.max_children,
            };
            Ok((
                forked::spawn(listener, service, config, stats).map_err(io)?,
                bound,
            ))
        }
        Model::Prefork => {
            let config = prefork::Config {
                processes: settings.processes,
                accept_threads: settings.accept_threads,
                evloop: settings.evloop.clone(),
                listen: settings.listen,
                ..prefork::Config::default()
            };
            prefork::spawn(addr, service, config, stats)
        }
        Model::Actor => {
            let (listener, bound) = one()?;
            let e = &settings.evloop;
            let config = actor::Config {
                schedulers: settings.accept_threads,
                batch: settings.actor_batch,
                capacity: e.capacity,
                workers: e.workers,
                queue_capacity: e.queue_capacity,
                limits: e.limits,
                buffer_size: e.buffer_size,
                timeouts: e.timeouts,
            };
            Ok((
                actor::spawn(listener, service, config, stats).map_err(io)?,
                bound,
            ))
        }
        Model::Evloop => {
            let listeners = bind_tcp(addr, settings.accept_threads, settings.listen)?;
            let bound = listeners[0].local_addr().map_err(io)?;
            Ok((
                evloop::spawn(listeners, service, settings.evloop.clone(), stats).map_err(io)?,
                bound,
            ))
        }
    }
}
