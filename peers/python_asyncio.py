"""Peer for `berth lab`: seed 004's asyncio server (asyncio.start_server, one coroutine per
connection), made a correct HTTP/1.1 keep-alive server so it can be compared with the others.

Usage: python3 peers/python_asyncio.py PORT
"""
import asyncio
import sys

from common import SLOW_DONE, SLOW_SECONDS, parse_head, respond, route, wants_close


async def handle_connection(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            method, path, version, headers = parse_head(head[:-4])
            length = int(headers.get("content-length", "0"))
            body = await reader.readexactly(length) if length else b""
            answer = route(method, path, body)
            if answer is None:
                await asyncio.sleep(SLOW_SECONDS)
                answer = SLOW_DONE
            close = wants_close(version, headers)
            writer.write(respond(*answer, close))
            await writer.drain()
            if close:
                return
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        pass
    finally:
        writer.close()


async def main():
    port = int(sys.argv[1])
    server = await asyncio.start_server(handle_connection, "127.0.0.1", port, backlog=1024)
    print(f"python-asyncio listening on 127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
