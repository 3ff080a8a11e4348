#!/usr/bin/env python3
"""HTTP/2 benchmark (issue 32): berth against nginx (`http2`) and hyper's HTTP/2 server, with
h2load (Debian's nghttp2-client) as the independent load generator, over h2c (prior knowledge)
and TLS (ALPN h2, the same ECDSA P-256 certificate for every server). Also berth's own HTTP/1.1
keep-alive (wrk) in the same rounds, for the "HTTP/2 costs at most 1.2x HTTP/1.1" figure.

Usage: python3 bench/h2.py [--berth target/release/berth] [--hyper PATH] [--rounds 2]
                           [--duration 10] [--shapes '1x100,100x10'] [--transports h2c,tls]

Shapes: CxM is h2load -c C -m M (C connections, M streams in flight on each) on GET
/hello/world ("Hello, World!"; nginx `return 200` the same 13 bytes), -t 1. Servers: one
thread each (berth evloop -A 1 -w 1, nginx one worker, hyper's current-thread runtime), pinned
to core 0 with taskset, h2load to core 1. For each shape and round the servers run interleaved.
Server CPU is utime+stime of the server's processes from /proc, before and after each run; the
table gives requests/s, server CPU microseconds per request, and berth's ratio to each peer.
hyper: peers/rust-hyper built with `cargo build --release` (h2c only: hyper's HTTP/2 server over
TLS needs tokio-rustls, which the peer does not carry, so hyper runs the h2c rows only).
"""
import argparse, os, re, subprocess, sys, tempfile, time

from benchlib import cpu_seconds, free_port

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

NGINX_H2 = """worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log stderr error;
events {{ worker_connections 20000; }}
http {{
    access_log off;
    keepalive_requests 1000000000;
    keepalive_timeout 600s;
    http2_max_concurrent_streams 128;
    client_body_temp_path {dir}/body;
    server {{
        listen 127.0.0.1:{port} {listen} backlog=1024;
        {tls}
        location / {{ default_type text/plain; return 200 "Hello, World!"; }}
    }}
}}
"""


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


def start(name, args, transport, cert, tmp):
    port = free_port()
    tls = transport == "tls"
    if name == "berth":
        cmd = [args.berth, "serve", "--model", "evloop", "-A", "1", "-w", "1", "--host",
               "127.0.0.1", "--port", str(port)]
        if tls:
            cmd += ["--tls-cert", cert[0], "--tls-key", cert[1]]
        else:
            cmd += ["--http2", "only"]
        # As nginx's keepalive_requests below: h2load does not reconnect after a GOAWAY.
        cmd += ["--http2-max-requests", "4000000000"]
    elif name == "nginx":
        conf = os.path.join(tmp, f"nginx-{port}.conf")
        with open(conf, "w") as f:
            f.write(NGINX_H2.format(
                dir=tmp, port=port, listen="ssl http2" if tls else "http2",
                tls=(f"ssl_certificate {cert[0]}; ssl_certificate_key {cert[1]}; "
                     "ssl_protocols TLSv1.2 TLSv1.3; ssl_session_cache shared:SSL:1m;")
                if tls else ""))
        cmd = ["/usr/sbin/nginx", "-c", conf]
    else:
        cmd = [args.hyper, str(port), "--h2"]
    proc = subprocess.Popen(["taskset", "-c", "0", *cmd], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    wait_h2(port, tls, proc)
    return proc, port


def h2load(port, tls, conns, streams, duration):
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}/hello/world"
    out = subprocess.run(["taskset", "-c", "1", "h2load", "-t", "1", "-c", str(conns), "-m",
                          str(streams), "-D", str(duration), "--warm-up-time", "1", url],
                         capture_output=True, text=True).stdout
    done = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded", out)
    rps = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    if not done or not rps:
        sys.exit(f"h2load gave no figures:\n{out}")
    return int(done.group(2)), float(rps.group(1)), int(done.group(1)) - int(done.group(2))


def wrk_keepalive(port, duration):
    out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c100", f"-d{duration}s",
                          f"http://127.0.0.1:{port}/hello/world"],
                         capture_output=True, text=True).stdout
    reqs = re.search(r"(\d+) requests in", out)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    return int(reqs.group(1)), float(rps.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--berth", default=os.path.join(ROOT, "target", "release", "berth"))
    ap.add_argument("--hyper", default=os.path.join(ROOT, "target", "lab-build", "rust-hyper",
                                                     "release", "rust-hyper-peer"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--shapes", default="1x100,100x10")
    ap.add_argument("--transports", default="h2c,tls")
    args = ap.parse_args()
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cert = (os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem"))
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                        "/CN=localhost", "-keyout", cert[1], "-out", cert[0]],
                       check=True, capture_output=True)
        for rnd in range(1, args.rounds + 1):
            for transport in args.transports.split(","):
                for conns, streams in shapes:
                    servers = ["nginx"] + (["hyper"] if transport == "h2c" else []) + ["berth"]
                    for name in servers:
                        proc, port = start(name, args, transport, cert, tmp)
                        try:
                            before = cpu_seconds(proc.pid)
                            ok, rps, failed = h2load(port, transport == "tls", conns, streams,
                                                     args.duration)
                            cpu = cpu_seconds(proc.pid) - before
                        finally:
                            proc.terminate()
                            proc.wait(20)
                        rows.append((rnd, transport, f"{conns}x{streams}", name, rps,
                                     cpu / max(ok, 1) * 1e6, failed))
                        print(f"round {rnd} {transport} {conns}x{streams} {name:>6}: {rps:>10.0f} "
                              f"req/s, {cpu / max(ok, 1) * 1e6:6.2f} us CPU/req, {failed} failed",
                              flush=True)
            # berth's own HTTP/1.1 keep-alive in the same round, for the h2/h1 ratio.
            port = free_port()
            proc = subprocess.Popen(["taskset", "-c", "0", args.berth, "serve", "--model",
                                     "evloop", "-A", "1", "-w", "1", "--host", "127.0.0.1",
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
            rows.append((rnd, "h1", "wrk -c100", "berth", rps, cpu / max(reqs, 1) * 1e6, 0))
            print(f"round {rnd} HTTP/1.1 keep-alive berth: {rps:>10.0f} req/s, "
                  f"{cpu / max(reqs, 1) * 1e6:6.2f} us CPU/req", flush=True)
    print("\n| round | transport | shape | server | req/s | CPU us/req | berth CPU/req ratio |")
    print("|---|---|---|---|---|---|---|")
    for rnd, transport, shape, name, rps, us, failed in rows:
        berth = [r for r in rows if r[:3] == (rnd, transport, shape) and r[3] == "berth"]
        ratio = f"{berth[0][5] / us:.2f}x" if berth and name != "berth" else ""
        print(f"| {rnd} | {transport} | {shape} | {name} | {rps:.0f} | {us:.2f} | {ratio} |")


if __name__ == "__main__":
    main()
