"""An ASGI app served by uvicorn (its h11 HTTP/1.1 protocol): the asyncio upstream the proxy's
tests talk to, and the one that can send what a WSGI app may not (hop-by-hop fields).

    python3 asgi_app.py [--port N | --unix PATH]

Routes (every one but /echo and /upload ignores the method and the body):

    /echo            JSON: method, path, target, query, http_version, headers exactly as
                     uvicorn passed them (in order, repeats kept, names lower-cased by h11),
                     body length and SHA-256, client address, and the address the request
                     arrived at (`local`: which of several upstreams answered)
    /bytes/N         N bytes of the pattern (`i % 251`), with Content-Length
    /chunked/N       the same without Content-Length (so chunked)
    /upload          JSON {"length", "sha256"} of the request body, hashed as it arrives
    /status/CODE     that status (200-599), the code and a newline as the body (none for
                     204 and 304)
    /slow/MS         sleeps MS milliseconds, then answers
    /stall           declares 1024 bytes, sends 512, then hangs until the client goes (or an hour)
    /die             declares 1024 bytes, sends 512, then resets the connection (RST; over a
                     unix socket, which has no reset, it closes)
    /trailers        the body, then `x-checksum` as a trailer where uvicorn offers the ASGI
                     trailers extension (HTTP/2 only); over HTTP/1.1, `x-trailers: unsupported`
    /cached          ETag "v1"; 304 when If-None-Match names it (or is *)
    /headers?K=V&..  adds each K: V (percent-decoded) to the response, hop-by-hop ones included
"""

import asyncio
import hashlib
import json
import os
import socket
import struct
import sys
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

PARTIAL_DECLARED = 1024
PARTIAL_SENT = 512
STALL_SECONDS = 3600
ETAG = b'"v1"'

# The transport of each open TCP connection, by the client's (host, port) as the scope gives it,
# so that /die can reset its own connection (ASGI gives an app no handle on its socket).
TRANSPORTS = {}


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return
    parts = scope["path"].strip("/").split("/")
    route, arg = parts[0], (parts[1] if len(parts) > 1 else "")

    if route == "echo":
        await echo(scope, receive, send)
    elif route in ("bytes", "chunked") and arg.isdigit():
        n = int(arg)
        headers = [(b"content-type", b"application/octet-stream")]
        if route == "bytes":
            headers.append((b"content-length", str(n).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for block in common.pattern(n):
            await send({"type": "http.response.body", "body": block, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif route == "upload":
        digest = await read_body(receive)
        await reply(send, 200, json.dumps(digest.report()) + "\n", b"application/json")
    elif route == "status" and arg.isdigit() and 200 <= int(arg) <= 599:
        code = int(arg)
        if code in (204, 304):
            await send({"type": "http.response.start", "status": code, "headers": []})
            await send({"type": "http.response.body", "body": b""})
        else:
            await reply(send, code, f"{code}\n")
    elif route == "slow" and arg.isdigit():
        await asyncio.sleep(int(arg) / 1000)
        await reply(send, 200, f"slept {arg} ms\n")
    elif route in ("stall", "die"):
        await partial(scope, receive, send, route)
    elif route == "trailers":
        await trailers(scope, send)
    elif route == "cached":
        tags = [t.strip() for v in header_values(scope, b"if-none-match") for t in v.split(b",")]
        if ETAG in tags or b"*" in tags:
            await send({"type": "http.response.start", "status": 304, "headers": [(b"etag", ETAG)]})
            await send({"type": "http.response.body", "body": b""})
        else:
            headers = [(b"etag", ETAG), (b"content-type", b"text/plain"), (b"content-length", b"7")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b"cached\n"})
    elif route == "headers":
        query = urllib.parse.parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True, encoding="latin-1")
        headers = [(b"content-type", b"text/plain")] + [(k.encode("latin-1"), v.encode("latin-1")) for k, v in query]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"headers set\n"})
    elif route == "":
        await reply(send, 200, __doc__)
    else:
        await reply(send, 404, "no such route\n")


def header_values(scope, name):
    return [v for k, v in scope["headers"] if k == name]


async def reply(send, status, text, content_type=b"text/plain"):
    body = text.encode()
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def read_body(receive):
    digest = common.BodyDigest()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return digest
        digest.update(message.get("body", b""))
        if not message.get("more_body", False):
            return digest


async def echo(scope, receive, send):
    digest = await read_body(receive)
    target = scope["raw_path"] + (b"?" + scope["query_string"] if scope["query_string"] else b"")
    client = scope.get("client")
    server = scope.get("server")
    report = {
        "server": "uvicorn",
        "method": scope["method"],
        "path": scope["path"],
        "target": target.decode("latin-1"),
        "query": scope["query_string"].decode("latin-1"),
        "http_version": scope["http_version"],
        "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]],
        "body_length": digest.length,
        "body_sha256": digest.sha.hexdigest(),
        "client": f"{client[0]}:{client[1]}" if client else "",
        # (host, port), or (path, None) on a unix socket.
        "local": (f"{server[0]}:{server[1]}" if server[1] is not None else server[0]) if server else "",
    }
    await reply(send, 200, json.dumps(report) + "\n", b"application/json")


async def partial(scope, receive, send, route):
    headers = [(b"content-type", b"application/octet-stream"), (b"content-length", str(PARTIAL_DECLARED).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": next(common.pattern(PARTIAL_SENT)), "more_body": True})
    if route == "stall":
        async def until_disconnect():
            while (await receive())["type"] != "http.disconnect":
                pass

        try:
            await asyncio.wait_for(until_disconnect(), STALL_SECONDS)
        except asyncio.TimeoutError:
            pass
        return
    client = scope.get("client")
    transport = TRANSPORTS.get(tuple(client)) if client else None
    if transport is None:
        raise RuntimeError("/die over a unix socket: closing (a unix socket has no reset)")
    sock = transport.get_extra_info("socket")
    # SO_LINGER on, 0 seconds: closing sends RST instead of FIN.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


async def trailers(scope, send):
    body = b"a body with a trailer\n"
    if "http.response.trailers" in scope.get("extensions", {}):
        await send({"type": "http.response.start", "status": 200, "trailers": True,
                    "headers": [(b"content-type", b"text/plain"), (b"trailer", b"x-checksum")]})
        await send({"type": "http.response.body", "body": body})
        checksum = hashlib.sha256(body).hexdigest().encode()
        await send({"type": "http.response.trailers", "headers": [(b"x-checksum", checksum)]})
    else:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"x-trailers", b"unsupported")]})
        await send({"type": "http.response.body", "body": body})


def main():
    args = common.arguments("uvicorn serving the test ASGI app")
    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Protocol(H11Protocol):
        """uvicorn's h11 protocol, recording each TCP connection's transport for /die."""

        def connection_made(self, transport):
            super().connection_made(transport)
            peer = transport.get_extra_info("peername")
            if isinstance(peer, tuple):
                self.lowlat_peer = peer[:2]
                TRANSPORTS[self.lowlat_peer] = transport

        def connection_lost(self, exc):
            TRANSPORTS.pop(getattr(self, "lowlat_peer", None), None)
            super().connection_lost(exc)

    class Server(uvicorn.Server):
        async def startup(self, sockets=None):
            await super().startup(sockets=sockets)
            common.ready(common.where(sockets[0]))

    sock = common.listen(args)
    config = uvicorn.Config(app, http=Protocol, ws="none", lifespan="off", access_log=False, log_level="info")
    common.watch_stdin()
    Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
