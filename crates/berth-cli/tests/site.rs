//! `berth serve --site DIR`, `--compress`, `--compress-level`, `--compress-min-size` and
//! `--no-precompressed` as a built binary (issue 34), through curl: the site at `/` beside the
//! demo routes, in every model; a demo route's name in DIR warned about; a bad `--site` is a
//! usage error; each compression option changes what is sent.

mod common;

use std::process::Command;

use berth_testkit::per_model;
use common::{address_in, get, run, Berth};

berth::with_models!(per_model! {
    site_and_compression_from_the_command_line,
});

fn curl(url: &str, extra: &[&str]) -> (Vec<u8>, String) {
    let out = Command::new("curl")
        .args(["-sS", "--fail", "-D", "-", "-o", "/dev/stderr"])
        .args(extra)
        .arg(url)
        .output()
        .expect("curl");
    assert!(
        out.status.success(),
        "curl {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out.stderr, String::from_utf8(out.stdout).unwrap())
}

fn text(lines: usize) -> Vec<u8> {
    (0..lines)
        .flat_map(|i| format!("{i:05} some text that compresses well\n").into_bytes())
        .collect()
}

fn site_and_compression_from_the_command_line(m: berth::drive::Model) {
    let dir = std::env::temp_dir().join(format!("berth-cli-site-{m}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("docs")).unwrap();
    std::fs::write(dir.join("index.html"), "<h1>mine</h1>\n").unwrap();
    std::fs::write(dir.join("docs/index.html"), "<h1>docs</h1>\n").unwrap();
    std::fs::write(dir.join("stats"), "hidden\n").unwrap();
    let big = text(3000);
    std::fs::write(dir.join("big.txt"), &big).unwrap();
    std::fs::write(dir.join("mid.txt"), text(100)).unwrap();
    std::fs::write(dir.join("app.js.gz"), b"not really gzip").unwrap();
    std::fs::write(dir.join("app.js"), b"console.log(1)\n").unwrap();
    let site = dir.to_str().unwrap();

    let mut berth = Berth::spawn(&[
        "serve",
        "-m",
        m.name(),
        "-p",
        "0",
        "--site",
        site,
        "--compress",
        "--compress-level",
        "9",
        "--compress-min-size",
        "8k",
    ]);
    let line = berth.line();
    let addr = address_in(&line);
    let url = |p: &str| format!("http://{addr}{p}");
    assert!(get(addr, "/").ends_with("<h1>mine</h1>\n"), "{m}");
    let docs = get(addr, "/docs");
    assert!(docs.starts_with("HTTP/1.1 301 ") && docs.contains("\r\nLocation: /docs/\r\n"));
    assert!(get(addr, "/docs/").ends_with("<h1>docs</h1>\n"));
    assert!(
        get(addr, "/stats").contains("berth_"),
        "the demo's /stats wins"
    );
    assert!(get(addr, "/hello/world").ends_with("Hello, World!"));
    // --compress: curl --compressed decodes it; the head says gzip.
    let (body, head) = curl(
        &url("/big.txt"),
        &["--compressed", "-H", "Accept-Encoding: gzip"],
    );
    assert_eq!(body, big, "{m}");
    assert!(
        head.to_ascii_lowercase().contains("content-encoding: gzip"),
        "{head}"
    );
    // --compress-min-size 8k: a 4 KiB file goes as it is.
    let (_, head) = curl(&url("/mid.txt"), &["-H", "Accept-Encoding: gzip"]);
    assert!(
        !head.to_ascii_lowercase().contains("content-encoding"),
        "{head}"
    );
    // A precompressed sibling, by default.
    let (body, head) = curl(&url("/app.js"), &["-H", "Accept-Encoding: gzip"]);
    assert_eq!(body, b"not really gzip");
    assert!(
        head.to_ascii_lowercase().contains("content-encoding: gzip"),
        "{head}"
    );
    berth.signal("TERM");
    let (_, _, stderr) = berth.finish(std::time::Duration::from_secs(30));
    assert!(stderr.contains("/stats not served"), "{stderr}");

    // Level 1 sends more bytes than level 9; --no-precompressed serves the plain file.
    let sizes: Vec<usize> = ["1", "9"]
        .iter()
        .map(|level| {
            let mut berth = Berth::spawn(&[
                "serve",
                "-m",
                m.name(),
                "-p",
                "0",
                "--site",
                site,
                "--compress",
                "--compress-level",
                level,
                "--no-precompressed",
            ]);
            let addr = address_in(&berth.line());
            let (raw, _) = curl(
                &format!("http://{addr}/big.txt"),
                &["-H", "Accept-Encoding: gzip"],
            );
            let (js, _) = curl(
                &format!("http://{addr}/app.js"),
                &["-H", "Accept-Encoding: gzip"],
            );
            assert_eq!(js, b"console.log(1)\n", "--no-precompressed");
            berth.signal("TERM");
            berth.finish(std::time::Duration::from_secs(30));
            raw.len()
        })
        .collect();
    assert!(
        sizes[0] > sizes[1],
        "level 1 {} vs 9 {}",
        sizes[0],
        sizes[1]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_site_and_compression_options_are_usage_errors() {
    for args in [
        &["serve", "--site", "/nonexistent/berth-site"][..],
        &["serve", "--compress-level", "0"],
        &["serve", "--compress-level", "10"],
        &["serve", "--compress-min-size", "lots"],
    ] {
        let (status, _, stderr) = run(args);
        assert_eq!(status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(args[1]), "{args:?}: {stderr}");
    }
}
