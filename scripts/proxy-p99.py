#!/usr/bin/env python3
"""The latency a reverse proxy adds at a fixed rate: wrk2 (constant rate, latency measured from
the intended send time, so no coordinated omission) asks each proxy for `/up/plaintext`, which
it forwards to the upstream `ceiling`; the same rate straight to that `ceiling` is the baseline,
and what a proxy adds is its percentile minus the baseline's.

Servers as the kit runs them (bench/kit/compare.py: proxy on CPU 0 with one worker, the
upstream `ceiling` and wrk2 on CPU 1), interleaved: each round runs every target in turn.

  bench/kit/setup.sh && cargo build --release
  scripts/proxy-p99.py --lowlat "target/release/lowlat serve --workers 1 --listen 127.0.0.1:{port} --proxy /up/=http://{upstream}" \\
      --targets lowlat,nginx,haproxy --rate 20000 --conns 64 --duration 10 --reps 3

Prints, per target, the median over rounds of p50, p99 and p99.9 (ms) and of p99 added.
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def percentiles(out):
    """wrk2's --latency distribution: {50.0: ms, 99.0: ms, 99.9: ms}."""
    got = {}
    for m in re.finditer(r"^\s*(50\.000|99\.000|99\.900)%\s+([\d.]+)(us|ms|s)\s*$", out, re.M):
        got[float(m.group(1))] = float(m.group(2)) * UNIT_MS[m.group(3)]
    return got


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--anchors", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "kit"))
    ap.add_argument("--lowlat", required=True, help="lowlat's command ({port}, {upstream})")
    ap.add_argument("--targets", default="lowlat,nginx,haproxy")
    ap.add_argument("--rate", type=int, default=20000, help="requests per second, in all")
    ap.add_argument("--conns", type=int, default=64)
    ap.add_argument("--duration", type=int, default=10, help="seconds per run")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, os.path.abspath(args.anchors))
    import compare  # noqa: E402  (the kit's harness: servers, pinning, configurations)

    wrk2 = os.path.join(compare.BUILD, "wrk2")
    if not os.path.exists(wrk2):
        sys.exit(f"{wrk2} missing: run bench/kit/setup.sh first")
    run_dir = os.path.join(compare.tempfile.gettempdir(), f"lowlat-proxy-p99-{os.getuid()}")
    www = os.path.join(run_dir, "www")
    os.makedirs(www, exist_ok=True)
    shutil.copy(os.path.join(compare.HERE, "..", "www", "100.html"), www)
    upstream = subprocess.Popen(["taskset", "-c", "1", os.path.join(compare.BUILD, "ceiling"),
                                 str(compare.UPSTREAM_PORT)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(0.3)
    targets = [t for t in args.targets.split(",") if t]
    servers = {}
    results = {t: [] for t in ["direct"] + targets}

    def run(url):
        argv = ["taskset", "-c", "1", wrk2, "-t1", f"-c{args.conns}", f"-d{args.duration}s",
                f"-R{args.rate}", "--latency", url]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=args.duration + 60).stdout
        return percentiles(out)

    try:
        for t in targets:
            srv = compare.make_server(t, args, run_dir, www)
            srv.start()
            servers[t] = srv
        direct = f"http://127.0.0.1:{compare.UPSTREAM_PORT}/plaintext"
        for t in targets:  # warm-up
            run(f"http://127.0.0.1:{servers[t].port}/up/plaintext")
        for rep in range(args.reps):
            compare.log(f"round {rep + 1} of {args.reps}")
            results["direct"].append(run(direct))
            for t in targets:
                results[t].append(run(f"http://127.0.0.1:{servers[t].port}/up/plaintext"))
                compare.log(f"  {t}: {results[t][-1]}")
    finally:
        for srv in servers.values():
            srv.stop()
        os.killpg(upstream.pid, 15)
        upstream.wait()

    def med(t, p):
        vals = [r[p] for r in results[t] if p in r]
        return statistics.median(vals) if vals else float("nan")

    print(f"wrk2 -t1 -c{args.conns} -R{args.rate} -d{args.duration}s, {args.reps} rounds, medians (ms)\n")
    print("| target | p50 | p99 | p99.9 | p99 added (over direct) |")
    print("|---|---|---|---|---|")
    for t in ["direct"] + targets:
        added = "" if t == "direct" else f"{med(t, 99.0) - med('direct', 99.0):.3f}"
        print(f"| {t} | {med(t, 50.0):.3f} | {med(t, 99.0):.3f} | {med(t, 99.9):.3f} | {added} |")


if __name__ == "__main__":
    main()
