"""ASGI 3 applications on berth's HTTP engine: the Python half.

berth's event loop (Rust) parses, limits, times out and writes; this module runs the
application on an asyncio loop (uvloop when installed) in the thread that holds the GIL. By
default berth's loop runs on that same thread, between asyncio's callbacks: asyncio watches
berth's epoll descriptor, and each time it is readable one call (``AsgiServer.take``) turns
berth's loop with the GIL released and hands over every request it read: one GIL acquisition
per batch, no thread hand-off. With ``io_threads`` above 1 (or another model) berth's loops run
in threads of their own and wake asyncio through a socket, once per batch. Each request runs
as an asyncio task, so frameworks that need a current task (anyio: Starlette, FastAPI) work
unchanged.

What the application gets (ASGI 3, HTTP spec 2.4):

- ``lifespan`` (``--lifespan auto|on|off``): startup before the port is bound, shutdown after
  the drain; the ``state`` it fills is copied into every request's scope.
- the ``http`` scope (``http_version``, ``method``, ``scheme``, ``path`` decoded, ``raw_path``,
  ``query_string``, ``root_path``, ``headers`` lower-cased, ``server``, ``state``).
- ``receive``: the request body, within ``--max-body``: one ``http.request`` if it came with
  its head (the everyday small POST), else in pieces as it arrives (``more_body``), the
  connection read no further than the app takes (a window of 256 KiB); then
  ``http.disconnect`` once the client has gone or the response is complete. A body cut short
  (the client left, or sent it malformed or too slowly) is an ``http.disconnect``.
- the ``websocket`` scope (``subprotocols``, ``scheme`` ``ws``; the evloop and actor models):
  ``websocket.connect``, then ``websocket.receive`` (``text`` or ``bytes``) and
  ``websocket.disconnect`` with the client's code (1006 if it left without a close);
  ``websocket.accept`` (``subprotocol``, ``headers``) answers 101, ``websocket.close`` before
  it 403, after it a close frame; ``websocket.send`` waits while the client is slower than the
  application (256 KiB window), and the client is not read further while the application is
  behind. An application that fails after the accept closes with 1011; one that returns
  without closing closes with 1000. Messages over ``ws_max_message`` (16 MiB) close with 1009.
- the ``websocket.http.response`` extension (the Websocket Denial Response, in the
  ``websocket`` scope's ``extensions``): after ``websocket.connect``, instead of accepting,
  ``websocket.http.response.start`` and ``websocket.http.response.body`` answer the handshake
  with the application's own status, headers and body (as ``http.response.*``, streamed with
  ``more_body``), after which the connection closes; ``receive`` then says
  ``websocket.disconnect`` (1006).
- ``send``: ``http.response.start`` and ``http.response.body``. A single body message goes out
  whole with a Content-Length; ``more_body`` streams the body (chunked, or unframed under the
  application's own ``content-length``), and ``send`` waits while the client is slower than the
  application (backpressure), raising ``ClientDisconnected`` (an ``OSError``) once the client
  has gone. A body that does not fit the ``content-length`` the application declared is its
  error, as in uvicorn: the client gets the declared header, the bytes sent up to that length,
  then the connection closed (an incomplete read, never a response rewritten to fit), and
  ``send`` raises ``RuntimeError`` (logged with the application's other failures).
- the ``http.response.trailers`` extension (in ``scope["extensions"]`` over HTTP/1.1 and
  HTTP/2): ``http.response.start`` with ``trailers`` true streams the body, and the
  ``http.response.trailers`` messages after its last one (``headers``, ``more_trailers``)
  end the response: a trailer section after the last chunk over HTTP/1.1, a HEADERS frame
  over HTTP/2 (gRPC's ``grpc-status``). Fields a trailer must not carry (framing, routing,
  the content's type or encoding) raise ``ValueError`` and cut the response off. HTTP/1.0, a
  HEAD request and a body under the application's own ``content-length`` have nowhere for
  trailers: the body ends alone. Announcing them in a ``trailer`` header is the
  application's choice.
- the ``http.response.pathsend`` extension (in ``scope["extensions"]`` for every ``http``
  scope): after ``http.response.start``, ``{"type": "http.response.pathsend", "path": ...}``
  sends the file at that path as the body, from where it lies, as berth sends its own files
  (``sendfile(2)`` over plain HTTP/1.1; never read whole into memory); its size is the
  ``content-length`` (an application's own that differs raises ``RuntimeError``, nothing sent).
  A file that cannot be opened raises its ``OSError`` in ``send``.

An application that raises before its response started costs its request a 500; one that fails
mid-body has its connection closed without the final chunk, so the client can tell. One that
does not start its response within ``app_timeout`` seconds is cancelled and answered 504.
berth's limits, timeouts and graceful shutdown (SIGTERM, SIGINT) apply as to any service.
"""

import asyncio
import logging
import os
import signal
import sys
from typing import Any, Awaitable, Callable, Dict, Optional

from ._berth import AsgiServer, ClientDisconnected

__all__ = ["serve", "ClientDisconnected"]

log = logging.getLogger("berth.error")

#: How often requests are checked for a departed client and for the application timeout.
TICK = 0.25

_DISCONNECT = {"type": "http.disconnect"}


class LifespanFailed(Exception):
    """The application said ``lifespan.startup.failed``."""


class _Cycle:
    """One request's ``receive`` and ``send``."""

    __slots__ = ("req", "run", "body_done")

    def __init__(self, req, run: "_Runner") -> None:
        self.req = req
        self.run = run
        self.body_done = False

    async def receive(self) -> Dict[str, Any]:
        req = self.req
        while not self.body_done:
            try:
                got = req.read_body()
            except ClientDisconnected:
                self.body_done = True
                return _DISCONNECT
            if got is not None:
                body, more = got
                self.body_done = not more
                return {"type": "http.request", "body": body, "more_body": more}
            # The body is still arriving: its next bytes wake this request.
            await self.run.wake_wait(req.id)
        if req.complete() or req.disconnected():
            return _DISCONNECT
        # Nothing more will come but the disconnect: the tick, or the response's end, says when.
        fut = self.run.loop.create_future()
        self.run.disconnect_waiters[req.id] = fut
        try:
            await fut
        finally:
            self.run.disconnect_waiters.pop(req.id, None)
        return _DISCONNECT

    async def send(self, message: Dict[str, Any]) -> None:
        kind = message["type"]
        req = self.req
        if kind == "http.response.body":
            more = message.get("more_body", False)
            if not req.body(message.get("body", b""), more):
                await self.run.room(req)
            if not more and req.complete():
                self.run.wake_disconnect(req.id)
        elif kind == "http.response.start":
            req.start(message["status"], message.get("headers", ()), message.get("trailers", False))
        elif kind == "http.response.trailers":
            req.trailers(message.get("headers", ()), message.get("more_trailers", False))
            if req.complete():
                self.run.wake_disconnect(req.id)
        elif kind == "http.response.pathsend":
            req.pathsend(message["path"])
            self.run.wake_disconnect(req.id)
        else:
            raise RuntimeError("unexpected ASGI message {!r} for an http scope".format(kind))


class _WsCycle:
    """One WebSocket's ``receive`` and ``send`` (the ``websocket`` scope)."""

    __slots__ = ("req", "run", "connected")

    def __init__(self, req, run: "_Runner") -> None:
        self.req = req
        self.run = run
        self.connected = False

    async def receive(self) -> Dict[str, Any]:
        req = self.req
        if not self.connected:
            self.connected = True
            return {"type": "websocket.connect"}
        while True:
            got = req.ws_receive()
            if got is not None:
                kind, data = got
                if kind == "text":
                    return {"type": "websocket.receive", "text": data}
                if kind == "bytes":
                    return {"type": "websocket.receive", "bytes": data}
                return {"type": "websocket.disconnect", "code": data}
            # Nothing yet: the client's next message (or its departure) wakes this request.
            await self.run.wake_wait(req.id)

    async def send(self, message: Dict[str, Any]) -> None:
        kind = message["type"]
        req = self.req
        if kind == "websocket.send":
            text = message.get("text")
            data = text if text is not None else message.get("bytes")
            if data is None:
                raise ValueError("websocket.send without text or bytes")
            if not req.ws_send(data):
                await self.run.room(req)
        elif kind == "websocket.accept":
            req.ws_accept(message.get("subprotocol"), message.get("headers"))
        elif kind == "websocket.close":
            req.ws_close(message.get("code", 1000), message.get("reason") or "")
        elif kind == "websocket.http.response.start":
            # The Websocket Denial Response extension: an HTTP response instead of the 101.
            req.start(message["status"], message.get("headers", ()))
        elif kind == "websocket.http.response.body":
            if not req.body(message.get("body", b""), message.get("more_body", False)):
                await self.run.room(req)
        else:
            raise RuntimeError("unexpected ASGI message {!r} for a websocket scope".format(kind))


class _Runner:
    """The application, the engine, and what is in flight between them."""

    def __init__(self, app, loop: asyncio.AbstractEventLoop, app_timeout: float) -> None:
        self.app = app
        self.loop = loop
        self.app_timeout = app_timeout
        self.server: Optional[AsgiServer] = None
        self.state: Optional[dict] = None
        # id -> (task, request, started at): insertion order is age order.
        self.inflight: Dict[int, Any] = {}
        # id -> future: a request whose task waits for room (send) or body (receive).
        self.room_waiters: Dict[int, asyncio.Future] = {}
        self.body_waiters: Dict[int, asyncio.Future] = {}
        self.disconnect_waiters: Dict[int, asyncio.Future] = {}
        # Set once berth's loop is over (inline: drained).
        self.over: Optional[asyncio.Future] = None
        # Requests (and WebSockets) the application has finished: a drain's log counts them.
        self.finished = 0

    # -- the engine's side -------------------------------------------------------------------

    def ready(self, woken: bool = True) -> None:
        """Takes every waiting request (one call for the batch; inline, after a turn of
        berth's loop) and starts a task for each. With berth's loops in threads, comes back
        after those tasks' first steps while requests keep coming; inline, their answers wake
        berth's descriptor, which brings the next turn."""
        server = self.server
        batch = server.take(woken, self.state)
        if server.inline and server.over() and self.over is not None and not self.over.done():
            self.over.set_result(None)
        if not batch:
            return
        create_task = self.loop.create_task
        now = self.loop.time()
        inflight = self.inflight
        for item in batch:
            if type(item) is int:
                for waiters in (self.room_waiters, self.body_waiters):
                    fut = waiters.pop(item, None)
                    if fut is not None and not fut.done():
                        fut.set_result(None)
                continue
            task = create_task(self.handle(item))
            inflight[item.id] = (task, item, now)
        if not server.inline:
            self.loop.call_soon(self.ready, False)

    async def handle(self, req) -> None:
        # Read once: each read of the attribute is a call into the extension.
        scope = req.scope
        websocket = scope["type"] == "websocket"
        cycle = _WsCycle(req, self) if websocket else _Cycle(req, self)
        try:
            await self.app(scope, cycle.receive, cycle.send)
        except ClientDisconnected:
            pass
        except asyncio.CancelledError:
            # Cancelled by the application timeout (or the shutdown): say so if nothing was sent.
            req.fail(504)
        except BaseException:
            if req.disconnected() or req.body_cut():
                # The client left, or its body was cut short: the app's exception (Starlette
                # raises ClientDisconnect) is the client's doing, not a failure to log.
                log.debug("%s %s: the client left or its body was cut short",
                          req.scope.get("method", "WEBSOCKET"), req.scope["path"])
                req.fail(400)
            else:
                log.exception("the application failed on %s %s", req.scope.get("method", "WEBSOCKET"),
                              req.scope["path"])
                req.fail(500)
        else:
            if websocket:
                if not req.complete():
                    # Returned without a close: 403 before the accept (the spec's answer to
                    # an application that did not accept), a close 1000 after it.
                    try:
                        req.ws_close(1000, "")
                    except RuntimeError:
                        # Mid-way through a denial response: as an HTTP response left unfinished.
                        log.error("the application returned without completing its denial "
                                  "response to WEBSOCKET %s", req.scope["path"])
                        req.fail(500)
            elif not req.complete():
                log.error("the application returned without completing its response to %s %s",
                          req.scope.get("method", "WEBSOCKET"), req.scope["path"])
                req.fail(500)
        finally:
            self.finished += 1
            self.inflight.pop(req.id, None)
            self.wake_disconnect(req.id)
            for waiters in (self.room_waiters, self.body_waiters):
                fut = waiters.pop(req.id, None)
                if fut is not None and not fut.done():
                    fut.cancel()

    async def wake_wait(self, rid: int) -> None:
        """Waits for request ``rid``'s next wake event (its body has more, or ended)."""
        fut = self.loop.create_future()
        self.body_waiters[rid] = fut
        try:
            await fut
        finally:
            self.body_waiters.pop(rid, None)

    async def room(self, req) -> None:
        """Waits until the request's stream has room again (or its client has gone)."""
        fut = self.loop.create_future()
        self.room_waiters[req.id] = fut
        if req.has_room():
            # The room event came before the waiter was there.
            self.room_waiters.pop(req.id, None)
        else:
            await fut
        if req.disconnected():
            raise ClientDisconnected("the client has gone; the body was not sent")

    def wake_disconnect(self, rid: int) -> None:
        fut = self.disconnect_waiters.get(rid)
        if fut is not None and not fut.done():
            fut.set_result(None)

    def tick(self) -> None:
        """Tells waiting receivers their client has gone; cancels applications that have not
        started a response within the timeout; inline, turns berth's loop for its deadlines."""
        if self.server.inline:
            self.ready(False)
        for waiters in (self.disconnect_waiters, self.body_waiters):
            for rid, fut in list(waiters.items()):
                entry = self.inflight.get(rid)
                if entry is not None and entry[1].disconnected() and not fut.done():
                    fut.set_result(None)
        if self.app_timeout > 0:
            limit = self.loop.time() - self.app_timeout
            for task, req, started in list(self.inflight.values()):
                if started > limit:
                    break
                if not req.answered() and not task.done():
                    task.cancel()
        self.loop.call_later(TICK, self.tick)

    # -- lifespan ----------------------------------------------------------------------------

    async def lifespan(self, mode: str):
        """Runs the lifespan protocol's startup; returns a coroutine function for its shutdown,
        or None if the application does not speak it (mode ``auto``) or ``mode`` is ``off``."""
        if mode == "off":
            return None
        state: dict = {}
        inbox: asyncio.Queue = asyncio.Queue()
        started = self.loop.create_future()
        stopped = self.loop.create_future()

        async def receive():
            return await inbox.get()

        async def send(message):
            kind = message["type"]
            target = started if kind.startswith("lifespan.startup.") else stopped
            if target.done():
                raise RuntimeError("unexpected lifespan message {!r}".format(kind))
            if kind.endswith(".complete"):
                target.set_result(None)
            elif kind.endswith(".failed"):
                target.set_exception(LifespanFailed(message.get("message", "")))
            else:
                raise RuntimeError("unexpected lifespan message {!r}".format(kind))

        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"},
                 "state": state}
        task = self.loop.create_task(self.app(scope, receive, send))
        inbox.put_nowait({"type": "lifespan.startup"})
        await asyncio.wait([task, started], return_when=asyncio.FIRST_COMPLETED)
        if not started.done():
            # The application ended (or raised) without answering startup.
            error = task.exception() if not task.cancelled() else None
            if mode == "on":
                raise LifespanFailed("the application does not support lifespan: {!r}".format(error))
            log.debug("the application does not support lifespan (%r); going on without it", error)
            return None
        started.result()  # raises LifespanFailed
        self.state = state

        async def shutdown():
            inbox.put_nowait({"type": "lifespan.shutdown"})
            await asyncio.wait([task, stopped], return_when=asyncio.FIRST_COMPLETED)
            if stopped.done():
                stopped.result()

        return shutdown


def new_loop(kind: str = "auto") -> asyncio.AbstractEventLoop:
    """An event loop: uvloop's when installed (``auto``) or asked for, else asyncio's."""
    if kind in ("auto", "uvloop"):
        try:
            import uvloop  # type: ignore
        except ImportError:
            if kind == "uvloop":
                raise
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def serve(app: Callable[..., Awaitable[None]], host: str = "127.0.0.1", port: int = 8000, *,
          model: str = "evloop", io_threads: int = 1, lifespan: str = "auto",
          shutdown_timeout: float = 30.0, app_timeout: float = 60.0, reuse_port: bool = False,
          max_body: Optional[int] = None, max_connections: Optional[int] = None,
          loop: str = "auto", ws_max_message: int = 16 * 1024 * 1024,
          fd: Optional[int] = None, ready: Optional[Callable[[], None]] = None,
          options: Optional[Dict[str, Any]] = None) -> int:
    """Serves the ASGI application ``app`` until SIGTERM or SIGINT, then drains (requests in
    flight are answered, for up to ``shutdown_timeout`` seconds) and runs the lifespan
    shutdown. Prints ``berth listening on http://ADDR (...)`` once serving, then calls
    ``ready``, if given. ``fd``: a listening socket to serve instead of binding ``host:port``
    (``--workers``: the parent's), taken over (closed when done). ``options``: the server
    options ``python -m berth`` passes on (TLS, backlog, keep-alive, concurrency limit; see
    ``berth._berth.serve_wsgi``). Returns the exit code: 0, or 1 if the lifespan startup
    failed. A server that cannot start (the port in use, a bad certificate) raises its error
    after the lifespan's shutdown has run, so that nothing is left pending."""
    ev = new_loop(loop)
    asyncio.set_event_loop(ev)
    runner = _Runner(app, ev, app_timeout)

    async def main() -> int:
        try:
            shutdown = await runner.lifespan(lifespan)
        except LifespanFailed as e:
            print("berth: the application's startup failed: {}".format(e), file=sys.stderr)
            return 1
        try:
            server = AsgiServer(host, port, model, io_threads, reuse_port, max_body,
                                max_connections, ws_max_message, fd, options)
        except BaseException:
            # The application's lifespan task ends here, not destroyed pending with the loop.
            if shutdown is not None:
                await shutdown()
            raise
        runner.server = server
        stop = ev.create_future()
        for sig in (signal.SIGTERM, signal.SIGINT):
            ev.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
        ev.add_reader(server.fileno(), runner.ready, True)
        ev.call_later(TICK, runner.tick)
        shape = "{}, ASGI on {}".format(server.describe(), type(ev).__module__.split(".")[0])
        announce = (options or {}).get("announce")
        # A line per address served (the options' more_fds: -b given more than once).
        for url in server.urls:
            if announce is not None:
                announce(url, shape)
            else:
                # One write, so that the lines of processes sharing stdout (--workers) never
                # interleave.
                sys.stdout.write("berth listening on {} ({})\n".format(url, shape))
                sys.stdout.flush()
        if ready is not None:
            ready()
        runner.ready(False)
        await stop
        inflight, finished = len(runner.inflight), runner.finished
        log.info("pid %d draining: %d request%s in flight (up to %g s)", os.getpid(), inflight,
                 "" if inflight == 1 else "s", shutdown_timeout)
        # The loop keeps answering while the engine drains.
        if server.inline:
            runner.over = ev.create_future()
            server.begin_drain(shutdown_timeout)
            runner.ready(False)
            await runner.over
        else:
            await ev.run_in_executor(None, server.drain, shutdown_timeout)
        ev.remove_reader(server.fileno())
        # What the application still has in hand had its connection closed at the deadline.
        log.info("pid %d drained: %d finished, %d cut off", os.getpid(),
                 runner.finished - finished, len(runner.inflight))
        if shutdown is not None:
            await shutdown()
        return 0

    try:
        return ev.run_until_complete(main())
    finally:
        ev.close()
