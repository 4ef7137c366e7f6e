"""A WebSocket client over HTTP/2 (RFC 8441: extended CONNECT), built from two maintained
libraries of the python-hyper project: `h2` for HTTP/2 and `wsproto` for the WebSocket frames.
What the proxy's WebSocket-over-HTTP/2 tests drive through `lowlat serve --proxy`, against
`ws_echo.py` behind it.

    python3 ws_h2_client.py SCENARIO URL [--cafile PEM]

URL is ws://HOST:PORT/PATH (HTTP/2 in clear, prior knowledge) or wss://HOST:PORT/PATH (TLS,
ALPN h2). Scenarios, each printing one JSON object on stdout:

    echo      two tunnels on one connection, and a plain GET beside them; on the first a text
              message, a 1 MiB binary one (beyond every window, so flow control is crossed both
              ways) and 100 small ones, on the second one message; both closed with 1000
              → {"connect_protocol", "status", "response_headers", "text_ok", "binary_ok",
                 "small_ok", "second_ok", "get_status", "close_code", "ended"}
    headers   a tunnel to ws_echo.py's /headers: its first message, the handshake as the
              upstream saw it → {"status", "upstream": {"path", "headers"}}
    refused   an extended CONNECT that must not open a tunnel (--protocol to ask for another
              protocol than websocket) → {"status", "reset"}
    reset     a tunnel opened, one message echoed, then the stream reset by the client; then a
              GET on the same connection → {"echo_ok", "get_status"}
    drop      a tunnel opened, one message echoed, then the TCP connection closed without a
              word → {"echo_ok"}
"""

import argparse
import json
import os
import socket
import ssl
import sys
import time
from urllib.parse import urlsplit

import h2.config
import h2.connection
import h2.events
import h2.settings
from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage

DEADLINE = 30.0


class Client:
    def __init__(self, url, cafile):
        u = urlsplit(url)
        self.authority = u.netloc
        self.path = u.path or "/"
        self.scheme = "https" if u.scheme == "wss" else "http"
        sock = socket.create_connection((u.hostname, u.port), timeout=DEADLINE)
        if u.scheme == "wss":
            ctx = ssl.create_default_context(cafile=cafile)
            ctx.set_alpn_protocols(["h2"])
            sock = ctx.wrap_socket(sock, server_hostname=u.hostname)
            assert sock.selected_alpn_protocol() == "h2", sock.selected_alpn_protocol()
        self.sock = sock
        self.h2 = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        self.h2.initiate_connection()
        self.flush()
        # stream id → state
        self.streams = {}
        self.connect_protocol = None
        # Wait for the server's SETTINGS: extended CONNECT needs ENABLE_CONNECT_PROTOCOL.
        self.pump_until(lambda: self.connect_protocol is not None)

    def flush(self):
        data = self.h2.data_to_send()
        if data:
            self.sock.sendall(data)

    def stream(self, sid):
        return self.streams.setdefault(
            sid,
            {"status": None, "headers": None, "data": b"", "ended": False, "reset": None,
             "ws": None, "events": []},
        )

    def pump_once(self):
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the server closed the connection")
        for ev in self.h2.receive_data(data):
            if isinstance(ev, h2.events.RemoteSettingsChanged):
                c = ev.changed_settings.get(h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL)
                self.connect_protocol = c.new_value if c else (self.connect_protocol or 0)
            elif isinstance(ev, h2.events.ResponseReceived):
                s = self.stream(ev.stream_id)
                s["headers"] = dict(ev.headers)
                s["status"] = int(s["headers"][":status"])
            elif isinstance(ev, h2.events.DataReceived):
                s = self.stream(ev.stream_id)
                self.h2.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                if s["ws"] is not None:
                    if ev.data:
                        s["ws"].receive_data(ev.data)
                        s["events"].extend(s["ws"].events())
                else:
                    s["data"] += ev.data
            elif isinstance(ev, h2.events.StreamEnded):
                s = self.stream(ev.stream_id)
                s["ended"] = True
                if s["ws"] is not None and s["ws"].state != ConnectionState.CLOSED:
                    s["ws"].receive_data(None)
                    s["events"].extend(s["ws"].events())
            elif isinstance(ev, h2.events.StreamReset):
                self.stream(ev.stream_id)["reset"] = int(ev.error_code)
        self.flush()

    def pump_until(self, done):
        end = time.monotonic() + DEADLINE
        while not done():
            if time.monotonic() > end:
                raise TimeoutError("timed out")
            self.pump_once()

    def open_tunnel(self, protocol="websocket"):
        sid = self.h2.get_next_available_stream_id()
        self.h2.send_headers(
            sid,
            [
                (":method", "CONNECT"),
                (":protocol", protocol),
                (":scheme", self.scheme),
                (":path", self.path),
                (":authority", self.authority),
                ("sec-websocket-version", "13"),
                ("user-agent", "ws-h2-test"),
            ],
        )
        self.flush()
        s = self.stream(sid)
        self.pump_until(lambda: s["status"] is not None or s["reset"] is not None)
        if s["status"] == 200:
            s["ws"] = Connection(ConnectionType.CLIENT)
            # DATA that came in the same read as the response head.
            if s["data"]:
                s["ws"].receive_data(s["data"])
                s["events"].extend(s["ws"].events())
                s["data"] = b""
        return sid

    def send(self, sid, event):
        """Sends one WebSocket event on tunnel `sid`, as the windows allow."""
        data = self.streams[sid]["ws"].send(event)
        while data:
            window = min(self.h2.local_flow_control_window(sid), self.h2.max_outbound_frame_size)
            if window <= 0:
                self.pump_once()
                continue
            chunk, data = data[:window], data[window:]
            self.h2.send_data(sid, chunk)
            self.flush()

    def next_message(self, sid):
        """The next whole message (str or bytes) echoed on `sid`, answering pings."""
        s = self.streams[sid]
        parts = []
        end = time.monotonic() + DEADLINE
        while True:
            while s["events"]:
                ev = s["events"].pop(0)
                if isinstance(ev, Ping):
                    self.send(sid, ev.response())
                elif isinstance(ev, CloseConnection):
                    s["events"].insert(0, ev)
                    return None
                elif isinstance(ev, (TextMessage, BytesMessage)):
                    parts.append(ev.data)
                    if ev.message_finished:
                        return "".join(parts) if isinstance(ev, TextMessage) else b"".join(parts)
            if s["ended"] or s["reset"] is not None or time.monotonic() > end:
                return None
            self.pump_once()

    def close(self, sid, code=1000):
        """Closes tunnel `sid` (Close `code`, then END_STREAM) and waits for the server's Close
        and its END_STREAM. Returns the code the server's Close carried."""
        s = self.streams[sid]
        self.send(sid, CloseConnection(code=code))
        self.pump_until(
            lambda: any(isinstance(e, CloseConnection) for e in s["events"]) or s["ended"]
            or s["reset"] is not None
        )
        got = next((e.code for e in s["events"] if isinstance(e, CloseConnection)), None)
        if s["reset"] is None:
            self.h2.end_stream(sid)
            self.flush()
        self.pump_until(lambda: s["ended"] or s["reset"] is not None)
        return got

    def get(self, path):
        sid = self.h2.get_next_available_stream_id()
        self.h2.send_headers(
            sid,
            [(":method", "GET"), (":scheme", self.scheme), (":path", path),
             (":authority", self.authority)],
            end_stream=True,
        )
        self.flush()
        s = self.stream(sid)
        self.pump_until(lambda: s["ended"] or s["reset"] is not None)
        return s["status"]


def echo(args):
    c = Client(args.url, args.cafile)
    first = c.open_tunnel()
    second = c.open_tunnel()
    s = c.streams[first]
    out = {"connect_protocol": c.connect_protocol, "status": s["status"],
           "response_headers": {k: v for k, v in (s["headers"] or {}).items()}}
    if s["status"] != 200:
        return out
    c.send(first, TextMessage(data="hello, tunnel ✓"))
    out["text_ok"] = c.next_message(first) == "hello, tunnel ✓"
    big = os.urandom(1024 * 1024)
    c.send(first, BytesMessage(data=big))
    out["binary_ok"] = c.next_message(first) == big
    small_ok = True
    for i in range(100):
        c.send(first, TextMessage(data=f"message {i}"))
        small_ok &= c.next_message(first) == f"message {i}"
    out["small_ok"] = small_ok
    c.send(second, TextMessage(data="second"))
    out["second_ok"] = c.next_message(second) == "second"
    out["get_status"] = c.get("/ws/not-a-tunnel")
    out["close_code"] = c.close(first)
    c.close(second)
    out["ended"] = c.streams[first]["ended"] and c.streams[first]["reset"] is None
    return out


def headers(args):
    c = Client(args.url, args.cafile)
    sid = c.open_tunnel()
    out = {"status": c.streams[sid]["status"]}
    if out["status"] == 200:
        m = c.next_message(sid)
        if m is None:
            out["failed"] = {k: str(v) for k, v in c.streams[sid].items() if k != "ws"}
            return out
        out["upstream"] = json.loads(m)
        c.close(sid)
    return out


def drop(args):
    c = Client(args.url, args.cafile)
    sid = c.open_tunnel()
    c.send(sid, TextMessage(data="before the drop"))
    out = {"echo_ok": c.next_message(sid) == "before the drop"}
    c.sock.close()
    return out


def refused(args):
    c = Client(args.url, args.cafile)
    sid = c.open_tunnel(args.protocol)
    s = c.streams[sid]
    c.pump_until(lambda: s["ended"] or s["reset"] is not None)
    return {"status": s["status"], "reset": s["reset"]}


def reset(args):
    c = Client(args.url, args.cafile)
    sid = c.open_tunnel()
    c.send(sid, TextMessage(data="before the reset"))
    out = {"echo_ok": c.next_message(sid) == "before the reset"}
    c.h2.reset_stream(sid, error_code=8)
    c.flush()
    out["get_status"] = c.get("/ws/after")
    return out


def main():
    p = argparse.ArgumentParser()
    scenarios = {"echo": echo, "headers": headers, "refused": refused, "reset": reset,
                 "drop": drop}
    p.add_argument("scenario", choices=list(scenarios))
    p.add_argument("url")
    p.add_argument("--cafile")
    p.add_argument("--protocol", default="websocket")
    args = p.parse_args()
    out = scenarios[args.scenario](args)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
