#!/usr/bin/env python3
"""Memory of lowlat serve's idle upstream connections (the reverse proxy's per-worker pools).

Two runs of the same proxy, one worker: N clients each make one proxied request at once (so N
upstream connections are opened) and then stay idle. With --proxy-keepalive N the N upstream
connections stay in the pool; with --proxy-keepalive 0 they are closed after their response.
The difference in the proxy's RSS, divided by N, is what keeping an upstream connection idle
costs beyond the record every upstream connection has while it is open (the clients' own idle
connections, and the slab slots of the N upstream connections both runs open at once, are in
both runs and cancel out); that record is `size_of::<UpConn>()`, printed by the server crate's
test `an_idle_connection_is_small`.

  scripts/proxy-idle-memory.py --lowlat target/release/lowlat --conns 4000
"""
import argparse
import os
import socket
import subprocess
import sys
import time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def start(cmd):
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        if "listening on" in line:
            return p
    sys.exit(f"{' '.join(cmd)} did not start")


def one_run(lowlat, n, keepalive, up_port, port):
    proxy = start([lowlat, "serve", "--workers", "1", "--listen", f"127.0.0.1:{port}",
                   "--max-conns", str(n + 100), "--proxy", f"/=http://127.0.0.1:{up_port}/",
                   "--proxy-keepalive", str(keepalive)])
    try:
        time.sleep(0.3)
        clients = []
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port))
            clients.append(s)
        for s in clients:
            s.sendall(b"GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n")
        for s in clients:
            got = b""
            while not got.endswith(b"Hello, World!"):
                chunk = s.recv(4096)
                if not chunk:
                    sys.exit("a proxied request failed")
                got += chunk
        time.sleep(0.5)
        rss = rss_kib(proxy.pid)
        upstream_conns = sum(1 for line in open("/proc/net/tcp").readlines()[1:]
                             if line.split()[2].endswith(f":{up_port:04X}") and line.split()[3] == "01")
        for s in clients:
            s.close()
        return rss, upstream_conns
    finally:
        proxy.terminate()
        proxy.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lowlat", default="target/release/lowlat")
    ap.add_argument("--conns", type=int, default=4000)
    args = ap.parse_args()
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    up_port, port = 18931, 18932
    upstream = start([args.lowlat, "serve", "--workers", "1", "--listen", f"127.0.0.1:{up_port}",
                      "--max-conns", str(args.conns + 100)])
    try:
        pooled, open_pooled = one_run(args.lowlat, args.conns, args.conns, up_port, port)
        closed, open_closed = one_run(args.lowlat, args.conns, 0, up_port, port)
    finally:
        upstream.terminate()
        upstream.wait()
    print(f"{args.conns} clients idle; proxy RSS with the upstream connections pooled: {pooled} KiB "
          f"({open_pooled} open to the upstream), with none kept: {closed} KiB ({open_closed} open)")
    print(f"per idle pooled upstream connection: {(pooled - closed) / max(1, open_pooled - open_closed):.3f} KiB")


if __name__ == "__main__":
    main()
