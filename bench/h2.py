#!/usr/bin/env python3
"""HTTP/2 benchmark (issue 32): berth's models against nginx (`http2`) and hyper's HTTP/2
server, with h2load (Debian's nghttp2-client) as the independent load generator, over h2c
(prior knowledge) and TLS (ALPN h2, the same ECDSA P-256 certificate for every server). Also
berth's own HTTP/1.1 keep-alive (wrk) in the same rounds, for the "HTTP/2 costs at most 1.2x
HTTP/1.1" figure.

Usage: python3 bench/h2.py [--berth target/release/berth] [--hyper PATH] [--rounds 2]
                           [--duration 10] [--shapes '1x100,100x10'] [--transports h2c,tls]
                           [--models evloop,uring] [--servers nginx,hyper,berth]

Shapes: CxM is h2load -c C -m M (C connections, M streams in flight on each) on GET
/hello/world ("Hello, World!"; nginx `return 200` the same 13 bytes), -t 1. Servers: one
thread each (berth `-A 1 -w 1` in each model of --models, nginx one worker from
peers/nginx-h2.conf.in and peers/nginx-h2-tls.conf.in, hyper's current-thread runtime: the
lab's hyper peer with --h2, and --tls-cert/--tls-key over TLS), pinned to core 0 with
taskset, h2load to core 1. For each round, transport and shape the servers run interleaved.
Server CPU is utime+stime of the server's processes from /proc, before and after each run
(warm-up included, so it is divided by the warm-up's requests too); the table gives
requests/s, server CPU microseconds per request, and each berth model's ratio to each peer
and to its own HTTP/1.1 keep-alive. The load average (`/proc/loadavg`) is printed at the
start of each round: the machine is shared, and the figures mean little if it was busy.

hyper: peers/rust-hyper; without --hyper the script builds it with
`cargo build --release --manifest-path peers/rust-hyper/Cargo.toml --target-dir target/lab-peers/rust-hyper`
(cargo knows what is up to date).
"""
import argparse, os, re, subprocess, sys, tempfile, time

from benchlib import cpu_seconds, free_port

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEERS = os.path.join(ROOT, "peers")
WARMUP = 1


def wait_h2(port, tls, proc):
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}/hello/world"
    end = time.time() + 20
    while time.time() < end:
        if proc.poll() is not None:
            sys.exit(f"server exited: {proc.args}")
        r = subprocess.run(["h2load", "-n", "1", "-c", "1", url], capture_output=True, text=True)
        if "1 succeeded" in r.stdout:
            return
        time.sleep(0.1)
    sys.exit(f"no HTTP/2 answer on {url}")


def nginx_conf(tmp, port, tls, cert):
    """peers/nginx-h2[-tls].conf.in filled in, as `berth lab` fills it."""
    template = os.path.join(PEERS, "nginx-h2-tls.conf.in" if tls else "nginx-h2.conf.in")
    with open(template) as f:
        text = f.read()
    for key, value in (("@PORT@", str(port)), ("@DIR@", tmp), ("@CERT@", cert[0]),
                       ("@KEY@", cert[1]), ("@FILES@", os.path.join(tmp, "files"))):
        text = text.replace(key, value)
    path = os.path.join(tmp, f"nginx-{port}.conf")
    with open(path, "w") as f:
        f.write(text)
    return path


def start(name, args, transport, cert, tmp):
    port = free_port()
    tls = transport == "tls"
    if name.startswith("berth-"):
        model = name[len("berth-"):]
        cmd = [args.berth, "serve", "--model", model, "-A", "1", "-w", "1", "--host",
               "127.0.0.1", "--port", str(port)]
        if tls:
            cmd += ["--tls-cert", cert[0], "--tls-key", cert[1]]
        else:
            cmd += ["--http2", "only"]
        # As nginx's keepalive_requests: h2load does not reconnect after a GOAWAY.
        cmd += ["--http2-max-requests", "4000000000"]
    elif name == "nginx":
        cmd = ["/usr/sbin/nginx", "-c", nginx_conf(tmp, port, tls, cert), "-p", tmp]
    else:
        cmd = [args.hyper, str(port), "--h2"]
        if tls:
            cmd += ["--tls-cert", cert[0], "--tls-key", cert[1]]
    proc = subprocess.Popen(["taskset", "-c", "0", *cmd], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    wait_h2(port, tls, proc)
    return proc, port


def h2load(port, tls, conns, streams, duration):
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}/hello/world"
    out = subprocess.run(["taskset", "-c", "1", "h2load", "-t", "1", "-c", str(conns), "-m",
                          str(streams), "-D", str(duration), "--warm-up-time", str(WARMUP), url],
                         capture_output=True, text=True).stdout
    done = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded", out)
    rps = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    if not done or not rps:
        sys.exit(f"h2load gave no figures:\n{out}")
    # The warm-up's requests are not in h2load's count but are in the server's CPU time:
    # estimated at the measured rate.
    ok = int(done.group(2))
    return ok, float(rps.group(1)), int(done.group(1)) - ok, ok + float(rps.group(1)) * WARMUP


def wrk_keepalive(port, duration):
    out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c100", f"-d{duration}s",
                          f"http://127.0.0.1:{port}/hello/world"],
                         capture_output=True, text=True).stdout
    reqs = re.search(r"(\d+) requests in", out)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    return int(reqs.group(1)), float(rps.group(1))


def build_hyper():
    target = os.path.join(ROOT, "target", "lab-peers", "rust-hyper")
    subprocess.run([os.environ.get("CARGO", "cargo"), "build", "--release", "--quiet",
                    "--manifest-path", os.path.join(PEERS, "rust-hyper", "Cargo.toml"),
                    "--target-dir", target], check=True)
    return os.path.join(target, "release", "rust-hyper-peer")


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--berth", default=os.path.join(ROOT, "target", "release", "berth"))
    ap.add_argument("--hyper", help="the hyper peer's binary [default: built by cargo]")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--shapes", default="1x100,100x10")
    ap.add_argument("--transports", default="h2c,tls")
    ap.add_argument("--models", default="evloop,uring")
    ap.add_argument("--servers", default="nginx,hyper,berth")
    args = ap.parse_args()
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes.split(",")]
    models = args.models.split(",")
    if "hyper" in args.servers.split(",") and not args.hyper:
        args.hyper = build_hyper()
    servers = []
    for s in args.servers.split(","):
        servers += [f"berth-{m}" for m in models] if s == "berth" else [s]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cert = (os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem"))
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                        "/CN=localhost", "-keyout", cert[1], "-out", cert[0]],
                       check=True, capture_output=True)
        for rnd in range(1, args.rounds + 1):
            print(f"round {rnd}: load average {loadavg()} at {time.strftime('%H:%M:%S')}",
                  flush=True)
            for transport in args.transports.split(","):
                for conns, streams in shapes:
                    for name in servers:
                        proc, port = start(name, args, transport, cert, tmp)
                        try:
                            before = cpu_seconds(proc.pid)
                            ok, rps, failed, served = h2load(port, transport == "tls", conns,
                                                             streams, args.duration)
                            cpu = cpu_seconds(proc.pid) - before
                        finally:
                            proc.terminate()
                            proc.wait(20)
                        us = cpu / max(served, 1) * 1e6
                        rows.append((rnd, transport, f"{conns}x{streams}", name, rps, us, failed))
                        print(f"round {rnd} {transport} {conns}x{streams} {name:>12}: "
                              f"{rps:>10.0f} req/s, {us:6.2f} us CPU/req, {failed} failed",
                              flush=True)
            # berth's own HTTP/1.1 keep-alive in the same round, for the h2/h1 ratio.
            for model in models if "berth" in args.servers.split(",") else []:
                port = free_port()
                proc = subprocess.Popen(["taskset", "-c", "0", args.berth, "serve", "--model",
                                         model, "-A", "1", "-w", "1", "--host", "127.0.0.1",
                                         "--port", str(port)], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
                wait_h2(port, False, proc)
                try:
                    before = cpu_seconds(proc.pid)
                    reqs, rps = wrk_keepalive(port, args.duration)
                    cpu = cpu_seconds(proc.pid) - before
                finally:
                    proc.terminate()
                    proc.wait(20)
                us = cpu / max(reqs, 1) * 1e6
                rows.append((rnd, "h1", "wrk -c100", f"berth-{model}", rps, us, 0))
                print(f"round {rnd} HTTP/1.1 keep-alive berth-{model}: {rps:>10.0f} req/s, "
                      f"{us:6.2f} us CPU/req", flush=True)
            print(f"round {rnd} done: load average {loadavg()} at {time.strftime('%H:%M:%S')}",
                  flush=True)

    def us_of(rnd, transport, shape, name):
        hit = [r[5] for r in rows if r[:4] == (rnd, transport, shape, name)]
        return hit[0] if hit else None

    print("\n| round | transport | shape (C×M) | server | req/s | server CPU µs/req | failed "
          "| ÷ nginx | ÷ hyper | ÷ own HTTP/1.1 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for rnd, transport, shape, name, rps, us, failed in rows:
        ratios = ["", "", ""]
        if name.startswith("berth-") and transport != "h1":
            for i, peer in enumerate(["nginx", "hyper"]):
                theirs = us_of(rnd, transport, shape, peer)
                if theirs:
                    ratios[i] = f"{us / theirs:.2f}x"
            h1 = us_of(rnd, "h1", "wrk -c100", name)
            if h1:
                ratios[2] = f"{us / h1:.2f}x"
        print(f"| {rnd} | {transport} | {shape} | {name} | {rps:,.0f} | {us:.2f} | {failed} | "
              + " | ".join(ratios) + " |")


if __name__ == "__main__":
    main()
