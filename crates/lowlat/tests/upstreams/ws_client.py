"""A WebSocket client (the `websockets` library's asyncio client): what the proxy's tunnelling
tests drive through `lowlat serve --proxy`, against `ws_echo.py` behind it.

    python3 ws_client.py SCENARIO URL [--cafile PEM] [scenario flags]

Scenarios, each printing one JSON object on stdout (and exiting 0 unless it could not run):

    echo           a text message, a 1 MiB binary one (random bytes, no compression, so every
                   byte crosses), 100 small ones; then the client closes with 1000
                   → {"text_ok", "binary_ok", "small_ok", "close_code", "close_received"}
    server-close   waits for the server to close (the echo server's /close/CODE)
                   → {"close_code", "close_reason"}
    idle           sends one message, then nothing (no pings) until the connection ends
                   → {"seconds", "close_code"}
    keep-busy      a message every --every seconds for --for seconds → {"echoed", "open"}
    many           --count connections at once, each echoing --messages messages
                   → {"ok": connections whose every echo came back, "failed": [errors]}
"""

import argparse
import asyncio
import json
import os
import ssl
import time

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed


def options(args):
    opts = {"max_size": 64 * 1024 * 1024, "ping_interval": None, "compression": None, "open_timeout": 30}
    if args.cafile:
        opts["ssl"] = ssl.create_default_context(cafile=args.cafile)
    return opts


async def echo(args):
    async with connect(args.url, **options(args)) as ws:
        await ws.send("hello, tunnel ✓")
        text_ok = await ws.recv() == "hello, tunnel ✓"
        big = os.urandom(1024 * 1024)
        await ws.send(big)
        binary_ok = await ws.recv() == big
        small_ok = True
        for i in range(100):
            await ws.send(f"message {i}")
            small_ok &= await ws.recv() == f"message {i}"
    # Leaving the block sent Close(1000) and waited for the server's Close and the TCP close.
    return {
        "text_ok": text_ok,
        "binary_ok": binary_ok,
        "small_ok": small_ok,
        "close_code": ws.close_code,
        "close_received": ws.protocol.close_rcvd is not None,
    }


async def server_close(args):
    async with connect(args.url, **options(args)) as ws:
        try:
            await ws.recv()
        except ConnectionClosed:
            pass
        await ws.wait_closed()
    return {"close_code": ws.close_code, "close_reason": ws.close_reason}


async def idle(args):
    async with connect(args.url, **options(args)) as ws:
        await ws.send("one")
        await ws.recv()
        start = time.monotonic()
        await ws.wait_closed()
        return {"seconds": time.monotonic() - start, "close_code": ws.close_code}


async def keep_busy(args):
    echoed = 0
    async with connect(args.url, **options(args)) as ws:
        end = time.monotonic() + args.for_seconds
        while time.monotonic() < end:
            await ws.send("tick")
            if await ws.recv() == "tick":
                echoed += 1
            await asyncio.sleep(args.every)
        return {"echoed": echoed, "open": ws.close_code is None}


async def many(args):
    async def one(i):
        async with connect(args.url, **options(args)) as ws:
            for m in range(args.messages):
                payload = f"{i}:{m}:" + "x" * (m * 97 % 3000)
                await ws.send(payload)
                if await ws.recv() != payload:
                    raise AssertionError(f"connection {i}: message {m} came back wrong")

    results = await asyncio.gather(*(one(i) for i in range(args.count)), return_exceptions=True)
    failed = [repr(r) for r in results if isinstance(r, BaseException)]
    return {"ok": len(results) - len(failed), "failed": failed[:5]}


SCENARIOS = {"echo": echo, "server-close": server_close, "idle": idle, "keep-busy": keep_busy, "many": many}


def main():
    parser = argparse.ArgumentParser(description="WebSocket client scenarios (websockets)")
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("url")
    parser.add_argument("--cafile", help="CA certificate (PEM) for wss://")
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument("--every", type=float, default=0.3)
    parser.add_argument("--for", dest="for_seconds", type=float, default=2.0)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(SCENARIOS[args.scenario](args))), flush=True)


if __name__ == "__main__":
    main()
