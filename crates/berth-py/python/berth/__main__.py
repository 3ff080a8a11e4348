"""``python -m berth MODULE:APP``: serve a WSGI or ASGI application on berth's HTTP engine.

Usage: python -m berth MODULE:APP [--host 127.0.0.1] [--port 8000] [--interface asgi|wsgi]
                                   [--workers N] [--threads T] [--io-threads N] [--model evloop]
                                   [--lifespan auto|on|off] [--loop auto|asyncio|uvloop]

uvicorn's and granian's conventions: ``--workers`` is the number of processes sharing the port.
WSGI (the default) runs the application on berth's worker pool, ``--threads`` threads per
process (berth's ``-w``). ASGI runs it on an asyncio loop (uvloop when installed) in the main
thread, fed by ``--io-threads`` berth event loops (see ``berth.asgi``). berth's limits, timeouts
and graceful shutdown (SIGTERM or SIGINT: requests in flight are answered) apply.

With ``--workers`` above 1 this process binds the port (refused, before any worker starts, if
another server listens there), forks the workers, which share it, and supervises them as
gunicorn's and uvicorn's users expect: a worker that dies is logged with its cause and replaced
(at once if it had lived 10 s, else after a back-off that doubles, 0.2 s, 0.4 s, ... up to 5 s,
while it keeps dying young, so that a crashing application cannot make a fork loop); the port
takes connections meanwhile. A worker that fails to start (it exits with an error before serving)
stops the server: exit 1, with the worker's own message. SIGTERM or SIGINT drains the live
workers and exits 0. A worker whose parent is killed outright drains and exits too.
"""

import argparse
import importlib
import os
import selectors
import signal
import socket
import sys
import time

from ._berth import follow_parent, listen_shared, serve_wsgi

#: The first delay before replacing a worker that died young; doubled for each further death
#: of a young worker in the same slot, up to RESTART_MAX.
RESTART_MIN = 0.1
RESTART_MAX = 5.0
#: A worker that lived this long was healthy: its death is answered by a new one at once.
HEALTHY = 10.0
#: After the drain's timeout, how long workers get before SIGKILL.
STOP_GRACE = 5.0


def load(target: str, app_dir: str = "."):
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ValueError("expected MODULE:APP, got {!r}".format(target))
    sys.path.insert(0, os.path.abspath(app_dir))
    module = importlib.import_module(module_name)
    app = module
    for part in attr.split("."):
        app = getattr(app, part)
    return app


def said(e: BaseException) -> str:
    """What went wrong, in berth's words: an ``OSError`` from berth carries its errno (so
    Python picks the class), and its text without the ``[Errno N]`` Python would put first."""
    if isinstance(e, OSError) and e.errno is not None and e.strerror:
        return e.strerror
    return str(e)


def log(message: str) -> None:
    sys.stderr.write("berth: {}\n".format(message))
    sys.stderr.flush()


def death(status: int) -> str:
    """How a process ended, from its wait status: ``exited with status 3``, ``was killed by
    signal 9 (SIGKILL)``."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = "unknown"
        core = ", core dumped" if os.WCOREDUMP(status) else ""
        return "was killed by signal {} ({}{})".format(number, name, core)
    return "exited with status {}".format(os.waitstatus_to_exitcode(status))


class Slot:
    """One of the N workers: the process serving it now, if any, and its restart back-off."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.pid = None
        self.ready_fd = None  # the pipe the worker says it serves on (a byte, then EOF)
        self.serving = False
        self.started = 0.0
        self.backoff = RESTART_MIN
        self.restart_at = None

    def name(self) -> str:
        return "worker {} (pid {})".format(self.index, self.pid)


class Supervisor:
    """Forks ``count`` workers that each run ``serve(ready)`` on the port this process holds,
    and keeps them going until SIGTERM or SIGINT (see the module docs). Signals and worker
    deaths wake one loop (``signal.set_wakeup_fd``), which also watches each new worker's pipe
    for the byte that says it serves."""

    def __init__(self, count: int, serve, listener: socket.socket, shutdown_timeout: float):
        self.slots = [Slot(i) for i in range(count)]
        self.serve = serve
        self.listener = listener
        self.shutdown_timeout = shutdown_timeout
        self.parent = os.getpid()
        self.selector = selectors.DefaultSelector()
        self.stop_asked = False
        self.stopping = False
        self.stop_deadline = None
        self.code = 0

    # -- the parent's loop ---------------------------------------------------------------------

    def run(self) -> int:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        self.wake = (wake_r, wake_w)
        self.selector.register(wake_r, selectors.EVENT_READ, None)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        # A Python handler for each, so that each writes the wake-up byte.
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self.on_stop)
        signal.signal(signal.SIGINT, self.on_stop)
        try:
            for slot in self.slots:
                self.spawn(slot)
            while self.live() or not self.stopping:
                self.turn()
        finally:
            # Whatever happened here, no worker is left behind serving for nobody.
            for slot in self.slots:
                if slot.pid is not None:
                    self.kill(slot, signal.SIGKILL)
                    self.reap(block=True)
        return self.code

    def live(self):
        return [s for s in self.slots if s.pid is not None]

    def turn(self) -> None:
        now = time.monotonic()
        deadlines = [s.restart_at for s in self.slots if s.restart_at is not None]
        if self.stop_deadline is not None:
            deadlines.append(self.stop_deadline)
        timeout = max(0.0, min(deadlines) - now) if deadlines else None
        for key, _ in self.selector.select(timeout):
            if key.data is None:
                try:
                    while os.read(key.fd, 512):
                        pass
                except BlockingIOError:
                    pass
            else:
                self.heard(key.data)
        self.reap()
        if self.stop_asked:
            self.stop_asked = False
            self.stop()
        now = time.monotonic()
        if self.stopping:
            if self.stop_deadline is not None and now >= self.stop_deadline:
                self.stop_deadline = None
                for slot in self.live():
                    log("{} did not stop within {:.0f} s: killed".format(
                        slot.name(), self.shutdown_timeout + STOP_GRACE))
                    self.kill(slot, signal.SIGKILL)
                self.code = 1
            return
        for slot in self.slots:
            if slot.pid is None and slot.restart_at is not None and now >= slot.restart_at:
                slot.restart_at = None
                self.spawn(slot)

    def heard(self, slot: Slot) -> None:
        """The worker's pipe is readable: its byte (it serves), or EOF (it has gone)."""
        try:
            said = os.read(slot.ready_fd, 1)
        except OSError:
            said = b""
        if said:
            slot.serving = True
        self.close_ready(slot)

    def close_ready(self, slot: Slot) -> None:
        if slot.ready_fd is not None:
            self.selector.unregister(slot.ready_fd)
            os.close(slot.ready_fd)
            slot.ready_fd = None

    def reap(self, block: bool = False) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            for slot in self.slots:
                if slot.pid == pid:
                    self.died(slot, status)
            if block:
                return

    def died(self, slot: Slot, status: int) -> None:
        if slot.ready_fd is not None:
            # A byte it wrote just before it died still counts.
            self.heard(slot)
        name, how = slot.name(), death(status)
        slot.pid = None
        if self.stopping:
            stopped = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
            asked = os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGTERM, signal.SIGINT)
            if not (stopped or asked):
                log("{} {} while stopping".format(name, how))
            return
        if not slot.serving and os.WIFEXITED(status) and os.WEXITSTATUS(status) != 0:
            # It could not start (its own message says why): another would fail the same way.
            log("{} {} before it was serving: stopping".format(name, how))
            self.code = 1
            self.stop()
            return
        now = time.monotonic()
        if now - slot.started >= HEALTHY:
            slot.backoff = RESTART_MIN
            delay = 0.0
        else:
            slot.backoff = min(slot.backoff * 2, RESTART_MAX)
            delay = slot.backoff
        log("{} {}; restarting in {:.1f} s".format(name, how, delay))
        slot.restart_at = now + delay

    def on_stop(self, signum, _frame) -> None:
        # Only noted: the loop, woken by the signal's byte, stops between two of its steps
        # (a handler runs between any two bytecodes, e.g. between a restart's check and fork).
        self.stop_asked = True

    def stop(self) -> None:
        """Drains the live workers (SIGTERM); no more restarts. The port closes with the
        workers' copies of it, so that new connections are refused rather than queued for
        nobody."""
        if not self.stopping:
            self.stopping = True
            self.stop_deadline = time.monotonic() + self.shutdown_timeout + STOP_GRACE
            self.listener.close()
        for slot in self.slots:
            slot.restart_at = None
            if slot.pid is not None:
                self.kill(slot, signal.SIGTERM)

    @staticmethod
    def kill(slot: Slot, signum: int) -> None:
        try:
            os.kill(slot.pid, signum)
        except ProcessLookupError:
            pass

    # -- a worker ------------------------------------------------------------------------------

    def spawn(self, slot: Slot) -> None:
        if self.stopping or self.stop_asked:
            return
        ready_r, ready_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        # Blocked across the fork: a SIGTERM sent to a worker that has not yet put back the
        # default actions waits for them (and ends it) instead of reaching the parent's handler.
        held = {signal.SIGTERM, signal.SIGINT, signal.SIGCHLD}
        old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
        try:
            pid = os.fork()
        except OSError as e:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
            os.close(ready_r)
            os.close(ready_w)
            log("cannot start worker {}: {}; trying again in {:.0f} s".format(
                slot.index, e, RESTART_MAX))
            slot.restart_at = time.monotonic() + RESTART_MAX
            return
        if pid == 0:
            os._exit(self.worker(ready_r, ready_w, old))
        os.close(ready_w)
        slot.pid, slot.ready_fd, slot.serving = pid, ready_r, False
        slot.started = time.monotonic()
        self.selector.register(ready_r, selectors.EVENT_READ, slot)
        # Only now: a stop (or the worker's death) handled at the unblock finds it recorded.
        signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def worker(self, ready_r: int, ready_w: int, mask) -> int:
        """In the forked worker: the parent's signal handling undone, then the server, on a
        copy of the port. Returns the exit code."""
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            # The parent's descriptors (the epoll instance is shared: closed, never changed).
            self.selector.close()
            for fd in (ready_r, *self.wake, *(s.ready_fd for s in self.slots)):
                if fd is not None:
                    os.close(fd)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            if not follow_parent(self.parent):
                return 0

            def ready():
                os.write(ready_w, b"R")
                os.close(ready_w)

            code = self.serve(self.listener.detach(), ready)
        except BaseException as e:  # noqa: BLE001 - a worker's last word, never a traceback
            log("worker failed: {}".format(e))
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException:  # noqa: BLE001
                pass
        return code


class Parser(argparse.ArgumentParser):
    """argparse's, but a usage error is one line (exit 2), not the whole usage first."""

    def error(self, message):
        self.exit(2, "{0}: error: {1} (usage: {0} --help)\n".format(self.prog, message))


def main(argv=None) -> int:
    ap = Parser(prog="python -m berth", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("app", metavar="MODULE:APP")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--app-dir", default=".", help="where MODULE is looked for (default: here)")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--interface", choices=("wsgi", "asgi"), default="wsgi")
    ap.add_argument("--workers", type=int, default=1, help="processes sharing the port")
    ap.add_argument("--threads", type=int, default=4, help="worker threads per process")
    ap.add_argument("--model", default="evloop")
    ap.add_argument("--shutdown-timeout", type=float, default=30.0)
    ap.add_argument("--io-threads", type=int, default=1, help="ASGI: berth event loops per process")
    ap.add_argument("--lifespan", choices=("auto", "on", "off"), default="auto", help="ASGI")
    ap.add_argument("--loop", choices=("auto", "asyncio", "uvloop"), default="auto", help="ASGI")
    ap.add_argument("--app-timeout", type=float, default=60.0,
                    help="ASGI: seconds an application may take to start its response (0: none)")
    ap.add_argument("--max-body", "--max-body-size", type=int, default=None, help="largest request body, bytes")
    ap.add_argument("--ws-max-message", type=int, default=16 * 1024 * 1024,
                    help="ASGI: largest WebSocket message a client may send, bytes")
    args = ap.parse_args(argv)
    if args.workers < 1 or args.threads < 1 or args.io_threads < 1:
        ap.error("--workers, --threads and --io-threads must be at least 1")
    if not 0 <= args.port <= 65535:
        ap.error("--port must be between 0 and 65535")
    if args.shutdown_timeout < 0:
        ap.error("--shutdown-timeout must not be negative")
    try:
        app = load(args.app, args.app_dir)
    except (ImportError, AttributeError, ValueError) as e:
        print("berth: cannot load {}: {}".format(args.app, e), file=sys.stderr)
        return 1

    def serve(fd=None, ready=None) -> int:
        try:
            if args.interface == "asgi":
                from .asgi import serve as serve_asgi
                return serve_asgi(app, args.host, args.port, model=args.model,
                                  io_threads=args.io_threads, lifespan=args.lifespan,
                                  shutdown_timeout=args.shutdown_timeout,
                                  app_timeout=args.app_timeout, max_body=args.max_body,
                                  loop=args.loop, ws_max_message=args.ws_max_message,
                                  fd=fd, ready=ready)
            serve_wsgi(app, args.host, args.port, args.threads, args.model, args.shutdown_timeout,
                       False, args.max_body, fd, ready)
        except (OSError, ValueError, ImportError) as e:
            print("berth: {}".format(said(e)), file=sys.stderr)
            return 1
        return 0

    if args.workers == 1:
        return serve()
    # The port first, bound here without SO_REUSEPORT: refused if any server listens on it,
    # and no other can join it while the workers serve it (see berth._berth.listen_shared).
    try:
        fd, _, _ = listen_shared(args.host, args.port)
    except (OSError, ValueError) as e:
        print("berth: {}".format(said(e)), file=sys.stderr)
        return 1
    listener = socket.socket(fileno=fd)
    return Supervisor(args.workers, serve, listener, args.shutdown_timeout).run()


if __name__ == "__main__":
    sys.exit(main())
