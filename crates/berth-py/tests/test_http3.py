"""ASGI and WSGI applications over HTTP/3 (issue 42): ``python -m berth --http3`` with
``--ssl-certfile/--ssl-keyfile`` serves the UDP twin of its TLS listener, as ``berth serve
--http3`` does. aioquic's HTTP/3 client (the one berth-cli's tests drive,
crates/berth-cli/tests/h3/client.py) asks over real UDP; the scope says ``http_version: "3"``,
the environ ``SERVER_PROTOCOL: HTTP/3``; the answers over TLS (HTTP/1.1 and HTTP/2, curl)
carry ``Alt-Svc: h3=":PORT"; ma=86400``, and none with ``--alt-svc off``."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from helpers import HERE, need, stop

CLIENT = os.path.join(HERE, "..", "..", "berth-cli", "tests", "h3", "client.py")


def certificates(tmp_path):
    """A CA and a certificate it signed for localhost and 127.0.0.1 (aioquic checks the chain
    and the name): the CA's file, the certificate's and its key's."""
    assert shutil.which("openssl"), "this test needs openssl"
    ca, ca_key = tmp_path / "ca.pem", tmp_path / "ca.key"
    cert, key, csr = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "cert.csr"
    ext = tmp_path / "ext.cnf"
    ext.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run = lambda *args: subprocess.run(["openssl", *args], check=True, capture_output=True)
    run("req", "-x509", *ec, "-days", "2", "-subj", "/CN=berth test CA", "-addext",
        "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign",
        "-keyout", str(ca_key), "-out", str(ca))
    run("req", *ec, "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(csr))
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
        "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(cert))
    return ca, cert, key


def start_tls(app, cert, key, *args, env=None):
    """``python -m berth APP --port 0 --ssl-certfile --ssl-keyfile ARGS...`` (with ``env`` added
    to the environment): the process, its port and its startup line."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "berth", app, "--port", "0", "--ssl-certfile", str(cert),
         "--ssl-keyfile", str(key), *args],
        cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **(env or {})})
    line = proc.stdout.readline()
    assert line.startswith("berth listening on https://"), line + proc.stderr.read()
    port = int(line.split("https://", 1)[1].split(" ", 1)[0].rsplit(":", 1)[1])
    return proc, port, line


def h3(port, ca, requests):
    """``requests`` as streams of one aioquic connection to ``port`` (UDP); the responses."""
    need("aioquic")
    out = subprocess.run([sys.executable, CLIENT, "127.0.0.1", str(port), str(ca)],
                         input=json.dumps(requests), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def alt_svc(port, version):
    """The ``alt-svc`` field curl got over TLS (``--http1.1`` or ``--http2``), or None."""
    assert shutil.which("curl"), "this test needs curl"
    out = subprocess.run(["curl", "-sk", "-D", "-", "-o", os.devnull, "--max-time", "10",
                          version, "https://127.0.0.1:{}/".format(port)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    head = out.stdout.lower()
    assert " 200" in head.splitlines()[0], head
    return next((l.split(":", 1)[1].strip() for l in head.splitlines()
                 if l.startswith("alt-svc:")), None)


@pytest.mark.parametrize("model", ["evloop", "uring"])
def test_asgi_over_http3_says_http_version_3_and_tls_advertises_it(tmp_path, model):
    ca, cert, key = certificates(tmp_path)
    proc, port, line = start_tls("apps.asgi_apps:scope_app", cert, key, "--interface", "asgi",
                                 "--http3", "--model", model)
    try:
        assert "HTTP/3" in line, line
        got = h3(port, ca, [{"path": "/x"}, {"path": "/y"}])
        assert [r["status"] for r in got] == [200, 200], got
        scope = json.loads(got[0]["body"])
        assert scope["http_version"] == "3", scope
        assert scope["scheme"] == "https" and scope["path"] == "/x", scope
        assert scope["client"][0] == "127.0.0.1", scope
        want = 'h3=":{}"; ma=86400'.format(port)
        assert alt_svc(port, "--http1.1") == want
        assert alt_svc(port, "--http2") == want
    finally:
        stop(proc)


def test_wsgi_over_http3_says_server_protocol_http3(tmp_path):
    ca, cert, key = certificates(tmp_path)
    proc, port, _ = start_tls("apps.wsgi_apps:environ_app", cert, key, "--interface", "wsgi",
                              "--http3")
    try:
        got = h3(port, ca, [{"path": "/"}])
        assert got[0]["status"] == 200, got
        environ = json.loads(got[0]["body"])
        assert environ["SERVER_PROTOCOL"] == "HTTP/3", environ
        assert environ["wsgi.url_scheme"] == "https", environ
        assert alt_svc(port, "--http1.1") == 'h3=":{}"; ma=86400'.format(port)
    finally:
        stop(proc)


def test_a_streamed_body_past_the_limit_over_http3_is_413_and_the_app_hears_it_cut(tmp_path):
    # As over HTTP/1.1 and HTTP/2: the app reading the body as it comes is told it was cut,
    # and the client hears 413 from berth, not the app's answer to a body it never got whole
    # (before: 400 "cut at ..." from the app).
    ca, cert, key = certificates(tmp_path)
    events = tmp_path / "events"
    proc, port, _ = start_tls("apps.asgi_apps:starlette_app", cert, key, "--interface", "asgi",
                              "--http3", "--max-body", "1000",
                              env={"BERTH_TEST_EVENTS": str(events)})
    try:
        got = h3(port, ca, [{"method": "POST", "path": "/upload", "body": "x" * 5000},
                            {"method": "POST", "path": "/upload", "body": "y" * 900}])
        assert got[0]["status"] == 413, got
        assert got[0]["body"] == "request body too large\n", got
        assert got[1]["status"] == 200 and got[1]["body"] == "received 900", got
        for _ in range(100):
            if "upload cut" in (events.read_text() if events.exists() else ""):
                break
            time.sleep(0.05)
        assert "upload cut" in events.read_text()
    finally:
        stop(proc)


def test_alt_svc_off_serves_http3_without_advertising_it(tmp_path):
    ca, cert, key = certificates(tmp_path)
    proc, port, _ = start_tls("apps.asgi_apps:scope_app", cert, key, "--interface", "asgi",
                              "--http3", "--alt-svc", "off")
    try:
        got = h3(port, ca, [{"path": "/"}])
        assert json.loads(got[0]["body"])["http_version"] == "3", got
        assert alt_svc(port, "--http1.1") is None
        assert alt_svc(port, "--http2") is None
    finally:
        stop(proc)
    # Without --http3, nothing is advertised.
    proc, port, _ = start_tls("apps.asgi_apps:scope_app", cert, key, "--interface", "asgi")
    try:
        assert alt_svc(port, "--http1.1") is None
    finally:
        stop(proc)


def test_http3_usage_mistakes_are_one_line_and_exit_2(tmp_path):
    _, cert, key = certificates(tmp_path)
    tls = ["--ssl-certfile", str(cert), "--ssl-keyfile", str(key)]
    cases = [
        (["--http3"], "--http3 needs --ssl-certfile"),
        (tls + ["--http3", "--model", "threaded"], "--model evloop, --model uring only"),
        (tls + ["--http3", "--workers", "2"], "--io-threads"),
        (tls + ["--alt-svc", "off"], "--alt-svc needs --http3"),
    ]
    for args, said in cases:
        out = subprocess.run([sys.executable, "-m", "berth", "apps.asgi_apps:scope_app",
                              "--port", "0", *args],
                             cwd=HERE, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2, (args, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1, (args, out.stderr)
        assert said in out.stderr, (args, out.stderr)
