"""ASGI apps for the tests, written as their frameworks' users write them: seed 004's routes
(``GET /hello/world``, ``POST /reverse``) on Starlette and on FastAPI, and a few routes that
misbehave on purpose (raise, never answer, stream for ever, wait for the client to leave).

``BERTH_TEST_EVENTS``, if set, is a file the apps append lifespan and disconnect events to, so
that a test can see what the application saw."""

import asyncio
import contextlib
import os

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect


def record(event: str) -> None:
    path = os.environ.get("BERTH_TEST_EVENTS")
    if path:
        with open(path, "a") as f:
            f.write(event + "\n")


@contextlib.asynccontextmanager
async def lifespan(app):
    record("startup")
    yield {"started": "yes"}
    record("shutdown")


async def hello(request: Request):
    return PlainTextResponse("Hello, World!")


async def reverse(request: Request):
    data = await request.json()
    return JSONResponse({"data": [v[::-1] for v in data.values()]})


async def echo(request: Request):
    body = await request.body()
    return PlainTextResponse(
        body, headers={"X-Query": request.url.query, "X-Agent": request.headers.get("user-agent", "")}
    )


async def upload(request: Request):
    total = 0
    try:
        async for chunk in request.stream():
            total += len(chunk)
            if chunk:
                record("chunk %d" % total)
    except ClientDisconnect:
        record("upload cut")
        return PlainTextResponse("cut at %d" % total, status_code=400)
    return PlainTextResponse("received %d" % total)


async def client(request: Request):
    # Where a Starlette or FastAPI user reads the client's address: request.client.
    addr = request.client
    return JSONResponse(None if addr is None else {"host": addr.host, "port": addr.port})


async def state(request: Request):
    return PlainTextResponse(request.state.started)


async def boom(request: Request):
    raise RuntimeError("the application failed on purpose")


async def never(request: Request):
    await asyncio.sleep(3600)


async def stream(request: Request):
    count = int(request.query_params.get("count", "10"))
    size = int(request.query_params.get("size", "10"))

    async def parts():
        for i in range(count):
            yield bytes([i % 251]) * size
            if i % 64 == 0:
                await asyncio.sleep(0)
    return StreamingResponse(parts(), media_type="application/octet-stream")


async def events(request: Request):
    """An event stream (``text/event-stream``) of ``count`` events: the first at once, the
    next only once the client has said it has the first (``/events-seen``), then the rest,
    as a live feed is: each must reach the client when sent. ``?length=1`` declares the
    whole stream's ``content-length`` (such a body is sent as it is, not compressed)."""
    count = int(request.query_params.get("count", "5"))
    seen = _EVENTS_SEEN.setdefault(request.query_params.get("id", ""), asyncio.Event())
    lines = [b"data: event %d %s\n\n" % (i, b"x" * 200) for i in range(count)]

    async def parts():
        for i, line in enumerate(lines):
            yield line
            if i == 0:
                await asyncio.wait_for(seen.wait(), 10)
    headers = {"content-length": str(sum(map(len, lines)))} if "length" in request.query_params else None
    return StreamingResponse(parts(), media_type="text/event-stream", headers=headers)


_EVENTS_SEEN = {}


async def events_seen(request: Request):
    _EVENTS_SEEN.setdefault(request.query_params.get("id", ""), asyncio.Event()).set()
    return PlainTextResponse("ok")


async def endless(request: Request):
    async def parts():
        try:
            while True:
                yield b"x" * 1000
                await asyncio.sleep(0.001)
        finally:
            record("endless ended")
    return StreamingResponse(parts())


async def wait_disconnect(request: Request):
    # Starlette's own way of asking: receive() until http.disconnect.
    while not await request.is_disconnected():
        await asyncio.sleep(0.05)
    record("disconnected")
    return PlainTextResponse("gone")


async def ws_echo(ws: WebSocket):
    """Starlette's WebSocket, as its users write it: echoes text and bytes until the client
    leaves; `close` closes from the server's side with 4000; `push N` sends N messages of
    16 KiB without waiting for the client (backpressure)."""
    offered = ws.scope.get("subprotocols", [])
    await ws.accept(subprotocol="chat" if "chat" in offered else None,
                    headers=[(b"x-app", b"yes")])
    try:
        while True:
            msg = await ws.receive()
            if msg["type"] == "websocket.disconnect":
                record("ws disconnected %s" % msg.get("code"))
                return
            if msg.get("text") is not None:
                text = msg["text"]
                if text == "close":
                    await ws.close(code=4000, reason="asked to")
                    return
                if text.startswith("push "):
                    for i in range(int(text.split()[1])):
                        await ws.send_bytes(bytes([i % 251]) * 16384)
                    record("pushed")
                    continue
                await ws.send_text(text)
            else:
                await ws.send_bytes(msg["bytes"])
    except WebSocketDisconnect as e:
        record("ws disconnected %s" % e.code)


async def ws_refuse(ws: WebSocket):
    await ws.close()


async def ws_boom(ws: WebSocket):
    await ws.accept()
    await ws.receive_text()
    raise RuntimeError("boom after accept")


starlette_app = Starlette(
    routes=[
        Route("/hello/world", hello),
        Route("/reverse", reverse, methods=["POST"]),
        Route("/echo", echo, methods=["GET", "POST"]),
        Route("/state", state),
        Route("/client", client),
        Route("/upload", upload, methods=["POST"]),
        Route("/boom", boom),
        Route("/never", never),
        Route("/stream", stream),
        Route("/endless", endless),
        Route("/events", events),
        Route("/events-seen", events_seen),
        Route("/wait-disconnect", wait_disconnect),
        WebSocketRoute("/ws/echo", ws_echo),
        WebSocketRoute("/ws/refuse", ws_refuse),
        WebSocketRoute("/ws/boom", ws_boom),
    ],
    lifespan=lifespan,
)


def _fastapi():
    from fastapi import FastAPI

    api = FastAPI()

    @api.get("/hello/world")
    async def hello_world():
        return PlainTextResponse("Hello, World!")

    @api.post("/reverse")
    async def reverse_json(data: dict):
        return {"data": [v[::-1] for v in data.values()]}

    @api.get("/items/{item_id}")
    async def item(item_id: int, q: str = ""):
        return {"item_id": item_id, "q": q}

    return api


try:
    fastapi_app = _fastapi()
except ImportError:  # FastAPI is optional: its tests skip
    fastapi_app = None


async def failing_startup(scope, receive, send):
    """An app whose lifespan startup fails."""
    assert scope["type"] == "lifespan"
    await receive()
    await send({"type": "lifespan.startup.failed", "message": "no database"})


async def raw(scope, receive, send):
    """Seed 004's routes as a bare ASGI callable (no framework): the benchmark's app."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/reverse":
        body = (await receive())["body"]
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": body[::-1]})
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"Hello, World!"})


async def declared(scope, receive, send):
    """Responses whose ``content-length`` the app declares itself, right or wrong (issue 29):
    ``/exact`` (5 bytes, as declared), ``/short`` (5 of 100), ``/long`` (5 of 3), and the same
    sent in two body messages under ``/streamed/...``."""
    if scope["type"] != "http":
        return
    path = scope["path"]
    streamed = path.startswith("/streamed/")
    length = {"exact": b"5", "short": b"100", "long": b"3"}[path.rsplit("/", 1)[1]]
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", length)]})
    if streamed:
        await send({"type": "http.response.body", "body": b"hel", "more_body": True})
        await send({"type": "http.response.body", "body": b"lo"})
    else:
        await send({"type": "http.response.body", "body": b"hello"})


async def trailers(scope, receive, send):
    """Responses that end with trailers (the ``http.response.trailers`` extension), as a gRPC
    server's do: ``/stream?n=N`` sends N body messages and two trailer messages; ``/whole``
    one body message; ``/offered`` says whether the scope offers the extension (JSON).
    Misuse: ``/bad`` sends a ``content-length`` trailer, ``/early`` trailers before the body's
    end, ``/unpromised`` trailers without promising them; each records what ``send`` raised."""
    if scope["type"] != "http":
        return
    path = scope["path"]
    offered = "http.response.trailers" in scope.get("extensions", {})
    if path == "/offered":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(offered).encode()})
        return
    promise = path != "/unpromised"
    await send({"type": "http.response.start", "status": 200, "trailers": promise,
                "headers": [(b"content-type", b"text/plain"),
                            (b"trailer", b"grpc-status, x-count")]})
    try:
        if path == "/early":
            await send({"type": "http.response.trailers", "headers": [(b"x-a", b"1")]})
        if path == "/stream":
            n = int(scope["query_string"].decode().partition("=")[2] or "3")
            for i in range(n):
                await send({"type": "http.response.body", "body": b"part%d;" % i,
                            "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        else:
            await send({"type": "http.response.body", "body": b"whole"})
        await send({"type": "http.response.trailers", "headers": [(b"grpc-status", b"0")],
                    "more_trailers": True})
        last = [(b"content-length", b"5")] if path == "/bad" else [(b"x-count", b"7")]
        await send({"type": "http.response.trailers", "headers": last})
    except Exception as e:
        record("trailers {} {}".format(path, type(e).__name__))
        raise


async def grpc_echo(scope, receive, send):
    """A gRPC service on the bare ASGI API, as grpcio's client speaks it (length-prefixed
    messages, the status in trailers): ``/echo.Echo/Reverse`` answers its message reversed,
    ``/echo.Echo/Count`` streams the numbers up to the one asked for, one message each,
    ``/echo.Echo/Missing`` fails with NOT_FOUND (5) and a message, in the trailers."""
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    assert body[:1] == b"\0" and int.from_bytes(body[1:5], "big") == len(body) - 5, body
    request = body[5:]

    def framed(data):
        return b"\0" + len(data).to_bytes(4, "big") + data

    await send({"type": "http.response.start", "status": 200, "trailers": True,
                "headers": [(b"content-type", b"application/grpc")]})
    status = [(b"grpc-status", b"0")]
    method = scope["path"]
    if method == "/echo.Echo/Reverse":
        await send({"type": "http.response.body", "body": framed(request[::-1])})
    elif method == "/echo.Echo/Count":
        for i in range(1, int(request) + 1):
            await send({"type": "http.response.body", "body": framed(str(i).encode()),
                        "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    else:
        await send({"type": "http.response.body", "body": b""})
        status = [(b"grpc-status", b"5"), (b"grpc-message", b"no such method")]
    await send({"type": "http.response.trailers", "headers": status})


async def path(scope, receive, send):
    """Answers with ``scope["path"]`` as the server decoded it (UTF-8) and the raw
    ``query_string`` after a newline."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/octet-stream")]})
    await send({"type": "http.response.body",
                "body": scope["path"].encode("utf-8") + b"\n" + scope["query_string"]})


async def scope_app(scope, receive, send):
    """Answers with what the scope says of the client, the server and the mount: ``client``,
    ``server``, ``scheme``, ``root_path``, ``path``, ``http_version`` (JSON)."""
    if scope["type"] != "http":
        return
    import json

    body = json.dumps({"client": scope.get("client"), "server": scope.get("server"),
                       "scheme": scope["scheme"], "root_path": scope.get("root_path"),
                       "path": scope["path"], "http_version": scope["http_version"]}).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


class AsgiObject:
    """An ASGI 3 application that is an object with an async ``__call__`` (as Django's
    ASGIHandler and most middleware are)."""

    async def __call__(self, scope, receive, send):
        await raw(scope, receive, send)


asgi_object = AsgiObject()


async def _greeting(greeting, scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": greeting})


# An ASGI 3 application made with functools.partial.
import functools  # noqa: E402

asgi_partial = functools.partial(_greeting, b"partial")


class Asgi2App:
    """ASGI 2: the class is instantiated with the scope, the instance awaited with
    (receive, send)."""

    def __init__(self, scope):
        self.scope = scope

    async def __call__(self, receive, send):
        await _greeting(b"asgi2", self.scope, receive, send)


def starlette_factory():
    """``--factory``: a function that returns the application."""
    return starlette_app
