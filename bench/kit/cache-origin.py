#!/usr/bin/env python3
"""The caches' origin (compare.py's `cache` scenario, and varnish's backend in every scenario):
serves the run's document root with `Cache-Control: public, max-age=3600`, so that every cache in
front of it may store what it answers, and counts the requests it answers per path, so that
compare.py can check that a cache asked for the page once and answered every later request
itself. GET /_origin/requests answers the counts as JSON ({path: requests}) and is not counted.
Pinned beside the load generator by compare.py. Usage: cache-origin.py PORT DIR"""
import functools
import json
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

COUNTS = {}
LOCK = threading.Lock()


class Cacheable(SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path == "/_origin/requests":
            with LOCK:
                body = json.dumps(COUNTS).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            SimpleHTTPRequestHandler.end_headers(self)
            self.wfile.write(body)
            return
        self.count()
        super().do_GET()

    def do_HEAD(self):
        self.count()
        super().do_HEAD()

    def count(self):
        with LOCK:
            COUNTS[self.path] = COUNTS.get(self.path, 0) + 1

    def end_headers(self):
        self.send_header("Cache-Control", "public, max-age=3600")
        super().end_headers()

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])),
                    functools.partial(Cacheable, directory=sys.argv[2])).serve_forever()
