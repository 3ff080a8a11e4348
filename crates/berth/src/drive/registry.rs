//! The model registry: what a model is ([`Driver`]), the one list of models (the `models!`
//! invocation in `drive/mod.rs`), and what is made from that list — the [`Model`] enum, every
//! model's own settings side by side ([`ModelConfigs`]), starting the model [`Settings`] name
//! ([`serve`]), and the list handed to compile-time users such as the conformance suite
//! ([`with_models!`](crate::with_models)). The CLI's `--model` values and their help, the
//! model-specific flags, the startup line and the test support all read the registry, so none
//! of them names a model.
//!
//! ```text
//!   drive/mod.rs: models! { single::Single, threaded::Threaded, ... }
//!        │ generates
//!        ├─ pub mod single; pub mod threaded; ...
//!        ├─ enum Model { Single, Threaded, ... }   + Model::ALL
//!        ├─ struct ModelConfigs { single: (), threaded: threaded::Config, ... }
//!        ├─ the one `match` from a Model to its driver type (Model::visit)
//!        └─ with_models!  (the list, for macros in other crates)
//!   everything else (name, help, flags, stats shards, startup line, spawn) is written once,
//!   here, generically over `D: Driver`
//! ```
//!
//! Dispatch is static: [`serve`] matches once, at startup, and calls the model's
//! `Driver::spawn::<S>`, monomorphised for the service; nothing per connection or per request
//! goes through the registry.
//!
//! # Adding a model
//!
//! 1. Write its module, `drive/<name>.rs` (or `drive/<name>/mod.rs`): its `spawn`, its own
//!    `Config` (with `Default`), and a unit struct implementing [`Driver`] — name, one-line
//!    description, [`Needs`], its flags ([`Flag`]), stats shards, startup-line shape, and
//!    `spawn` from [`Common`] plus its `Config`.
//! 2. Add one line, `<name>::<Type>,`, to the `models!` list in `drive/mod.rs`.
//!
//! Nothing else: `berth serve --model <name>` and its flags, `--help`, the startup line, `berth
//! lab`, the test support (`tests/support/server.rs`) and a test per conformance case
//! (`tests/conformance.rs`) follow from the list. The suite then runs every case against the
//! new model; one it cannot support by design is declared, with the reason, in that suite's
//! `UNSUPPORTED` table (as `single` declares it has no capacity to refuse at).

use std::fmt;
use std::net::{SocketAddr, TcpListener};
use std::num::NonZeroUsize;
use std::sync::Arc;

use super::{Common, Model, ModelConfigs, Server, Service};
use crate::net::{bind_tcp, BindError};
use crate::stats::Stats;

/// A concurrency model, as the registry knows it: implemented by a unit struct in the model's
/// module (`threaded::Threaded`) and listed once in `drive/mod.rs`.
pub trait Driver {
    /// Its name on the command line (`--model`), in the startup line and in the lab.
    const NAME: &'static str;
    /// One line for `--model`'s list of values in `--help`.
    const ABOUT: &'static str;
    /// What it asks of the rest of berth.
    const NEEDS: Needs;
    /// Its own settings (the shared ones are [`Common`]).
    type Config: fmt::Debug + Clone + Default + Send + Sync + 'static;
    /// Its own command-line flags, which set fields of [`Driver::Config`]. `berth serve`
    /// shows them after `-w`, in registry order, with the default read from
    /// `Config::default()`.
    const FLAGS: &'static [Flag<Self::Config>] = &[];

    /// How many stats shards its threads count into (see [`Stats::new`]).
    fn shards(common: &Common, config: &Self::Config) -> usize;

    /// How many listening sockets it has once it is fully up.
    fn listeners(common: &Common, config: &Self::Config) -> usize {
        let _ = (common, config);
        1
    }

    /// Its shape for the startup line, after `model <name>, `: e.g. `a thread per connection,
    /// at most 1024`.
    fn describe(common: &Common, config: &Self::Config) -> String;

    /// Binds `addr` as [`Common::listen`] says and starts serving. Returns the server and the
    /// bound address. (Handlers must be `Send`: in the `actor` model a connection moves between
    /// threads.)
    fn spawn<S: Service>(
        addr: SocketAddr,
        common: &Common,
        config: &Self::Config,
        service: S,
        stats: Arc<Stats>,
    ) -> Result<(Server, SocketAddr), BindError>
    where
        S::Handler: Send + 'static;
}

/// What a model asks of the rest of berth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needs {
    /// Its connections are served in child processes: its counters must live in shared memory
    /// ([`Stats::new_shared`]) to reach `/stats`.
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

/// A command-line flag of one model, setting a positive number in its `Config`
/// (`--max-threads N`). The flag documents itself: `berth serve --help` is made from these
/// fields.
pub struct Flag<C> {
    /// The long name, without dashes: `max-threads`.
    pub long: &'static str,
    /// The value's placeholder in help: `N`.
    pub value_name: &'static str,
    /// The help text, one paragraph, naming the model it applies to.
    pub help: &'static str,
    /// Reads the value (the default shown in help is read from `C::default()`).
    pub get: fn(&C) -> usize,
    /// Sets the value.
    pub set: fn(&mut C, NonZeroUsize),
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

/// A driver the registry lists: where its settings sit in [`ModelConfigs`]. Implemented by
/// the `models!` list only.
pub(crate) trait Registered: Driver {
    fn config(configs: &ModelConfigs) -> &Self::Config;
    fn config_mut(configs: &mut ModelConfigs) -> &mut Self::Config;
}

/// Something done with the driver type a [`Model`] names ([`Model::visit`]): how code outside
/// the `models!` list is written generically over every model.
pub(crate) trait Visit {
    type Output;
    fn visit<D: Registered>(self) -> Self::Output;
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

            /// Calls `v` with the driver type this model names: the registry's one `match`.
            pub(crate) fn visit<V: $crate::drive::registry::Visit>(self, v: V) -> V::Output {
                match self {
                    $(Model::$driver => v.visit::<$module::$driver>(),)+
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

        $(
            impl $crate::drive::registry::Registered for $module::$driver {
                fn config(configs: &ModelConfigs) -> &Self::Config {
                    &configs.$module
                }
                fn config_mut(configs: &mut ModelConfigs) -> &mut Self::Config {
                    &mut configs.$module
                }
            }
        )+

        /// Hands the model registry's list to a macro, for code that needs an item per model
        /// at compile time (the conformance suite: a test per case and model).
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
        struct Name;
        impl Visit for Name {
            type Output = &'static str;
            fn visit<D: Registered>(self) -> &'static str {
                D::NAME
            }
        }
        self.visit(Name)
    }

    /// One line on how it serves (`--model`'s values in `--help`).
    pub fn about(self) -> &'static str {
        struct About;
        impl Visit for About {
            type Output = &'static str;
            fn visit<D: Registered>(self) -> &'static str {
                D::ABOUT
            }
        }
        self.visit(About)
    }

    /// What it asks of the rest of berth.
    pub fn needs(self) -> Needs {
        struct Get;
        impl Visit for Get {
            type Output = Needs;
            fn visit<D: Registered>(self) -> Needs {
                D::NEEDS
            }
        }
        self.visit(Get)
    }

    /// Whether its children are separate processes (their counters need shared memory).
    pub fn forks(self) -> bool {
        self.needs().forks
    }

    /// Its own command-line flags, with their defaults.
    pub fn flags(self) -> Vec<FlagInfo> {
        struct Flags(Model);
        impl Visit for Flags {
            type Output = Vec<FlagInfo>;
            fn visit<D: Registered>(self) -> Vec<FlagInfo> {
                let defaults = D::Config::default();
                D::FLAGS
                    .iter()
                    .map(|f| FlagInfo {
                        model: self.0,
                        long: f.long,
                        value_name: f.value_name,
                        help: f.help,
                        default: (f.get)(&defaults),
                    })
                    .collect()
            }
        }
        self.visit(Flags(self))
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
        struct Set<'a> {
            configs: &'a mut ModelConfigs,
            long: &'a str,
            value: NonZeroUsize,
        }
        impl Visit for Set<'_> {
            type Output = bool;
            fn visit<D: Registered>(self) -> bool {
                match D::FLAGS.iter().find(|f| f.long == self.long) {
                    Some(flag) => {
                        (flag.set)(D::config_mut(self.configs), self.value);
                        true
                    }
                    None => false,
                }
            }
        }
        Model::ALL.into_iter().any(|m| {
            m.visit(Set {
                configs: self,
                long,
                value,
            })
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
    /// The settings every model shares: listening, accept threads, capacity, workers, limits,
    /// timeouts, buffer sizes.
    pub common: Common,
    /// Every model's own settings (only [`Settings::model`]'s are used).
    pub models: ModelConfigs,
}

impl Settings {
    /// Defaults for `model` on `addr`.
    pub fn new(model: Model, addr: SocketAddr) -> Self {
        Settings {
            model,
            addr,
            common: Common::default(),
            models: ModelConfigs::default(),
        }
    }

    /// How many stats shards the model's threads count into.
    pub fn shards(&self) -> usize {
        struct Shards<'a>(&'a Settings);
        impl Visit for Shards<'_> {
            type Output = usize;
            fn visit<D: Registered>(self) -> usize {
                D::shards(&self.0.common, D::config(&self.0.models))
            }
        }
        self.model.visit(Shards(self))
    }

    /// How many listening sockets the model has once it is fully up.
    pub fn listeners(&self) -> usize {
        struct Listeners<'a>(&'a Settings);
        impl Visit for Listeners<'_> {
            type Output = usize;
            fn visit<D: Registered>(self) -> usize {
                D::listeners(&self.0.common, D::config(&self.0.models))
            }
        }
        self.model.visit(Listeners(self))
    }

    /// The model's shape, as the startup line gives it after `model <name>, `.
    pub fn describe(&self) -> String {
        struct Describe<'a>(&'a Settings);
        impl Visit for Describe<'_> {
            type Output = String;
            fn visit<D: Registered>(self) -> String {
                D::describe(&self.0.common, D::config(&self.0.models))
            }
        }
        self.model.visit(Describe(self))
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
pub fn serve<S: Service>(
    settings: &Settings,
    service: S,
    stats: Arc<Stats>,
) -> Result<(Server, SocketAddr), BindError>
where
    S::Handler: Send + 'static,
{
    struct Spawn<'a, S> {
        settings: &'a Settings,
        service: S,
        stats: Arc<Stats>,
    }
    impl<S: Service> Visit for Spawn<'_, S>
    where
        S::Handler: Send + 'static,
    {
        type Output = Result<(Server, SocketAddr), BindError>;
        fn visit<D: Registered>(self) -> Self::Output {
            let s = self.settings;
            D::spawn(
                s.addr,
                &s.common,
                D::config(&s.models),
                self.service,
                self.stats,
            )
        }
    }
    settings.model.visit(Spawn {
        settings,
        service,
        stats,
    })
}

/// Binds one listener on `addr` (for [`Driver::spawn`]). Returns it and its address.
pub(crate) fn bind_one(
    addr: SocketAddr,
    common: &Common,
) -> Result<(TcpListener, SocketAddr), BindError> {
    let (mut listeners, bound) = bind_each(addr, 1, common)?;
    Ok((listeners.remove(0), bound))
}

/// The [`Driver::spawn`] of a model served from one listener: binds it on `addr`, starts the
/// server on it with `start`, and names `addr` in a failure to start.
pub(crate) fn on_one_listener(
    addr: SocketAddr,
    common: &Common,
    start: impl FnOnce(TcpListener) -> std::io::Result<Server>,
) -> Result<(Server, SocketAddr), BindError> {
    let (listener, bound) = bind_one(addr, common)?;
    let server = start(listener).map_err(bind_error(addr))?;
    Ok((server, bound))
}

/// Binds `count` listeners sharing `addr`'s port (for [`Driver::spawn`]). Returns them and
/// their address.
pub(crate) fn bind_each(
    addr: SocketAddr,
    count: usize,
    common: &Common,
) -> Result<(Vec<TcpListener>, SocketAddr), BindError> {
    let listeners = bind_tcp(addr, count, common.listen.clone())?;
    let bound = listeners[0].local_addr().map_err(bind_error(addr))?;
    Ok((listeners, bound))
}

/// Turns an I/O error of starting a server on `addr` into a [`BindError`].
pub(crate) fn bind_error(addr: SocketAddr) -> impl Fn(std::io::Error) -> BindError {
    move |source| BindError { addr, source }
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
                // Read back through the model's own `get`.
                struct Get<'a>(&'a ModelConfigs, &'a str);
                impl Visit for Get<'_> {
                    type Output = usize;
                    fn visit<D: Registered>(self) -> usize {
                        let f = D::FLAGS.iter().find(|f| f.long == self.1).unwrap();
                        (f.get)(D::config(self.0))
                    }
                }
                assert_eq!(
                    m.visit(Get(&configs, flag.long)),
                    value.get(),
                    "--{}",
                    flag.long
                );
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
