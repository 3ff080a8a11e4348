"""Instructions per request (callgrind), base against new: deterministic whatever the machine's
load. Two runs per binary, N1 and N2 requests on one connection; per request is the difference
over N2-N1, so startup and shutdown cancel out.

    python3 bench/instructions.py SHAPE BASE_BINARY NEW_BINARY

SHAPE: keep-alive (HTTP/1.1, one request at a time), keep-alive-c50 (HTTP/1.1, wrk's request
on fifty connections, one request at a time on each: a loop's turn carries many requests, as
under wrk), pipelined (x16), h2c (h2load -c 1 -m 1 with prior knowledge, one stream at a
time), h2c-m10 (-m 10)."""
import os, re, signal, socket, subprocess, sys, time


def wait_port(port):
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing listens on {port}")


def run(name, binary, n, port, shape):
    out = f"/tmp/ab-{name}-{shape}-{n}.out"
    args = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", binary, "serve",
            "-m", "evloop", "-A", "1", "-w", "1", "-p", str(port)]
    if shape.startswith("h2c"):
        args += ["--http2", "only"]
    srv = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    req = b"GET /hello/world HTTP/1.1\r\nHost: x\r\n\r\n"
    if shape == "keep-alive-c50":
        # wrk's request (the nginx comparison's load), on 50 connections: each round sends one
        # request on every connection, then reads every answer.
        socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(50)]
        for _ in range(n // 50):
            for s in socks:
                s.sendall(req)
            for s in socks:
                data = b""
                while not data.endswith(b"Hello, World!"):
                    data += s.recv(4096)
        for s in socks:
            s.close()
    elif shape.startswith("h2c"):
        m = "10" if shape == "h2c-m10" else "1"
        subprocess.run(["h2load", "-n", str(n), "-c", "1", "-m", m, "-t", "1",
                        f"http://127.0.0.1:{port}/hello/world"], check=True,
                       stdout=subprocess.DEVNULL)
    else:
        s = socket.create_connection(("127.0.0.1", port))
        if shape == "pipelined":
            batch = req * 16
            for _ in range(n // 16):
                s.sendall(batch)
                got = 0
                while got < 16:
                    got += s.recv(1 << 16).count(b"Hello, World!")
        else:
            for _ in range(n):
                s.sendall(req)
                data = b""
                while not data.endswith(b"Hello, World!"):
                    data += s.recv(4096)
        s.close()
    srv.send_signal(signal.SIGTERM)
    srv.wait()
    text = open(out).read()
    m = re.search(r"^summary: (\d+)", text, re.M) or re.search(r"^totals: (\d+)", text, re.M)
    return int(m.group(1))


shape, base, new = sys.argv[1], sys.argv[2], sys.argv[3]
res = {}
for name, binary in [("base", base), ("new", new)]:
    a = run(name, binary, 2000, 19990, shape)
    b = run(name, binary, 10000, 19991, shape)
    res[name] = (b - a) / 8000
    print(f"{shape} {name}: {res[name]:.0f} instructions per request ({a} at 2000, {b} at 10000)",
          flush=True)
print(f"{shape} new/base: {res['new']/res['base']:.3f}")
