"""``python -m berth --workers N`` (issue 29), over real sockets: the parent holds the port and
supervises its workers as gunicorn's and uvicorn's users expect. A worker that dies is logged
with its cause and replaced (with a back-off while it keeps dying young), the port serving
meanwhile; SIGTERM drains the live workers and exits 0, even while a worker is being replaced;
no worker is left a zombie or an orphan. A port another server holds is refused before any
worker starts, with one line and exit 1; a worker that cannot start stops the server (exit 1),
it is not restarted in a loop."""

import http.client
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

import helpers

HERE = os.path.dirname(os.path.abspath(__file__))

APPS = {
    "wsgi": ("apps.flask_app:app", "--interface", "wsgi", "--threads", "2"),
    "asgi": ("apps.asgi_apps:raw", "--interface", "asgi"),
}

WAIT = 30.0


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def children(pid):
    """The processes whose parent is ``pid``: {pid: ps state}."""
    out = subprocess.run(["ps", "-o", "pid=,stat=", "--ppid", str(pid)],
                         capture_output=True, text=True).stdout
    return {int(p): st for p, st in (line.split() for line in out.splitlines())}


def await_(what, pick, timeout=WAIT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pick()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError("waited %.0f s for %s" % (timeout, what))


class Workers:
    """``python -m berth APP --workers N --port PORT``, its stdout lines in a queue and its
    stderr lines in a list, as they come."""

    def __init__(self, kind, workers=2, port=0, *extra):
        if kind == "asgi":
            helpers.need("starlette")
        else:
            helpers.need("flask")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "berth", *APPS[kind], "--workers", str(workers),
             "--port", str(port), *extra],
            cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.out = queue.Queue()
        self.err = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.out.put),
                         daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.err.append),
                         daemon=True).start()
        self.port = None
        try:
            # The supervisor's line (issue 44), then one per worker, each with its pid.
            self.listening(who="supervisor, pid %d;" % self.proc.pid)
            for _ in range(workers):
                self.listening()
            self.pids = await_("%d workers" % workers,
                               lambda: len(children(self.proc.pid)) == workers
                               and children(self.proc.pid))
        except BaseException:
            self.stop()
            raise

    @staticmethod
    def _pump(stream, put):
        for line in stream:
            put(line.rstrip("\n"))

    def listening(self, timeout=WAIT, who="worker "):
        """Waits for the next worker's ``berth listening`` line (or the supervisor's: ``who``);
        checks the port is the same."""
        try:
            line = self.out.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no worker listening; stderr: %s" % self.err)
        assert line.startswith("berth listening on http://"), line
        assert " (" + who in line, line
        port = int(line.split("http://", 1)[1].split(" ", 1)[0].rsplit(":", 1)[1])
        assert self.port in (None, port)
        self.port = port
        return port

    def logged(self, pattern, timeout=WAIT):
        """Waits for a stderr line matching ``pattern``; its match."""
        def find():
            for line in list(self.err):
                m = re.search(pattern, line)
                if m:
                    return m
        return await_("a log line like %r (stderr: %s)" % (pattern, self.err), find, timeout)

    def workers(self):
        return children(self.proc.pid)

    def stop(self):
        """Ends the server and its workers (SIGTERM, then SIGKILL for what is left)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def started():
    made = []

    def start(*args, **kw):
        w = Workers(*args, **kw)
        made.append(w)
        return w
    yield start
    for w in made:
        w.stop()


class Load:
    """Threads asking ``GET /hello/world`` without pause, a connection per request, each
    recording (started at, ok)."""

    def __init__(self, port, threads=4):
        self.port = port
        self.results = []
        self.going = True
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]
        for t in self.threads:
            t.start()

    def _run(self):
        while self.going:
            at = time.monotonic()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                conn.request("GET", "/hello/world")
                ok = conn.getresponse().read() == b"Hello, World!"
                conn.close()
            except OSError:
                ok = False
            self.results.append((at, ok))

    def stop(self):
        self.going = False
        for t in self.threads:
            t.join(20)
        return self.results


@pytest.mark.parametrize("kind", sorted(APPS))
def test_a_killed_worker_is_logged_and_replaced_while_the_port_serves(kind, started):
    w = started(kind)
    load = Load(w.port)
    await_("requests served", lambda: sum(ok for _, ok in load.results) > 50)
    victim = sorted(w.pids)[0]
    killed_at = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    # Logged with its cause.
    w.logged(r"worker \d+ \(pid %d\) .*killed by signal 9 \(SIGKILL\)" % victim)
    logged_at = time.monotonic()
    # Replaced: a new worker says it is listening, and the parent has N children again.
    w.listening()
    replaced_at = time.monotonic()
    now = await_("2 workers again",
                 lambda: len(w.workers()) == 2 and victim not in w.workers() and w.workers())
    served_after = lambda t0: sum(ok for at, ok in load.results if at > t0)
    await_("requests after the replacement", lambda: served_after(replaced_at) > 50)
    results = load.stop()
    # The port served all along: requests begun while the worker was down were answered, and
    # every request begun after the death was known succeeded; only requests the dead worker
    # held could fail (one per load thread at most).
    assert any(ok for at, ok in results if killed_at < at < replaced_at), "nothing served while down"
    assert all(ok for at, ok in results if at > logged_at)
    assert sum(not ok for _, ok in results) <= len(load.threads)
    # No zombie.
    assert not any(st.startswith("Z") for st in w.workers().values()), w.workers()
    w.proc.send_signal(signal.SIGTERM)
    assert w.proc.wait(WAIT) == 0, w.err
    for pid in now:
        assert not alive(pid)
    assert not any("Traceback" in line for line in w.err), w.err


def test_a_worker_that_keeps_dying_is_restarted_with_a_growing_back_off(started):
    w = started("wsgi")
    delays = []
    for _ in range(4):
        victim = max(w.workers())
        os.kill(victim, signal.SIGKILL)
        m = w.logged(r"\(pid %d\) .*SIGKILL.*restarting in ([\d.]+) s" % victim)
        delays.append(float(m.group(1)))
        w.listening()
        await_("2 workers", lambda: len(w.workers()) == 2 and victim not in w.workers())
        # The other worker served meanwhile.
        conn = http.client.HTTPConnection("127.0.0.1", w.port, timeout=10)
        conn.request("GET", "/hello/world")
        assert conn.getresponse().read() == b"Hello, World!"
        conn.close()
    # Each early death waits longer than the one before (never a fork loop).
    assert delays == sorted(delays) and delays[-1] > delays[0], delays
    w.proc.send_signal(signal.SIGTERM)
    assert w.proc.wait(WAIT) == 0, w.err


@pytest.mark.parametrize("kind", sorted(APPS))
def test_sigterm_while_a_worker_is_being_replaced_exits_0_and_leaves_no_worker(kind, started):
    w = started(kind)
    pids = set(w.pids)
    victim = min(pids)
    os.kill(victim, signal.SIGKILL)
    w.logged(r"\(pid %d\)" % victim)
    # During the restart's back-off (or the new worker's start): nothing is left behind.
    seen = pids | set(w.workers())
    w.proc.send_signal(signal.SIGTERM)
    assert w.proc.wait(WAIT) == 0, w.err
    for pid in seen:
        assert not alive(pid)
    assert not any("Traceback" in line for line in w.err), w.err


@pytest.mark.parametrize("kind", sorted(APPS))
def test_killing_every_worker_leaves_the_port_serving(kind, started):
    w = started(kind)
    first = set(w.pids)
    for pid in first:
        os.kill(pid, signal.SIGKILL)
    # Connections made while no worker lives wait in the port's queue, answered once the
    # replacements are up: the port never refuses.
    conn = http.client.HTTPConnection("127.0.0.1", w.port, timeout=WAIT)
    conn.request("GET", "/hello/world")
    assert conn.getresponse().read() == b"Hello, World!"
    conn.close()
    w.listening()
    w.listening()
    await_("2 new workers", lambda: len(w.workers()) == 2 and not first & set(w.workers()))
    assert w.proc.poll() is None
    w.proc.send_signal(signal.SIGTERM)
    assert w.proc.wait(WAIT) == 0, w.err


@pytest.mark.parametrize("kind", sorted(APPS))
@pytest.mark.parametrize("reuse_port", [True, False], ids=["reuseport", "plain"])
def test_a_port_another_server_holds_is_refused_before_any_worker_starts(kind, reuse_port):
    # Another server's listener: berth serve's have SO_REUSEPORT, which a worker binding with
    # SO_REUSEPORT would join without a word.
    with socket.socket() as other:
        if reuse_port:
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        for workers in ("2", "1"):
            r = subprocess.run(
                [sys.executable, "-m", "berth", *APPS[kind], "--workers", workers,
                 "--port", str(port)],
                cwd=HERE, capture_output=True, text=True, timeout=WAIT)
            assert r.returncode == 1, (workers, r.stdout, r.stderr)
            assert r.stderr.strip() == "berth: address 127.0.0.1:%d already in use" % port, r.stderr
            assert "berth listening" not in r.stdout


def test_a_worker_that_cannot_start_stops_the_server_with_its_cause():
    helpers.need("starlette")
    r = subprocess.run(
        [sys.executable, "-m", "berth", "apps.asgi_apps:failing_startup", "--interface", "asgi",
         "--workers", "2", "--port", "0"],
        cwd=HERE, capture_output=True, text=True, timeout=WAIT)
    assert r.returncode == 1, r.stderr
    assert "no database" in r.stderr
    assert "Traceback" not in r.stderr
    # Not restarted in a loop: each worker's failure at most once.
    assert r.stderr.count("no database") <= 2, r.stderr


def test_usage_errors_exit_2_with_one_line():
    for args in (["--workers", "0"], ["--workers", "x"], ["--port", "70000"], []):
        r = subprocess.run([sys.executable, "-m", "berth", *(["apps.asgi_apps:raw"] if args else []), *args],
                           cwd=HERE, capture_output=True, text=True, timeout=WAIT)
        assert r.returncode == 2, r.stderr
        assert "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert r.stderr.startswith("python -m berth: error:"), r.stderr


# A request already on its way to a worker told to drain is answered: berth's event loop
# serves a connection accepted and not yet answered if its request comes within the drain's
# grace (crates/berth/src/drive/evloop/mod.rs, `arm`; Rust: evloop.rs
# a_drain_answers_a_request_sent_on_a_connection_accepted_before_it).
@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
def test_sighup_restarts_every_worker_one_by_one_with_no_failed_request(kind, started):
    w = started(kind)
    old = set(w.pids)
    load = Load(w.port)
    await_("requests served", lambda: sum(ok for _, ok in load.results) > 50)
    w.proc.send_signal(signal.SIGHUP)
    w.logged(r"SIGHUP: restarting 2 workers one by one")
    w.listening()
    w.listening()
    now = await_("2 new workers", lambda: len(w.workers()) == 2 and not old & set(w.workers())
                 and w.workers())
    hup_done = time.monotonic()
    await_("requests after the restart",
           lambda: sum(ok for at, ok in load.results if at > hup_done) > 50)
    results = load.stop()
    assert all(ok for _, ok in results), sum(not ok for _, ok in results)
    for pid in old:
        assert not alive(pid)
    w.proc.send_signal(signal.SIGTERM)
    assert w.proc.wait(WAIT) == 0, w.err
    for pid in now:
        assert not alive(pid)


def test_sigttin_adds_a_worker_and_sigttou_drains_one(started):
    w = started("asgi")
    w.proc.send_signal(signal.SIGTTIN)
    w.logged(r"SIGTTIN: 3 workers")
    w.listening()
    three = await_("3 workers", lambda: len(w.workers()) == 3 and w.workers())
    w.proc.send_signal(signal.SIGTTOU)
    w.logged(r"SIGTTOU: 2 workers")
    two = await_("2 workers", lambda: len(w.workers()) == 2 and w.workers())
    assert set(two) < set(three)
    # The last one is never drained.
    w.proc.send_signal(signal.SIGTTOU)
    w.logged(r"SIGTTOU: 1 workers")
    w.proc.send_signal(signal.SIGTTOU)
    w.logged(r"one worker left")
    conn = http.client.HTTPConnection("127.0.0.1", w.port, timeout=10)
    conn.request("GET", "/hello/world")
    assert conn.getresponse().read() == b"Hello, World!"
    conn.close()
    assert not any("Traceback" in line for line in w.err), w.err
    w.proc.send_signal(signal.SIGTERM)
    assert w.proc.wait(WAIT) == 0, w.err
