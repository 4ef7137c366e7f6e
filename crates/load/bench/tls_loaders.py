#!/usr/bin/env python3
"""Client-core µs per response of wrk and `lowlat load` over HTTPS, interleaved run by run.

The accounting of the anchors' loaders.py (CPU 1's busy time from /proc/stat, softirq included,
divided by the responses the tool reports), over TLS: the server (nginx with the anchors' TLS
configuration, or lowlat serve) runs pinned to CPU 0 with one worker and a self-signed ECDSA
P-256 certificate; each load generator runs alone, pinned to CPU 1 with one thread, the tools
taking turns within each repetition. Scenarios:

- `keepalive`: keep-alive connections, one request in flight each (TLS 1.3, one handshake per
  connection);
- `pipeline`: 16-deep pipelining (wrk through the anchors' pipeline.lua);
- `handshake`: a new connection, so a full handshake, per request (wrk with `Connection: close`,
  lowlat load with `--no-keepalive`).

  crates/load/bench/tls_loaders.py \\
      --lowlat "target/release/lowlat load -k" --conns "16 256" --reps 3

The table gives the minimum over repetitions beside the median (a neighbour only ever adds
busy time to CPU 1) and each tool's minimum ÷ wrk's.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--anchors", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "bench", "kit"))
    ap.add_argument("--lowlat", required=True, help="command prefix of `lowlat load` (add -k: the certificate is self-signed)")
    ap.add_argument("--server", default="nginx", help="nginx, or a lowlat serve command with {port} {tls_port} {cert} {key} {www}")
    ap.add_argument("--scenarios", default="keepalive,pipeline,handshake")
    ap.add_argument("--conns", default="16 256")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=int, default=4)
    args = ap.parse_args()
    sys.path.insert(0, os.path.abspath(args.anchors))
    import compare  # noqa: E402
    import loaders  # noqa: E402

    run_dir = os.path.join(tempfile.gettempdir(), f"lowlat-tls-loaders-{os.getuid()}")
    www = os.path.join(run_dir, "www")
    os.makedirs(www, exist_ok=True)
    with open(os.path.join(www, "100.html"), "wb") as f:
        f.write(b"X" * 99 + b"\n")
    compare.make_cert(run_dir)
    if args.server == "nginx":
        srv = compare.make_server("nginx", args, run_dir, www)
    else:
        srv = compare.make_server("lowlat", argparse.Namespace(lowlat=args.server), run_dir, www)
    srv.start()
    url = f"https://127.0.0.1:{srv.port + compare.TLS_PORT_OFFSET}/100.html"

    def wrk(close):
        def run(url, conns, secs, depth):
            out = subprocess.run(compare.wrk_argv(url, conns, depth, secs, close), capture_output=True,
                                 text=True, timeout=secs + 60).stdout
            m = re.search(r"(\d+) requests in", out)
            return (int(m.group(1)) if m else None), out
        return run

    def lowlat(close):
        prefix = args.lowlat + (" --no-keepalive" if close else "")
        return loaders.run_custom(prefix)

    rows = []
    try:
        for scenario in args.scenarios.split(","):
            depth = 16 if scenario == "pipeline" else 1
            close = scenario == "handshake"
            tools = {"wrk": wrk(close), "lowlat load": lowlat(close)}
            for conns in [int(c) for c in args.conns.split()]:
                got = {name: [] for name in tools}
                for _ in range(args.reps):
                    for name, run in tools.items():
                        c0, t0 = compare.core_busy(), time.time()
                        n, out = run(url, conns, args.duration, depth)
                        wall, c1 = time.time() - t0, compare.core_busy()
                        if n:
                            busy = compare.busy_pct(c0, c1, "cpu1") / 100 * wall
                            got[name].append((busy / n * 1e6, n / args.duration))
                        else:
                            compare.log(f"{name} gave no result:\n{out[-500:]}")
                for name, v in got.items():
                    if v:
                        costs = sorted(c for c, _ in v)
                        rows.append((scenario, conns, name, max(r for _, r in v), costs[0],
                                     statistics.median(costs)))
                        compare.log(f"{scenario} c={conns} {name}: {costs}")
    finally:
        srv.stop()
    print("| scenario | conns | load generator | best req/s | client µs/resp min | median | min ÷ wrk's |")
    print("|---|---|---|---|---|---|---|")
    for scenario, conns, name, rps, low, med in rows:
        base = next((lo for s, c, n, _, lo, _ in rows if s == scenario and c == conns and n == "wrk"), None)
        ratio = f"{low / base:.2f}" if base else "–"
        print(f"| {scenario} | {conns} | {name} | {rps:.0f} | {low:.2f} | {med:.2f} | {ratio} |")


if __name__ == "__main__":
    main()
