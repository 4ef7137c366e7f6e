#!/usr/bin/env python3
"""Tests for soak.py's verdict: each way a soak must fail (a leak of memory or descriptors, more
threads, errors and non-2xx answers, latency drift, connections or sockets held after the load,
a server that died or panicked, a bad client answered otherwise than promised), and a healthy run
passing; its sampler and descriptor census on real processes (one that leaks memory and
descriptors is caught, one that does not passes); its schedule, and the parsers of the loaders'
reports. The soak itself runs in the test suite (crates/lowlat/tests/soak.rs). Run: python3 -m
unittest discover -s scripts -p 'test_*.py'"""
import copy
import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("soak", HERE / "soak.py")
soak = importlib.util.module_from_spec(spec)
spec.loader.exec_module(soak)

LIMITS = soak.Limits()


def samples(n=30, interval=10.0, rss_kb=lambda i: 40_000, fds=lambda i: 200, threads=lambda i: 5):
    return [{"t": i * interval, "phase": "load", "rss_kb": rss_kb(i), "fds": fds(i), "threads": threads(i),
             "conns_open": 60, "quic_open": 6} for i in range(n)]


def segments(lanes=("h1", "h2"), n=5, seg=60.0, p99=lambda lane, i: 2.0, **extra):
    out = []
    for lane in lanes:
        for i in range(n):
            s = {"lane": lane, "start": i * seg, "end": (i + 1) * seg, "seconds": seg, "responses": 1000,
                 "errors": {}, "status": {"200": 1000}, "p50_ms": 0.5, "p99_ms": p99(lane, i)}
            s.update(extra)
            out.append(s)
    return out


def healthy():
    return {
        "config": {"duration": 300.0, "interval": 10.0, "warmup": 60.0},
        "server": {"exit_code": 0, "panics": [], "error_lines": []},
        "samples": samples(),
        "segments": segments(),
        "events": [{"t": 100, "kind": "reload", "ok": True}],
        "checks": {"run": 300, "failed": 0, "failures": []},
        "bad_clients": {"total": 100, "unexpected": 0, "failures": []},
        "idle_start": {"fds": 20},
        "drain": {"conns_open": 0, "quic_open": 0, "upstream_active": 0, "upstream_idle": 10, "fds": 32,
                  "fd_census": {"eventpoll": 3, "tcp listen": 3, "to upstream ESTABLISHED": 10, "udp": 2}},
        "cache": {"hits": 1000, "stored": 400, "objects_max": 50},
    }


class Verdict(unittest.TestCase):
    def fails(self, run):
        return soak.judge(run, LIMITS)

    def assertFailsWith(self, run, text):
        fails = self.fails(run)
        self.assertTrue(any(text in f for f in fails), f"{text!r} not in {fails}")

    def test_a_healthy_run_passes(self):
        self.assertEqual(self.fails(healthy()), [])

    def test_rss_growing_after_warm_up_is_a_leak(self):
        run = healthy()
        run["samples"] = samples(rss_kb=lambda i: 40_000 + 1_000 * i)  # +25 MiB over the run
        self.assertFailsWith(run, "RSS grew")

    def test_rss_wobbling_within_the_bound_passes(self):
        run = healthy()
        run["samples"] = samples(rss_kb=lambda i: 40_000 + (1_500 if i % 2 else -1_500))
        self.assertEqual(self.fails(run), [])

    def test_rss_growth_during_warm_up_is_not_counted(self):
        run = healthy()
        run["samples"] = samples(rss_kb=lambda i: 10_000 + 5_000 * i if i < 6 else 40_000)
        self.assertEqual(self.fails(run), [])

    def test_descriptors_growing_are_a_leak(self):
        run = healthy()
        run["samples"] = samples(fds=lambda i: 200 + 3 * i)
        self.assertFailsWith(run, "descriptors grew")

    def test_more_threads_fail(self):
        run = healthy()
        run["samples"] = samples(threads=lambda i: 5 if i < 20 else 6)
        self.assertFailsWith(run, "threads grew")

    def test_too_few_samples_cannot_pass(self):
        run = healthy()
        run["samples"] = samples(n=7)
        self.assertFailsWith(run, "too few samples")

    def test_p99_drift_fails(self):
        run = healthy()
        run["segments"] = segments(n=12, p99=lambda lane, i: 2.0 if i < 6 or lane == "h1" else 12.0)
        fails = self.fails(run)
        self.assertTrue(any(f.startswith("h2: p99 drifted from 2.00 ms to 12.00 ms") for f in fails), fails)
        self.assertFalse(any(f.startswith("h1:") for f in fails), fails)

    def test_p99_doubling_below_the_floor_passes(self):
        run = healthy()
        run["segments"] = segments(n=12, p99=lambda lane, i: 1.0 if i < 6 else 3.0)
        self.assertEqual(self.fails(run), [])

    def test_p99_of_one_noisy_segment_at_the_end_does_not_fail(self):
        run = healthy()
        run["segments"] = segments(n=12, p99=lambda lane, i: 50.0 if i == 11 else 2.0)
        self.assertEqual(self.fails(run), [])

    def test_warm_up_segments_are_not_the_baseline(self):
        run = healthy()
        run["segments"] = segments(n=12, p99=lambda lane, i: 100.0 if i == 0 else 2.0)
        self.assertEqual(self.fails(run), [])

    def test_failed_requests_fail(self):
        run = healthy()
        run["segments"][3]["errors"] = {"timeout": 2, "read": 1}
        self.assertFailsWith(run, "h1: 3 failed requests (timeout 2, read 1)")

    def test_non_2xx_answers_fail(self):
        run = healthy()
        run["segments"][7]["status"] = {"200": 990, "502": 10}
        self.assertFailsWith(run, "h2: 10 non-2xx answers (502 x10)")

    def test_a_segment_without_responses_fails(self):
        run = healthy()
        run["segments"][2]["responses"] = 0
        self.assertFailsWith(run, "h1: no response in the segment at 2m00s")

    def test_a_loader_that_broke_fails(self):
        run = healthy()
        run["segments"][1]["failure"] = "lowlat load exited 1: no response received"
        self.assertFailsWith(run, "h1: lowlat load exited 1")

    def test_the_server_dying_comes_first(self):
        run = healthy()
        run["server"].update({"died_at": 130.0, "exit_code": -11})
        run["segments"][3]["errors"] = {"connect": 50}
        self.assertTrue(self.fails(run)[0].startswith("the server died at 2m10s (exit -11)"))

    def test_a_panic_fails(self):
        run = healthy()
        run["server"]["panics"] = ["thread 'worker-0' panicked at crates/server/src/conn.rs:1:1"]
        self.assertFailsWith(run, "the server panicked")

    def test_an_unclean_exit_fails(self):
        run = healthy()
        run["server"]["exit_code"] = 1
        self.assertFailsWith(run, "exited 1 on SIGTERM")

    def test_error_lines_fail(self):
        run = healthy()
        run["server"]["error_lines"] = ["2026-11-29T00:00:00Z ERROR worker 1: epoll_wait failed"]
        self.assertFailsWith(run, "ERROR lines")

    def test_a_failed_event_fails(self):
        run = healthy()
        run["events"].append({"t": 200, "kind": "reload", "ok": False, "detail": "generation 3 not served"})
        self.assertFailsWith(run, "reload at 3m20s failed: generation 3 not served")

    def test_a_bad_client_answered_otherwise_fails(self):
        run = healthy()
        run["bad_clients"].update({"unexpected": 1, "failures": ["slowloris at 1m00s: no 408"]})
        self.assertFailsWith(run, "bad clients: 1 of 100 not answered as promised, first: slowloris")

    def test_content_check_failures_fail(self):
        run = healthy()
        run["checks"].update({"failed": 1, "failures": ["1m00s: h2 /cdn/o23.txt: wrong body (12 bytes)"]})
        self.assertFailsWith(run, "content checks: 1 of 300 failed")

    def test_connections_still_open_after_the_load_fail(self):
        run = healthy()
        run["drain"].update({"conns_open": 3, "waited": 45})
        self.assertFailsWith(run, "3 client connections still open 45s after the load stopped")

    def test_client_sockets_held_after_the_load_fail(self):
        run = healthy()
        run["drain"]["fd_census"]["from client CLOSE_WAIT"] = 4
        run["drain"]["fds"] += 4
        self.assertFailsWith(run, "4 client sockets still held after the load stopped (CLOSE_WAIT 4)")

    def test_upstream_sockets_the_pool_does_not_count_fail(self):
        run = healthy()
        run["drain"]["fd_census"]["to upstream ESTABLISHED"] = 30
        self.assertFailsWith(run, "30 sockets to upstreams after the load stopped, where the pools count 10")

    def test_descriptors_not_given_back_fail(self):
        run = healthy()
        run["drain"]["fds"] = 60
        run["drain"]["fd_census"]["file"] = 28
        self.assertFailsWith(run, "descriptors not given back: 60 open")

    def test_a_cache_that_never_refilled_fails(self):
        run = healthy()
        run["cache"] = {"hits": 1000, "stored": 50, "objects_max": 50}
        self.assertFailsWith(run, "the cache never refilled")

    def test_metrics_not_answering_fails(self):
        run = healthy()
        run["samples"][10]["metrics_error"] = "TimeoutError: timed out"
        self.assertFailsWith(run, "/metrics did not answer 1 times")

    def test_the_input_is_not_changed(self):
        run = healthy()
        run["samples"] = samples(rss_kb=lambda i: 40_000 + 1_000 * i)
        before = copy.deepcopy(run)
        self.fails(run)
        self.assertEqual(run, before)


class Report(unittest.TestCase):
    def test_the_chart_is_an_svg_with_a_line_per_series(self):
        import xml.dom.minidom
        run = healthy()
        run["config"].update({"duration": 300.0, "interval": 10.0, "warmup": 60.0})
        run["lanes"] = {"h1": {}, "h2": {}}
        run["segments"] = segments(p99=lambda lane, i: 0.5 * 10 ** i)  # 0.5 ms to 5 s: log scale
        run["verdict"] = {"pass": True, "failures": []}
        with tempfile.TemporaryDirectory() as d:
            soak.chart(run, Path(d) / "chart.svg")
            doc = xml.dom.minidom.parse(str(Path(d) / "chart.svg"))
        lines = doc.getElementsByTagName("polyline")
        self.assertEqual(len(lines), 1 + 3 + 2)  # RSS; descriptors and two connection counts; lanes
        labels = [t.firstChild.data for t in doc.getElementsByTagName("text") if t.firstChild]
        self.assertIn("10000", labels)  # the p99 panel's top decade


class Schedule(unittest.TestCase):
    def test_events_keep_off_the_measuring_windows(self):
        # 1 h, warm-up 2 m, samples every 10 s, calm 20 s: nothing in [100 s, 155 s) nor after
        # 3600 - 50 s.
        for every, phase in ((60, 60), (120, 90), (180, 72)):
            plan = soak.schedule(3600, 120, 10, 20, every, phase, "x")
            times = [t for t, _ in plan]
            self.assertTrue(times, every)
            self.assertFalse([t for t in times if 100 <= t < 155], (every, times))
            self.assertFalse([t for t in times if t >= 3550], (every, times))
            self.assertEqual(times, sorted(set(times)))
        self.assertEqual(len(soak.schedule(3600, 120, 10, 20, 60, 60, "reload")), 59)

    def test_a_two_minute_run_gets_each_kind(self):
        for every, phase in ((15, 15), (20, 15), (25, 10)):
            plan = soak.schedule(120, 25, 5, 15, every, phase, "x")
            self.assertGreaterEqual(len(plan), 2, (every, plan))

    def test_each_kind_happens_during_warm_up_first(self):
        for duration, warmup, interval, calm, every in (
                (3600, 120, 10, 20, {"reload": 60, "restart": 120, "burst": 180}),
                (120, 25, 5, 15, {"reload": 15, "restart": 20, "burst": 25})):
            plan = soak.chaos_plan(duration, warmup, interval, calm, every)
            for kind in every:
                times = [t for t, k in plan if k == kind]
                self.assertLess(times[0], warmup - calm, (kind, plan))
                self.assertGreaterEqual(len(times), 3, (kind, plan))
            self.assertEqual([t for t, _ in plan], sorted(t for t, _ in plan))

    def test_zero_means_never(self):
        self.assertEqual(soak.schedule(3600, 120, 10, 20, 0, 0, "burst"), [])


class Parsers(unittest.TestCase):
    def test_durations(self):
        for text, secs in (("90", 90), ("90s", 90), ("2m", 120), ("1h", 3600), ("1h30m", 5400), ("500ms", 0.5)):
            self.assertEqual(soak.parse_duration(text), secs)
        for bad in ("", "m", "2x", "1h 30m"):
            with self.assertRaises(Exception):
                soak.parse_duration(bad)

    def test_h2load(self):
        out = textwrap.dedent("""\
            finished in 2.99s, 200.48 req/s, 7.90KB/s
            requests: 600 total, 600 started, 598 done, 596 succeeded, 2 failed, 0 errored, 1 timeout
            status codes: 596 2xx, 0 3xx, 0 4xx, 2 5xx
            time for request:       64us      2.82ms       405us       326us    91.33%
            """)
        seg = soak.parse_h2load(out, "", 0)
        self.assertEqual(seg["responses"], 598)
        self.assertEqual(seg["status"]["5xx"], 2)
        self.assertEqual(seg["errors"], {"timeout": 1, "not_done": 2})
        self.assertEqual(seg["max_ms"], 2.82)
        self.assertIn("failure", soak.parse_h2load("", "connect failed", 1))

    def test_oha(self):
        out = ('{"summary": {"slowest": 0.0155}, "latencyPercentiles": {"p50": 0.0005, "p99": 0.004, '
               '"p99.9": 0.01}, "statusCodeDistribution": {"200": 300}, "errorDistribution": '
               '{"connection closed": 1}}')
        seg = soak.parse_oha(out, "", 0)
        self.assertEqual((seg["responses"], seg["p99_ms"], seg["max_ms"]), (300, 4.0, 15.5))
        self.assertEqual(seg["errors"], {"connection closed": 1})

    def test_lowlat_load(self):
        out = ('{"responses": 400, "errors": {"connect": 0, "timeout": 1, "total": 1}, "status_codes": '
               '{"200": 399, "502": 1}, "latency_us": {"p50": 247, "p99": 2461, "p99_9": 6023, "max": 6023}}')
        seg = soak.parse_lowlat_load(out, "", 0)
        self.assertEqual(seg["p99_ms"], 2.461)
        self.assertEqual(seg["errors"], {"connect": 0, "timeout": 1})
        self.assertIn("failure", soak.parse_lowlat_load(out, "", 3))

    def test_metrics_and_histogram_quantile(self):
        text = textwrap.dedent("""\
            # TYPE x counter
            lowlat_connections_open 7
            lowlat_upstream_connections{group="a",server="s",state="idle"} 3
            lowlat_upstream_connections{group="b",server="s",state="idle"} 2
            lowlat_upstream_connections{group="b",server="s",state="active"} 1
            lowlat_request_duration_seconds_bucket{le="0.001"} 90
            lowlat_request_duration_seconds_bucket{le="0.01"} 99
            lowlat_request_duration_seconds_bucket{le="+Inf"} 100
            """)
        m = soak.parse_metrics(text)
        self.assertEqual(soak.metric_sum(m, "lowlat_connections_open"), 7)
        self.assertEqual(soak.metric_sum(m, "lowlat_upstream_connections", 'state="idle"'), 5)
        after = soak.histogram(m, "lowlat_request_duration_seconds")
        self.assertEqual(soak.histogram_quantile(None, after, 0.5), 0.001)
        self.assertEqual(soak.histogram_quantile(None, after, 0.99), 0.01)
        before = [(0.001, 90), (0.01, 90), (float("inf"), 90)]
        self.assertEqual(soak.histogram_quantile(before, after, 0.5), 0.01)
        self.assertIsNone(soak.histogram_quantile(after, after, 0.99))


LEAKER = """
import os, sys, time
held, files = [], []
print("ready", flush=True)
while True:
    if sys.argv[1] == "leak":
        held.append(bytearray(os.urandom(512 * 1024)))
        files.append(open(os.devnull))
    time.sleep(0.05)
"""


class RealProcesses(unittest.TestCase):
    """The sampler reads /proc of a real process: one that leaks is caught, one that does not
    passes."""

    def watch(self, mode, seconds=3.0, interval=0.1):
        p = subprocess.Popen([sys.executable, "-c", LEAKER, mode], stdout=subprocess.PIPE)
        try:
            p.stdout.readline()
            out = []
            t0 = time.monotonic()
            while time.monotonic() - t0 < seconds:
                s = {"t": time.monotonic() - t0, "phase": "load"}
                s.update(soak.proc_sample(p.pid))
                out.append(s)
                time.sleep(interval)
            return out
        finally:
            p.kill()
            p.wait()

    def verdict(self, watched):
        run = healthy()
        run["samples"] = watched
        run["config"].update({"warmup": 0.5, "interval": 0.1})
        return soak.judge(run, LIMITS)

    def test_a_leaking_process_is_caught(self):
        fails = self.verdict(self.watch("leak"))
        self.assertTrue(any(f.startswith("RSS grew") for f in fails), fails)
        self.assertTrue(any(f.startswith("descriptors grew") for f in fails), fails)

    def test_a_steady_process_passes(self):
        self.assertEqual(self.verdict(self.watch("steady")), [])

    def test_the_census_tells_a_socket_closed_by_its_peer(self):
        listener = socket.create_server(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        client.close()
        time.sleep(0.1)
        try:
            census = soak.fd_census(os.getpid(), {port}, set())
            self.assertGreaterEqual(census.get("tcp listen", 0), 1, census)
            self.assertEqual(census.get("from client CLOSE_WAIT"), 1, census)
        finally:
            accepted.close()
            listener.close()


if __name__ == "__main__":
    unittest.main()
