"""WebSocket echo peer for the WebSocket benchmark (issue 20): Python's `websockets` package
(asyncio, uvloop when installed), echoing every message as it came. No compression, unless
`deflate` follows the port (bench/ws_deflate.py, issue 34): then permessage-deflate with
server_no_context_takeover and level 1, as berth's defaults (websockets has no threshold: it
compresses every message).

Usage: python3 peers/ws_python.py PORT [deflate]   (needs: pip install websockets)
"""
import asyncio
import sys

from websockets.asyncio.server import serve


async def echo(ws):
    async for message in ws:
        await ws.send(message)


async def main(port, deflate):
    extensions = []
    if deflate:
        from websockets.extensions.permessage_deflate import ServerPerMessageDeflateFactory
        extensions = [ServerPerMessageDeflateFactory(server_no_context_takeover=True,
                                                     compress_settings={"level": 1})]
    async with serve(echo, "127.0.0.1", port, compression=None, extensions=extensions,
                     max_size=None):
        print(f"ws-python listening on 127.0.0.1:{port}", flush=True)
        await asyncio.get_running_loop().create_future()


if __name__ == "__main__":
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main(int(sys.argv[1]), sys.argv[2:3] == ["deflate"]))
