#!/usr/bin/env python3
"""Client-core µs per response of wrk, `lowlat load` and ceiling-client, interleaved run by run.

Same accounting as the anchors' loaders.py (CPU 1's busy time from /proc/stat, softirq included,
divided by the responses the tool reports; the ceiling responder pinned to CPU 0, each loader
pinned to CPU 1 with one thread), but the tools take turns within each repetition and the
table gives the minimum beside the median. On a shared machine a neighbour only ever adds
busy time to CPU 1, so the minimum over several interleaved runs is the steadiest estimate of
what a tool itself costs; the median shows how disturbed the runs were.

  crates/load/bench/interleaved.py \\
      --lowlat "target/release/lowlat load" --conns "16 256 1024" --depth 1 --reps 5
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def fixed_length_client(exe, resp_len):
    """A client run like ceiling-client: `EXE PORT CONNS SECONDS DEPTH RESPONSE_BYTES`."""
    def run(url, conns, secs, depth):
        port = url.split(":")[2].split("/")[0]
        out = subprocess.run(["taskset", "-c", "1", exe, port, str(conns), str(secs), str(depth), str(resp_len)],
                             capture_output=True, text=True, timeout=secs + 60).stdout
        m = re.search(r"(\d+) requests in", out)
        return (int(m.group(1)) if m else None), out
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--anchors", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "bench", "kit"))
    ap.add_argument("--lowlat", required=True, help="command prefix of `lowlat load`")
    ap.add_argument("--conns", default="16 256 1024")
    ap.add_argument("--depth", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--duration", type=int, default=3)
    ap.add_argument("--fixed-client", action="append", default=[], metavar="NAME=EXE",
                    help="another client taking ceiling-client's arguments (PORT CONNS SECONDS DEPTH "
                         "RESPONSE_BYTES), e.g. an io_uring variant; repeatable")
    args = ap.parse_args()
    sys.path.insert(0, os.path.abspath(args.anchors))
    import compare  # noqa: E402
    import loaders  # noqa: E402

    run_dir = os.path.join(tempfile.gettempdir(), f"lowlat-interleaved-{os.getuid()}")
    os.makedirs(run_dir, exist_ok=True)
    srv = compare.make_server("ceiling", args, run_dir, run_dir)
    srv.start()
    url = f"http://127.0.0.1:{srv.port}/plaintext"
    tools = {
        "wrk": loaders.run_wrk,
        "lowlat load": loaders.run_custom(args.lowlat),
        "ceiling-client": loaders.run_ceiling_client(loaders.response_length(srv.port, "/plaintext")),
    }
    resp_len = loaders.response_length(srv.port, "/plaintext")
    for spec in args.fixed_client:
        name, exe = spec.split("=", 1)
        tools[name] = fixed_length_client(exe, resp_len)
    rows = []
    try:
        for conns in [int(c) for c in args.conns.split()]:
            got = {name: [] for name in tools}
            for _ in range(args.reps):
                for name, run in tools.items():
                    c0, t0 = compare.core_busy(), time.time()
                    n, _ = run(url, conns, args.duration, args.depth)
                    wall, c1 = time.time() - t0, compare.core_busy()
                    if n:
                        busy = compare.busy_pct(c0, c1, "cpu1") / 100 * wall
                        got[name].append((busy / n * 1e6, n / args.duration))
            for name, v in got.items():
                if v:
                    costs = sorted(c for c, _ in v)
                    rows.append((conns, name, max(r for _, r in v), costs[0], statistics.median(costs)))
    finally:
        srv.stop()
    print(f"| pipeline | conns | load generator | best req/s | client µs/req min | median | min ÷ wrk's |")
    print("|---|---|---|---|---|---|---|")
    for conns, name, rps, low, med in rows:
        wrk = next(lo for c, n, _, lo, _ in rows if c == conns and n == "wrk")
        print(f"| {args.depth} | {conns} | {name} | {rps:.0f} | {low:.2f} | {med:.2f} | {low / wrk:.2f} |")


if __name__ == "__main__":
    main()
