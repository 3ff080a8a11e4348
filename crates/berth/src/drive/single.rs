//! `single`: one thread accepts and serves one connection at a time (seed 000's `-type s`,
//! seed 004's "dumb server"). Keep-alive is honoured while no one else is waiting: between two
//! requests, a connection is let go as soon as another client is queued on the listener, so an
//! idle keep-alive client cannot hold the only thread.

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
                while let Some(stream) = blocking::accept(&listener, &ctl, || {}) {
                    shard.connection_opened();
                    let key = active.insert(&stream);
                    let others_waiting = || ctl.stopping() || has_pending_input(&listener);
                    let serving = blocking::Serving {
                        handler: &mut handler,
                        files: &files,
                        date: &mut date,
                        stats: &stats,
                        going: &|| ctl.stopping(),
                    };
                    if let Err(e) = blocking::serve_connection(
                        stream,
                        &transport,
                        serving,
                        &config,
                        others_waiting,
                        Some(&listener),
                    ) {
                        log::debug!("connection ended with an error: {e}");
                    }
                    if let Some(key) = key {
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
