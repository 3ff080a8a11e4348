"""Peer for `berth lab`: the fastest common Python stack, uvloop's event loop with httptools'
parser (the C parser Node used), on asyncio's Protocol API without streams.

Usage: python3 peers/python_uvloop.py PORT   (needs: pip install uvloop httptools)
"""
import asyncio
import sys

import httptools
import uvloop

from common import SLOW_DONE, SLOW_SECONDS, respond, route


class HttpProtocol(asyncio.Protocol):
    def __init__(self):
        self.parser = httptools.HttpRequestParser(self)
        self.transport = None
        self.url = b""
        self.body = []
        # Requests are answered in order: a slow one holds back those pipelined after it.
        self.pending = asyncio.get_running_loop().create_future()
        self.pending.set_result(None)

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.write(respond(400, "text/plain", b"bad request\n", True))
            self.transport.close()

    def on_url(self, url):
        self.url += url

    def on_body(self, body):
        self.body.append(body)

    def on_message_complete(self):
        method = self.parser.get_method().decode()
        path, body = self.url.decode("latin-1"), b"".join(self.body)
        close = not self.parser.should_keep_alive()
        self.url, self.body = b"", []
        answer = route(method, path, body)
        previous = self.pending
        if answer is None or not previous.done():
            self.pending = asyncio.ensure_future(self.answer_later(previous, answer, close))
        else:
            self.send(answer, close)

    async def answer_later(self, previous, answer, close):
        await previous
        if answer is None:
            await asyncio.sleep(SLOW_SECONDS)
            answer = SLOW_DONE
        self.send(answer, close)

    def send(self, answer, close):
        if self.transport.is_closing():
            return
        self.transport.write(respond(*answer, close))
        if close:
            self.transport.close()


async def main():
    port = int(sys.argv[1])
    loop = asyncio.get_running_loop()
    server = await loop.create_server(HttpProtocol, "127.0.0.1", port, backlog=1024)
    print(f"python-uvloop listening on 127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    uvloop.install()
    asyncio.run(main())
