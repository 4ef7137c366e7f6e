#!/usr/bin/env python3
"""Tests for instructions.py's gate: the verdict on measured figures against accepted ones, and
the rewrite of the accepted file (comments kept, figures replaced, new ones added). The counting
itself runs lowlat under callgrind, in CI (`.ci/run`). Run: python3 -m unittest discover -s
scripts -p 'test_*.py'"""
import importlib.util
import os
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("instructions", HERE / "instructions.py")
instructions = importlib.util.module_from_spec(spec)
spec.loader.exec_module(instructions)


class Verdicts(unittest.TestCase):
    def test_above_tolerance_fails(self):
        [(name, value, base, ratio, ok)] = instructions.verdicts({"plaintext": 2050.0}, {"plaintext": 2000})
        self.assertEqual((name, value, base), ("plaintext", 2050.0, 2000))
        self.assertAlmostEqual(ratio, 1.025, delta=0.0001)
        self.assertFalse(ok, "2.5% above is more than the 2% allowed")

    def test_two_percent_is_the_edge(self):
        [v] = instructions.verdicts({"static": 2040.0}, {"static": 2000})
        self.assertTrue(v[4])
        [v] = instructions.verdicts({"static": 2041.0}, {"static": 2000})
        self.assertFalse(v[4])

    def test_cheaper_passes(self):
        [v] = instructions.verdicts({"proxy": 900.0}, {"proxy": 1000})
        self.assertTrue(v[4])

    def test_five_percent_fails(self):
        [v] = instructions.verdicts({"plaintext": 2879 * 1.05}, {"plaintext": 2879})
        self.assertFalse(v[4])

    def test_no_accepted_figure_is_reported_not_failed(self):
        [v] = instructions.verdicts({"cache-hit": 5000.0}, {})
        self.assertEqual((v[2], v[3], v[4]), (None, None, True))


class Accepted(unittest.TestCase):
    def test_rewrite_keeps_comments_and_adds_new(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "instructions.toml")
            Path(path).write_text("# why these\n[accepted]\n# the plain path\nplaintext = 2879\nstatic = 3606\n")
            instructions.write_accepted(path, {"plaintext": 2701.4, "proxy": 9000.6})
            text = Path(path).read_text()
            self.assertIn("# why these\n", text)
            self.assertIn("# the plain path\nplaintext = 2701\n", text)
            self.assertIn("static = 3606\n", text)
            self.assertIn("proxy = 9001\n", text)
            self.assertEqual(instructions.read_accepted(path),
                             {"plaintext": 2701, "static": 3606, "proxy": 9001})

    def test_the_repository_file_names_known_scenarios(self):
        accepted = instructions.read_accepted(instructions.ACCEPTED)
        names = {s.name for s in instructions.SCENARIOS}
        self.assertTrue(accepted, "bench/instructions.toml holds figures")
        self.assertLessEqual(set(accepted), names)


if __name__ == "__main__":
    unittest.main()
