"""Static files before the application (issue 43: granian's --static-path-mount,
--static-path-route and --static-path-expires; whitenoise's role), over real sockets with httpx
and curl. The application answers 418 to everything, so a file that comes back was served by
berth without entering Python."""

import gzip
import os
import shutil
import subprocess
import sys

from helpers import HERE, need, start, stop

CSS = b"body { color: #123456 }\n" * 200


def site(tmp_path):
    root = tmp_path / "public"
    (root / "sub").mkdir(parents=True)
    (root / "a.css").write_bytes(CSS)
    (root / "b.css").write_bytes(CSS)
    (root / "b.css.gz").write_bytes(gzip.compress(CSS))
    (root / "sub" / "index.html").write_bytes(b"<p>index</p>\n")
    (root / ".env").write_bytes(b"SECRET=1\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_bytes(b"[core]\n")
    (tmp_path / "outside.txt").write_bytes(b"outside\n")
    return root


def curl(*args):
    assert shutil.which("curl"), "this test needs curl"
    out = subprocess.run(["curl", "-sS", "--max-time", "10", *args], capture_output=True)
    assert out.returncode == 0, out.stderr.decode()
    return out.stdout


def test_static_files_are_served_before_the_app_with_validators_ranges_and_siblings(tmp_path):
    httpx = need("httpx")
    root = site(tmp_path)
    proc, port, _ = start("apps.ext_apps:teapot", "--interface", "asgi",
                          "--static-path-mount", str(root))
    base = "http://127.0.0.1:{}".format(port)
    try:
        with httpx.Client(base_url=base, timeout=10) as c:
            r = c.get("/static/a.css", headers={"accept-encoding": "identity"})
            assert r.status_code == 200 and r.content == CSS
            assert r.headers["content-type"] == "text/css; charset=utf-8"
            assert r.headers["cache-control"] == "max-age=86400"
            assert r.headers["accept-ranges"] == "bytes"
            etag = r.headers["etag"]
            assert r.headers["last-modified"]
            r = c.get("/static/a.css", headers={"if-none-match": etag})
            assert r.status_code == 304 and r.headers["cache-control"] == "max-age=86400"
            r = c.get("/static/a.css", headers={"range": "bytes=5-9",
                                                "accept-encoding": "identity"})
            assert r.status_code == 206 and r.content == CSS[5:10]
            assert r.headers["content-range"] == "bytes 5-9/{}".format(len(CSS))
            # The precompressed sibling, for a client that takes gzip.
            r = c.get("/static/b.css", headers={"accept-encoding": "gzip"})
            assert r.headers["content-encoding"] == "gzip"
            assert r.headers["vary"] == "Accept-Encoding"
            assert r.content == CSS  # httpx decodes it
            assert int(r.headers["content-length"]) == len(gzip.compress(CSS))
            # A directory: its index at the slashed path, a 301 to it without.
            r = c.get("/static/sub")
            assert r.status_code == 301 and r.headers["location"] == "/static/sub/"
            assert c.get("/static/sub/").content == b"<p>index</p>\n"
            # Not the mount's: the application's.
            for path in ("/", "/staticky", "/other/a.css"):
                assert c.get(path).status_code == 418, path
            r = c.post("/static/a.css", content=b"x")
            assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"
            head = c.head("/static/a.css", headers={"accept-encoding": "identity"})
            assert head.status_code == 200 and head.headers["content-length"] == str(len(CSS))
        # Dotfiles and paths out of the directory: 404, never the application.
        for path in ("/static/.env", "/static/.git/config", "/static/sub/../.env",
                     "/static/../outside.txt", "/static/%2e%2e/outside.txt",
                     "/static/..%2foutside.txt", "/static//etc/passwd"):
            out = curl("--path-as-is", "-o", "/dev/null", "-w", "%{http_code}", base + path)
            assert out == b"404", (path, out)
        # HTTP/2 goes the same way.
        assert curl("--http2-prior-knowledge", "-H", "accept-encoding: identity",
                    base + "/static/a.css") == CSS
    finally:
        stop(proc)


def test_static_route_expires_dotfiles_and_compress_are_configurable(tmp_path):
    httpx = need("httpx")
    root = site(tmp_path)
    (root / "big.js").write_bytes(b"function f() { return 1 }\n" * 400)
    proc, port, _ = start("apps.ext_apps:teapot", "--interface", "asgi",
                          "--static-path-mount", str(root), "--static-path-route", "/assets/",
                          "--static-path-expires", "max", "--static-path-dotfiles",
                          "--compress")
    try:
        with httpx.Client(base_url="http://127.0.0.1:{}".format(port), timeout=10) as c:
            r = c.get("/assets/a.css", headers={"accept-encoding": "identity"})
            assert r.content == CSS
            assert r.headers["cache-control"] == "max-age=31536000, immutable"
            assert c.get("/static/a.css").status_code == 418
            assert c.get("/assets/.env").content == b"SECRET=1\n"
            # --compress: a compressible file without a sibling, on the fly.
            r = c.get("/assets/big.js", headers={"accept-encoding": "gzip"})
            assert r.headers["content-encoding"] == "gzip"
            assert r.content == b"function f() { return 1 }\n" * 400
    finally:
        stop(proc)
    proc, port, _ = start("apps.ext_apps:teapot", "--interface", "asgi",
                          "--static-path-mount", str(root), "--static-path-expires", "off")
    try:
        r = httpx.get("http://127.0.0.1:{}/static/a.css".format(port), timeout=10)
        assert r.status_code == 200 and "cache-control" not in r.headers
    finally:
        stop(proc)


def test_static_files_before_a_wsgi_app(tmp_path):
    httpx = need("httpx")
    root = site(tmp_path)
    proc, port, _ = start("apps.ext_apps:wsgi_teapot", "--interface", "wsgi",
                          "--static-path-mount", str(root), "--static-path-expires", "60")
    try:
        with httpx.Client(base_url="http://127.0.0.1:{}".format(port), timeout=10) as c:
            r = c.get("/static/a.css", headers={"accept-encoding": "identity"})
            assert r.content == CSS and r.headers["cache-control"] == "max-age=60"
            assert c.get("/static/.env").status_code == 404
            assert c.get("/elsewhere").status_code == 418
    finally:
        stop(proc)


def test_static_flags_usage_errors_are_one_line_and_exit_2(tmp_path):
    for args, says in ((["--static-path-mount", str(tmp_path / "nope")], "not a directory"),
                       (["--static-path-mount", str(tmp_path), "--static-path-route", "static"],
                        "a path starting with /"),
                       (["--static-path-expires", "soon"], "not a number of seconds")):
        out = subprocess.run([sys.executable, "-m", "berth", "apps.ext_apps:teapot", *args],
                             cwd=HERE, capture_output=True, text=True, timeout=30)
        assert out.returncode == 2, (args, out.stderr)
        assert says in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
