#!/usr/bin/env python3
"""Soak: `lowlat serve` for DURATION under a steady, bounded, mixed load on 127.0.0.1, with
reloads, upstream restarts and bad clients, watched for leaks, errors, crashes and drift.

    scripts/soak.py DURATION [options]          (scripts/soak.sh DURATION runs this)
    scripts/soak.py 1h --binary target/release/lowlat --out /tmp/soak-1h
    scripts/soak.py 2m --interval 5 --segment 20 --warmup 25 --calm 15 \\
        --reload-every 15 --restart-every 20 --burst-every 25

What runs (the server on the first CPU this process may use, everything else on the second):

- `lowlat serve --config` (two workers): TLS, HTTP/2 (over TLS and h2c), HTTP/3, static files,
  /plaintext and /json, and `--proxy` rules with the cache on: /app/ to two lowlat upstreams over
  HTTP/1.1, /h2/ to the same two over HTTP/2 (h2c), /cdn/ to two more whose every response says
  `Cache-Control: max-age=2` (so the cache stores, expires and refills objects all along), and
  /ws/ to a WebSocket echo (crates/lowlat/tests/upstreams/ws_echo.py, in the test environment's
  Python: --ws-python, else $LOWLAT_TEST_VENV or ~/.cache/lowlat-test-venv).
- Load, each kind at a constant rate (3,000 requests/s in all; --rate-scale), in back-to-back
  segments of --segment seconds so that every segment gives its own percentiles: `lowlat load`
  over HTTP/1.1 keep-alive and pipelined, HTTPS, HTTP/2, HTTP/3 and WebSocket (wss); h2load
  over h2c; oha over HTTP/3. Every response is checked by its loader (status, framing).
- Content checks: every --interval, curl fetches files, proxied and cached objects over HTTP/1.1,
  HTTP/2 (TLS) and h2c and compares their bytes and the reload generation with what they must be.
- Chaos: a reload (SIGHUP, with the generation header and the upstream weights changed, and a
  `PURGE /cdn/*`) every --reload-every; one upstream restarted every --restart-every (each group
  has two servers, so no client may see an error); a burst of bad clients every --burst-every, and
  one bad client a second throughout: garbage, bad versions, oversized URIs, heads and header
  counts, smuggling shapes, bodies over the limit, bad chunks, slowloris heads and bodies,
  connections reset mid-head, mid-body and mid-response (proxied too), readers that stop reading,
  plain HTTP and garbage to the TLS port, abandoned and idle TLS handshakes, HTTP/2 garbage and
  rapid resets, QUIC garbage, bad WebSocket handshakes and frames, connection floods. Each must
  get the answer the limits promise (400, 408, 413, 414, 431, 505, GOAWAY...) or a close.
- Every --interval: the server's RSS, descriptors, threads, connections (client, QUIC, upstream
  active and idle), cache objects and its request-duration p99, into samples.csv.

Fails (exit 1, one line saying why) on: the server dying or panicking or not exiting cleanly; any
failed request or non-2xx answer on the load and content checks; a reload not applied or an
upstream not restarted; a bad client answered otherwise than promised, or left hanging; RSS or
descriptors more than 10% above their level after warm-up (--rss-growth, --fd-growth), or more
threads; a lane's p99 in each of its last three segments more than 2x (--p99-ratio) its median
over the first three after warm-up, and at least --p99-floor-ms above it; connections still open,
sockets held (client ones, or any closed by the peer), upstream sockets the pools do not count,
or descriptors not given back, once the load has stopped; a cache that never refilled. Each kind
of chaos happens once during the warm-up, then keeps off a window after it and the last stretch
(--calm plus three intervals), so that the levels compared are taken in the same steady state.

Writes to --out (default: a new directory under /tmp): soak.json (everything, and the verdict),
samples.csv, segments.csv, chart.svg, and the processes' logs; prints a summary table.
"""

import argparse
import asyncio
import base64
import collections
import csv
import hashlib
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WS_ECHO = ROOT / "crates/lowlat/tests/upstreams/ws_echo.py"

MIB = 1024 * 1024


# ---------------------------------------------------------------------------------------------
# Durations and small helpers


def parse_duration(text):
    """Seconds in "90", "90s", "2m", "1h", "1h30m", "500ms"."""
    text = str(text).strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    total, pos = 0.0, 0
    for m in re.finditer(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)]
        pos = m.end()
    if pos != len(text) or pos == 0:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (90s, 2m, 1h)")
    return total


def fmt_secs(s):
    s = int(round(s))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def free_port(kind=socket.SOCK_STREAM, also_udp=False):
    """A port free on 127.0.0.1 (for TCP, and for UDP too when asked)."""
    for _ in range(100):
        s = socket.socket(socket.AF_INET, kind)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        if also_udp:
            u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                u.bind(("127.0.0.1", port))
            except OSError:
                continue
            finally:
                u.close()
        return port
    raise RuntimeError("no free port")


def wait_port(port, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


# ---------------------------------------------------------------------------------------------
# /proc and /metrics


def proc_sample(pid):
    """RSS (KiB), open descriptors and threads of a live process, from /proc."""
    rss = threads = None
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return {"rss_kb": rss, "fds": fds, "threads": threads}


TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
              "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN",
              "0B": "CLOSING"}


def socket_table():
    """inode: (protocol, local port, remote port, state) of every TCP and UDP socket."""
    out = {}
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        try:
            lines = Path(f"/proc/net/{proto}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) < 10:
                continue
            out[f[9]] = (proto, int(f[1].rsplit(":", 1)[1], 16), int(f[2].rsplit(":", 1)[1], 16),
                         TCP_STATES.get(f[3], f[3]) if proto.startswith("tcp") else "udp")
    return out


def fd_census(pid, server_ports=(), upstream_ports=()):
    """What a process's descriptors are, counted by kind: sockets from clients and to upstreams
    by TCP state, listeners, UDP sockets, epoll and other anonymous inodes, pipes, files."""
    table = socket_table()
    out = collections.Counter()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        m = re.fullmatch(r"socket:\[(\d+)\]", target)
        if m:
            entry = table.get(m.group(1))
            if entry is None:
                out["socket (unix or other)"] += 1
                continue
            proto, local, remote, state = entry
            if state == "udp":
                out["udp"] += 1
            elif state == "LISTEN":
                out["tcp listen"] += 1
            elif remote in upstream_ports:
                out[f"to upstream {state}"] += 1
            elif local in server_ports:
                out[f"from client {state}"] += 1
            else:
                out[f"tcp {state}"] += 1
        elif target.startswith("anon_inode:"):
            out[target[len("anon_inode:"):].strip("[]")] += 1
        elif target.startswith("pipe:"):
            out["pipe"] += 1
        else:
            out["file"] += 1
    return dict(sorted(out.items()))


METRIC = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


def parse_metrics(text):
    """Prometheus text: {(name, labels-string): value}."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = METRIC.match(line)
        if m:
            try:
                out[(m.group(1), m.group(2) or "")] = float(m.group(3))
            except ValueError:
                pass
    return out


def metric_sum(metrics, name, must=""):
    return sum(v for (n, labels), v in metrics.items() if n == name and must in labels)


def histogram(metrics, name):
    """[(upper bound, cumulative count)] of a Prometheus histogram, in order."""
    out = []
    for (n, labels), v in metrics.items():
        if n == name + "_bucket":
            m = re.search(r'le="([^"]+)"', labels)
            if m:
                out.append((float("inf") if m.group(1) == "+Inf" else float(m.group(1)), v))
    return sorted(out)


def histogram_quantile(before, after, q):
    """The upper bound of the bucket holding quantile q of what was counted between two scrapes
    (None when nothing was)."""
    if not after:
        return None
    prev = dict(before or [])
    deltas = [(le, c - prev.get(le, 0.0)) for le, c in after]
    total = deltas[-1][1]
    if total <= 0:
        return None
    for le, c in deltas:
        if c >= q * total:
            return le
    return deltas[-1][0]


# ---------------------------------------------------------------------------------------------
# The verdict (pure functions of the run's record, tested by scripts/test_soak.py)


class Limits:
    def __init__(self, rss_growth=0.10, rss_slack_mib=2.0, fd_growth=0.10, fd_slack=6,
                 p99_ratio=2.0, p99_floor_ms=5.0, drain_fd_slack=6):
        self.rss_growth = rss_growth
        self.rss_slack_mib = rss_slack_mib
        self.fd_growth = fd_growth
        self.fd_slack = fd_slack
        self.p99_ratio = p99_ratio
        self.p99_floor_ms = p99_floor_ms
        self.drain_fd_slack = drain_fd_slack

    def as_dict(self):
        return dict(self.__dict__)


def resource_levels(samples, warmup, interval, k=3):
    """The level after warm-up (median of the samples in the k intervals after it) and the level
    at the end (median of the last k samples taken under load), per resource; None when there
    are too few samples to tell."""
    under_load = [s for s in samples if s.get("phase", "load") == "load" and s.get("rss_kb")]
    base = [s for s in under_load if warmup <= s["t"] < warmup + k * interval + interval / 2]
    end = under_load[-k:]
    if not base or len(end) < min(k, 2) or end[0]["t"] <= base[-1]["t"]:
        return None
    keys = ("rss_kb", "fds", "threads")
    return ({key: median([s.get(key) for s in base]) for key in keys},
            {key: median([s.get(key) for s in end]) for key in keys})


def latency_windows(segments, warmup):
    """Per lane with percentiles: (p99 of its first segments after warm-up, p99 of its last
    ones, how many): the median of the first three and the lowest of the last three (one each
    when the lane has fewer than six), so that only a drift every last segment shows counts,
    never one noisy spell of a shared machine."""
    out = {}
    by_lane = collections.defaultdict(list)
    for s in segments:
        if s.get("p99_ms") is not None and s["start"] >= warmup - 1e-6 and s.get("responses", 0) > 0:
            by_lane[s["lane"]].append(s)
    for lane, segs in by_lane.items():
        segs.sort(key=lambda s: s["start"])
        if len(segs) < 2:
            continue
        k = 3 if len(segs) >= 6 else 1
        out[lane] = (median([s["p99_ms"] for s in segs[:k]]), min(s["p99_ms"] for s in segs[-k:]), k)
    return out


def judge(run, limits):
    """Every reason the run fails, most serious first (empty: it passed)."""
    fails = []
    srv = run.get("server", {})
    if srv.get("died_at") is not None:
        fails.append(f"the server died at {fmt_secs(srv['died_at'])} (exit {srv.get('exit_code')})")
    if srv.get("panics"):
        fails.append(f"the server panicked: {srv['panics'][0]}")
    if srv.get("died_at") is None and srv.get("exit_code") not in (0, None):
        fails.append(f"the server exited {srv.get('exit_code')} on SIGTERM")
    if srv.get("error_lines"):
        fails.append(f"the server logged {len(srv['error_lines'])} ERROR lines: {srv['error_lines'][0]}")

    # Requests that failed or got an unexpected answer on the healthy paths.
    lanes = collections.OrderedDict()
    for s in run.get("segments", []):
        lane = lanes.setdefault(s["lane"], {"responses": 0, "errors": collections.Counter(),
                                            "bad_status": collections.Counter(), "broken": []})
        lane["responses"] += s.get("responses", 0)
        for k, v in (s.get("errors") or {}).items():
            if v:
                lane["errors"][k] += v
        for code, n in (s.get("status") or {}).items():
            if not str(code).startswith("2") and n:
                lane["bad_status"][str(code)] += n
        if s.get("said") and not lane.get("said"):
            lane["said"] = s["said"]
        if s.get("failure"):
            lane["broken"].append(f"{s['failure']} (segment at {fmt_secs(s['start'])})")
        elif s.get("responses", 0) == 0:
            lane["broken"].append(f"no response in the segment at {fmt_secs(s['start'])}")
    for name, lane in lanes.items():
        if lane["broken"]:
            fails.append(f"{name}: {lane['broken'][0]}")
        if lane["errors"] or lane["bad_status"]:
            what = []
            if lane["errors"]:
                what.append(f"{sum(lane['errors'].values())} failed requests ("
                            + ", ".join(f"{k} {v}" for k, v in lane["errors"].most_common()) + ")")
            if lane["bad_status"]:
                what.append(f"{sum(lane['bad_status'].values())} non-2xx answers ("
                            + ", ".join(f"{k} x{v}" for k, v in lane["bad_status"].most_common()) + ")")
            said = f" ({lane['said']})" if lane.get("said") else ""
            fails.append(f"{name}: " + " and ".join(what) + f" of {lane['responses']} responses{said}")
    checks = run.get("checks", {})
    if checks.get("failed"):
        fails.append(f"content checks: {checks['failed']} of {checks.get('run', 0)} failed, "
                     f"first: {checks['failures'][0]}")
    for e in run.get("events", []):
        if not e.get("ok"):
            fails.append(f"{e['kind']} at {fmt_secs(e['t'])} failed: {e.get('detail')}")
            break
    bad = run.get("bad_clients", {})
    if bad.get("unexpected"):
        fails.append(f"bad clients: {bad['unexpected']} of {bad.get('total', 0)} not answered as "
                     f"promised, first: {bad['failures'][0]}")
    scrapes = [s for s in run.get("samples", []) if s.get("metrics_error")]
    if scrapes:
        fails.append(f"/metrics did not answer {len(scrapes)} times, first at "
                     f"{fmt_secs(scrapes[0]['t'])}: {scrapes[0]['metrics_error']}")

    # Growth after warm-up.
    cfg = run.get("config", {})
    levels = resource_levels(run.get("samples", []), cfg.get("warmup", 0), cfg.get("interval", 10))
    if levels is None:
        fails.append("too few samples after warm-up to judge growth (run longer, or warm up less)")
    else:
        base, end = levels
        rss_bound = base["rss_kb"] * (1 + limits.rss_growth) + limits.rss_slack_mib * 1024
        if end["rss_kb"] > rss_bound:
            fails.append(f"RSS grew {100 * (end['rss_kb'] / base['rss_kb'] - 1):.0f}% after warm-up "
                         f"({base['rss_kb'] / 1024:.1f} -> {end['rss_kb'] / 1024:.1f} MiB; bound "
                         f"{100 * limits.rss_growth:.0f}% + {limits.rss_slack_mib:g} MiB): a leak")
        fd_bound = base["fds"] * (1 + limits.fd_growth) + limits.fd_slack
        if end["fds"] > fd_bound:
            fails.append(f"descriptors grew from {base['fds']:.0f} to {end['fds']:.0f} after warm-up "
                         f"(bound {fd_bound:.0f}): a leak")
        if base["threads"] is not None and end["threads"] is not None and end["threads"] > base["threads"]:
            fails.append(f"threads grew from {base['threads']:.0f} to {end['threads']:.0f} after warm-up")

    # Latency drift.
    for lane, (first, last, k) in latency_windows(run.get("segments", []), cfg.get("warmup", 0)).items():
        if last > max(limits.p99_ratio * first, first + limits.p99_floor_ms):
            fails.append(f"{lane}: p99 drifted from {first:.2f} ms to {last:.2f} ms (first and last "
                         f"{k} segment(s) after warm-up; bound {limits.p99_ratio:g}x and "
                         f"+{limits.p99_floor_ms:g} ms)")

    # What is given back once the load stops.
    drain = run.get("drain")
    if drain:
        left = [f"{drain[k]:.0f} {what}" for k, what in (
            ("conns_open", "client connections"), ("quic_open", "QUIC connections"),
            ("upstream_active", "active upstream connections")) if drain.get(k)]
        if left:
            fails.append(f"{', '.join(left)} still open {drain.get('waited', 0):.0f}s after the load stopped")
        census = drain.get("fd_census") or {}
        clients = {k: v for k, v in census.items() if k.startswith("from client")}
        if clients:
            fails.append(f"{sum(clients.values())} client sockets still held after the load stopped ("
                         + ", ".join(f"{k[len('from client '):]} {v}" for k, v in clients.items()) + ")")
        waiting = {k: v for k, v in census.items() if k.endswith("CLOSE_WAIT")}
        if waiting and not clients:
            fails.append(f"sockets closed by their peer but not by the server: "
                         + ", ".join(f"{k} {v}" for k, v in waiting.items()))
        to_upstream = sum(v for k, v in census.items() if k.startswith("to upstream"))
        pooled = (drain.get("upstream_idle") or 0) + (drain.get("upstream_active") or 0)
        if census and to_upstream > pooled + 2:
            fails.append(f"{to_upstream} sockets to upstreams after the load stopped, where the pools "
                         f"count {pooled:.0f}")
        idle = run.get("idle_start") or {}
        if idle.get("fds") is not None and drain.get("fds") is not None:
            allowed = idle["fds"] + max(to_upstream, pooled) + limits.drain_fd_slack
            if drain["fds"] > allowed:
                fails.append(f"descriptors not given back: {drain['fds']:.0f} open after the load "
                             f"stopped, {idle['fds']:.0f} before it and {max(to_upstream, pooled):.0f} "
                             f"upstream connections (bound {allowed:.0f}; "
                             + ", ".join(f"{k} {v}" for k, v in census.items()) + ")")

    cache = run.get("cache")
    if cache is not None:
        if not cache.get("hits"):
            fails.append("the cache served no hit")
        elif cache.get("stored", 0) <= cache.get("objects_max", 0):
            fails.append(f"the cache never refilled ({cache.get('stored', 0):.0f} stored for "
                         f"{cache.get('objects_max', 0):.0f} objects)")
    return fails


# ---------------------------------------------------------------------------------------------
# The setup: certificates, files, configuration


def make_certs(d):
    def run(cmd):
        subprocess.run(cmd, shell=True, check=True, capture_output=True, cwd=d)

    run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
        "-keyout ca.key -out ca.crt -days 30 -subj /CN=lowlat-soak-ca")
    run("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
        "-keyout leaf.key -out leaf.csr -subj /CN=localhost")
    (d / "leaf.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    run("openssl x509 -req -in leaf.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
        "-out leaf.crt -days 30 -extfile leaf.ext")


def make_files(d, seed):
    """The server's root and the upstreams' root; returns {path under each: sha256}."""
    rnd = random.Random(seed)
    www, up = d / "www", d / "up"
    www.mkdir(exist_ok=True)
    up.mkdir(exist_ok=True)
    files = {
        www / "small.txt": bytes(rnd.choice(b"abcdefghij\n") for _ in range(100)),
        www / "page.html": b"<!doctype html><p>" + bytes(rnd.choice(b"lorem ipsum ") for _ in range(4078)) + b"\n",
        www / "32k.bin": rnd.randbytes(32 * 1024),
        www / "big.bin": rnd.randbytes(256 * 1024),
        up / "big.bin": rnd.randbytes(256 * 1024),
    }
    for i in range(50):
        files[up / f"o{i}.txt"] = f"object {i}\n".encode() + bytes(
            rnd.choice(b"0123456789abcdef") for _ in range(rnd.randint(256, 4096)))
    for path, data in files.items():
        path.write_bytes(data)
    return {str(p.relative_to(d)): hashlib.sha256(b).hexdigest() for p, b in files.items()}


def server_config(ctx, gen):
    """The served configuration, generation `gen`: each reload changes the header every response
    carries and swaps the weights of the upstream groups."""
    heavy, light = (2, 1) if gen % 2 else (1, 2)
    up = ctx.ports
    access_log = (f'access_log = "{ctx.dir}/access.log"\naccess_log_format = "json"\n'
                  if ctx.args.access_log else "")
    return f"""# lowlat soak, generation {gen}
listen = ["127.0.0.1:{up['clear']}"]
tls_listen = ["127.0.0.1:{up['tls']}"]
h3_listen = ["127.0.0.1:{up['tls']}"]
cert = ["{ctx.dir}/leaf.crt"]
key = ["{ctx.dir}/leaf.key"]
h2c = true
metrics = "127.0.0.1:{up['metrics']}"
root = "{ctx.dir}/www"
workers = {ctx.args.workers}
body_timeout = "10s"
cache = true
cache_size = "64m"
proxy = ["/app/=app/", "/h2/=apph2/", "/cdn/=cdn/", "/ws/=ws/"]
add_header = ["X-Soak-Gen: {gen}"]
{access_log}
[[upstream]]
  name = "app"
  servers = [{{ url = "http://127.0.0.1:{up['up1']}", weight = {heavy} }}, {{ url = "http://127.0.0.1:{up['up2']}", weight = {light} }}]

[[upstream]]
  name = "apph2"
  servers = [{{ url = "h2c://127.0.0.1:{up['up1']}", weight = {light} }}, {{ url = "h2c://127.0.0.1:{up['up2']}", weight = {heavy} }}]

[[upstream]]
  name = "cdn"
  servers = [{{ url = "http://127.0.0.1:{up['up3']}", weight = {heavy} }}, {{ url = "http://127.0.0.1:{up['up4']}", weight = {light} }}]

[[upstream]]
  name = "ws"
  servers = ["http://127.0.0.1:{up['ws']}"]
"""


# ---------------------------------------------------------------------------------------------
# Processes


class Proc:
    """A process this run started (a server, an upstream), with its log."""

    def __init__(self, name, argv, log, stdin=None):
        self.name, self.argv, self.log, self.stdin = name, argv, log, stdin
        self.p = None

    def start(self):
        logf = open(self.log, "ab")
        self.p = subprocess.Popen(self.argv, stdin=self.stdin if self.stdin is not None else subprocess.DEVNULL,
                                  stdout=subprocess.PIPE if self.stdin is not None else logf,
                                  stderr=logf, start_new_session=True)
        logf.close()
        return self

    def alive(self):
        return self.p is not None and self.p.poll() is None

    def stop(self, timeout=15.0, sig=signal.SIGTERM):
        """Stops it (SIGTERM, SIGKILL after `timeout`); returns its exit code."""
        if self.p is None:
            return None
        if self.p.poll() is None:
            try:
                self.p.send_signal(sig)
                return self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
                return None
        return self.p.returncode


class Ctx:
    def __init__(self, args, d):
        self.args = args
        self.dir = d
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.t0 = None
        self.gen = 1
        self.gen_lock = threading.Lock()  # reloads and content checks take turns
        self.segments, self.samples, self.events = [], [], []
        self.checks = {"run": 0, "failed": 0, "failures": []}
        self.children = []  # loaders running, to stop on an interrupt
        cpus = sorted(os.sched_getaffinity(0))
        if args.pin and len(cpus) >= 2 and shutil.which("taskset"):
            self.pin_server = ["taskset", "-c", str(cpus[0])]
            self.pin_load = ["taskset", "-c", str(cpus[1])]
        else:
            self.pin_server = self.pin_load = []

    def now(self):
        return time.monotonic() - self.t0

    def clear(self, path):
        return f"http://127.0.0.1:{self.ports['clear']}{path}"

    def tls(self, path):
        return f"https://127.0.0.1:{self.ports['tls']}{path}"

    def event(self, kind, ok, detail, t=None, **extra):
        with self.lock:
            self.events.append({"t": round(self.now() if t is None else t, 1), "kind": kind, "ok": ok,
                                "detail": detail, **extra})


# ---------------------------------------------------------------------------------------------
# Load lanes: each runs its loader in back-to-back segments


class Lane:
    def __init__(self, name, what, tool, rate, build, parse):
        self.name, self.what, self.tool, self.rate = name, what, tool, rate
        self.build, self.parse = build, parse


def parse_lowlat_load(out, err, rc):
    try:
        r = json.loads(out)
    except ValueError:
        return {"failure": f"lowlat load exited {rc}: {(err or out).strip()[-300:]}"}
    lat = r.get("latency_us") or {}
    errors = {k: v for k, v in (r.get("errors") or {}).items() if k != "total"}
    seg = {"responses": r.get("responses", 0), "errors": errors, "status": r.get("status_codes") or {},
           "p50_ms": _ms(lat.get("p50")), "p99_ms": _ms(lat.get("p99")),
           "p999_ms": _ms(lat.get("p99_9")), "max_ms": _ms(lat.get("max"))}
    if rc not in (0,):
        seg["failure"] = f"lowlat load exited {rc}: {err.strip()[-300:]}"
    elif sum(errors.values()) and err.strip():
        seg["said"] = err.strip()[-300:]  # the loader's words on its first failure
    return seg


def _ms(us):
    return None if us is None else round(us / 1000.0, 3)


H2LOAD_REQ = re.compile(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                        r"(\d+) errored, (\d+) timeout")
H2LOAD_STATUS = re.compile(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx")
H2LOAD_TIME = re.compile(r"time for request:\s+(\S+)\s+(\S+)\s+(\S+)")


def _h2load_ms(text):
    m = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    return round(float(m.group(1)) * {"us": 0.001, "ms": 1, "s": 1000}[m.group(2)], 3) if m else None


def parse_h2load(out, err, rc):
    req, st, tm = H2LOAD_REQ.search(out), H2LOAD_STATUS.search(out), H2LOAD_TIME.search(out)
    if not req or not st:
        return {"failure": f"h2load exited {rc}: {(err or out).strip()[-300:]}"}
    total, _started, done, ok, failed, errored, timeout = map(int, req.groups())
    s2, s3, s4, s5 = map(int, st.groups())
    seg = {"responses": done, "errors": {"failed": failed - (s4 + s5), "errored": errored, "timeout": timeout,
                                         "not_done": total - done},
           "status": {"2xx": s2, "3xx": s3, "4xx": s4, "5xx": s5},
           "p50_ms": None, "p99_ms": None, "p999_ms": None,
           "mean_ms": _h2load_ms(tm.group(3)) if tm else None, "max_ms": _h2load_ms(tm.group(2)) if tm else None}
    seg["errors"] = {k: v for k, v in seg["errors"].items() if v}
    return seg


def parse_oha(out, err, rc):
    try:
        r = json.loads(out)
    except ValueError:
        return {"failure": f"oha exited {rc}: {(err or out).strip()[-300:]}"}
    pct = r.get("latencyPercentiles") or {}

    def ms(key):
        v = pct.get(key)
        return None if v is None else round(v * 1000, 3)

    status = r.get("statusCodeDistribution") or {}
    return {"responses": sum(status.values()), "errors": dict(r.get("errorDistribution") or {}), "status": status,
            "p50_ms": ms("p50"), "p99_ms": ms("p99"), "p999_ms": ms("p99.9"),
            "max_ms": round((r.get("summary") or {}).get("slowest", 0) * 1000, 3)}


def lanes(ctx):
    a = ctx.args
    scale = a.rate_scale
    ca = str(ctx.dir / "ca.crt")
    lowlat = [a.binary, "load", "-q", "--json", "-t", "1", "-T", "5s"]

    def ll(conns, extra, urls, rate):
        def build(secs):
            return ctx.pin_load + lowlat + ["-c", str(conns), "-R", str(rate), "-d", f"{secs:g}s"] + extra + urls
        return build

    objs = [f"o{i}.txt" for i in range(50)]
    r = lambda x: max(1, int(round(x * scale)))  # noqa: E731
    out = [
        Lane("h1", "HTTP/1.1 keep-alive: files, /plaintext, /json", "lowlat load", r(500),
             ll(16, [], [ctx.clear("/plaintext@4"), ctx.clear("/json@2"), ctx.clear("/small.txt@2"),
                         ctx.clear("/page.html@2"), ctx.clear("/32k.bin@1"), ctx.clear("/big.bin@1")], r(500)),
             parse_lowlat_load),
        Lane("h1-pipelined", "HTTP/1.1 pipelined 8 deep", "lowlat load", r(300),
             ll(4, ["--pipeline", "8"], [ctx.clear("/plaintext@3"), ctx.clear("/small.txt@1")], r(300)),
             parse_lowlat_load),
        Lane("https", "HTTP/1.1 over TLS: files, /plaintext, proxied", "lowlat load", r(200),
             ll(8, ["--cacert", ca], [ctx.tls("/plaintext"), ctx.tls("/page.html"), ctx.tls("/32k.bin"),
                                      ctx.tls("/app/o1.txt")], r(200)),
             parse_lowlat_load),
        Lane("h2", "HTTP/2 over TLS, 8 streams: files, proxied, cached", "lowlat load", r(400),
             ll(4, ["--h2", "-m", "8", "--cacert", ca],
                [ctx.tls("/plaintext@2"), ctx.tls("/page.html@2"), ctx.tls("/32k.bin@1"),
                 ctx.tls("/app/o2.txt@2"), ctx.tls("/cdn/o3.txt@2"), ctx.tls("/h2/o4.txt@1")], r(400)),
             parse_lowlat_load),
        Lane("h3", "HTTP/3, 4 streams: files, proxied, cached", "lowlat load", r(300),
             ll(4, ["--h3", "-m", "4", "--cacert", ca],
                [ctx.tls("/plaintext@2"), ctx.tls("/page.html@2"), ctx.tls("/32k.bin@1"),
                 ctx.tls("/app/o5.txt@2"), ctx.tls("/cdn/o6.txt@2"), ctx.tls("/big.bin@1")], r(300)),
             parse_lowlat_load),
        Lane("proxy-h1", "proxy to HTTP/1.1 upstreams (two, balanced)", "lowlat load", r(300),
             ll(8, [], [ctx.clear(f"/app/{o}") for o in objs[:10]] + [ctx.clear("/app/big.bin@1"),
                                                                      ctx.clear("/app/plaintext@4")], r(300)),
             parse_lowlat_load),
        Lane("proxy-h2", "proxy to HTTP/2 (h2c) upstreams", "lowlat load", r(200),
             ll(8, [], [ctx.clear(f"/h2/{o}") for o in objs[10:20]] + [ctx.clear("/h2/big.bin@1"),
                                                                       ctx.clear("/h2/json@4")], r(200)),
             parse_lowlat_load),
        Lane("cache", "the cache: 50 objects of max-age=2", "lowlat load", r(400),
             ll(8, [], [ctx.clear(f"/cdn/{o}") for o in objs], r(400)), parse_lowlat_load),
    ]
    if ctx.ws_python:
        out.append(Lane("websocket", "WebSocket over TLS through the proxy, 1 KiB echoes", "lowlat load", r(100),
                        ll(4, ["--ws", "--ws-message-size", "1k", "--cacert", ca], [ctx.tls("/ws/echo").replace(
                            "https://", "wss://")], r(100)), parse_lowlat_load))
    h2load = shutil.which("h2load")
    if h2load:
        rate, clients = r(200), 2

        def build_h2load(secs):
            per = max(1, rate // clients)
            return ctx.pin_load + [h2load, "-c", str(clients), "-m", "4", f"--rps={per}",
                                   "-n", str(max(clients, int(per * clients * secs))),
                                   ctx.clear("/plaintext"), ctx.clear("/page.html"), ctx.clear("/cdn/o7.txt"),
                                   ctx.clear("/app/o8.txt"), ctx.clear("/h2/o9.txt")]
        out.append(Lane("h2load-h2c", "h2load, HTTP/2 in clear (prior knowledge)", "h2load", rate, build_h2load,
                        parse_h2load))
    oha = ctx.oha
    if oha:
        rate = r(100)
        urls = ctx.dir / "oha-urls.txt"
        urls.write_text("".join(ctx.tls(p) + "\n" for p in
                                ["/plaintext", "/cdn/o10.txt", "/cdn/o11.txt", "/app/o12.txt", "/h2/o13.txt"]))

        def build_oha(secs):
            return ctx.pin_load + [oha, "--no-tui", "--output-format", "json", "--http-version", "3",
                                   "--cacert", ca, "-c", "2", "-q", str(rate), "-n", str(max(1, int(rate * secs))),
                                   "-t", "5s", "--urls-from-file", str(urls)]
        out.append(Lane("oha-h3", "oha, HTTP/3", "oha", rate, build_oha, parse_oha))
    return out


def run_lane(ctx, lane, end):
    seg_len = ctx.args.segment
    while not ctx.stop.is_set():
        start = ctx.now()
        secs = min(seg_len, end - start)
        if secs < min(3.0, seg_len / 2):
            return
        argv = lane.build(round(secs, 1))
        try:
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 start_new_session=True)
        except OSError as e:
            rec = {"failure": f"cannot start {lane.tool}: {e}"}
        else:
            with ctx.lock:
                ctx.children.append(p)
            try:
                out, err = p.communicate(timeout=secs + 60)
                rec = lane.parse(out, err, p.returncode) if not ctx.stop.is_set() or out else \
                    {"failure": "stopped"}
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
                rec = {"failure": f"{lane.tool} did not finish {secs + 60:.0f}s into a {secs:.0f}s segment"}
            with ctx.lock:
                ctx.children.remove(p)
        if ctx.stop.is_set() and rec.get("failure") == "stopped":
            return
        rec.update({"lane": lane.name, "start": round(start, 1), "end": round(ctx.now(), 1),
                    "seconds": round(secs, 1)})
        rec.setdefault("responses", 0)
        with ctx.lock:
            ctx.segments.append(rec)
        if rec.get("failure"):
            time.sleep(1)  # a loader that cannot start is not retried in a loop


# ---------------------------------------------------------------------------------------------
# Content checks with curl


def content_targets(ctx):
    """(path, sha256 or exact body) fetched by every content check."""
    sha = ctx.files
    return [
        ("/plaintext", b"Hello, World!"),
        ("/small.txt", sha["www/small.txt"]),
        ("/32k.bin", sha["www/32k.bin"]),
        ("/big.bin", sha["www/big.bin"]),
        ("/app/o21.txt", sha["up/o21.txt"]),
        ("/app/big.bin", sha["up/big.bin"]),
        ("/h2/o22.txt", sha["up/o22.txt"]),
        ("/h2/big.bin", sha["up/big.bin"]),
        ("/cdn/o23.txt", sha["up/o23.txt"]),
        ("/cdn/big.bin", sha["up/big.bin"]),
    ]


def content_check(ctx, scratch):
    """One round: every target over HTTP/1.1, HTTP/2 over TLS and h2c."""
    failures = []
    runs = 0
    targets = content_targets(ctx)
    for proto, flags, base in (("http/1.1", ["--http1.1"], ctx.clear), ("h2", ["--http2"], ctx.tls),
                               ("h2c", ["--http2-prior-knowledge"], ctx.clear)):
        argv = ["curl", "-sS", "--max-time", "10", "--cacert", str(ctx.dir / "ca.crt"), *flags,
                "-w", "%{http_code} %{http_version} %header{x-soak-gen}\\n"]
        files = [scratch / f"{proto.replace('/', '')}-{i}" for i in range(len(targets))]
        fetches = [(files[i], base(path)) for i, (path, _want) in enumerate(targets)]
        # One connection for all of them, except h2c: curl 7.88 fails every request after the
        # first on a reused prior-knowledge connection (curl/curl#10634, fixed in 8.0).
        batches = [fetches] if proto != "h2c" else [[f] for f in fetches]
        lines, errs = [], ""
        with ctx.gen_lock:
            gen = ctx.gen
            for batch in batches:
                p = subprocess.run(ctx.pin_load + argv + [a for f, url in batch for a in ("-o", str(f), url)],
                                   capture_output=True, text=True, timeout=60)
                got = p.stdout.strip().splitlines()
                lines += got + ["000 0 -"] * (len(batch) - len(got))
                errs += p.stderr
        for i, (path, want) in enumerate(targets):
            runs += 1
            if i >= len(lines):
                failures.append(f"{proto} {path}: no answer ({errs.strip()[:200]})")
                continue
            code, version, got_gen = (lines[i].split() + ["", "", ""])[:3]
            body = files[i].read_bytes() if files[i].exists() else b""
            ok_body = body == want if isinstance(want, bytes) else hashlib.sha256(body).hexdigest() == want
            if code == "000":
                failures.append(f"{proto} {path}: no answer ({errs.strip()[:200]})")
            elif code != "200":
                failures.append(f"{proto} {path}: status {code}")
            elif not ok_body:
                failures.append(f"{proto} {path}: wrong body ({len(body)} bytes)")
            elif got_gen != str(gen):
                failures.append(f"{proto} {path}: generation {got_gen or '-'} where the configuration is at {gen}")
            elif (proto == "h2" or proto == "h2c") and version != "2":
                failures.append(f"{proto} {path}: answered over HTTP/{version}")
            if files[i].exists():
                files[i].unlink()
    with ctx.lock:
        ctx.checks["run"] += runs
        ctx.checks["failed"] += len(failures)
        for f in failures:
            if len(ctx.checks["failures"]) < 20:
                ctx.checks["failures"].append(f"{fmt_secs(ctx.now())}: {f}")


def run_checks(ctx, end):
    scratch = ctx.dir / "checks"
    scratch.mkdir(exist_ok=True)
    while not ctx.stop.is_set() and ctx.now() < end - 1:
        t = ctx.now()
        try:
            content_check(ctx, scratch)
        except Exception as e:  # a curl that hangs past its own limit, a file that vanished
            with ctx.lock:
                ctx.checks["run"] += 1
                ctx.checks["failed"] += 1
                ctx.checks["failures"].append(f"{fmt_secs(t)}: {type(e).__name__}: {e}")
        ctx.stop.wait(max(0.0, ctx.args.interval - (ctx.now() - t)))


# ---------------------------------------------------------------------------------------------
# Bad clients


H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def h2_frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def h2_frames(data):
    """(type, flags, stream, payload) of the whole frames in `data`."""
    out, pos = [], 0
    while pos + 9 <= len(data):
        n = int.from_bytes(data[pos:pos + 3], "big")
        if pos + 9 + n > len(data):
            break
        out.append((data[pos + 3], data[pos + 4], int.from_bytes(data[pos + 5:pos + 9], "big") & 0x7FFFFFFF,
                    data[pos + 9:pos + 9 + n]))
        pos += 9 + n
    return out


def hpack_int_tail(n):
    """The continuation bytes of an HPACK integer past its full prefix (RFC 7541 5.1)."""
    out = b""
    while n >= 128:
        out += bytes([n % 128 + 128])
        n //= 128
    return out + bytes([n])


def status_of(data):
    m = re.match(rb"HTTP/1\.[01] (\d{3})", data)
    return int(m.group(1)) if m else None


class BadClients:
    """Clients that misbehave, each checked against what the server promises them."""

    def __init__(self, ctx):
        self.ctx = ctx
        a = ctx.args
        self.header_timeout = 10.0  # lowlat serve's defaults, which the soak keeps
        self.tls_timeout = 10.0
        self.body_timeout = 10.0  # set in the soak's configuration
        self.stats = collections.defaultdict(lambda: {"runs": 0, "ok": 0, "answers": collections.Counter()})
        self.failures = []
        self.lock = threading.Lock()
        self.rnd = random.Random(a.seed)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="bad-clients", daemon=True)
        self.pending = set()
        self.tls_ctx = ssl.create_default_context(cafile=str(ctx.dir / "ca.crt"))
        self.h2_ctx = ssl.create_default_context(cafile=str(ctx.dir / "ca.crt"))
        self.h2_ctx.set_alpn_protocols(["h2"])
        c = ctx.ports["clear"]
        t = ctx.ports["tls"]
        # name: (coroutine factory, overall time limit, share of the trickle)
        self.kinds = {
            "garbage": (lambda: self.expect(c, b"\x00" + self.rnd.randbytes(self.rnd.randint(16, 2048)) + b"\r\n\r\n",
                                            {400}), 10, 3),
            "bad-version": (lambda: self.expect(c, b"GET /plaintext HTTP/9.9\r\nHost: x\r\n\r\n", {505}), 10, 1),
            "long-uri": (lambda: self.expect(c, b"GET /" + b"u" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", {414}), 10, 1),
            "big-head": (lambda: self.expect(c, b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 20000 + b"\r\n\r\n",
                                             {431}), 10, 1),
            "many-headers": (lambda: self.expect(c, b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(
                b"X-H%d: v\r\n" % i for i in range(150)) + b"\r\n", {431}), 10, 1),
            "smuggling": (lambda: self.expect(c, b"POST /app/x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                                                 b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", {400}), 10, 1),
            "body-too-large": (lambda: self.expect(c, b"POST /plaintext HTTP/1.1\r\nHost: x\r\n"
                                                      b"Content-Length: 2000000\r\n\r\n" + b"x" * 1000, {413}), 10, 1),
            "bad-chunk": (lambda: self.expect(c, b"POST /app/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked"
                                                 b"\r\n\r\nzz\r\n", {400}), 10, 1),
            "no-host": (lambda: self.expect(c, b"GET / HTTP/1.1\r\n\r\n", {400}), 10, 1),
            "pipelined-garbage": (lambda: self.expect(c, b"GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n"
                                                         b"\x01\x02 garbage\r\n\r\n", {200}, then={400}), 10, 1),
            "slowloris": (lambda: self.slowloris(c), self.header_timeout + 15, 2),
            "slow-body": (lambda: self.slow_body(c), self.body_timeout + 15, 1),
            "reset-mid-head": (lambda: self.reset_after(c, b"GET /page.html HTTP/1.1\r\nHost: x\r\nX-Par"), 10, 1),
            "reset-mid-body": (lambda: self.reset_after(c, b"POST /app/upload HTTP/1.1\r\nHost: x\r\n"
                                                           b"Content-Length: 200000\r\n\r\n" + b"y" * 100000), 10, 1),
            "reset-mid-response": (lambda: self.reset_after(c, b"GET /app/big.bin HTTP/1.1\r\nHost: x\r\n\r\n",
                                                            read=1000), 10, 1),
            "reset-mid-h2-upstream": (lambda: self.reset_after(c, b"GET /h2/big.bin HTTP/1.1\r\nHost: x\r\n\r\n",
                                                               read=1000), 10, 1),
            "stalled-reader": (lambda: self.stalled_reader(c), 15, 1),
            "plain-on-tls": (lambda: self.expect(t, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", {400}), 10, 1),
            "tls-garbage": (lambda: self.expect(t, b"\x16\x03\x01\x00\x20" + self.rnd.randbytes(300), None), 10, 1),
            "tls-abandoned": (lambda: self.tls_abandoned(t), 10, 1),
            "tls-idle": (lambda: self.expect(t, b"", None, within=self.tls_timeout + 5), self.tls_timeout + 15, 1),
            "h2-garbage": (lambda: self.h2_garbage(c), 10, 1),
            "h2-rapid-reset": (lambda: self.h2_rapid_reset(t), 15, 1),
            "h2-continuation-flood": (lambda: self.h2_continuation_flood(c), 15, 1),
            "quic-garbage": (lambda: self.quic_garbage(t), 5, 1),
            "ws-no-key": (lambda: self.expect(c, b"GET /ws/x HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                                                 b"Connection: Upgrade\r\n\r\n", set(range(400, 500)),
                                              keepalive=True), 10, 1),
            "ws-bad-frame": (lambda: self.ws_bad_frame(c), 15, 1),
            "conn-flood": (lambda: self.flood(c, t, 100), 15, 0),
        }
        self.burst_mix = {"slowloris": 40, "tls-idle": 20, "conn-flood": 2, "h2-rapid-reset": 4,
                          "slow-body": 10}

    # -- running

    def start(self):
        self.thread.start()

    def launch(self, kind):
        fut = asyncio.run_coroutine_threadsafe(self.one(kind), self.loop)
        with self.lock:
            self.pending.add(fut)
        fut.add_done_callback(lambda f: self._done(f))

    def _done(self, fut):
        with self.lock:
            self.pending.discard(fut)

    def trickle_kind(self):
        kinds = [k for k, v in self.kinds.items() if v[2] > 0]
        return self.rnd.choices(kinds, weights=[self.kinds[k][2] for k in kinds])[0]

    def burst(self):
        n = 0
        for kind in self.kinds:
            for _ in range(self.burst_mix.get(kind, 5)):
                self.launch(kind)
                n += 1
        return n

    def wait_idle(self, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.lock:
                if not self.pending:
                    return True
            time.sleep(0.2)
        return False

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    async def one(self, kind):
        factory, limit, _ = self.kinds[kind]
        t = self.ctx.now()
        try:
            ok, answer = await asyncio.wait_for(factory(), limit)
        except asyncio.TimeoutError:
            ok, answer = False, f"still open after {limit:.0f}s: neither answered nor closed"
        except (ConnectionRefusedError, OSError) as e:
            ok, answer = False, f"{type(e).__name__}: {e}"
        except Exception as e:  # a bug of the client itself counts too: it is looked at
            ok, answer = False, f"{type(e).__name__}: {e}"
        with self.lock:
            s = self.stats[kind]
            s["runs"] += 1
            s["answers"][answer if ok else "unexpected"] += 1
            if ok:
                s["ok"] += 1
            elif len(self.failures) < 20:
                self.failures.append(f"{kind} at {fmt_secs(t)}: {answer}")

    def summary(self):
        with self.lock:
            total = sum(s["runs"] for s in self.stats.values())
            bad = sum(s["runs"] - s["ok"] for s in self.stats.values())
            return {"total": total, "unexpected": bad, "failures": list(self.failures),
                    "kinds": {k: {"runs": s["runs"], "ok": s["ok"], "answers": dict(s["answers"])}
                              for k, s in sorted(self.stats.items())}}

    # -- the clients

    async def read_all(self, reader, within):
        """What the server sends until it closes (eof or reset) or `within` seconds pass."""
        data = b""
        end = time.monotonic() + within
        try:
            while True:
                left = end - time.monotonic()
                if left <= 0:
                    return data, "open"
                chunk = await asyncio.wait_for(reader.read(65536), left)
                if not chunk:
                    return data, "eof"
                data += chunk
        except asyncio.TimeoutError:
            return data, "open"
        except (ConnectionResetError, BrokenPipeError):
            return data, "reset"

    async def expect(self, port, data, statuses, then=None, within=5.0, keepalive=False, tls=False):
        """Sends `data`; the answer must have one of `statuses` (None: any, or none), then the
        connection must close within `within` seconds (unless `keepalive`)."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            if data:
                writer.write(data)
                try:
                    await writer.drain()
                except (ConnectionResetError, BrokenPipeError):
                    pass
            got, how = await self.read_all(reader, 2.0 if keepalive else within)
        finally:
            writer.transport.abort()
        code = status_of(got)
        if statuses is not None and code not in statuses:
            return False, f"answered {code if code else repr(got[:40])} ({how}), expected {sorted(statuses)[:4]}"
        if then:
            rest = got.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in got else b""
            rest = rest[len(b"Hello, World!"):] if rest.startswith(b"Hello, World!") else rest
            if status_of(rest) not in then:
                return False, f"second answer {status_of(rest)} ({how}), expected {sorted(then)}"
        if how == "open" and not keepalive:
            return False, f"answered {code} but left the connection open {within:.0f}s"
        return True, f"{code or how}" + (f"+{sorted(then)[0]}" if then else "")

    async def slowloris(self, port):
        """A head sent a byte a second: the server must give up at --header-timeout (408)."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        t = time.monotonic()
        try:
            writer.write(b"GET /plaintext HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            while time.monotonic() - t < self.header_timeout + 8:
                try:
                    chunk = await asyncio.wait_for(reader.read(4096), 1.0)
                except asyncio.TimeoutError:
                    try:
                        writer.write(b"s")
                        await writer.drain()
                    except (ConnectionResetError, BrokenPipeError):
                        return True, "reset"
                    continue
                except ConnectionResetError:
                    return True, "reset"
                rest, how = await self.read_all(reader, 3.0)
                got = chunk + rest
                took = time.monotonic() - t
                if status_of(got) != 408 and got:
                    return False, f"answered {status_of(got)} after {took:.1f}s, expected 408"
                if how == "open" and chunk:
                    return False, "answered 408 but left the connection open"
                if took < self.header_timeout - 1:
                    return False, f"cut after {took:.1f}s, before the header timeout"
                return True, "408" if got else "closed"
            return False, f"no 408 after {self.header_timeout + 8:.0f}s of a head a byte a second"
        finally:
            writer.transport.abort()

    async def slow_body(self, port):
        """A body that stops arriving: 408 at --body-timeout."""
        return await self.expect(port, b"POST /app/x HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n0123456789",
                                 {408}, within=self.body_timeout + 5)

    async def reset_after(self, port, data, read=0):
        """Sends `data`, reads `read` bytes of the answer, then resets the connection."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        try:
            writer.write(data)
            await writer.drain()
            got = b""
            while len(got) < read:
                chunk = await asyncio.wait_for(reader.read(read - len(got)), 5.0)
                if not chunk:
                    break
                got += chunk
            if read and status_of(got) != 200:
                return False, f"answered {status_of(got) or repr(got[:40])} before the reset, expected 200"
            return True, "reset"
        finally:
            writer.transport.abort()

    async def stalled_reader(self, port):
        """Asks for 256 KiB and reads nothing for 3 s, then a little, then resets."""
        path = self.rnd.choice([b"/big.bin", b"/app/big.bin", b"/h2/big.bin"])
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1024)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        try:
            writer.write(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            await asyncio.sleep(3)
            got = await asyncio.wait_for(reader.read(1024), 5.0)
            if status_of(got) != 200:
                return False, f"{path.decode()}: answered {status_of(got) or repr(got[:40])}, expected 200"
            return True, "reset"
        finally:
            writer.transport.abort()

    async def tls_abandoned(self, port):
        """A ClientHello, the server's first flight read, then a reset."""
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = self.tls_ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
        try:
            obj.do_handshake()
        except ssl.SSLWantReadError:
            pass
        hello = outgoing.read()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        try:
            writer.write(hello)
            await writer.drain()
            got = await asyncio.wait_for(reader.read(1024), 5.0)
            if not got.startswith(b"\x16\x03"):
                return False, f"answered {got[:20]!r} to a ClientHello"
            return True, "server hello"
        finally:
            writer.transport.abort()

    async def h2_garbage(self, port):
        """h2c preface, then a DATA frame on stream 0: GOAWAY PROTOCOL_ERROR and a close."""
        frames = H2_PREFACE + h2_frame(4, 0, 0) + h2_frame(0, 0, 0, b"garbage")
        return await self.h2_expect_goaway(port, frames, {1}, tls=False)

    async def h2_rapid_reset(self, port):
        """HTTP/2 over TLS: 600 requests each cancelled at once (CVE-2023-44487): the server must
        cut the connection with GOAWAY ENHANCE_YOUR_CALM."""
        block = b"\x82\x87\x84\x01\x09127.0.0.1"  # GET https / :authority 127.0.0.1
        data = H2_PREFACE + h2_frame(4, 0, 0)
        for i in range(600):
            sid = 1 + 2 * i
            data += h2_frame(1, 0x5, sid, block) + h2_frame(3, 0, sid, struct.pack(">I", 8))
        return await self.h2_expect_goaway(port, data, {0xB}, tls=True)

    async def h2_continuation_flood(self, port):
        """h2c: a request whose header block never ends, CONTINUATION after CONTINUATION, one
        field of 256 KiB: the server must refuse it (431, a reset or GOAWAY) once past its
        limit on the header list, not gather it all."""
        size = 256 * 1024
        block = b"\x82\x86\x84\x01\x09127.0.0.1" + b"\x00\x06x-long" + b"\x7f" + hpack_int_tail(size - 127)
        block += b"v" * size
        chunks = [block[i:i + 16384] for i in range(0, len(block), 16384)]
        data = H2_PREFACE + h2_frame(4, 0, 0) + h2_frame(1, 0x1, 1, chunks[0])
        data += b"".join(h2_frame(9, 0, 1, c) for c in chunks[1:])  # never END_HEADERS
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(data)
            try:
                await writer.drain()
            except (ConnectionResetError, BrokenPipeError):
                pass
            got, how = await self.read_all(reader, 8.0)
        finally:
            writer.transport.abort()
        frames = h2_frames(got)
        answer = [f for f in frames if f[2] == 1 and f[0] in (1, 3)] or [f for f in frames if f[0] == 7]
        if not answer and how == "open":
            return False, "neither an answer nor a GOAWAY 8s after a header block of 256 KiB"
        kind = {1: "HEADERS", 3: "RST_STREAM", 7: "GOAWAY"}.get(answer[0][0]) if answer else how
        return True, kind

    async def h2_expect_goaway(self, port, data, codes, tls):
        if tls:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=self.h2_ctx,
                                                           server_hostname="localhost")
        else:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(data)
            try:
                await writer.drain()
            except (ConnectionResetError, BrokenPipeError):
                pass
            got, how = await self.read_all(reader, 8.0)
        finally:
            writer.transport.abort()
        goaway = [f for f in h2_frames(got) if f[0] == 7]
        if not goaway:
            return False, f"no GOAWAY ({len(got)} bytes, {how})"
        code = int.from_bytes(goaway[0][3][4:8], "big")
        if code not in codes:
            return False, f"GOAWAY {code:#x}, expected {sorted(codes)}"
        if how == "open":
            return False, f"GOAWAY {code:#x} but the connection stayed open"
        return True, f"GOAWAY {code:#x}"

    async def quic_garbage(self, port):
        """Datagrams that look like QUIC Initials and others that look like nothing."""
        loop = asyncio.get_running_loop()
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setblocking(False)
        try:
            for i in range(20):
                if i % 2:
                    pkt = bytes([0xC0 | self.rnd.randrange(64)]) + b"\x00\x00\x00\x01" + self.rnd.randbytes(1195)
                else:
                    pkt = self.rnd.randbytes(self.rnd.randint(1, 1500))
                await loop.sock_sendto(s, pkt, ("127.0.0.1", port))
            await asyncio.sleep(0.2)
            return True, "sent"
        finally:
            s.close()

    async def ws_bad_frame(self, port):
        """A WebSocket handshake answered 101 through the proxy, then an unmasked frame with a
        reserved opcode: the echo server must close the tunnel, and the proxy with it."""
        key = base64.b64encode(self.rnd.randbytes(16))
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(b"GET /ws/bad HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         b"Sec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n\r\n")
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
            if status_of(head) != 101:
                return False, f"handshake answered {status_of(head)}, expected 101"
            writer.write(b"\x83\x05hello")
            await writer.drain()
            _, how = await self.read_all(reader, 8.0)
            if how == "open":
                return False, "the tunnel stayed open after a bad frame"
            return True, "101, closed"
        finally:
            writer.transport.abort()

    async def flood(self, clear, tls, n):
        """n connections opened at once and closed, half of them reset, to both ports."""
        conns = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", clear if i % 2 else tls)
                                       for i in range(n)), return_exceptions=True)
        errors = [c for c in conns if isinstance(c, BaseException)]
        for i, c in enumerate(conns):
            if isinstance(c, BaseException):
                continue
            if i % 4 < 2:
                c[1].get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c[1].transport.abort()
        if errors:
            return False, f"{len(errors)} of {n} connections refused: {errors[0]}"
        return True, "accepted"


# ---------------------------------------------------------------------------------------------
# Sampling


def scrape(ctx):
    with urllib.request.urlopen(f"http://127.0.0.1:{ctx.ports['metrics']}/metrics", timeout=5) as r:
        return parse_metrics(r.read().decode())


def take_sample(ctx, prev_hist, phase="load"):
    s = {"t": round(ctx.now(), 1), "phase": phase}
    s.update(proc_sample(ctx.server.p.pid))
    if phase != "load":
        s["fd_census"] = fd_census(ctx.server.p.pid, ctx.server_ports, ctx.upstream_ports)
    try:
        m = scrape(ctx)
    except Exception as e:
        s["metrics_error"] = f"{type(e).__name__}: {e}"
        return s, prev_hist
    hist = histogram(m, "lowlat_request_duration_seconds")
    p99 = histogram_quantile(prev_hist, hist, 0.99)
    s.update({
        "conns_open": metric_sum(m, "lowlat_connections_open"),
        "conns_idle": metric_sum(m, "lowlat_connections_idle"),
        "quic_open": metric_sum(m, "lowlat_quic_connections_open"),
        "upstream_active": metric_sum(m, "lowlat_upstream_connections", 'state="active"'),
        "upstream_idle": metric_sum(m, "lowlat_upstream_connections", 'state="idle"'),
        "cache_objects": metric_sum(m, "lowlat_cache_objects"),
        "cache_bytes": metric_sum(m, "lowlat_cache_bytes"),
        "cache_hits": metric_sum(m, "lowlat_cache_hits_total"),
        "cache_stored": metric_sum(m, "lowlat_cache_stored_total"),
        "responses": metric_sum(m, "lowlat_responses_total"),
        "responses_5xx": metric_sum(m, "lowlat_responses_total", 'class="5xx"'),
        "parse_errors": metric_sum(m, "lowlat_parse_errors_total"),
        "upstream_failures": metric_sum(m, "lowlat_upstream_failures_total"),
        "cpu_s": metric_sum(m, "process_cpu_seconds_total"),
        "server_p99_ms": None if p99 is None or p99 == float("inf") else round(p99 * 1000, 3),
    })
    try:
        s["load1"] = float(open("/proc/loadavg").read().split()[0])
    except OSError:
        pass
    return s, hist


def run_sampler(ctx, end):
    prev = None
    next_t = 0.0
    last_said = 0.0
    while not ctx.stop.is_set():
        if not ctx.server.alive():
            with ctx.lock:
                ctx.server_died_at = ctx.now()
            ctx.stop.set()
            return
        if ctx.now() >= end:
            return
        try:
            s, prev = take_sample(ctx, prev)
        except FileNotFoundError:  # /proc/PID gone: it died between the check and the read
            continue
        with ctx.lock:
            ctx.samples.append(s)
            if s["t"] // 60 != last_said // 60 and s.get("rss_kb"):
                # A line a minute on stderr, for whoever watches a long run.
                last_said = s["t"]
                done = sum(x.get("responses", 0) for x in ctx.segments)
                errors = sum(sum((x.get("errors") or {}).values()) for x in ctx.segments)
                print(f"soak: {fmt_secs(s['t'])}: RSS {s['rss_kb'] / 1024:.1f} MiB, {s['fds']} descriptors, "
                      f"{s.get('conns_open', 0):.0f} connections, {done} responses, {errors} failed, "
                      f"{len(ctx.events)} events", file=sys.stderr, flush=True)
        next_t += ctx.args.interval
        ctx.stop.wait(max(0.0, next_t - ctx.now()))


# ---------------------------------------------------------------------------------------------
# Chaos: reloads, upstream restarts, bursts of bad clients


def schedule(duration, warmup, interval, calm, every, phase, kind):
    """When to do `kind`: every `every` seconds from `phase`, kept out of the window where the
    level after warm-up is measured and out of the last stretch where the end level is (each
    moved to the end of the window it falls in, or dropped)."""
    if not every or every <= 0:
        return []
    quiet = (max(0.0, warmup - calm), warmup + 3 * interval + interval / 2)
    tail = duration - (calm + 3 * interval)
    out = []
    t = phase
    while t < tail:
        at = quiet[1] if quiet[0] <= t < quiet[1] else t
        if at < tail and (not out or at > out[-1][0]):
            out.append((at, kind))
        t += every
    return out


def reload(ctx):
    """SIGHUP with the next generation; it must be served within 5 s. Then PURGE /cdn/*."""
    t = ctx.now()
    with ctx.gen_lock:
        gen = ctx.gen + 1
        (ctx.dir / "lowlat.toml").write_text(server_config(ctx, gen))
        ctx.server.p.send_signal(signal.SIGHUP)
        end = time.monotonic() + 5
        seen = None
        while time.monotonic() < end:
            try:
                with urllib.request.urlopen(ctx.clear("/plaintext"), timeout=2) as r:
                    seen = r.headers.get("X-Soak-Gen")
            except Exception as e:
                seen = f"{type(e).__name__}: {e}"
            if seen == str(gen):
                break
            time.sleep(0.05)
        ok = seen == str(gen)
        if ok:
            ctx.gen = gen
        else:
            # Put the generation the server holds back in the file, so the next reload is a change.
            (ctx.dir / "lowlat.toml").write_text(server_config(ctx, ctx.gen))
    ctx.event("reload", ok, f"generation {gen} served after {ctx.now() - t:.2f}s" if ok else
              f"generation {gen} not served 5s after SIGHUP (saw {seen})", t=t)
    t = ctx.now()
    try:
        req = urllib.request.Request(ctx.clear("/cdn/*"), method="PURGE")
        with urllib.request.urlopen(req, timeout=5) as r:
            ok, detail = r.status == 200, f"{r.status} {r.read().decode(errors='replace').strip()[:60]}"
    except Exception as e:
        ok, detail = False, f"{type(e).__name__}: {e}"
    ctx.event("purge", ok, detail, t=t)


def restart_upstream(ctx, up):
    """SIGTERM to one upstream, and a new one on its port. One that takes more than a second to
    go (it waits for requests in flight, up to its grace period) has its sockets, and the
    server's to it, noted in the event."""
    t = ctx.now()
    up.p.send_signal(signal.SIGTERM)
    held = None
    try:
        code = up.p.wait(1.0)
    except subprocess.TimeoutExpired:
        try:
            held = {"upstream": fd_census(up.p.pid, {up.port}, set()),
                    "server": {k: v for k, v in fd_census(ctx.server.p.pid, ctx.server_ports, {up.port}).items()
                               if k.startswith("to upstream")}}
            if shutil.which("ss"):
                held["ss"] = subprocess.run(["ss", "-tni", "state", "established", f"( sport = :{up.port} )"],
                                            capture_output=True, text=True).stdout.strip().splitlines()[1:9]
        except OSError:
            pass
        try:
            code = up.p.wait(20)
        except subprocess.TimeoutExpired:
            code = up.stop(timeout=5, sig=signal.SIGKILL)
    if code not in (0, None) and code != -signal.SIGTERM:
        ctx.event("restart", False, f"{up.name} exited {code} on SIGTERM", t=t)
    up.start()
    if wait_port(up.port, 20):
        ctx.event("restart", True, f"{up.name} down {ctx.now() - t:.2f}s", t=t, upstream=up.name,
                  **({"held_at_stop": held} if held else {}))
    else:
        ctx.event("restart", False, f"{up.name} did not listen again within 20s", t=t)


def chaos_plan(duration, warmup, interval, calm, every):
    """Every reload, restart and burst of a run, in order: each kind happens first during the
    warm-up, before its quiet window (so that the level after warm-up is one the server reached
    having been through all of them), then every `every[kind]` seconds."""
    plan = []
    for kind, share in (("reload", 0.3), ("restart", 0.5), ("burst", 0.7)):
        n = every.get(kind) or 0
        first = min(n, max(1.0, (warmup - calm) * share)) if warmup > calm else n
        plan += schedule(duration, warmup, interval, calm, n, first, kind)
    return sorted(plan)


def run_chaos(ctx, bad, upstreams, duration):
    a = ctx.args
    plan = chaos_plan(duration, a.warmup, a.interval, a.calm,
                      {"reload": a.reload_every, "restart": a.restart_every, "burst": a.burst_every})
    cycle = 0
    trickle_next = 1.0
    for at, kind in plan + [(duration, "end")]:
        while not ctx.stop.is_set() and ctx.now() < at:
            # One bad client a second in between, all along.
            if ctx.now() >= trickle_next and a.trickle:
                bad.launch(bad.trickle_kind())
                trickle_next += 1.0 / a.trickle
            ctx.stop.wait(max(0.0, min(at, trickle_next) - ctx.now()))
        if ctx.stop.is_set() or kind == "end":
            return
        if kind == "reload":
            reload(ctx)
        elif kind == "restart":
            restart_upstream(ctx, upstreams[cycle % len(upstreams)])
            cycle += 1
        elif kind == "burst":
            n = bad.burst()
            ctx.event("burst", True, f"{n} bad clients")


# ---------------------------------------------------------------------------------------------
# Report


def lane_rows(run):
    """Per lane: responses, failures, and p50 and p99 at the start and the end — the medians of
    its first three segments after warm-up and of its last three."""
    rows = []
    lanes_seen = collections.OrderedDict()
    for s in run["segments"]:
        lanes_seen.setdefault(s["lane"], []).append(s)
    warmup = run["config"]["warmup"]
    for lane, segs in lanes_seen.items():
        info = run["lanes"].get(lane, {})
        errors = sum(sum((s.get("errors") or {}).values()) for s in segs)
        non2xx = sum(n for s in segs for c, n in (s.get("status") or {}).items() if not str(c).startswith("2"))
        responses = sum(s.get("responses", 0) for s in segs)
        secs = sum(s.get("seconds", 0) for s in segs) or 1
        timed = sorted((s for s in segs if s.get("p99_ms") is not None and s["start"] >= warmup - 1e-6),
                       key=lambda s: s["start"])
        k = 3 if len(timed) >= 6 else 1
        first, last = timed[:k], timed[-k:]
        rows.append({"lane": lane, "what": info.get("what", ""), "tool": info.get("tool", ""),
                     "rate": info.get("rate"), "responses": responses, "per_s": responses / secs,
                     "errors": errors, "non_2xx": non2xx,
                     "p50_first_ms": median([s["p50_ms"] for s in first]),
                     "p50_last_ms": median([s["p50_ms"] for s in last]),
                     "p99_first_ms": median([s["p99_ms"] for s in first]),
                     "p99_last_ms": median([s["p99_ms"] for s in last]),
                     "max_ms": max((s.get("max_ms") or 0) for s in segs)})
    return rows


def fmt(v, digits=2):
    return "-" if v is None else f"{v:.{digits}f}"


def print_summary(run, out=sys.stdout):
    w = out.write
    cfg = run["config"]
    w(f"\nlowlat soak: {fmt_secs(cfg['duration'])} of load on {cfg['binary']} ({run['server'].get('version', '')})\n\n")
    w(f"{'lane':<13} {'tool':<11} {'rate/s':>6} {'responses':>10} {'errors':>6} {'non-2xx':>7} "
      f"{'p50 first':>9} {'p50 last':>8} {'p99 first':>9} {'p99 last':>8} {'max ms':>8}\n")
    for r in run["lane_rows"]:
        w(f"{r['lane']:<13} {r['tool']:<11} {r['rate'] or 0:>6} {r['responses']:>10} {r['errors']:>6} "
          f"{r['non_2xx']:>7} {fmt(r['p50_first_ms']):>9} {fmt(r['p50_last_ms']):>8} "
          f"{fmt(r['p99_first_ms']):>9} {fmt(r['p99_last_ms']):>8} {fmt(r['max_ms'], 1):>8}\n")
    total = sum(r["responses"] for r in run["lane_rows"])
    w(f"{'all':<13} {'':<11} {sum(r['rate'] or 0 for r in run['lane_rows']):>6} {total:>10}\n")
    w("(latency in ms: medians of the first three segments after warm-up and of the last three)\n\n")
    res = run.get("resources", {})
    w(f"{'resource':<22} {'idle start':>10} {'warm-up':>10} {'end':>10} {'peak':>10} {'drained':>10}\n")
    for key, label, div in (("rss_kb", "RSS MiB", 1024), ("fds", "descriptors", 1), ("threads", "threads", 1),
                            ("conns_open", "client connections", 1), ("quic_open", "QUIC connections", 1),
                            ("upstream_active", "upstream active", 1), ("upstream_idle", "upstream idle", 1),
                            ("cache_objects", "cache objects", 1)):
        r = res.get(key, {})
        vals = [r.get(k) for k in ("idle", "base", "end", "peak", "drained")]
        w(f"{label:<22} " + " ".join(f"{'-' if v is None else f'{v / div:.1f}':>10}" for v in vals) + "\n")
    ev = collections.Counter(e["kind"] for e in run["events"])
    evbad = collections.Counter(e["kind"] for e in run["events"] if not e["ok"])
    w("\nevents: " + ", ".join(f"{n} {k}{'s' if n != 1 else ''}" + (f" ({evbad[k]} failed)" if evbad[k] else "")
                               for k, n in ev.items()) + "\n")
    b = run["bad_clients"]
    w(f"bad clients: {b['total']} ({b['unexpected']} not answered as promised) - "
      + ", ".join(f"{k} {v['runs']}" for k, v in b["kinds"].items()) + "\n")
    c = run["checks"]
    w(f"content checks: {c['run']} ({c['failed']} failed)\n")
    srv = run["server"]
    w(f"server: exit {srv.get('exit_code')}, {srv.get('warn_lines', 0)} WARN lines in its log\n")
    v = run["verdict"]
    w(f"\n{'PASS' if v['pass'] else 'FAIL'}" + ("" if v["pass"] else f": {v['failures'][0]}") + "\n")
    for f in v["failures"][1:]:
        w(f"  also: {f}\n")


def write_csvs(run, d):
    keys = ["t", "phase", "rss_kb", "fds", "threads", "conns_open", "conns_idle", "quic_open", "upstream_active",
            "upstream_idle", "cache_objects", "cache_bytes", "cache_hits", "cache_stored", "responses",
            "responses_5xx", "parse_errors", "upstream_failures", "cpu_s", "server_p99_ms", "load1", "metrics_error"]
    with open(d / "samples.csv", "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        wr.writeheader()
        for s in run["samples"]:
            wr.writerow(s)
    keys = ["lane", "start", "end", "seconds", "responses", "errors", "status", "p50_ms", "p99_ms", "p999_ms",
            "max_ms", "failure"]
    with open(d / "segments.csv", "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        wr.writeheader()
        for s in run["segments"]:
            row = dict(s)
            row["errors"] = sum((s.get("errors") or {}).values())
            row["status"] = " ".join(f"{k}:{v}" for k, v in sorted((s.get("status") or {}).items()))
            wr.writerow(row)


def chart(run, path):
    """An SVG of RSS, descriptors and connections, and each lane's p99 per segment, over time,
    with the reloads, restarts and bursts marked."""
    W, left, right, ph, gap, top = 960, 70, 150, 170, 40, 30
    samples = [s for s in run["samples"] if s.get("rss_kb")]
    tmax = max([run["config"]["duration"]] + [s["t"] for s in samples]) or 1
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
              "#bcbd22", "#17becf", "#393b79", "#637939"]
    panels = [
        ("RSS (MiB)", False, [("RSS", [(s["t"], s["rss_kb"] / 1024) for s in samples])]),
        ("descriptors and connections", False, [
            ("descriptors", [(s["t"], s["fds"]) for s in samples]),
            ("client conns", [(s["t"], s.get("conns_open")) for s in samples]),
            ("upstream conns", [(s["t"], (s.get("upstream_active") or 0) + (s.get("upstream_idle") or 0))
                                for s in samples])]),
        ("p99 per segment (ms, log scale)", True,
         [(lane, [((x["start"] + x["end"]) / 2, x["p99_ms"])
                  for x in run["segments"] if x["lane"] == lane and x.get("p99_ms")])
          for lane in run["lanes"]]),
    ]
    H = top + len(panels) * (ph + gap) + 20
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{left}" y="18" font-size="13">lowlat soak, {fmt_secs(run["config"]["duration"])}: '
         f'{"PASS" if run["verdict"]["pass"] else "FAIL"}</text>']
    pw = W - left - right
    for i, (title, log, series) in enumerate(panels):
        y0 = top + i * (ph + gap)
        vals = [v for _, pts in series for _, v in pts if v is not None and (v > 0 or not log)]
        if log:
            lo = math.floor(math.log10(min(vals))) if vals else 0
            hi = max(lo + 1, math.ceil(math.log10(max(vals)))) if vals else 1

            def scale(v, lo=lo, hi=hi):
                return (math.log10(v) - lo) / (hi - lo)
            ticks = [(float(f"{10.0 ** e:g}"), (e - lo) / (hi - lo)) for e in range(lo, hi + 1)]
        else:
            vmax = max(vals) * 1.1 if vals and max(vals) > 0 else 1

            def scale(v, vmax=vmax):
                return v / vmax
            ticks = [(vmax * frac, frac) for frac in (0, 0.5, 1)]
        o.append(f'<rect x="{left}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
        o.append(f'<text x="{left}" y="{y0 - 4}">{title}</text>')
        for value, frac in ticks:
            y = y0 + ph - frac * ph
            o.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{value:g}</text>')
        for e in run["events"]:
            x = left + e["t"] / tmax * pw
            col = {"reload": "#bbb", "restart": "#f90", "burst": "#d00"}.get(e["kind"])
            if col:
                o.append(f'<line x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y0 + 6}" stroke="{col}"/>')
        for j, (name, pts) in enumerate(series):
            pts = [(t, v) for t, v in pts if v is not None and (v > 0 or not log)]
            if not pts:
                continue
            col = colors[j % len(colors)]
            d = " ".join(f"{left + t / tmax * pw:.1f},{y0 + ph - scale(v) * ph:.1f}" for t, v in pts)
            o.append(f'<polyline points="{d}" fill="none" stroke="{col}" stroke-width="1.3"/>')
            o.append(f'<text x="{left + pw + 6}" y="{y0 + 12 + 13 * j}" fill="{col}">{name}</text>')
        if i == len(panels) - 1:
            for frac in (0, 0.25, 0.5, 0.75, 1):
                o.append(f'<text x="{left + frac * pw:.1f}" y="{y0 + ph + 14}" text-anchor="middle">'
                         f'{fmt_secs(frac * tmax)}</text>')
    o.append(f'<text x="{left}" y="{H - 4}" fill="#666">ticks: reload (grey), upstream restart (orange), '
             f'burst of bad clients (red)</text>')
    o.append("</svg>")
    Path(path).write_text("\n".join(o) + "\n")


def resources(run):
    """Per resource: idle before the load, level after warm-up, at the end, peak, drained."""
    out = {}
    samples = [s for s in run["samples"] if s.get("rss_kb") and s.get("phase") == "load"]
    levels = resource_levels(run["samples"], run["config"]["warmup"], run["config"]["interval"])
    for key in ("rss_kb", "fds", "threads", "conns_open", "quic_open", "upstream_active", "upstream_idle",
                "cache_objects"):
        vals = [s.get(key) for s in samples if s.get(key) is not None]
        out[key] = {"idle": (run.get("idle_start") or {}).get(key),
                    "base": levels[0].get(key) if levels and key in levels[0] else None,
                    "end": levels[1].get(key) if levels and key in levels[1] else (vals[-1] if vals else None),
                    "peak": max(vals) if vals else None,
                    "drained": (run.get("drain") or {}).get(key)}
        if levels is None or key not in levels[0]:
            base = [s.get(key) for s in samples if run["config"]["warmup"] <= s["t"] <
                    run["config"]["warmup"] + 3.5 * run["config"]["interval"]]
            out[key]["base"] = median(base)
            out[key]["end"] = median(vals[-3:])
    return out


# ---------------------------------------------------------------------------------------------
# The run


def find_oha():
    for c in (shutil.which("oha"), os.path.expanduser("~/.cache/lowlat-oha/bin/oha")):
        if c and os.access(c, os.X_OK):
            return c
    return None


def find_ws_python(explicit):
    if explicit:
        return explicit
    venv = os.environ.get("LOWLAT_TEST_VENV") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "lowlat-test-venv")
    py = os.path.join(venv, "bin", "python")
    return py if os.access(py, os.X_OK) else None


def access_log_5xx(path):
    """The 5xx answers of a JSON access log, counted by status, method and target."""
    out = collections.Counter()
    try:
        with open(path) as f:
            for line in f:
                if '"status":5' not in line.replace(" ", ""):
                    continue
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                out[f"{r.get('status')} {r.get('method')} {r.get('target')} ({r.get('protocol')})"] += 1
    except OSError:
        return {}
    return dict(out.most_common(50))


def log_findings(path):
    panics, errors, warns = [], [], 0
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return panics, errors, warns
    for line in text.splitlines():
        if "panicked" in line or "RUST_BACKTRACE" in line:
            panics.append(line.strip()[:300])
        elif " ERROR " in line or '"level":"ERROR"' in line:
            errors.append(line.strip()[:300])
        elif " WARN " in line:
            warns += 1
    return panics, errors, warns


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("duration", type=parse_duration, help="time under load: 90s, 2m, 1h")
    ap.add_argument("--binary", default=str(ROOT / "target/release/lowlat"), help="the lowlat binary")
    ap.add_argument("--out", type=Path, help="directory for the results (default: a new one under /tmp)")
    ap.add_argument("--interval", type=parse_duration, default=10.0, help="between samples (10s)")
    ap.add_argument("--segment", type=parse_duration, default=60.0,
                    help="length of each loader run: latency percentiles are per segment (60s)")
    ap.add_argument("--warmup", type=parse_duration,
                    help="levels are compared from the end of this (default: a quarter of DURATION, 2m at most)")
    ap.add_argument("--calm", type=parse_duration, default=20.0,
                    help="chaos keeps this far from the windows where levels are measured (20s)")
    ap.add_argument("--reload-every", type=parse_duration, default=60.0, help="SIGHUP reloads (60s; 0: none)")
    ap.add_argument("--restart-every", type=parse_duration, default=120.0, help="upstream restarts (120s; 0: none)")
    ap.add_argument("--burst-every", type=parse_duration, default=180.0, help="bursts of bad clients (180s; 0: none)")
    ap.add_argument("--trickle", type=float, default=1.0, help="bad clients per second in between (1)")
    ap.add_argument("--rate-scale", type=float, default=1.0, help="multiply every lane's rate (1 = 3,000 req/s)")
    ap.add_argument("--workers", type=int, default=2, help="the server's workers (2)")
    ap.add_argument("--no-pin", dest="pin", action="store_false",
                    help="do not pin the server to one CPU and the rest to another")
    ap.add_argument("--ws-python", help="Python with `websockets` for the WebSocket echo upstream")
    ap.add_argument("--require-all", action="store_true",
                    help="fail when a client (h2load, oha) or the WebSocket upstream is missing, instead of "
                         "leaving its lane out")
    ap.add_argument("--access-log", action="store_true",
                    help="write the server's access log (JSON) and list its 5xx answers by target in the report "
                         "(a gigabyte an hour at the full rate)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rss-growth", type=float, default=0.10)
    ap.add_argument("--fd-growth", type=float, default=0.10)
    ap.add_argument("--p99-ratio", type=float, default=2.0)
    ap.add_argument("--p99-floor-ms", type=float, default=5.0,
                    help="p99 drift below this many ms is not counted (a shared machine's noise)")
    args = ap.parse_args(argv)
    if args.warmup is None:
        args.warmup = min(120.0, args.duration / 4)
    limits = Limits(rss_growth=args.rss_growth, fd_growth=args.fd_growth, p99_ratio=args.p99_ratio,
                    p99_floor_ms=args.p99_floor_ms)
    if not os.access(args.binary, os.X_OK):
        print(f"soak: FAIL: no lowlat binary at {args.binary} (cargo build --release -p lowlat)")
        return 2
    d = args.out or Path(tempfile.mkdtemp(prefix="lowlat-soak-"))
    d = d.resolve()
    d.mkdir(parents=True, exist_ok=True)
    ctx = Ctx(args, d)
    ctx.ws_python = find_ws_python(args.ws_python)
    ctx.oha = find_oha()
    missing = [n for n, ok in (("h2load", shutil.which("h2load")), ("oha", ctx.oha), ("curl", shutil.which("curl")),
                               ("the WebSocket echo's Python (--ws-python)", ctx.ws_python)) if not ok]
    if missing and (args.require_all or "curl" in missing):
        print(f"soak: FAIL: missing {', '.join(missing)} (scripts/test-deps.sh installs them)")
        return 2
    for m in missing:
        print(f"soak: {m} missing: its lane is left out", file=sys.stderr)

    make_certs(d)
    ctx.files = make_files(d, args.seed)
    ctx.ports = {"clear": free_port(), "tls": free_port(also_udp=True), "metrics": free_port()}
    for name in ("up1", "up2", "up3", "up4", "ws"):
        ctx.ports[name] = free_port()
    ctx.server_ports = {ctx.ports[k] for k in ("clear", "tls", "metrics")}
    ctx.upstream_ports = {ctx.ports[k] for k in ("up1", "up2", "up3", "up4", "ws")}
    version = subprocess.run([args.binary, "--version"], capture_output=True, text=True).stdout.strip()

    procs = []
    bad = None
    threads = []
    run = {"config": {"duration": args.duration, "interval": args.interval, "segment": args.segment,
                      "warmup": args.warmup, "calm": args.calm, "reload_every": args.reload_every,
                      "restart_every": args.restart_every, "burst_every": args.burst_every,
                      "trickle_per_s": args.trickle, "rate_scale": args.rate_scale, "workers": args.workers,
                      "binary": args.binary, "pinned": bool(ctx.pin_server), "limits": limits.as_dict(),
                      "command": " ".join(sys.argv if argv is None else ["soak.py"] + list(argv))},
           "server": {"version": version}}
    try:
        upstreams = []
        for name in ("up1", "up2", "up3", "up4"):
            argv_up = ctx.pin_load + [args.binary, "serve", "-l", f"127.0.0.1:{ctx.ports[name]}", "--h2c",
                                      "--root", str(d / "up"), "-w", "1", "--log-level", "warn"]
            if name in ("up3", "up4"):
                argv_up += ["--add-header", "Cache-Control: max-age=2"]
            up = Proc(name, argv_up, d / f"{name}.log").start()
            up.port = ctx.ports[name]
            upstreams.append(up)
            procs.append(up)
        if ctx.ws_python:
            ws = Proc("ws", ctx.pin_load + [ctx.ws_python, str(WS_ECHO), "--port", str(ctx.ports["ws"])],
                      d / "ws.log", stdin=subprocess.PIPE).start()
            procs.append(ws)
        for up in upstreams:
            if not wait_port(up.port):
                print(f"soak: FAIL: upstream {up.name} did not start (see {up.log})")
                return 1
        if ctx.ws_python and not wait_port(ctx.ports["ws"]):
            print(f"soak: FAIL: the WebSocket echo did not start (see {d / 'ws.log'})")
            return 1
        (d / "lowlat.toml").write_text(server_config(ctx, ctx.gen))
        ctx.server = Proc("server", ctx.pin_server + [args.binary, "serve", "--config", str(d / "lowlat.toml")],
                          d / "server.log").start()
        procs.append(ctx.server)
        if not (wait_port(ctx.ports["clear"]) and wait_port(ctx.ports["metrics"])):
            print(f"soak: FAIL: lowlat serve did not start: {Path(d / 'server.log').read_text()[-500:]}")
            return 1

        the_lanes = lanes(ctx)
        run["lanes"] = {ln.name: {"what": ln.what, "tool": ln.tool, "rate": ln.rate} for ln in the_lanes}
        ctx.t0 = time.monotonic()
        idle, _ = take_sample(ctx, None, phase="idle")
        run["idle_start"] = idle
        bad = BadClients(ctx)
        bad.start()
        ctx.server_died_at = None
        dur = args.duration
        print(f"soak: {fmt_secs(dur)} of load, {sum(ln.rate for ln in the_lanes)} req/s over {len(the_lanes)} "
              f"lanes; results in {d}", file=sys.stderr)
        for ln in the_lanes:
            threads.append(threading.Thread(target=run_lane, args=(ctx, ln, dur), name=ln.name, daemon=True))
        threads.append(threading.Thread(target=run_checks, args=(ctx, dur), name="checks", daemon=True))
        threads.append(threading.Thread(target=run_chaos, args=(ctx, bad, [upstreams[i] for i in (0, 2, 1, 3)], dur),
                                        name="chaos", daemon=True))
        sampler = threading.Thread(target=run_sampler, args=(ctx, dur), name="sampler", daemon=True)
        for t in threads:
            t.start()
        sampler.start()
        while any(t.is_alive() for t in threads) and not ctx.stop.is_set():
            time.sleep(0.5)
        # The last sample under load was taken by the sampler before `dur`; now the load is over.
        ctx.stop.set()
        for t in threads:
            t.join(90)
        sampler.join(10)
        with ctx.lock:
            for p in ctx.children:
                p.kill()
        bad.wait_idle(30)

        # Once the load stops, what it held must be given back.
        drain = None
        if ctx.server.alive():
            t_end = ctx.now()
            prev = None
            while True:
                s, prev = take_sample(ctx, prev, phase="drain")
                busy = s.get("conns_open") or s.get("quic_open") or s.get("upstream_active")
                if (not busy and not s.get("metrics_error")) or ctx.now() - t_end > 45:
                    break
                time.sleep(1)
            time.sleep(1.5)  # metrics are at most a second behind: one more look, settled
            s, _ = take_sample(ctx, prev, phase="drain")
            s["waited"] = round(ctx.now() - t_end, 1)
            # What the server says it still holds, kept whole for whoever reads a failure.
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ctx.ports['metrics']}/metrics",
                                            timeout=5) as r:
                    (ctx.dir / "drain-metrics.txt").write_bytes(r.read())
            except Exception:
                pass
            drain = s
            ctx.samples.append(s)
        run["drain"] = drain
        run["server"]["died_at"] = getattr(ctx, "server_died_at", None)
        if run["server"]["died_at"] is None and not ctx.server.alive():
            run["server"]["died_at"] = ctx.now()
        run["server"]["exit_code"] = ctx.server.stop(timeout=30)
    except KeyboardInterrupt:
        ctx.stop.set()
        print("soak: interrupted", file=sys.stderr)
        raise
    finally:
        ctx.stop.set()
        with ctx.lock:
            for p in ctx.children:
                p.kill()
        if bad is not None:
            bad.close()
        for p in procs:
            p.stop(timeout=15)

    if args.access_log:
        run["access_5xx"] = access_log_5xx(d / "access.log")
    panics, errors, warns = log_findings(d / "server.log")
    run["server"].update({"panics": panics, "error_lines": errors, "warn_lines": warns})
    run["samples"] = ctx.samples
    run["segments"] = sorted(ctx.segments, key=lambda s: (s["lane"], s["start"]))
    run["events"] = sorted(ctx.events, key=lambda e: e["t"])
    run["checks"] = ctx.checks
    run["bad_clients"] = bad.summary()
    load_samples = [s for s in ctx.samples if s.get("phase") == "load" and "cache_stored" in s]
    if load_samples:
        run["cache"] = {"hits": load_samples[-1]["cache_hits"], "stored": load_samples[-1]["cache_stored"],
                        "objects_max": max(s["cache_objects"] for s in load_samples)}
    failures = judge(run, limits)
    run["verdict"] = {"pass": not failures, "failures": failures}
    run["lane_rows"] = lane_rows(run)
    run["resources"] = resources(run)
    (d / "soak.json").write_text(json.dumps(run, indent=1, default=str) + "\n")
    write_csvs(run, d)
    chart(run, d / "chart.svg")
    print_summary(run)
    print(f"\nresults: {d}/soak.json, samples.csv, segments.csv, chart.svg, server.log")
    if failures:
        print(f"soak: FAIL: {failures[0]}")
        return 1
    print("soak: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
