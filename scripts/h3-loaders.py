#!/usr/bin/env python3
"""Client cost of HTTP/3 load generators, side by side: `lowlat load --h3` and `oha
--http-version 3` against one server (caddy serving HTTP/3 by default, one Go thread pinned to
CPU 0; or with --server lowlat, `lowlat serve --h3-listen` with one worker), each loader pinned
to CPU 1, in alternating rounds so that a neighbour's burst on a
shared machine hits both alike.

The figure is the loader's own CPU time (user + system, from wait4's rusage of its process)
per response: what the load generator spends to produce and read one response. Also req/s.
Each round runs every loader once for the same duration; the table gives medians over
rounds and the per-round ratio oha ÷ lowlat (above 1: lowlat cheaper).

  scripts/h3-loaders.py --lowlat target/release/lowlat --oha oha -d 5 -c 16 -m 10 --rounds 3

The server's certificate is made here (openssl) for localhost; both loaders trust it
(--cacert; oha's --cacert). Loopback only.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def make_cert(d):
    def run(cmd):
        subprocess.run(cmd, shell=True, check=True, capture_output=True, cwd=d)

    run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
        "-keyout ca.key -out ca.crt -days 2 -subj /CN=h3-loaders-ca")
    run("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
        "-keyout leaf.key -out leaf.csr -subj /CN=localhost")
    with open(os.path.join(d, "ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n")
    run("openssl x509 -req -in leaf.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
        "-out leaf.crt -days 2 -extfile ext")


def start_caddy(d, port):
    with open(os.path.join(d, "Caddyfile"), "w") as f:
        f.write(
            "{\n\tadmin off\n\tauto_https off\n\tservers {\n\t\tprotocols h1 h2 h3\n\t}\n}\n"
            f"https://localhost:{port} {{\n\tbind 127.0.0.1\n"
            f"\ttls {d}/leaf.crt {d}/leaf.key\n"
            '\trespond /plaintext "Hello, World!" 200\n}\n'
        )
    env = dict(os.environ, HOME=d, XDG_DATA_HOME=d, XDG_CONFIG_HOME=d, GOMAXPROCS="1")
    p = subprocess.Popen(
        ["taskset", "-c", "0", "caddy", "run", "--adapter", "caddyfile",
         "--config", os.path.join(d, "Caddyfile")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2)
    return p


def start_lowlat(d, port, lowlat):
    """`lowlat serve` with one worker, HTTP/3 on the TLS port (the built-in /plaintext)."""
    p = subprocess.Popen(
        ["taskset", "-c", "0", lowlat, "serve", "--workers", "1",
         "--tls-listen", f"127.0.0.1:{port}", "--cert", f"{d}/leaf.crt",
         "--key", f"{d}/leaf.key", "--h3-listen", "127.0.0.1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2)
    return p


def timed(cmd):
    """Runs cmd; returns (stdout, loader CPU seconds, wall seconds)."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    if status != 0:
        sys.exit(f"{' '.join(cmd)} failed ({status})")
    return out, ru.ru_utime + ru.ru_stime, time.monotonic() - t0


def lowlat_h2(args, url, ca):
    """The same server and requests over HTTP/2 (TLS, TCP), for scale."""
    return lowlat(args, url, ca, "--h2")


def lowlat_b(args, url, ca):
    """Another build of lowlat (--lowlat-b), to compare two builds side by side."""
    return lowlat(args, url, ca, binary=args.lowlat_b)


def lowlat(args, url, ca, proto="--h3", binary=None):
    out, cpu, wall = timed(
        [binary or args.lowlat, "load", proto, "--json", "-t", "1", "--pin", "1",
         "-c", str(args.c), "-m", str(args.m), "-d", f"{args.d}s",
         "--cacert", ca, url])
    r = json.loads(out)
    return r["responses"], cpu, r["requests_per_sec"]


def oha(args, url, ca):
    out, cpu, wall = timed(
        ["taskset", "-c", "1", args.oha, "--http-version", "3", "--no-tui",
         "--output-format", "json", "-c", str(args.c), "-p", str(args.m),
         "-z", f"{args.d}s", "--cacert", ca, url])
    r = json.loads(out)
    ok = sum(int(v) for v in r["statusCodeDistribution"].values())
    # oha's own requestsPerSec divides by its total time, which here includes about 30 s
    # after the last response (its QUIC connections wait out the idle timeout before it
    # exits): the load's rate is the responses over the duration asked. That wait costs
    # (almost) no CPU, so the CPU per response stands.
    return ok, cpu, ok / args.d


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lowlat", default="target/release/lowlat")
    ap.add_argument("--oha", default="oha", help="oha built with --features http3, or none")
    ap.add_argument("--lowlat-b", help="another lowlat build, measured as lowlat-b")
    ap.add_argument("--h2", action="store_true",
                    help="also lowlat load --h2 against the same server, for scale")
    ap.add_argument("-d", type=int, default=5, help="seconds of load per loader and round")
    ap.add_argument("-c", type=int, default=16)
    ap.add_argument("-m", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--port", type=int, default=4455)
    ap.add_argument("--server", choices=["caddy", "lowlat"], default="caddy",
                    help="caddy, or lowlat serve --h3-listen (one worker)")
    ap.add_argument("--server-lowlat", help="the lowlat binary to serve with (else --lowlat)")
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="h3-loaders-")
    make_cert(d)
    if args.server == "caddy":
        server = start_caddy(d, args.port)
    else:
        server = start_lowlat(d, args.port, args.server_lowlat or args.lowlat)
    url = f"https://localhost:{args.port}/plaintext"
    ca = os.path.join(d, "ca.crt")
    loaders = [("lowlat", lowlat)]
    if args.oha != "none":
        loaders.append(("oha", oha))
    if args.h2:
        loaders.append(("lowlat-h2", lowlat_h2))
    if args.lowlat_b:
        loaders.append(("lowlat-b", lowlat_b))
    rows = {name: [] for name, _ in loaders}
    try:
        for rnd in range(args.rounds):
            for name, fn in loaders:
                n, cpu, rps = fn(args, url, ca)
                us = cpu / n * 1e6
                rows[name].append((us, rps))
                print(f"round {rnd + 1} {name:7} {n} responses, {us:7.2f} us CPU/response, "
                      f"{rps:9.0f} req/s", flush=True)
    finally:
        server.terminate()
        server.wait()
    print(f"\n{args.server}: -c {args.c} -m {args.m} -d {args.d}s, {args.rounds} rounds (medians)")
    print(f"{'loader':10} {'us CPU/resp':>12} {'req/s':>10}")
    for name, r in rows.items():
        print(f"{name:10} {statistics.median(u for u, _ in r):12.2f} "
              f"{statistics.median(x for _, x in r):10.0f}")
    for name in rows:
        if name == "lowlat":
            continue
        ratios = [o[0] / l[0] for l, o in zip(rows["lowlat"], rows[name])]
        print(f"{name} / lowlat CPU per response: median {statistics.median(ratios):.2f} "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f})")


if __name__ == "__main__":
    main()
