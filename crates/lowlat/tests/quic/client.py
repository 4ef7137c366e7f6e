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
  zerortt HOST PORT METHOD[:PATH]...
                                a connection for a session ticket, then a second one that sends
                                one request per METHOD to PATH (/plaintext by default) as 0-RTT
                                data → {"early_data": ticket allows it, "resumed", "responses"}
  fetch HOST PORT SPEC...       one connection, one request per SPEC (JSON: method, path, and
                                optional headers [[name, value]...], a body — body_hex, or
                                body_size bytes of "x", or body_pattern bytes where byte i is
                                i % 251 — and trailers [[name, value]...] after it), all at once → {"responses": [{status, headers, trailers, length,
                                sha256, text, json (a JSON body parsed)}]}
  abuse HOST PORT KIND           a connection (ALPN h3) that breaks QUIC's rules on purpose, by
                                overriding aioquic's own checks: KIND streams (200 request
                                streams where the server allows fewer), flow (a stream's first
                                bytes at an offset of 2 MB, past its window), streamid (data on stream 3, which
                                only the server may open) → {"close_code", "close_reason"}
  flood HOST PORT SOCKETS PER   one real Initial packet (aioquic's first datagram, ClientHello
                                and all) sent PER times from each of SOCKETS sockets (as many
                                client addresses), none of which goes on with the handshake
                                → {"sent", "replies", "retries": replies that are Retry packets}
  cancel HOST PORT HOW PATH THEN
                                a request to PATH abandoned 0.5 s after it was sent, by a reset
                                of its stream (HOW = reset) or by closing the connection (HOW =
                                close); 0.5 s later, on a new connection, a GET of THEN
                                → {"then": its response}
  raw HOST PORT STREAM...       HTTP/3 bytes written by hand (ALPN h3): each STREAM is
                                KIND:HEX[:fin] (KIND bidi or uni) or `headers:NAME=VALUE,...`
                                (a bidi stream with one HEADERS frame, QPACK-encoded by pylsqpack
                                with no dynamic table, then FIN) or `headers-open:...` (the same
                                and a DATA frame of 100 bytes, no FIN: a body that stalls); what
                                the server did in 3 s: {"close_code", "close_reason",
                                 "resets": {id: code}, "stopped": {id: code}, "answered":
                                 [request streams ended by the server], "received": {id: hex of
                                 what came on it}, "status": {id: the :status it answered}};
                                `until-closed` among the STREAMs waits for the server to close
                                the connection rather than for its answers
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
            client.request(m.partition(":")[0], f"localhost:{port}", m.partition(":")[2] or "/plaintext",
                           b"x" if m.startswith("POST") else None)
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
                if isinstance(e, HeadersReceived) and any(k == b":status" for k, _ in r["headers"]):
                    r["trailers"].extend(e.headers)
                elif isinstance(e, HeadersReceived):
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

    def send(self, method, authority, path, body=None, headers=(), trailers=()):
        sid = self._quic.get_next_available_stream_id()
        fut = asyncio.get_running_loop().create_future()
        self.pending[sid] = (fut, {"headers": [], "trailers": [], "body": b""})
        self.h3.send_headers(
            sid,
            [(b":method", method.encode()), (b":scheme", b"https"),
             (b":authority", authority.encode()), (b":path", path.encode()),
             (b"user-agent", b"aioquic")] + [(k.encode(), v.encode()) for k, v in headers],
            end_stream=body is None,
        )
        if body is not None:
            self.h3.send_data(sid, body, end_stream=not trailers)
        if trailers:
            self.h3.send_headers(sid, [(k.encode(), v.encode()) for k, v in trailers], end_stream=True)
        self.transmit()
        return sid, fut

    async def request(self, method, authority, path, body=None, headers=(), trailers=()):
        start = time.monotonic()
        _, fut = self.send(method, authority, path, body, headers, trailers)
        r = await fut
        elapsed = time.monotonic() - start
        headers = {}
        for k, v in r["headers"]:
            headers.setdefault(k.decode(), v.decode())
        return {
            "status": int(headers.pop(":status", "0")),
            "headers": headers,
            "length": len(r["body"]),
            "sha256": hashlib.sha256(r["body"]).hexdigest(),
            "text": r["body"][:200].decode("utf-8", "replace"),
            "trailers": [[k.decode(), v.decode()] for k, v in r["trailers"]],
            "json": json.loads(r["body"]) if headers.get("content-type", "").startswith("application/json") else None,
            # Seconds from sending the request to its whole answer, as the client saw it.
            "elapsed": elapsed,
        }


async def get(host, port, method, *paths):
    async with connect(host, port, configuration=config(alpn=H3_ALPN[0]), create_protocol=H3Client) as client:
        answers = await asyncio.gather(*(client.request(method, f"localhost:{port}", str(p)) for p in paths))
        return {"responses": answers}


async def fetch(host, port, *specs):
    async with connect(host, port, configuration=config(alpn=H3_ALPN[0]), create_protocol=H3Client) as client:
        requests = []
        for spec in map(json.loads, specs):
            body = None
            if "body_hex" in spec:
                body = bytes.fromhex(spec["body_hex"])
            elif "body_size" in spec:
                body = b"x" * spec["body_size"]
            elif "body_pattern" in spec:
                n = spec["body_pattern"]
                body = (bytes(range(251)) * (n // 251 + 1))[:n]
            requests.append(client.request(spec["method"], f"localhost:{port}", spec["path"], body,
                                           [tuple(h) for h in spec.get("headers", [])],
                                           [tuple(t) for t in spec.get("trailers", [])]))
        return {"responses": await asyncio.gather(*requests)}


async def abuse(host, port, kind):
    async with connect(host, port, configuration=config(alpn=H3_ALPN[0]), create_protocol=RawH3) as client:
        q = client._quic
        if kind == "streams":
            q._remote_max_streams_bidi = 1 << 20  # pretend the server allowed them
            for _ in range(200):
                q.send_stream_data(q.get_next_available_stream_id(), b"\x01", end_stream=False)
        elif kind == "flow":
            # A stream's first bytes sent at an offset of 2 MB, past its 1 MiB window.
            q._remote_max_data = 1 << 40
            sid = q.get_next_available_stream_id()
            q.send_stream_data(sid, b"", end_stream=False)
            stream = q._streams[sid]
            stream.max_stream_data_remote = 1 << 40
            stream.sender._buffer_start = stream.sender._buffer_stop = 2_000_000
            stream.sender.write(b"\x00" * 100)
        elif kind == "streamid":
            from aioquic.quic.stream import QuicStream

            stream = q._streams[3] = QuicStream(stream_id=3, max_stream_data_local=0,
                                                max_stream_data_remote=1000, readable=False)
            q._streams_queue.append(stream)
            stream.sender.write(b"x")
        else:
            return {"error": f"unknown abuse {kind}"}
        client.transmit()
        deadline = time.monotonic() + 5
        while client.closed is None and time.monotonic() < deadline:
            client.transmit()
            await asyncio.sleep(0.05)
        return {
            "close_code": client.closed.error_code if client.closed else None,
            "close_reason": client.closed.reason_phrase if client.closed else None,
        }


async def flood(host, port, sockets, per):
    import socket

    from aioquic.quic.connection import QuicConnection

    conn = QuicConnection(configuration=config(alpn=H3_ALPN[0]))
    conn.connect((host, port), now=time.time())
    initial = conn.datagrams_to_send(now=time.time())[0][0]
    socks = []
    sent = replies = retries = 0
    try:
        for _ in range(sockets):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind(("127.0.0.1", 0))
            sock.setblocking(False)
            socks.append(sock)
            for _ in range(per):
                sock.sendto(initial, (host, port))
                sent += 1
        await asyncio.sleep(1.0)
        for sock in socks:
            while True:
                try:
                    data = sock.recv(65536)
                except BlockingIOError:
                    break
                replies += 1
                # A long header (bit 7) of type Retry (bits 5-4 = 3, QUIC v1).
                retries += int(data[0] & 0x80 != 0 and (data[0] >> 4) & 0x3 == 3)
    finally:
        for sock in socks:
            sock.close()
    return {"sent": sent, "replies": replies, "retries": retries}


async def cancel(host, port, how, path, then):
    async with connect(host, port, configuration=config(alpn=H3_ALPN[0]), create_protocol=H3Client) as client:
        sid, _ = client.send("GET", f"localhost:{port}", path)
        await asyncio.sleep(0.5)
        if how == "reset":
            client._quic.reset_stream(sid, 0x10C)  # H3_REQUEST_CANCELLED
            client._quic.stop_stream(sid, 0x10C)
            client.transmit()
            await asyncio.sleep(0.2)
        else:
            client.close()
    await asyncio.sleep(0.5)
    async with connect(host, port, configuration=config(alpn=H3_ALPN[0]), create_protocol=H3Client) as client:
        return {"then": await client.request("GET", f"localhost:{port}", then)}


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
            if kind == "until-closed":
                continue
            if kind in ("headers", "headers-open"):
                sid = q.get_next_available_stream_id()
                enc = pylsqpack.Encoder()
                fields = [tuple(x.encode() for x in kv.split("=", 1)) for kv in rest.split(",") if kv]
                _, section = enc.encode(sid, fields)
                frame = bytes([0x01]) + encode_varint(len(section)) + section
                if kind == "headers-open":
                    frame += bytes([0x00]) + encode_varint(100) + b"x" * 100
                q.send_stream_data(sid, frame, end_stream=(kind == "headers"))
                continue
            data, _, flags = rest.partition(":")
            sid = q.get_next_available_stream_id(is_unidirectional=(kind == "uni"))
            q.send_stream_data(sid, bytes.fromhex(data), end_stream=(flags == "fin"))
        client.transmit()
        bidi = sum(1 for spec in streams if spec.startswith(("bidi", "headers")))
        if "until-closed" in streams:
            bidi = 0  # wait for the server to close, whatever it answered
        deadline = time.monotonic() + 4
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
            "status": {str(k): first_status(k, bytes(v)) for k, v in client.received.items()},
        }


def first_status(sid, data):
    """The :status of the first HEADERS frame in a request stream's bytes (None if none)."""
    import pylsqpack

    at = 0
    while at < len(data):
        ftype, at = read_varint(data, at)
        length, at = read_varint(data, at)
        if ftype == 0x01:
            _, fields = pylsqpack.Decoder(0, 0).feed_header(sid, data[at:at + length])
            return int(dict(fields).get(b":status", b"0"))
        at += length
    return None


def read_varint(data, at):
    size = 1 << (data[at] >> 6)
    value = int.from_bytes(data[at:at + size], "big") & ((1 << (8 * size - 2)) - 1)
    return value, at + size


def encode_varint(n):
    for bits, prefix in ((6, 0x00), (14, 0x40), (30, 0x80)):
        if n < (1 << bits):
            size = (bits + 2) // 8
            return (n | (prefix << (8 * (size - 1)))).to_bytes(size, "big")
    return (n | (0xC0 << 56)).to_bytes(8, "big")


def main():
    cmd, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if cmd in ("get", "post", "raw", "lossy", "narrow", "zerortt", "fetch", "cancel", "abuse"):  # as text
        rest = sys.argv[4:]
    else:
        rest = [float(a) if "." in a else int(a) for a in sys.argv[4:]]
    scenario = {"echo": echo, "many": many, "retry": retry, "idle": idle, "rebind": rebind, "get": get, "post": post, "raw": raw, "lossy": lossy, "narrow": narrow, "zerortt": zerortt, "fetch": fetch, "cancel": cancel, "abuse": abuse,
                "flood": flood}[cmd]
    try:
        result = asyncio.run(asyncio.wait_for(scenario(host, port, *rest), LIMIT))
    except Exception as e:  # the test prints this and fails
        result = {"error": repr(e)}
    print(json.dumps(result), flush=True)
    # aioquic's tasks may linger past the loop; the answer is out, so leave at once.
    os._exit(0)


if __name__ == "__main__":
    main()
