#!/usr/bin/env python3
"""Side-by-side cost of HTTP load generators: client-core microseconds per response.

A server (the `ceiling` responder by default, or nginx) runs pinned to CPU 0; each load generator
runs alone, pinned to CPU 1 with one thread, for the same duration and connection count. The
figure is CPU 1's busy time (kernel work included) divided by the responses the tool reports,
beside its req/s: a cheaper client can push a server harder from the same core. Against the
ceiling responder the list ends with `ceiling-client` (ceiling/ceiling-client.c), the client-side
limit: epoll, canned requests, responses counted by length, nothing parsed.

  bench/kit/setup.sh     # once
  bench/kit/loaders.py --lowlat "target/release/lowlat load" --conns "16 256"

`--lowlat` is a command prefix; it gets `-t1 -c N -d Ns URL` (and `--pipeline 16` in the
pipelined scenario) and must print wrk's "Requests/sec:" and "N requests in" lines.

HTTP/2: `--h2 M` compares h2load and `lowlat load --h2` with M streams per connection, against
h2o over TLS (ALPN h2) on /100.html (`--server lowlat-h2 --lowlat-serve "CMD"` to load
`lowlat serve` instead; CMD gets {port}, {tls_port}, {cert}, {key}, {www}).

Lua scripts: `--script auth,counter,...` runs wrk and `lowlat load` with each of wrk's example
scripts (crates/load/tests/wrk-scripts/NAME.lua; a path works too), taking turns script by script
within each repetition, beside both without a script (`none`) and, for a script that only sets up
its request (post, report, addr), `lowlat load` sending the same request from flags (`= flags`):
what the script itself costs. Both get `-t1 -c N -d Ns -s FILE URL` and nothing else (no extra
headers), so they send the same requests. Two figures per cell, each beside its ratio to wrk's with
the same script: CPU 1's busy time per response (as above), and the loader process's own CPU time
per response (getrusage of the child), which a neighbour on CPU 1 cannot inflate — the one to read
for delay and stop, whose few responses are swamped by anything else on the core.

  bench/kit/loaders.py --lowlat "target/release/lowlat load" --conns "16 256" \
      --script none,counter,auth,setup,pipeline,post,delay,report,stop,addr --reps 5 --duration 4
"""
import argparse
import os
import resource
import tempfile
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402


def run_wrk(url, conns, secs, depth):
    out = subprocess.run(compare.wrk_argv(url, conns, depth, secs), capture_output=True, text=True,
                         timeout=secs + 60).stdout
    m = re.search(r"(\d+) requests in", out)
    return (int(m.group(1)) if m else None), out


def run_h2load(url, conns, secs, depth):
    argv = ["taskset", "-c", "1", "h2load", "--h1", "-t1", "-c", str(conns), "-D", str(secs), url]
    if depth > 1:
        return None, "h2load pipelines only over HTTP/2"
    out = subprocess.run(argv, capture_output=True, text=True, timeout=secs + 60).stdout
    m = re.search(r"requests: \d+ total, \d+ started, (\d+) done", out)
    return (int(m.group(1)) if m else None), out


def run_h2load_h2(streams):
    def run(url, conns, secs, depth):
        argv = ["taskset", "-c", "1", "h2load", "-t1", "-c", str(conns), "-m", str(streams), "-D", str(secs),
                url]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=secs + 60).stdout
        m = re.search(r"requests: \d+ total, \d+ started, (\d+) done", out)
        return (int(m.group(1)) if m else None), out
    return run


def run_custom_h2(prefix, streams):
    def run(url, conns, secs, depth):
        argv = ["taskset", "-c", "1", *prefix.split(), "--h2", "-m", str(streams), "-k", "-t1", "-c", str(conns),
                "-d", f"{secs}s", url]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=secs + 60).stdout
        m = re.search(r"(\d+) requests in", out)
        return (int(m.group(1)) if m else None), out
    return run


def run_ab(url, conns, secs, depth):
    if depth > 1:
        return None, "ab cannot pipeline"
    argv = ["taskset", "-c", "1", "ab", "-q", "-k", "-c", str(min(conns, 20000)), "-t", str(secs),
            "-n", "50000000", url]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=secs + 60).stdout
    m = re.search(r"Complete requests:\s+(\d+)", out)
    return (int(m.group(1)) if m else None), out


def run_ceiling_client(resp_len):
    """The client-side limit (ceiling/ceiling-client.c): counts responses by their fixed length."""
    exe = os.path.join(compare.BUILD, "ceiling-client")

    def run(url, conns, secs, depth):
        port = url.split(":")[2].split("/")[0]
        out = subprocess.run(["taskset", "-c", "1", exe, port, str(conns), str(secs), str(depth), str(resp_len)],
                             capture_output=True, text=True, timeout=secs + 60).stdout
        m = re.search(r"(\d+) requests in", out)
        return (int(m.group(1)) if m else None), out
    return run


def response_length(port, path):
    import socket
    s = socket.create_connection(("127.0.0.1", port), timeout=3)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    time.sleep(0.3)
    n = len(s.recv(65536))
    s.close()
    return n


def run_custom(prefix):
    def run(url, conns, secs, depth):
        argv = ["taskset", "-c", "1", *prefix.split(), "-t1", "-c", str(conns), "-d", f"{secs}s"]
        if depth > 1:
            argv += ["--pipeline", str(depth)]
        out = subprocess.run(argv + [url], capture_output=True, text=True, timeout=secs + 60).stdout
        m = re.search(r"(\d+) requests in", out)
        return (int(m.group(1)) if m else None), out
    return run


WRK_SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(compare.HERE)), "crates", "load", "tests", "wrk-scripts")

# Scripts that call nothing per request, and the same requests from lowlat load's flags alone:
# the difference is what the script costs (nothing, if it is set up once).
SAME_AS_FLAGS = {
    "post": ["-X", "POST", "--body", "foo=bar&baz=quux",
             "-H", "Content-Type: application/x-www-form-urlencoded"],
    "report": [],
    "addr": [],
}


def script_path(name):
    return name if os.path.sep in name or name.endswith(".lua") else os.path.join(WRK_SCRIPTS, name + ".lua")


def run_scripted(prefix, extra):
    """A loader: the command `prefix`, then -t1 -c N -d Ns, then `extra` (the script), the URL."""
    def run(url, conns, secs, depth):
        cmd = ["taskset", "-c", "1", *prefix, "-t1", "-c", str(conns), "-d", f"{secs}s", *extra, url]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=secs + 60).stdout
        m = re.search(r"(\d+) requests in", out)
        return (int(m.group(1)) if m else None), out
    return run


def scripts_main(args, url):
    """wrk and lowlat load with each script, taking turns; medians per cell."""
    names = [n.strip() for n in args.script.split(",") if n.strip()]
    lowlat = args.lowlat.split()
    cells = []  # (script, loader name, run)
    for name in names:
        if name == "none":
            cells.append((name, "wrk", run_scripted(["wrk"], [])))
            cells.append((name, "lowlat load", run_scripted(lowlat, ["-q"])))
            continue
        path = script_path(name)
        if not os.path.exists(path):
            raise SystemExit(f"no script {path}")
        cells.append((name, "wrk", run_scripted(["wrk"], ["-s", path])))
        cells.append((name, "lowlat load", run_scripted(lowlat, ["-q", "-s", path])))
        if name in SAME_AS_FLAGS:
            cells.append((name, "lowlat load = flags", run_scripted(lowlat, ["-q"] + SAME_AS_FLAGS[name])))
    results = {}
    for rep in range(args.reps):
        for conns in [int(c) for c in args.conns.split()]:
            for name, loader, run in cells:
                c0, t0 = compare.core_busy(), time.time()
                r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                n, out = run(url, conns, args.duration, 1)
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                wall, c1 = time.time() - t0, compare.core_busy()
                if not n:
                    compare.log(f"  {name} {loader}: no result: {out.strip()[-160:]}")
                    continue
                busy = compare.busy_pct(c0, c1, "cpu1") / 100 * wall
                # The loader process's own CPU time: what a neighbour on CPU 1 cannot add to.
                own = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
                results.setdefault((name, conns, loader), []).append(
                    (n / args.duration, busy / n * 1e6, own / n * 1e6))
                compare.log(f"  rep {rep + 1} {name:9s} c={conns:<5d} {loader:20s} {n / args.duration:9.0f} req/s "
                            f"{busy / n * 1e6:7.2f} client µs/resp {own / n * 1e6:7.2f} process µs/resp")
    print("| script | conns | load generator | req/s | client µs/resp | ÷ wrk's, same script "
          "| process µs/resp | ÷ wrk's |\n|---|---|---|---|---|---|---|---|")
    for conns in [int(c) for c in args.conns.split()]:
        for name in names:
            wrk = results.get((name, conns, "wrk"))
            wrk_cost = statistics.median(c for _, c, _ in wrk) if wrk else None
            wrk_own = statistics.median(o for _, _, o in wrk) if wrk else None
            for (n_, c_, loader), runs in results.items():
                if (n_, c_) != (name, conns):
                    continue
                rate = statistics.median(r for r, _, _ in runs)
                cost = statistics.median(c for _, c, _ in runs)
                own = statistics.median(o for _, _, o in runs)
                ratio = f"{cost / wrk_cost:.2f}" if wrk_cost else "-"
                own_ratio = f"{own / wrk_own:.2f}" if wrk_own else "-"
                print(f"| {name} | {conns} | {loader} | {rate:.0f} | {cost:.2f} | {ratio} | {own:.2f} | {own_ratio} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lowlat", help="command prefix of `lowlat load`")
    ap.add_argument("--server", default="", choices=["", "ceiling", "nginx", "h2o", "lowlat-h2"],
                    help="default: ceiling (HTTP/1.1), h2o (--h2)")
    ap.add_argument("--h2", type=int, default=0, metavar="M", help="HTTP/2 with M streams per connection")
    ap.add_argument("--lowlat-serve", default="", help="with --server lowlat-h2: the lowlat serve command")
    ap.add_argument("--conns", default="16 256 1024")
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--pipeline", action="store_true", help="also 16-deep pipelining (wrk via Lua)")
    ap.add_argument("--script", default="", metavar="NAMES",
                    help="wrk's example scripts to run with both wrk and lowlat load (auth,counter,...; none)")
    ap.add_argument("--run-dir", default=os.path.join(tempfile.gettempdir(), f"lowlat-anchors-{os.getuid()}"))
    args = ap.parse_args()

    os.makedirs(args.run_dir, exist_ok=True)
    www = os.path.join(args.run_dir, "www")
    os.makedirs(www, exist_ok=True)
    with open(os.path.join(www, "100.html"), "w") as f:
        f.write("X" * 99 + "\n")
    args.server = args.server or ("h2o" if args.h2 else "ceiling")
    if args.h2:
        compare.make_cert(args.run_dir)
        loaders = {"h2load": run_h2load_h2(args.h2)}
        if args.lowlat:
            loaders["lowlat load"] = run_custom_h2(args.lowlat, args.h2)
    else:
        loaders = {"wrk": run_wrk, "h2load": run_h2load, "ab": run_ab}
        if args.lowlat:
            loaders["lowlat load"] = run_custom(args.lowlat)
    if args.server == "lowlat-h2":
        args.lowlat = args.lowlat_serve
        srv = compare.make_server("lowlat", args, args.run_dir, www)
    else:
        srv = compare.make_server(args.server, args, args.run_dir, www)
    srv.start()
    path = "/plaintext" if args.server == "ceiling" else "/100.html"
    url = f"http://127.0.0.1:{srv.port}{path}"
    if args.h2:
        url = f"https://127.0.0.1:{srv.port + compare.TLS_PORT_OFFSET}{path}"
    if args.server == "ceiling" and os.path.exists(os.path.join(compare.BUILD, "ceiling-client")):
        loaders["ceiling-client"] = run_ceiling_client(response_length(srv.port, path))
    if args.script:
        if not args.lowlat:
            raise SystemExit("--script needs --lowlat")
        try:
            scripts_main(args, url)
        finally:
            srv.stop()
        return
    rows = []
    try:
        depths = [1, 16] if args.pipeline else [1]
        for depth in depths:
            for conns in [int(c) for c in args.conns.split()]:
                for name, run in loaders.items():
                    costs, rates = [], []
                    for _ in range(args.reps):
                        c0, t0 = compare.core_busy(), time.time()
                        n, out = run(url, conns, args.duration, depth)
                        wall, c1 = time.time() - t0, compare.core_busy()
                        if not n:
                            compare.log(f"  {name}: no result: {out.strip()[-160:]}")
                            break
                        busy = compare.busy_pct(c0, c1, "cpu1") / 100 * wall
                        costs.append(busy / n * 1e6)
                        rates.append(n / args.duration)
                        compare.log(f"  {name:12s} c={conns:<5d} pipe={depth:<2d} {n / args.duration:9.0f} req/s "
                                    f"{busy / n * 1e6:6.2f} client µs/req")
                    if costs:
                        rows.append((depth, conns, name, statistics.median(rates), statistics.median(costs)))
    finally:
        srv.stop()
    ref = "h2load" if args.h2 else "wrk"
    print(f"| {'streams' if args.h2 else 'pipeline'} | conns | load generator | req/s | client µs/req "
          f"| µs/req ÷ {ref}'s |\n|---|---|---|---|---|---|")
    for depth, conns, name, rate, cost in rows:
        depth = args.h2 or depth
        wrk = next((c for d, n_, nm, _, c in rows if (args.h2 or d) == depth and n_ == conns and nm == ref), None)
        print(f"| {depth} | {conns} | {name} | {rate:.0f} | {cost:.2f} | {cost / wrk:.2f} |" if wrk else
              f"| {depth} | {conns} | {name} | {rate:.0f} | {cost:.2f} | - |")


if __name__ == "__main__":
    main()
