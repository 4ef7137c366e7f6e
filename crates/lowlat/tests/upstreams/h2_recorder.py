"""An HTTP/2 server in clear (h2c, prior knowledge), written with the `h2` library: the upstream
that shows what the proxy sends on a stream — request fields, body, trailers, resets — which
neither grpcio nor gunicorn would.

    python3 h2_recorder.py [--port N | --unix PATH]
    python3 h2_recorder.py --send http://HOST:PORT/PATH [--trailer NAME=VALUE]...

The second form is the client half: one POST (h2c prior knowledge) whose body, "hello" in two
DATA frames with no content-length, ends with a HEADERS frame of the trailers given; prints the
response's status line and body.

Routes (by path prefix):

- `/digest`: reads the body as it comes (its window given back as it is read) and answers 200
  after its end: JSON with the body's `length` and `sha256`, the request's `fields`, and its
  `trailers` (an object, empty when none came).
- `/sink`: reads nothing (no window is given back) and never answers: the proxy must hold the
  client back, and reset the stream when the client leaves.
- `/early`: answers 413 as soon as the request's head arrives, then resets the stream with
  NO_ERROR (RFC 9113 §8.1: the rest of the body is not wanted).
- `/stats`: JSON of what the server saw: `connections` accepted, `resets` (the error codes of
  the RST_STREAM frames received, in order), `streams` opened.
"""

import hashlib
import json
import os
import socket
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.events  # noqa: E402
import h2.exceptions  # noqa: E402

STATS = {"connections": 0, "resets": [], "streams": 0}
LOCK = threading.Lock()


class Stream:
    def __init__(self, fields):
        self.fields = fields
        self.path = fields.get(":path", "")
        self.length = 0
        self.sha = hashlib.sha256()
        self.trailers = {}


def answer(conn, stream_id, status, body):
    conn.send_headers(
        stream_id,
        [(":status", str(status)), ("content-type", "application/json"),
         ("content-length", str(len(body)))],
    )
    conn.send_data(stream_id, body, end_stream=True)


def serve(sock):
    config = h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
    conn = h2.connection.H2Connection(config=config)
    conn.initiate_connection()
    # Room for large bodies on the connection; streams keep the default 64 KiB window, given back
    # as /digest reads (the proxy must respect it).
    conn.increment_flow_control_window(16 * 1024 * 1024)
    sock.sendall(conn.data_to_send())
    streams = {}
    with LOCK:
        STATS["connections"] += 1
    try:
        while True:
            data = sock.recv(256 * 1024)
            if not data:
                return
            try:
                events = conn.receive_data(data)
            except h2.exceptions.ProtocolError as e:
                sys.stderr.write(f"h2_recorder: protocol error: {e}\n")
                sock.sendall(conn.data_to_send())
                return
            for event in events:
                if isinstance(event, h2.events.RequestReceived):
                    fields = {}
                    for name, value in event.headers:
                        fields[name] = f"{fields[name]},{value}" if name in fields else value
                    streams[event.stream_id] = Stream(fields)
                    with LOCK:
                        STATS["streams"] += 1
                    if fields.get(":path", "").startswith("/early"):
                        answer(conn, event.stream_id, 413, b'{"early": true}')
                        conn.reset_stream(event.stream_id, 0)
                        streams.pop(event.stream_id, None)
                    if fields.get(":path", "").startswith("/stats"):
                        with LOCK:
                            body = json.dumps(STATS).encode()
                        answer(conn, event.stream_id, 200, body)
                elif isinstance(event, h2.events.DataReceived):
                    s = streams.get(event.stream_id)
                    if s is None or s.path.startswith("/sink"):
                        continue
                    s.length += len(event.data)
                    s.sha.update(event.data)
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.TrailersReceived):
                    s = streams.get(event.stream_id)
                    if s is not None:
                        for name, value in event.headers:
                            s.trailers[name] = value
                elif isinstance(event, h2.events.StreamEnded):
                    s = streams.pop(event.stream_id, None)
                    if s is not None and s.path.startswith("/digest"):
                        body = json.dumps({
                            "length": s.length,
                            "sha256": s.sha.hexdigest(),
                            "fields": s.fields,
                            "trailers": s.trailers,
                        }).encode()
                        answer(conn, event.stream_id, 200, body)
                elif isinstance(event, h2.events.StreamReset):
                    streams.pop(event.stream_id, None)
                    with LOCK:
                        STATS["resets"].append(event.error_code)
                elif isinstance(event, h2.events.ConnectionTerminated):
                    return
            out = conn.data_to_send()
            if out:
                sock.sendall(out)
    except OSError:
        return
    finally:
        sock.close()


def send(url, trailers):
    rest = url.split("://", 1)[1]
    hostport, path = rest.split("/", 1)
    host, port = hostport.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    conn.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":authority", hostport),
                          (":path", "/" + path)])
    conn.send_data(1, b"hel")
    conn.send_data(1, b"lo")
    fields = [tuple(t.split("=", 1)) for t in trailers]
    if fields:
        conn.send_headers(1, fields, end_stream=True)
    else:
        conn.end_stream(1)
    sock.sendall(conn.data_to_send())
    status, body = None, b""
    while True:
        data = sock.recv(65536)
        if not data:
            break
        ended = False
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                status = dict(event.headers)[b":status"].decode()
            elif isinstance(event, h2.events.DataReceived):
                body += event.data
                conn.acknowledge_received_data(event.flow_controlled_length, 1)
            elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                ended = True
        sock.sendall(conn.data_to_send())
        if ended:
            break
    print(status)
    print(body.decode())


def main():
    def extra(parser):
        parser.add_argument("--send", metavar="URL", help="be the client: POST to URL")
        parser.add_argument("--trailer", action="append", default=[], metavar="NAME=VALUE")

    args = common.arguments("HTTP/2 server (h2c) recording what it is sent", extra)
    if args.send:
        send(args.send, args.trailer)
        return
    listener = common.listen(args)
    common.watch_stdin()
    common.ready(common.where(listener))
    while True:
        sock, _ = listener.accept()
        threading.Thread(target=serve, args=(sock,), daemon=True).start()


if __name__ == "__main__":
    main()
