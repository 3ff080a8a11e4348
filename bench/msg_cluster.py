#!/usr/bin/env python3
"""Messages across nodes (issue 21), against a nats-server with JetStream started here on
127.0.0.1, two rounds interleaved per size:

1. what cluster mode costs a node's local echo: `berth msg serve` alone against the same
   server with `--cluster nats://...` (the issue asks for at most 5% slower);
2. relays within a node against across nodes: two nodes A and B of one cluster, `berth msg
   bench --relay` on A (every pair on A) against `--relay-via B` (each pair split over A and
   B, every message crossing NATS), throughput and one-way latency.

Servers are pinned to core 0, the load (`berth msg bench`) and nats-server to core 1; server
CPU per message is utime+stime from /proc, over every node.

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


def start_node(berth, cluster_url):
    argv = ["taskset", "-c", "0", berth, "msg", "serve", "-l", "tcp://127.0.0.1:0"]
    if cluster_url:
        argv += ["--cluster", cluster_url]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = wait_line(proc, "berth msg listening on ")
    return proc, line.split("listening on ", 1)[1].strip()


def relay_one(berth, nodes, across, size, connections, duration):
    (a, ea), (b, eb) = nodes
    before = cpu_seconds(a.pid) + cpu_seconds(b.pid)
    argv = ["taskset", "-c", "1", berth, "msg", "bench", ea, "--relay", "-s", size,
            "-c", str(connections), "-d", f"{duration}s", "--json"]
    if across:
        argv += ["--relay-via", eb]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 60)
    cpu = cpu_seconds(a.pid) + cpu_seconds(b.pid) - before
    report = json.loads(out.stdout)
    msgs = report["messages"]
    lat = report["latency_us"]
    return {"msgs_per_s": report["msgs_per_sec"], "cpu_us_per_msg": cpu / max(msgs, 1) * 1e6,
            "p50_us": lat.get("p50"), "p99_us": lat.get("p99"),
            "errors": sum(report["errors"].values())}


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
    ap.add_argument("--only", choices=("cost", "relay"), help="run one part only")
    args = ap.parse_args()
    store = tempfile.mkdtemp(prefix="berth-nats-bench-")
    port = free_port()
    nats = subprocess.Popen(["taskset", "-c", "1", nats_binary(args.nats), "-js", "-a", "127.0.0.1",
                             "-p", str(port), "-sd", store],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1)
        url = f"nats://127.0.0.1:{port}"
        for size in args.sizes.split(",") if args.only != "relay" else []:
            for rnd in range(1, args.rounds + 1):
                for label, cluster in (("alone", None), ("cluster", url)):
                    r = run_one(args.berth, cluster, size, args.connections, args.duration)
                    print(f"echo {size:>4} c{args.connections}  round {rnd} {label:8} {r['msgs_per_s']:>12.0f} msg/s"
                          f"  cpu {r['cpu_us_per_msg']:7.3f} us/msg  errors {r['errors']}", flush=True)
        if args.only == "cost":
            return
        nodes = [start_node(args.berth, url), start_node(args.berth, url)]
        try:
            for size in args.sizes.split(","):
                for rnd in range(1, args.rounds + 1):
                    for label, across in (("within", False), ("across", True)):
                        r = relay_one(args.berth, nodes, across, size, args.connections, args.duration)
                        print(f"relay {size:>4} c{args.connections} round {rnd} {label:7} {r['msgs_per_s']:>10.0f} msg/s"
                              f"  cpu {r['cpu_us_per_msg']:7.3f} us/msg  p50 {r['p50_us']} us  p99 {r['p99_us']} us"
                              f"  errors {r['errors']}", flush=True)
        finally:
            for proc, _ in nodes:
                proc.terminate()
                proc.wait(20)
    finally:
        nats.terminate()
        nats.wait(20)
        shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
