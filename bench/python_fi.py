#!/usr/bin/env python3
"""FI-ASockIOCore's own program shapes, run on berth.fi and on FI's own ASockIOCore (issues 18 and
30): messages (or requests) per second and server CPU per message.

Usage: python3 bench/python_fi.py --fi PATH_TO_FI_CHECKOUT [--python target/py-venv/bin/python]
                                  [--berth target/release/berth] [--shapes echo,http]
                                  [--sizes 64,1k,1m,64m] [--connections 200] [--duration 5]
                                  [--rounds 2]

Shapes, each the same program text on both cores but for its import line:
  echo  the framed echo in FI's polling style (gates, expected clients, io_iteration,
        get_messages_from_client, send_message_to_client), loaded by `berth msg bench -t 1`
        (connections named bench-0.., all expected by the program);
  http  FI's polling HTTP server over raw connections with httptools
        (crates/berth-py/tests/fi_programs/http_server__http_tools.py, written the way FI's
        "HTTP over Raw Connection" example is), loaded by `wrk -t1` asking for /SIZE (the body
        is SIZE bytes of X), keep-alive.
Sizes of 64 MiB use 8 connections instead of --connections (200 x 64 MiB in flight would not
fit the machine).

--fi is a checkout of github.com/FI-Mihej/FI-ASockIOCore (its Add_This_Folder_To_PYTHONPATH is put
on the path; FI's code is never part of berth). --python must have berth and httptools installed
(`scripts/test` makes target/py-venv with them). Both servers run under the same interpreter with
-O, pinned to core 0, the load generator to core 1. Server CPU is utime+stime from /proc before
and after the measured run. For each shape, size and round the two run back to back, FI first,
so the rounds interleave. Everything targets 127.0.0.1 and stops by itself.
"""
import argparse
import json
import os
import signal
import re
import subprocess
import time

from benchlib import cpu_seconds, free_port

HERE = os.path.dirname(os.path.abspath(__file__))

# The program: FI's polling style. IMPORT is the only line that differs between the two runs.
PROGRAM = r"""
import sys
IMPORT
port, clients = int(sys.argv[1]), int(sys.argv[2])
gate = ConnectionSettings(ConnectionDirectionRole.client, ("127.0.0.1", port), b"")
core = ASockIOCore({gate})
core.listen(1024)
for i in range(clients):
    core.add_client(Client(ConnectionSettings(ConnectionDirectionRole.client, keyword=b"bench-%d" % i)))
print("ready", flush=True)
while True:
    result = core.io_iteration(0.5)
    for client_id in result.clients_have_data_to_read:
        for message in core.get_messages_from_client(client_id):
            core.send_message_to_client(client_id, message)
"""

IMPORTS = {
    "fi": "from simple_network.tcp_app_server import ASockIOCore, ConnectionSettings, "
          "ConnectionDirectionRole, Client",
    "berth": "from berth.fi import ASockIOCore, ConnectionSettings, ConnectionDirectionRole, Client",
}


HTTP_PROGRAM = os.path.join(HERE, "..", "crates", "berth-py", "tests", "fi_programs", "http_server__http_tools.py")
BIG = 64 << 20


def size_bytes(size):
    units = {"k": 1 << 10, "m": 1 << 20}
    return int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)


def env_for(kind, args):
    env = dict(os.environ)
    if kind == "fi":
        env["PYTHONPATH"] = os.path.join(os.path.abspath(args.fi), "Add_This_Folder_To_PYTHONPATH")
    return env


def start(kind, args, program, port, extra, ready):
    server = subprocess.Popen(["taskset", "-c", "0", args.python, "-O", "-c", program, str(port)] + extra,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_for(kind, args),
                              start_new_session=True)
    line = server.stdout.readline()
    if ready not in line:
        os.killpg(server.pid, signal.SIGKILL)
        raise SystemExit(f"{kind} server did not start: {line} {server.stderr.read()[-2000:]}")
    return server


def run_echo(kind, args, size, conns):
    port = free_port()
    program = PROGRAM.replace("IMPORT", IMPORTS[kind])
    server = start(kind, args, program, port, [str(conns)], "ready")
    try:
        before = cpu_seconds(server.pid)
        out = subprocess.run(["taskset", "-c", "1", args.berth, "msg", "bench", f"tcp://127.0.0.1:{port}",
                              "-s", size, "-c", str(conns), "-t", "1", "-d", f"{args.duration}s",
                              "--json"], capture_output=True, text=True, timeout=args.duration + 300)
        cpu = cpu_seconds(server.pid) - before
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    try:
        report = json.loads(out.stdout)
    except ValueError:
        return {"msgs": 0, "msgs_per_s": 0.0, "cpu_us_per_msg": float("nan"), "errors": out.stderr.strip()[-300:]}
    msgs = report.get("messages") or report.get("echoed") or 0
    rate = report.get("messages_per_sec") or report.get("msgs_per_sec") or 0.0
    return {"msgs": msgs, "msgs_per_s": rate, "cpu_us_per_msg": cpu * 1e6 / max(msgs, 1),
            "errors": report.get("errors")}


def run_http(kind, args, size, conns):
    port = free_port()
    with open(HTTP_PROGRAM) as f:
        program = f.read()
    if kind == "fi":
        program = program.replace("from berth.fi import *", "from simple_network.tcp_app_server import *", 1)
    server = start(kind, args, program, port, [], "GOOD GATE CONNECTIONS")
    try:
        # One request first, so that the answer is cached in both servers (their _RESP_CACHE).
        try:
            subprocess.run(["curl", "-s", "-o", "/dev/null", f"http://127.0.0.1:{port}/{size_bytes(size)}"],
                           timeout=60, check=True)
        except (subprocess.TimeoutExpired, subprocess.CalledProcessError):
            return {"msgs": 0, "msgs_per_s": 0.0, "cpu_us_per_msg": float("nan"),
                    "errors": "no answer to a single request within 60 s"}
        before = cpu_seconds(server.pid)
        out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", f"-c{conns}", f"-d{args.duration}s",
                              "--timeout", "30s", f"http://127.0.0.1:{port}/{size_bytes(size)}"],
                             capture_output=True, text=True, timeout=args.duration + 300)
        cpu = cpu_seconds(server.pid) - before
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    m = re.search(r"(\d+) requests in ([\d.]+)(\w+)", out.stdout)
    errors = re.search(r"Socket errors:.*|Non-2xx.*", out.stdout)
    if not m:
        return {"msgs": 0, "msgs_per_s": 0.0, "cpu_us_per_msg": float("nan"), "errors": out.stdout[-300:]}
    reqs = int(m.group(1))
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out.stdout).group(1))
    return {"msgs": reqs, "msgs_per_s": rate, "cpu_us_per_msg": cpu * 1e6 / max(reqs, 1),
            "errors": errors.group(0) if errors else None}


def run(shape, kind, args, size):
    conns = 8 if size_bytes(size) >= BIG else args.connections
    r = (run_echo if shape == "echo" else run_http)(kind, args, size, conns)
    r.update({"shape": shape, "kind": kind, "size": size, "connections": conns})
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fi", required=True, help="path of an FI-ASockIOCore checkout")
    ap.add_argument("--python", default="target/py-venv/bin/python")
    ap.add_argument("--berth", default="target/release/berth")
    ap.add_argument("--shapes", default="echo,http")
    ap.add_argument("--sizes", default="64,1k,1m,64m")
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    rows = []
    for shape in args.shapes.split(","):
        for size in args.sizes.split(","):
            for rnd in range(1, args.rounds + 1):
                pair = {}
                for kind in ("fi", "berth"):
                    r = run(shape, kind, args, size)
                    r["round"] = rnd
                    pair[kind] = r
                    rows.append(r)
                    print(f"{shape:4} {size:>4} round {rnd} {kind:6} {r['msgs_per_s']:>10.1f} msg/s  "
                          f"cpu {r['cpu_us_per_msg']:10.2f} us/msg  errors {r['errors']}", flush=True)
                    time.sleep(1)
                fi, be = pair["fi"], pair["berth"]
                if fi["msgs_per_s"]:
                    print(f"{shape:4} {size:>4} round {rnd} berth/fi: {be['msgs_per_s'] / fi['msgs_per_s']:.2f}x msg/s, "
                          f"{be['cpu_us_per_msg'] / fi['cpu_us_per_msg']:.2f}x CPU per message", flush=True)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
