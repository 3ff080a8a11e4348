"""What the tests share: starting `python -m berth` on a free port and asking it something with
http.client; FI's framing for the berth.fi tests."""

import http.client
import importlib
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def need(module):
    """Imports ``module``, which a test needs; a missing one fails the test, naming it (never a
    skip that passes green): scripts/test installs every one into target/py-venv."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise AssertionError("this test needs the Python module {!r} ({}); scripts/test installs "
                             "it into target/py-venv".format(module, e)) from e


def start(app, *args, env=None):
    """Starts ``python -m berth APP --port 0 ARGS...`` in this directory; returns the process,
    its port and the line it printed once listening."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "berth", app, "--port", "0", *args],
        cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **(env or {})},
    )
    line = proc.stdout.readline()
    assert line.startswith("berth listening on http://"), line + proc.stderr.read()
    port = int(line.split("http://", 1)[1].split(" ", 1)[0].rsplit(":", 1)[1])
    return proc, port, line


def stop(proc):
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def request(port, method, path, body=None, headers=None):
    """One request on a connection of its own: the response and its body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(method, path, body=body, headers=headers or {})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r, data


# --- FI's wire: an 8-byte little-endian length, then the payload -------------------------------
def frame(payload: bytes) -> bytes:
    return struct.pack("<Q", len(payload)) + payload


def read_exact(s, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed after {} of {} bytes".format(len(out), n))
        out += chunk
    return out


def read_to_end(s) -> bytes:
    """Reads from socket ``s`` until its peer closes it."""
    out = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return out
        out += chunk
