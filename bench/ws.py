#!/usr/bin/env python3
"""WebSocket echo: berth's `/ws/echo` against Node's `ws` and Python's `websockets`
(peers/ws_node.js, peers/ws_python.py), 64 B and 16 KiB messages at 100 and 1,000 connections,
twice, servers interleaved (issue 20). Each server is one process pinned to core 0 (berth:
`serve --model evloop -A 1`); the load is `berth msg bench ws://…` (binary messages, a window
of in-flight messages per connection, every echo checked) pinned to core 1. Server CPU per
message is utime+stime from /proc.

Usage: python3 bench/ws.py [--berth target/release/berth] [--python PY] [--rounds 2]
                           [--duration 10] [--sizes 64,16k] [--connections 100,1000]
Needs node with the `ws` package (installed here under target/ws-node if missing) and
`websockets` for --python.
"""
import argparse
import json
import os
import signal
import subprocess

import socket
import time

from benchlib import cpu_seconds, free_port

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEERS = os.path.join(ROOT, "peers")
NODE_DIR = os.path.join(ROOT, "target", "ws-node")


def wait_listening(port, timeout=20.0):
    """Until `port` takes connections (a WebSocket server answers plain GETs with 4xx, so
    benchlib's wait_ready does not fit)."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"server on port {port} did not start")


def node_modules():
    if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "ws")):
        os.makedirs(NODE_DIR, exist_ok=True)
        subprocess.run(["npm", "install", "--silent", "ws@8"], cwd=NODE_DIR, check=True)
    return os.path.join(NODE_DIR, "node_modules")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--berth", default=os.path.join(ROOT, "target", "release", "berth"))
    ap.add_argument("--python", default="python3")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--sizes", default="64,16k")
    ap.add_argument("--connections", default="100,1000")
    args = ap.parse_args()
    env = dict(os.environ, NODE_PATH=node_modules())
    servers = {
        "berth": (lambda p: [args.berth, "serve", "--model", "evloop", "-A", "1", "--host", "127.0.0.1",
                             "--port", str(p)], "/ws/echo"),
        "node-ws": (lambda p: ["node", os.path.join(PEERS, "ws_node.js"), str(p)], "/"),
        "py-websockets": (lambda p: [args.python, os.path.join(PEERS, "ws_python.py"), str(p)], "/"),
    }
    for size in args.sizes.split(","):
        for conns in args.connections.split(","):
            for rnd in range(1, args.rounds + 1):
                for name, (argv, path) in servers.items():
                    port = free_port()
                    proc = subprocess.Popen(["taskset", "-c", "0"] + argv(port), env=env,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                            start_new_session=True)
                    try:
                        wait_listening(port)
                        before = cpu_seconds(proc.pid)
                        out = subprocess.run(
                            ["taskset", "-c", "1", args.berth, "msg", "bench", f"ws://127.0.0.1:{port}{path}",
                             "-s", size, "-c", conns, "-t", "1", "-d", f"{args.duration}s", "--json"],
                            capture_output=True, text=True, timeout=args.duration + 120)
                        cpu = cpu_seconds(proc.pid) - before
                    finally:
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait()
                    try:
                        report = json.loads(out.stdout)
                    except ValueError:
                        print(f"{size:>4} c{conns:<5} round {rnd} {name:14} failed: {out.stderr.strip()[-300:]}")
                        continue
                    msgs = report.get("messages") or 0
                    rate = report.get("msgs_per_sec") or 0.0
                    errors = {k: v for k, v in (report.get("errors") or {}).items() if v}
                    print(f"{size:>4} c{conns:<5} round {rnd} {name:14} {rate:>10.0f} msg/s"
                          f"  cpu {cpu * 1e6 / max(msgs, 1):7.2f} us/msg  errors {errors or 0}", flush=True)


if __name__ == "__main__":
    main()
