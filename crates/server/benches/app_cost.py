#!/usr/bin/env python3
"""Server-core microseconds per request of lowlat's dynamic app beside its own /plaintext, and
beside the same app written with axum when a command for it is given.

Scenarios, each with wrk (one thread, pinned to CPU 1) against a server pinned to CPU 0 with one
worker:
  plaintext  GET /plaintext
  app-html   GET /app/   with TechEmpower's Accept (text/html;q=0.9 beats */*;q=0.7: HTML)
  app-json   GET /app/   with Accept: application/json

The accounting (CPU 0 busy time / requests, foreign-CPU re-runs, RSS, p99) is compare.py's,
imported from the anchors directory, so these figures sit beside compare.py's tables. Targets:
app ≤ 1.3× lowlat's /plaintext µs/req, and ≤ 0.4× the axum app's.

  cargo build --release -p lowlat
  crates/server/benches/app_cost.py --anchors ../shared/anchors \\
      --lowlat "target/release/lowlat serve --workers 1 --listen 127.0.0.1:{port} --seed 1" \\
      [--axum "bench/peers/axum-app/target/release/axum-app 127.0.0.1:{port}"]
"""
import argparse
import importlib.util
import json
import os
import sys
import time

SCENARIOS = [
    ("plaintext", "/plaintext", []),
    ("app-html", "/app/", []),
    ("app-json", "/app/", ["-H", "Accept: application/json"]),
]


def load_compare(anchors):
    spec = importlib.util.spec_from_file_location("compare", os.path.join(anchors, "compare.py"))
    compare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compare)
    return compare


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--anchors", default="../shared/anchors", help="directory holding compare.py")
    ap.add_argument("--lowlat", required=True, help="command starting lowlat with one worker; {port} is filled in")
    ap.add_argument("--axum", default="", help="command starting the axum app; {port} is filled in")
    ap.add_argument("--conns", type=int, default=256, help="connections (default 256)")
    ap.add_argument("--duration", type=int, default=10, help="seconds per run (default 10)")
    ap.add_argument("--reps", type=int, default=3, help="runs per scenario; medians reported (default 3)")
    ap.add_argument("--foreign-max", type=float, default=10.0,
                    help="repeat a run when other processes used more than this %% of a CPU (default 10)")
    ap.add_argument("--raw", default="", help="append every run as a JSON line to this file")
    args = ap.parse_args()

    compare = load_compare(args.anchors)
    compare.PORTS.setdefault("axum-app", 8086)
    run_dir = os.path.join(compare.tempfile.gettempdir(), f"lowlat-app-cost-{os.getuid()}")
    os.makedirs(run_dir, exist_ok=True)
    raw = open(args.raw, "a") if args.raw else None

    targets = [("lowlat", args.lowlat)] + ([("axum-app", args.axum)] if args.axum else [])
    results = {}
    for name, command in targets:
        srv = compare.Server(name, command.format(port=compare.PORTS[name]).split(), run_dir)
        compare.log(f"starting {name}")
        srv.start()
        try:
            scenarios = [(sc, path, extra) for sc, path, extra in SCENARIOS
                         if name == "lowlat" or sc != "plaintext"]

            def argv(path, extra, conns, secs):
                url = f"http://127.0.0.1:{srv.port}{path}"
                return compare.wrk_argv(url, conns, 1, secs)[:-1] + extra + [url]

            for _, path, extra in scenarios:
                compare.subprocess.run(argv(path, extra, 64, 2), capture_output=True, timeout=60)  # warm-up
            # Round-robin (every scenario once per repetition), so a neighbour's burst or a slow
            # drift of the machine hits the scenarios alike and their ratios stay meaningful.
            for rep in range(args.reps):
                for scenario, path, extra in scenarios:
                    for _ in range(4):
                        rec = compare.measure(srv, argv(path, extra, args.conns, args.duration), args.duration)
                        if rec["foreign_cpu_pct"] <= args.foreign_max:
                            break
                        compare.log(f"  neighbour used {rec['foreign_cpu_pct']}% CPU {rec['foreign_top']}: repeating")
                        time.sleep(5)
                    rec.update(target=name, scenario=scenario, conns=args.conns, rep=rep,
                               ts=time.strftime("%Y-%m-%dT%H:%M:%S"))
                    results.setdefault((scenario, name), []).append(rec)
                    if raw:
                        raw.write(json.dumps(rec) + "\n")
                        raw.flush()
                    cost = compare.cost_us([rec])
                    compare.log(f"  {name:9s} {scenario:9s} rps={rec['rps']} µs/req={cost and round(cost, 2)} "
                                f"p99={rec['p99_ms']}ms foreign={rec['foreign_cpu_pct']}% "
                                f"errors={rec['socket_errors'] + rec['non_2xx']}")
        finally:
            srv.stop()
            time.sleep(1)

    base = compare.cost_us(results.get(("plaintext", "lowlat"), []))
    print("| scenario | target | req/s | server µs/req | p99 ms | errors | ÷ lowlat /plaintext µs/req "
          "| ÷ axum app µs/req |")
    print("|---|---|---|---|---|---|---|---|")
    for scenario, _, _ in SCENARIOS:
        for name, _ in targets:
            recs = results.get((scenario, name))
            if not recs:
                continue
            cost = compare.cost_us(recs)
            peer = compare.cost_us(results.get((scenario, "axum-app"), []))
            vs_plain = f"{cost / base:.2f}" if cost and base and name == "lowlat" else ""
            vs_axum = f"{cost / peer:.2f}" if cost and peer and name == "lowlat" else ""
            rps = compare.median(recs, "rps")
            p99 = compare.median(recs, "p99_ms")
            errors = sum(r["socket_errors"] + r["non_2xx"] for r in recs)
            print(f"| {scenario} | {name} | {rps:.0f} | {cost:.2f} | {p99:.2f} | {errors} | {vs_plain} | {vs_axum} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
