#!/usr/bin/env python3
"""WebSocket echo with permessage-deflate (issue 34): berth's `/ws/echo` against Node's `ws` and
Python's `websockets`, each with deflate on (peers/ws_node.js and peers/ws_python.py with
`deflate`: level 1, server_no_context_takeover, as berth's defaults), 64 B text and 16 KiB
JSON-like text, servers interleaved, `--rounds` times. Each server is one process pinned to
core 0 (berth: `serve --model evloop -A 1 -w 0`); the load is Node's `ws` as a client that offers
permessage-deflate and compresses every message (bench/ws_deflate_client.js: `--connections`
connections, one message in flight each, every echo checked), pinned to core 1. Server CPU per
message is utime+stime from /proc over the messages echoed.

Usage: python3 bench/ws_deflate.py [--berth target/release/berth] [--python PY] [--rounds 2]
                                   [--duration 10] [--sizes 64,16384] [--connections 50]
"""
import argparse
import json
import os
import signal
import subprocess

from benchlib import cpu_seconds, free_port
from ws import NODE_DIR, PEERS, ROOT, node_modules, wait_listening

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--berth", default=os.path.join(ROOT, "target", "release", "berth"))
    ap.add_argument("--python", default="python3")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--sizes", default="64,16384")
    ap.add_argument("--connections", type=int, default=50)
    args = ap.parse_args()
    env = dict(os.environ, NODE_PATH=node_modules())
    servers = {
        "berth": (lambda p: [args.berth, "serve", "--model", "evloop", "-A", "1", "-w", "0",
                             "--host", "127.0.0.1", "--port", str(p)], "/ws/echo"),
        "node-ws": (lambda p: ["node", os.path.join(PEERS, "ws_node.js"), str(p), "deflate"], "/"),
        "py-websockets": (lambda p: [args.python, os.path.join(PEERS, "ws_python.py"), str(p),
                                     "deflate"], "/"),
    }
    client = os.path.join(HERE, "ws_deflate_client.js")
    for size in args.sizes.split(","):
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
                        ["taskset", "-c", "1", "node", client, f"ws://127.0.0.1:{port}{path}",
                         size, str(args.connections), str(args.duration)],
                        capture_output=True, text=True, env=env, timeout=args.duration + 60)
                    cpu = cpu_seconds(proc.pid) - before
                finally:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                try:
                    report = json.loads(out.stdout)
                except ValueError:
                    print(f"{size:>5} round {rnd} {name:14} failed: {out.stderr.strip()[-300:]}")
                    continue
                msgs = report["messages"]
                print(f"{size:>5} round {rnd} {name:14} {report['msgs_per_sec']:>9.0f} msg/s"
                      f"  cpu {cpu * 1e6 / max(msgs, 1):8.2f} us/msg  errors {report['errors']}"
                      f"  agreed: {report['extensions']}", flush=True)


if __name__ == "__main__":
    main()
