#!/usr/bin/env python3
"""An ASGI app (peers/asgi_app.py: the lab's routes, seed 004's GET /hello/world and POST
/reverse among them, the same file for every server) on berth (`python -m berth --interface
asgi`) against granian (`--interface asgi --workers 1 --runtime-threads 1`, as issue 18 names it)
and uvicorn (uvloop + httptools, the everyday peer); and seed 004's own shape, `wrk -c 1000
POST /reverse`, against the seed's asyncio server too (peers/python_asyncio.py). Every server is
one process pinned to core 0; wrk runs on core 1. Requests/s and server CPU per request
(utime+stime of the server's processes from /proc), servers interleaved within each round
(issue 18).

Usage: python3 bench/python_asgi.py [--python target/py-venv/bin/python] [--rounds 2]
                                    [--duration 10] [--shapes hello,reverse,seed004]
                                    [--servers berth,granian,uvicorn,asyncio] [--no-pin]
Needs wrk, and berth, granian, uvicorn, uvloop and httptools installed for --python.

`--workers` scaling (issue 33): `--servers berth,berth-w2 --shapes hello --no-pin` runs berth
with one process and with `--workers 2` in turn, every process free to use every core (on a
2-core machine wrk then shares them with the server).
"""
import argparse
import os
import re
import signal
import subprocess

from benchlib import cpu_seconds, free_port, wait_ready

HERE = os.path.dirname(os.path.abspath(__file__))
PEERS = os.path.join(HERE, "..", "peers")

# shape: (connections, wrk script or None, path, servers it is run against)
SHAPES = {
    "hello": (50, None, "/hello/world", ("berth", "berth-w2", "granian", "uvicorn")),
    "reverse": (50, "reverse.lua", "/reverse", ("berth", "granian", "uvicorn")),
    "seed004": (1000, "reverse.lua", "/reverse", ("berth", "granian", "uvicorn", "asyncio")),
}


def servers(py):
    return {
        "berth": lambda port: [py, "-m", "berth", "asgi_app:app", "--interface", "asgi",
                               "--port", str(port)],
        "berth-w2": lambda port: [py, "-m", "berth", "asgi_app:app", "--interface", "asgi",
                                  "--port", str(port), "--workers", "2"],
        "granian": lambda port: [py, "-m", "granian", "--interface", "asgi", "--workers", "1",
                                 "--runtime-threads", "1", "--http", "1", "--no-ws",
                                 "--log-level", "warning", "--host", "127.0.0.1",
                                 "--port", str(port), "asgi_app:app"],
        "uvicorn": lambda port: [py, "-m", "uvicorn", "--workers", "1", "--loop", "uvloop",
                                 "--http", "httptools", "--no-access-log", "--log-level", "warning",
                                 "--host", "127.0.0.1", "--port", str(port), "asgi_app:app"],
        "asyncio": lambda port: [py, "python_asyncio.py", str(port)],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default="target/py-venv/bin/python")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--shapes", default="hello,reverse,seed004")
    ap.add_argument("--servers", default="berth,granian,uvicorn,asyncio")
    ap.add_argument("--no-pin", action="store_true",
                    help="no taskset: the server and wrk may use every core")
    args = ap.parse_args()
    pin_server = [] if args.no_pin else ["taskset", "-c", "0"]
    pin_load = [] if args.no_pin else ["taskset", "-c", "1"]
    argvs = servers(os.path.abspath(args.python) if os.sep in args.python else args.python)
    wanted = args.servers.split(",")
    for shape in args.shapes.split(","):
        conns, script, path, names = SHAPES[shape]
        for rnd in range(1, args.rounds + 1):
            for name in names:
                if name not in wanted:
                    continue
                port = free_port()
                proc = subprocess.Popen(pin_server + argvs[name](port), cwd=PEERS,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)
                try:
                    wait_ready(port)
                    before = cpu_seconds(proc.pid)
                    cmd = pin_load + ["wrk", "-t1", f"-c{conns}", f"-d{args.duration}s"]
                    if script:
                        cmd += ["-s", os.path.join(HERE, script)]
                    out = subprocess.run(cmd + [f"http://127.0.0.1:{port}{path}"], capture_output=True,
                                         text=True, timeout=args.duration + 60).stdout
                    cpu = cpu_seconds(proc.pid) - before
                finally:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
                n = int(re.search(r"(\d+) requests in", out).group(1))
                bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
                errors = re.search(r"Socket errors: (.*)", out)
                print(f"{shape:8} c{conns:<5} round {rnd} {name:8} {rps:>9.0f} req/s"
                      f"  cpu {cpu * 1e6 / max(n, 1):6.1f} us/req"
                      f"  non-2xx {bad.group(1) if bad else 0}"
                      f"{'  ' + errors.group(1) if errors else ''}", flush=True)


if __name__ == "__main__":
    main()
