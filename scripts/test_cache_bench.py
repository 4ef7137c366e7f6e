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
        self.assertTrue(compare.await_port(self.port), "cache-origin.py did not listen")

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


class MissScenario(unittest.TestCase):
    def test_every_request_a_new_url(self):
        # wrk runs unique.lua: each request's target is the scenario's path with a query no
        # other request (of this run or another) has.
        argv = compare.wrk_argv("http://127.0.0.1:1/cache/100.html", 16, 1, 8,
                                script=compare.SCENARIO_SCRIPTS["cache-miss"])
        self.assertEqual(argv[-3:], ["-s", str(KIT / "unique.lua"), "http://127.0.0.1:1/cache/100.html"])
        lua = (KIT / "unique.lua").read_text()
        self.assertIn('wrk.path .. "?n=" .. prefix', lua)
        self.assertEqual(compare.SCENARIOS["cache-miss"][0], compare.CACHE_PATH)
        # Without a script, the URL alone, as before.
        self.assertEqual(compare.wrk_argv("http://x/", 16, 1, 8)[-1], "http://x/")

    def test_the_origin_answers_misses_at_full_speed(self):
        # With only miss scenarios and a lowlat binary, the origin is `lowlat serve`: it must
        # answer on the origin's port with the Cache-Control the caches need.
        binary = Path(__file__).resolve().parent.parent / "target" / "debug" / "lowlat"
        if not binary.exists():
            self.skipTest("no target/debug/lowlat (built by scripts/test.sh)")
        with tempfile.TemporaryDirectory() as www:
            (Path(www) / "cache").mkdir()
            (Path(www) / "cache" / "100.html").write_bytes(b"x" * 100)
            port = free_port()
            old = compare.CACHE_UPSTREAM_PORT
            compare.CACHE_UPSTREAM_PORT = port
            try:
                origin = compare.start_cache_origin(www, ["cache-miss"], str(binary))
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/cache/100.html?n=1", timeout=10) as r:
                        self.assertEqual(r.read(), b"x" * 100)
                        self.assertEqual(r.headers["Cache-Control"], "public, max-age=3600")
                finally:
                    origin.terminate()
                    origin.wait()
            finally:
                compare.CACHE_UPSTREAM_PORT = old
