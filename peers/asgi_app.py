"""The lab's routes as an ASGI application, for ASGI servers (granian). The answers are the other
Python peers' (common.route), so only the server around them differs.

Usage: granian --interface asgi --workers 1 --working-dir peers --port PORT asgi_app:app
   or: python3 peers/asgi_app.py PORT   (runs that granian command; needs: pip install granian)
"""
import asyncio
import os
import sys

from common import SLOW_DONE, SLOW_SECONDS, route

HEADERS = {ctype: [(b"content-type", ctype.encode())] for ctype in ("text/plain", "application/json")}


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    body = b""
    if scope["method"] == "POST":
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
    answer = route(scope["method"], scope["path"], body)
    if answer is None:
        await asyncio.sleep(SLOW_SECONDS)
        answer = SLOW_DONE
    status, ctype, payload = answer
    headers = HEADERS[ctype] + [(b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    argv = ["granian", "--interface", "asgi", "--workers", "1", "--http", "1", "--no-ws",
            "--log-level", "warning", "--working-dir", here, "--host", "127.0.0.1",
            "--port", sys.argv[1], "asgi_app:app"]
    os.execvp(argv[0], argv)
