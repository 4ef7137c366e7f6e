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
  bench/setup.sh     # the axum peer
  crates/server/benches/app_cost.py \\
      --lowlat "target/release/lowlat serve --workers 1 --listen 127.0.0.1:{port} --seed 1" \\
      [--axum "bench/peers/target/release/lowlat-axum-peer --workers 1 --listen 127.0.0.1:{port} --seed 1"]
"""
import argparse
import json
import os
import sys
import time

SCENARIOS = [
    ("plaintext", "/plaintext", []),
    ("app-html", "/app/", []),
    ("app-json", "/app/", ["-H", "Accept: application/json"]),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--anchors", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "bench", "kit"), help="directory holding compare.py")
    ap.add_argument("--lowlat", required=True, help="command starting lowlat with one worker; {port} is filled in")
    ap.add_argument("--axum", default="", help="command starting the axum app; {port} is filled in")
    ap.add_argument("--ceiling", action="store_true",
                    help="also measure the anchors' ceiling responder (canned answers, nothing parsed) on "
                         "/plaintext: the floor no server's request can cost less than here")
    ap.add_argument("--conns", type=int, default=256, help="connections (default 256)")
    ap.add_argument("--duration", type=int, default=10, help="seconds per run (default 10)")
    ap.add_argument("--reps", type=int, default=3, help="runs per scenario; medians reported (default 3)")
    ap.add_argument("--foreign-max", type=float, default=10.0,
                    help="repeat a run when other processes used more than this %% of a CPU (default 10)")
    ap.add_argument("--attempts", type=int, default=4,
                    help="runs tried per measurement before a disturbed one is kept (default 4)")
    ap.add_argument("--raw", default="", help="append every run as a JSON line to this file")
    args = ap.parse_args()

    sys.path.insert(0, os.path.abspath(args.anchors))
    import compare  # noqa: E402  (the anchors' harness: servers, pinning, /proc accounting)
    # Ports of their own, so a compare.py or `lowlat bench` run elsewhere on the machine fails
    # loudly rather than answer for us.
    compare.PORTS["lowlat"] = 8190
    compare.PORTS["axum-app"] = 8186
    compare.PORTS["ceiling"] = 8189
    run_dir = os.path.join(compare.tempfile.gettempdir(), f"lowlat-app-cost-{os.getuid()}")
    os.makedirs(run_dir, exist_ok=True)
    raw = open(args.raw, "a") if args.raw else None

    targets = [("lowlat", args.lowlat)] + ([("axum-app", args.axum)] if args.axum else [])
    targets += [("ceiling", None)] if args.ceiling else []
    # The ceiling answers every request alike, so it is measured once, on /plaintext.
    def serves(name, scenario):
        return {"lowlat": True, "ceiling": scenario == "plaintext"}.get(name, scenario != "plaintext")

    runs = [(name, sc, path, extra) for name, _ in targets for sc, path, extra in SCENARIOS
            if serves(name, sc)]
    servers = {}
    results = {}  # (scenario, target) -> [records], one per round
    try:
        # Every server runs for the whole measurement (an idle one costs CPU 0 nothing), so each
        # round measures every (target, scenario) within a minute: a neighbour's burst or a slow
        # drift of this shared machine hits them alike, and per-round ratios stay meaningful.
        for name, command in targets:
            if command is None:
                srv = compare.make_server(name, args, run_dir, run_dir)
            else:
                srv = compare.Server(name, command.format(port=compare.PORTS[name]).split(), run_dir)
            compare.log(f"starting {name}")
            srv.start()
            servers[name] = srv

        def argv(name, path, extra, conns, secs):
            url = f"http://127.0.0.1:{servers[name].port}{path}"
            return compare.wrk_argv(url, conns, 1, secs)[:-1] + extra + [url]

        for name, _, path, extra in runs:
            compare.subprocess.run(argv(name, path, extra, 64, 2), capture_output=True, timeout=60)  # warm-up
        for rep in range(args.reps):
            for name, scenario, path, extra in runs:
                for _ in range(args.attempts):
                    rec = compare.measure(servers[name], argv(name, path, extra, args.conns, args.duration),
                                          args.duration)
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
        for srv in servers.values():
            srv.stop()

    def round_ratio(scenario, other_scenario, other_target):
        """Median over rounds of lowlat's µs/req in `scenario` ÷ `other_target`'s in
        `other_scenario` measured in the same round."""
        mine = results.get((scenario, "lowlat"), [])
        theirs = results.get((other_scenario, other_target), [])
        ratios = [compare.cost_us([a]) / compare.cost_us([b]) for a, b in zip(mine, theirs)
                  if compare.cost_us([a]) and compare.cost_us([b])]
        return f"{compare.statistics.median(ratios):.2f}" if ratios else ""

    print("| scenario | target | req/s | server µs/req | p99 ms | errors | ÷ lowlat /plaintext µs/req "
          "| ÷ axum app µs/req |")
    print("|---|---|---|---|---|---|---|---|")

    def ceiling_ratio(scenario):
        """Median over rounds of the ceiling's /plaintext µs/req ÷ the axum app's in `scenario`."""
        floor = results.get(("plaintext", "ceiling"), [])
        theirs = results.get((scenario, "axum-app"), [])
        ratios = [compare.cost_us([a]) / compare.cost_us([b]) for a, b in zip(floor, theirs)
                  if compare.cost_us([a]) and compare.cost_us([b])]
        return f"{compare.statistics.median(ratios):.2f}" if ratios else ""

    for scenario, _, _ in SCENARIOS:
        for name, _ in targets:
            recs = results.get((scenario, name))
            if not recs:
                continue
            cost = compare.cost_us(recs)
            mine = name == "lowlat"
            vs_plain = round_ratio(scenario, "plaintext", "lowlat") if mine else ""
            vs_axum = round_ratio(scenario, scenario, "axum-app") if mine else ""
            if name == "ceiling":
                vs_axum = " / ".join(f"{ceiling_ratio(s)} (vs {s})" for s in ("app-html", "app-json")
                                     if ceiling_ratio(s))
            rps = compare.median(recs, "rps")
            p99 = compare.median(recs, "p99_ms")
            errors = sum(r["socket_errors"] + r["non_2xx"] for r in recs)
            print(f"| {scenario} | {name} | {rps:.0f} | {cost:.2f} | {p99:.2f} | {errors} | {vs_plain} | {vs_axum} |")
    print()
    print("Medians over rounds; ratios are medians of per-round ratios (same round, minutes apart).")
    if args.ceiling:
        print("The ceiling row's ratio is the floor of the ÷ axum column: no server's request costs less.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
