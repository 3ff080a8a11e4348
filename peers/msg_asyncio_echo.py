"""Peer for `berth msg bench`: an echo server of berth's message framing (docs/msg-protocol.md)
on asyncio streams, a coroutine per connection. It is the straightforward asyncio server seed
003 compared itself with, written correctly: `readexactly` for every length and payload, so a
message of any size (8,760,000 bytes included) comes back whole.

Each client sends its keyword frame first; any keyword is accepted (names are not tracked) and
answered with the OK frame. Every later frame is echoed back as it was sent.

Usage: python3 peers/msg_asyncio_echo.py [--host 127.0.0.1] [--port 9100]
       (also: python3 peers/msg_asyncio_echo.py PORT, like the HTTP peers)
Prints one line, `msg-asyncio-echo listening on HOST:PORT`, with the real port when given 0.
"""
import argparse
import asyncio
import struct

OK_FRAME = b"\x02\x00\x00\x00\x00\x00\x00\x00OK"
CONTROL_BIT = 1 << 63
MAX_NAME = 255
# Large payloads are relayed in pieces of this size, so a 64 MiB message is never held whole.
PIECE = 1 << 20


async def handle_connection(reader, writer):
    try:
        (length,) = struct.unpack("<Q", await reader.readexactly(8))
        if length & CONTROL_BIT or length > MAX_NAME:
            return  # not a keyword this peer can answer; berth would refuse with name-invalid
        await reader.readexactly(length)
        writer.write(OK_FRAME)
        while True:
            header = await reader.readexactly(8)
            (length,) = struct.unpack("<Q", header)
            if length & CONTROL_BIT:
                return  # clients never send control frames
            writer.write(header)
            while length:
                piece = await reader.readexactly(min(length, PIECE))
                writer.write(piece)
                length -= len(piece)
                # Backpressure per piece: a client that does not read cannot grow our buffer.
                await writer.drain()
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main(host, port):
    server = await asyncio.start_server(handle_connection, host, port, backlog=1024)
    bound = server.sockets[0].getsockname()
    print(f"msg-asyncio-echo listening on {bound[0]}:{bound[1]}", flush=True)
    async with server:
        await server.serve_forever()


def parse_args():
    ap = argparse.ArgumentParser(description="berth-framing echo server on asyncio streams")
    ap.add_argument("port_arg", nargs="?", type=int, metavar="PORT", help="same as --port")
    ap.add_argument("--port", type=int, default=None, help="TCP port (0: any free port)")
    ap.add_argument("--host", default="127.0.0.1")
    args = ap.parse_args()
    port = args.port if args.port is not None else args.port_arg
    return args.host, 9100 if port is None else port


if __name__ == "__main__":
    try:
        asyncio.run(main(*parse_args()))
    except KeyboardInterrupt:
        pass
