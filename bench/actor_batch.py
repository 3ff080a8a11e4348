#!/usr/bin/env python3
"""Seed 002's latency/throughput trade-off: the actor model at several --actor-batch sizes
against evloop, in one run (BENCHMARKS.md, "The actor model and its batch size").

Usage: python3 bench/actor_batch.py [--berth target/release/berth] [--port 9400]
                                    [--duration 10s] [--batches 1,2,16,1000] [--out DIR]
  e.g. cargo build --release && python3 bench/actor_batch.py

For each server (evloop, then actor with each batch size), started alone on core 0 with one
I/O thread (-A 1) and one worker (-w 1), runs `wrk -t1 -c100 -d10s --latency` pinned to core 1
against /hello/world, a 16 KiB file and a 1 MiB file (made in a temporary --root), after a 1 s
warm-up. Prints one markdown table (requests/s, latency avg/p50/p90/p99/max, server CPU %,
ratios to evloop) and writes it with the raw wrk outputs and a JSON of every figure to --out
(default bench/results/actor-batch-<date>). Needs wrk and taskset and at least two cores; about
2 minutes with the defaults. Run it on a quiet machine: it measures, it does not judge noise.
"""
import argparse, json, os, platform, re, shutil, socket, subprocess, sys, tempfile, time

TARGETS = [("hello", "/hello/world"), ("16KiB", "/files/16k.bin"), ("1MiB", "/files/1m.bin")]


def wait_listening(port, proc, within=10.0):
    deadline = time.time() + within
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited early with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on port {port} after {within} s")


def cpu_ticks(pid):
    """utime + stime of every thread of `pid`, in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def to_ms(value, unit):
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def parse_wrk(out):
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    avg = re.search(r"Latency\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)", out)
    pct = dict((p, to_ms(v, u)) for p, v, u in re.findall(r"^\s+(\d+)%\s+([\d.]+)(us|ms|s)", out, re.M))
    errors = re.search(r"Socket errors: (.*)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "requests_per_sec": rps,
        "latency_avg_ms": to_ms(avg.group(1), avg.group(2)),
        "latency_stdev_ms": to_ms(avg.group(3), avg.group(4)),
        "latency_max_ms": to_ms(avg.group(5), avg.group(6)),
        "latency_p50_ms": pct.get("50"),
        "latency_p90_ms": pct.get("90"),
        "latency_p99_ms": pct.get("99"),
        "socket_errors": errors.group(1) if errors else "",
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--berth", default="target/release/berth")
    ap.add_argument("--port", type=int, default=9400)
    ap.add_argument("--duration", default="10s")
    ap.add_argument("--batches", default="1,2,16,1000")
    ap.add_argument("--out", default=time.strftime("bench/results/actor-batch-%Y-%m-%d"))
    args = ap.parse_args()
    for tool in ("wrk", "taskset"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is not installed (apt-get install -y {tool})")
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("needs two cores: the server on one, wrk on the other")
    os.makedirs(args.out, exist_ok=True)
    root = tempfile.mkdtemp(prefix="berth-actor-batch-")
    with open(os.path.join(root, "16k.bin"), "wb") as f:
        f.write(os.urandom(16 * 1024))
    with open(os.path.join(root, "1m.bin"), "wb") as f:
        f.write(os.urandom(1024 * 1024))

    base = [args.berth, "serve", "-p", str(args.port), "-A", "1", "-w", "1", "--root", root]
    servers = [("evloop", base + ["--model", "evloop"])]
    servers += [(f"actor batch {b}", base + ["--model", "actor", "--actor-batch", b])
                for b in args.batches.split(",")]
    rows = []
    try:
        for name, argv in servers:
            proc = subprocess.Popen(["taskset", "-c", "0"] + argv,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                wait_listening(args.port, proc)
                for shape, path in TARGETS:
                    url = f"http://127.0.0.1:{args.port}{path}"
                    subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c100", "-d1s", url],
                                   capture_output=True, timeout=60)
                    before, t0 = cpu_ticks(proc.pid), time.time()
                    out = subprocess.run(
                        ["taskset", "-c", "1", "wrk", "-t1", "-c100", f"-d{args.duration}", "--latency", url],
                        capture_output=True, text=True, timeout=600).stdout
                    cpu = (cpu_ticks(proc.pid) - before) / os.sysconf("SC_CLK_TCK") / (time.time() - t0)
                    slug = name.replace(" ", "-")
                    with open(os.path.join(args.out, f"wrk-{slug}-{shape}.txt"), "w") as f:
                        f.write(out)
                    row = {"server": name, "shape": shape, "server_cpu_percent": round(cpu * 100, 1)}
                    row.update(parse_wrk(out))
                    rows.append(row)
                    print(f"{name:>16} {shape:>6}: {row['requests_per_sec']:>10,.0f} req/s, "
                          f"avg {row['latency_avg_ms']:.2f} ms, p99 {row['latency_p99_ms']} ms",
                          file=sys.stderr, flush=True)
            finally:
                proc.terminate()
                proc.wait(timeout=30)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    evloop = {r["shape"]: r for r in rows if r["server"] == "evloop"}
    lines = ["| server | load | req/s | vs evloop | avg ms | p50 ms | p90 ms | p99 ms | max ms | server CPU % |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for shape, _ in TARGETS:
        for r in (r for r in rows if r["shape"] == shape):
            ratio = r["requests_per_sec"] / evloop[shape]["requests_per_sec"]
            lines.append(f"| {r['server']} | {shape} | {r['requests_per_sec']:,.0f} | {ratio:.2f} | "
                         f"{r['latency_avg_ms']:.2f} | {r['latency_p50_ms']:.2f} | {r['latency_p90_ms']:.2f} | "
                         f"{r['latency_p99_ms']:.2f} | {r['latency_max_ms']:.2f} | {r['server_cpu_percent']} |")
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(args.out, "actor-batch.json"), "w") as f:
        json.dump({"command": " ".join(sys.argv), "uname": platform.uname()._asdict(),
                   "cpus": os.cpu_count(), "rows": rows}, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
