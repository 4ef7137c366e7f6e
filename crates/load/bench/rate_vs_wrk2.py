#!/usr/bin/env python3
"""Rate mode side by side: `lowlat load -R` against wrk2 (giltene/wrk2), same server, same core.

The server (the anchors' `ceiling` responder, or nginx) runs pinned to CPU 0; each load generator
runs alone pinned to CPU 1 with one thread. Two scenarios:

  half-peak  the closed-loop peak is measured first (lowlat load, 5 s); both tools then run at
             50% of it for --duration seconds: p50 / p99 / p99.9 of both.
  stall      --stall-rate req/s for --duration seconds, the server stopped (SIGSTOP) for 1 s
             from --stall-at seconds in: p90 / p99 / p99.9 of both, which must agree within 10%
             (both charge every request scheduled during the stall from its schedule).

  crates/load/bench/rate_vs_wrk2.py --anchors ../shared/anchors \\
      --lowlat "target/release/lowlat load"

Prints a markdown table; wrk2 comes from the anchors' build directory (setup.sh).
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time


def parse_wrk2(out):
    """Percentiles (ms) from wrk2's `--latency` 'Latency Distribution (HdrHistogram ...)' block."""
    units = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}
    got = {}
    for m in re.finditer(r"^\s+(\d+\.\d+)%\s+([\d.]+)(us|ms|s|m)\s*$", out, re.M):
        got[float(m.group(1))] = float(m.group(2)) * units[m.group(3)]
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    return {
        "p50": got.get(50.0), "p90": got.get(90.0), "p99": got.get(99.0), "p99.9": got.get(99.9),
        "rps": float(rps.group(1)) if rps else None,
    }


def parse_lowlat(out):
    v = json.loads(out)
    lat = v["latency_us"]
    return {
        "p50": lat["p50"] / 1000, "p90": lat["p90"] / 1000, "p99": lat["p99"] / 1000,
        "p99.9": lat["p99_9"] / 1000, "rps": v["requests_per_sec"],
    }


def run(argv, secs, stall=None):
    """Runs a load generator; with `stall=(pid, at)`, stops the server for 1 s from `at` s in."""
    timer = None
    if stall:
        pid, at = stall

        def freeze():
            os.killpg(pid, signal.SIGSTOP)
            time.sleep(1.0)
            os.killpg(pid, signal.SIGCONT)
        timer = threading.Timer(at, freeze)
        timer.start()
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=secs + 60).stdout
    finally:
        if timer:
            timer.join()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--anchors", default="../shared/anchors", help="the anchors directory (compare.py)")
    ap.add_argument("--lowlat", required=True, help="command prefix of `lowlat load`")
    ap.add_argument("--server", default="ceiling", choices=["ceiling", "nginx"])
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--stall-rate", type=int, default=5000)
    ap.add_argument("--stall-at", type=float, default=4.0)
    args = ap.parse_args()

    sys.path.insert(0, os.path.abspath(args.anchors))
    import compare  # noqa: E402

    wrk2 = os.path.join(compare.BUILD, "wrk2")
    run_dir = os.path.join(tempfile.gettempdir(), f"lowlat-rate-{os.getuid()}")
    www = os.path.join(run_dir, "www")
    os.makedirs(www, exist_ok=True)
    with open(os.path.join(www, "100.html"), "w") as f:
        f.write("X" * 99 + "\n")
    srv = compare.make_server(args.server, args, run_dir, www)
    srv.start()
    url = f"http://127.0.0.1:{srv.port}" + ("/plaintext" if args.server == "ceiling" else "/100.html")
    pin = ["taskset", "-c", "1"]
    lowlat = pin + args.lowlat.split() + ["-q", "-t1", "-c", str(args.conns)]
    rows = []
    try:
        out = subprocess.run(lowlat + ["-d", "5s", "--json", url], capture_output=True, text=True,
                             timeout=70).stdout
        peak = parse_lowlat(out)["rps"]
        half = int(peak / 2)
        compare.log(f"closed-loop peak {peak:.0f} req/s; half {half}")
        d = f"{args.duration}s"
        for scenario, rate, stall in [("half-peak", half, None),
                                      ("stall 1 s", args.stall_rate, (srv.p.pid, args.stall_at))]:
            w = parse_wrk2(run(pin + [wrk2, "-t1", "-c", str(args.conns), "-d", d, "-R", str(rate),
                                      "--latency", url], args.duration, stall))
            ll = parse_lowlat(run(lowlat + ["-d", d, "-R", str(rate), "--json", url], args.duration, stall))
            rows.append((scenario, rate, "wrk2", w))
            rows.append((scenario, rate, "lowlat load", ll))
            compare.log(f"{scenario}: wrk2 {w}; lowlat {ll}")
    finally:
        srv.stop()
    print("| scenario | rate | load generator | req/s | p50 ms | p90 ms | p99 ms | p99.9 ms |")
    print("|---|---|---|---|---|---|---|---|")
    fmt = lambda x: f"{x:.3f}" if isinstance(x, float) else "-"  # noqa: E731
    for scenario, rate, name, r in rows:
        print(f"| {scenario} | {rate} | {name} | {r['rps'] or 0:.0f} | {fmt(r['p50'])} | {fmt(r['p90'])} "
              f"| {fmt(r['p99'])} | {fmt(r['p99.9'])} |")
    for scenario in {s for s, *_ in rows}:
        pair = {n: r for s, _, n, r in rows if s == scenario}
        w, ll = pair.get("wrk2"), pair.get("lowlat load")
        if w and ll:
            ratios = {k: ll[k] / w[k] for k in ("p90", "p99", "p99.9") if w.get(k) and ll.get(k)}
            print(f"\n{scenario}: lowlat ÷ wrk2 " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))


if __name__ == "__main__":
    main()
