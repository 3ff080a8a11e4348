"""``python -m berth`` as uvicorn's, gunicorn's and granian's users expect it (issue 33), over
real sockets with real clients: the interface found from the application, one-line failures,
the default body limit, ``berth.run`` and ``berth-py``, and every option."""

import gzip
import http.client
import json
import os
import queue
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading

import pytest

import helpers

HERE = os.path.dirname(os.path.abspath(__file__))
WAIT = 60


class Server:
    """``python -m berth ARGS --port 0`` (unless a port or descriptor is given), its stderr
    lines gathered as they come."""

    def __init__(self, *args, env=None, port=True, pass_fds=(), cwd=HERE, command=None):
        extra = ["--port", "0"] if port else []
        self.proc = subprocess.Popen(
            [*(command or [sys.executable, "-m", "berth"]), *args, *extra], cwd=cwd,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, pass_fds=pass_fds,
            env={**os.environ, **(env or {})})
        self.err = []
        self.out = queue.Queue()
        self.err_lines = queue.Queue()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self._err), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.out.put), daemon=True).start()
        self.line = self.listening()
        # None over a UNIX socket (`berth listening on unix:///PATH (...)`).
        found = re.search(r"https?://[^ ]*:(\d+) ", self.line)
        self.port = int(found.group(1)) if found else None

    def _err(self, line):
        self.err.append(line)
        self.err_lines.put(line)

    @staticmethod
    def _pump(stream, put):
        for line in stream:
            put(line.rstrip("\n"))

    def listening(self):
        try:
            line = self.out.get(timeout=WAIT)
        except queue.Empty:
            raise AssertionError("not listening; stderr: %s" % self.err)
        assert line.startswith("berth listening on "), (line, self.err)
        return line

    def logged(self, pattern):
        """Waits for a stderr line matching ``pattern`` (an event: the line comes or the
        server ends)."""
        for line in list(self.err):
            if re.search(pattern, line):
                return line
        while True:
            try:
                line = self.err_lines.get(timeout=WAIT)
            except queue.Empty:
                raise AssertionError("no line like %r in %s" % (pattern, self.err))
            if re.search(pattern, line):
                return line

    def get(self, path="/hello/world", method="GET", body=None, headers=None):
        return helpers.request(self.port, method, path, body, headers)

    def json(self, path="/", headers=None):
        r, data = self.get(path, headers=headers)
        assert r.status == 200, (r.status, data)
        return json.loads(data)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def serve():
    made = []

    def start(*args, **kw):
        s = Server(*args, **kw)
        made.append(s)
        return s
    yield start
    for s in made:
        s.stop()


def run(*args, cwd=HERE, env=None):
    return subprocess.run([sys.executable, "-m", "berth", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=WAIT, env={**os.environ, **(env or {})})


def one_line(r, code):
    assert r.returncode == code, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    return r.stderr.strip()


# -- 1. the interface, found from the application ----------------------------------------------

@pytest.mark.parametrize("app, body", [
    ("apps.asgi_apps:fastapi_app", b"Hello, World!"),
    ("apps.asgi_apps:starlette_app", b"Hello, World!"),
    ("apps.asgi_apps:raw", b"Hello, World!"),
    ("apps.asgi_apps:asgi_object", b"Hello, World!"),
    ("apps.asgi_apps:asgi_partial", b"partial"),
    ("apps.asgi_apps:Asgi2App", b"asgi2"),
    ("apps.flask_app:app", b"Hello, World!"),
])
def test_the_interface_is_found_from_the_application(serve, app, body):
    helpers.need("fastapi")
    s = serve(app)
    assert ("ASGI" if "asgi" in app else "WSGI") in s.line, s.line
    r, data = s.get()
    assert (r.status, data) == (200, body)
    assert not any("Traceback" in line or "failed" in line for line in s.err), s.err


def test_a_factory_gives_the_application(serve):
    s = serve("apps.asgi_apps:starlette_factory", "--factory")
    assert s.get()[1] == b"Hello, World!"


def test_interface_overrides_and_a_mismatch_is_refused_at_startup_with_the_fix(serve):
    line = one_line(run("apps.asgi_apps:starlette_app", "--interface", "wsgi", "--port", "0"), 1)
    assert "ASGI application" in line and "--interface asgi" in line, line
    line = one_line(run("apps.flask_app:app", "--interface", "asgi", "--port", "0"), 1)
    assert "WSGI application" in line and "--interface wsgi" in line, line
    s = serve("apps.asgi_apps:Asgi2App", "--interface", "asgi2")
    assert s.get()[1] == b"asgi2"
    s = serve("apps.asgi_apps:raw", "--interface", "asgi")
    assert s.get()[1] == b"Hello, World!"


# -- 2. one line for every failure -------------------------------------------------------------

@pytest.mark.parametrize("args, code, says", [
    (["apps.flask_app:app", "--port", "80000"], 2, "--port: 80000 is not between 0 and 65535"),
    (["apps.flask_app:app", "--port", "x"], 2, "--port"),
    (["apps.flask_app:app", "--workers", "0"], 2, "--workers: must be at least 1"),
    (["apps.flask_app:app", "--model", "bogus"], 2, "models: single, threaded"),
    (["apps.flask_app:app", "--max-body", "lots"], 2, "not a size"),
    (["apps.flask_app:app", "--backlog", "0"], 2, "--backlog"),
    (["apps.flask_app:app", "--header", "nocolon"], 2, "NAME:VALUE"),
    (["apps.flask_app:app", "--forwarded-allow-ips", "nonsense"], 2, "--forwarded-allow-ips"),
    (["apps.flask_app:app", "--ssl-certfile", "/nonexistent.pem", "--ssl-keyfile", "k"], 2,
     "no such file"),
    (["apps.flask_app:app", "--ssl-certfile", "x"], 2, "go together"),
    (["apps.nowhere:app"], 1, "cannot import module 'apps.nowhere'"),
    (["apps.flask_app:nothing"], 1, "module 'apps.flask_app' has no attribute 'nothing'"),
    # MODULE alone serves its application or app (issue 44); one with neither is refused.
    (["apps.wsgi_apps"], 1, "has no application or app"),
    (["apps.flask_app:"], 1, "expected MODULE:APP"),
    (["apps.flask_app:__name__"], 1, "not an application"),
])
def test_bad_options_and_startup_failures_are_one_line(args, code, says):
    line = one_line(run(*args), code)
    assert says in line, line


def test_an_app_whose_import_fails_is_one_line_naming_the_error(tmp_path):
    (tmp_path / "broken.py").write_text("import json\nraise RuntimeError('no config')\n")
    line = one_line(run("broken:app", "--app-dir", str(tmp_path), "--port", "0"), 1)
    assert "RuntimeError: no config" in line and "broken.py:2" in line, line


@pytest.mark.parametrize("app", ["apps.asgi_apps:starlette_app", "apps.flask_app:app"])
@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_port_in_use_is_one_line_with_no_event_loop_noise(app, workers):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        r = run(app, "--port", str(port), "--workers", workers)
        line = one_line(r, 1)
        assert line == "berth: address 127.0.0.1:%d already in use" % port, line
        assert "Event loop is closed" not in r.stderr and "Task was destroyed" not in r.stderr


def test_units_are_read_as_berth_serve_reads_them():
    """Issue 41: one unit syntax in every front. `--shutdown-timeout 30s` failed here while
    `berth serve` took it; `--max-body 0` meant no limit here and zero bytes there (now no
    limit in both). The parsers are berth's own (berth._berth.parse_duration, parse_size)."""
    from berth.__main__ import parser
    args = parser().parse_args(["apps.flask_app:app", "--shutdown-timeout", "30s",
                                "--timeout-keep-alive", "500ms", "--max-body", "64k",
                                "--ws-max-message", "1m"])
    assert args.shutdown_timeout == 30.0
    assert args.timeout_keep_alive == 0.5
    assert args.max_body == 64 * 1024
    assert args.ws_max_message == 1024 * 1024
    for lifted in ("0", "none"):
        assert parser().parse_args(["apps.flask_app:app", "--max-body", lifted]).max_body is None
    # Bare numbers of seconds, as before.
    assert parser().parse_args(["apps.flask_app:app", "--shutdown-timeout", "2.5"]
                               ).shutdown_timeout == 2.5
    line = one_line(run("apps.flask_app:app", "--shutdown-timeout", "soon"), 2)
    assert "is not a duration" in line, line


def test_help_gives_every_option_help_and_its_default():
    r = run("--help")
    assert r.returncode == 0
    from berth.__main__ import parser
    for action in parser()._actions:
        if action.dest in ("help", "version", "app"):
            continue
        # Other servers' names for berth's options (issue 44) have the default of the option
        # they name; the refused ones are not listed.
        if action.default == "==SUPPRESS==" or action.help == "==SUPPRESS==":
            continue
        assert action.help, action.option_strings
        assert "default" in action.help or "$" in action.help, action.option_strings
        assert action.option_strings[0] in r.stdout
    assert r.stdout.count("default") >= 30


def test_model_choices_come_from_berths_registry():
    from berth._berth import models
    assert "evloop" in models() and "uring" in models()
    line = one_line(run("apps.flask_app:app", "--model", "bogus"), 2)
    assert ", ".join(models()) in line


def test_the_startup_line_says_threads_and_multiprocess_is_true_under_workers(serve):
    s = serve("apps.wsgi_apps:environ_app", "--threads", "3")
    assert "3 threads" in s.line and "workers" not in s.line, s.line
    assert s.json()["wsgi.multiprocess"] is False
    s = serve("apps.wsgi_apps:environ_app", "--workers", "2")
    s.listening()
    assert s.json()["wsgi.multiprocess"] is True


def test_version():
    import berth
    assert re.match(r"\d+\.\d+\.\d+", berth.__version__)
    r = run("--version")
    assert r.stdout.strip() == "berth " + berth.__version__


# -- 3. the body limit -------------------------------------------------------------------------

TEN_MB = bytes(range(256)) * (10 * 1024 * 1024 // 256)


@pytest.mark.parametrize("app", ["apps.flask_app:app", "apps.django_app:application"])
def test_a_10_mb_upload_reaches_flask_and_django_by_default(serve, app):
    helpers.need("django")
    s = serve(app)
    r, data = s.get("/echo", "POST", TEN_MB, {"Content-Type": "application/octet-stream"})
    assert r.status == 200
    assert data == TEN_MB


@pytest.mark.parametrize("app", ["apps.flask_app:app", "apps.asgi_apps:starlette_app"])
def test_a_413_names_the_option_that_raises_it_in_its_body_and_the_log(serve, app):
    s = serve(app, "--max-body", "1k")
    r, data = s.get("/echo", "POST", b"a" * 2000)
    assert r.status == 413
    assert b"--max-body" in data, data
    assert "--max-body" in s.logged("413")
    r, data = s.get("/echo", "POST", b"a" * 1024)
    assert (r.status, data) == (200, b"a" * 1024)


def test_max_body_none_lifts_the_limit(serve):
    s = serve("apps.flask_app:app", "--max-body", "none")
    r, data = s.get("/echo", "POST", TEN_MB)
    assert (r.status, len(data)) == (200, len(TEN_MB))


# -- 4. berth.run and berth-py -----------------------------------------------------------------

def test_berth_run_serves_an_application_object(serve):
    code = ("import berth, apps.flask_app as a; "
            "raise SystemExit(berth.run(a.app, host='127.0.0.1', port=0, threads=2, "
            "header=['X-Run:yes']))")
    s = serve(command=[sys.executable, "-c", code], port=False)
    r, data = s.get()
    assert (r.status, data, r.getheader("X-Run")) == (200, b"Hello, World!", "yes")
    assert s.stop() == 0


def test_berth_run_takes_a_string_and_refuses_unknown_options(serve):
    s = serve(command=[sys.executable, "-c",
                       "import berth; berth.run('apps.asgi_apps:raw', port=0, workers=2)"],
              port=False)
    assert s.get()[1] == b"Hello, World!"
    assert s.stop() == 0
    import berth
    with pytest.raises(TypeError, match="unknown options: bogus"):
        berth.run("apps.asgi_apps:raw", bogus=1)
    with pytest.raises(ValueError, match="--model"):
        berth.run("apps.asgi_apps:raw", model="nope")


def test_the_berth_py_script(serve):
    script = os.path.join(os.path.dirname(sys.executable), "berth-py")
    assert os.access(script, os.X_OK), script
    s = serve("apps.asgi_apps:fastapi_app", command=[script])
    assert s.get()[1] == b"Hello, World!"


# -- 5. the options ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")

    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", "key.pem",
            "-out", "cert.pem")
    # A CA, and a client certificate it signed (--ssl-ca-certs).
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=ca",
            "-keyout", "ca.key", "-out", "ca.pem")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=client", "-keyout",
            "client.key", "-out", "client.csr")
    (d / "ext").write_text("basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n")
    openssl("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "ext", "-out", "client.pem")
    return str(d / "cert.pem"), str(d / "key.pem")


def https_get(port, cert, path="/"):
    ctx = ssl.create_default_context(cafile=cert)
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=WAIT)
    conn.request("GET", path)
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r, data


@pytest.mark.parametrize("app, key", [("apps.wsgi_apps:environ_app", "wsgi.url_scheme"),
                                      ("apps.asgi_apps:scope_app", "scheme")])
def test_ssl_certfile_and_keyfile_serve_https(serve, certs, app, key):
    cert, keyfile = certs
    s = serve(app, "--ssl-certfile", cert, "--ssl-keyfile", keyfile)
    assert s.line.startswith("berth listening on https://"), s.line
    r, data = https_get(s.port, cert)
    assert r.status == 200
    assert json.loads(data)[key] == "https"


def test_ssl_ca_certs_asks_for_a_client_certificate(serve, certs):
    cert, keyfile = certs
    s = serve("apps.asgi_apps:raw", "--ssl-certfile", cert, "--ssl-keyfile", keyfile,
              "--ssl-ca-certs", os.path.join(os.path.dirname(cert), "ca.pem"))
    ctx = ssl.create_default_context(cafile=cert)
    ctx.load_cert_chain(os.path.join(os.path.dirname(cert), "client.pem"),
                        os.path.join(os.path.dirname(cert), "client.key"))
    conn = http.client.HTTPSConnection("127.0.0.1", s.port, context=ctx, timeout=WAIT)
    conn.request("GET", "/")
    assert conn.getresponse().read() == b"Hello, World!"
    conn.close()


def test_a_bad_certificate_is_one_line(tmp_path):
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    line = one_line(run("apps.asgi_apps:raw", "--ssl-certfile", str(bad), "--ssl-keyfile",
                        str(bad), "--port", "0"), 1)
    assert "bad.pem" in line, line


def test_proxy_headers_from_trusted_peers_only(serve):
    fwd = {"X-Forwarded-For": "203.0.113.7, 127.0.0.1", "X-Forwarded-Proto": "https"}
    s = serve("apps.wsgi_apps:environ_app", "--proxy-headers")
    got = s.json(headers=fwd)
    assert (got["REMOTE_ADDR"], got["wsgi.url_scheme"]) == ("203.0.113.7", "https")
    s = serve("apps.asgi_apps:scope_app", "--proxy-headers")
    got = s.json(headers={"Forwarded": 'for="[2001:db8::1]:4711";proto=https'})
    assert (got["client"][0], got["scheme"]) == ("2001:db8::1", "https")
    got = s.json(headers=fwd)
    assert (got["client"][0], got["scheme"]) == ("203.0.113.7", "https")
    # Not from a trusted peer: ignored.
    s = serve("apps.asgi_apps:scope_app", "--proxy-headers", "--forwarded-allow-ips", "10.0.0.0/8")
    got = s.json(headers=fwd)
    assert (got["client"][0], got["scheme"]) == ("127.0.0.1", "http")
    # Off by default.
    s = serve("apps.wsgi_apps:environ_app")
    assert s.json(headers=fwd)["REMOTE_ADDR"] == "127.0.0.1"


def test_root_path(serve):
    s = serve("apps.wsgi_apps:environ_app", "--root-path", "/api")
    got = s.json("/api/items")
    assert (got["SCRIPT_NAME"], got["PATH_INFO"]) == ("/api", "/items")
    s = serve("apps.asgi_apps:scope_app", "--root-path", "/api")
    got = s.json("/items")
    assert (got["root_path"], got["path"]) == ("/api", "/api/items")


@pytest.mark.parametrize("app", ["apps.flask_app:app", "apps.asgi_apps:starlette_app"])
def test_access_log_on_and_off(serve, app):
    s = serve(app, "--access-log")
    s.get("/hello/world?x=1")
    line = s.logged(r'"GET /hello/world\?x=1 HTTP/1.1" 200')
    assert line.startswith("127.0.0.1"), line
    s = serve(app, "--no-access-log")
    s.get("/hello/world")
    s.get("/boom")  # the failure is logged, not the access
    s.logged("failed|RuntimeError")
    assert not any("GET /hello/world" in line for line in s.err), s.err


def test_log_config_json_and_ini(serve, tmp_path):
    access_file = tmp_path / "access.log"
    cfg = tmp_path / "log.json"
    cfg.write_text(json.dumps({
        "version": 1, "disable_existing_loggers": False,
        "formatters": {"f": {"format": "ACCESS %(message)s"}},
        "handlers": {"h": {"class": "logging.FileHandler", "filename": str(access_file),
                           "formatter": "f"}},
        "loggers": {"berth.access": {"handlers": ["h"], "level": "INFO", "propagate": False}},
    }))
    s = serve("apps.asgi_apps:raw", "--log-config", str(cfg), "--access-log")
    s.get()
    assert s.stop() == 0
    assert 'ACCESS 127.0.0.1' in access_file.read_text()
    error_file = tmp_path / "error.log"
    ini = tmp_path / "log.ini"
    ini.write_text(
        "[loggers]\nkeys=root,error\n[handlers]\nkeys=file\n[formatters]\nkeys=f\n"
        "[logger_root]\nhandlers=\n[logger_error]\nqualname=berth.error\nhandlers=file\n"
        "level=INFO\npropagate=0\n"
        "[handler_file]\nclass=FileHandler\nargs=(%r,)\nformatter=f\n"
        "[formatter_f]\nformat=ERR %%(message)s\n" % str(error_file))
    s = serve("apps.flask_app:app", "--log-config", str(ini), "--max-body", "10")
    assert s.get("/echo", "POST", b"x" * 20)[0].status == 413
    assert s.stop() == 0
    assert "ERR a request body over the limit" in error_file.read_text()


def test_log_level_hides_what_is_below_it(serve):
    s = serve("apps.asgi_apps:raw", "--limit-max-requests", "1")
    s.get()
    s.logged("served 1 requests")
    s = serve("apps.asgi_apps:raw", "--limit-max-requests", "1", "--log-level", "warning")
    s.get()
    s.listening()  # the replacement
    assert not any("served" in line for line in s.err), s.err


def test_timeout_keep_alive_closes_an_idle_connection(serve):
    s = serve("apps.asgi_apps:raw", "--timeout-keep-alive", "0.2")
    conn = socket.create_connection(("127.0.0.1", s.port), timeout=WAIT)
    conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    got = b""
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            break
        got += chunk
    # Answered, then closed by the server once idle (recv saw the end, not a timeout).
    assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"Hello, World!")
    conn.close()


# Issue 33: the 503 follows --no-server-header as every other answer does; the blocking models
# (a thread or a process per connection) served past the limit without a word.
@pytest.mark.parametrize("app, model", [
    ("apps.asgi_apps:raw", "evloop"), ("apps.asgi_apps:raw", "threaded"),
    ("apps.flask_app:app", "evloop"), ("apps.flask_app:app", "threaded"),
    ("apps.flask_app:app", "forked"),
])
@pytest.mark.parametrize("server", [True, False], ids=["server-header", "no-server-header"])
def test_limit_concurrency_answers_503_beyond_it(serve, app, model, server):
    s = serve(app, "--limit-concurrency", "1", "--model", model,
              "--server-header" if server else "--no-server-header")
    held = http.client.HTTPConnection("127.0.0.1", s.port, timeout=WAIT)
    held.request("GET", "/hello/world")
    assert held.getresponse().read() == b"Hello, World!"
    head = raw_head(s.port)
    assert head.startswith(b"http/1.1 503"), head
    assert (b"\r\nserver: berth" in head) == server, head
    held.close()


@pytest.mark.parametrize("model", ["forked", "prefork"])
def test_asgi_in_a_forking_model_is_refused_at_startup(model):
    # Its children had no event loop: every request waited forever.
    helpers.need("starlette")
    said = one_line(run("apps.asgi_apps:raw", "--model", model, "--port", "0"), 1)
    assert "--workers" in said and model in said, said


def test_backlog_reaches_the_listening_socket(serve):
    for args in ((), ("--workers", "2")):
        s = serve("apps.asgi_apps:raw", "--backlog", "7", *args)
        out = subprocess.run(["ss", "-ltnH", "sport = :%d" % s.port], capture_output=True,
                             text=True).stdout
        # A listening socket's Send-Q is its backlog.
        assert out.split()[2] == "7", out


def test_limit_max_requests_replaces_the_worker_with_jitter(serve):
    s = serve("apps.flask_app:app", "--limit-max-requests", "2", "--limit-max-requests-jitter",
              "3")
    for _ in range(12):
        r, data = s.get()
        assert (r.status, data) == (200, b"Hello, World!")
    n = int(re.search(r"served (\d+) requests", s.logged("served")).group(1))
    assert 2 <= n <= 5, n
    s.listening()


def test_header_adds_fields_the_app_does_not_set(serve):
    for app in ("apps.flask_app:app", "apps.asgi_apps:raw"):
        s = serve(app, "--header", "X-Frame-Options: DENY", "--header", "Content-Type:x/y")
        r, _ = s.get()
        assert r.getheader("X-Frame-Options") == "DENY"
        assert r.getheader("Content-Type") != "x/y"


def test_server_and_date_headers_stay_on(serve):
    s = serve("apps.asgi_apps:raw", "--server-header", "--date-header")
    r, _ = s.get()
    assert r.getheader("Server") == "berth" and r.getheader("Date")


def raw_head(port, target="/hello/world"):
    """The response head to one GET, as the bytes on the wire."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % target.encode())
        data = helpers.read_to_end(c)
    return data.split(b"\r\n\r\n", 1)[0].lower()


@pytest.mark.parametrize("app", ["apps.asgi_apps:raw", "apps.flask_app:app"])
@pytest.mark.parametrize("server, date", [(False, True), (True, False), (False, False)])
def test_no_server_header_and_no_date_header_leave_them_out(serve, app, server, date):
    flags = ["--server-header" if server else "--no-server-header",
             "--date-header" if date else "--no-date-header"]
    s = serve(app, *flags)
    for _ in range(2):
        head = raw_head(s.port)
        assert head.startswith(b"http/1.1 200"), head
        assert (b"\r\nserver:" in head) == server, head
        assert (b"\r\ndate:" in head) == date, head
    # Errors berth answers itself (404 from the app's router aside, a 400 from the engine).
    with socket.create_connection(("127.0.0.1", s.port), timeout=10) as c:
        c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")
        head = helpers.read_to_end(c).split(b"\r\n\r\n", 1)[0].lower()
    assert head.startswith(b"http/1.1 400"), head
    assert (b"\r\nserver:" in head) == server and (b"\r\ndate:" in head) == date, head


def test_fd_serves_a_socket_passed_in(serve):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        s = serve("apps.asgi_apps:raw", "--fd", str(sock.fileno()), port=False,
                  pass_fds=(sock.fileno(),))
    assert s.port == port
    assert s.get()[1] == b"Hello, World!"


def test_systemd_socket_activation(serve):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        # The descriptor as 3 and LISTEN_PID the server's own pid, as systemd passes them.
        code = ("import os, sys; os.dup2(%d, 3); os.environ['LISTEN_PID'] = str(os.getpid()); "
                "os.environ['LISTEN_FDS'] = '1'; os.execv(sys.executable, [sys.executable, "
                "'-m', 'berth', 'apps.flask_app:app'])" % sock.fileno())
        s = serve(command=[sys.executable, "-c", code], port=False, pass_fds=(sock.fileno(),))
    assert s.port == port
    assert s.get()[1] == b"Hello, World!"


def test_reload_restarts_on_a_change(serve, tmp_path):
    helpers.need("watchfiles")
    app = tmp_path / "live.py"
    app.write_text("def app(environ, start_response):\n"
                   "    start_response('200 OK', [])\n    return [b'one']\n")
    s = serve("live:app", "--app-dir", str(tmp_path), "--reload")
    assert s.get("/")[1] == b"one"
    s.logged("watching")
    app.write_text("def app(environ, start_response):\n"
                   "    start_response('200 OK', [])\n    return [b'two']\n")
    s.logged("changed: restarting")
    s.port = int(re.search(r"://[^ ]*:(\d+) ", s.listening()).group(1))
    assert s.get("/")[1] == b"two"
    assert s.stop() == 0


def test_reload_dir_watches_the_directories_given(serve, tmp_path):
    helpers.need("watchfiles")
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "greeting.txt").write_text("hello")
    (tmp_path / "configured.py").write_text(
        "import os\n"
        "GREETING = open(os.path.join(os.path.dirname(__file__), 'conf', 'greeting.txt')).read()\n"
        "def app(environ, start_response):\n"
        "    start_response('200 OK', [])\n    return [GREETING.encode()]\n")
    s = serve("configured:app", "--app-dir", str(tmp_path), "--reload", "--reload-dir", str(conf))
    assert s.get("/")[1] == b"hello"
    s.logged("watching %s" % re.escape(str(conf)))
    (conf / "greeting.txt").write_text("bonjour")
    s.logged("greeting.txt changed: restarting")
    s.port = int(re.search(r"://[^ ]*:(\d+) ", s.listening()).group(1))
    assert s.get("/")[1] == b"bonjour"
    assert s.stop() == 0


# -- WSGI in every model (the application's threads, started in each process that serves) ------

@pytest.mark.parametrize("model", __import__("berth._berth", fromlist=["models"]).models())
def test_wsgi_serves_in_every_model(serve, model):
    s = serve("apps.flask_app:app", "--model", model, "--threads", "2")
    for _ in range(3):
        r, body = s.get()
        assert r.status == 200 and body == b"Hello, World!", (model, r.status, body)
    r, body = s.get("/reverse", method="POST", body=b'{"a": "hello"}',
                    headers={"Content-Type": "application/json"})
    assert r.status == 200 and json.loads(body) == {"data": ["olleh"]}, (model, body)
    assert s.stop() == 0, (model, s.err)


# -- SIGTERM with an application's own thread (issue 33) ---------------------------------------

@pytest.mark.parametrize("extra", [(), ("--workers", "2")], ids=["one-process", "workers"])
def test_sigterm_drains_when_the_application_started_a_thread_at_import(serve, extra):
    # The thread had SIGTERM unblocked: the kernel gave it the signal, whose default action
    # ended the server at once (exit -15, nothing drained) instead of berth's drain (exit 0).
    for _ in range(3):
        s = serve("apps.import_thread:app", "--interface", "wsgi", *extra)
        r, body = s.get()
        assert (r.status, body) == (200, b"Hello, World!")
        assert s.stop() == 0, s.err


@pytest.mark.parametrize("app,path", [("apps.flask_app:app", "/reverse"),
                                      ("apps.asgi_apps:starlette_app", "/echo")])
def test_compress_encodes_what_the_client_accepts(serve, app, path):
    """Issue 34: python -m berth --compress, as berth serve's: a compressible body above the
    threshold comes back gzip-encoded (Content-Encoding, Vary, the encoded length) when the
    client accepts gzip, br when it prefers br; plain (with Vary) when it accepts nothing; a
    small body plain without Vary; and nothing is encoded without --compress."""
    body = json.dumps({"a": "hello berth " * 400, "b": "x"}).encode()
    asked = {"Content-Type": "application/json", "Accept-Encoding": "gzip"}
    s = serve(app, "--compress")
    r, data = s.get(path, "POST", body, asked)
    assert r.status == 200, data
    assert r.getheader("Content-Encoding") == "gzip"
    assert r.getheader("Vary") == "Accept-Encoding"
    assert int(r.getheader("Content-Length")) == len(data)
    plain = gzip.decompress(data)
    assert len(data) * 4 < len(plain), (len(data), len(plain))

    r, same = s.get(path, "POST", body, {"Content-Type": "application/json"})
    assert r.getheader("Content-Encoding") is None
    assert r.getheader("Vary") == "Accept-Encoding"
    assert same == plain

    brotli = helpers.need("brotli")
    r, data = s.get(path, "POST", body, {**asked, "Accept-Encoding": "gzip;q=0.5, br"})
    assert r.getheader("Content-Encoding") == "br"
    assert brotli.decompress(data) == plain

    small = json.dumps({"a": "hi"}).encode()
    r, data = s.get(path, "POST", small, asked)
    assert r.getheader("Content-Encoding") is None and r.getheader("Vary") is None
    assert len(data) < 100

    off = serve(app)
    r, data = off.get(path, "POST", body, asked)
    assert r.getheader("Content-Encoding") is None and data == plain


def test_compress_encodes_a_streamed_asgi_body_message_by_message(serve):
    """Issue 34: under --compress a streamed ASGI body (an event stream) is compressed too,
    each message flushed: the client decodes the first event while the application still
    waits for it to say so, then the rest and a complete gzip stream. A stream under the
    application's own content-length, or a HEAD, goes as sent (with Vary)."""
    import http.client
    import zlib

    s = serve("apps.asgi_apps:starlette_app", "--interface", "asgi", "--compress")
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
    conn.request("GET", "/events?count=4&id=a", headers={"Accept-Encoding": "gzip"})
    r = conn.getresponse()
    assert r.status == 200
    assert r.getheader("Content-Encoding") == "gzip"
    assert r.getheader("Vary") == "Accept-Encoding"
    assert r.getheader("Transfer-Encoding") == "chunked"
    gunzip = zlib.decompressobj(31)
    got = b""
    while b"event 0" not in got:
        piece = r.read1(65536)
        assert piece, "the stream ended before its first event decoded"
        got += gunzip.decompress(piece)
    assert b"event 1" not in got, "the second event is held until the first is seen"
    r2, ok = s.get("/events-seen?id=a")
    assert ok == b"ok"
    rest = r.read()
    got += gunzip.decompress(rest)
    assert gunzip.eof, "a complete gzip stream"
    assert got == b"".join(b"data: event %d %s\n\n" % (i, b"x" * 200) for i in range(4))
    conn.close()

    s.get("/events-seen?id=b")
    r, data = s.get("/events?count=3&id=b&length=1", headers={"Accept-Encoding": "gzip"})
    assert r.getheader("Content-Encoding") is None and r.getheader("Vary") == "Accept-Encoding"
    assert int(r.getheader("Content-Length")) == len(data) and data.count(b"data: ") == 3

    r, data = s.get("/events?count=3&id=b", "HEAD", headers={"Accept-Encoding": "gzip"})
    assert r.getheader("Content-Encoding") is None and data == b""
