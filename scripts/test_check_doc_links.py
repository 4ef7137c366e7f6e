#!/usr/bin/env python3
"""Tests for check-doc-links.py: documents written to a temporary folder.
Run: python3 -m unittest discover -s scripts -p 'test_*.py'"""
import importlib.util
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("check_doc_links", HERE / "check-doc-links.py")
links = importlib.util.module_from_spec(spec)
spec.loader.exec_module(links)


class Slugs(unittest.TestCase):
    def test_github_rule(self):
        for heading, anchor in [
            ("HTTPS (`lowlat serve --tls-listen`)", "https-lowlat-serve---tls-listen"),
            ("Throughput and server µs per request", "throughput-and-server-µs-per-request"),
            ("HTTP/3 beside caddy (bench/kit `h3-static`)", "http3-beside-caddy-benchkit-h3-static"),
            ("Merging agents' logs", "merging-agents-logs"),
            ("`log_format`, and more", "log_format-and-more"),
        ]:
            self.assertEqual(links.slug(heading), anchor)


class Check(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = Path(self.tmp.name)
        links.ROOT = self.root
        (self.root / "docs").mkdir()
        (self.root / "docs" / "a.md").write_text("# A\n\n## Same\n\n## Same\n\n```sh\n# not a heading\n```\n")

    def tearDown(self):
        self.tmp.cleanup()

    def problems(self, text):
        path = self.root / "README.md"
        path.write_text(text)
        return links.check(path)

    def test_good_links_pass(self):
        text = "[a](docs/a.md) [b](docs/a.md#same-1) [c](#top) [d](https://x.invalid/) ![e](docs/)\n# Top\n"
        self.assertEqual(self.problems(text), [])

    def test_missing_file_and_heading(self):
        got = self.problems("[a](docs/b.md) [b](docs/a.md#not-a-heading) [c](docs/a.md#same-2)\n")
        self.assertEqual(len(got), 3, got)
        self.assertIn("no such file", got[0])
        self.assertIn("no such heading", got[1])

    def test_links_in_code_blocks_are_not_checked(self):
        self.assertEqual(self.problems("```\n[a](docs/missing.md)\n```\n"), [])


if __name__ == "__main__":
    unittest.main()
