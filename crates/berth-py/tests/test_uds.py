"""``python -m berth --uds PATH`` (issue 33), over a real UNIX socket with real clients (curl
``--unix-socket`` and http.client over ``AF_UNIX``): ASGI and WSGI, one process and
``--workers 2``. The client has no address over a UNIX socket (ASGI ``client`` None, no
``REMOTE_ADDR``, as uvicorn), the socket file is removed at exit, a stale one is replaced and
a live one refused in one line."""

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys

import pytest

from test_cli import HERE, WAIT, Server, one_line, run


class UnixConnection(http.client.HTTPConnection):
    """http.client over ``AF_UNIX``: the request line and Host are as over TCP."""

    def __init__(self, path):
        super().__init__("localhost", timeout=10)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def get(path, target="/"):
    conn = UnixConnection(path)
    conn.request("GET", target)
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r, body


def served(path, *args):
    s = Server(*args, "--uds", path, port=False)
    assert s.line.startswith("berth listening on unix://" + path + " "), s.line
    return s


@pytest.fixture
def sock(tmp_path):
    # A short path: sun_path holds 108 bytes, and pytest's tmp_path can be long.
    d = subprocess.run(["mktemp", "-d", "/tmp/berth-uds-XXXXXX"], capture_output=True,
                       text=True, check=True).stdout.strip()
    yield os.path.join(d, "app.sock")
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("app, key, absent", [
    ("apps.asgi_apps:scope_app", "client", None),
    ("apps.wsgi_apps:environ_app", "REMOTE_ADDR", None),
])
def test_uds_serves_asgi_and_wsgi_and_removes_its_file(sock, app, key, absent, workers):
    s = served(sock, app, "--workers", workers)
    try:
        for _ in range(4):
            r, body = get(sock, "/who")
            assert r.status == 200, body
            seen = json.loads(body)
            assert seen[key] is absent, seen
            if "REMOTE_PORT" in seen:
                assert seen["REMOTE_PORT"] is None, seen
        assert os.path.exists(sock)
        # curl, the client people use on a UNIX socket.
        if shutil.which("curl"):
            out = subprocess.run(["curl", "-s", "-i", "--unix-socket", sock,
                                  "http://localhost/curl"], capture_output=True, timeout=WAIT)
            head, _, body = out.stdout.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200"), out
            assert json.loads(body)[key] is absent
    finally:
        code = s.stop()
    assert code == 0, s.err
    assert not os.path.exists(sock), "the socket file is left behind"


def test_starlettes_request_client_is_none_over_uds(sock):
    s = served(sock, "apps.asgi_apps:starlette_app")
    try:
        r, body = get(sock, "/client")
        assert r.status == 200 and body == b"null", body
    finally:
        assert s.stop() == 0
    assert not os.path.exists(sock)


def test_a_stale_socket_file_is_replaced_and_a_live_one_refused(sock):
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(sock)
    stale.close()  # the file stays, nobody listens: what a killed server leaves
    s = served(sock, "apps.flask_app:app")
    try:
        assert get(sock, "/hello/world")[1] == b"Hello, World!"
        for workers in ("1", "2"):
            line = one_line(run("apps.flask_app:app", "--uds", sock, "--workers", workers), 1)
            assert line == "berth: address unix://%s already in use" % sock, line
        # The refused server did not take the live server's file away.
        assert get(sock, "/hello/world")[1] == b"Hello, World!"
    finally:
        assert s.stop() == 0
    assert not os.path.exists(sock)


def test_a_path_that_is_not_a_socket_is_refused_and_left_alone(sock):
    with open(sock, "w") as f:
        f.write("data")
    line = one_line(run("apps.flask_app:app", "--uds", sock), 1)
    assert "not a socket" in line, line
    with open(sock) as f:
        assert f.read() == "data"


def test_uds_and_fd_together_are_a_usage_error(sock):
    line = one_line(run("apps.flask_app:app", "--uds", sock, "--fd", "3"), 2)
    assert "--uds and --fd" in line, line


def test_the_workers_leave_the_file_to_the_parent_across_a_sighup(sock):
    s = served(sock, "apps.asgi_apps:raw", "--workers", "2")
    try:
        # The supervisor's line came first (issue 44): both workers serve before the SIGHUP.
        s.listening()
        s.listening()
        s.proc.send_signal(signal.SIGHUP)
        s.logged(r"SIGHUP: restarting 2 workers one by one")
        s.listening()
        s.listening()
        # The replaced workers drained and exited: the file is still there, and served.
        for _ in range(10):
            assert get(sock, "/")[1] == b"Hello, World!"
        assert os.path.exists(sock)
    finally:
        assert s.stop() == 0
    assert not os.path.exists(sock)


def test_fd_of_a_unix_socket_is_served_as_one(sock):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock)
    listener.listen()
    with listener:
        s = Server("apps.wsgi_apps:environ_app", "--fd", str(listener.fileno()), port=False,
                   pass_fds=(listener.fileno(),))
    try:
        assert s.line.startswith("berth listening on unix://" + sock), s.line
        seen = json.loads(get(sock, "/")[1])
        assert seen["REMOTE_ADDR"] is None
    finally:
        assert s.stop() == 0
    # Not this server's to remove: whoever bound it does.
    assert os.path.exists(sock)


def test_berth_run_takes_uds(sock):
    code = ("import berth, sys; sys.path.insert(0, %r); from apps.asgi_apps import raw; "
            "berth.run(raw, uds=%r)" % (HERE, sock))
    s = Server(command=[sys.executable, "-c", code], port=False)
    try:
        assert s.line.startswith("berth listening on unix://" + sock), s.line
        assert get(sock, "/")[1] == b"Hello, World!"
    finally:
        assert s.stop() == 0
    assert not os.path.exists(sock)


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("app, mode", [("apps.asgi_apps:scope_app", "666"),
                                       ("apps.wsgi_apps:environ_app", "0o600")])
def test_uds_permissions_set_the_socket_files_mode(sock, app, mode, workers):
    """``--uds-permissions`` (granian's; issue 43): the socket file gets that mode, whatever
    the umask (022 here, which alone leaves 755), in one process and with ``--workers`` (whose
    parent binds it); the socket serves as before."""
    old = os.umask(0o022)
    try:
        s = served(sock, app, "--workers", workers, "--uds-permissions", mode)
    finally:
        os.umask(old)
    try:
        assert oct(os.stat(sock).st_mode & 0o777) == oct(int(mode.replace("0o", ""), 8))
        r, _ = get(sock, "/mode")
        assert r.status == 200
    finally:
        assert s.stop() == 0, s.err


def test_uds_permissions_usage_errors(sock):
    for args, says in ((["--uds", sock, "--uds-permissions", "rw"], "not an octal mode"),
                       (["--uds", sock, "--uds-permissions", "1777"], "from 0 to 777"),
                       (["--uds-permissions", "660"], "--uds-permissions needs --uds")):
        assert says in one_line(run("apps.asgi_apps:scope_app", *args), 2)
