#!/usr/bin/env python3
"""HTTP benchmark of berth (evloop) against its strongest peers, or of every berth model against
evloop, as BENCHMARKS.md reports them.

Usage: python3 bench/http.py [--berth target/release/berth] [--rounds 2] [--duration 10]
                             [--peers nginx,nginx-deferred,hyper,hyper-mt,uvloop,granian]
                             [--shapes 'keep-alive,pipelined x16,connection per request,reverse']
       python3 bench/http.py --models [--ab-n 10000] [--model-list evloop,uring]  # ratios to evloop
       python3 bench/http.py --tls [--shapes 'keep-alive,connection per request,file 1m']

Peers (each skipped with a note when its toolchain is missing):
  nginx, nginx-deferred  peers/nginx.conf.in: one worker, `return 200` (hello world only), the
                         second with `deferred` (TCP_DEFER_ACCEPT), as berth's listener has
  hyper, hyper-mt        peers/rust-hyper (hyper 1.x, tokio current-thread / multi-thread),
                         built here with cargo into --build-dir
  uvloop                 peers/python_uvloop.py (uvloop + httptools)
  granian                peers/asgi_app.py under granian (ASGI, 1 worker)

Shapes: keep-alive (wrk -t1 -c100 on /hello/world), pipelined x16 (the same, 16 requests per
write), connection per request (ab -c 50), reverse (wrk -t1 -c100 POST /reverse with a small JSON
object; nginx serves no /reverse and is left out). Server pinned to core 0 (taskset -c 0), load
generator to core 1. For each shape and round the servers run interleaved (nginx, ..., berth,
then the next round). Server CPU time is utime+stime of all the server's processes from /proc,
read before and after each run. Every row gives berth's ratio to it in the same round. Needs wrk
and ab (Debian: wrk apache2-utils). Everything targets 127.0.0.1 and stops by itself.

--tls: HTTPS, berth against nginx (peers/nginx-tls.conf.in, one worker) with the same ECDSA P-256
certificate (made here with openssl), TLS 1.2 and 1.3, a bounded session cache on both. Shapes: keep-alive (wrk on
https), connection per request (wrk -H 'Connection: close': a full handshake per request, as wrk
keeps no session; CPU is per connection), file 1m (wrk -c10 on a 1 MiB file, /files/ on berth,
an alias on nginx: neither can sendfile over TLS without kTLS, so both read and encrypt).
"""
import argparse, os, re, shutil, signal, subprocess, sys, tempfile

from benchlib import cpu_seconds, free_port, rss_kb, wait_ready

HERE = os.path.dirname(os.path.abspath(__file__))


class Peer:
    def __init__(self, name, argv, port, workdir, tls=False):
        self.name, self.argv, self.port, self.workdir, self.tls = name, argv, port, workdir, tls

    def __enter__(self):
        self.proc = subprocess.Popen(["taskset", "-c", "0"] + self.argv, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, cwd=self.workdir, start_new_session=True)
        wait_ready(self.port, tls=self.tls)
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


def run_wrk(url, duration, script=None, pipelined=True, conns=100, header=None):
    argv = ["taskset", "-c", "1", "wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--latency"]
    if script:
        argv += ["-s", script]
    if header:
        argv += ["-H", header]
    argv.append(url)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 30).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    avg = re.search(r"Latency\s+([\d.]+)(us|ms|s)", out)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock = re.search(r"Socket errors: (.*)", out)
    # With a pipelining script wrk records one latency sample per batch but counts every
    # response, so its percentiles come out as 0: report them as unknown instead.
    p99_ms = float("nan") if script and pipelined else to_ms(*p99.groups())
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


def measure(peer, shape, duration, ab_n, tls=False):
    base = f"{'https' if tls else 'http'}://127.0.0.1:{peer.port}"
    hello = base + "/hello/world"
    before = cpu_seconds(peer.proc.pid)
    if shape == "keep-alive":
        r = run_wrk(hello, duration)
    elif shape == "pipelined x16":
        r = run_wrk(hello, duration, os.path.join(HERE, "pipeline.lua"))
    elif shape == "reverse":
        r = run_wrk(hello, duration, os.path.join(HERE, "reverse.lua"), pipelined=False)
    elif shape == "file 1m":
        r = run_wrk(base + "/files/1m.bin", duration, conns=10)
    elif tls:
        # wrk keeps no TLS session: every connection is a full handshake.
        r = run_wrk(hello, duration, conns=50, header="Connection: close")
    else:
        r = run_ab(peer.port, ab_n)
    cpu = cpu_seconds(peer.proc.pid) - before
    r["cpu_us_per_req"] = cpu * 1e6 / max(r["requests"], 1)
    r["rss_kb"] = rss_kb(peer.proc.pid)
    return r


def build_hyper(build_dir):
    """peers/rust-hyper built with cargo; (binary, None) or (None, why not)."""
    cargo = os.environ.get("CARGO") or shutil.which("cargo")
    if not cargo:
        return None, "cargo not found (install Rust: rustup, or apt-get install cargo)"
    target = os.path.abspath(os.path.join(build_dir, "rust-hyper"))
    run = subprocess.run([cargo, "build", "--release", "--quiet", "--manifest-path",
                          os.path.join(HERE, "..", "peers", "rust-hyper", "Cargo.toml"), "--target-dir", target],
                         capture_output=True, text=True)
    if run.returncode != 0:
        return None, "cargo build failed: " + (run.stderr.strip().splitlines() or ["?"])[-1]
    return os.path.join(target, "release", "rust-hyper-peer"), None


def python_has(module):
    return subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True).returncode == 0


def registry_models(berth):
    """Every model of berth's registry, as the binary lists them (the values `--model` takes)."""
    out = subprocess.run([berth, "serve", "--model", "?"], capture_output=True, text=True).stderr
    found = re.search(r"\[possible values: ([^\]]+)\]", out)
    if not found:
        sys.exit(f"{berth} did not list its models:\n{out}")
    return [m.strip() for m in found.group(1).split(",")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--berth", default="target/release/berth")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--shapes", default="keep-alive,pipelined x16,connection per request,reverse")
    ap.add_argument("--models", action="store_true", help="compare berth's models with each other")
    ap.add_argument("--model-list", default="all",
                    help="with --models: which models, or all of berth's registry (evloop is the base)")
    ap.add_argument("--ab-n", type=int, default=20000, help="requests per ab run")
    ap.add_argument("--peers", default="nginx,nginx-deferred,hyper,hyper-mt,uvloop,granian",
                    help="peers to run beside berth (without --models)")
    ap.add_argument("--build-dir", default="target/lab-peers", help="where hyper is built")
    ap.add_argument("--tls", action="store_true",
                    help="HTTPS: berth against nginx with the same certificate (shapes: keep-alive, "
                         "connection per request, file 1m)")
    args = ap.parse_args()
    for tool in ("wrk", "ab", "taskset"):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found: apt-get install wrk apache2-utils util-linux")
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
    if args.tls:
        if "--shapes" not in sys.argv:
            args.shapes = "keep-alive,connection per request,file 1m"
        peers, skipped = tls_peers(berth, work)
        return report(args, peers, skipped, work)
    models = {}
    model_list = registry_models(berth) if args.model_list == "all" else args.model_list.split(",")
    for model in model_list:
        port = free_port()
        models[model] = ([berth, "serve", "--model", model, "-p", str(port), "-A", "1", "-w", "1"], port)
    py, peers_dir = sys.executable, os.path.join(HERE, "..", "peers")
    skipped = {}
    if args.models:
        peers = models
    else:
        peers = {}
        wanted = args.peers.split(",") if args.peers else []
        nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
        hyper, why_not_hyper = (build_hyper(args.build_dir) if {"hyper", "hyper-mt"} & set(wanted)
                                else (None, None))
        for name in wanted:
            port = free_port()
            if name in ("nginx", "nginx-deferred"):
                if not nginx:
                    skipped[name] = "nginx not found (apt-get install nginx-light)"
                    continue
                conf = "nginx.conf" if name == "nginx" else "nginx-deferred.conf"
                peers[name] = ([nginx, "-c", os.path.join(work, conf), "-p", work], nport if name == "nginx" else dport)
            elif name in ("hyper", "hyper-mt"):
                if not hyper:
                    skipped[name] = why_not_hyper
                    continue
                peers[name] = ([hyper, str(port)] + (["--multi-thread"] if name == "hyper-mt" else []), port)
            elif name == "uvloop":
                if not python_has("uvloop, httptools"):
                    skipped[name] = "needs uvloop and httptools (pip install uvloop httptools)"
                    continue
                peers[name] = ([py, os.path.join(peers_dir, "python_uvloop.py"), str(port)], port)
            elif name == "granian":
                if not python_has("granian"):
                    skipped[name] = "needs granian (pip install granian)"
                    continue
                peers[name] = ([py, "-m", "granian", "--interface", "asgi", "--workers", "1", "--http", "1",
                                "--no-ws", "--log-level", "warning", "--working-dir", os.path.abspath(peers_dir),
                                "--host", "127.0.0.1", "--port", str(port), "asgi_app:app"], port)
            else:
                sys.exit(f"--peers: no peer {name!r} (nginx, nginx-deferred, hyper, hyper-mt, uvloop, granian)")
        peers["berth"] = ([os.path.abspath(args.berth), "serve", "-p", str(bport), "-A", "1", "-w", "1"], bport)
    return report(args, peers, skipped, work)


def tls_peers(berth, work):
    """nginx over TLS and berth over TLS, the same ECDSA P-256 certificate and a 1 MiB file."""
    if not shutil.which("openssl"):
        sys.exit("--tls needs openssl to make the certificate (apt-get install openssl)")
    cert, key = os.path.join(work, "cert.pem"), os.path.join(work, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"], check=True, capture_output=True)
    files = os.path.join(work, "files")
    os.makedirs(files, exist_ok=True)
    with open(os.path.join(files, "1m.bin"), "wb") as f:
        f.write(os.urandom(1 << 20))
    # nginx's worker runs as nobody when started by root: it must be able to reach the file.
    for path in (work, files, os.path.join(files, "1m.bin")):
        os.chmod(path, 0o755)
    nport, bport = free_port(), free_port()
    conf = open(os.path.join(HERE, "..", "peers", "nginx-tls.conf.in")).read()
    for key_, value in (("@DIR@", work), ("@PORT@", str(nport)), ("@CERT@", cert), ("@KEY@", key),
                        ("@FILES@", files)):
        conf = conf.replace(key_, value)
    with open(os.path.join(work, "nginx-tls.conf"), "w") as f:
        f.write(conf)
    peers, skipped = {}, {}
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if nginx:
        peers["nginx"] = ([nginx, "-c", os.path.join(work, "nginx-tls.conf"), "-p", work], nport)
    else:
        skipped["nginx"] = "nginx not found (apt-get install nginx-light)"
    peers["berth"] = ([berth, "serve", "-p", str(bport), "-A", "1", "-w", "1", "--tls-cert", cert,
                       "--tls-key", key, "--root", files], bport)
    return peers, skipped


def report(args, peers, skipped, work):
    for name, why in skipped.items():
        print(f"{name}: skipped: {why}", file=sys.stderr)
    rows = []
    for shape in args.shapes.split(","):
        for rnd in range(1, args.rounds + 1):
            for name, (argv, port) in peers.items():
                if shape == "reverse" and name.startswith("nginx"):
                    continue
                with Peer(name, argv, port, work, tls=args.tls) as peer:
                    r = measure(peer, shape, args.duration, args.ab_n, tls=args.tls)
                r.update(shape=shape, round=rnd, server=name)
                rows.append(r)
                print(f"{shape:24} round {rnd} {name:14} {r['rps']:>11.0f} req/s  avg {r['avg_ms']:6.2f} ms  "
                      f"p99 {r['p99_ms']:7.2f} ms  "
                      f"cpu {r['cpu_us_per_req']:6.2f} us/req  rss {r['rss_kb']} KiB  errors {r['errors']} "
                      f"{r['socket_errors']}", flush=True)
    print()
    base_name = "evloop" if args.models else "berth"
    print(f"| shape | round | server | req/s | {base_name} req/s ÷ this | CPU µs/req | {base_name} CPU/req ÷ this "
          "| avg ms | p99 ms | RSS KiB | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")

    def ratio(a, b):
        return f"{a / b:.2f}x" if a and b else "n/a"

    for shape in args.shapes.split(","):
        for rnd in range(1, args.rounds + 1):
            same = [r for r in rows if r["shape"] == shape and r["round"] == rnd]
            base = next((r for r in same if r["server"] == base_name), {})
            for r in same:
                p99 = "n/a" if r["p99_ms"] != r["p99_ms"] else f"{r['p99_ms']:.2f}"
                sock = f" (socket: {r['socket_errors']})" if r["socket_errors"] else ""
                print(f"| {shape} | {rnd} | {r['server']} | {r['rps']:.0f} | {ratio(base.get('rps'), r['rps'])} | "
                      f"{r['cpu_us_per_req']:.2f} | {ratio(base.get('cpu_us_per_req'), r['cpu_us_per_req'])} | "
                      f"{r['avg_ms']:.2f} | {p99} | {r['rss_kb']} | {r['errors']}{sock} |")
    for name, why in skipped.items():
        print(f"\n{name} was not measured: {why}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
