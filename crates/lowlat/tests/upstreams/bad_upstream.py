"""An HTTP/1.1 upstream that misbehaves on purpose, in one of a few shapes, written with plain
sockets (no server library would send these): what the proxy must refuse, or survive.

    python3 bad_upstream.py KIND [--port N | --unix PATH]

For each connection it reads a request head (and a Content-Length body), then, by KIND:

    cl-and-te               Content-Length and Transfer-Encoding: chunked together
    two-content-lengths     two Content-Length fields that disagree
    oversized-head          a response head of more than 1 MiB (1024 filler fields)
    malformed-status-line   `HTTP/1.1 2x0 OK`
    cr-in-header-value      a field value holding a bare CR before `Set-Cookie: injected=1`
    lf-in-header-value      a field value holding a bare LF before `Set-Cookie: injected=1`
    close-before-response   closes without sending a byte
    never-answers           sends nothing and keeps the connection open until the peer closes
    close-after-response    a complete keep-alive response (no `Connection: close`), then FIN:
                            the next request on the connection finds it closed
    reset-mid-body          declares 1024 body bytes, sends 512, then RST
    close-delimited         a valid response with no length, its end marked by closing
    chunked-trailers        a valid chunked response with a trailer field; keeps the connection
    unasked-101             `101 Switching Protocols` to whatever was asked (an upgrade or not),
                            then a whole second response as raw bytes: response splitting, if a
                            proxy took the 101 for a tunnel nobody offered

The bytes of each response are RESPONSES[kind] below (the Rust helper holds the same bytes and
the tests compare them). After a response it closes the connection (sending FIN, after draining
what the peer still sends) unless the kind says otherwise.
"""

import os
import socket
import struct
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

# Requests with heads longer than this are answered all the same: the fixture has no limits.
MAX_REQUEST_HEAD_BYTES = 1 << 20

OK = b"HTTP/1.1 200 OK\r\n"
FILLER_FIELDS = 1024
FILLER_VALUE_BYTES = 1024


def oversized_head():
    fields = b"".join(b"X-Filler-%04d: %s\r\n" % (i, b"a" * FILLER_VALUE_BYTES) for i in range(FILLER_FIELDS))
    return OK + fields + b"Content-Length: 2\r\n\r\nok"


RESPONSES = {
    "cl-and-te": OK + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "two-content-lengths": OK + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    "oversized-head": oversized_head(),
    "malformed-status-line": b"HTTP/1.1 2x0 OK\r\nContent-Length: 2\r\n\r\nok",
    "cr-in-header-value": OK + b"X-Injected: a\rSet-Cookie: injected=1\r\nContent-Length: 2\r\n\r\nok",
    "lf-in-header-value": OK + b"X-Injected: a\nSet-Cookie: injected=1\r\nContent-Length: 2\r\n\r\nok",
    "close-before-response": b"",
    "never-answers": b"",
    "close-after-response": OK + b"Content-Length: 2\r\n\r\nok",
    "reset-mid-body": OK + b"Content-Length: 1024\r\n\r\n" + b"".join(common.pattern(512)),
    "close-delimited": OK + b"Connection: close\r\n\r\nthe end is the close\n",
    "chunked-trailers": OK
    + b"Transfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n5\r\nhello\r\n0\r\nX-Checksum: 5d41402a\r\n\r\n",
    "unasked-101": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
    + OK
    + b"Content-Length: 8\r\n\r\nsmuggled",
}


def read_request(conn, buf):
    """Reads one request head and its Content-Length body from `conn`; returns what follows it,
    or None at end of file."""
    while b"\r\n\r\n" not in buf:
        data = conn.recv(65536)
        if not data or len(buf) > MAX_REQUEST_HEAD_BYTES:
            return None
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            length = int(value.strip())
    while len(rest) < length:
        data = conn.recv(65536)
        if not data:
            return None
        rest += data
    return rest[length:]


def drain_and_close(conn):
    """FIN, then read until the peer closes (or 5 s), so that closing does not reset a response
    the peer has not read yet."""
    try:
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(5)
        while conn.recv(65536):
            pass
    except OSError:
        pass
    conn.close()


def serve(conn, kind):
    response = RESPONSES[kind]
    buf = b""
    try:
        while True:
            buf = read_request(conn, buf)
            if buf is None:
                conn.close()
                return
            if kind == "never-answers":
                while conn.recv(65536):
                    pass
                conn.close()
                return
            conn.sendall(response)
            if kind == "chunked-trailers":
                continue
            if kind == "reset-mid-body":
                # SO_LINGER on, 0 seconds: close() sends RST instead of FIN.
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()
                return
            if kind == "close-after-response":
                # No drain: the FIN follows the response at once, as a server that timed the
                # connection out just then would send it.
                conn.shutdown(socket.SHUT_WR)
                conn.close()
                return
            drain_and_close(conn)
            return
    except OSError:
        conn.close()


def main():
    def flags(parser):
        parser.add_argument("kind", choices=sorted(RESPONSES))

    args = common.arguments("an HTTP/1.1 upstream that misbehaves on purpose", flags)
    sock = common.listen(args)
    common.watch_stdin()
    common.ready(common.where(sock))
    while True:
        conn, _ = sock.accept()
        threading.Thread(target=serve, args=(conn, args.kind), daemon=True).start()


if __name__ == "__main__":
    main()
