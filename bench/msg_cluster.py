#!/usr/bin/env python3
"""What cluster mode costs a node's local echo (issue 21): `berth msg serve` alone against the
same server with `--cluster nats://...` (a nats-server with JetStream started here on
127.0.0.1), interleaved, each round twice per size. The server is pinned to core 0, the load
(`berth msg bench`, echo of named clients) and nats-server to core 1; server CPU per message
is utime+stime from /proc. The issue asks for at most 5% slower with the cluster on.

Usage: python3 bench/msg_cluster.py [--berth target/release/berth] [--nats nats-server]
                                    [--rounds 2] [--duration 10] [--sizes 64,64k]
                                    [--connections 100]
"""
import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time

from benchlib import cpu_seconds, free_port

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def nats_binary(given):
    if given:
        return given
    found = shutil.which("nats-server")
    if found:
        return found
    gopath = subprocess.run(["go", "env", "GOPATH"], capture_output=True, text=True).stdout.strip()
    return os.path.join(gopath, "bin", "nats-server")


def wait_line(proc, prefix, timeout=20.0):
    end = time.time() + timeout
    while time.time() < end:
        line = proc.stdout.readline()
        if line.startswith(prefix):
            return line
        if not line and proc.poll() is not None:
            raise SystemExit(f"server exited: {proc.stderr.read()}")
    raise SystemExit("server did not start")


def run_one(berth, cluster_url, size, connections, duration):
    argv = ["taskset", "-c", "0", berth, "msg", "serve", "-l", "tcp://127.0.0.1:0"]
    if cluster_url:
        argv += ["--cluster", cluster_url]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = wait_line(proc, "berth msg listening on ")
        endpoint = line.split("listening on ", 1)[1].strip()
        before = cpu_seconds(proc.pid)
        out = subprocess.run(["taskset", "-c", "1", berth, "msg", "bench", endpoint, "-s", size,
                              "-c", str(connections), "-d", f"{duration}s", "--json"],
                             capture_output=True, text=True, timeout=duration + 60)
        cpu = cpu_seconds(proc.pid) - before
        report = json.loads(out.stdout)
        msgs = report["messages"]
        return {"msgs_per_s": report["msgs_per_sec"], "cpu_us_per_msg": cpu / max(msgs, 1) * 1e6,
                "errors": sum(report["errors"].values())}
    finally:
        proc.terminate()
        proc.wait(20)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--berth", default=os.path.join(ROOT, "target", "release", "berth"))
    ap.add_argument("--nats")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--sizes", default="64,64k")
    ap.add_argument("--connections", type=int, default=100)
    args = ap.parse_args()
    store = tempfile.mkdtemp(prefix="berth-nats-bench-")
    port = free_port()
    nats = subprocess.Popen(["taskset", "-c", "1", nats_binary(args.nats), "-js", "-a", "127.0.0.1",
                             "-p", str(port), "-sd", store],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1)
        url = f"nats://127.0.0.1:{port}"
        for size in args.sizes.split(","):
            for rnd in range(1, args.rounds + 1):
                for label, cluster in (("alone", None), ("cluster", url)):
                    r = run_one(args.berth, cluster, size, args.connections, args.duration)
                    print(f"{size:>4} c{args.connections}  round {rnd} {label:8} {r['msgs_per_s']:>12.0f} msg/s"
                          f"  cpu {r['cpu_us_per_msg']:7.3f} us/msg  errors {r['errors']}", flush=True)
    finally:
        nats.terminate()
        nats.wait(20)
        shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
