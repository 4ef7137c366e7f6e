#!/usr/bin/env python3
"""Tests for cache-tests.py: the counting the caches are compared by (tables of tests and
results), the client's output read, published results counted from a folder, and a cache that
does not start reported in one line. Run: python3 -m unittest discover -s scripts -p 'test_*.py'"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "cache-tests.py"
spec = importlib.util.spec_from_file_location("cache_tests", SCRIPT)
cache_tests = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cache_tests)


def test(id, kind="required", counted=True, browser_only=False):
    return {"id": id, "kind": kind, "suite": "s", "counted": counted, "browser_only": browser_only,
            "depends_on": []}


# The suite in small: two required, one optimal, one check, one browser-only optimal (never run
# by the command-line client) and one Surrogate-Control test (run, not counted).
TESTS = [test("req-a"), test("req-b"), test("opt-a", "optimal"), test("chk-a", "check"),
         test("opt-browser", "optimal", browser_only=True), test("sur-a", counted=False)]
FAIL = ["Assertion", "Response 2 does not come from cache"]
SETUP = ["Setup", "Request 2 should have been conditional, but it was not."]


class Count(unittest.TestCase):
    def test_table(self):
        # (name, results, required not passed, optimal passed, ran)
        cases = [
            ("all pass", {"req-a": True, "req-b": True, "opt-a": True, "chk-a": True, "sur-a": True},
             [], ["opt-a"], 4),
            ("an assertion and a setup failure both count as not passed",
             {"req-a": FAIL, "req-b": SETUP, "opt-a": True, "chk-a": False, "sur-a": True},
             ["req-a", "req-b"], ["opt-a"], 4),
            ("a required test with no result is not counted as failed (the published figures)",
             {"req-a": True, "opt-a": FAIL, "chk-a": True, "sur-a": True}, [], [], 3),
            ("check tests and Surrogate-Control tests never count",
             {"req-a": True, "req-b": True, "opt-a": True, "chk-a": FAIL, "sur-a": FAIL},
             [], ["opt-a"], 4),
            ("a browser-only optimal result (browser data) counts as passed",
             {"req-a": True, "req-b": True, "opt-a": True, "chk-a": True, "opt-browser": True},
             [], ["opt-a", "opt-browser"], 4),
        ]
        for name, results, req_failed, opt_passed, ran in cases:
            with self.subTest(name):
                c = cache_tests.count(TESTS, results)
                self.assertEqual(c["required_not_passed"], req_failed)
                self.assertEqual(c["optimal_passed"], opt_passed)
                self.assertEqual(c["ran"], ran)
                self.assertEqual(c["required_total"], 2)
                self.assertEqual(c["optimal_total"], 2)  # the browser-only one among them
                self.assertEqual(c["expected"], 4)

    def test_surrogate_failures_listed_apart(self):
        c = cache_tests.count(TESTS, {"sur-a": FAIL, "req-a": True})
        self.assertEqual(c["surrogate_not_passed"], ["sur-a"])
        self.assertEqual(c["required_not_passed"], [])

    def test_summary_line(self):
        c = cache_tests.count(TESTS, {"req-a": FAIL, "req-b": True, "opt-a": True, "chk-a": True})
        self.assertEqual(cache_tests.summary("squid", c),
                         "squid: required not passed 1 of 2; optimal passed 1 of 2 (4 of 4 tests ran)")


class ClientOutput(unittest.TestCase):
    def test_results_map(self):
        text = json.dumps({"a": True, "b": FAIL})
        self.assertEqual(cache_tests.parse_client_output(text), {"a": True, "b": FAIL})

    def test_not_json(self):
        # what the client prints when it crashes: a stack trace, no results
        with self.assertRaisesRegex(ValueError, "printed no JSON results: Error: connect ECONNREFUSED"):
            cache_tests.parse_client_output("FetchError\nError: connect ECONNREFUSED 127.0.0.1:1\n")
        with self.assertRaisesRegex(ValueError, "printed no JSON results: nothing"):
            cache_tests.parse_client_output("")

    def test_not_results(self):
        for text in ("[1, 2]", '{"a": 3}', '{"a": "yes"}'):
            with self.subTest(text), self.assertRaisesRegex(ValueError, "not a map of test results"):
                cache_tests.parse_client_output(text)


class LogLine(unittest.TestCase):
    def test_table(self):
        clap = ("error: unexpected argument '--cache' found\n\n  tip: to pass '--cache' as a value, use '-- --cache'"
                "\n\nUsage: lowlat serve [OPTIONS]\n\nFor more information, try '--help'.\n")
        cases = [("a parser's error before its usage", clap, "error: unexpected argument '--cache' found"),
                 ("no error: the last line", "starting\nbind: address in use\n", "bind: address in use"),
                 ("empty", "", "no output")]
        for name, text, line in cases:
            with self.subTest(name), tempfile.NamedTemporaryFile("w") as f:
                f.write(text)
                f.flush()
                self.assertEqual(cache_tests.last_line(f.name), line)


class Published(unittest.TestCase):
    def test_folder_counted_per_file(self):
        with tempfile.TemporaryDirectory() as d:
            Path(d, "squid.json").write_text(json.dumps({"req-a": FAIL, "req-b": True, "opt-a": True}))
            Path(d, "nginx.json").write_text(json.dumps({"req-a": FAIL, "req-b": SETUP, "opt-a": FAIL}))
            Path(d, "index.mjs").write_text("export default []")
            rows = cache_tests.published("unused", TESTS, d)
        self.assertEqual([(n, len(c["required_not_passed"]), len(c["optimal_passed"])) for n, c in rows],
                         [("nginx", 2, 0), ("squid", 1, 1)])


@unittest.skipUnless(cache_tests.installed_version(cache_tests.default_install_dir()) == cache_tests.VERSION,
                     "the suite is not installed (scripts/test-deps.sh installs it)")
class CacheThatDoesNotStart(unittest.TestCase):
    def test_one_line_and_exit_1(self):
        # `false` exits at once: the script stops the suite's origin and says so in one line.
        with tempfile.TemporaryDirectory() as run:
            done = subprocess.run([sys.executable, str(SCRIPT), "--cache", "false {port}", "--name", "broken",
                                   "--run-dir", run], capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertRegex(done.stderr, r"^cache-tests: broken: the cache under test exited with 1 before "
                                      r"listening: no output \(files in .*\)\n$")

    def test_command_not_found(self):
        with tempfile.TemporaryDirectory() as run:
            done = subprocess.run([sys.executable, str(SCRIPT), "--cache", "/nonexistent/cache {port}",
                                   "--run-dir", run], capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertIn("cannot start the cache under test (/nonexistent/cache)", done.stderr)


class Usage(unittest.TestCase):
    def test_template_without_port(self):
        done = subprocess.run([sys.executable, str(SCRIPT), "--cache", "lowlat serve"],
                              capture_output=True, text=True, timeout=60, env=dict(os.environ))
        self.assertEqual(done.returncode, 2)
        self.assertIn("--cache must contain {port}", done.stderr)


if __name__ == "__main__":
    unittest.main()
