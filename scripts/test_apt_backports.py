#!/usr/bin/env python3
"""Tests for apt-backports.py: apt source trees in both formats written to a temporary folder.
Run: python3 -m unittest discover -s scripts -p 'test_*.py'"""
import importlib.util
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "apt-backports.py"
spec = importlib.util.spec_from_file_location("apt_backports", SCRIPT)
apt_backports = importlib.util.module_from_spec(spec)
spec.loader.exec_module(apt_backports)

# Example archives: documentation addresses (RFC 2606), so no real host is named.
MIRROR = "http://mirror.example.org/debian"
SECURITY = "http://security.example.org/debian-security"


class Sources:
    """etc/apt under a temporary root: {path under etc/apt: text}."""

    def __init__(self, files):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = Path(self.tmp.name)
        (self.root / "etc" / "apt" / "sources.list.d").mkdir(parents=True)
        for path, text in files.items():
            (self.root / "etc" / "apt" / path).write_text(textwrap.dedent(text).lstrip("\n"))

    def line(self, codename="bookworm"):
        return apt_backports.backports_line(codename, self.root)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.tmp.cleanup()


class OneLineFormat(unittest.TestCase):
    def test_the_release_main_archive_is_reused(self):
        with Sources({"sources.list": f"""
            # the security archive comes first, and serves another suite
            deb {SECURITY} bookworm-security main
            deb-src {MIRROR} bookworm main
            deb {MIRROR} bookworm main contrib
            """}) as s:
            self.assertEqual(s.line(), f"deb {MIRROR} bookworm-backports main")

    def test_options_keep_the_keyring_only(self):
        with Sources({"sources.list.d/debian.list": f"""
            deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {MIRROR} bookworm main
            """}) as s:
            self.assertEqual(
                s.line(),
                "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
                f"{MIRROR} bookworm-backports main",
            )

    def test_commented_and_other_components_are_skipped(self):
        with Sources({"sources.list": f"""
            #deb http://old.example.org/debian bookworm main
            deb http://other.example.org/debian bookworm non-free
            deb {MIRROR} bookworm main # trailing comment
            """}) as s:
            self.assertEqual(s.line(), f"deb {MIRROR} bookworm-backports main")

    def test_files_other_than_list_are_ignored(self):
        with Sources({"sources.list.d/debian.list.disabled": f"deb {MIRROR} bookworm main\n"}) as s:
            self.assertIsNone(s.line())


class Deb822Format(unittest.TestCase):
    def test_a_stanza_with_several_suites(self):
        with Sources({"sources.list.d/debian.sources": f"""
            Types: deb
            # a comment inside the stanza
            URIs: {MIRROR}
            Suites: bookworm bookworm-updates
            Components: main
            Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

            Types: deb
            URIs: {SECURITY}
            Suites: bookworm-security
            Components: main
            """}) as s:
            self.assertEqual(
                s.line(),
                "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
                f"{MIRROR} bookworm-backports main",
            )

    def test_disabled_and_source_only_stanzas_are_skipped(self):
        with Sources({"sources.list.d/debian.sources": f"""
            Types: deb-src
            URIs: http://src.example.org/debian
            Suites: bookworm
            Components: main

            Enabled: no
            Types: deb
            URIs: http://off.example.org/debian
            Suites: bookworm
            Components: main

            Types: deb deb-src
            URIs: {MIRROR}
            Suites: bookworm
            Components: main contrib
            """}) as s:
            self.assertEqual(s.line(), f"deb {MIRROR} bookworm-backports main")

    def test_an_inline_key_is_not_carried(self):
        with Sources({"sources.list.d/debian.sources": f"""
            Types: deb
            URIs: {MIRROR}
            Suites: bookworm
            Components: main
            Signed-By:
             -----BEGIN PGP PUBLIC KEY BLOCK-----
             .
             -----END PGP PUBLIC KEY BLOCK-----
            """}) as s:
            self.assertEqual(s.line(), f"deb {MIRROR} bookworm-backports main")

    def test_sources_list_is_read_before_the_directory(self):
        with Sources({
            "sources.list": f"deb {MIRROR} bookworm main\n",
            "sources.list.d/other.sources":
                "Types: deb\nURIs: http://other.example.org/debian\nSuites: bookworm\nComponents: main\n",
        }) as s:
            self.assertEqual(s.line(), f"deb {MIRROR} bookworm-backports main")


class CommandLine(unittest.TestCase):
    def run_script(self, *args):
        out = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)
        return out.returncode, out.stdout, out.stderr

    def test_prints_the_line(self):
        with Sources({"sources.list.d/debian.sources":
                      f"Types: deb\nURIs: {MIRROR}\nSuites: bookworm\nComponents: main\n"}) as s:
            code, out, _ = self.run_script("bookworm", str(s.root))
            self.assertEqual((code, out), (0, f"deb {MIRROR} bookworm-backports main\n"))

    def test_no_source_is_one_line_and_exit_1(self):
        with Sources({"sources.list": f"deb {MIRROR} trixie main\n"}) as s:
            code, out, err = self.run_script("bookworm", str(s.root))
            self.assertEqual((code, out), (1, ""))
            self.assertEqual(err, "apt-backports.py: no apt source serves bookworm main\n")

    def test_usage(self):
        code, _, err = self.run_script()
        self.assertEqual(code, 2)
        self.assertIn("usage:", err)


if __name__ == "__main__":
    unittest.main()
