#!/usr/bin/env python3
"""A WSGI app (the Flask app of crates/berth-py/tests/apps/flask_app.py, seed 004's routes) on
berth (`python -m berth --interface wsgi`) against granian (`--interface wsgi`), both with one
process and the same number of worker threads, pinned to core 0; wrk on core 1. Requests/s and
server CPU per request (utime+stime of the server's processes from /proc), GET /hello/world and
POST /reverse, interleaved per round (issue 18).

Usage: python3 bench/python_wsgi.py [--python target/py-venv/bin/python] [--rounds 2]
                                    [--duration 10] [--threads 2]
                                    [--app apps.wsgi_apps:hello --shapes hello]
Needs wrk, and berth, flask and granian installed for --python. `--app` serves another
application of crates/berth-py/tests (issue 33: the plain WSGI hello, `apps.wsgi_apps:hello`,
which answers every path); `--shapes hello` runs GET /hello/world only.
"""
import argparse
import os
import re
import signal
import subprocess

from benchlib import cpu_seconds, wait_ready


def free_port():
    """A port below the ephemeral range that a server can bind with SO_REUSEADDR: on a
    machine whose other tests leave thousands of connections in TIME_WAIT, a port picked by
    binding port 0 can still be refused to a server (its TIME_WAIT sockets lack SO_REUSEADDR)."""
    import random
    import socket
    while True:
        port = random.randint(20000, 30000)
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            s.close()

HERE = os.path.dirname(os.path.abspath(__file__))
APPS = os.path.join(HERE, "..", "crates", "berth-py", "tests")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default="target/py-venv/bin/python")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--app", default="apps.flask_app:app")
    ap.add_argument("--shapes", choices=("all", "hello"), default="all")
    ap.add_argument("--connections", type=int, default=50)
    args = ap.parse_args()
    # The servers start in the apps' directory: a relative --python is the caller's.
    args.python = os.path.abspath(args.python) if os.sep in args.python else args.python
    lua = os.path.join(HERE, "reverse.lua")
    servers = {
        "granian": lambda port: [args.python, "-m", "granian", "--interface", "wsgi", "--workers", "1",
                                 "--blocking-threads", str(args.threads), "--runtime-threads", "1",
                                 "--log-level", "warning", "--host", "127.0.0.1", "--port", str(port),
                                 args.app],
        "berth": lambda port: [args.python, "-m", "berth", args.app, "--interface", "wsgi",
                               "--port", str(port), "--threads", str(args.threads)],
    }
    shapes = (("GET /hello/world", None), ("POST /reverse", lua))
    for shape, script in shapes[:1] if args.shapes == "hello" else shapes:
        for rnd in range(1, args.rounds + 1):
            for name, argv in servers.items():
                port = free_port()
                proc = subprocess.Popen(["taskset", "-c", "0"] + argv(port), cwd=APPS, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
                try:
                    wait_ready(port)
                    before = cpu_seconds(proc.pid)
                    cmd = ["taskset", "-c", "1", "wrk", "-t1", f"-c{args.connections}",
                           f"-d{args.duration}s"]
                    if script:
                        cmd += ["-s", script]
                    out = subprocess.run(cmd + [f"http://127.0.0.1:{port}/hello/world"], capture_output=True,
                                         text=True, timeout=args.duration + 60).stdout
                    cpu = cpu_seconds(proc.pid) - before
                finally:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
                n = int(re.search(r"(\d+) requests in", out).group(1))
                bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
                print(f"{shape:18} round {rnd} {name:8} {rps:>9.0f} req/s  cpu {cpu * 1e6 / max(n, 1):7.1f} us/req"
                      f"  non-2xx {bad.group(1) if bad else 0}", flush=True)


if __name__ == "__main__":
    main()
