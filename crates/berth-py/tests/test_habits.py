"""What gunicorn's, uvicorn's and granian's users type (issue 44), and the logs an operator
reads, over real sockets with real clients (http.client, curl-like raw sockets) and the real
command line: ``-w``, ``-b`` (``unix:PATH`` too), ``--access-logfile``, ``--error-logfile``,
``MODULE`` without ``:APP``, granian's ``--http``, ``--interface asgi3`` and
``--log-access-fmt``, gunicorn's ``--access-logformat``, the flags whose meaning berth does
not share (one line, exit 2), ``berth.run("main:app", reload=True)``; the startup lines of a
supervisor and its workers, workers started, died and replaced, a drain and its counts, the
engine's own debug lines, the requests at trace, and plain HTTP sent to a TLS port."""

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

import helpers
from test_cli import Server, one_line, run, serve  # noqa: F401 (serve: the fixture)

HERE = os.path.dirname(os.path.abspath(__file__))
WAIT = 60

SLOW_APPS = '''
import asyncio, time

async def slow(scope, receive, send):
    if scope["type"] != "http":
        return
    await asyncio.sleep(float(scope["query_string"] or b"0"))
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"late"})

def wsgi_slow(environ, start_response):
    time.sleep(float(environ.get("QUERY_STRING") or "0"))
    start_response("200 OK", [("Content-Length", "4")])
    return [b"late"]

def application(environ, start_response):
    start_response("200 OK", [("Content-Length", "11")])
    return [b"application"]
'''


@pytest.fixture
def slow_apps(tmp_path):
    (tmp_path / "slowapps.py").write_text(SLOW_APPS)
    return str(tmp_path)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- gunicorn ----------------------------------------------------------------------------------

def test_gunicorns_w_and_b_with_one_line_per_process(serve):
    port = free_port()
    s = Server("apps.flask_app:app", "-w", "2", "-b", "127.0.0.1:%d" % port, port=False)
    try:
        # One line for the supervisor, then one per worker, each with its own pid.
        assert re.match(r"berth listening on http://127\.0\.0\.1:%d \(supervisor, pid %d; "
                        r"2 workers, WSGI; HTTP/1\.1 and HTTP/2\)$" % (port, s.proc.pid),
                        s.line), s.line
        pids = set()
        for _ in range(2):
            line = s.listening()
            m = re.match(r"berth listening on http://127\.0\.0\.1:%d \(worker (\d), pid (\d+); "
                         r"model evloop, .* threads.*, WSGI; HTTP/1\.1 and HTTP/2\)$" % port,
                         line)
            assert m, line
            pids.add(int(m.group(2)))
        assert len(pids) == 2 and s.proc.pid not in pids, pids
        for pid in pids:
            s.logged(r"^berth: worker \d \(pid %d\) started$" % pid)
        s.port = port
        assert s.get()[1] == b"Hello, World!"
    finally:
        s.stop()


def test_b_unix_path(serve, tmp_path):
    sock = str(tmp_path / "b.sock")
    s = Server("apps.asgi_apps:raw", "-b", "unix:" + sock, port=False)
    assert s.line.startswith("berth listening on unix://" + sock + " ("), s.line
    with socket.socket(socket.AF_UNIX) as c:
        c.settimeout(WAIT)
        c.connect(sock)
        c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert helpers.read_to_end(c).endswith(b"Hello, World!")
    s.stop()


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over a UNIX socket."""

    def __init__(self, path):
        super().__init__("localhost", timeout=WAIT)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(WAIT)
        self.sock.connect(self.path)


def get_json(conn):
    conn.request("GET", "/where")
    r = conn.getresponse()
    body = r.read()
    conn.close()
    assert r.status == 200, (r.status, body)
    return json.loads(body)


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("app", ["apps.wsgi_apps:environ_app", "apps.asgi_apps:scope_app"])
def test_b_given_again_serves_every_address(serve, tmp_path, app, workers):
    """gunicorn's habit: ``-b`` once per address, TCP and UNIX mixed, each served, in one
    process and under a supervisor; each request knows which address it came through (WSGI's
    SERVER_NAME/SERVER_PORT, ASGI's ``server``); the socket file is removed at exit."""
    ports = [free_port(), free_port()]
    sock = str(tmp_path / "more.sock")
    s = Server(app, "-w", workers, "-b", "127.0.0.1:%d" % ports[0], "-b", "unix:" + sock,
               "-b", "127.0.0.1:%d" % ports[1], port=False)
    try:
        # One line per address (the supervisor's, with --workers 2).
        lines = [s.line, s.listening(), s.listening()]
        urls = [re.match(r"berth listening on (\S+) \(", line).group(1) for line in lines]
        assert sorted(urls) == sorted(["http://127.0.0.1:%d" % ports[0], "unix://" + sock,
                                       "http://127.0.0.1:%d" % ports[1]]), lines
        if workers == "2":
            assert all("supervisor" in line for line in lines), lines
        wsgi = "wsgi" in app
        for port in ports:
            got = get_json(http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT))
            if wsgi:
                assert (got["SERVER_NAME"], got["SERVER_PORT"]) == ("127.0.0.1", str(port)), got
            else:
                assert got["server"] == ["127.0.0.1", port], got
        got = get_json(UnixHTTPConnection(sock))
        if wsgi:
            assert (got["SERVER_NAME"], got["SERVER_PORT"], got["REMOTE_ADDR"]) == \
                (sock, "", None), got
        else:
            assert (got["server"], got["client"]) == (None, None), got
    finally:
        assert s.stop() == 0
    assert not os.path.exists(sock)


@pytest.mark.parametrize("args, says", [
    (["-b", "127.0.0.1:1", "-b", "127.0.0.1:99999"],
     "-b 127.0.0.1:99999: 99999 is not between 0 and 65535"),
    (["-b", "127.0.0.1:1", "-b", "unix:"], "-b unix:: an empty path"),
    (["-b", "127.0.0.1:1", "-b", "fd://x"], "-b fd://x: "),
    (["-b", "127.0.0.1:99999"], "-b 127.0.0.1:99999: 99999 is not between 0 and 65535"),
    (["--timeout", "30"], "--app-timeout"),
    (["-k", "uvicorn.workers.UvicornWorker"], "--interface"),
    (["--chdir", "/tmp"], "--app-dir"),
    (["--workers-lifetime", "60"], "--limit-max-requests"),
    (["--http", "3"], "--http"),
    (["--interface", "rsgi"], "--interface"),
    (["--access-log-format", "%(nope)s"], "no atom %(nope)s"),
])
def test_a_flag_berth_does_not_share_is_one_line_naming_berths(args, says):
    line = one_line(run("apps.flask_app:app", *args), 2)
    assert says in line, line


def test_module_alone_serves_its_application_then_its_app(serve, slow_apps):
    # Django's mysite.wsgi holds `application`, as gunicorn looks for it first.
    s = serve("slowapps", "--app-dir", slow_apps)
    assert s.get("/")[1] == b"application"
    s = serve("apps.flask_app")
    assert s.get()[1] == b"Hello, World!"
    line = one_line(run("apps.wsgi_apps"), 1)
    assert "has no application or app" in line and "apps.wsgi_apps:NAME" in line, line


def test_django_project_module_alone(serve):
    helpers.need("django")
    s = serve("apps.django_app")
    r, body = s.get("/echo", "POST", b"django")
    assert (r.status, body) == (200, b"django")


def test_access_logfile_dash_is_stdout_in_one_format_for_wsgi_and_asgi(serve):
    lines = {}
    for kind, app in (("wsgi", "apps.flask_app:app"), ("asgi", "apps.asgi_apps:raw")):
        s = serve(app, "--access-logfile", "-")
        s.get(headers={"User-Agent": "habits/1", "Referer": "http://r/"})
        # stdout: the startup line, then the access line.
        line = s.out.get(timeout=WAIT)
        lines[kind] = line
        # nginx's combined, with the protocol and the seconds taken.
        m = re.match(r'127\.0\.0\.1 - - \[[^\]]+ \+0000\] "GET /hello/world HTTP/1\.1" 200 13 '
                     r'"http://r/" "habits/1" (\d+\.\d{3})$', line)
        assert m, (kind, line)
    assert lines["wsgi"].split("[")[0] == lines["asgi"].split("[")[0]


@pytest.mark.parametrize("app", ["apps.flask_app:app", "apps.asgi_apps:raw"])
def test_gunicorns_and_granians_access_formats(serve, app):
    s = serve(app, "--access-logformat", 'g %(h)s "%(r)s" %(s)s %(b)s %(H)s %(D)s')
    s.get("/hello/world?x=1")
    line = s.logged(r"^g ")
    assert re.match(r'g 127\.0\.0\.1 "GET /hello/world\?x=1 HTTP/1\.1" 200 13 HTTP/1\.1 \d+$',
                    line), line
    s = serve(app, "--log-access-fmt", "n %(addr)s %(method)s %(path)s %(query_string)s "
              "%(protocol)s %(scheme)s %(status)d %(dt_ms).3f")
    s.get("/hello/world?x=1")
    line = s.logged(r"^n ")
    assert re.match(r"n 127\.0\.0\.1 GET /hello/world x=1 HTTP/1\.1 http 200 \d+\.\d{3}$",
                    line), line


def test_error_logfile(serve, tmp_path):
    log = tmp_path / "error.log"
    s = serve("apps.asgi_apps:raw", "--error-logfile", str(log))
    s.get()
    assert s.stop() == 0
    text = log.read_text()
    assert "draining: 0 requests in flight" in text and "drained: 0 finished, 0 cut off" in text, \
        text


# -- granian and uvicorn -----------------------------------------------------------------------

def h2c_hello(port):
    """Whether an HTTP/2 client with prior knowledge gets a SETTINGS frame back."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as c:
        c.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        head = helpers.read_exact(c, 9)
        return head[3] == 4  # a SETTINGS frame


def http1_answer(port):
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as c:
        c.sendall(b"GET /hello/world HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        return helpers.read_to_end(c)


def test_granians_http_flag(serve):
    # `--http 2 main:app` took the 2 as the application.
    s = serve("--http", "2", "apps.asgi_apps:raw")
    assert "HTTP/2 only" in s.line, s.line
    assert h2c_hello(s.port)
    assert not http1_answer(s.port).startswith(b"HTTP/1.1 200")
    s = serve("apps.asgi_apps:raw", "--http", "1")
    assert "HTTP/1.1 only" in s.line, s.line
    assert http1_answer(s.port).endswith(b"Hello, World!")
    with pytest.raises((ConnectionError, OSError, AssertionError)):
        assert h2c_hello(s.port)
    s = serve("apps.asgi_apps:raw", "--http", "auto")
    assert h2c_hello(s.port) and http1_answer(s.port).endswith(b"Hello, World!")


def test_interface_asgi3(serve):
    s = serve("apps.asgi_apps:raw", "--interface", "asgi3")
    assert "ASGI" in s.line and s.get()[1] == b"Hello, World!"


def test_uvicorns_run_with_reload(tmp_path):
    helpers.need("watchfiles")
    (tmp_path / "main.py").write_text(
        "async def app(scope, receive, send):\n"
        "    await send({'type': 'http.response.start', 'status': 200, 'headers': []})\n"
        "    await send({'type': 'http.response.body', 'body': b'one'})\n")
    port = free_port()
    program = ("import berth; berth.run('main:app', port=%d, reload=True, reload_dir=[%r], "
               "access_log=True)" % (port, str(tmp_path)))
    s = Server("-c", program, command=[sys.executable], port=False, cwd=str(tmp_path))
    try:
        s.port = port
        assert s.get("/")[1] == b"one"
        (tmp_path / "main.py").write_text(
            (tmp_path / "main.py").read_text().replace("b'one'", "b'two'"))
        s.logged(r"main\.py changed: restarting")
        s.listening()
        assert s.get("/")[1] == b"two"
        s.logged(r'"GET / HTTP/1\.1" 200 3 ')
    finally:
        assert s.stop() == 0


def test_run_with_reload_needs_an_import_string():
    code = ("import berth\nasync def app(s, r, w): pass\ntry:\n"
            "    berth.run(app, reload=True)\nexcept ValueError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=WAIT)
    assert "import string" in out.stdout, (out.stdout, out.stderr)


# -- what an operator reads --------------------------------------------------------------------

def test_workers_died_replaced_and_the_drain(serve, slow_apps):
    s = Server("slowapps:slow", "--app-dir", slow_apps, "--workers", "2",
               "--shutdown-timeout", "1")
    try:
        pids = [int(re.search(r"pid (\d+);", s.listening()).group(1)) for _ in range(2)]
        os.kill(pids[0], signal.SIGKILL)
        s.logged(r"worker \d \(pid %d\) was killed by signal 9 \(SIGKILL\); restarting" % pids[0])
        s.logged(r"worker \d \(pid \d+\) started, replacing pid %d" % pids[0])
        s.listening()
        # A request the drain's deadline cuts off, and one it lets finish.
        conns = []
        for delay in ("0.3", "30"):
            c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=WAIT)
            c.request("GET", "/?" + delay)
            conns.append(c)
        time.sleep(0.2)
        s.proc.send_signal(signal.SIGTERM)
        s.logged(r"draining 2 workers \(up to 1 s")
        assert s.proc.wait(WAIT) == 0
        assert conns[0].getresponse().read() == b"late"
        text = "\n".join(s.err)
        counts = re.findall(r"drained: (\d+) finished, (\d+) cut off", text)
        assert sorted(counts) == [("0", "1"), ("1", "0")] or \
            sorted(counts) == [("0", "0"), ("1", "1")], text
        assert "stopped: every worker has exited" in text, text
    finally:
        s.stop()


def test_wsgi_drain_counts(serve, slow_apps):
    s = serve("slowapps:wsgi_slow", "--app-dir", slow_apps, "--shutdown-timeout", "0.5")
    conns = []
    for delay in ("0.2", "5"):
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=WAIT)
        c.request("GET", "/?" + delay)
        conns.append(c)
    time.sleep(0.1)
    s.proc.send_signal(signal.SIGTERM)
    s.logged(r"pid %d draining: 2 requests in flight \(up to 0\.5 s\)" % s.proc.pid)
    s.logged(r"pid %d drained: 1 finished, 1 cut off" % s.proc.pid)


def test_limit_max_requests_recycles_with_its_reason(serve):
    s = serve("apps.asgi_apps:raw", "--limit-max-requests", "1")
    first = int(re.search(r"pid (\d+);", s.listening()).group(1))
    s.get()
    s.logged(r"worker 0 \(pid %d\) recycled \(--limit-max-requests" % first)
    s.logged(r"worker 0 \(pid \d+\) started, replacing pid %d" % first)


def test_trace_logs_the_requests(serve):
    s = serve("apps.asgi_apps:raw", "--log-level", "trace")
    s.get("/hello/world")
    s.logged(r"^berth: GET /hello/world HTTP/1\.1 from 127\.0\.0\.1$")


def test_plain_http_to_the_tls_port(serve, tmp_path):
    key, cert = str(tmp_path / "k.pem"), str(tmp_path / "c.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", cert, "-days",
                    "2", "-subj", "/CN=localhost"], check=True, capture_output=True)
    s = serve("apps.asgi_apps:raw", "--ssl-certfile", cert, "--ssl-keyfile", key,
              "--log-level", "debug")
    assert s.line.startswith("berth listening on https://") and "over TLS" in s.line, s.line
    r, body = helpers.request(s.port, "GET", "/hello/world")
    assert (r.status, body) == (400, b"plain HTTP request sent to an HTTPS port\n")
    s.logged(r"127\.0\.0\.1:\d+: plain HTTP request sent to an HTTPS port: answered 400")


def test_redirect_https_sends_plain_http_to_https(serve, tmp_path):
    key, cert = str(tmp_path / "k.pem"), str(tmp_path / "c.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", cert, "-days",
                    "2", "-subj", "/CN=localhost"], check=True, capture_output=True)
    s = serve("apps.asgi_apps:raw", "--ssl-certfile", cert, "--ssl-keyfile", key,
              "--redirect-https", "--log-level", "debug")
    r, body = helpers.request(s.port, "GET", "/hello/world?x=1")
    assert r.status == 308, (r.status, body)
    assert r.getheader("Location") == "https://127.0.0.1:{}/hello/world?x=1".format(s.port)
    s.logged(r"127\.0\.0\.1:\d+: plain HTTP request sent to an HTTPS port: redirected")
    # Without a certificate there is nothing to redirect to: one line, exit 2.
    line = one_line(run("apps.asgi_apps:raw", "--redirect-https"), 2)
    assert "--redirect-https needs --ssl-certfile" in line, line


def test_date_header_help_covers_http2():
    r = run("--help")
    text = " ".join(r.stdout.split())
    said = text[text.index("--date-header, --no-date-header"):][:200]
    assert "every response, HTTP/1.1 and HTTP/2" in said, said
