#!/usr/bin/env python3
"""compare.py's measurements, interleaved: every server runs for the whole measurement and each
round measures every (scenario, connections, target) cell in turn, so a slow drift or a
neighbour's burst on a shared machine hits every target alike and per-round ratios stay
meaningful. compare.py measures one target after another, minutes apart; on a noisy machine its
ratios then move by more than the margins they are judged by.

The accounting is compare.py's own (imported from the anchors directory): server pinned to CPU 0
with one worker, wrk with one thread pinned to CPU 1, server-core µs per request = CPU 0 busy
time / requests, runs during which other processes used more than --foreign-max % of a CPU
repeated. An idle server costs CPU 0 nothing, so the servers that wait their turn do not disturb
the one measured.

  bench/kit/setup.sh && cargo build --release
  scripts/interleaved.py \\
      --lowlat "target/release/lowlat serve --workers 1 --listen 127.0.0.1:{port} --root {www}" \\
      --scenarios plaintext,plaintext-pipe --conns "16 256 1024"

Prints compare.py's table of medians, then lowlat's per-round ratios (median, min and max over
rounds): the peer's µs/req ÷ lowlat's (above 1: lowlat cheaper) and lowlat's req/s ÷ the peer's.
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import time


def register_extra_targets(compare, specs):
    """Adds each `NAME=CMD` of --also to compare.py's targets: a port from 8190 up, and every
    scenario lowlat takes part in. Returns {name: command}."""
    extra = {}
    for i, spec in enumerate(specs):
        name, sep, cmd = spec.partition("=")
        if not sep or not name or not cmd or name in compare.PORTS:
            sys.exit(f"--also {spec!r}: expected NAME=CMD with a new NAME")
        compare.PORTS[name] = 8190 + i
        for sc in compare.SCENARIOS.values():
            if "lowlat" in sc[3]:
                sc[3].append(name)
        extra[name] = cmd
    return extra


def cell_url(compare, scenario, port, path):
    """The URL a scenario loads, and whether each request closes its connection: TLS scenarios go
    to the target's TLS port (its port + compare.TLS_PORT_OFFSET), tls-handshake with a full
    handshake per request, as compare.py does."""
    if scenario.startswith(("tls-", "h2-", "h1-")):
        return (f"https://127.0.0.1:{port + compare.TLS_PORT_OFFSET}{path}",
                scenario == "tls-handshake")
    return f"http://127.0.0.1:{port}{path}", False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--anchors", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "kit"), help="directory holding compare.py")
    ap.add_argument("--lowlat", required=True,
                    help="command that starts lowlat with one worker; {port} and {www} are filled in")
    ap.add_argument("--scenarios", default="plaintext,plaintext-pipe", help="compare.py's scenario names")
    ap.add_argument("--targets", default="", help="comma list; default: every target a scenario names")
    ap.add_argument("--conns", default="", help="connection levels, e.g. '16 256 1024' (default per scenario)")
    ap.add_argument("--streams", default="100", help="h2-* scenarios (h2load): streams per connection, e.g. '1 100'")
    ap.add_argument("--duration", type=int, default=10, help="seconds per run (default 10)")
    ap.add_argument("--reps", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--foreign-max", type=float, default=10.0,
                    help="repeat a run when other processes used more than this %% of a CPU (default 10)")
    ap.add_argument("--attempts", type=int, default=4, help="measurements of one cell at most per round")
    ap.add_argument("--raw", default="", help="append every run as a JSON line to this file")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=CMD",
                    help="one more target, pinned and measured like the others: a command with {port} "
                         "(given one from 8190 up), served in every scenario lowlat is; repeatable")
    args = ap.parse_args()

    sys.path.insert(0, os.path.abspath(args.anchors))
    import compare  # noqa: E402  (the anchors' harness: servers, pinning, /proc accounting)
    extra = register_extra_targets(compare, args.also)
    scenarios = [s for s in args.scenarios.split(",") if s]
    for s in scenarios:
        if s not in compare.SCENARIOS:
            ap.error(f"unknown scenario {s!r}; known: {', '.join(compare.SCENARIOS)}")
    only = [t for t in args.targets.split(",") if t]
    for t in only:
        if t not in compare.PORTS:
            ap.error(f"unknown target {t!r}; known: {', '.join(compare.PORTS)}")
    if not shutil.which("wrk"):
        sys.exit("wrk not found: run the anchors' setup.sh first")
    levels = [int(c) for c in args.conns.split()] if args.conns else None

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
    run_dir = os.path.join(compare.tempfile.gettempdir(), f"lowlat-interleaved-{os.getuid()}")
    www = os.path.join(run_dir, "www")
    os.makedirs(www, exist_ok=True)
    compare.make_cert(run_dir)
    shutil.copy(os.path.join(compare.HERE, "..", "www", "100.html"), www)
    shutil.copy(os.path.join(compare.HERE, "..", "www", "10k.html"), www)
    os.makedirs(os.path.join(www, "cache"), exist_ok=True)
    shutil.copy(os.path.join(compare.HERE, "..", "www", "100.html"), os.path.join(www, "cache"))
    with open(os.path.join(www, "1m.bin"), "wb") as f:
        f.write(bytes(range(256)) * 4096)
    raw = open(args.raw, "a") if args.raw else None
    # The proxy scenarios' upstream: a second `ceiling`, pinned beside wrk, as compare.py runs it.
    upstream = None
    if any(s.startswith("proxy") for s in scenarios):
        exe = os.path.join(compare.BUILD, "ceiling")
        if not os.path.exists(exe):
            sys.exit(f"{exe} missing: run bench/kit/setup.sh first")
        upstream = compare.subprocess.Popen(["taskset", "-c", "1", exe, str(compare.UPSTREAM_PORT)],
                                            stdout=compare.subprocess.DEVNULL,
                                            stderr=compare.subprocess.DEVNULL, start_new_session=True)
        compare.UPSTREAM_PIDS.add(upstream.pid)
        time.sleep(0.3)
    # The caches' origin, as compare.py runs it (a lowlat one for the miss scenarios).
    origin = None
    if set(compare.CACHE_SCENARIOS) & set(scenarios):
        origin = compare.start_cache_origin(www, scenarios, args.lowlat.split()[0])
    # The php scenario's php-fpm, as compare.py runs it.
    fpm = compare.start_php_fpm(run_dir, www) if "php" in scenarios else None

    targets = [t for t in compare.PORTS
               if any(t in compare.SCENARIOS[s][3] for s in scenarios) and (not only or t in only)]
    cells = []  # (scenario, path, depth, conns, target); depth is the streams for h2-*
    for s in scenarios:
        path, depth, default_levels, serves = compare.SCENARIOS[s]
        depths = [int(m) for m in args.streams.split()] if s.startswith("h2-") else [depth]
        for depth in depths:
            for conns in levels or default_levels:
                cells += [(s, path, depth, conns, t) for t in targets if t in serves]

    def label(s, depth):
        return f"{s}-m{depth}" if s.startswith("h2-") else s

    def argv_for(s, url, conns, depth, secs, close):
        if s.startswith(("h2-", "h1-")):
            return compare.h2load_argv(url, conns, depth, secs, s.startswith("h1-"))
        return compare.wrk_argv(url, conns, depth, secs, close, compare.SCENARIO_HEADERS.get(s, ()),
                                compare.SCENARIO_SCRIPTS.get(s))

    servers = {}
    results = {}  # (scenario, conns, target) -> [records], one per round
    try:
        for t in targets:
            port = compare.PORTS[t]
            cmd = extra.get(t, "").format(port=port, www=www, tls_port=port + compare.TLS_PORT_OFFSET,
                                          upstream=f"127.0.0.1:{compare.UPSTREAM_PORT}",
                                          cache_upstream=f"127.0.0.1:{compare.CACHE_UPSTREAM_PORT}",
                                          cert=os.path.join(run_dir, "cert.pem"),
                                          key=os.path.join(run_dir, "key.pem"),
                                          php="unix:" + os.path.join(run_dir, "php-fpm.sock"))
            srv = (compare.Server(t, cmd.split(), run_dir) if t in extra
                   else compare.make_server(t, args, run_dir, www))
            compare.log(f"starting {t}")
            srv.start()
            servers[t] = srv
        for s, path, _, _, t in sorted({(c[0], c[1], 0, 0, c[4]) for c in cells}):  # warm-up
            url, close = cell_url(compare, s, servers[t].port, path)
            compare.subprocess.run(argv_for(s, url, 16, 10, 2, close), capture_output=True, timeout=60)
        for rep in range(args.reps):
            compare.log(f"round {rep + 1} of {args.reps}")
            for s, path, depth, conns, t in cells:
                url, close = cell_url(compare, s, servers[t].port, path)
                for _ in range(args.attempts):
                    rec = compare.measure(servers[t], argv_for(s, url, conns, depth, args.duration, close),
                                          args.duration)
                    if rec["foreign_cpu_pct"] <= args.foreign_max:
                        break
                    compare.log(f"  neighbour used {rec['foreign_cpu_pct']}% CPU {rec['foreign_top']}: repeating")
                    time.sleep(5)
                rec.update(target=t, scenario=label(s, depth), conns=conns, pipeline=depth, rep=rep,
                           ts=time.strftime("%Y-%m-%dT%H:%M:%S"))
                if rec["rps"] is None:
                    compare.log(f"  the load generator gave no result:\n{rec['wrk_tail']}")
                results.setdefault((label(s, depth), conns, t), []).append(rec)
                if raw:
                    raw.write(json.dumps(rec) + "\n")
                    raw.flush()
                cost = compare.cost_us([rec])
                compare.log(f"  {t:12s} {label(s, depth):14s} c={conns:<5d} rps={rec['rps']} µs/req={cost and round(cost, 2)} "
                            f"p99={rec['p99_ms']}ms rss={rec['server_rss_kb']}kB "
                            f"errors={rec['socket_errors'] + rec['non_2xx']} "
                            f"user/sys/softirq={compare.split_text(rec)}")
    finally:
        for srv in servers.values():
            srv.stop()
        for p in (upstream, origin, fpm):
            if p:
                os.killpg(p.pid, compare.signal.SIGTERM)
                p.wait()

    scenarios = list(dict.fromkeys(sc for (sc, _, _) in results))
    print(compare.table(results, scenarios, targets))
    print()
    print("Per-round ratios of lowlat to each peer (median, min–max over rounds; each round measures "
          "every cell within minutes):")
    print()
    print("| scenario | conns | peer | peer µs/req ÷ lowlat's | lowlat req/s ÷ peer's | p99 ms lowlat / peer |")
    print("|---|---|---|---|---|---|")
    for s in scenarios:
        for conns in sorted({c for (sc, c, _) in results if sc == s}):
            mine = results.get((s, conns, "lowlat"), [])
            for t in targets:
                if t == "lowlat" or (s, conns, t) not in results:
                    continue
                theirs = results[(s, conns, t)]
                eff = [compare.cost_us([b]) / compare.cost_us([a]) for a, b in zip(mine, theirs)
                       if compare.cost_us([a]) and compare.cost_us([b])]
                spd = [a["rps"] / b["rps"] for a, b in zip(mine, theirs) if a.get("rps") and b.get("rps")]
                fmt = lambda v: f"{statistics.median(v):.2f} ({min(v):.2f}–{max(v):.2f})" if v else "-"  # noqa: E731
                p99 = f"{compare.median(mine, 'p99_ms') or 0:.2f} / {compare.median(theirs, 'p99_ms') or 0:.2f}"
                print(f"| {s} | {conns} | {t} | {fmt(eff)} | {fmt(spd)} | {p99} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
