#!/usr/bin/env python3
"""A gibibyte each way through `lowlat serve --php` (docs/PERFORMANCE.md, "PHP through php-fpm"):
starts LOWLAT serve on 127.0.0.1:18091 with --root /tmp/gib/www (big.php and echo.php of
crates/lowlat/tests/php/) and --php unix:/tmp/gib/run/fpm.sock (php-fpm started with
bench/php/fpm.conf), downloads 1 GiB from big.php, uploads 1 GiB to echo.php, checks both
SHA-256 sums and prints lowlat's peak RSS after each.

Usage: bench/php/gib.py LOWLAT"""
import socket, hashlib, time, subprocess, sys, os
N = 1 << 30
lowlat = sys.argv[1]
def hwm(pid, field="VmHWM:"):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith(field): return int(l.split()[1])
srv = subprocess.Popen([lowlat, "serve", "-l", "127.0.0.1:18091", "-w", "1", "--root", "/tmp/gib/www",
    "--php", "unix:/tmp/gib/run/fpm.sock", "--proxy-max-body", "2g"], stderr=subprocess.PIPE)
while b"listening" not in srv.stderr.readline(): pass
print("lowlat rss at start KiB", hwm(srv.pid, "VmRSS:"))
block = bytes(i % 251 for i in range(251 * 4096))
# download
t = time.time()
s = socket.create_connection(("127.0.0.1", 18091))
s.sendall(f"GET /big.php?size={N} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
h = hashlib.sha256(); head = b""; raw = 0
buf = b""
while b"\r\n\r\n" not in buf: buf += s.recv(65536)
i = buf.index(b"\r\n\r\n"); buf = buf[i+4:]
# dechunk streaming
got = 0
def chunks():
    global buf
    while True:
        while b"\r\n" not in buf: buf += s.recv(1 << 20)
        i = buf.index(b"\r\n"); n = int(buf[:i], 16); buf = buf[i+2:]
        if n == 0: return
        while len(buf) < n + 2:
            d = s.recv(1 << 20)
            if not d: raise SystemExit("short")
            buf += d
        yield buf[:n]; buf = buf[n+2:]
for c in chunks():
    h.update(c); got += len(c)
dt = time.time() - t
exp = hashlib.sha256()
for _ in range(N // len(block)): exp.update(block)
exp.update(block[:N % len(block)])
print(f"download {got} bytes in {dt:.1f}s ({got/dt/1e6:.0f} MB/s), sha ok: {h.hexdigest()==exp.hexdigest()}, lowlat VmHWM KiB {hwm(srv.pid)}")
# upload
t = time.time()
s = socket.create_connection(("127.0.0.1", 18091))
s.sendall(f"POST /echo.php HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: {N}\r\nConnection: close\r\n\r\n".encode())
left = N
while left > 0:
    n = min(left, len(block)); s.sendall(block[:n]); left -= n
resp = b""
while True:
    d = s.recv(65536)
    if not d: break
    resp += d
dt = time.time() - t
print(f"upload {N} bytes in {dt:.1f}s ({N/dt/1e6:.0f} MB/s), answer: {resp[resp.index(b'{'):resp.index(b'}')+1].decode()}, sha ok: {exp.hexdigest().encode() in resp}, lowlat VmHWM KiB {hwm(srv.pid)}")
srv.terminate(); srv.wait()
