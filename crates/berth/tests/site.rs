//! A site at `/` and content codings on files (issue 34), in every model, over plain TCP and
//! TLS, on real sockets: `--site DIR` with its index, redirects, validators, ranges and escape
//! rules, the demo routes beside it; precompressed siblings (`.br`, `.zst`, `.gz`) with their
//! own ETag, ranges over their bytes and 304s; on-the-fly gzip, br and zstd (chunked, decoded
//! here), and where they must not apply. `curl --compressed` and Python's `http.client` read
//! them as real clients do.

#[path = "support/server.rs"]
mod server;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use berth::app::{Demo, DemoConfig};
use berth::drive::Model;
use berth::files::Files;
use berth::proto::http::{BodyEncoder, Coding, Compress, Encode};
use server::{ModelServer, Opts};

use berth_testkit::per_model;

berth::with_models!(per_model! {
    a_site_is_served_at_the_root_beside_the_demo_routes,
    precompressed_siblings_are_served_with_their_own_validators,
    files_are_compressed_on_the_fly_only_where_they_may_be,
    real_clients_decode_what_is_sent,
});

/// A text file of `n` lines: compressible, and long enough for many chunks.
fn text(n: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| format!("{i:06} the quick brown fox jumps over the lazy dog\n").into_bytes())
        .collect()
}

fn encode(coding: Coding, data: &[u8]) -> Vec<u8> {
    let mut body = BodyEncoder::new(
        Encode {
            coding,
            level: 6,
            chunked: false,
        },
        data.len() as u64,
    );
    let mut out = Vec::new();
    body.feed(data, &mut out).unwrap();
    body.finish(&mut out).unwrap();
    out
}

fn decode(coding: &str, data: &[u8]) -> Vec<u8> {
    match coding {
        "gzip" => {
            use zlib_rs::{Inflate, InflateFlush, Status};
            let mut inflate = Inflate::new(true, 31);
            let mut out = vec![0u8; 64 << 20];
            let status = inflate.decompress(data, &mut out, InflateFlush::Finish);
            assert!(matches!(status, Ok(Status::StreamEnd)), "{status:?}");
            out.truncate(inflate.total_out() as usize);
            out
        }
        "br" => {
            let mut out = Vec::new();
            brotli::BrotliDecompress(&mut &data[..], &mut out).unwrap();
            out
        }
        "zstd" => zstd::decode_all(data).unwrap(),
        other => panic!("unknown coding {other}"),
    }
}

/// Scratch directories: `site/` (the site), `root/` (`/files`), and a secret beside them.
struct Dirs {
    base: PathBuf,
}

impl Dirs {
    fn new(tag: &str, m: Model) -> Dirs {
        let base =
            std::env::temp_dir().join(format!("berth-site-{tag}-{m}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let site = base.join("site");
        let root = base.join("root");
        std::fs::create_dir_all(site.join("sub")).unwrap();
        std::fs::create_dir_all(site.join("noindex")).unwrap();
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(base.join("secret.txt"), "secret").unwrap();
        std::fs::write(site.join("index.html"), "<h1>home</h1>\n").unwrap();
        std::fs::write(site.join("sub/index.html"), "<h1>sub</h1>\n").unwrap();
        std::fs::write(site.join("style.css"), "body{}\n").unwrap();
        // Named like demo routes: the demo's answer wins there.
        std::fs::write(site.join("stats"), "the site's stats\n").unwrap();
        std::fs::write(site.join("healthz"), "the site's healthz\n").unwrap();
        std::fs::write(root.join("hi.txt"), "hi from /files\n").unwrap();
        std::os::unix::fs::symlink("../secret.txt", site.join("out")).unwrap();
        std::os::unix::fs::symlink("style.css", site.join("in.css")).unwrap();
        // Precompressed siblings, and a big text file with none.
        let page = text(2000);
        std::fs::write(site.join("page.txt"), &page).unwrap();
        std::fs::write(root.join("page.txt"), &page).unwrap();
        for coding in [Coding::Br, Coding::Gzip] {
            for dir in [&site, &root] {
                let name = format!("page.txt{}", coding.suffix());
                std::fs::write(dir.join(name), encode(coding, &page)).unwrap();
            }
        }
        std::fs::write(site.join("big.txt"), text(20_000)).unwrap();
        std::fs::write(site.join("small.txt"), "tiny\n").unwrap();
        std::fs::write(site.join("image.png"), text(2000)).unwrap();
        Dirs { base }
    }

    fn site(&self) -> PathBuf {
        self.base.join("site")
    }

    fn start(&self, m: Model, tls: bool, compress: Option<Compress>) -> ModelServer {
        let files = Files::new(self.base.join("root"))
            .unwrap()
            .with_site(self.site())
            .unwrap();
        let config = DemoConfig {
            compress,
            ..DemoConfig::default()
        };
        Opts::new(m)
            .tls(tls)
            .start_service(|stats| Demo::new(config, stats.clone()).with_files(files))
    }
}

impl Drop for Dirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// One response, its body unframed (chunked or by length) but not decoded.
#[derive(Debug)]
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body decoded as its Content-Encoding says.
    fn decoded(&self) -> Vec<u8> {
        match self.header("content-encoding") {
            Some(c) => decode(c, &self.body),
            None => self.body.clone(),
        }
    }
}

/// Sends `requests` (each a method, a path and header lines) on one connection, the last with
/// `Connection: close`, and reads every response: keep-alive after a chunked body included.
fn exchange(srv: &ModelServer, requests: &[(&str, &str, &[&str])]) -> Vec<Resp> {
    let mut raw = String::new();
    for (i, (method, path, headers)) in requests.iter().enumerate() {
        raw.push_str(&format!("{method} {path} HTTP/1.1\r\nHost: x\r\n"));
        for h in *headers {
            raw.push_str(h);
            raw.push_str("\r\n");
        }
        if i + 1 == requests.len() {
            raw.push_str("Connection: close\r\n");
        }
        raw.push_str("\r\n");
    }
    let mut client = srv.client();
    client.send(raw.as_bytes());
    let bytes = client.read_to_close().expect("responses, then the close");
    let mut rest = &bytes[..];
    let mut out = Vec::new();
    for (method, path, _) in requests {
        let end = find(rest, b"\r\n\r\n").unwrap_or_else(|| panic!("{path}: no head in {rest:?}"));
        let head = std::str::from_utf8(&rest[..end]).unwrap();
        rest = &rest[end + 4..];
        let mut lines = head.split("\r\n");
        let status = lines.next().unwrap()[9..12].parse().unwrap();
        let headers: Vec<(String, String)> = lines
            .map(|l| {
                let (n, v) = l.split_once(':').unwrap();
                (n.to_owned(), v.trim().to_owned())
            })
            .collect();
        let mut r = Resp {
            status,
            headers,
            body: Vec::new(),
        };
        if *method == "HEAD" || status == 304 {
        } else if r.header("transfer-encoding") == Some("chunked") {
            loop {
                let line = find(rest, b"\r\n").unwrap();
                let size =
                    usize::from_str_radix(std::str::from_utf8(&rest[..line]).unwrap(), 16).unwrap();
                rest = &rest[line + 2..];
                if size == 0 {
                    assert!(rest.starts_with(b"\r\n"), "{path}: trailer");
                    rest = &rest[2..];
                    break;
                }
                r.body.extend_from_slice(&rest[..size]);
                assert_eq!(&rest[size..size + 2], b"\r\n", "{path}: chunk end");
                rest = &rest[size + 2..];
            }
        } else {
            let len: usize = r.header("content-length").unwrap().parse().unwrap();
            r.body = rest[..len].to_vec();
            rest = &rest[len..];
        }
        out.push(r);
    }
    assert!(rest.is_empty(), "bytes after the responses: {rest:?}");
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn get(srv: &ModelServer, path: &str, headers: &[&str]) -> Resp {
    exchange(srv, &[("GET", path, headers)]).remove(0)
}

fn a_site_is_served_at_the_root_beside_the_demo_routes(m: Model) {
    let dirs = Dirs::new("root", m);
    for tls in [false, true] {
        let srv = dirs.start(m, tls, None);
        let r = exchange(
            &srv,
            &[
                ("GET", "/", &[]),
                ("GET", "/sub", &[]),
                ("GET", "/sub?x=1", &[]),
                ("GET", "/sub/", &[]),
                ("HEAD", "/style.css", &[]),
                ("GET", "/style.css", &["Range: bytes=1-3"]),
                ("GET", "/noindex/", &[]),
                ("GET", "/nope", &[]),
                ("GET", "/index.html/", &[]),
            ],
        );
        let what = format!("{m} tls={tls}");
        assert_eq!(
            (r[0].status, &r[0].body[..]),
            (200, &b"<h1>home</h1>\n"[..]),
            "{what}"
        );
        assert_eq!(
            r[0].header("content-type"),
            Some("text/html; charset=utf-8")
        );
        assert_eq!(
            (r[1].status, r[1].header("location")),
            (301, Some("/sub/")),
            "{what}"
        );
        assert_eq!(r[2].header("location"), Some("/sub/?x=1"), "{what}");
        assert_eq!(
            (r[3].status, &r[3].body[..]),
            (200, &b"<h1>sub</h1>\n"[..]),
            "{what}"
        );
        assert_eq!(r[4].status, 200);
        assert_eq!(r[4].header("content-length"), Some("7"));
        assert_eq!(r[4].header("content-type"), Some("text/css; charset=utf-8"));
        assert_eq!((r[5].status, &r[5].body[..]), (206, &b"ody"[..]), "{what}");
        assert_eq!(r[5].header("content-range"), Some("bytes 1-3/7"));
        for (i, resp) in r.iter().enumerate().skip(6) {
            assert_eq!(resp.status, 404, "{what}: request {i}");
        }
        // Validators: 304 by ETag and by date.
        let tag = r[4].header("etag").unwrap().to_owned();
        let modified = r[4].header("last-modified").unwrap().to_owned();
        let inm = format!("If-None-Match: {tag}");
        let ims = format!("If-Modified-Since: {modified}");
        assert_eq!(get(&srv, "/style.css", &[&inm]).status, 304, "{what}");
        assert_eq!(get(&srv, "/style.css", &[&ims]).status, 304, "{what}");
        // Nothing outside the site; a link inside it is fine.
        for escape in [
            "/../secret.txt",
            "/%2e%2e/secret.txt",
            "/out",
            "/sub/%2e%2e/%2e%2e/secret.txt",
            "//etc/passwd",
        ] {
            assert_eq!(get(&srv, escape, &[]).status, 404, "{what}: {escape}");
        }
        assert_eq!(get(&srv, "/in.css", &[]).body, b"body{}\n");
        // Only GET and HEAD.
        let post = exchange(&srv, &[("POST", "/style.css", &["Content-Length: 0"])]);
        assert_eq!(
            (post[0].status, post[0].header("allow")),
            (405, Some("GET, HEAD"))
        );
        // The demo routes win over files of the same name; /files is the other root.
        let demo = exchange(
            &srv,
            &[
                ("GET", "/stats", &[]),
                ("GET", "/healthz", &[]),
                ("GET", "/hello/world", &[]),
                ("GET", "/files/hi.txt", &[]),
            ],
        );
        assert!(
            String::from_utf8_lossy(&demo[0].body).contains("berth_"),
            "{what}"
        );
        assert_eq!(demo[1].body, b"ok\n");
        assert_eq!(demo[2].body, b"Hello, World!");
        assert_eq!(demo[3].body, b"hi from /files\n");
        srv.stop();
    }
}

fn precompressed_siblings_are_served_with_their_own_validators(m: Model) {
    let dirs = Dirs::new("pre", m);
    let page = text(2000);
    let gz = encode(Coding::Gzip, &page);
    for tls in [false, true] {
        let srv = dirs.start(m, tls, None);
        for path in ["/page.txt", "/files/page.txt"] {
            let what = format!("{m} tls={tls} {path}");
            let r = exchange(
                &srv,
                &[
                    ("GET", path, &[]),
                    ("GET", path, &["Accept-Encoding: gzip"]),
                    (
                        "GET",
                        path,
                        &["Accept-Encoding: gzip;q=0.5, br, zstd;q=0.1"],
                    ),
                    ("GET", path, &["Accept-Encoding: zstd"]),
                    (
                        "GET",
                        path,
                        &["Accept-Encoding: gzip", "Range: bytes=10-29"],
                    ),
                    ("HEAD", path, &["Accept-Encoding: br;q=0.1, gzip"]),
                    ("GET", path, &["Accept-Encoding: br;q=0, *"]),
                ],
            );
            // Plain: it varies, since siblings exist.
            assert_eq!((r[0].status, &r[0].body), (200, &page), "{what}");
            assert_eq!(r[0].header("vary"), Some("Accept-Encoding"), "{what}");
            assert_eq!(r[0].header("content-encoding"), None, "{what}");
            let plain_tag = r[0].header("etag").unwrap();
            // gzip: the sibling's bytes, its own tag.
            assert_eq!((r[1].status, &r[1].body), (200, &gz), "{what}");
            assert_eq!(r[1].header("content-encoding"), Some("gzip"), "{what}");
            assert_eq!(r[1].header("vary"), Some("Accept-Encoding"), "{what}");
            assert_eq!(
                r[1].header("content-type"),
                Some("text/plain; charset=utf-8")
            );
            assert_eq!(
                r[1].header("content-length"),
                Some(gz.len().to_string().as_str())
            );
            let gz_tag = r[1].header("etag").unwrap();
            assert_ne!(gz_tag, plain_tag, "{what}");
            assert_eq!(r[1].decoded(), page, "{what}");
            // br preferred by weight.
            assert_eq!(r[2].header("content-encoding"), Some("br"), "{what}");
            assert_eq!(r[2].decoded(), page, "{what}");
            assert_ne!(r[2].header("etag").unwrap(), gz_tag, "{what}");
            // No zstd sibling, no on-the-fly: plain.
            assert_eq!(
                (r[3].header("content-encoding"), &r[3].body),
                (None, &page),
                "{what}"
            );
            // A range of the encoded bytes.
            assert_eq!((r[4].status, &r[4].body[..]), (206, &gz[10..30]), "{what}");
            assert_eq!(
                r[4].header("content-range"),
                Some(format!("bytes 10-29/{}", gz.len()).as_str()),
                "{what}"
            );
            assert_eq!(r[4].header("content-encoding"), Some("gzip"), "{what}");
            // HEAD: the sibling's head.
            assert_eq!(r[5].header("content-encoding"), Some("gzip"), "{what}");
            assert_eq!(
                r[5].header("content-length"),
                Some(gz.len().to_string().as_str())
            );
            // `*` takes gzip (br refused).
            assert_eq!(r[6].header("content-encoding"), Some("gzip"), "{what}");
            // 304 by the sibling's tag; the plain file's tag does not validate the sibling.
            let by_gz = format!("If-None-Match: {gz_tag}");
            let by_plain = format!("If-None-Match: {plain_tag}");
            let c = exchange(
                &srv,
                &[
                    ("GET", path, &["Accept-Encoding: gzip", &by_gz]),
                    ("GET", path, &["Accept-Encoding: gzip", &by_plain]),
                    ("GET", path, &[&by_gz]),
                    (
                        "GET",
                        path,
                        &[
                            "Accept-Encoding: gzip",
                            "Range: bytes=0-9",
                            &format!("If-Range: {gz_tag}"),
                        ],
                    ),
                    (
                        "GET",
                        path,
                        &[
                            "Accept-Encoding: gzip",
                            "Range: bytes=0-9",
                            &format!("If-Range: {plain_tag}"),
                        ],
                    ),
                ],
            );
            assert_eq!(c[0].status, 304, "{what}");
            assert_eq!(c[0].header("etag"), Some(gz_tag), "{what}");
            assert_eq!(c[0].header("vary"), Some("Accept-Encoding"), "{what}");
            assert_eq!((c[1].status, &c[1].body), (200, &gz), "{what}");
            assert_eq!((c[2].status, &c[2].body), (200, &page), "{what}");
            assert_eq!((c[3].status, &c[3].body[..]), (206, &gz[..10]), "{what}");
            assert_eq!(
                (c[4].status, &c[4].body),
                (200, &gz),
                "{what}: stale If-Range"
            );
        }
        srv.stop();
    }
}

fn files_are_compressed_on_the_fly_only_where_they_may_be(m: Model) {
    let dirs = Dirs::new("fly", m);
    let big = text(20_000);
    let page = text(2000);
    let compress = Some(Compress {
        level: 4,
        min_size: 1024,
    });
    for tls in [false, true] {
        let srv = dirs.start(m, tls, compress);
        let what = format!("{m} tls={tls}");
        let r = exchange(
            &srv,
            &[
                ("GET", "/big.txt", &["Accept-Encoding: gzip"]),
                ("GET", "/big.txt", &["Accept-Encoding: br"]),
                ("GET", "/big.txt", &["Accept-Encoding: zstd"]),
                ("GET", "/big.txt", &["Accept-Encoding: gzip, br, zstd"]),
                ("HEAD", "/big.txt", &["Accept-Encoding: gzip"]),
                (
                    "GET",
                    "/big.txt",
                    &["Accept-Encoding: gzip", "Range: bytes=5-9"],
                ),
                (
                    "GET",
                    "/big.txt",
                    &["Accept-Encoding: gzip", "Cache-Control: no-transform"],
                ),
                ("GET", "/small.txt", &["Accept-Encoding: gzip"]),
                ("GET", "/image.png", &["Accept-Encoding: gzip"]),
                ("GET", "/big.txt", &[]),
                // A precompressed sibling wins over encoding on the fly.
                ("GET", "/page.txt", &["Accept-Encoding: gzip"]),
                ("GET", "/files/page.txt", &["Accept-Encoding: zstd"]),
            ],
        );
        for (i, coding) in [(0, "gzip"), (1, "br"), (2, "zstd"), (3, "br")] {
            assert_eq!(r[i].status, 200, "{what}: {coding}");
            assert_eq!(r[i].header("content-encoding"), Some(coding), "{what}");
            assert_eq!(r[i].header("transfer-encoding"), Some("chunked"), "{what}");
            assert_eq!(r[i].header("content-length"), None, "{what}");
            assert_eq!(r[i].header("vary"), Some("Accept-Encoding"), "{what}");
            assert!(r[i].header("etag").unwrap().starts_with("W/\""), "{what}");
            assert!(
                r[i].body.len() < big.len() / 3,
                "{what}: {coding} {}",
                r[i].body.len()
            );
            assert_eq!(r[i].decoded(), big, "{what}: {coding}");
        }
        assert_eq!(
            (r[4].header("content-encoding"), r[4].body.len()),
            (Some("gzip"), 0)
        );
        assert_eq!((r[5].status, &r[5].body[..]), (206, &big[5..10]), "{what}");
        assert_eq!(r[5].header("content-encoding"), None, "{what}: a range");
        for (i, why) in [
            (6, "no-transform"),
            (7, "small"),
            (8, "png"),
            (9, "not accepted"),
        ] {
            assert_eq!(r[i].status, 200, "{what}: {why}");
            assert_eq!(r[i].header("content-encoding"), None, "{what}: {why}");
            assert!(r[i].header("content-length").is_some(), "{what}: {why}");
        }
        assert_eq!(r[6].body, big);
        assert_eq!(
            r[9].header("vary"),
            Some("Accept-Encoding"),
            "{what}: may vary"
        );
        assert_eq!(
            r[10].header("transfer-encoding"),
            None,
            "{what}: the sibling"
        );
        assert_eq!(r[10].decoded(), page, "{what}");
        assert_eq!(r[11].header("content-encoding"), Some("zstd"), "{what}");
        assert_eq!(r[11].decoded(), page, "{what}");
        // 304 by the weak tag of the encoded answer; identity refused gets a coding.
        let tag = r[0].header("etag").unwrap();
        let c = exchange(
            &srv,
            &[
                (
                    "GET",
                    "/big.txt",
                    &["Accept-Encoding: gzip", &format!("If-None-Match: {tag}")],
                ),
                (
                    "GET",
                    "/big.txt",
                    &["Accept-Encoding: gzip;q=0.1, identity;q=0"],
                ),
                ("GET", "/small.txt", &["Accept-Encoding: identity;q=0"]),
            ],
        );
        assert_eq!(c[0].status, 304, "{what}");
        assert_eq!(c[1].header("content-encoding"), Some("gzip"), "{what}");
        assert_eq!(c[2].status, 406, "{what}");
        srv.stop();
    }
}

/// Runs a command, returning its stdout; fails with its stderr.
fn run(cmd: &mut Command) -> Vec<u8> {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// curl and Python's http.client.
fn real_clients_decode_what_is_sent(m: Model) {
    let dirs = Dirs::new("clients", m);
    let big = text(20_000);
    let page = text(2000);
    let compress = Some(Compress::default());
    for tls in [false, true] {
        let srv = dirs.start(m, tls, compress);
        let SocketAddr::V4(addr) = srv.addr else {
            panic!("IPv4")
        };
        let scheme = if tls { "https" } else { "http" };
        let ca = server::test_tls().certs.ca.clone();
        let curl = |path: &str, extra: &[&str]| {
            let mut cmd = Command::new("curl");
            // HTTP/1.1: over TLS curl would pick h2 by ALPN, whose file bodies are not wired yet.
            cmd.args(["-sS", "--fail", "--http1.1", "--cacert"])
                .arg(&ca);
            cmd.args(extra)
                .arg(format!("{scheme}://127.0.0.1:{}{path}", addr.port()));
            run(&mut cmd)
        };
        for coding in ["gzip", "br", "zstd"] {
            let ae = format!("Accept-Encoding: {coding}");
            // --compressed decodes; the raw bytes say the coding was applied.
            assert_eq!(
                curl("/big.txt", &["--compressed", "-H", &ae]),
                big,
                "{m} {coding}"
            );
            assert_ne!(curl("/big.txt", &["-H", &ae]), big, "{m} {coding}: raw");
            assert_eq!(curl("/files/page.txt", &["--compressed", "-H", &ae]), page);
        }
        // Range over a precompressed sibling, as curl sends it.
        let gz = encode(Coding::Gzip, &page);
        let ranged = curl(
            "/page.txt",
            &["-H", "Accept-Encoding: gzip", "-r", "100-199"],
        );
        assert_eq!(ranged, &gz[100..200], "{m}");
        if !tls {
            python(&srv.addr, &big, &dirs.site());
        }
        srv.stop();
    }
}

/// Python's `http.client` with manual decoding: gzip with the standard library, br with the
/// `brotli` module (Python has no br of its own; scripts/test installs it into the venv).
fn python(addr: &SocketAddr, big: &[u8], site: &Path) {
    let script = r#"
import gzip, http.client, sys
port, site = int(sys.argv[1]), sys.argv[2]
big = open(site + "/big.txt", "rb").read()
c = http.client.HTTPConnection("127.0.0.1", port)
for i in range(2):  # keep-alive after a chunked body
    c.request("GET", "/big.txt", headers={"Accept-Encoding": "gzip"})
    r = c.getresponse()
    assert r.status == 200 and r.getheader("Content-Encoding") == "gzip", r.getheaders()
    assert r.getheader("Vary") == "Accept-Encoding"
    assert gzip.decompress(r.read()) == big
c.request("GET", "/page.txt", headers={"Accept-Encoding": "gzip", "Range": "bytes=0-99"})
r = c.getresponse()
body = r.read()
assert r.status == 206 and r.getheader("Content-Encoding") == "gzip" and len(body) == 100
tag = r.getheader("ETag")
c.request("GET", "/page.txt", headers={"Accept-Encoding": "gzip", "If-None-Match": tag})
r = c.getresponse()
r.read()
assert r.status == 304 and r.getheader("ETag") == tag, r.status
import brotli
c.request("GET", "/big.txt", headers={"Accept-Encoding": "br"})
r = c.getresponse()
assert r.getheader("Content-Encoding") == "br", r.getheaders()
assert brotli.decompress(r.read()) == big
print("ok")
"#;
    let out = run(
        Command::new(berth_testkit::tools::require_python_module("brotli"))
            .arg("-c")
            .arg(script)
            .arg(addr.port().to_string())
            .arg(site),
    );
    assert_eq!(out, b"ok\n");
    assert_eq!(std::fs::read(site.join("big.txt")).unwrap(), big);
}
