#!/usr/bin/env python3
"""The control for free-threaded WSGI's `--threads 2` against 1 (issue 33): the same pure-Python
work as `apps.wsgi_apps:work` (a sum over 20,000 squares), run by 1 and then 2 plain threads in
this interpreter, no server. On a free-threaded CPython on a quiet 2-core machine 2 threads do
about 2x the loops of one; what they do here is the parallelism the machine has to give at the
moment, the ceiling for berth's ratio measured beside it.

Usage: PY bench/python_threads_control.py [--rounds 2] [--loops 1500]
"""
import argparse
import sys
import sysconfig
import threading
import time


def work(n):
    for _ in range(n):
        total = 0
        for i in range(20000):
            total += i * i


def run(threads, loops):
    ts = [threading.Thread(target=work, args=(loops,)) for _ in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return threads * loops / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--loops", type=int, default=1500)
    args = ap.parse_args()
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    print("%s, free-threaded build %s, GIL %s" % (sys.version.split()[0],
          bool(sysconfig.get_config_var("Py_GIL_DISABLED")), "on" if gil else "off"))
    for r in range(1, args.rounds + 1):
        one, two = run(1, args.loops), run(2, args.loops)
        print("round %d: 1 thread %.0f loops/s, 2 threads %.0f loops/s, ratio %.2fx"
              % (r, one, two, two / one), flush=True)


if __name__ == "__main__":
    main()
