"""The QUIC client of the --h3-listen tests (aioquic), one scenario per subcommand.

Each prints one JSON object on stdout for the Rust test to check, and exits non-zero with a
message on stderr when the scenario itself could not run. Every wait is bounded.

  echo HOST PORT SIZE STREAMS   one connection, STREAMS bidirectional streams of SIZE bytes each
                                echoed back (ALPN lowlat-echo)
  many HOST PORT N              N connections at once, one echo stream each
  retry HOST PORT               one connection: was it asked to Retry first?
  idle HOST PORT SECONDS        one connection left idle: when was it closed, and how?
  rebind HOST PORT N            N connections through a relay whose source port changes after
                                the handshake (a NAT rebinding): do they all still echo?
  lossy HOST PORT PERCENT PATH  an HTTP/3 GET of PATH through a relay that drops PERCENT % of
                                the datagrams each way (seeded: the same drops every run)
                                → {"status", "length", "sha256", "dropped", "relayed"}
  narrow HOST PORT SIZE PATH    an HTTP/3 GET of PATH through a relay that drops every datagram
                                longer than SIZE bytes (a path with a small MTU)
                                → {"status", "length", "sha256", "dropped", "relayed"}
  zerortt HOST PORT METHOD...    a connection for a session ticket, then a second one that sends
                                one request per METHOD to /plaintext as 0-RTT data
                                → {"early_data": ticket allows it, "resumed", "responses"}
  raw HOST PORT STREAM...       HTTP/3 bytes written by hand (ALPN h3): each STREAM is
                                KIND:HEX[:fin] (KIND bidi or uni) or `headers:NAME=VALUE,...`
                                (a bidi stream with one HEADERS frame, QPACK-encoded by pylsqpack
                                with no dynamic table, then FIN); what the server did in 3 s:
                                {"close_code", "close_reason", "resets": {id: code},
                                 "stopped": {id: code}, "answered": [request streams ended by
                                 the server], "received": {id: hex of what came on it}}
"""

import asyncio
import hashlib
import json
import os
import ssl
import sys
import time

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic.configuration import QuicConfiguration
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.events import ConnectionTerminated

LIMIT = 20  # seconds, for any one scenario


def config(alpn="lowlat-echo", idle=30.0):
    cfg = QuicConfiguration(is_client=True, alpn_protocols=[alpn], idle_timeout=idle)
    cfg.verify_mode = ssl.CERT_NONE
    cfg.server_name = "localhost"
    return cfg


class Watched(QuicConnectionProtocol):
    """Notes when and why the connection ended."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.terminated = None
        self.terminated_at = None

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated) and self.terminated is None:
            self.terminated = event
            self.terminated_at = time.monotonic()
        super().quic_event_received(event)


async def echo_stream(client, payload):
    reader, writer = await client.create_stream()
    writer.write(payload)
    writer.write_eof()
    return await reader.read()


def pattern(size, seed):
    return bytes((i * 7 + seed) % 251 for i in range(size))


async def echo(host, port, size, streams):
    async with connect(host, port, configuration=config()) as client:
        payloads = [pattern(size, s) for s in range(streams)]
        got = await asyncio.gather(*(echo_stream(client, p) for p in payloads))
        ok = sum(1 for p, g in zip(payloads, got) if p == g)
        return {"streams": streams, "ok": ok, "bytes": sum(len(g) for g in got)}


async def one_conn(host, port, i):
    async with connect(host, port, configuration=config()) as client:
        data = pattern(3000, i)
        return await echo_stream(client, data) == data


async def many(host, port, n):
    results = await asyncio.gather(*(one_conn(host, port, i) for i in range(n)), return_exceptions=True)
    errors = [repr(r) for r in results if isinstance(r, BaseException)]
    return {"connections": n, "ok": sum(1 for r in results if r is True), "errors": errors[:3]}


async def retry(host, port):
    async with connect(host, port, configuration=config()) as client:
        ok = await echo_stream(client, b"after retry") == b"after retry"
        return {"retried": client._quic._retry_count > 0, "ok": ok}


async def idle(host, port, seconds):
    # The client's own idle timeout is long: the server's shorter one must be what applies
    # (QUIC takes the smaller of the two, RFC 9000 §10.1).
    async with connect(host, port, configuration=config(idle=60.0), create_protocol=Watched) as client:
        await echo_stream(client, b"x")
        start = time.monotonic()
        deadline = start + seconds * 4 + 5
        while client.terminated is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if client.terminated is None:
            return {"closed_after": None}
        return {
            "closed_after": round(client.terminated_at - start, 3),
            "reason": client.terminated.reason_phrase,
            "error_code": client.terminated.error_code,
        }


class Relay(asyncio.DatagramProtocol):
    """A UDP relay between one client and the server, whose server-side socket (its source
    address as the server sees it) can be replaced: a NAT rebinding."""

    def __init__(self, server):
        self.server = server
        self.client_addr = None
        self.upstream = None
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        self.client_addr = addr
        if self.upstream is not None:
            self.upstream.sendto(data, self.server)

    async def rebind(self):
        loop = asyncio.get_running_loop()
        old = self.upstream
        relay = self

        class Back(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                if relay.client_addr is not None:
                    relay.transport.sendto(data, relay.client_addr)

        self.upstream, _ = await loop.create_datagram_endpoint(Back, local_addr=("127.0.0.1", 0))
        if old is not None:
            old.close()


async def rebound_conn(host, port, i):
    loop = asyncio.get_running_loop()
    transport, relay = await loop.create_datagram_endpoint(
        lambda: Relay((host, port)), local_addr=("127.0.0.1", 0)
    )
    await relay.rebind()
    relay_port = transport.get_extra_info("sockname")[1]
    try:
        async with connect("127.0.0.1", relay_port, configuration=config()) as client:
            first = pattern(2000, i)
            if await echo_stream(client, first) != first:
                return False
            await relay.rebind()
            second = pattern(2000, i + 100)
            return await asyncio.wait_for(echo_stream(client, second), 5) == second
    finally:
        transport.close()
        if relay.upstream is not None:
            relay.upstream.close()


class LossyRelay(Relay):
    """A relay that drops a share of the datagrams each way: loss without `tc netem`."""

    def __init__(self, server, percent):
        super().__init__(server)
        import random

        self.rng = random.Random(7)
        self.percent = percent
        self.dropped = 0
        self.relayed = 0

    def lose(self):
        if self.rng.random() * 100 < self.percent:
            self.dropped += 1
            return True
        self.relayed += 1
        return False

    def datagram_received(self, data, addr):
        self.client_addr = addr
        if self.upstream is not None and not self.lose():
            self.upstream.sendto(data, self.server)

    async def rebind(self):
        loop = asyncio.get_running_loop()
        relay = self

        class Back(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                if relay.client_addr is not None and not relay.lose():
                    relay.transport.sendto(data, relay.client_addr)

        self.upstream, _ = await loop.create_datagram_endpoint(Back, local_addr=("127.0.0.1", 0))


class NarrowRelay(LossyRelay):
    """A relay that drops every datagram longer than `size` bytes, as a path whose MTU is
    smaller than the interfaces' at either end (what path MTU discovery's probes meet)."""

    def __init__(self, server, size):
        super().__init__(server, 0)
        self.size = size
        self.data = None

    def datagram_received(self, data, addr):
        self.data = data
        super().datagram_received(data, addr)

    def lose(self):
        if self.data is not None and len(self.data) > self.size:
            self.dropped += 1
            return True
        self.relayed += 1
        return False

    async def rebind(self):
        loop = asyncio.get_running_loop()
        relay = self

        class Back(asyncio.DatagramProtocol):
            def datagram_received(self, data, addr):
                relay.data = data
                if relay.client_addr is not None and not relay.lose():
                    relay.transport.sendto(data, relay.client_addr)

        self.upstream, _ = await loop.create_datagram_endpoint(Back, local_addr=("127.0.0.1", 0))


async def lossy(host, port, percent, path):
    return await relayed_get(host, port, path, lambda: LossyRelay((host, port), float(percent)))


async def narrow(host, port, size, path):
    return await relayed_get(host, port, path, lambda: NarrowRelay((host, port), int(size)))


async def relayed_get(host, port, path, make_relay):
    loop = asyncio.get_running_loop()
    transport, relay = await loop.create_datagram_endpoint(make_relay, local_addr=("127.0.0.1", 0))
    await relay.rebind()
    relay_port = transport.get_extra_info("sockname")[1]
    try:
        async with connect("127.0.0.1", relay_port, configuration=config(alpn=H3_ALPN[0]),
                           create_protocol=H3Client) as client:
            r = await client.request("GET", f"localhost:{port}", path)
        r.update(dropped=relay.dropped, relayed=relay.relayed)
        return r
    finally:
        transport.close()
        relay.upstream.close()


async def zerortt(host, port, *methods):
    tickets = []
    async with connect(host, port, configuration=config(alpn=H3_ALPN[0]), create_protocol=H3Client,
                       session_ticket_handler=tickets.append) as client:
        await client.request("GET", f"localhost:{port}", "/plaintext")
        deadline = time.monotonic() + 5
        while not tickets and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
    if not tickets:
        return {"error": "no session ticket"}
    cfg = config(alpn=H3_ALPN[0])
    cfg.session_ticket = tickets[-1]
    # Not waiting for the handshake: the requests go in 0-RTT packets beside the ClientHello.
    async with connect(host, port, configuration=cfg, create_protocol=H3Client,
                       wait_connected=False) as client:
        answers = await asyncio.gather(*(
            client.request(m, f"localhost:{port}", "/plaintext", b"x" if m == "POST" else None)
            for m in methods))
        return {"early_data": tickets[-1].max_early_data_size is not None,
                "resumed": bool(client._quic.tls.session_resumed),
                "responses": answers}


async def rebind(host, port, n):
    results = await asyncio.gather(*(rebound_conn(host, port, i) for i in range(n)), return_exceptions=True)
    errors = [repr(r) for r in results if isinstance(r, BaseException)]
    return {"connections": n, "ok": sum(1 for r in results if r is True), "errors": errors[:3]}


class H3Client(QuicConnectionProtocol):
    """A minimal HTTP/3 client on aioquic's H3Connection."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.pending = {}

    def quic_event_received(self, event):
        for e in self.h3.handle_event(event):
            if isinstance(e, (HeadersReceived, DataReceived)) and e.stream_id in self.pending:
                fut, r = self.pending[e.stream_id]
                if isinstance(e, HeadersReceived):
                    r["headers"].extend(e.headers)
                    # For a test that acts while the body is still coming.
                    print("headers", file=sys.stderr, flush=True)
                else:
                    r["body"] += e.data
                if e.stream_ended and not fut.done():
                    fut.set_result(r)
        if isinstance(event, ConnectionTerminated):
            for fut, _ in self.pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError(event.reason_phrase or str(event.error_code)))

    async def request(self, method, authority, path, body=None):
        sid = self._quic.get_next_available_stream_id()
        fut = asyncio.get_running_loop().create_future()
        self.pending[sid] = (fut, {"headers": [], "body": b""})
        self.h3.send_headers(
            sid,
            [(b":method", method.encode()), (b":scheme", b"https"),
             (b":authority", authority.encode()), (b":path", path.encode()),
             (b"user-agent", b"aioquic")],
            end_stream=body is None,
        )
        if body is not None:
            self.h3.send_data(sid, body, end_stream=True)
        self.transmit()
        r = await fut
        headers = {}
        for k, v in r["headers"]:
            headers.setdefault(k.decode(), v.decode())
        return {
            "status": int(headers.pop(":status", "0")),
            "headers": headers,
            "length": len(r["body"]),
            "sha256": hashlib.sha256(r["body"]).hexdigest(),
            "text": r["body"][:200].decode("utf-8", "replace"),
        }


async def get(host, port, method, *paths):
    async with connect(host, port, configuration=config(alpn=H3_ALPN[0]), create_protocol=H3Client) as client:
        answers = await asyncio.gather(*(client.request(method, f"localhost:{port}", str(p)) for p in paths))
        return {"responses": answers}


async def post(host, port, path, *sizes):
    async with connect(host, port, configuration=config(alpn=H3_ALPN[0]), create_protocol=H3Client) as client:
        answers = []
        for size in sizes:
            answers.append(await client.request("POST", f"localhost:{port}", path, b"x" * int(size)))
        return {"responses": answers}


class RawH3(QuicConnectionProtocol):
    """Records what the server does to a connection spoken to by hand."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.closed = None
        self.resets = {}
        self.stopped = {}
        self.answered = set()
        self.received = {}

    def quic_event_received(self, event):
        from aioquic.quic import events

        if isinstance(event, events.ConnectionTerminated) and self.closed is None:
            self.closed = event
        elif isinstance(event, events.StreamReset):
            self.resets[event.stream_id] = event.error_code
        elif isinstance(event, events.StreamDataReceived) and event.stream_id % 4 == 0:
            self.received.setdefault(event.stream_id, bytearray()).extend(event.data)
            if event.end_stream:
                self.answered.add(event.stream_id)
        elif type(event).__name__ == "StopSendingReceived":
            self.stopped[event.stream_id] = event.error_code
        super().quic_event_received(event)


async def raw(host, port, *streams):
    import pylsqpack

    async with connect(host, port, configuration=config(alpn=H3_ALPN[0]), create_protocol=RawH3) as client:
        q = client._quic
        for spec in streams:
            kind, _, rest = spec.partition(":")
            if kind == "headers":
                sid = q.get_next_available_stream_id()
                enc = pylsqpack.Encoder()
                fields = [tuple(x.encode() for x in kv.split("=", 1)) for kv in rest.split(",") if kv]
                _, section = enc.encode(sid, fields)
                frame = bytes([0x01]) + encode_varint(len(section)) + section
                q.send_stream_data(sid, frame, end_stream=True)
                continue
            data, _, flags = rest.partition(":")
            sid = q.get_next_available_stream_id(is_unidirectional=(kind == "uni"))
            q.send_stream_data(sid, bytes.fromhex(data), end_stream=(flags == "fin"))
        client.transmit()
        bidi = sum(1 for spec in streams if spec.startswith(("bidi", "headers")))
        deadline = time.monotonic() + 3
        while client.closed is None and time.monotonic() < deadline:
            # Every request stream answered or reset: nothing more to wait for.
            if bidi and len(set(client.resets) | client.answered) >= bidi:
                break
            await asyncio.sleep(0.05)
        return {
            "close_code": client.closed.error_code if client.closed else None,
            "close_reason": client.closed.reason_phrase if client.closed else None,
            "resets": {str(k): v for k, v in client.resets.items()},
            "stopped": {str(k): v for k, v in client.stopped.items()},
            "answered": sorted(client.answered),
            "received": {str(k): bytes(v).hex() for k, v in client.received.items()},
        }


def encode_varint(n):
    for bits, prefix in ((6, 0x00), (14, 0x40), (30, 0x80)):
        if n < (1 << bits):
            size = (bits + 2) // 8
            return (n | (prefix << (8 * (size - 1)))).to_bytes(size, "big")
    return (n | (0xC0 << 56)).to_bytes(8, "big")


def main():
    cmd, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if cmd in ("get", "post", "raw", "lossy", "narrow", "zerortt"):
        rest = sys.argv[4:]
    else:
        rest = [float(a) if "." in a else int(a) for a in sys.argv[4:]]
    scenario = {"echo": echo, "many": many, "retry": retry, "idle": idle, "rebind": rebind, "get": get, "post": post, "raw": raw, "lossy": lossy, "narrow": narrow, "zerortt": zerortt}[cmd]
    try:
        result = asyncio.run(asyncio.wait_for(scenario(host, port, *rest), LIMIT))
    except Exception as e:  # the test prints this and fails
        result = {"error": repr(e)}
    print(json.dumps(result), flush=True)
    # aioquic's tasks may linger past the loop; the answer is out, so leave at once.
    os._exit(0)


if __name__ == "__main__":
    main()
