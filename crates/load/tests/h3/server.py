"""An HTTP/3 server for lowlat load's --h3 tests, on aioquic's H3Connection (RFC 9114 as
aioquic implements it, QPACK by pylsqpack with its dynamic table), on 127.0.0.1.

    server.py --port P --cert C --key K --stats FILE [--alpn h3] [--refuse] [--goaway-after N]

Paths:  /plaintext          200, "Hello, World!"
        /bytes/N            200, N bytes
        /status/NNN         that status, empty body
        /delay/MS           200 after MS milliseconds (the streams waiting are counted)
Every response carries a few extra fields, so the encoder has something for its table.

--refuse closes every connection with CONNECTION_REFUSED as soon as the client's hello is
read (the handshake never completes). --goaway-after N sends GOAWAY on a connection once it
has seen N requests, and answers those already received. Session tickets are kept, so a
client may resume and send 0-RTT.

On SIGTERM it writes to --stats a JSON object: requests (by path kind), the largest number of
requests open at once on one connection and overall, connections, handshakes completed,
0-RTT requests, request body bytes, bytes on the QPACK encoder stream and received on the
decoder stream, then exits. It prints "ready" when listening.
"""

import argparse
import asyncio
import json
import signal
import sys

from aioquic.asyncio import QuicConnectionProtocol, serve
from aioquic.buffer import encode_uint_var
from aioquic.h3.connection import H3Connection, FrameType, encode_frame
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import HandshakeCompleted, ProtocolNegotiated, StreamReset
from aioquic.quic.packet import QuicErrorCode

STATS = {
    "requests": 0,
    "statuses": {},
    "max_open_per_connection": 0,
    "max_open": 0,
    "connections": 0,
    "handshakes": 0,
    "early_data_accepted": 0,
    "goaways": 0,
    "resets": 0,
    "body_bytes": 0,
    "decoder_stream_bytes": 0,
    "encoder_stream_bytes": 0,
}
OPEN = {"now": 0}
ARGS = None


class CountingEncoder:
    """pylsqpack's encoder, counting what the client's QPACK decoder stream sends it
    (acknowledgments and Insert Count Increments) and what it writes to its own encoder stream
    (dynamic table insertions)."""

    def __init__(self, inner):
        self.inner = inner

    def feed_decoder(self, data):
        STATS["decoder_stream_bytes"] += len(data)
        return self.inner.feed_decoder(data)

    def encode(self, stream_id, headers):
        encoder, frame = self.inner.encode(stream_id, headers)
        STATS["encoder_stream_bytes"] += len(encoder)
        return encoder, frame

    def __getattr__(self, name):
        return getattr(self.inner, name)


class TicketStore:
    def __init__(self):
        self.tickets = {}

    def add(self, ticket):
        self.tickets[ticket.ticket] = ticket

    def pop(self, label):
        # Kept, not popped: every reconnection of a run may resume with the same ticket.
        return self.tickets.get(label)


class Protocol(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = None
        self.open = 0
        self.seen = 0
        self.goaway_sent = False
        STATS["connections"] += 1

    def quic_event_received(self, event):
        if isinstance(event, ProtocolNegotiated):
            if ARGS.refuse:
                self._quic.close(
                    error_code=QuicErrorCode.CONNECTION_REFUSED,
                    reason_phrase="refused for the test",
                )
                self.transmit()
                return
            self.h3 = H3Connection(self._quic)
            self.h3._encoder = CountingEncoder(self.h3._encoder)
        elif isinstance(event, HandshakeCompleted):
            STATS["handshakes"] += 1
            if event.early_data_accepted:
                STATS["early_data_accepted"] += 1
        elif isinstance(event, StreamReset):
            STATS["resets"] += 1
        if self.h3 is None:
            return
        for ev in self.h3.handle_event(event):
            if isinstance(ev, HeadersReceived):
                self.request(ev)
            elif isinstance(ev, DataReceived):
                STATS["body_bytes"] += len(ev.data)

    def request(self, ev):
        STATS["requests"] += 1
        self.seen += 1
        headers = dict(ev.headers)
        path = headers.get(b":path", b"/").decode()
        method = headers.get(b":method", b"GET").decode()
        self.open += 1
        OPEN["now"] += 1
        STATS["max_open_per_connection"] = max(STATS["max_open_per_connection"], self.open)
        STATS["max_open"] = max(STATS["max_open"], OPEN["now"])
        if ARGS.goaway_after and self.seen >= ARGS.goaway_after and not self.goaway_sent:
            self.goaway_sent = True
            STATS["goaways"] += 1
            # Requests on streams from the next one on are not processed (RFC 9114 §5.2).
            self._quic.send_stream_data(
                self.h3._local_control_stream_id,
                encode_frame(FrameType.GOAWAY, encode_uint_var(ev.stream_id + 4)),
            )
        status, body, delay = 200, b"Hello, World!", 0
        if path.startswith("/bytes/"):
            body = b"x" * int(path[len("/bytes/"):])
        elif path.startswith("/status/"):
            status, body = int(path[len("/status/"):]), b""
        elif path.startswith("/delay/"):
            delay = int(path[len("/delay/"):]) / 1000
        if method == "HEAD":
            body_sent = b""
        else:
            body_sent = body
        if delay:
            asyncio.get_event_loop().call_later(
                delay, self.respond, ev.stream_id, status, body, body_sent
            )
        else:
            self.respond(ev.stream_id, status, body, body_sent)

    def respond(self, stream_id, status, body, body_sent):
        self.open -= 1
        OPEN["now"] -= 1
        STATS["statuses"][str(status)] = STATS["statuses"].get(str(status), 0) + 1
        try:
            self.h3.send_headers(
                stream_id,
                [
                    (b":status", str(status).encode()),
                    (b"server", b"aioquic-test"),
                    (b"content-type", b"text/plain"),
                    (b"content-length", str(len(body)).encode()),
                    (b"x-test", b"a value the encoder may keep in its table"),
                ],
                end_stream=not body_sent,
            )
            if body_sent:
                self.h3.send_data(stream_id, body_sent, end_stream=True)
        except Exception:  # the connection is gone
            return
        self.transmit()


def write_stats():
    with open(ARGS.stats, "w") as f:
        json.dump(STATS, f)


async def main():
    config = QuicConfiguration(
        is_client=False,
        alpn_protocols=[ARGS.alpn],
        max_datagram_frame_size=None,
    )
    config.load_cert_chain(ARGS.cert, ARGS.key)
    tickets = TicketStore()
    await serve(
        "127.0.0.1",
        ARGS.port,
        configuration=config,
        create_protocol=Protocol,
        session_ticket_fetcher=tickets.pop,
        session_ticket_handler=tickets.add,
    )
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, done.set)
    loop.add_signal_handler(signal.SIGINT, done.set)
    print("ready", flush=True)
    await done.wait()
    write_stats()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--stats", required=True)
    p.add_argument("--alpn", default="h3")
    p.add_argument("--refuse", action="store_true")
    p.add_argument("--goaway-after", type=int, default=0)
    ARGS = p.parse_args()
    asyncio.run(main())
    sys.exit(0)
