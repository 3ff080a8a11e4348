#!/usr/bin/env python3
"""The same Python echo program, written against FI-ASockIOCore's polling API, run on berth.fi and
on FI's own ASockIOCore (issue 18): messages/s and server CPU per message under `berth msg bench`.

Usage: python3 bench/python_fi.py --fi PATH_TO_FI_CHECKOUT [--python target/py-venv/bin/python]
                                  [--berth target/release/berth] [--sizes 64,1m]
                                  [--connections 200] [--duration 5] [--rounds 2]

--fi is a checkout of github.com/FI-Mihej/FI-ASockIOCore (its Add_This_Folder_To_PYTHONPATH is put
on the path; FI's code is never part of berth). --python must have berth installed
(`scripts/test` makes target/py-venv with it). Both servers run the identical program below under
the same interpreter, differing only in the import line; each is pinned to core 0 and the load
generator (`berth msg bench -t 1`, connections named bench-0.., all expected by the program) to
core 1. Server CPU is utime+stime from /proc before and after the measured run. For each size and
round the two run back to back (FI, then berth). Everything targets 127.0.0.1 and stops by itself.
"""
import argparse
import json
import os
import signal
import subprocess

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


def run(kind, args, size):
    port = free_port()
    env = dict(os.environ)
    if kind == "fi":
        env["PYTHONPATH"] = os.path.join(os.path.abspath(args.fi), "Add_This_Folder_To_PYTHONPATH")
    program = PROGRAM.replace("IMPORT", IMPORTS[kind])
    server = subprocess.Popen(["taskset", "-c", "0", args.python, "-O", "-c", program, str(port),
                               str(args.connections)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env, start_new_session=True)
    try:
        line = server.stdout.readline()
        if "ready" not in line:
            raise SystemExit(f"{kind} server did not start: {line} {server.stderr.read()[-2000:]}")
        before = cpu_seconds(server.pid)
        out = subprocess.run(["taskset", "-c", "1", args.berth, "msg", "bench", f"tcp://127.0.0.1:{port}",
                              "-s", size, "-c", str(args.connections), "-t", "1", "-d", f"{args.duration}s",
                              "--json"], capture_output=True, text=True, timeout=args.duration + 120)
        cpu = cpu_seconds(server.pid) - before
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    try:
        report = json.loads(out.stdout)
    except ValueError:
        return {"kind": kind, "size": size, "msgs": 0, "msgs_per_s": 0.0, "cpu_us_per_msg": float("nan"),
                "errors": out.stderr.strip()[-300:]}
    msgs = report.get("messages") or report.get("echoed") or 0
    rate = report.get("messages_per_sec") or report.get("msgs_per_sec") or 0.0
    return {"kind": kind, "size": size, "msgs": msgs, "msgs_per_s": rate,
            "cpu_us_per_msg": cpu * 1e6 / max(msgs, 1), "errors": report.get("errors")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fi", required=True, help="path of an FI-ASockIOCore checkout")
    ap.add_argument("--python", default="target/py-venv/bin/python")
    ap.add_argument("--berth", default="target/release/berth")
    ap.add_argument("--sizes", default="64,1m")
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    rows = []
    for size in args.sizes.split(","):
        for rnd in range(1, args.rounds + 1):
            pair = {}
            for kind in ("fi", "berth"):
                r = run(kind, args, size)
                r["round"] = rnd
                pair[kind] = r
                rows.append(r)
                print(f"{size:>4} round {rnd} {kind:6} {r['msgs_per_s']:>10.0f} msg/s  "
                      f"cpu {r['cpu_us_per_msg']:8.2f} us/msg  errors {r['errors']}", flush=True)
            fi, be = pair["fi"], pair["berth"]
            if fi["msgs_per_s"]:
                print(f"{size:>4} round {rnd} berth/fi: {be['msgs_per_s'] / fi['msgs_per_s']:.2f}x msg/s, "
                      f"{be['cpu_us_per_msg'] / fi['cpu_us_per_msg']:.2f}x CPU per message", flush=True)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
