#!/usr/bin/env python3
"""Rate mode side by side: `lowlat load -R` against wrk2 (giltene/wrk2), same server, same core.

The server (the anchors' `ceiling` responder, or nginx) runs pinned to CPU 0; each load generator
runs alone pinned to CPU 1 with one thread. Two scenarios:

  half-peak  the closed-loop peak is measured first (lowlat load, 5 s); both tools then run at
             50% of it for --duration seconds: p50 / p99 / p99.9 of both.
  stall      --stall-rate req/s for --duration seconds, the server stopped (SIGSTOP) for 1 s
             from --stall-at seconds in: p90 / p99 / p99.9 of both, which must agree within 10%
             (both charge every request scheduled during the stall from its schedule).
             By default both tools run at once, each at --stall-rate on its own connections,
             through the same stall: p90 sits on the knee of the stall's latency ramp (exactly
             10% of the requests are scheduled inside it), so a stall a few ms longer in one
             tool's run than in the other's moves its p90 by as much. `--stall-apart` runs
             them one after the other instead, each with its own stall.

  crates/load/bench/rate_vs_wrk2.py \\
      --lowlat "target/release/lowlat load"

Prints a markdown table; wrk2 comes from the anchors' build directory (setup.sh).
"""
import argparse
import json
import os
import re
import signal
import statistics
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


def stall_timer(pid, at):
    """Stops the server's process group for 1 s from `at` s on; returns the started timer."""
    def freeze():
        os.killpg(pid, signal.SIGSTOP)
        time.sleep(1.0)
        os.killpg(pid, signal.SIGCONT)
    timer = threading.Timer(at, freeze)
    timer.start()
    return timer


def run(argv, secs, stall=None):
    """Runs a load generator; with `stall=(pid, at)`, stops the server for 1 s from `at` s in."""
    timer = stall_timer(*stall) if stall else None
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=secs + 60).stdout
    finally:
        if timer:
            timer.join()


def run_together(argvs, secs, stall):
    """Runs several load generators at once through one stall; returns their outputs in order."""
    procs = [subprocess.Popen(a, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for a in argvs]
    timer = stall_timer(*stall)
    try:
        return [p.communicate(timeout=secs + 60)[0] for p in procs]
    finally:
        timer.join()
        for p in procs:
            if p.poll() is None:
                p.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--anchors", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "bench", "kit"), help="the measurement kit (compare.py), bench/kit by default")
    ap.add_argument("--lowlat", required=True, help="command prefix of `lowlat load`")
    ap.add_argument("--server", default="ceiling", choices=["ceiling", "nginx"])
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--stall-rate", type=int, default=5000)
    ap.add_argument("--stall-at", type=float, default=4.0)
    ap.add_argument("--stall-apart", action="store_true",
                    help="run the stall scenario with one tool at a time (each its own stall)")
    ap.add_argument("--reps", type=int, default=1, help="repeat both scenarios this many times")
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
        stall = (srv.p.pid, args.stall_at)
        for rep in range(args.reps):
            w = parse_wrk2(run(pin + [wrk2, "-t1", "-c", str(args.conns), "-d", d, "-R", str(half),
                                      "--latency", url], args.duration))
            ll = parse_lowlat(run(lowlat + ["-d", d, "-R", str(half), "--json", url], args.duration))
            rows += [("half-peak", half, "wrk2", w), ("half-peak", half, "lowlat load", ll)]
            compare.log(f"half-peak #{rep + 1}: wrk2 {w}; lowlat {ll}")
            rate = args.stall_rate
            w_argv = pin + [wrk2, "-t1", "-c", str(args.conns), "-d", d, "-R", str(rate), "--latency", url]
            ll_argv = lowlat + ["-d", d, "-R", str(rate), "--json", url]
            if args.stall_apart:
                w_out, ll_out = run(w_argv, args.duration, stall), run(ll_argv, args.duration, stall)
            else:
                w_out, ll_out = run_together([w_argv, ll_argv], args.duration, stall)
            w, ll = parse_wrk2(w_out), parse_lowlat(ll_out)
            rows += [("stall 1 s", rate, "wrk2", w), ("stall 1 s", rate, "lowlat load", ll)]
            compare.log(f"stall #{rep + 1}: wrk2 {w}; lowlat {ll}")
    finally:
        srv.stop()
    print("| scenario | rate | load generator | req/s | p50 ms | p90 ms | p99 ms | p99.9 ms |")
    print("|---|---|---|---|---|---|---|---|")
    fmt = lambda x: f"{x:.3f}" if isinstance(x, float) else "-"  # noqa: E731
    for scenario, rate, name, r in rows:
        print(f"| {scenario} | {rate} | {name} | {r['rps'] or 0:.0f} | {fmt(r['p50'])} | {fmt(r['p90'])} "
              f"| {fmt(r['p99'])} | {fmt(r['p99.9'])} |")
    for scenario in sorted({s for s, *_ in rows}):
        w_rows = [r for s, _, n, r in rows if s == scenario and n == "wrk2"]
        ll_rows = [r for s, _, n, r in rows if s == scenario and n == "lowlat load"]
        per_rep = []
        for w, ll in zip(w_rows, ll_rows):
            per_rep.append({k: ll[k] / w[k] for k in ("p90", "p99", "p99.9") if w.get(k) and ll.get(k)})
        for i, ratios in enumerate(per_rep):
            print(f"\n{scenario} #{i + 1}: lowlat ÷ wrk2 " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
        if len(per_rep) > 1:
            med = {k: statistics.median(r[k] for r in per_rep if k in r) for k in ("p90", "p99", "p99.9")}
            print(f"\n{scenario}, median over {len(per_rep)}: lowlat ÷ wrk2 "
                  + ", ".join(f"{k} {v:.2f}" for k, v in med.items()))

if __name__ == "__main__":
    main()
