#!/usr/bin/env python3
"""The server's instructions per request on each request path, counted by callgrind, and the gate
that keeps them from creeping up.

Instructions, not seconds: callgrind counts the instructions a process retires, the same for the
same binary and inputs whatever else the machine is doing, so a change of 1% shows where a timed
run on a shared machine drifts by 20%. Each figure is a slope: the server runs under callgrind
twice, loaded with N1 and then N2 requests by `lowlat load` (not under callgrind), and

    instructions per request = (total(N2) - total(N1)) / (N2 - N1)

so start-up, handshakes, certificate loading and shutdown cancel out. One worker; the loader's
connections and streams are fixed per scenario. The server runs on its embedded defaults (no
--root), as the quick start does: `/100.html` is the embedded 100-byte page, served by the same
file handler and cache as a document root's files.

  scripts/instructions.py                     # every scenario, the table
  scripts/instructions.py --check             # ... and fail when one rises > 2% above
                                              # bench/instructions.toml (CI does this)
  scripts/instructions.py --only plaintext,static --binary /tmp/lowlat-before
  scripts/instructions.py --update            # rewrite the accepted figures (commit says why)

Scenarios (the figures of bench/instructions.toml):
  plaintext       GET /plaintext, HTTP/1.1 in clear, 8 keep-alive connections
  static          GET /100.html (a 100-byte file), the same
  tls-plaintext   /plaintext over TLS 1.3, 8 connections
  tls-static      /100.html over TLS 1.3, 8 connections
  h2-static       /100.html over HTTP/2 (TLS), 16 connections x 10 streams
  h3-static       /100.html over HTTP/3, 16 connections x 10 streams
  proxy           GET /plaintext forwarded over HTTP/1.1 keep-alive to a second lowlat serve
                  (not counted), 8 connections
  cache-hit       GET /100.html through `--proxy /=... --cache`, every request after the first a
                  hit (the upstream marks it max-age=3600), 8 connections
  cache-miss      GET /100.html?n=<unique> through `--proxy /=... --cache` (bench/kit/unique.lua):
                  every request a miss, looked up, fetched, relayed and stored, 8 connections
  php             GET /hello.php through `--root DIR --php unix:SOCK` to a php-fpm of the script's
                  own (one static child on a Unix socket; not counted), 8 connections
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ACCEPTED = os.path.join(ROOT, "bench", "instructions.toml")
# A figure may rise this much above its accepted value before --check fails: callgrind's count
# is deterministic, but the server's batching is not quite (how many requests one read or one
# epoll wake finds varies with timing), which moves a slope by a few tenths of a percent.
TOLERANCE = 0.02


class Scenario:
    def __init__(self, name, server, load, path, tls=False, h3=False, upstream=None, php=False,
                 n=(20000, 60000)):
        self.name, self.server, self.load, self.path = name, server, load, path
        # upstream: the arguments of a second `lowlat serve` (not counted) that {upstream} names.
        self.tls, self.h3, self.upstream, self.n = tls, h3, upstream, n
        # php: a php-fpm (not counted) serves {root}'s scripts on the Unix socket {fpm}.
        self.php = php


H1 = ["-c", "8", "-t", "1"]
STREAMS = ["-c", "16", "-m", "10", "-t", "1"]
SCENARIOS = [
    Scenario("plaintext", [], H1, "/plaintext"),
    Scenario("static", [], H1, "/100.html"),
    Scenario("tls-plaintext", [], H1 + ["-k"], "/plaintext", tls=True),
    Scenario("tls-static", [], H1 + ["-k"], "/100.html", tls=True),
    Scenario("h2-static", [], ["--h2", "-k"] + STREAMS, "/100.html", tls=True),
    Scenario("h3-static", [], ["--h3", "-k"] + STREAMS, "/100.html", tls=True, h3=True),
    Scenario("proxy", ["--proxy", "/plaintext=http://127.0.0.1:{upstream}"], H1, "/plaintext", upstream=[]),
    Scenario("cache-hit", ["--proxy", "/=http://127.0.0.1:{upstream}", "--cache"], H1, "/100.html",
             upstream=["--add-header", "Cache-Control: max-age=3600"]),
    Scenario("cache-miss", ["--proxy", "/=http://127.0.0.1:{upstream}", "--cache"],
             H1 + ["-s", os.path.join(ROOT, "bench", "kit", "unique.lua")], "/100.html",
             upstream=["--add-header", "Cache-Control: max-age=3600"]),
    # php-fpm answers a few thousand requests a second: fewer requests, the same slope.
    Scenario("php", ["--root", "{root}", "--php", "unix:{fpm}"], H1, "/hello.php", php=True,
             n=(5000, 15000)),
]


def fpm_binary():
    """Debian's php-fpm (`php-fpm8.2`, or whichever version is installed)."""
    found = sorted(n for n in os.listdir("/usr/sbin") if n.startswith("php-fpm")) if os.path.isdir("/usr/sbin") else []
    if not found:
        sys.exit("instructions: no php-fpm in /usr/sbin (scripts/test-deps.sh installs it)")
    return os.path.join("/usr/sbin", found[-1])


def start_fpm(dir_):
    """A php-fpm of its own with one static child on a Unix socket, and a document root with
    the one script the scenario asks for. Returns (process, root, socket)."""
    root = os.path.join(dir_, "php-root")
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "hello.php"), "w") as f:
        f.write('<?php header("Content-Type: text/plain"); echo "Hello, World!";\n')
    sock = os.path.join(dir_, "fpm.sock")
    conf = os.path.join(dir_, "fpm.conf")
    as_root = os.geteuid() == 0
    with open(conf, "w") as f:
        f.write(f"[global]\nerror_log = {dir_}/fpm.log\ndaemonize = no\n[bench]\n"
                + ("user = root\ngroup = root\n" if as_root else "")
                + f"listen = {sock}\npm = static\npm.max_children = 1\n"
                + "php_admin_value[display_errors] = Off\n")
    cmd = [fpm_binary(), "-y", conf, "-F"] + (["-R"] if as_root else [])
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while not os.path.exists(sock):
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            log = open(os.path.join(dir_, "fpm.log"), errors="replace").read() if os.path.exists(
                os.path.join(dir_, "fpm.log")) else ""
            sys.exit(f"instructions: php-fpm did not start:\n{log[-1500:]}")
        time.sleep(0.05)
    return proc, root, sock


def free_port(kind=socket.SOCK_STREAM):
    """A port free for TCP and UDP both (HTTP/3 shares the TLS listener's number)."""
    while True:
        with socket.socket(socket.AF_INET, kind) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                u.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue


def make_cert(dir_):
    cert, key = os.path.join(dir_, "cert.pem"), os.path.join(dir_, "key.pem")
    if not os.path.exists(cert):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost"], check=True, capture_output=True)
    return cert, key


def wait_listening(proc, log, what, timeout=120):
    """Waits for `lowlat serve`'s "listening on" line (valgrind starts slowly)."""
    deadline = time.time() + timeout
    while True:
        text = open(log, errors="replace").read()
        if "listening on" in text:
            return
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            sys.exit(f"instructions: {what} did not start:\n{text[-1500:]}")
        time.sleep(0.1)


def stop(proc):
    proc.send_signal(2)  # SIGINT: a graceful exit, so callgrind writes its totals
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_once(binary, loader, sc, n, dir_, files):
    """Total instructions of one server run answering `n` requests of scenario `sc`."""
    cert, key = files
    port = free_port()
    up_proc = None
    args = [a.replace("{upstream}", "") for a in sc.server]
    fpm = None
    if sc.php:
        fpm, root, sock = start_fpm(dir_)
        args = [a.replace("{root}", root).replace("{fpm}", sock) for a in sc.server]
    if sc.upstream is not None:
        up_port = free_port()
        up_log = os.path.join(dir_, "upstream.log")
        up_proc = subprocess.Popen([binary, "serve", "--workers", "1", "--listen", f"127.0.0.1:{up_port}"]
                                   + sc.upstream, stdout=subprocess.DEVNULL, stderr=open(up_log, "w"))
        wait_listening(up_proc, up_log, "the upstream")
        args = [a.replace("{upstream}", str(up_port)) for a in sc.server]
    if sc.tls:
        listen = ["--tls-listen", f"127.0.0.1:{port}", "--cert", cert, "--key", key]
        if sc.h3:
            listen += ["--h3-listen", f"127.0.0.1:{port}"]
        url = f"https://localhost:{port}{sc.path}"
    else:
        listen = ["--listen", f"127.0.0.1:{port}"]
        url = f"http://127.0.0.1:{port}{sc.path}"
    out = os.path.join(dir_, f"callgrind.{sc.name}.{n}")
    log = os.path.join(dir_, "server.log")
    srv = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", binary, "serve",
                            "--workers", "1"] + listen + args,
                           stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    try:
        wait_listening(srv, log, "lowlat serve under callgrind")
        load = subprocess.run([loader, "load", "-q", "--json", "-n", str(n), "-T", "60s"] + sc.load + [url],
                              capture_output=True, text=True, timeout=900)
    finally:
        stop(srv)
        if up_proc:
            stop(up_proc)
        if fpm:
            fpm.terminate()  # SIGTERM: php-fpm's children end with it
            fpm.wait(timeout=30)
    try:
        report = json.loads(load.stdout)
    except json.JSONDecodeError:
        sys.exit(f"instructions: {sc.name}: the load failed:\n{load.stdout[-800:]}{load.stderr[-800:]}")
    codes = dict(report.get("status_codes", {}))
    answered = report["responses"]
    # Over HTTP/2 and HTTP/3 a run of -n requests may end with a few streams still in flight on
    # connections the loader closes; the slope divides by what was answered, so those cancel.
    if answered < n * 0.99 or set(codes) != {"200"}:
        sys.exit(f"instructions: {sc.name}: expected {n} answers 200, got {answered} "
                 f"({codes}, errors {report.get('errors')})")
    return callgrind_total(out), answered


def callgrind_total(path):
    with open(path) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    sys.exit(f"instructions: no total in {path}")


def measure(binary, loader, sc, dir_, files):
    n1, n2 = sc.n
    t1, a1 = run_once(binary, loader, sc, n1, dir_, files)
    t2, a2 = run_once(binary, loader, sc, n2, dir_, files)
    return (t2 - t1) / (a2 - a1)


def read_accepted(path):
    with open(path, "rb") as f:
        return tomllib.load(f).get("accepted", {})


def write_accepted(path, figures):
    """Rewrites the figures of `path`, keeping its comments and any figure not measured."""
    lines = open(path).read().splitlines() if os.path.exists(path) else ["[accepted]"]
    done = set()
    for i, line in enumerate(lines):
        key = line.split("=", 1)[0].strip()
        if "=" in line and not line.lstrip().startswith("#") and key in figures:
            lines[i] = f"{key} = {round(figures[key])}"
            done.add(key)
    lines += [f"{k} = {round(v)}" for k, v in figures.items() if k not in done]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def verdicts(measured, accepted, tolerance=TOLERANCE):
    """(name, measured, accepted or None, ratio or None, ok) per measured figure."""
    out = []
    for name, value in measured.items():
        base = accepted.get(name)
        if base is None:
            out.append((name, value, None, None, True))
        else:
            ratio = value / base
            out.append((name, value, base, ratio, ratio <= 1 + tolerance))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "lowlat"),
                    help="the lowlat build to count (default: target/release/lowlat)")
    ap.add_argument("--loader", help="the lowlat binary whose `load` drives it (default: --binary)")
    ap.add_argument("--only", help="comma-separated scenarios (default: all)")
    ap.add_argument("--check", action="store_true",
                    help=f"exit 1 when a figure is more than {TOLERANCE * 100:.0f}%% above bench/instructions.toml")
    ap.add_argument("--update", action="store_true", help="write the figures into bench/instructions.toml")
    ap.add_argument("--accepted", default=ACCEPTED, help="the accepted figures (default: bench/instructions.toml)")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    for tool in ("valgrind", "openssl"):
        if not shutil.which(tool):
            sys.exit(f"instructions: {tool} is not installed (scripts/test-deps.sh installs it)")
    if not os.access(args.binary, os.X_OK):
        sys.exit(f"instructions: no lowlat binary at {args.binary} (cargo build --release)")
    names = [s.name for s in SCENARIOS]
    wanted = args.only.split(",") if args.only else names
    unknown = [w for w in wanted if w not in names]
    if unknown:
        sys.exit(f"instructions: unknown scenario {', '.join(unknown)}; scenarios: {', '.join(names)}")
    loader = args.loader or args.binary
    dir_ = tempfile.mkdtemp(prefix="lowlat-instructions-")
    files = make_cert(dir_)
    accepted = read_accepted(args.accepted) if os.path.exists(args.accepted) else {}
    measured = {}
    try:
        for sc in SCENARIOS:
            if sc.name in wanted:
                measured[sc.name] = measure(args.binary, loader, sc, dir_, files)
                base = accepted.get(sc.name)
                note = f"  (accepted {base}, {measured[sc.name] / base:.3f}x)" if base else ""
                print(f"{sc.name:14s} {measured[sc.name]:9.0f} instructions/request{note}", flush=True)
    finally:
        shutil.rmtree(dir_, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({k: round(v, 1) for k, v in measured.items()}, f, indent=2)
    if args.update:
        write_accepted(args.accepted, measured)
        print(f"wrote {os.path.relpath(args.accepted, ROOT)}")
    if args.check:
        bad = [v for v in verdicts(measured, accepted) if not v[4]]
        for name, value, base, ratio, _ in bad:
            print(f"instructions: {name} costs {value:.0f} instructions per request, {ratio:.3f}x the "
                  f"accepted {base} (more than {TOLERANCE:.0%} above); find what added them, or accept "
                  f"the new figure in bench/instructions.toml in a commit that says why", file=sys.stderr)
        if bad:
            sys.exit(1)


if __name__ == "__main__":
    main()
