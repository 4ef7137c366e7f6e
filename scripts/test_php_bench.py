#!/usr/bin/env python3
"""Tests for the bench kit's php scenario floor: ceiling/ceiling-fcgi.c, built with cc into a
temporary directory, in front of a real php-fpm started as compare.py starts it, answers
/hello.php with the script's output to many clients at once through fewer php-fpm connections
than clients (the rest wait in it, in order), as compare.py's target runs it. Skipped where cc or
php-fpm is missing. Run: python3 -m unittest discover -s scripts -p 'test_*.py'"""
import concurrent.futures
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import unittest
from pathlib import Path

KIT = Path(__file__).resolve().parent.parent / "bench" / "kit"
spec = importlib.util.spec_from_file_location("compare", KIT / "compare.py")
compare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def exchange(port, requests):
    """Sends `requests` GETs for /hello.php on one kept-alive connection, one at a time, and
    returns the raw responses."""
    out = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        for _ in range(requests):
            s.sendall(b"GET /hello.php HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n")
            data = b""
            while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n") + 4 + int(
                    data.split(b"Content-Length: ")[1].split(b"\r\n")[0]):
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            out.append(data)
    return out


@unittest.skipUnless(shutil.which("cc") and os.path.isdir("/usr/sbin")
                     and any(n.startswith("php-fpm") for n in os.listdir("/usr/sbin")), "needs cc and php-fpm")
class CeilingFcgi(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.run_dir = self.dir.name
        self.www = os.path.join(self.run_dir, "www")
        os.makedirs(self.www)
        exe = os.path.join(self.run_dir, "ceiling-fcgi")
        subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-o", exe, str(KIT / "ceiling" / "ceiling-fcgi.c")],
                       check=True)
        self.fpm = compare.start_php_fpm(self.run_dir, self.www)
        self.port = free_port()
        # compare.py's argv for the target, on a free port and with 2 php-fpm connections
        build, compare.BUILD = compare.BUILD, self.run_dir
        try:
            argv = compare.make_server("ceiling-fcgi", None, self.run_dir, self.www).argv
        finally:
            compare.BUILD = build
        self.assertEqual(argv[2:5], [os.path.join(self.run_dir, "php-fpm.sock"),
                                     os.path.join(self.www, "hello.php"), str(compare.PHP_CHILDREN)])
        argv = [argv[0], str(self.port)] + argv[2:4] + ["2"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.assertTrue(compare.await_port(self.port), "ceiling-fcgi did not listen")

    def tearDown(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)
        os.killpg(self.fpm.pid, signal.SIGTERM)
        self.fpm.wait(timeout=30)
        self.dir.cleanup()

    def test_a_target_of_the_php_scenario(self):
        self.assertIn("ceiling-fcgi", compare.SCENARIOS["php"][3])
        self.assertEqual(len(set(compare.PORTS.values())), len(compare.PORTS))

    def test_answers_the_script_to_more_clients_than_connections(self):
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = [r for rs in pool.map(lambda _: exchange(self.port, 20), range(8)) for r in rs]
        self.assertEqual(len(answers), 160)
        for a in answers:
            self.assertEqual(a, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")

    def test_pipelined_requests_answered_in_turn(self):
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
            s.sendall(b"GET /hello.php HTTP/1.1\r\nHost: x\r\n\r\n" * 3)
            want = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello" * 3
            data = b""
            while len(data) < len(want):
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        self.assertEqual(data, want)


if __name__ == "__main__":
    unittest.main()
