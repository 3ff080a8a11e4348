"""``--workers N``: the parent holds the port and supervises N forked workers, as gunicorn's
and uvicorn's users expect.

- a worker that dies is logged with its cause and replaced (at once if it had lived 10 s, else
  after a back-off that doubles, 0.2 s, 0.4 s, ... up to 5 s, while it keeps dying young, so
  that a crashing application cannot make a fork loop); the port takes connections meanwhile:
  its listening sockets are the parent's (``Listeners``: over TCP one per worker slot with
  ``SO_REUSEPORT``, which the kernel spreads connections over; else one shared by all), and a
  slot's connections wait in its queue for the slot's next worker;
- a worker that fails to start (it exits with an error before serving) stops the server:
  exit 1, with the worker's own message;
- a worker that exits 0 on its own (``--limit-max-requests``) is replaced at once;
- SIGTERM or SIGINT drains the live workers and exits 0;
- SIGHUP restarts the workers one by one: each one's successor serves before it is told to
  drain, so that no request fails;
- SIGTTIN adds a worker, SIGTTOU drains one (never the last);
- a worker whose parent is killed outright drains and exits too.

What it logs (``berth.error``, info): each worker started, with its pid (and the pid it
replaces: after a death, a recycling at ``--limit-max-requests``, or a SIGHUP's roll); each
death with its cause (error, or info for a recycling); the drain, and its end.
"""

import logging
import os
import selectors
import signal
import socket
import sys
import time
from typing import Dict, List, Optional

from ._berth import follow_parent

log = logging.getLogger("berth.error")

#: The first delay before replacing a worker that died young; doubled for each further death
#: of a young worker in the same slot, up to RESTART_MAX.
RESTART_MIN = 0.1
RESTART_MAX = 5.0
#: A worker that lived this long was healthy: its death is answered by a new one at once.
HEALTHY = 10.0
#: After the drain's timeout, how long workers get before SIGKILL.
STOP_GRACE = 5.0


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


class Listeners:
    """The listening sockets the parent holds for its workers: ``one`` socket shared by every
    slot (a UNIX socket, or one passed in), or, with ``bind`` (a function of the slot number
    giving a new socket: one with ``SO_REUSEPORT`` on the port), a socket per slot, bound when
    the slot first starts and kept until the slot is removed or the server stops."""

    def __init__(self, one: Optional[socket.socket] = None, bind=None) -> None:
        self.one = one
        self.bind = bind
        self.slots: Dict[int, socket.socket] = {}

    def ensure(self, slot: int) -> None:
        """The slot's socket, bound if it has none yet (raises ``OSError`` if it cannot be)."""
        if self.one is None and slot not in self.slots:
            self.slots[slot] = self.bind(slot)

    def take(self, slot: int) -> int:
        """In a worker: its slot's descriptor, to serve (the worker owns it); the copies of
        the other slots' sockets are closed, so that a slot the parent removes is closed for
        good and queues nothing for nobody."""
        if self.one is not None:
            return self.one.detach()
        for other, sock in self.slots.items():
            if other != slot:
                sock.close()
        return self.slots[slot].detach()

    def close_slot(self, slot: int) -> None:
        sock = self.slots.pop(slot, None)
        if sock is not None:
            sock.close()

    def close(self) -> None:
        if self.one is not None:
            self.one.close()
        for slot in list(self.slots):
            self.close_slot(slot)


class Proc:
    """One worker process: its slot, the pipe it says it serves on (a byte, then EOF), and
    whether it is on its way out (told to drain) or a successor not yet serving (SIGHUP)."""

    def __init__(self, slot: int, pid: int, ready_fd: int, successor: bool) -> None:
        self.slot = slot
        self.pid = pid
        self.ready_fd: Optional[int] = ready_fd
        self.serving = False
        self.started = time.monotonic()
        self.retiring = False
        self.successor = successor

    def name(self) -> str:
        return "worker {} (pid {})".format(self.slot, self.pid)


HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP, signal.SIGTTIN,
           signal.SIGTTOU)


class Supervisor:
    """Forks ``count`` workers that each run ``serve(fd, ready)`` on the port this process
    holds, and keeps them going until SIGTERM or SIGINT (see the module docs). Signals and
    worker deaths wake one loop (``signal.set_wakeup_fd``), which also watches each new
    worker's pipe for the byte that says it serves."""

    def __init__(self, count: int, serve, listener, shutdown_timeout: float,
                 child_setup=None):
        self.count = count
        self.serve = serve
        self.child_setup = child_setup
        # A socket: one for every slot.
        self.listeners = listener if isinstance(listener, Listeners) else Listeners(listener)
        self.shutdown_timeout = shutdown_timeout
        self.parent = os.getpid()
        self.selector = selectors.DefaultSelector()
        self.procs: Dict[int, Proc] = {}
        self.backoff: Dict[int, float] = {}
        self.restart_at: Dict[int, float] = {}
        self.roll: List[int] = []  # slots still to restart (SIGHUP), in order
        # slot -> the pid its next worker replaces (said when that worker starts)
        self.replaces: Dict[int, int] = {}
        self.asked: List[int] = []  # signals noted by the handler, handled by the loop
        self.stopping = False
        self.stop_deadline: Optional[float] = None
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
        for sig in HANDLED[:2] + HANDLED[3:]:
            signal.signal(sig, self.on_signal)
        try:
            for slot in range(self.count):
                self.spawn(slot)
            while self.procs or not self.stopping:
                self.turn()
            log.info("stopped: every worker has exited")
        finally:
            # Whatever happened here, no worker is left behind serving for nobody.
            for proc in list(self.procs.values()):
                self.kill(proc, signal.SIGKILL)
            while self.procs:
                self.reap(block=True)
        return self.code

    def current(self, slot: int) -> Optional[Proc]:
        """The worker serving ``slot`` (not one draining, nor a successor not yet serving)."""
        for proc in self.procs.values():
            if proc.slot == slot and not proc.retiring and not proc.successor:
                return proc
        return None

    def turn(self) -> None:
        now = time.monotonic()
        deadlines = list(self.restart_at.values())
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
        while self.asked:
            self.handle(self.asked.pop(0))
        now = time.monotonic()
        if self.stopping:
            if self.stop_deadline is not None and now >= self.stop_deadline:
                self.stop_deadline = None
                for proc in list(self.procs.values()):
                    log.error("%s did not stop within %.0f s: killed", proc.name(),
                              self.shutdown_timeout + STOP_GRACE)
                    self.kill(proc, signal.SIGKILL)
                self.code = 1
            return
        for slot, at in list(self.restart_at.items()):
            if now >= at:
                del self.restart_at[slot]
                if slot < self.count and self.current(slot) is None:
                    self.spawn(slot)

    def handle(self, signum: int) -> None:
        if signum in (signal.SIGTERM, signal.SIGINT):
            self.stop()
        elif self.stopping:
            return
        elif signum == signal.SIGHUP:
            log.info("SIGHUP: restarting %d workers one by one", self.count)
            self.roll = [s for s in range(self.count)]
            self.next_roll()
        elif signum == signal.SIGTTIN:
            self.count += 1
            log.info("SIGTTIN: %d workers", self.count)
            self.spawn(self.count - 1)
        elif signum == signal.SIGTTOU:
            if self.count == 1:
                log.info("SIGTTOU: one worker left; not stopping it")
                return
            self.count -= 1
            log.info("SIGTTOU: %d workers", self.count)
            gone = self.count
            self.restart_at.pop(gone, None)
            self.roll = [s for s in self.roll if s != gone]
            for proc in list(self.procs.values()):
                if proc.slot == gone:
                    self.retire(proc)
            # The slot's socket goes with it: the kernel stops giving it connections once the
            # draining worker has closed its copy too (what it queued until then is reset:
            # removing a worker is rare, and immediate).
            self.listeners.close_slot(gone)

    def next_roll(self) -> None:
        """Starts the successor of the next slot of a SIGHUP's roll, unless one is starting."""
        if any(p.successor for p in self.procs.values()):
            return
        while self.roll:
            slot = self.roll.pop(0)
            if slot < self.count:
                old = self.current(slot)
                if old is not None:
                    self.replaces[slot] = old.pid
                self.spawn(slot, successor=True)
                return

    def heard(self, proc: Proc) -> None:
        """The worker's pipe is readable: its byte (it serves), or EOF (it has gone)."""
        try:
            said = os.read(proc.ready_fd, 1)
        except OSError:
            said = b""
        self.close_ready(proc)
        if said and not proc.serving:
            proc.serving = True
            if proc.successor:
                # It serves: the one it replaces drains, and the roll goes on.
                proc.successor = False
                for other in list(self.procs.values()):
                    if other is not proc and other.slot == proc.slot and not other.retiring \
                            and not other.successor:
                        self.retire(other)
                self.next_roll()

    def close_ready(self, proc: Proc) -> None:
        if proc.ready_fd is not None:
            self.selector.unregister(proc.ready_fd)
            os.close(proc.ready_fd)
            proc.ready_fd = None

    def retire(self, proc: Proc) -> None:
        proc.retiring = True
        self.kill(proc, signal.SIGTERM)

    def reap(self, block: bool = False) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
            except ChildProcessError:
                self.procs.clear()
                return
            if pid == 0:
                return
            proc = self.procs.pop(pid, None)
            if proc is not None:
                self.died(proc, status)
            if block:
                return

    def died(self, proc: Proc, status: int) -> None:
        if proc.ready_fd is not None:
            # A byte it wrote just before it died still counts.
            self.heard(proc)
        name, how = proc.name(), death(status)
        clean = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        asked = os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGTERM, signal.SIGINT)
        if self.stopping or proc.retiring:
            if not (clean or asked):
                log.error("%s %s while stopping", name, how)
            else:
                log.info("%s drained and exited", name)
            return
        if not proc.serving and os.WIFEXITED(status) and os.WEXITSTATUS(status) != 0:
            # It could not start (its own message says why): another would fail the same way.
            log.error("%s %s before it was serving: stopping", name, how)
            self.code = 1
            self.stop()
            return
        if proc.successor:
            log.error("%s %s before it was serving: the restart stops here", name, how)
            self.roll = []
            return
        if proc.slot >= self.count:
            return
        now = time.monotonic()
        self.replaces[proc.slot] = proc.pid
        if clean and proc.serving:
            # It stopped itself (--limit-max-requests): replaced at once.
            self.backoff[proc.slot] = RESTART_MIN
            delay = 0.0
            log.info("%s recycled (--limit-max-requests: it %s); restarting", name, how)
        else:
            if now - proc.started >= HEALTHY:
                self.backoff[proc.slot] = RESTART_MIN
                delay = 0.0
            else:
                backoff = min(self.backoff.get(proc.slot, RESTART_MIN) * 2, RESTART_MAX)
                self.backoff[proc.slot] = backoff
                delay = backoff
            log.error("%s %s; restarting in %.1f s", name, how, delay)
        self.restart_at[proc.slot] = now + delay
        self.next_roll()

    def on_signal(self, signum, _frame) -> None:
        # Only noted: the loop, woken by the signal's byte, acts between two of its steps
        # (a handler runs between any two bytecodes, e.g. between a restart's check and fork).
        self.asked.append(signum)

    def stop(self) -> None:
        """Drains the live workers (SIGTERM); no more restarts. The port closes with the
        workers' copies of it, so that new connections are refused rather than queued for
        nobody."""
        if not self.stopping:
            self.stopping = True
            self.stop_deadline = time.monotonic() + self.shutdown_timeout + STOP_GRACE
            self.listeners.close()
            log.info("draining %d worker%s (up to %g s for requests in flight)",
                     len(self.procs), "" if len(self.procs) == 1 else "s",
                     self.shutdown_timeout)
        self.restart_at.clear()
        self.roll = []
        for proc in list(self.procs.values()):
            self.kill(proc, signal.SIGTERM)

    @staticmethod
    def kill(proc: Proc, signum: int) -> None:
        try:
            os.kill(proc.pid, signum)
        except ProcessLookupError:
            pass

    # -- a worker ------------------------------------------------------------------------------

    def spawn(self, slot: int, successor: bool = False) -> None:
        if self.stopping or signal.SIGTERM in self.asked or signal.SIGINT in self.asked:
            return
        try:
            self.listeners.ensure(slot)
        except OSError as e:
            log.error("cannot start worker %d: %s; trying again in %.0f s", slot, e, RESTART_MAX)
            self.restart_at[slot] = time.monotonic() + RESTART_MAX
            return
        ready_r, ready_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        # Blocked across the fork: a SIGTERM sent to a worker that has not yet put back the
        # default actions waits for them (and ends it) instead of reaching the parent's handler.
        old = signal.pthread_sigmask(signal.SIG_BLOCK, set(HANDLED))
        try:
            pid = os.fork()
        except OSError as e:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
            os.close(ready_r)
            os.close(ready_w)
            log.error("cannot start worker %d: %s; trying again in %.0f s", slot, e, RESTART_MAX)
            self.restart_at[slot] = time.monotonic() + RESTART_MAX
            return
        if pid == 0:
            os._exit(self.worker(slot, ready_r, ready_w, old))
        os.close(ready_w)
        proc = Proc(slot, pid, ready_r, successor)
        self.procs[pid] = proc
        replaced = self.replaces.pop(slot, None)
        log.info("%s started%s", proc.name(),
                 "" if replaced is None else ", replacing pid {}".format(replaced))
        self.selector.register(ready_r, selectors.EVENT_READ, proc)
        # Only now: a stop (or the worker's death) handled at the unblock finds it recorded.
        signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def worker(self, slot: int, ready_r: int, ready_w: int, mask) -> int:
        """In the forked worker: the parent's signal handling undone, then the server, on a
        copy of the port. Returns the exit code."""
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            for sig in HANDLED:
                signal.signal(sig, signal.SIG_DFL)
            # SIGHUP, SIGTTIN, SIGTTOU are the parent's business: a worker ignores them.
            for sig in (signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU):
                signal.signal(sig, signal.SIG_IGN)
            # The parent's descriptors (the epoll instance is shared: closed, never changed).
            self.selector.close()
            for fd in (ready_r, *self.wake, *(p.ready_fd for p in self.procs.values())):
                if fd is not None:
                    os.close(fd)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            if not follow_parent(self.parent):
                return 0
            if self.child_setup is not None:
                self.child_setup(slot)

            def ready():
                os.write(ready_w, b"R")
                os.close(ready_w)

            code = self.serve(self.listeners.take(slot), ready)
        except BaseException as e:  # noqa: BLE001 - a worker's last word, never a traceback
            log.error("worker failed: %s", e)
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException:  # noqa: BLE001
                pass
        return code
