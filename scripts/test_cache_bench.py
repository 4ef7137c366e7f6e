#!/usr/bin/env python3
"""Tests for the bench kit's cache scenario: cache-origin.py (a real process on a free port) marks
what it serves cacheable and counts its requests per path, and compare.py's lines below the table
(each cache's origin requests, lowlat's hit ÷ file ratio). Run: python3 -m unittest discover -s
scripts -p 'test_*.py'"""
import importlib.util
import json
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request
from pathlib import Path

KIT = Path(__file__).resolve().parent.parent / "bench" / "kit"
spec = importlib.util.spec_from_file_location("compare", KIT / "compare.py")
compare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CacheOrigin(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        (Path(self.dir.name) / "cache").mkdir()
        (Path(self.dir.name) / "cache" / "100.html").write_bytes(b"X" * 99 + b"\n")
        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, str(KIT / "cache-origin.py"), str(self.port), self.dir.name],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError:
                self.assertLess(time.time(), deadline, "cache-origin.py did not listen")
                time.sleep(0.05)

    def tearDown(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.dir.cleanup()

    def get(self, path, method="GET"):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method)
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.headers, r.read()

    def test_cacheable_and_counted(self):
        status, headers, body = self.get("/cache/100.html")
        self.assertEqual((status, body), (200, b"X" * 99 + b"\n"))
        self.assertEqual(headers["Cache-Control"], "public, max-age=3600")
        self.get("/cache/100.html", "HEAD")
        _, headers, body = self.get("/_origin/requests")
        # the counts themselves are neither counted nor cacheable
        self.assertEqual(json.loads(body), {"/cache/100.html": 2})
        self.assertEqual(headers.get_all("Cache-Control"), ["no-store"])
        self.assertEqual(json.loads(self.get("/_origin/requests")[2]), {"/cache/100.html": 2})


def rec(rps, busy):
    return {"rps": rps, "server_core_busy_pct": busy}


class CacheLines(unittest.TestCase):
    def test_table(self):
        results = {("cache", 16, "lowlat"): [rec(50000, 50.0)],        # 10 µs per hit
                   ("cache-static", 16, "lowlat"): [rec(62500, 50.0)],  # 8 µs per file
                   ("cache", 16, "nginx"): [rec(20000, 100.0)]}
        # (name, fetched, lines)
        cases = [
            ("every cache asked once", {"lowlat": 1, "nginx": 1},
             ["origin requests for /cache/100.html over the cache scenario (1 = every other request a hit): "
              "lowlat 1, nginx 1",
              "lowlat c=16: server µs per cache hit ÷ per the same bytes as a file (cache-static) = 1.25"]),
            ("a cache that does not store is called out", {"lowlat": 1, "nginx": 41230},
             ["origin requests for /cache/100.html over the cache scenario (1 = every other request a hit): "
              "lowlat 1, nginx 41230 (NOT ALL HITS)",
              "lowlat c=16: server µs per cache hit ÷ per the same bytes as a file (cache-static) = 1.25"]),
            ("lowlat's ratio is not a hit's when lowlat did not store", {"lowlat": 1042, "nginx": 1},
             ["origin requests for /cache/100.html over the cache scenario (1 = every other request a hit): "
              "lowlat 1042 (NOT ALL HITS), nginx 1",
              "lowlat c=16: server µs per cache hit ÷ per the same bytes as a file (cache-static) = 1.25 "
              "-- NOT hits: the origin was asked 1042 times"]),
        ]
        for name, fetched, lines in cases:
            with self.subTest(name):
                self.assertEqual(compare.cache_lines(results, fetched), lines)

    def test_no_ratio_without_the_file_run(self):
        results = {("cache", 16, "lowlat"): [rec(50000, 50.0)]}
        self.assertEqual(compare.cache_lines(results, {}), [])


if __name__ == "__main__":
    unittest.main()
