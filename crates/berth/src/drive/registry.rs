//! The model registry: what a model is ([`Driver`], whose [`Info`] is a row of plain data),
//! the one list of models (the `models!` invocation in `drive/mod.rs`), and what is made from
//! that list — the [`Model`] enum with its table of [`Info`] rows, every model's own settings
//! side by side ([`ModelConfigs`]), starting the model [`Settings`] name ([`serve`]), and the
//! list handed to compile-time users such as the test suites
//! ([`with_models!`](crate::with_models)). The CLI's `--model` values and their help, the
//! model-specific flags, the startup line, the lab, the Python front's WebSocket scope and the
//! tests all read the registry, so none of them names a model.
//!
//! ```text
//!   drive/mod.rs: models! { single::Single, threaded::Threaded, ... }
//!        │ generates
//!        ├─ pub mod single; pub mod threaded; ...
//!        ├─ enum Model { Single, Threaded, ... }   + Model::ALL
//!        ├─ Model::info: the table of Info rows (name, about, Needs, Caps, flags, shape)
//!        ├─ struct ModelConfigs { single: (), threaded: threaded::Config, ... }
//!        ├─ the one `match` from a Model to its driver's spawn (serve)
//!        └─ with_models!  (the list, for macros in other crates)
//! ```
//!
//! Dispatch is static: [`serve`] matches once, at startup, and calls the model's
//! `Driver::spawn::<S>`, monomorphised for the service; nothing per connection or per request
//! goes through the registry. Everything else a model says about itself is data, read from
//! its row without generics.
//!
//! # Adding a model
//!
//! 1. Write its module, `drive/<name>.rs` (or `drive/<name>/mod.rs`): its `spawn`, its own
//!    `Config` (with `Default`), and a unit struct implementing [`Driver`] — its [`Info`]
//!    (name, one-line description, [`Needs`], [`Caps`], flags ([`Flag`]), stats shards,
//!    listeners, startup-line shape) and `spawn` from [`Common`] plus its `Config`.
//! 2. Add one line, `<name>::<Type>,`, to the `models!` list in `drive/mod.rs`.
//!
//! Nothing else: `berth serve --model <name>` and its flags, `--help`, `berth models`, the
//! startup line, `berth lab`, the test support (`tests/support/server.rs`) and a test per
//! model in every per-model suite (`tests/conformance.rs`, `tests/deferred.rs`,
//! `tests/https.rs`, `berth-cli/tests/shutdown.rs`) follow from the list. The conformance
//! suite then runs every case against the new model; one it cannot support by design is
//! declared, with the reason, in that suite's `UNSUPPORTED` table (as `single` declares it has
//! no capacity to refuse at). What a case needs of a model it reads from [`Caps`].

use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;

use super::{Common, Model, ModelConfigs, Server, Service};
use crate::net::{bind, Addr, BindError, Listener, SocketFile};
use crate::stats::Stats;

/// A concurrency model, as the registry knows it: implemented by a unit struct in the model's
/// module (`threaded::Threaded`) and listed once in `drive/mod.rs`.
pub trait Driver {
    /// What it is, as data: the registry's row for it.
    const INFO: Info;
    /// Its own settings (the shared ones are [`Common`]); its field of [`ModelConfigs`], named
    /// after its module.
    type Config: fmt::Debug + Clone + Default + Send + Sync + 'static;

    /// Binds `addr` (TCP or a UNIX socket's path: [`crate::net::bind`]) as [`Common::listen`]
    /// says and starts serving. Returns the server and the bound address. (Handlers must be
    /// `Send`: in the `actor` model a connection moves between threads.)
    fn spawn<S: Service>(
        addr: &Addr,
        common: &Common,
        config: &Self::Config,
        service: S,
        stats: Arc<Stats>,
    ) -> Result<(Server, Addr), BindError>
    where
        S::Handler: Send + 'static;
}

/// A model's row in the registry: what it is called, what it asks of the rest of berth, what
/// it can do, its own flags and its shape. Plain data and plain functions of the settings:
/// read through [`Model::info`], without generics.
#[derive(Debug, Clone, Copy)]
pub struct Info {
    /// Its name on the command line (`--model`), in the startup line and in the lab.
    pub name: &'static str,
    /// One line for `--model`'s list of values in `--help`.
    pub about: &'static str,
    /// What it asks of the rest of berth.
    pub needs: Needs,
    /// What it can do for a connection.
    pub caps: Caps,
    /// Its own command-line flags, which set fields of its `Config`. `berth serve` shows them
    /// after `-w`, in registry order, with the default read from `ModelConfigs::default()`.
    pub flags: &'static [Flag],
    /// How many stats shards its threads count into (see [`Stats::new`]).
    pub shards: fn(&Common, &ModelConfigs) -> usize,
    /// How many listening sockets it has once it is fully up.
    pub listeners: fn(&Common, &ModelConfigs) -> usize,
    /// Its shape for the startup line, after `model <name>, `: e.g. `a thread per connection,
    /// at most 1024`.
    pub describe: fn(&Common, &ModelConfigs) -> String,
}

/// [`Info::listeners`] of a model served from one listener.
pub fn one_listener(_: &Common, _: &ModelConfigs) -> usize {
    1
}

/// What a model asks of the rest of berth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needs {
    /// Its connections are served in child processes: its counters must live in shared memory
    /// ([`Stats::new_shared`]) to reach `/stats`, and what a job does there is not seen by
    /// the parent.
    pub forks: bool,
    /// Its listeners are bound by child processes, after `spawn` has returned (`prefork`):
    /// whoever needs them listening must wait for them.
    pub children_listen: bool,
    /// What `-A` means to it.
    pub accept_threads: AcceptThreads,
    /// It has a pool of worker threads for slow jobs (`-w`, `--queue-capacity`). Without one,
    /// a slow job runs on its connection's own thread or process.
    pub workers: bool,
}

/// What a model can do for a connection, which follows from how its connections wait for I/O
/// (the pump's `Waits`: [`Caps::BLOCKING`] or [`Caps::READINESS`]). Tests and fronts read
/// these instead of listing models.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Each connection has a thread (or process) of its own, blocked in its reads and writes
    /// with timeouts; else connections wait for readiness or completions in a loop.
    pub blocking: bool,
    /// An upgraded protocol may speak on its own, woken from another thread
    /// (`Upgraded::wake`): the ASGI WebSocket scope needs it. A blocking connection waits in
    /// `read`, so its protocol speaks only when spoken to.
    pub wakes_upgraded: bool,
    /// A handler that asks for it (`Handler::STREAMS_BODY`) gets the request body while it
    /// arrives (`Context::stream_bodies`); else it gets it whole.
    pub streams_bodies: bool,
    /// It serves many connections at once; else one at a time, the others waiting in the
    /// listen backlog (`single`).
    pub concurrent: bool,
    /// Once warm, a keep-alive connection's plain requests allocate nothing on the heap: its
    /// buffers come from its loop's pool and its answers are written in place (`evloop`,
    /// `uring`, and `prefork`'s loops; `tests/alloc.rs` counts it where the serving threads
    /// are in the test's own process).
    pub allocation_free: bool,
    /// It serves HTTP/3 (`quic://` listeners and `--http3`) from its loops; the others refuse
    /// both at startup, naming the models that serve them ([`Caps::http3_models`]).
    pub serves_http3: bool,
}

impl Caps {
    /// The models that serve HTTP/3, by name.
    pub fn http3_models() -> Vec<&'static str> {
        Model::ALL
            .iter()
            .filter(|m| m.caps().serves_http3)
            .map(|m| m.name())
            .collect()
    }

    /// A blocking socket per connection (`single`, `threaded`, `forked`).
    pub const BLOCKING: Caps = Caps {
        blocking: true,
        wakes_upgraded: false,
        streams_bodies: false,
        concurrent: true,
        allocation_free: false,
        serves_http3: false,
    };
    /// Non-blocking sockets an event loop or scheduler is told about (`evloop`, `prefork`,
    /// `actor`, `uring`).
    pub const READINESS: Caps = Caps {
        blocking: false,
        wakes_upgraded: true,
        streams_bodies: true,
        concurrent: true,
        allocation_free: false,
        serves_http3: false,
    };
}

/// What `-A` ([`Common::accept_threads`]) means to a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptThreads {
    /// Nothing: one thread accepts.
    Unused,
    /// Threads of the server, as many as CPU cores unless told otherwise (`evloop`'s accept
    /// threads, `actor`'s schedulers).
    PerServer,
    /// Threads in each of its processes, one unless told otherwise: the processes give the
    /// parallelism (`prefork`).
    PerProcess,
}

impl AcceptThreads {
    /// The number of accept threads when `-A` is not given, on a machine with `cores` cores.
    pub fn default_count(self, cores: usize) -> usize {
        match self {
            AcceptThreads::PerServer => cores,
            AcceptThreads::Unused | AcceptThreads::PerProcess => 1,
        }
    }
}

/// A command-line flag of one model, setting a positive number in its field of
/// [`ModelConfigs`] (`--max-threads N`). The flag documents itself: `berth serve --help` is
/// made from these fields.
#[derive(Debug, Clone, Copy)]
pub struct Flag {
    /// The long name, without dashes: `max-threads`.
    pub long: &'static str,
    /// The value's placeholder in help: `N`.
    pub value_name: &'static str,
    /// The help text, one paragraph, naming the model it applies to.
    pub help: &'static str,
    /// Reads the value (the default shown in help is read from `ModelConfigs::default()`).
    pub get: fn(&ModelConfigs) -> usize,
    /// Sets the value.
    pub set: fn(&mut ModelConfigs, NonZeroUsize),
}

/// A model's flag, for code that lists every model's flags ([`Model::flags`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlagInfo {
    /// The model it belongs to.
    pub model: Model,
    /// The long name, without dashes.
    pub long: &'static str,
    /// The value's placeholder in help.
    pub value_name: &'static str,
    /// The help text.
    pub help: &'static str,
    /// The model's default value.
    pub default: usize,
}

/// Generates the registry from its one list, `module::DriverType` per model (see the module
/// docs). The `($)` round passes a `$` token to the inner arm, for the macro it defines.
macro_rules! models {
    ($($module:ident :: $driver:ident),+ $(,)?) => {
        $crate::drive::registry::models!(@with ($) $($module::$driver),+);
    };
    (@with ($d:tt) $($module:ident :: $driver:ident),+) => {
        $(pub mod $module;)+

        /// The concurrency models berth runs, one per line of the registry (`drive/mod.rs`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Model {
            $(
                #[doc = concat!("The [`", stringify!($module), "`] model.")]
                $driver,
            )+
        }

        impl Model {
            /// Every model, in the registry's order (the order tables list them).
            pub const ALL: [Model; [$(stringify!($driver)),+].len()] = [$(Model::$driver),+];

            /// The registry's table: one row per model, in [`Model::ALL`]'s order.
            const TABLE: [$crate::drive::registry::Info; [$(stringify!($driver)),+].len()] =
                [$(<$module::$driver as $crate::drive::registry::Driver>::INFO),+];

            /// The model's row of the registry: its name, description, needs, capabilities,
            /// flags and shape.
            pub fn info(self) -> &'static $crate::drive::registry::Info {
                &Self::TABLE[self as usize]
            }

            /// Binds and starts this model as `settings` say: the registry's one `match`, the
            /// one place that needs the driver's type.
            fn spawn<S: Service>(
                self,
                settings: &$crate::drive::Settings,
                service: S,
                stats: std::sync::Arc<$crate::stats::Stats>,
            ) -> Result<(Server, $crate::net::Addr), $crate::net::BindError>
            where
                S::Handler: Send + 'static,
            {
                use $crate::drive::registry::Driver;
                match self {
                    $(Model::$driver => $module::$driver::spawn(
                        &settings.addr,
                        &settings.common,
                        &settings.models.$module,
                        service,
                        stats,
                    ),)+
                }
            }
        }

        /// Every model's own settings, one field per model named after its module. (The
        /// settings every model shares are [`Common`].)
        #[derive(Debug, Clone, Default)]
        pub struct ModelConfigs {
            $(
                #[doc = concat!("Settings of [`", stringify!($module), "`].")]
                pub $module: <$module::$driver as $crate::drive::registry::Driver>::Config,
            )+
        }

        /// Hands the model registry's list to a macro, for code that needs an item per model
        /// at compile time (the test suites: a test per case and model).
        ///
        /// `berth::with_models!(m! { ARGS })` expands to `m! { [module Variant, ...] ARGS }`:
        /// one `module Variant` pair per model, in the registry's order (`single Single,
        /// threaded Threaded, ...`), where `module` is the model's module under
        /// `berth::drive` and `Variant` its [`Model`](crate::drive::Model) variant.
        #[macro_export]
        macro_rules! with_models {
            ($d callback:ident ! { $d ($d args:tt)* }) => {
                $d callback! { [$($module $driver),+] $d ($d args)* }
            };
        }
    };
}
pub(crate) use models;

impl Model {
    /// The model `berth serve` runs unless told otherwise.
    pub const DEFAULT: Model = Model::Evloop;

    /// The model's name on the command line.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// One line on how it serves (`--model`'s values in `--help`).
    pub fn about(self) -> &'static str {
        self.info().about
    }

    /// What it asks of the rest of berth.
    pub fn needs(self) -> Needs {
        self.info().needs
    }

    /// What it can do for a connection.
    pub fn caps(self) -> Caps {
        self.info().caps
    }

    /// Whether its children are separate processes (their counters need shared memory).
    pub fn forks(self) -> bool {
        self.needs().forks
    }

    /// Its own command-line flags, with their defaults.
    pub fn flags(self) -> Vec<FlagInfo> {
        let defaults = ModelConfigs::default();
        self.info()
            .flags
            .iter()
            .map(|f| FlagInfo {
                model: self,
                long: f.long,
                value_name: f.value_name,
                help: f.help,
                default: (f.get)(&defaults),
            })
            .collect()
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
                let names: Vec<_> = Model::ALL.iter().map(|m| m.name()).collect();
                format!("unknown model '{s}' (one of: {})", names.join(", "))
            })
    }
}

impl ModelConfigs {
    /// Sets the flag `long` (a [`FlagInfo::long`] of some model) to `value`. Returns false if
    /// no model has that flag.
    pub fn set_flag(&mut self, long: &str, value: NonZeroUsize) -> bool {
        let flag = Model::ALL
            .iter()
            .flat_map(|m| m.info().flags)
            .find(|f| f.long == long);
        if let Some(flag) = flag {
            (flag.set)(self, value);
        }
        flag.is_some()
    }
}

/// Everything needed to start any model.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Which model.
    pub model: Model,
    /// Where to listen: a TCP address or a UNIX socket's path.
    pub addr: Addr,
    /// The settings every model shares: listening, accept threads, capacity, workers, limits,
    /// timeouts, buffer sizes.
    pub common: Common,
    /// Every model's own settings (only [`Settings::model`]'s are used).
    pub models: ModelConfigs,
}

impl Settings {
    /// Defaults for `model` on the TCP address `addr` (for a UNIX socket, set
    /// [`Settings::addr`] to an [`Addr::Unix`]).
    pub fn new(model: Model, addr: std::net::SocketAddr) -> Self {
        Settings {
            model,
            addr: addr.into(),
            common: Common::default(),
            models: ModelConfigs::default(),
        }
    }

    /// How many stats shards the model's threads count into.
    pub fn shards(&self) -> usize {
        (self.model.info().shards)(&self.common, &self.models)
    }

    /// How many listening sockets the model has once it is fully up.
    pub fn listeners(&self) -> usize {
        (self.model.info().listeners)(&self.common, &self.models)
    }

    /// The model's shape, as the startup line gives it after `model <name>, `.
    pub fn describe(&self) -> String {
        (self.model.info().describe)(&self.common, &self.models)
    }

    /// Counters fit for the model: in shared memory when children are processes, so their
    /// counts reach `/stats` wherever it is asked.
    pub fn new_stats(&self) -> std::io::Result<Arc<Stats>> {
        let shards = self.shards();
        Ok(Arc::new(if self.model.forks() {
            Stats::new_shared(shards)?
        } else {
            Stats::new(shards)
        }))
    }
}

/// Binds and starts the model `settings` names. Returns the server and the bound address.
/// (Handlers must be `Send`: in the `actor` model a connection moves between threads.)
///
/// A UNIX socket's file is removed when the server stops listening (a drain or a stop, in the
/// process that bound it), if it is still the file bound ([`SocketFile`]). A socket served
/// from [`ListenConfig::inherited`](crate::net::ListenConfig::inherited) is not this
/// process's to remove: whoever bound it does (a supervisor whose workers come and go).
pub fn serve<S: Service>(
    settings: &Settings,
    service: S,
    stats: Arc<Stats>,
) -> Result<(Server, Addr), BindError>
where
    S::Handler: Send + 'static,
{
    let (server, bound) = settings.model.spawn(settings, service, stats)?;
    if settings.common.listen.inherited.is_none() {
        remove_on_stop(&server.ctl, &bound);
    }
    Ok((server, bound))
}

/// Removes the file of a UNIX socket bound at `addr` once `ctl` is told to stop (what
/// [`serve`] and the embedded loop do), before the model's own hooks close its listeners:
/// while it still listens, nobody else can have taken the path ([`SocketFile::remove`]).
/// Nothing for TCP.
pub(crate) fn remove_on_stop(ctl: &crate::rt::Control, addr: &Addr) {
    if let Addr::Unix(path) = addr {
        match SocketFile::bound(path) {
            Ok(file) => ctl.on_stop_first(move |_| file.remove()),
            Err(e) => log::warn!("{addr}: the socket file will not be removed at exit: {e}"),
        }
    }
}

/// Binds one listener on `addr` (for [`Driver::spawn`]). Returns it and its address.
pub(crate) fn bind_one(addr: &Addr, common: &Common) -> Result<(Listener, Addr), BindError> {
    let (mut listeners, bound) = bind_each(addr, 1, common)?;
    Ok((listeners.remove(0), bound))
}

/// The [`Driver::spawn`] of a model served from one listener: binds it on `addr`, starts the
/// server on it with `start`, and names `addr` in a failure to start.
pub(crate) fn on_one_listener(
    addr: &Addr,
    common: &Common,
    start: impl FnOnce(Listener) -> std::io::Result<Server>,
) -> Result<(Server, Addr), BindError> {
    let (listener, bound) = bind_one(addr, common)?;
    let server = start(listener).map_err(bind_error(addr))?;
    Ok((server, bound))
}

/// Binds `count` listeners on `addr` (for [`Driver::spawn`]): TCP listeners sharing its port,
/// or copies of one UNIX socket ([`crate::net::bind`]). Returns them and their address.
pub(crate) fn bind_each(
    addr: &Addr,
    count: usize,
    common: &Common,
) -> Result<(Vec<Listener>, Addr), BindError> {
    let listeners = bind(addr, count, common.listen.clone())?;
    let bound = listeners[0].local_addr().map_err(bind_error(addr))?;
    Ok((listeners, bound))
}

/// Turns an I/O error of starting a server on `addr` into a [`BindError`].
pub(crate) fn bind_error(addr: &Addr) -> impl Fn(std::io::Error) -> BindError + '_ {
    move |source| BindError {
        addr: addr.clone(),
        source,
    }
}

/// The startup-line shape of a model that runs one loop per accept thread (`evloop`, `uring`):
/// `2 accept threads, 4 workers, capacity 10000 per thread`, the loop called `noun`.
pub(crate) fn describe_loops(noun: &str, common: &Common) -> String {
    format!(
        "{}, {}, capacity {} per thread",
        count(common.accept_threads, noun),
        count(common.workers, "worker"),
        common.sizing.capacity
    )
}

/// `1 worker`, `2 workers`.
pub(crate) fn count(n: usize, one: &str) -> String {
    count_as(n, one, &format!("{one}s"))
}

/// `1 process`, `2 processes`.
pub(crate) fn count_as(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_parse_back() {
        for (i, m) in Model::ALL.into_iter().enumerate() {
            assert_eq!(m.name().parse::<Model>(), Ok(m));
            assert_eq!(m.to_string(), m.name());
            assert!(!m.about().is_empty(), "{m}: no description");
            assert!(
                Model::ALL[..i].iter().all(|o| o.name() != m.name()),
                "{m}: listed twice"
            );
        }
        assert!(Model::ALL.contains(&Model::DEFAULT));
        // The table is read by the enum's discriminant.
        assert!(Model::ALL.iter().enumerate().all(|(i, &m)| m as usize == i));
        let err = "nope".parse::<Model>().unwrap_err();
        assert!(err.contains(Model::DEFAULT.name()), "{err}");
    }

    /// A flag is a positive number, set where `get` reads it, and named once in the whole
    /// registry (the CLI puts every model's flags side by side).
    #[test]
    fn flags_are_unique_and_set_what_they_read() {
        let mut seen = Vec::new();
        for m in Model::ALL {
            for flag in m.flags() {
                assert!(flag.default > 0, "--{}: default 0", flag.long);
                assert!(!seen.contains(&flag.long), "--{}: twice", flag.long);
                seen.push(flag.long);
                let mut configs = ModelConfigs::default();
                let value = NonZeroUsize::new(flag.default + 7).unwrap();
                assert!(configs.set_flag(flag.long, value));
                let f = m.info().flags.iter().find(|f| f.long == flag.long);
                assert_eq!((f.unwrap().get)(&configs), value.get(), "--{}", flag.long);
            }
        }
        assert!(!ModelConfigs::default().set_flag("no-such-flag", NonZeroUsize::MIN));
    }

    #[test]
    fn every_model_describes_itself_and_counts_into_shards() {
        for m in Model::ALL {
            let settings = Settings::new(m, "127.0.0.1:0".parse().unwrap());
            assert!(!settings.describe().is_empty(), "{m}");
            assert!(settings.shards() >= 1, "{m}");
            assert!(settings.listeners() >= 1, "{m}");
        }
    }
}
