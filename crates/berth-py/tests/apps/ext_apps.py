"""Bare ASGI applications for the optional extensions and the HTTP/2 cases of issue 43, written
from asgiref's specs/www.rst and docs/extensions.rst (no framework between them and berth)."""

import asyncio


async def slow(scope, receive, send):
    """Answers after half a second, without reading the body: its job is still out when a
    client that reset the stream sends more on it."""
    if scope["type"] != "http":
        return
    await asyncio.sleep(0.5)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"late"})


async def early(scope, receive, send):
    """Answers at once, without reading the body."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"early"})


async def pathsend(scope, receive, send):
    """``http.response.pathsend`` as the Path Send extension describes it: ``http.response.start``
    with the headers the application owes (content-type, content-length), then the path. The
    query says which file (``path=``) and, with ``length=``, a content-length of its own."""
    if scope["type"] != "http":
        return
    from urllib.parse import parse_qs
    import os
    query = parse_qs(scope["query_string"].decode())
    path = query["path"][0]
    assert "http.response.pathsend" in scope["extensions"]
    headers = [(b"content-type", b"application/octet-stream")]
    length = query.get("length", [None])[0]
    if length is None and os.path.exists(path):
        length = str(os.path.getsize(path))
    if length is not None:
        headers.append((b"content-length", length.encode()))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.pathsend", "path": path})


async def extensions(scope, receive, send):
    """The scope's ``extensions``, as JSON: over HTTP in the body, over a WebSocket in a text
    message after the accept."""
    import json
    if scope["type"] == "http":
        body = json.dumps(sorted(scope["extensions"])).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})
    elif scope["type"] == "websocket":
        await receive()
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": json.dumps(sorted(scope["extensions"]))})
        await send({"type": "websocket.close"})


async def ws_deny(scope, receive, send):
    """The Websocket Denial Response: after ``websocket.connect``, an HTTP response of the
    application's own instead of the 101 (its body in two messages with ``more_body``), then
    ``receive`` until the disconnect; ``/whole`` sends the body in one message, ``/half``
    starts the response and returns."""
    if scope["type"] != "websocket":
        return
    assert (await receive())["type"] == "websocket.connect"
    assert "websocket.http.response" in scope["extensions"]
    await send({"type": "websocket.http.response.start", "status": 401,
                "headers": [(b"content-type", b"text/plain"), (b"x-why", b"no token")]})
    if scope["path"] == "/half":
        return
    if scope["path"] == "/whole":
        await send({"type": "websocket.http.response.body", "body": b"token required\n"})
    else:
        await send({"type": "websocket.http.response.body", "body": b"token ",
                    "more_body": True})
        await send({"type": "websocket.http.response.body", "body": b"required\n"})
    assert (await receive())["type"] == "websocket.disconnect"


async def teapot(scope, receive, send):
    """418 for every request: what reaches the application is told apart from what berth
    served before it."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 418,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"the app\n"})


def wsgi_teapot(environ, start_response):
    """``teapot`` for WSGI."""
    start_response("418 I'm a teapot", [("Content-Type", "text/plain")])
    return [b"the app\n"]


async def pid(scope, receive, send):
    """Which worker process answered: its pid."""
    if scope["type"] != "http":
        return
    import os
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": str(os.getpid()).encode()})


def wsgi_pid(environ, start_response):
    import os
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [str(os.getpid()).encode()]
