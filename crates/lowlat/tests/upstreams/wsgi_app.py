"""A WSGI app served by gunicorn: the HTTP/1.1 upstream the proxy's tests talk to.

    python3 wsgi_app.py [--port N | --unix PATH] [--worker gthread|sync] [--workers N]
                        [--threads N] [--timeout S]

Routes (every one but /echo and /upload ignores the method and the body):

    /echo            JSON: method, path, target, query, http_version, headers as gunicorn saw
                     them, body length and SHA-256, client address, and the address the
                     request arrived at (`local`: which of several upstreams answered)
    /bytes/N         N bytes of the pattern (`i % 251`), with Content-Length
    /chunked/N       the same without Content-Length (so chunked: gunicorn does it for HTTP/1.1)
    /upload          JSON {"length", "sha256"} of the request body, read 64 KiB at a time
    /status/CODE     that status (200-599), the code and a newline as the body (none for
                     204 and 304)
    /slow/MS         sleeps MS milliseconds, then answers
    /stall           declares 1024 bytes, sends 512, then hangs (an hour)
    /die             declares 1024 bytes, sends 512, then resets the connection (RST)
    /trailers        WSGI cannot send trailers: the body only, with `x-trailers: unsupported`
    /cached          ETag "v1"; 304 when If-None-Match names it (or is *)
    /headers?K=V&..  adds each K: V (percent-decoded) to the response

What gunicorn does on its own, and the tests may count on: header names reach the app upper-cased
with `-` as `_` (reported here lower-case with `-`), names that hold `_` are dropped, and repeated
fields are joined with `,`; the app cannot set hop-by-hop fields (gunicorn drops them: use uvicorn
to send those); the sync worker closes every connection after one response, gthread keeps it.
"""

import json
import os
import socket
import struct
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

# /stall and /die declare this many body bytes and send half of them.
PARTIAL_DECLARED = 1024
PARTIAL_SENT = 512
# How long /stall hangs: longer than any test, shorter than forever.
STALL_SECONDS = 3600
ETAG = '"v1"'


class Die(Exception):
    """Raised by /die once it has reset its connection, so that gunicorn ends the response."""


def app(environ, start_response):
    path = environ.get("PATH_INFO", "")
    parts = path.strip("/").split("/")
    route, arg = parts[0], (parts[1] if len(parts) > 1 else "")

    if route == "echo":
        return echo(environ, start_response)
    if route in ("bytes", "chunked") and arg.isdigit():
        n = int(arg)
        headers = [("Content-Type", "application/octet-stream")]
        if route == "bytes":
            headers.append(("Content-Length", str(n)))
        start_response("200 OK", headers)
        return common.pattern(n)
    if route == "upload":
        digest = read_body(environ)
        return reply(start_response, "200 OK", json.dumps(digest.report()) + "\n", "application/json")
    if route == "status" and arg.isdigit() and 200 <= int(arg) <= 599:
        code = int(arg)
        status = f"{code} {common.reason(code)}"
        if code in (204, 304):
            start_response(status, [])
            return []
        return reply(start_response, status, f"{code}\n")
    if route == "slow" and arg.isdigit():
        time.sleep(int(arg) / 1000)
        return reply(start_response, "200 OK", f"slept {arg} ms\n")
    if route == "stall":
        return partial(start_response, environ, then="stall")
    if route == "die":
        return partial(start_response, environ, then="die")
    if route == "trailers":
        start_response("200 OK", [("Content-Type", "text/plain"), ("x-trailers", "unsupported")])
        return [b"no trailers from WSGI\n"]
    if route == "cached":
        tags = [t.strip() for t in environ.get("HTTP_IF_NONE_MATCH", "").split(",")]
        if ETAG in tags or "*" in tags:
            start_response("304 Not Modified", [("ETag", ETAG)])
            return []
        start_response("200 OK", [("ETag", ETAG), ("Content-Type", "text/plain"), ("Content-Length", "7")])
        return [b"cached\n"]
    if route == "headers":
        query = urllib.parse.parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True, encoding="latin-1")
        start_response("200 OK", [("Content-Type", "text/plain")] + query)
        return [b"headers set\n"]
    if route == "":
        return reply(start_response, "200 OK", __doc__)
    return reply(start_response, "404 Not Found", "no such route\n")


def reply(start_response, status, text, content_type="text/plain"):
    body = text.encode()
    start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(body)))])
    return [body]


def read_body(environ):
    digest = common.BodyDigest()
    stream = environ["wsgi.input"]
    while True:
        data = stream.read(common.READ_SIZE)
        if not data:
            return digest
        digest.update(data)


def echo(environ, start_response):
    digest = read_body(environ)
    headers = []
    for key, value in environ.items():
        if key.startswith("HTTP_"):
            headers.append([key[5:].lower().replace("_", "-"), value])
        elif key in ("CONTENT_TYPE", "CONTENT_LENGTH") and value:
            headers.append([key.lower().replace("_", "-"), value])
    headers.sort()
    raw = environ.get("RAW_URI", "")
    port = environ.get("REMOTE_PORT")
    report = {
        "server": "gunicorn",
        "method": environ["REQUEST_METHOD"],
        "path": environ.get("PATH_INFO", ""),
        "target": raw,
        "query": environ.get("QUERY_STRING", ""),
        "http_version": environ.get("SERVER_PROTOCOL", "").removeprefix("HTTP/"),
        "headers": headers,
        "body_length": digest.length,
        "body_sha256": digest.sha.hexdigest(),
        "client": f"{environ.get('REMOTE_ADDR', '')}:{port}" if port else environ.get("REMOTE_ADDR", ""),
        # SERVER_NAME and SERVER_PORT come from the Host field; the socket says where it listens.
        "local": local_address(environ["gunicorn.socket"]),
    }
    return reply(start_response, "200 OK", json.dumps(report) + "\n", "application/json")


def local_address(sock):
    """`127.0.0.1:PORT`, or the unix socket's path."""
    name = sock.getsockname()
    return f"{name[0]}:{name[1]}" if isinstance(name, tuple) else name


def partial(start_response, environ, then):
    start_response(
        "200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(PARTIAL_DECLARED))]
    )
    yield bytes(next(common.pattern(PARTIAL_SENT)))
    if then == "stall":
        time.sleep(STALL_SECONDS)
        return
    # SO_LINGER on, 0 seconds: close() sends RST instead of FIN. The socket is closed here:
    # gunicorn, handed an error after the head was sent, would shut it down gracefully (FIN).
    sock = environ["gunicorn.socket"]
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
    raise Die("the /die route reset its connection")


def main():
    def flags(parser):
        parser.add_argument("--worker", choices=["gthread", "sync"], default="gthread")
        parser.add_argument("--workers", type=int, default=None, help="default: 1 gthread, 4 sync")
        parser.add_argument("--threads", type=int, default=32, help="per gthread worker")
        parser.add_argument("--timeout", type=int, default=30, help="gunicorn's worker timeout (s)")
        parser.add_argument("--certfile", default=None, help="serve TLS with this certificate chain")
        parser.add_argument("--keyfile", default=None, help="the key of --certfile")

    args = common.arguments("gunicorn serving the test WSGI app", flags)

    from gunicorn.app.base import BaseApplication

    def when_ready(server):
        common.ready(common.where(server.LISTENERS[0].sock))

    options = {
        "bind": [f"unix:{args.unix}" if args.unix else f"127.0.0.1:{args.port}"],
        "worker_class": args.worker,
        "workers": args.workers or (1 if args.worker == "gthread" else 4),
        # gunicorn runs gthread instead of sync when threads > 1.
        "threads": args.threads if args.worker == "gthread" else 1,
        "timeout": args.timeout,
        # Its control socket is one path per user ($HOME/.gunicorn/gunicorn.ctl), which the
        # upstreams of tests running at once would contend for; the tests do not use it.
        "control_socket_disable": True,
        "errorlog": "-",
        "loglevel": "info",
        "when_ready": when_ready,
    }
    if args.certfile:
        options["certfile"] = args.certfile
        options["keyfile"] = args.keyfile

    class Gunicorn(BaseApplication):
        def load_config(self):
            for key, value in options.items():
                self.cfg.set(key, value)

        def load(self):
            return app

    common.watch_stdin()
    Gunicorn().run()


if __name__ == "__main__":
    main()
