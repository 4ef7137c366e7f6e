#!/usr/bin/env python3
"""What batched UDP (GSO on send, GRO on receive) saves lowlat's QUIC side: the server's CPU
time per MB of a large HTTP/3 download, and its send system calls, with batching and with
--h3-no-batching, interleaved round by round (so a neighbour's burst hits both alike).

Each server runs with one worker pinned to CPU 0; the client (aioquic, from the test
environment scripts/test-deps.sh makes) runs on CPU 1 with an 8 MiB receive buffer so that
its own slowness shows as fewer packets sent rather than as losses.

  cargo build --release
  taskset -c 1 ~/.cache/lowlat-test-venv/bin/python scripts/quic-bulk.py \\
      --lowlat target/release/lowlat --mb 20 --rounds 3

Prints, per mode: server CPU µs per MB (median over rounds), MB/s seen by the client, sends
(sendmsg calls) per MB and the datagrams lost; then the ratio no-batching ÷ batching.
"""
import argparse
import asyncio
import os
import re
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration


class Client(QuicConnectionProtocol):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.h3 = H3Connection(self._quic)
        self.got = 0
        self.done = asyncio.get_event_loop().create_future()

    def quic_event_received(self, event):
        for e in self.h3.handle_event(event):
            if isinstance(e, DataReceived):
                self.got += len(e.data)
            if isinstance(e, (DataReceived, HeadersReceived)) and e.stream_ended:
                if not self.done.done():
                    self.done.set_result(self.got)


async def download(port, path):
    cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, max_stream_data=16 << 20,
                            max_data=64 << 20)
    cfg.verify_mode = ssl.CERT_NONE
    async with connect("127.0.0.1", port, configuration=cfg, create_protocol=Client) as c:
        sock = c._transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        sid = c._quic.get_next_available_stream_id()
        c.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                (b":authority", b"localhost"), (b":path", path.encode())],
                          end_stream=True)
        c.transmit()
        return await asyncio.wait_for(c.done, 120)


def cpu_us(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return ticks * 1e6 / os.sysconf("SC_CLK_TCK")


def start(binary, www, cert, key, batching):
    args = ["taskset", "-c", "0", binary, "serve", "--workers", "1", "--tls-listen", "127.0.0.1:0",
            "--cert", cert, "--key", key, "--h3-listen", "127.0.0.1:0", "--root", www]
    if not batching:
        args.append("--h3-no-batching")
    p = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        m = re.search(r"h3://127\.0\.0\.1:(\d+)", line)
        if m:
            return p, int(m.group(1))
    raise SystemExit("no h3 address")


def stop(p):
    p.terminate()
    out = p.stderr.read()
    p.wait()
    sends = re.search(r"(\d+) sends", out)
    return int(sends.group(1)) if sends else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lowlat", required=True)
    ap.add_argument("--mb", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    www = os.path.join(tmp, "www")
    os.mkdir(www)
    with open(os.path.join(www, "big.bin"), "wb") as f:
        f.write(os.urandom(a.mb << 20))
    cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "1", "-subj", "/CN=localhost", "-addext",
                    "basicConstraints=critical,CA:FALSE"], check=True, capture_output=True)
    results = {True: [], False: []}
    for _ in range(a.rounds):
        for batching in (True, False):
            p, port = start(a.lowlat, www, cert, key, batching)
            time.sleep(0.3)
            before = cpu_us(p.pid)
            t0 = time.monotonic()
            got = asyncio.run(download(port, "/big.bin"))
            secs = time.monotonic() - t0
            used = cpu_us(p.pid) - before
            sends = stop(p)
            mb = got / (1 << 20)
            results[batching].append((used / mb, mb / secs, sends / mb))
    for batching in (True, False):
        r = results[batching]
        print(f"{'batching   ' if batching else 'no batching'}: "
              f"{statistics.median(x[0] for x in r):8.0f} server CPU µs/MB  "
              f"{statistics.median(x[1] for x in r):6.1f} MB/s  "
              f"{statistics.median(x[2] for x in r):6.1f} sends/MB  (rounds: "
              + ", ".join(f"{x[0]:.0f}" for x in r) + ")")
    on = statistics.median(x[0] for x in results[True])
    off = statistics.median(x[0] for x in results[False])
    print(f"server CPU per MB, no batching / batching: {off / on:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
