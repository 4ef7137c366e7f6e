"""What the test upstreams share: the command line that says where to listen, the listening
socket, the ready line, the byte pattern of their downloads, and the watchdog that ends them when
the test that started them goes away.

Every upstream is started as `python3 SCRIPT [--port N | --unix PATH] [its own flags]` and prints
one line on stdout once it accepts connections:

    listening on http://127.0.0.1:PORT      (ws:// for the WebSocket echo)
    listening on unix:/path/to/socket

Nothing else is printed on stdout; logs go to stderr.
"""

import argparse
import hashlib
import http
import os
import signal
import socket
import stat
import sys
import threading

# Downloads are the bytes `i % 251` for i = 0, 1, 2, ...: a period that is prime (and not a power
# of two) makes a dropped, repeated or reordered block show as a wrong byte.
PATTERN_PERIOD = 251
# One block of the pattern, a whole number of periods (251 × 256 = 64,256 bytes), so that
# sending it again and again continues the pattern; a download holds only this in memory.
PATTERN_BLOCK = bytes(i % PATTERN_PERIOD for i in range(PATTERN_PERIOD * 256))

# What the upload and echo routes read at a time: the body is hashed as it arrives, never held.
READ_SIZE = 64 * 1024


def pattern(n):
    """Yields the first `n` bytes of the pattern, block by block."""
    while n >= len(PATTERN_BLOCK):
        yield PATTERN_BLOCK
        n -= len(PATTERN_BLOCK)
    if n > 0:
        yield PATTERN_BLOCK[:n]


class BodyDigest:
    """The length and SHA-256 of a body fed to it piece by piece."""

    def __init__(self):
        self.length = 0
        self.sha = hashlib.sha256()

    def update(self, data):
        self.length += len(data)
        self.sha.update(data)

    def report(self):
        return {"length": self.length, "sha256": self.sha.hexdigest()}


def arguments(description, extra=None):
    """Parses `--port N` / `--unix PATH` (and the script's own flags, added by `extra`)."""
    parser = argparse.ArgumentParser(description=description)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: any free one)")
    where.add_argument("--unix", metavar="PATH", help="listen on this unix socket instead")
    if extra is not None:
        extra(parser)
    return parser.parse_args()


def listen(args, backlog=1024):
    """The listening socket the arguments ask for."""
    if args.unix:
        if os.path.exists(args.unix):
            os.unlink(args.unix)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(args.unix)
    else:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", args.port))
    sock.listen(backlog)
    return sock


def where(sock, scheme="http"):
    """What the ready line says of a listening socket: `http://127.0.0.1:PORT` or `unix:PATH`."""
    if sock.family == socket.AF_UNIX:
        return "unix:" + sock.getsockname()
    host, port = sock.getsockname()[:2]
    return f"{scheme}://{host}:{port}"


def ready(address):
    """Prints the ready line; the test reads it, and nothing else, from stdout."""
    sys.stdout.write(f"listening on {address}\n")
    sys.stdout.flush()


def watch_stdin():
    """Ends this process and its process group (gunicorn's workers) when stdin reaches end of
    file: the test holds the pipe's other end, so the upstream dies with the test, even one that
    was killed. A no-op when stdin is not a pipe (started by hand in a terminal)."""
    try:
        if not stat.S_ISFIFO(os.fstat(0).st_mode):
            return
    except OSError:
        return

    def wait_for_eof():
        while os.read(0, 4096):
            pass
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
        os._exit(0)

    threading.Thread(target=wait_for_eof, name="stdin-watchdog", daemon=True).start()


def reason(code):
    """The reason phrase of a status code, or `Unknown` for codes no RFC names."""
    try:
        return http.HTTPStatus(code).phrase
    except ValueError:
        return "Unknown"
