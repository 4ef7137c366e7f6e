#!/usr/bin/env python3
"""WebSocket through a proxy: lowlat's tunnel beside nginx's, interleaved.

One WebSocket echo server (crates/lowlat/tests/upstreams/ws_echo.py, the `websockets` library)
sits behind each proxy; `lowlat load --ws` sends messages through the proxy at a constant rate
and times the echoes. Each proxy runs one worker pinned to CPU 0; the loader and the echo server
share CPU 1. Both proxies run for the whole measurement and each round measures every
(message size, target) cell in turn, so a drift or a neighbour's burst hits both alike.

The proxy's cost is its own CPU time (utime + stime of its processes, from /proc) over the
messages echoed: µs per message, which a neighbour on the machine cannot inflate the way it
inflates a core's busy time. Latency is the loader's (from each message's scheduled send).

    cargo build --release -p lowlat
    scripts/ws-proxy-compare.py --rounds 3 --rate 4000 --conns 50 --duration 10 --sizes 128,16384

Prints a table of every run, then the per-round ratios: nginx's µs/message ÷ lowlat's (above 1:
lowlat cheaper), and the p50/p99 echo latency of each.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = os.sysconf("SC_CLK_TCK")

NGINX_CONF = """
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    map $http_upgrade $connection_upgrade {{ default upgrade; '' close; }}
    upstream echo {{ server 127.0.0.1:{upstream}; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://echo;
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_read_timeout 60s;
        }}
    }}
}}
"""


def cpu_seconds(pids):
    total = 0
    for pid in pids:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / TICK


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def wait_port(port, timeout=20):
    import socket

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"nothing listens on {port}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lowlat", default=os.path.join(ROOT, "target/release/lowlat"))
    ap.add_argument("--python", default=os.path.expanduser("~/.cache/lowlat-test-venv/bin/python"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=int, default=4000, help="messages per second, all connections")
    ap.add_argument("--conns", type=int, default=50)
    ap.add_argument("--duration", type=int, default=10, help="seconds per run")
    ap.add_argument("--sizes", default="128,16384", help="message sizes in bytes")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="ws-compare-")
    procs = []
    try:
        echo = subprocess.Popen(
            ["taskset", "-c", "1", args.python, os.path.join(ROOT, "crates/lowlat/tests/upstreams/ws_echo.py"), "--port", "18901"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        procs.append(echo)
        echo.stdout.readline()
        lowlat = subprocess.Popen(
            ["taskset", "-c", "0", args.lowlat, "serve", "--workers", "1", "--listen", "127.0.0.1:18902",
             "--proxy", "/=http://127.0.0.1:18901"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        procs.append(lowlat)
        for d in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            os.makedirs(os.path.join(tmp, d), exist_ok=True)
        conf = os.path.join(tmp, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF.format(tmp=tmp, upstream=18901, port=18903))
        nginx = subprocess.Popen(
            ["taskset", "-c", "0", shutil.which("nginx") or "nginx", "-p", tmp, "-c", conf],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        procs.append(nginx)
        wait_port(18902)
        wait_port(18903)
        targets = {
            "lowlat": (18902, lambda: [lowlat.pid]),
            "nginx": (18903, lambda: [nginx.pid] + children(nginx.pid)),
        }
        sizes = [int(s) for s in args.sizes.split(",")]
        rows = []
        for rnd in range(args.rounds):
            for size in sizes:
                for name, (port, pids) in targets.items():
                    before = cpu_seconds(pids())
                    out = subprocess.run(
                        ["taskset", "-c", "1", args.lowlat, "load", "--ws", "--json", "-q", "-t", "1",
                         "-c", str(args.conns), "-R", str(args.rate), "-d", f"{args.duration}s",
                         "--warmup", "1s", "--ws-message-size", str(size),
                         f"ws://127.0.0.1:{port}/r{rnd}"],
                        capture_output=True, text=True,
                    )
                    after = cpu_seconds(pids())
                    if out.returncode != 0:
                        sys.exit(f"lowlat load failed against {name}: {out.stderr}")
                    r = json.loads(out.stdout)
                    n = r["responses"]
                    lat = r["latency_us"]["percentiles"] if "percentiles" in r.get("latency_us", {}) else None
                    rows.append({
                        "round": rnd, "size": size, "target": name, "messages": n,
                        "errors": r["errors"]["total"], "rate": r["requests_per_sec"],
                        # The warm-up's second is outside the loader's count but inside the
                        # proxy's CPU: scaled by the measured share of the run.
                        "us_per_msg": (after - before) * 1e6 / max(n, 1) * args.duration / (args.duration + 1),
                        "p50": pct(r, 50), "p99": pct(r, 99),
                    })
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        print("| round | size | target | msgs/s | errors | proxy µs/msg | p50 µs | p99 µs |")
        print("|---|---|---|---|---|---|---|---|")
        for x in rows:
            print(f"| {x['round']} | {x['size']} | {x['target']} | {x['rate']:.0f} | {x['errors']} | "
                  f"{x['us_per_msg']:.2f} | {x['p50']} | {x['p99']} |")
        print()
        print("| size | nginx µs/msg ÷ lowlat's (median, min–max over rounds) | p50 µs lowlat / nginx | p99 µs lowlat / nginx |")
        print("|---|---|---|---|")
        for size in sizes:
            ratios, p50, p99 = [], {"lowlat": [], "nginx": []}, {"lowlat": [], "nginx": []}
            for rnd in range(args.rounds):
                cell = {x["target"]: x for x in rows if x["round"] == rnd and x["size"] == size}
                ratios.append(cell["nginx"]["us_per_msg"] / cell["lowlat"]["us_per_msg"])
                for t in ("lowlat", "nginx"):
                    p50[t].append(cell[t]["p50"])
                    p99[t].append(cell[t]["p99"])
            med = statistics.median
            print(f"| {size} | {med(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f}) | "
                  f"{med(p50['lowlat']):.0f} / {med(p50['nginx']):.0f} | {med(p99['lowlat']):.0f} / {med(p99['nginx']):.0f} |")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def pct(report, q):
    """The q-th percentile of the report's latency, in µs."""
    lat = report["latency_us"]
    for key in (f"p{q}", str(q)):
        if key in lat:
            return lat[key]
    for p in lat.get("percentiles", []):
        if abs(p.get("percentile", p.get("quantile", 0) * 100) - q) < 1e-9:
            return p.get("value_us", p.get("value"))
    return None


if __name__ == "__main__":
    main()
