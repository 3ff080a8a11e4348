//! `berth serve --listen unix:///PATH`, in every model: served (curl --unix-socket), listed by
//! `ss -xl` while it runs, and gone — file and listening socket — after SIGTERM, with exit 0.
//! A path whose directory is missing, or where another berth listens, is a one-line error
//! (exit 1); `--listen` mixes TCP and UNIX listeners.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use berth::drive::Model;
use common::{address_in, get, run, Berth};

use berth_testkit::{per_model, require, LIMIT};

// One test per case and model of the registry (`case::uring`): see `per_model!`.
berth::with_models!(per_model! { serves_and_cleans_up_after_sigterm });

/// A fresh directory for this test's socket, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("berth-cli-unix-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    fn sock(&self) -> PathBuf {
        self.0.join("http.sock")
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn listen(path: &Path) -> String {
    format!("unix://{}", path.display())
}

/// `curl --unix-socket PATH http://localhost/hello/world`'s body.
fn curl(path: &Path) -> String {
    require("curl");
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", "--unix-socket"])
        .arg(path)
        .arg("http://localhost/hello/world")
        .output()
        .expect("curl runs");
    assert!(out.status.success(), "curl: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Whether `ss -xl` lists a listening UNIX socket at `path`.
fn listed(path: &Path) -> bool {
    require("ss");
    let out = Command::new("ss").arg("-xl").output().expect("ss runs");
    assert!(out.status.success(), "ss: {out:?}");
    let path = path.to_str().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .any(|field| field == path)
}

fn serves_and_cleans_up_after_sigterm(model: Model) {
    let dir = Dir::new(model.name());
    let sock = dir.sock();
    let mut berth = Berth::spawn(&["serve", "-m", model.name(), "--listen", &listen(&sock)]);
    let line = berth.line();
    assert!(
        line.contains(&format!("on {} (model", listen(&sock))),
        "{line}"
    );
    assert_eq!(curl(&sock), "Hello, World!", "{model}");
    assert!(listed(&sock), "{model}: not in ss -xl");
    berth.signal("TERM");
    let (status, _, err) = berth.finish(LIMIT);
    assert_eq!(status.code(), Some(0), "{model}: {err}");
    assert!(!sock.exists(), "{model}: the socket file is left behind");
    assert!(!listed(&sock), "{model}: still listening after exit");
}

#[test]
fn a_missing_directory_is_a_one_line_error() {
    let dir = Dir::new("missing");
    let sock = dir.0.join("no/such/http.sock");
    let (status, out, err) = run(&["serve", "--listen", &listen(&sock)]);
    assert_eq!(status.code(), Some(1), "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert_eq!(
        err,
        format!(
            "berth: cannot listen on {}: the directory {} does not exist\n",
            listen(&sock),
            sock.parent().unwrap().display()
        )
    );
}

#[test]
fn a_socket_another_berth_listens_on_is_refused_and_it_keeps_serving() {
    let dir = Dir::new("live");
    let sock = dir.sock();
    let mut first = Berth::spawn(&["serve", "--listen", &listen(&sock)]);
    first.line();
    for model in Model::ALL.map(Model::name) {
        let (status, out, err) = run(&["serve", "-m", model, "--listen", &listen(&sock)]);
        assert_eq!(status.code(), Some(1), "{model}: {out}{err}");
        assert_eq!(
            err,
            format!("berth: address {} already in use\n", listen(&sock)),
            "{model}"
        );
    }
    assert_eq!(curl(&sock), "Hello, World!");
    first.signal("TERM");
    assert_eq!(first.wait(LIMIT).code(), Some(0));
    assert!(!sock.exists());
}

#[test]
fn listen_mixes_tcp_and_unix_listeners() {
    let dir = Dir::new("mixed");
    let sock = dir.sock();
    let mut berth = Berth::spawn(&[
        "serve",
        "--listen",
        "tcp://127.0.0.1:0",
        "--listen",
        &listen(&sock),
    ]);
    let line = berth.line();
    assert!(line.contains(&listen(&sock)), "{line}");
    let addr = address_in(&line);
    assert!(get(addr, "/hello/world").ends_with("Hello, World!"));
    assert_eq!(curl(&sock), "Hello, World!");
    berth.signal("TERM");
    assert_eq!(berth.wait(LIMIT).code(), Some(0));
    assert!(!sock.exists());
}
