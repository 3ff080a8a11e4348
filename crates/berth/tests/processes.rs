//! The process models' promises, checked in `/proc`: `forked` reaps every connection process
//! (no zombies) and a crashed child costs only its own connection; `prefork` replaces a child
//! killed with SIGKILL while a client that retries once sees no failed request; stopping either
//! server leaves no child process behind.
//!
//! The children are forks of this test process, so each test finds its server's children as
//! "our children that did not exist before it started". Tests here take [`LOCK`] so that no
//! other test's children are mistaken for theirs.

#[path = "support/server.rs"]
mod server;

use std::collections::HashSet;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use berth::drive::{Model, Settings};

use berth_testkit::procs::{children_of, exists, my_pid, proc_stat, Proc};
use server::{is_reset, listeners_on, wait_for, Client, ModelServer, Opts, WAIT_TIMEOUT};

/// Held by every test: each one owns all new children of the process while it runs.
static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Pids of this process's children now, zombies included.
fn child_pids() -> HashSet<i32> {
    children_of(my_pid()).iter().map(|p| p.pid).collect()
}

/// Children of this process that are not in `before`.
fn new_children(before: &HashSet<i32>) -> Vec<Proc> {
    children_of(my_pid())
        .into_iter()
        .filter(|p| !before.contains(&p.pid))
        .collect()
}

fn sigkill(pid: i32) {
    // SAFETY: kill has no memory-safety preconditions; `pid` is a child this test started.
    let rc = unsafe { libc::kill(pid, libc::SIGKILL) };
    assert_eq!(rc, 0, "kill -9 {pid}: {}", io::Error::last_os_error());
}

/// One GET on a fresh connection that asks the server to close it.
fn get_once(addr: SocketAddr, path: &str) -> io::Result<server::Response> {
    let stream = TcpStream::connect_timeout(&addr, server::IO_TIMEOUT)?;
    stream.set_read_timeout(Some(server::IO_TIMEOUT))?;
    stream.set_write_timeout(Some(server::IO_TIMEOUT))?;
    let mut c = Client::from_stream(stream);
    c.stream.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes(),
    )?;
    c.try_read_response(false)
}

/// Whether a failed attempt is the kind a dying process causes: refused, reset, or closed
/// before the response.
fn retriable(e: &io::Error) -> bool {
    is_reset(e)
        || matches!(
            e.kind(),
            io::ErrorKind::ConnectionRefused | io::ErrorKind::UnexpectedEof
        )
}

/// [`get_once`], retried once if the first attempt was refused or reset.
fn get_retrying_once(addr: SocketAddr, path: &str) -> io::Result<server::Response> {
    match get_once(addr, path) {
        Err(e) if retriable(&e) => get_once(addr, path),
        other => other,
    }
}

/// Waits (bounded) until none of `before`'s complement is left among our children, zombies
/// included; panics with what is left.
fn assert_no_new_children(before: &HashSet<i32>, what: &str) {
    let mut left = Vec::new();
    let gone = wait_for(WAIT_TIMEOUT, || {
        left = new_children(before);
        left.is_empty()
    });
    assert!(
        gone,
        "{what}: children left after {WAIT_TIMEOUT:?}: {left:?}"
    );
}

#[test]
fn forked_200_sequential_connections_leave_no_zombie() {
    let _g = lock();
    let before = child_pids();
    let srv = ModelServer::start(Model::Forked);
    let mut most_zombies = 0;
    for i in 0..200 {
        let r = get_once(srv.addr, "/hello/world").unwrap_or_else(|e| panic!("request {i}: {e}"));
        assert_eq!(r.status, 200, "request {i}");
        if i % 20 == 0 {
            let zombies = new_children(&before)
                .iter()
                .filter(|p| p.state == 'Z')
                .count();
            most_zombies = most_zombies.max(zombies);
        }
    }
    // Every connection process exits once its client is done, and is reaped.
    let mut left = Vec::new();
    let clean = wait_for(WAIT_TIMEOUT, || {
        left = new_children(&before);
        left.is_empty()
    });
    let zombies: Vec<_> = left.iter().filter(|p| p.state == 'Z').collect();
    assert!(
        clean,
        "after 200 connections: {} zombie(s) {zombies:?}, {} child(ren) in all: {left:?}",
        zombies.len(),
        left.len()
    );
    let s = srv.wait_stats("every connection closed", |s| s.connections_open == 0);
    assert_eq!((s.connections_total, s.requests), (200, 200), "{s:?}");
    eprintln!("forked: at most {most_zombies} unreaped child(ren) seen during the run");
    drop(srv);
    assert_no_new_children(&before, "forked after shutdown");
}

#[test]
fn forked_child_killed_takes_down_only_its_connection() {
    let _g = lock();
    let before = child_pids();
    let srv = ModelServer::start(Model::Forked);
    let mut victim_conn = srv.client();
    assert_eq!(victim_conn.get("/hello/world").status, 200);
    let victim = {
        let kids = new_children(&before);
        assert_eq!(kids.len(), 1, "one connection, one process: {kids:?}");
        kids[0].pid
    };
    let mut other = srv.client();
    assert_eq!(other.get("/hello/world").status, 200);
    sigkill(victim);
    // The killed process's connection ends ...
    let rest = victim_conn.read_to_close();
    assert!(
        rest.is_ok(),
        "the killed child's connection stays open: {rest:?}"
    );
    // ... the other connection and the server go on ...
    assert_eq!(other.get("/hello/world").status, 200);
    assert_eq!(get_once(srv.addr, "/").unwrap().status, 200);
    // ... and the dead child is reaped.
    let reaped = wait_for(WAIT_TIMEOUT, || !exists(victim));
    assert!(reaped, "killed child not reaped: {:?}", proc_stat(victim));
    drop(other);
    srv.wait_stats("every connection closed", |s| s.connections_open == 0);
    drop(srv);
    assert_no_new_children(&before, "forked after shutdown");
}

#[test]
fn forked_shutdown_leaves_no_child_behind() {
    let _g = lock();
    let before = child_pids();
    let srv = ModelServer::start(Model::Forked);
    // Three idle keep-alive connections, each held by a live child.
    let mut held: Vec<Client> = (0..3).map(|_| srv.client()).collect();
    for c in &mut held {
        assert_eq!(c.get("/hello/world").status, 200);
    }
    assert_eq!(new_children(&before).len(), 3);
    // The open connections' idle timeout is 60 s, more than the deadline: a shutdown that
    // waited for them fails.
    stop_within_deadline(srv);
    assert_no_new_children(&before, "forked after shutdown");
    for c in &mut held {
        assert!(
            c.read_to_close().is_ok(),
            "a connection outlived the server"
        );
    }
}

#[test]
fn prefork_child_killed_is_replaced_and_no_request_fails() {
    let _g = lock();
    let before = child_pids();
    let srv = Opts::new(Model::Prefork).processes(2).start();
    let port = srv.addr.port();
    let kids: Vec<i32> = new_children(&before).iter().map(|p| p.pid).collect();
    assert_eq!(kids.len(), 2, "two worker processes: {kids:?}");
    let victim = kids[0];
    sigkill(victim);
    let killed_at = Instant::now();
    // A client that retries once on a refused or reset connection never fails.
    let (mut served, mut retried_ok, mut failures) = (0, 0, Vec::new());
    while killed_at.elapsed() < Duration::from_secs(2) {
        match get_once(srv.addr, "/hello/world") {
            Ok(r) if r.status == 200 => served += 1,
            Ok(r) => failures.push(format!("status {}", r.status)),
            Err(e) if retriable(&e) => match get_retrying_once(srv.addr, "/hello/world") {
                Ok(r) if r.status == 200 => retried_ok += 1,
                Ok(r) => failures.push(format!("after a retry: status {}", r.status)),
                Err(e) => failures.push(format!("after a retry: {e}")),
            },
            Err(e) => failures.push(e.to_string()),
        }
    }
    assert!(
        failures.is_empty(),
        "{} failed request(s) ({served} served, {retried_ok} after a retry): {failures:?}",
        failures.len()
    );
    assert!(served > 0, "nothing served in 2 s");
    // The dead child was reaped and replaced: two live workers, two listeners again.
    let mut live = Vec::new();
    let replaced = wait_for(WAIT_TIMEOUT, || {
        live = new_children(&before)
            .into_iter()
            .filter(|p| p.state != 'Z')
            .collect();
        !exists(victim) && live.len() == 2 && listeners_on(port) == 2
    });
    assert!(
        replaced,
        "no replacement: victim {victim} {:?}, live children {live:?}, {} listener(s)",
        proc_stat(victim),
        listeners_on(port)
    );
    assert!(
        live.iter().any(|p| !kids.contains(&p.pid)),
        "no new pid among {live:?}"
    );
    eprintln!(
        "prefork: {served} served, {retried_ok} after one retry; replacement after {:?}",
        killed_at.elapsed()
    );
    // The replacement serves too: with both listeners up, enough requests reach both.
    for _ in 0..20 {
        assert_eq!(get_retrying_once(srv.addr, "/").unwrap().status, 200);
    }
    drop(srv);
    assert_no_new_children(&before, "prefork after shutdown");
    assert_eq!(listeners_on(port), 0, "a listener outlived the server");
}

#[test]
fn prefork_shutdown_leaves_no_child_behind() {
    let _g = lock();
    let before = child_pids();
    let srv = Opts::new(Model::Prefork).processes(3).start();
    let port = srv.addr.port();
    assert_eq!(new_children(&before).len(), 3);
    let mut c = srv.client();
    assert_eq!(c.get("/").status, 200);
    // The open connections' idle timeout is 60 s, more than the deadline: a shutdown that
    // waited for them fails.
    stop_within_deadline(srv);
    assert_no_new_children(&before, "prefork after shutdown");
    assert_eq!(listeners_on(port), 0, "a listener outlived the server");
    assert!(
        c.read_to_close().is_ok(),
        "a connection outlived the server"
    );
}

/// Found while reviewing issue 13: prefork reported itself started once its workers were
/// forked, not once they listened, so a client connecting at once could be refused (the
/// harness hides it by waiting; `berth serve` prints its startup line at once). Now `serve`
/// returns only when every worker has said it takes connections.
#[test]
fn prefork_is_started_only_when_every_worker_listens() {
    use berth::app::{Demo, DemoConfig};
    let _g = lock();
    for _ in 0..5 {
        let mut settings = Settings::new(Model::Prefork, "127.0.0.1:0".parse().unwrap());
        settings.models.prefork.processes = 6;
        let stats = settings.new_stats().unwrap();
        let demo = Demo::new(DemoConfig::default(), stats.clone());
        let (server, addr) = berth::drive::serve(&settings, demo, stats).unwrap();
        let addr = addr.tcp().expect("served on TCP");
        // No waiting here: this is what a client sees the moment the server says it is up.
        assert_eq!(listeners_on(addr.port()), 6, "every worker listens");
        let r = get_once(addr, "/hello/world").expect("refused right after start");
        assert_eq!(r.status, 200);
        server.shutdown();
        server.join();
    }
}

/// Stops `srv` (dropping it) on another thread; fails if that takes longer than the deadline.
fn stop_within_deadline(srv: ModelServer) {
    let (done, stopped) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(srv);
        let _ = done.send(());
    });
    stopped
        .recv_timeout(berth_testkit::LIMIT)
        .expect("the shutdown waited for the open connections");
}
