"""Peer for `berth msg bench --zmq`: a ZeroMQ ROUTER socket (libzmq through pyzmq) that echoes
every message back to the peer that sent it: it receives [identity, payload...] and sends the
same frames back, so a DEALER gets its own message. `copy=False` hands libzmq's buffers
through without copying them into Python bytes, which is how pyzmq is meant to move big
messages.

Usage: python3 peers/zmq_router_echo.py [--host 127.0.0.1] [--port 9101]
       (also: python3 peers/zmq_router_echo.py PORT)
Prints one line, `zmq-router-echo listening on HOST:PORT`, with the real port when given 0.
Needs pyzmq: pip install pyzmq
"""
import argparse
import signal
import sys

try:
    import zmq
except ImportError:
    sys.exit("zmq_router_echo.py needs the Python package pyzmq: pip install pyzmq")


def parse_args():
    ap = argparse.ArgumentParser(description="ZeroMQ ROUTER echo server")
    ap.add_argument("port_arg", nargs="?", type=int, metavar="PORT", help="same as --port")
    ap.add_argument("--port", type=int, default=None, help="TCP port (0: any free port)")
    ap.add_argument("--host", default="127.0.0.1")
    args = ap.parse_args()
    port = args.port if args.port is not None else args.port_arg
    return args.host, 9101 if port is None else port


def main():
    host, port = parse_args()
    # SIGTERM ends the process at once rather than inside a blocking libzmq call.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    ctx = zmq.Context(io_threads=1)
    sock = ctx.socket(zmq.ROUTER)
    # No high-water mark: the bench bounds what is in flight itself (its window), and a
    # ROUTER drops messages for a peer whose queue is full rather than blocking.
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(f"tcp://{host}:{port}" if port else f"tcp://{host}:*")
    bound = sock.getsockopt(zmq.LAST_ENDPOINT).decode().rsplit(":", 1)[1]
    print(f"zmq-router-echo listening on {host}:{bound}", flush=True)
    try:
        while True:
            sock.send_multipart(sock.recv_multipart(copy=False), copy=False)
    except KeyboardInterrupt:
        pass
    finally:
        sock.close(0)
        ctx.term()


if __name__ == "__main__":
    main()
