"""WebSocket echo peer for the WebSocket benchmark (issue 20): Python's `websockets` package
(asyncio, uvloop when installed), echoing every message as it came. No compression.

Usage: python3 peers/ws_python.py PORT   (needs: pip install websockets)
"""
import asyncio
import sys

from websockets.asyncio.server import serve


async def echo(ws):
    async for message in ws:
        await ws.send(message)


async def main(port):
    async with serve(echo, "127.0.0.1", port, compression=None, max_size=None):
        print(f"ws-python listening on 127.0.0.1:{port}", flush=True)
        await asyncio.get_running_loop().create_future()


if __name__ == "__main__":
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main(int(sys.argv[1])))
