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
2-core machine wrk then shares them with the server). `--load berth --berth BIN` loads with
berth's own generator instead of wrk, pipelined (`BIN bench -t 1 --pipeline 16`, `-c 64` unless
`--connections`): it takes less of the machine, which two workers on two cores need (issue 43);
the load generator's own CPU is printed too.
"""
import argparse
import json
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


def children_cpu():
    """CPU time of this process's reaped children: a load generator's, once it has exited and
    been reaped (it is then no longer in /proc)."""
    t = os.times()
    return t.children_user + t.children_system


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default="target/py-venv/bin/python")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--shapes", default="hello,reverse,seed004")
    ap.add_argument("--servers", default="berth,granian,uvicorn,asyncio")
    ap.add_argument("--no-pin", action="store_true",
                    help="no taskset: the server and wrk may use every core")
    ap.add_argument("--load", choices=("wrk", "berth"), default="wrk")
    ap.add_argument("--berth", default="target/release/berth",
                    help="the berth binary of --load berth")
    ap.add_argument("--connections", type=int, help="connections (default: the shape's; "
                    "--load berth: 64)")
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
                url = f"http://127.0.0.1:{port}{path}"
                try:
                    wait_ready(port)
                    before = cpu_seconds(proc.pid)
                    if args.load == "berth":
                        if script:
                            raise SystemExit(f"--load berth: shape {shape} needs a wrk script")
                        conns = args.connections or 64
                        reaped = children_cpu()
                        load = subprocess.Popen(
                            pin_load + [args.berth, "bench", "-c", str(conns), "-t", "1",
                                        "--pipeline", "16", "--duration", f"{args.duration}s",
                                        "--json", url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                        out, err = load.communicate(timeout=args.duration + 60)
                        # Only the load generator was reaped since (the server is after).
                        load_cpu = children_cpu() - reaped
                    else:
                        conns = args.connections or conns
                        cmd = pin_load + ["wrk", "-t1", f"-c{conns}", f"-d{args.duration}s"]
                        if script:
                            cmd += ["-s", os.path.join(HERE, script)]
                        out = subprocess.run(cmd + [url], capture_output=True, text=True,
                                             timeout=args.duration + 60).stdout
                    cpu = cpu_seconds(proc.pid) - before
                finally:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                if args.load == "berth":
                    report = json.loads(out)
                    rps, n = report["requests_per_sec"], report["requests"]
                    bad = sum(v for k, v in report["status"].items() if not k.startswith("2"))
                    print(f"{shape:8} c{conns:<5} round {rnd} {name:8} {rps:>9.0f} req/s"
                          f"  cpu {cpu * 1e6 / max(n, 1):6.1f} us/req"
                          f"  server cores {cpu / args.duration:4.2f}"
                          f"  load cores {load_cpu / args.duration:4.2f}  non-2xx {bad}",
                          flush=True)
                    continue
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
