//! `single`: one thread accepts and serves one connection at a time (seed 000's `-type s`,
//! seed 004's "dumb server"). Keep-alive is honoured while no one else is waiting: between two
//! requests, a connection is let go as soon as another client is queued on the listener, so an
//! idle keep-alive client cannot hold the only thread. A connection whose client has said
//! nothing yet (past its TLS handshake) is set aside instead for the client who came after it
//! (`blocking::Parked`), as if it were still in the accept queue, and served once it speaks.

use std::io;

use std::sync::Arc;

use super::blocking::{self, has_pending_input, Active, ConnConfig};
use crate::rt::DateCache;
use super::{Server, Service};
use crate::net::{Acceptor, Listener};
use crate::rt::Control;
use crate::stats::Stats;

/// Serves `listener` on one thread, its connections over `transport`. Returns once the thread
/// runs.
pub fn spawn<S: Service>(
    listener: Listener,
    transport: Acceptor,
    service: S,
    config: ConnConfig,
    stats: Arc<Stats>,
) -> io::Result<Server> {
    let ctl = Arc::new(Control::default());
    let active = Arc::new(Active::default());
    let listener_handle = listener.try_clone().ok();
    let thread = {
        let (ctl, active) = (ctl.clone(), active.clone());
        std::thread::Builder::new()
            .name("berth-single".into())
            .spawn(move || {
                let mut handler = service.handler(0);
                let files = service.files();
                let mut date = DateCache::default();
                let shard = stats.shard(0);
                // The connection set aside before its client spoke (see `Parked`), and its
                // key among the active ones.
                let mut parking = None;
                let mut parked_key = None;
                loop {
                    // The one set aside comes first once it speaks, or when no one else waits;
                    // else the next client.
                    let resumed = match parking.take() {
                        Some(p) if blocking::Parked::spoke(&p) || !has_pending_input(&listener) => {
                            Some(p)
                        }
                        other => {
                            parking = other;
                            None
                        }
                    };
                    let (stream, key) = match resumed {
                        Some(p) => (Either::Resumed(p), parked_key.take()),
                        None => {
                            let Some(stream) = blocking::accept(&listener, &ctl, || {}) else {
                                break;
                            };
                            shard.connection_opened();
                            let key = active.insert(&stream);
                            (Either::New(stream), key)
                        }
                    };
                    let others_waiting = || ctl.stopping() || has_pending_input(&listener);
                    let serving = blocking::Serving {
                        handler: &mut handler,
                        files: &files,
                        date: &mut date,
                        stats: &stats,
                        going: &|| ctl.stopping(),
                    };
                    let was_empty = parking.is_none();
                    let served = match stream {
                        Either::New(stream) => blocking::serve_connection(
                            stream,
                            &transport,
                            serving,
                            &config,
                            others_waiting,
                            Some(&listener),
                            Some(&mut parking),
                        ),
                        Either::Resumed(p) => p.resume(
                            serving,
                            &config,
                            others_waiting,
                            Some(&listener),
                            &mut parking,
                        ),
                    };
                    if let Err(e) = served {
                        log::debug!("connection ended with an error: {e}");
                    }
                    if was_empty && parking.is_some() {
                        // Set aside, not closed: it stays among the active ones.
                        parked_key = key;
                        continue;
                    }
                    if let Some(key) = key {
                        active.remove(key);
                    }
                    shard.connection_closed();
                }
                // Stopping: the one set aside is closed with the rest.
                if parking.take().is_some() {
                    if let Some(key) = parked_key {
                        active.remove(key);
                    }
                    shard.connection_closed();
                }
            })?
    };
    let server = Server::new(ctl, vec![thread]);
    server.ctl.on_stop(move |kind| {
        if let Some(l) = &listener_handle {
            blocking::stop_listening(l);
        }
        active.shutdown_all(kind)
    });
    Ok(server)
}

/// A connection to serve: a new one, or the one set aside.
enum Either<S, P> {
    New(S),
    Resumed(P),
}

/// The `single` model in the registry.
pub struct Single;

impl super::Driver for Single {
    const INFO: super::Info = super::Info {
        name: "single",
        about: "One thread, one connection at a time",
        needs: super::Needs {
            forks: false,
            children_listen: false,
            accept_threads: super::AcceptThreads::Unused,
            workers: false,
        },
        caps: super::Caps {
            concurrent: false,
            ..super::Caps::BLOCKING
        },
        flags: &[],
        shards: |_, _| 1,
        listeners: super::registry::one_listener,
        describe: |_, _| "one connection at a time".to_owned(),
    };
    type Config = ();

    fn spawn<S: Service>(
        addr: &crate::net::Addr,
        common: &super::Common,
        _: &(),
        service: S,
        stats: Arc<Stats>,
    ) -> Result<(Server, crate::net::Addr), crate::net::BindError> {
        super::registry::on_one_listener(addr, common, |listener| {
            let transport = common.listen.transport.clone();
            spawn(listener, transport, service, common.conn(), stats)
        })
    }
}
