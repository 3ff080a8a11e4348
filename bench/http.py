#!/usr/bin/env python3
"""HTTP benchmark of berth (evloop) against nginx, or of every berth model against evloop, as
BENCHMARKS.md reports them.

Usage: python3 bench/http.py [--berth target/release/berth] [--rounds 2] [--duration 10]
       python3 bench/http.py --models [--ab-n 10000]     # every model, ratios to evloop

Server pinned to core 0 (taskset -c 0), load generator to core 1. For each load shape the peers
run interleaved (nginx, berth, nginx, berth, ...). Server CPU time is utime+stime of all the
server's processes from /proc, read before and after each run. Needs wrk, ab and nginx
(Debian: wrk apache2-utils nginx-light). Everything targets 127.0.0.1 and stops by itself.
"""
import argparse, os, re, shutil, signal, socket, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_ready(port, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"GET /hello/world HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if s.recv(100).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"server on port {port} did not answer")


def tree_pids(pid):
    pids = [pid]
    try:
        out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
        for child in out.split():
            pids += tree_pids(int(child))
    except FileNotFoundError:
        pass
    return pids


def cpu_seconds(pid):
    """utime+stime of the server and its live descendants, plus cutime+cstime of the root:
    the time of children that have already exited and been reaped (forked model)."""
    total = 0
    for p in tree_pids(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
            if p == pid:
                total += int(fields[13]) + int(fields[14])  # cutime, cstime
        except OSError:
            pass
    return total / TICK


def rss_kb(pid):
    total = 0
    for p in tree_pids(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                m = re.search(r"VmRSS:\s+(\d+)", f.read())
                total += int(m.group(1)) if m else 0
        except OSError:
            pass
    return total


class Peer:
    def __init__(self, name, argv, port, workdir):
        self.name, self.argv, self.port, self.workdir = name, argv, port, workdir

    def __enter__(self):
        self.proc = subprocess.Popen(["taskset", "-c", "0"] + self.argv, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, cwd=self.workdir, start_new_session=True)
        wait_ready(self.port)
        return self

    def __exit__(self, *exc):
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def to_ms(value, unit):
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def run_wrk(port, duration, script=None):
    argv = ["taskset", "-c", "1", "wrk", "-t1", "-c100", f"-d{duration}s", "--latency"]
    if script:
        argv += ["-s", script]
    argv.append(f"http://127.0.0.1:{port}/hello/world")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 30).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    avg = re.search(r"Latency\s+([\d.]+)(us|ms|s)", out)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock = re.search(r"Socket errors: (.*)", out)
    # With a pipelining script wrk records one latency sample per batch but counts every
    # response, so its percentiles come out as 0: report them as unknown instead.
    p99_ms = float("nan") if script else to_ms(*p99.groups())
    return {"rps": rps, "requests": total, "p99_ms": p99_ms, "avg_ms": to_ms(*avg.groups()),
            "errors": (int(errors.group(1)) if errors else 0), "socket_errors": sock.group(1) if sock else ""}


def run_ab(port, n, c=50):
    argv = ["taskset", "-c", "1", "ab", "-q", "-n", str(n), "-c", str(c), f"http://127.0.0.1:{port}/hello/world"]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    out = run.stdout
    if "Requests per second" not in out:
        # ab gives up on the first reset or timeout; say so instead of failing the whole run.
        why = (run.stderr.strip().splitlines() or ["ab failed"])[-1]
        return {"rps": 0.0, "requests": 0, "p99_ms": float("nan"), "avg_ms": float("nan"), "errors": 1,
                "socket_errors": why}
    rps = float(re.search(r"Requests per second:\s+([\d.]+)", out).group(1))
    failed = int(re.search(r"Failed requests:\s+(\d+)", out).group(1))
    p99 = re.search(r"\s99%\s+(\d+)", out)
    mean = float(re.search(r"Time per request:\s+([\d.]+) \[ms\] \(mean\)", out).group(1))
    return {"rps": rps, "requests": n, "p99_ms": float(p99.group(1)) if p99 else float("nan"),
            "avg_ms": mean, "errors": failed,
            "socket_errors": ""}


def measure(peer, shape, duration, ab_n):
    before = cpu_seconds(peer.proc.pid)
    if shape == "keep-alive":
        r = run_wrk(peer.port, duration)
    elif shape == "pipelined x16":
        r = run_wrk(peer.port, duration, os.path.join(HERE, "pipeline.lua"))
    else:
        r = run_ab(peer.port, ab_n)
    cpu = cpu_seconds(peer.proc.pid) - before
    r["cpu_us_per_req"] = cpu * 1e6 / max(r["requests"], 1)
    r["rss_kb"] = rss_kb(peer.proc.pid)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--berth", default="target/release/berth")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--shapes", default="keep-alive,pipelined x16,connection per request")
    ap.add_argument("--models", action="store_true", help="compare berth's models with each other")
    ap.add_argument("--ab-n", type=int, default=20000, help="requests per ab run")
    args = ap.parse_args()
    for tool in ("wrk", "ab", "nginx", "taskset"):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found: apt-get install wrk apache2-utils nginx-light util-linux")
    work = tempfile.mkdtemp(prefix="berth-bench-")
    nport, bport = free_port(), free_port()
    dport = free_port()
    template = open(os.path.join(HERE, "..", "peers", "nginx.conf.in")).read().replace("@DIR@", work)
    with open(os.path.join(work, "nginx.conf"), "w") as f:
        f.write(template.replace("@PORT@", str(nport)))
    # The same nginx with `deferred` (TCP_DEFER_ACCEPT), which berth's HTTP listener also uses.
    with open(os.path.join(work, "nginx-deferred.conf"), "w") as f:
        f.write(template.replace("@PORT@", str(dport)).replace("backlog=1024;", "backlog=1024 deferred;"))
    berth = os.path.abspath(args.berth)
    models = {}
    for model in ("single", "threaded", "forked", "prefork", "evloop"):
        port = free_port()
        models[model] = ([berth, "serve", "--model", model, "-p", str(port), "-A", "1", "-w", "1"], port)
    peers = models if args.models else {
        "nginx": (["nginx", "-c", os.path.join(work, "nginx.conf"), "-p", work], nport),
        "nginx-deferred": (["nginx", "-c", os.path.join(work, "nginx-deferred.conf"), "-p", work], dport),
        "berth": ([os.path.abspath(args.berth), "serve", "-p", str(bport), "-A", "1", "-w", "1"], bport),
    }
    rows = []
    for shape in args.shapes.split(","):
        for rnd in range(1, args.rounds + 1):
            for name, (argv, port) in peers.items():
                with Peer(name, argv, port, work) as peer:
                    r = measure(peer, shape, args.duration, args.ab_n)
                r.update(shape=shape, round=rnd, server=name)
                rows.append(r)
                print(f"{shape:24} round {rnd} {name:14} {r['rps']:>11.0f} req/s  avg {r['avg_ms']:6.2f} ms  "
                      f"p99 {r['p99_ms']:7.2f} ms  "
                      f"cpu {r['cpu_us_per_req']:6.2f} us/req  rss {r['rss_kb']} KiB  errors {r['errors']} "
                      f"{r['socket_errors']}", flush=True)
    print()
    baseline = "evloop" if args.models else "nginx"
    print(f"| shape | round | server | req/s | vs {baseline} | CPU µs/req | vs {baseline} | avg ms | p99 ms "
          "| RSS KiB | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for shape in args.shapes.split(","):
        for rnd in range(1, args.rounds + 1):
            same = [r for r in rows if r["shape"] == shape and r["round"] == rnd]
            base = next(r for r in same if r["server"] == baseline)
            for r in same:
                p99 = "n/a" if r["p99_ms"] != r["p99_ms"] else f"{r['p99_ms']:.2f}"
                sock = f" (socket: {r['socket_errors']})" if r["socket_errors"] else ""
                print(f"| {shape} | {rnd} | {r['server']} | {r['rps']:.0f} | {r['rps'] / base['rps']:.2f}x | "
                      f"{r['cpu_us_per_req']:.2f} | {r['cpu_us_per_req'] / base['cpu_us_per_req']:.2f}x | "
                      f"{r['avg_ms']:.2f} | {p99} | {r['rss_kb']} | {r['errors']}{sock} |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
