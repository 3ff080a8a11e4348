#!/usr/bin/env python3
"""berth bench against wrk on the same server in the same run (BENCHMARKS.md).

Usage: python3 bench/wrk_agreement.py NAME [--berth target/release/berth] [--port 9300] -- SERVER ARGV...
  e.g. python3 bench/wrk_agreement.py asyncio -- python3 peers/python_asyncio.py 9300

Starts SERVER ARGV on core 0 (it must listen on 127.0.0.1:PORT and serve /hello/world), then runs
three rounds, alternating which generator goes first: wrk -t1 -c100 -d10s and
berth bench -t1 -c100 -d10, both on core 1. Prints each one's requests/s and its own CPU time per
request (getrusage of the finished generator). Needs wrk and taskset; bounded (about 70 s).
"""
import argparse, json, re, resource, subprocess, sys, time


def timed(argv):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(["taskset", "-c", "1"] + argv, capture_output=True, text=True, timeout=60).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return out, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name")
    ap.add_argument("--berth", default="target/release/berth")
    ap.add_argument("--port", type=int, default=9300)
    ap.add_argument("server", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    server = args.server[1:] if args.server[:1] == ["--"] else args.server
    if not server:
        ap.error("give the server's command after --")
    url = f"http://127.0.0.1:{args.port}/hello/world"

    def wrk():
        out, cpu = timed(["wrk", "-t1", "-c100", "-d10s", url])
        n = int(re.search(r"(\d+) requests in", out).group(1))
        return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)), cpu * 1e6 / n

    def bench():
        out, cpu = timed([args.berth, "bench", url, "-t1", "-c100", "-d10", "--json"])
        report = json.loads(out)
        return report["requests_per_sec"], cpu * 1e6 / report["requests"]

    proc = subprocess.Popen(["taskset", "-c", "0"] + server, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1)
        for rnd, order in enumerate([(wrk, bench), (bench, wrk), (wrk, bench)], 1):
            res = {f.__name__: f() for f in order}
            (w, wc), (b, bc) = res["wrk"], res["bench"]
            print(f"{args.name} round {rnd}: wrk {w:,.0f}/s ({wc:.1f} us CPU/req)  "
                  f"bench {b:,.0f}/s ({bc:.1f} us CPU/req)  bench/wrk {b / w:.2f}", flush=True)
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    sys.exit(main())
