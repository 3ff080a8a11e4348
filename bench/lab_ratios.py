#!/usr/bin/env python3
"""Markdown ratio tables from a `berth lab` run's lab.json, for BENCHMARKS.md.

Usage: python3 bench/lab_ratios.py target/lab/lab.json [--base evloop]

For each shape: every server's requests/s, p99 and server CPU per request, and the base server's
ratio to it (CPU per request: base / server, lower is better for the base; requests/s:
base / server, higher is better). Rows the lab marked client-bound say so, since their
requests/s measured the load generator.
"""
import argparse
import json


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lab_json")
    ap.add_argument("--base", default="evloop")
    args = ap.parse_args()
    lab = json.load(open(args.lab_json))
    for shape in lab["shapes"]:
        rows = [r for r in lab["rows"] if r["shape"] == shape["name"]]
        base = next((r for r in rows if r["server"] == args.base), None)
        if not rows or base is None:
            continue
        print(f"\n**{shape['title']}** (`{shape['name']}`)\n")
        print(f"| server | req/s | p99 ms | CPU µs/req | {args.base} req/s ÷ this | {args.base} CPU/req ÷ this (below 1: {args.base} cheaper) | note |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            cpu = r["server_cpu_us_per_request"]
            bcpu = base["server_cpu_us_per_request"]
            rps_ratio = base["requests_per_sec"] / r["requests_per_sec"] if r["requests_per_sec"] else float("nan")
            cpu_ratio = bcpu / cpu if cpu and bcpu else float("nan")
            note = "client-bound" if r["client_bound"] else ""
            if r["errors"]:
                note = (note + f", {r['errors']} errors").lstrip(", ")
            print(f"| {r['server']} | {r['requests_per_sec']:,.0f} | {r['latency_p99_ms']:.2f} | "
                  f"{cpu:.1f} | {rps_ratio:.2f}x | {cpu_ratio:.2f}x | {note} |")


if __name__ == "__main__":
    main()
