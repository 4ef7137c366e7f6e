#!/usr/bin/env python3
"""Server memory per idle keep-alive connection, side by side.

For each target: start it pinned to CPU 0 (one worker, the anchors' tuned configuration for the
peers), read the RSS of its process tree, open N connections that each send one request, read
the whole response and then stay silent, read the RSS again, and print (after - before) / N.

  scripts/idle-memory.py --lowlat "target/release/lowlat serve --workers 1 --listen 127.0.0.1:{port}" \
      --targets lowlat,nginx,h2o --conns 10000

With --tls, every connection is a TLS session (a full handshake each, no resumption) to the
target's TLS port (its port + 1000, as in compare.py); --lowlat may then use {tls_port}, {cert}
and {key}:

  scripts/idle-memory.py --tls --conns 1024 --lowlat "target/release/lowlat serve --workers 1 \
      --listen 127.0.0.1:{port} --tls-listen 127.0.0.1:{tls_port} --cert {cert} --key {key}"

Peers are started by the kit's compare.py (ANCHORS, default bench/kit in the
repository), which must have been set up with its setup.sh.
"""
import argparse
import importlib.util
import os
import resource
import socket
import ssl
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANCHORS = os.environ.get("ANCHORS", os.path.join(ROOT, "bench", "kit"))


def load_compare():
    spec = importlib.util.spec_from_file_location("compare", os.path.join(ANCHORS, "compare.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def rss_kb(pids):
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def read_response(s):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            raise RuntimeError("closed before a response")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            raise RuntimeError("closed inside a body")
        body += chunk


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lowlat", required=True, help="command starting lowlat; {port} and {www} filled in")
    ap.add_argument("--targets", default="lowlat,nginx,h2o")
    ap.add_argument("--conns", type=int, default=10000)
    ap.add_argument("--path", default="/100.html")
    ap.add_argument("--tls", action="store_true", help="TLS connections to the TLS port")
    args = ap.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.conns + 1000 if hard == resource.RLIM_INFINITY else min(args.conns + 1000, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    cmp = load_compare()
    run_dir = tempfile.mkdtemp(prefix="lowlat-idle-")
    www = os.path.join(run_dir, "www")
    os.makedirs(www)
    cmp.make_cert(run_dir)
    tls_ctx = None
    if args.tls:
        # The peers' and lowlat's certificate is self-signed: encrypt, do not authenticate.
        tls_ctx = ssl.create_default_context()
        tls_ctx.check_hostname = False
        tls_ctx.verify_mode = ssl.CERT_NONE
    with open(os.path.join(www, "100.html"), "wb") as f:
        f.write(b"X" * 99 + b"\n")
    print("| target | idle conns | RSS before MiB | RSS after MiB | KiB per idle conn |")
    print("|---|---|---|---|---|")
    for name in args.targets.split(","):
        srv = cmp.make_server(name, argparse.Namespace(lowlat=args.lowlat), run_dir, www)
        srv.start()
        try:
            time.sleep(0.5)
            before = rss_kb(srv.rss_pids())
            socks = []
            request = f"GET {args.path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()
            port = srv.port + cmp.TLS_PORT_OFFSET if args.tls else srv.port
            for _ in range(args.conns):
                s = socket.create_connection(("127.0.0.1", port))
                if tls_ctx:
                    s = tls_ctx.wrap_socket(s, server_hostname="localhost")
                s.sendall(request)
                read_response(s)
                socks.append(s)
            time.sleep(1.0)
            after = rss_kb(srv.rss_pids())
            per = (after - before) / args.conns
            print(f"| {name} | {args.conns} | {before / 1024:.1f} | {after / 1024:.1f} | {per:.2f} |",
                  flush=True)
            for s in socks:
                s.close()
        finally:
            srv.stop()


if __name__ == "__main__":
    sys.exit(main())
