//! `berth msg serve --cluster nats://...` (issue 21): named clients across nodes through a real
//! nats-server (v2.15.2, JetStream on, started here on 127.0.0.1). alice on node A reaches bob
//! on node B, in order; a second bob anywhere is refused; a node killed with SIGKILL frees its
//! names within the lease, one stopped with SIGTERM at once; NATS restarted, the nodes
//! reconnect and relays resume; a NATS out of reach is a startup error.
//!
//! nats-server is found through `BERTH_NATS_SERVER`, on PATH, or in `$(go env GOPATH)/bin`
//! (`scripts/test` and `.ci/run` install it with `go install`). Every child is stopped by its
//! guard; every wait is bounded.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use berth_testkit::msg::{frame, read_frame_raw};
use common::{free_port, run_within, Berth};

const LIMIT: Duration = Duration::from_secs(30);

fn nats_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("BERTH_NATS_SERVER") {
        return PathBuf::from(p);
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("nats-server"))
        .find(|p| p.exists());
    let gopath = std::env::var_os("GOPATH")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join("go")))
        .map(|g| g.join("bin").join("nats-server"));
    on_path
        .or(gopath.filter(|p| p.exists()))
        .expect("nats-server not found: scripts/test installs it (go install github.com/nats-io/nats-server/v2@v2.15.2), or set BERTH_NATS_SERVER")
}

/// A nats-server with JetStream, on 127.0.0.1, killed when dropped.
struct Nats {
    child: Child,
    port: u16,
    store: PathBuf,
}

impl Nats {
    fn start(tag: &str) -> Nats {
        let store = std::env::temp_dir().join(format!("berth-nats-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&store);
        Nats::start_at(free_port(), store)
    }

    fn start_at(port: u16, store: PathBuf) -> Nats {
        let child = Command::new(nats_binary())
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(&store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts");
        let deadline = Instant::now() + LIMIT;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "nats-server did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        Nats { child, port, store }
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Stops it (SIGKILL) and starts it again on the same port and store.
    fn restart(mut self) -> Nats {
        let (port, store) = (self.port, self.store.clone());
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::mem::forget(self);
        Nats::start_at(port, store)
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

/// A berth node of the cluster: `msg serve` on a TCP port of its own.
struct Node {
    berth: Berth,
    addr: SocketAddr,
}

impl Node {
    fn start(nats: &Nats, lease: &str) -> Node {
        let mut berth = Berth::spawn(&[
            "msg",
            "serve",
            "--listen",
            "tcp://127.0.0.1:0",
            "--cluster",
            &nats.url(),
            "--cluster-lease",
            lease,
        ]);
        let line = berth.line();
        let addr = line
            .trim()
            .strip_prefix("berth msg listening on tcp://")
            .unwrap_or_else(|| panic!("startup line: {line:?}"))
            .parse()
            .unwrap();
        Node { berth, addr }
    }
}

/// A client named `name`: `Ok` once admitted, `Err` with the refusal's text.
fn client(addr: SocketAddr, name: &str) -> Result<TcpStream, String> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    s.write_all(&frame(name.as_bytes())).unwrap();
    match read_frame_raw(&mut s) {
        (2, ok) if ok == b"OK" => Ok(s),
        (_, text) => Err(String::from_utf8_lossy(&text).into_owned()),
    }
}

/// Sends `@to text` from `from` until it is relayed (the relay answers `@! no client named`
/// while `to` is not yet known here), then returns.
fn relay_when_known(from: &mut TcpStream, to: &str, text: &str) {
    let deadline = Instant::now() + LIMIT;
    loop {
        from.write_all(&frame(format!("@{to} {text}").as_bytes()))
            .unwrap();
        // A relay is not answered; an unknown name is. An echo of an empty message says the
        // relay went through without waiting out a timeout.
        from.write_all(&frame(b"")).unwrap();
        let (_, answer) = read_frame_raw(from);
        if answer.is_empty() {
            return;
        }
        let answer = String::from_utf8_lossy(&answer).into_owned();
        assert!(answer.starts_with("@! no client named"), "{answer}");
        let (_, echo) = read_frame_raw(from);
        assert!(echo.is_empty());
        assert!(Instant::now() < deadline, "{to} never became known");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn alice_on_one_node_reaches_bob_on_another_in_order_and_a_second_bob_is_refused() {
    let nats = Nats::start("relay");
    let (a, b) = (Node::start(&nats, "10"), Node::start(&nats, "10"));
    let mut bob = client(b.addr, "bob").unwrap();
    let mut alice = client(a.addr, "alice").unwrap();
    relay_when_known(&mut alice, "bob", "first");
    assert_eq!(read_frame_raw(&mut bob).1, b"@alice first");
    // Ordering per sender and receiver, as within a node.
    for i in 0..500 {
        alice
            .write_all(&frame(format!("@bob {i}").as_bytes()))
            .unwrap();
    }
    for i in 0..500 {
        assert_eq!(read_frame_raw(&mut bob).1, format!("@alice {i}").as_bytes());
    }
    // And back; 64 KiB crosses whole.
    let big = vec![b'x'; 64 * 1024];
    let mut msg = b"@alice ".to_vec();
    msg.extend_from_slice(&big);
    bob.write_all(&frame(&msg)).unwrap();
    let (_, got) = read_frame_raw(&mut alice);
    assert_eq!(&got[..5], b"@bob ");
    assert!(got[5..] == big[..]);
    // One live bob in the whole cluster: refused on node A (the replica knows him) as on B.
    for node in [&a, &b] {
        let refused = client(node.addr, "bob").unwrap_err();
        assert!(refused.contains("name-taken"), "{refused}");
    }
    // bob leaves: his name is free on every node at once.
    drop(bob);
    let deadline = Instant::now() + LIMIT;
    let mut bob2 = loop {
        match client(a.addr, "bob") {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("bob's name was not freed: {e}"),
        }
    };
    bob2.write_all(&frame(b"@alice local now")).unwrap();
    assert_eq!(read_frame_raw(&mut alice).1, b"@bob local now");
}

#[test]
fn a_killed_node_frees_its_names_within_the_lease_and_a_stopped_one_at_once() {
    let nats = Nats::start("lease");
    let a = Node::start(&nats, "2");
    let b = Node::start(&nats, "2");
    let _bob = client(b.addr, "bob").unwrap();
    let mut alice = client(a.addr, "alice").unwrap();
    relay_when_known(&mut alice, "bob", "hello");
    b.berth.signal("KILL");
    let killed = Instant::now();
    // Held while the lease runs...
    let refused = client(a.addr, "bob").unwrap_err();
    assert!(refused.contains("name-taken"), "{refused}");
    // ...and free once it has run out (2 s, renewed every third of it); a name never freed
    // fails at the test's deadline.
    let mut bob = loop {
        match client(a.addr, "bob") {
            Ok(s) => break s,
            Err(_) => {
                assert!(
                    killed.elapsed() < LIMIT,
                    "bob's name still held {:?} after his node died",
                    killed.elapsed()
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    assert!(killed.elapsed() >= Duration::from_millis(500));
    bob.write_all(&frame(b"@alice back")).unwrap();
    assert_eq!(read_frame_raw(&mut alice).1, b"@bob back");

    // A node stopped gracefully (SIGTERM) releases its names as it goes: its lease is an hour,
    // so only the release can free the name within the test's deadline.
    let mut c = Node::start(&nats, "3600");
    let _carol = client(c.addr, "carol").unwrap();
    relay_when_known(&mut alice, "carol", "hi");
    c.berth.signal("TERM");
    assert!(c.berth.wait(LIMIT).success());
    let deadline = Instant::now() + LIMIT;
    while client(a.addr, "carol").is_err() {
        assert!(
            Instant::now() < deadline,
            "carol's name was not released (her node's lease is an hour)"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn relays_resume_after_nats_restarts() {
    let nats = Nats::start("restart");
    let (a, b) = (Node::start(&nats, "10"), Node::start(&nats, "10"));
    let mut bob = client(b.addr, "bob").unwrap();
    let mut alice = client(a.addr, "alice").unwrap();
    relay_when_known(&mut alice, "bob", "before");
    assert_eq!(read_frame_raw(&mut bob).1, b"@alice before");
    let nats = nats.restart();
    // The nodes reconnect by themselves; a relay sent while they do may be lost, so alice
    // tries until one arrives, and every one that arrives is whole.
    let deadline = Instant::now() + LIMIT;
    bob.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut n = 0;
    loop {
        alice
            .write_all(&frame(format!("@bob after {n}").as_bytes()))
            .unwrap();
        let mut head = [0u8; 8];
        if bob.read_exact(&mut head).is_ok() {
            let mut payload = vec![0; u64::from_le_bytes(head) as usize];
            bob.set_read_timeout(Some(LIMIT)).unwrap();
            bob.read_exact(&mut payload).unwrap();
            let text = String::from_utf8(payload).unwrap();
            assert!(text.starts_with("@alice after "), "{text}");
            break;
        }
        n += 1;
        assert!(Instant::now() < deadline, "relays never resumed");
    }
    drop(nats);
}

#[test]
fn a_nats_out_of_reach_is_a_startup_error() {
    let port = free_port();
    let url = format!("nats://127.0.0.1:{port}");
    let (status, _, err) = run_within(
        &["msg", "serve", "-l", "tcp://127.0.0.1:0", "--cluster", &url],
        LIMIT,
    );
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("cannot reach NATS"), "{err}");
    let (status, _, err) = run_within(
        &[
            "msg",
            "serve",
            "-l",
            "tcp://127.0.0.1:0",
            "--cluster-lease",
            "3",
        ],
        LIMIT,
    );
    assert_eq!(status.code(), Some(2), "{err}");
}

/// Whether a client is still served: an empty message comes back, or the server ends it.
fn still_served(s: &mut TcpStream) -> bool {
    s.write_all(&frame(b"")).is_ok() && matches!(read_frame_raw(s), (0, _))
}

#[test]
fn two_clients_racing_for_one_name_on_two_nodes_leave_exactly_one_holder() {
    let nats = Nats::start("race");
    let (a, b) = (Node::start(&nats, "10"), Node::start(&nats, "10"));
    for round in 0..10 {
        let name = format!("racer{round}");
        let racers: Vec<_> = [a.addr, b.addr]
            .into_iter()
            .map(|addr| {
                let name = name.clone();
                std::thread::spawn(move || client(addr, &name))
            })
            .collect();
        let mut admitted = Vec::new();
        for r in racers {
            match r.join().unwrap() {
                Ok(s) => admitted.push(s),
                Err(text) => assert!(text.contains("name-taken"), "{text}"),
            }
        }
        assert!(!admitted.is_empty(), "round {round}: nobody got the name");
        // Both admitted within the replica's delay: the cluster's create settles it, and the
        // loser is ended (name-replaced) moments later.
        std::thread::sleep(Duration::from_millis(300));
        let served = admitted.iter_mut().map(still_served).filter(|&s| s).count();
        assert_eq!(served, 1, "round {round}: {} holders", served);
    }
}

#[test]
fn msg_bench_relays_within_a_node_and_across_nodes_with_every_message_checked() {
    let nats = Nats::start("bench");
    let (a, b) = (Node::start(&nats, "10"), Node::start(&nats, "10"));
    let (ea, eb) = (format!("tcp://{}", a.addr), format!("tcp://{}", b.addr));
    for (size, via) in [("64", None), ("64", Some(&eb)), ("64k", Some(&eb))] {
        let mut args = vec![
            "msg", "bench", &ea, "--relay", "-s", size, "-c", "4", "-d", "1s", "--json",
        ];
        if let Some(via) = via {
            args.extend(["--relay-via", via.as_str()]);
        }
        let (status, out, err) = run_within(&args, LIMIT);
        assert!(status.success(), "{args:?}: {err}");
        let report: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(report["relay"], true);
        assert!(report["messages"].as_u64().unwrap() > 0, "{out}");
        let errors = &report["errors"];
        let total: u64 = errors
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(total, 0, "{args:?}: {out}");
    }
    // Pairs need an even number of connections, and messages room for `@NAME `.
    for bad in [["-c", "3"], ["-s", "8"]] {
        let (status, _, err) = run_within(
            &[&["msg", "bench", &ea, "--relay", "-d", "1s"][..], &bad[..]].concat(),
            LIMIT,
        );
        assert_eq!(status.code(), Some(2), "{bad:?}: {err}");
    }
}
