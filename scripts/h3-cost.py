#!/usr/bin/env python3
"""Server CPU over HTTP/3 against HTTP/2 over TLS, for lowlat builds side by side, interleaved.

Each round starts every build in turn (`serve --workers 1`, pinned to CPU 0, TLS and QUIC on
one port, a document root made here) and loads it pinned to CPU 1; the server's CPU is its
process's utime + stime over the load (/proc/PID/stat). Two measures:

- small (default): the 100-byte /100.html, `LOADER load --h3 -c C -m 10` for HTTP/3 and
  `h2load -c C -m 10` for HTTP/2 (compare.py's h3-static and h2-static clients): server µs per
  request, and HTTP/3 ÷ HTTP/2 for each build.
- --download: a file of --mb MiB fetched -n times over one connection and stream
  (`LOADER load --h3 -t 1 -c 1 -m 1 -n N -T 60s`): MB/s as the loader reports it, and the server's and
  the loader's CPU per MB.

Interleaving puts a neighbour's burst on every build alike; per-round ratios to the first build
are printed. Uses ports PORT and PORT+1 (one server at a time).

  scripts/h3-cost.py --port 20140 --conns 16 --rounds 3 /tmp/lowlat-before target/release/lowlat
  scripts/h3-cost.py --port 20140 --download --rounds 3 /tmp/lowlat-before target/release/lowlat
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

CLK = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def setup(dir_, mb):
    www = os.path.join(dir_, "www")
    os.makedirs(www, exist_ok=True)
    with open(os.path.join(www, "100.html"), "wb") as f:
        f.write(b"X" * 99 + b"\n")
    big = os.path.join(www, "big.bin")
    if not os.path.exists(big) or os.path.getsize(big) != mb << 20:
        with open(big, "wb") as f:
            for _ in range(mb):
                f.write(os.urandom(1 << 20))
    cert, key = os.path.join(dir_, "cert.pem"), os.path.join(dir_, "key.pem")
    if not os.path.exists(cert):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost"], check=True, capture_output=True)
    return www, cert, key


def start(binary, port, www, cert, key, log):
    srv = subprocess.Popen(["taskset", "-c", "0", binary, "serve", "--workers", "1",
                            "--tls-listen", f"127.0.0.1:{port}", "--h3-listen", f"127.0.0.1:{port}",
                            "--cert", cert, "--key", key, "--root", www],
                           stdout=open(log, "w"), stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while "h3://" not in open(log).read():
        if srv.poll() is not None or time.time() > deadline:
            sys.exit(f"{binary} did not start: {open(log).read()[-500:]}")
        time.sleep(0.1)
    return srv


def measure(binary, loader, argv, port, www, cert, key, log):
    """Runs `argv` (the loader's command) against `binary`; returns (server CPU s, output)."""
    srv = start(binary, port, www, cert, key, log)
    try:
        t0 = cpu_ticks(srv.pid)
        out = subprocess.run(["taskset", "-c", "1"] + argv, capture_output=True, text=True)
        t1 = cpu_ticks(srv.pid)
    finally:
        srv.terminate()
        srv.wait()
    return (t1 - t0) / CLK, out.stdout + out.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("builds", nargs="+", help="lowlat binaries; the first is the reference")
    ap.add_argument("--port", type=int, default=20140)
    ap.add_argument("--loader", help="the lowlat binary whose `load` drives HTTP/3 (default: each build's own)")
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--duration", type=int, default=5, help="seconds per small-file run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--download", action="store_true", help="measure a large download instead")
    ap.add_argument("--mb", type=int, default=100, help="--download: the file's size in MiB")
    ap.add_argument("-n", type=int, default=10, help="--download: downloads per run")
    args = ap.parse_args()
    dir_ = os.path.join(tempfile.gettempdir(), f"lowlat-h3-cost-{os.getuid()}")
    www, cert, key = setup(dir_, args.mb)
    log = os.path.join(dir_, "server.log")
    results = {}
    for r in range(args.rounds):
        for proto in (["h3"] if args.download else ["h3", "h2"]):
            for b in args.builds:
                loader = args.loader or b
                if args.download:
                    # -T: on a busy machine a slow build may take longer than the default 2 s.
                    argv = [loader, "load", "--h3", "--insecure", "-t", "1", "-c", "1", "-m", "1",
                            "-n", str(args.n), "-T", "60s", f"https://localhost:{args.port}/big.bin"]
                elif proto == "h3":
                    argv = [loader, "load", "--h3", "--insecure", "-t", "1", "-c", str(args.conns),
                            "-m", "10", "-d", f"{args.duration}s", f"https://localhost:{args.port}/100.html"]
                else:
                    argv = ["h2load", "-t", "1", "-c", str(args.conns), "-m", "10", "-D",
                            str(args.duration), f"https://localhost:{args.port}/100.html"]
                cpu, out = measure(b, loader, argv, args.port, www, cert, key, log)
                name = os.path.basename(b)
                if args.download:
                    mbs = re.search(r"Transfer/sec:\s+([\d.]+)(MB|GB)", out)
                    lcpu = re.search(r"Loader CPU:\s+([\d.]+)s", out)
                    if not mbs or not lcpu or f"[200] {args.n} responses" not in out:
                        sys.exit(f"{name}: the download failed:\n{out[-800:]}")
                    rate = float(mbs.group(1)) * (1000 if mbs.group(2) == "GB" else 1)
                    mb = args.n * args.mb * 1.048576
                    rec = (rate, cpu * 1000 / mb, float(lcpu.group(1)) * 1000 / mb)
                    print(f"round {r} {name:20s} {rec[0]:7.0f} MB/s, server {rec[1]:.2f} ms CPU/MB, "
                          f"loader {rec[2]:.2f} ms CPU/MB", flush=True)
                else:
                    m = (re.search(r"(\d+) requests in", out) if proto == "h3"
                         else re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded", out))
                    if not m or int(m.group(1)) == 0:
                        sys.exit(f"{name} {proto}: no result:\n{out[-800:]}")
                    n = int(m.group(1))
                    rec = cpu * 1e6 / n
                    print(f"round {r} {name:20s} {proto} c={args.conns}: {rec:.2f} µs/req "
                          f"({n / args.duration:.0f} req/s)", flush=True)
                results.setdefault((b, proto), []).append(rec)
    print("medians:")
    ref = args.builds[0]
    for b in args.builds:
        name = os.path.basename(b)
        if args.download:
            rs = results[(b, "h3")]
            med = [statistics.median(x[i] for x in rs) for i in range(3)]
            ratio = [x[1] / y[1] for x, y in zip(rs, results[(ref, "h3")])]
            print(f"  {name:20s} {med[0]:.0f} MB/s, server {med[1]:.2f} ms CPU/MB, loader {med[2]:.2f} ms CPU/MB; "
                  f"server CPU/MB ÷ {os.path.basename(ref)} per round {[round(x, 2) for x in ratio]}")
        else:
            h3, h2 = statistics.median(results[(b, "h3")]), statistics.median(results[(b, "h2")])
            per = [x / y for x, y in zip(results[(b, "h3")], results[(b, "h2")])]
            ratio = [x / y for x, y in zip(results[(b, "h3")], results[(ref, "h3")])]
            print(f"  {name:20s} h3 {h3:.2f} µs/req, h2 {h2:.2f} µs/req, h3 ÷ h2 {h3 / h2:.2f} "
                  f"(per round {[round(x, 2) for x in per]}); h3 ÷ {os.path.basename(ref)}'s per round "
                  f"{[round(x, 2) for x in ratio]}")


if __name__ == "__main__":
    main()
