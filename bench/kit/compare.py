#!/usr/bin/env python3
"""Side-by-side HTTP throughput of lowlat and its peers, in one run, on one machine.

Each server runs alone, pinned to CPU 0 with one worker; wrk (one thread) is pinned to CPU 1.
For every scenario x connection level x repetition it records wrk's req/s and latency
percentiles, the server's CPU (utime+stime of its process tree) and peak RSS, the loader's
CPU, and the CPU used by anything else on the machine ("foreign", a noisy neighbour); runs
disturbed by a neighbour are repeated. It prints a markdown table of medians with two ratios of
lowlat to each peer: req/s, and server-core microseconds per request (the fair measure when
wrk's core is the bottleneck, as it often is on two cores), and appends every run as JSON to
--raw.

  bench/kit/setup.sh        # once: peers and wrk
  bench/kit/compare.py --lowlat "target/release/lowlat serve --workers 1 \\
      --listen 127.0.0.1:{port} --root {www}" --scenarios plaintext,static

{port} and {www} in --lowlat are filled in (the document root holds 100.html, 99 'X' and a
newline, and 1m.bin, 1 MiB). Scenarios: plaintext, plaintext-pipe, json, static, static-pipe,
big (1 MiB file, MB/s); over TLS: tls-plaintext, tls-static,
tls-handshake (a new connection, so a full handshake, per request), tls-big; over HTTP/2 (TLS,
ALPN h2, loaded by h2load with --streams streams per connection): h2-plaintext, h2-static, and
h1-static (HTTP/1.1 over TLS by h2load --h1, the same client); over HTTP/3 (QUIC on the TLS port,
loaded by `lowlat load --h3` -- --loader, by default the binary --lowlat starts -- with --streams
streams per connection): h3-static, lowlat (`--h3-listen`) beside caddy. For TLS, --lowlat may use
{tls_port}, {cert} and {key} (a self-signed ECDSA P-256 pair made in the run directory). As a reverse
proxy: proxy, proxy-tls (GET /up/plaintext forwarded to an upstream `ceiling` on {upstream}, pinned to
CPU 1 beside wrk; keep-alive upstream connections), and h2-proxy, h3-proxy (the same over HTTP/2 and
HTTP/3, loaded as h2-* and h3-* are). As a cache: cache (GET /cache/100.html through each cache
from cache-origin.py on {cache_upstream}, pinned to CPU 1, which marks it cacheable; the cache asks
for it once, then every request is a hit -- checked by counting the origin's requests), beside
cache-static (lowlat serving the same 100 bytes as a file, /100.html), so that lowlat's "hit ÷ the
same bytes as a file" comes out of one run; --lowlat then needs both, e.g. `--root {www} --proxy
/cache/=http://{cache_upstream} --cache`. PHP: php (GET /hello.php through each server to one php-fpm
pool on a Unix socket, pinned to CPU 1; --lowlat takes {php}, e.g. `--root {www} --php {php}`). Peers: nginx, lighttpd, h2o, caddy, haproxy
(proxy only), varnish (caching from cache-origin.py), squid and Apache Traffic Server (cache only),
may-minihttp, and "ceiling"
(ceiling/ceiling.c: no parsing, canned answers; what the kernel and syscalls allow), with its
floors for a proxy ("ceiling-proxy", proxy) and a FastCGI gateway ("ceiling-fcgi", php) -- run setup.sh
first. The peers' configurations are bench/conf/*.in, the ones the specs in bench/specs/ use too.
A target that does not start (say, a --lowlat without the feature a scenario needs) is skipped
with its reason, and the others are measured.
"""
import argparse
import json
import os
import tempfile
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
CLK = os.sysconf("SC_CLK_TCK")
BUILD = os.environ.get("ANCHORS_BUILD",
                       os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                                    "lowlat-anchors"))
# TechEmpower's plaintext request headers (Host comes from the URL).
HEADERS = ["-H", "Accept: text/plain,text/html;q=0.9,application/xhtml+xml;q=0.9,"
                 "application/xml;q=0.8,*/*;q=0.7", "-H", "Connection: keep-alive"]

# scenario -> (path, pipeline depth, default connection levels, which targets serve it)
SCENARIOS = {
    "plaintext": ("/plaintext", 1, [16, 256, 1024], ["lowlat", "nginx", "may-minihttp", "ceiling"]),
    "plaintext-pipe": ("/plaintext", 16, [256], ["lowlat", "nginx", "may-minihttp", "ceiling"]),
    "json": ("/json", 1, [256], ["lowlat", "may-minihttp"]),
    "static": ("/100.html", 1, [16, 256, 1024], ["lowlat", "nginx", "lighttpd", "h2o", "varnish", "caddy"]),
    "static-pipe": ("/100.html", 16, [256], ["lowlat", "nginx", "lighttpd", "h2o", "varnish"]),
    "big": ("/1m.bin", 1, [16], ["lowlat", "nginx", "lighttpd", "h2o"]),
    # a 10 KiB HTML page asked for with Accept-Encoding: gzip (SCENARIO_HEADERS): compression on
    # the fly, nginx's `gzip on` (level 1, its default) on that location against `lowlat --compress`
    "gzip": ("/10k.html", 1, [16, 256], ["lowlat", "nginx"]),
    # over TLS (ECDSA P-256 certificate made at start; TLS 1.3 where both ends offer it)
    "tls-plaintext": ("/plaintext", 1, [256], ["lowlat", "nginx"]),
    "tls-static": ("/100.html", 1, [16, 256], ["lowlat", "nginx", "h2o", "caddy"]),
    "tls-handshake": ("/100.html", 1, [64], ["lowlat", "nginx", "h2o"]),  # a full handshake per request
    "tls-big": ("/1m.bin", 1, [16], ["lowlat", "nginx", "h2o"]),
    # HTTP/2 over TLS (ALPN h2), loaded by h2load with --streams streams per connection
    "h2-plaintext": ("/plaintext", 1, [16, 256], ["lowlat", "nginx"]),
    "h2-static": ("/100.html", 1, [16, 256], ["lowlat", "nginx", "h2o", "caddy"]),
    # HTTP/1.1 over TLS loaded by h2load --h1: the same client as h2-*, for 1-stream comparisons
    "h1-static": ("/100.html", 1, [16, 256], ["lowlat", "nginx", "h2o"]),
    # HTTP/3 (QUIC on the TLS port's UDP twin), loaded by `lowlat load --h3` with --streams streams per
    # connection (the loader speaks HTTP/3; h2load from Debian's packages does not); h2-static beside
    # it gives each server's HTTP/2-over-TLS cost for the same file
    "h3-static": ("/100.html", 1, [16, 100], ["lowlat", "caddy"]),
    # forwarding over HTTP/3 and over HTTP/2 (TLS): /up/plaintext to the proxy scenarios' upstream,
    # as `proxy` below does for HTTP/1.1
    "h3-proxy": ("/up/plaintext", 1, [16, 100], ["lowlat", "caddy"]),
    "h2-proxy": ("/up/plaintext", 1, [16, 100], ["lowlat", "nginx", "h2o", "caddy"]),
    # as a reverse proxy: /up/plaintext forwarded to an upstream (a second `ceiling`, pinned to CPU 1
    # beside wrk), over keep-alive upstream connections; the figure is the proxy's own core per request
    # "ceiling-proxy" (ceiling/ceiling-proxy.c) forwards bytes blindly over a connection per client:
    # the floor for any proxy's cost per request on this kernel
    "proxy": ("/up/plaintext", 1, [16, 256], ["lowlat", "nginx", "haproxy", "h2o", "caddy", "ceiling-proxy"]),
    "proxy-tls": ("/up/plaintext", 1, [256], ["lowlat", "nginx", "haproxy", "h2o", "caddy"]),
    # as a cache: /cache/100.html through each cache from an origin that marks it cacheable
    # (cache-origin.py on {cache_upstream}); primed by one request, so every later one is a hit;
    # nginx proxy_cache, varnish -s malloc, squid and ATS in memory
    "cache": ("/cache/100.html", 1, [16, 256], ["lowlat", "nginx", "varnish", "squid", "trafficserver"]),
    # the same 100 bytes as a file from lowlat: the denominator of "hit ÷ the same bytes as a file"
    "cache-static": ("/100.html", 1, [16, 256], ["lowlat"]),
    # every request a miss: /cache/100.html?n=<unique> (unique.lua), so each is looked up, fetched
    # from the origin, stored and answered
    "cache-miss": ("/cache/100.html", 1, [16], ["lowlat", "nginx", "varnish"]),
    # the denominator of "a miss ÷ an uncached proxied request" for nginx: the same origin and
    # page through a location without proxy_cache (lowlat's: the cache-miss scenario against a
    # second lowlat without --cache, interleaved.py --also)
    "cache-pass": ("/pass/100.html", 1, [16], ["nginx"]),
    # PHP through FastCGI: /hello.php (`<?php echo "hello";`) through each server to one php-fpm
    # pool (start_php_fpm: 16 static children, OPcache on, a Unix socket, pinned to CPU 1 beside
    # wrk); nginx with fastcgi_keep_conn and an upstream keepalive, caddy's php_fastcgi, h2o's
    # fastcgi.connect, lighttpd's mod_fastcgi; lowlat's --lowlat takes {php} (unix:SOCKET).
    # "ceiling-fcgi" (ceiling/ceiling-fcgi.c) sends one pre-built FastCGI request per HTTP request
    # over PHP_CHILDREN kept connections and answers with the script's output: the floor for any
    # HTTP-to-FastCGI gateway's cost per request on this kernel
    "php": ("/hello.php", 1, [16, 256], ["lowlat", "nginx", "caddy", "h2o", "lighttpd", "ceiling-fcgi"]),
}
# Request headers a scenario adds to HEADERS.
SCENARIO_HEADERS = {"gzip": ["-H", "Accept-Encoding: gzip"]}
# The wrk script a scenario runs (in this directory).
SCENARIO_SCRIPTS = {"cache-miss": "unique.lua"}
# php-fpm's children: more than the web servers keep idle connections to it (nginx's keepalive
# 8), since php-fpm gives a child to a kept connection for as long as it stays open.
PHP_CHILDREN = 16
# The scenarios that need nginx's cache locations and the caches' origin.
CACHE_SCENARIOS = ("cache", "cache-miss", "cache-pass")
TLS_PORT_OFFSET = 1000  # a target's TLS port is its port + 1000
PORTS = {"lowlat": 8090, "nginx": 8081, "lighttpd": 8082, "h2o": 8083, "may-minihttp": 8085, "ceiling": 8089,
         "varnish": 8084, "haproxy": 8086, "caddy": 8087, "ceiling-proxy": 8088, "squid": 8091,
         "trafficserver": 8092, "ceiling-fcgi": 8093}
UPSTREAM_PORT = 8078  # the proxy scenarios' upstream: {upstream} in --lowlat
CACHE_UPSTREAM_PORT = 8077  # the caches' origin (cache-origin.py): {cache_upstream} in --lowlat
CACHE_PATH = SCENARIOS["cache"][0]  # what the origin must be asked for once per cache
UPSTREAM_PIDS = set()  # not counted as a neighbour's CPU
UPSTREAM_TREES = set()  # nor these processes' children (php-fpm's), looked up at each run
CONF = os.path.join(HERE, "..", "conf")  # the peers' configurations, shared with bench/specs


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ /proc accounting
def proc_tree(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        out.append(p)
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo.extend(int(x) for x in f.read().split())
            except OSError:
                pass
    return out


def ticks(pid):
    """(utime+stime, is_kernel_thread) of one process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    fields = s[s.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12]), bool(int(fields[6]) & 0x00200000)


def all_ticks():
    return {int(n): t for n in os.listdir("/proc") if n.isdigit() for t in [ticks(int(n))] if t}


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def vm_hwm_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def core_busy():
    """cpuN -> (busy, total) jiffies from /proc/stat; busy includes softirq time, which is
    where loopback TCP does much of its work and which no process is charged for."""
    d = {}
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu") and line[3].isdigit():
                name, *v = line.split()
                v = [int(x) for x in v[:8]]
                d[name] = (sum(v) - v[3] - v[4], sum(v))
    return d


def core_split():
    """cpu0's user (with nice), system and softirq jiffies from /proc/stat: where the server's
    core spent its busy time (user space, the kernel on its behalf, loopback TCP's softirq)."""
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu0 "):
                v = [int(x) for x in line.split()[1:8]]
                return v[0] + v[1], v[2], v[6]
    return 0, 0, 0


def busy_pct(c0, c1, cpu):
    b0, t0 = c0.get(cpu, (0, 0))
    b1, t1 = c1.get(cpu, (0, 0))
    return round(100.0 * (b1 - b0) / max(1, t1 - t0), 1)


def foreign_ticks(a0, a1, exclude):
    """CPU ticks spent between two snapshots by user processes outside `exclude`."""
    total, top = 0, []
    for p, (t, kthread) in a1.items():
        if p in exclude or p == os.getpid() or kthread:
            continue
        d = t - a0[p][0] if p in a0 else t
        if d > 0:
            total += d
            top.append((d, comm(p)))
    return total, sorted(top, reverse=True)[:3]


# ------------------------------------------------------------------ servers
class Server:
    """One server process group, pinned to CPU 0, started and always stopped by its own id."""

    def __init__(self, name, argv, run_dir, skip_rss=()):
        self.name, self.argv, self.run_dir, self.skip_rss = name, argv, run_dir, skip_rss
        self.port = PORTS[name]
        self.p = None

    def start(self):
        out = open(os.path.join(self.run_dir, f"{self.name}.out"), "ab")
        self.p = subprocess.Popen(["taskset", "-c", "0"] + self.argv, stdout=out, stderr=out,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.time() + 15
        while time.time() < deadline:
            if self.p.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.p.returncode}; see "
                                   f"{self.run_dir}/{self.name}.out")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                time.sleep(0.5)  # let every worker come up
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.name} did not listen on port {self.port} within 15 s")

    def pids(self):
        return proc_tree(self.p.pid)

    def rss_pids(self):
        return [p for p in self.pids() if comm(p) not in self.skip_rss]

    def stop(self):
        if self.p is None:
            return
        try:
            os.killpg(self.p.pid, signal.SIGTERM)
            self.p.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait()
        self.p = None


VAR = re.compile(r"\$\{([^}]*)\}")


def expand(text, values):
    """${name} and ${name:-default} as `lowlat bench` expands a spec's templates: `values` first,
    then the environment, then the default; an undefined name is an error."""
    def one(m):
        name, sep, default = m.group(1).partition(":-")
        if name in values:
            return str(values[name])
        if os.environ.get(name):
            return os.environ[name]
        if sep:
            return default
        raise KeyError(f"${{{name}}} is not defined (not given by compare.py, not in the environment)")
    return VAR.sub(one, text)


def conf_values(run_dir, www):
    """What the configurations in bench/conf are filled in with: the run's directories, the
    certificate made in it, the upstream, and every peer's ports (clear and TLS)."""
    values = {"run_dir": run_dir, "www": www, "cert": os.path.join(run_dir, "cert.pem"),
              "key": os.path.join(run_dir, "key.pem"), "cert_and_key": os.path.join(run_dir, "cert+key.pem"),
              "upstream": f"127.0.0.1:{UPSTREAM_PORT}", "cache_upstream": f"127.0.0.1:{CACHE_UPSTREAM_PORT}",
              "cache_upstream_port": CACHE_UPSTREAM_PORT, "php_socket": os.path.join(run_dir, "php-fpm.sock")}
    for name, port in PORTS.items():
        values[f"{name}_port"] = port
        values[f"{name}_tls_port"] = port + TLS_PORT_OFFSET
    if os.geteuid() != 0:
        values["H2O_USER_LINE"] = "#"  # h2o wants `user` only when started as root
    return values


def render(template, run_dir, www, out=None):
    """Fills in bench/conf/`template` and writes it to `out` (default: the run directory, under
    the template's name less .in); returns where."""
    with open(os.path.join(CONF, template)) as f:
        text = f.read()
    make_cert(run_dir)  # the configurations' TLS listeners need it, whatever the scenario
    if "${cert_and_key}" in text:  # haproxy wants both in one file
        with open(os.path.join(run_dir, "cert+key.pem"), "w") as f:
            f.write(open(os.path.join(run_dir, "cert.pem")).read() + open(os.path.join(run_dir, "key.pem")).read())
    text = expand(text, conf_values(run_dir, www))
    path = out or os.path.join(run_dir, template[:-3])
    with open(path, "w") as f:
        f.write(text)
    return path


def make_server(name, args, run_dir, www):
    if name == "lowlat":
        argv = args.lowlat.format(port=PORTS["lowlat"], www=www, tls_port=PORTS["lowlat"] + TLS_PORT_OFFSET,
                                  cert=os.path.join(run_dir, "cert.pem"),
                                  key=os.path.join(run_dir, "key.pem"),
                                  upstream=f"127.0.0.1:{UPSTREAM_PORT}",
                                  cache_upstream=f"127.0.0.1:{CACHE_UPSTREAM_PORT}",
                                  php="unix:" + os.path.join(run_dir, "php-fpm.sock")).split()
        return Server(name, argv, run_dir)
    if name == "nginx":
        # the cache scenario's parts only when it runs (nginx.conf.in says why)
        for part in ("http", "server"):
            path = os.path.join(run_dir, f"nginx-cache-{part}.conf")
            if args is not None and set(CACHE_SCENARIOS) & set(args.scenarios.split(",")):
                render(f"nginx-cache-{part}.conf.in", run_dir, www, path)
            elif os.path.exists(path):
                os.remove(path)
        conf = render("nginx.conf.in", run_dir, www)
        return Server(name, ["nginx", "-p", run_dir, "-c", conf, "-e", f"{run_dir}/nginx-error.log"],
                      run_dir)
    if name == "lighttpd":
        return Server(name, ["lighttpd", "-D", "-f", render("lighttpd.conf.in", run_dir, www)], run_dir)
    if name == "h2o":
        return Server(name, ["h2o", "-c", render("h2o.conf.in", run_dir, www)], run_dir, ("perl",))
    if name == "may-minihttp":
        exe = os.path.join(BUILD, "target", "release", "may-mini")
        if not os.path.exists(exe):
            raise RuntimeError(f"{exe} missing: run setup.sh first")
        return Server(name, [exe, f"127.0.0.1:{PORTS[name]}"], run_dir)
    if name == "varnish":
        # varnish caches what the caches' origin (cache-origin.py, on CPU 1) serves: the files, and
        # /cache/100.html for the cache scenario; the built-in VCL, storage in memory
        return Server(name, ["varnishd", "-F", "-a", f"127.0.0.1:{PORTS[name]}", "-b", f"127.0.0.1:{CACHE_UPSTREAM_PORT}",
                             "-s", "malloc,64m", "-n", f"{run_dir}/varnish", "-p", "thread_pools=1",
                             "-p", "thread_pool_min=10"], run_dir)
    if name == "squid":
        return Server(name, ["squid", "-N", "-f", render("squid.conf.in", run_dir, www)], run_dir)
    if name == "trafficserver":
        return Server(name, ["traffic_server", f"--run-root={trafficserver_runroot(run_dir, www)}"], run_dir,
                      ("traffic_crashlo",))
    if name == "haproxy":
        return Server(name, ["haproxy", "-db", "-f", render("haproxy.cfg.in", run_dir, www)], run_dir)
    if name == "caddy":
        conf = render("Caddyfile.in", run_dir, www)
        return Server(name, ["env", "GOMAXPROCS=1", f"XDG_DATA_HOME={run_dir}/caddy-data",
                             f"XDG_CONFIG_HOME={run_dir}/caddy-config", "caddy", "run", "--adapter", "caddyfile",
                             "--config", conf], run_dir)
    if name == "ceiling":
        exe = os.path.join(BUILD, "ceiling")
        if not os.path.exists(exe):
            raise RuntimeError(f"{exe} missing: run setup.sh first")
        return Server(name, [exe, str(PORTS[name])], run_dir)
    if name == "ceiling-proxy":
        exe = os.path.join(BUILD, "ceiling-proxy")
        if not os.path.exists(exe):
            raise RuntimeError(f"{exe} missing: run setup.sh first")
        return Server(name, [exe, str(PORTS[name]), str(UPSTREAM_PORT)], run_dir)
    if name == "ceiling-fcgi":
        exe = os.path.join(BUILD, "ceiling-fcgi")
        if not os.path.exists(exe):
            raise RuntimeError(f"{exe} missing: run setup.sh (or ceiling/build.sh) first")
        # as many php-fpm connections as php-fpm has children: none ever waits in its backlog
        return Server(name, [exe, str(PORTS[name]), os.path.join(run_dir, "php-fpm.sock"),
                             os.path.join(www, "hello.php"), str(PHP_CHILDREN)], run_dir)
    raise ValueError(name)


def trafficserver_runroot(run_dir, www):
    """A runroot of its own for traffic_server in run_dir/ats: the package's programs and plugins
    and a copy of its default configuration (/etc/trafficserver, only read), with
    bench/conf/trafficserver-*.in rendered into it, so that nothing outside the run directory is
    written. Returns the runroot's path."""
    if not shutil.which("traffic_server"):
        raise RuntimeError("traffic_server not found: run setup.sh first")
    root = os.path.join(run_dir, "ats")
    etc, cache = os.path.join(root, "etc"), os.path.join(root, "cache")
    if not os.path.isdir(etc):
        shutil.copytree("/etc/trafficserver", etc)
    for d in ("cache", "run", "log", "var"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    with open(os.path.join(root, "runroot.yaml"), "w") as f:
        f.write(f"prefix: {root}\nexec_prefix: /usr\nbindir: /usr/bin\nsbindir: /usr/sbin\n"
                f"sysconfdir: {etc}\ndatadir: {root}/var\nincludedir: /usr/include\n"
                f"libdir: /usr/lib/trafficserver\nlibexecdir: /usr/lib/trafficserver/modules\n"
                f"localstatedir: {root}/var\nruntimedir: {root}/run\nlogdir: {root}/log\ncachedir: {cache}\n")
    for name in ("records.config", "remap.config", "storage.config"):
        render(f"trafficserver-{name}.in", run_dir, www, os.path.join(etc, name))
    with open(os.path.join(cache, "cache.db"), "ab") as f:
        f.truncate(64 << 20)  # the volume storage.config names: traffic_server does not make it
    return root


# ------------------------------------------------------------------ the caches' origin
def origin_requests(path):
    """How many times cache-origin.py was asked for `path` (None when it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{CACHE_UPSTREAM_PORT}/_origin/requests", timeout=5) as r:
            return json.load(r).get(path, 0)
    except (OSError, ValueError):
        return None


def start_cache_origin(www, scenarios, lowlat=""):
    """The caches' origin on CACHE_UPSTREAM_PORT, pinned to CPU 1 beside wrk; returns its process.
    cache-origin.py counts the requests it answers (the cache scenario checks that all but one
    were hits), but in Python it answers a few hundred a second: where every request reaches the
    origin (cache-miss, cache-pass) it would be what is measured. So when no scenario needs the
    counts and a lowlat binary is given, the origin is `lowlat serve` on the same files with the
    same Cache-Control."""
    fast = lowlat and "cache" not in scenarios and {"cache-miss", "cache-pass"} & set(scenarios)
    if fast:
        argv = [lowlat, "serve", "--workers", "1", "--listen", f"127.0.0.1:{CACHE_UPSTREAM_PORT}", "--root", www,
                "--add-header", "Cache-Control: public, max-age=3600"]
    else:
        argv = [sys.executable, os.path.join(HERE, "cache-origin.py"), str(CACHE_UPSTREAM_PORT), www]
    origin = subprocess.Popen(["taskset", "-c", "1"] + argv, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    UPSTREAM_PIDS.add(origin.pid)
    deadline = time.time() + 10
    while not (port_open(CACHE_UPSTREAM_PORT) if fast else origin_requests(CACHE_PATH) is not None):
        if time.time() > deadline or origin.poll() is not None:
            sys.exit(f"the caches' origin ({argv[0]}) did not answer on port {CACHE_UPSTREAM_PORT}")
        time.sleep(0.1)
    return origin


def start_php_fpm(run_dir, www):
    """The php scenario's php-fpm: Debian's, a pool of PHP_CHILDREN static children on
    run_dir/php-fpm.sock with OPcache on, pinned to CPU 1 beside wrk (not counted as a
    neighbour); writes www/hello.php. Returns its process."""
    found = sorted(n for n in os.listdir("/usr/sbin") if n.startswith("php-fpm")) if os.path.isdir("/usr/sbin") else []
    if not found:
        sys.exit("php-fpm not found in /usr/sbin: install php-fpm (scripts/test-deps.sh does)")
    with open(os.path.join(www, "hello.php"), "w") as f:
        f.write('<?php echo "hello";\n')
    sock = os.path.join(run_dir, "php-fpm.sock")
    if os.path.exists(sock):
        os.remove(sock)
    conf = os.path.join(run_dir, "php-fpm.conf")
    as_root = os.geteuid() == 0
    with open(conf, "w") as f:
        f.write(f"[global]\nerror_log = {run_dir}/php-fpm.log\ndaemonize = no\npid = {run_dir}/php-fpm.pid\n"
                "[bench]\n" + ("user = root\ngroup = root\n" if as_root else "")
                + f"listen = {sock}\nlisten.backlog = 4096\npm = static\npm.max_children = {PHP_CHILDREN}\n"
                "pm.max_requests = 0\nphp_admin_value[opcache.enable] = 1\n"
                "php_admin_value[display_errors] = Off\n")
    argv = ["taskset", "-c", "1", os.path.join("/usr/sbin", found[-1]), "-y", conf, "-F"] + (["-R"] if as_root else [])
    fpm = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 30
    while not os.path.exists(sock):
        if fpm.poll() is not None or time.time() > deadline:
            sys.exit(f"php-fpm did not start: see {run_dir}/php-fpm.log")
        time.sleep(0.05)
    UPSTREAM_TREES.add(fpm.pid)
    return fpm


def port_open(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def await_port(port, timeout=10.0):
    """Whether something listens on 127.0.0.1:`port` within `timeout` seconds (asked every 50 ms)."""
    deadline = time.time() + timeout
    while not port_open(port):
        if time.time() >= deadline:
            return False
        time.sleep(0.05)
    return True


def prime(url):
    """One request before the warm-up, so that a cache that does not collapse concurrent misses
    (nginx without proxy_cache_lock, say) still asks the origin once; True on a 200."""
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            r.read()
            return r.status == 200
    except OSError:
        return False


# ------------------------------------------------------------------ load
UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}


def to_ms(s):
    m = re.match(r"([\d.]+)(us|ms|s|m)$", s)
    return float(m.group(1)) * UNIT_MS[m.group(2)] if m else None


def to_mb(s):
    m = re.match(r"([\d.]+)(B|KB|MB|GB)$", s)
    return float(m.group(1)) * {"B": 1e-6, "KB": 1e-3, "MB": 1.0, "GB": 1e3}[m.group(2)] if m else None


def parse_wrk(out):
    r = {}
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    r["rps"] = float(m.group(1)) if m else None
    for pct in ("50", "90", "99"):
        m = re.search(rf"^\s+{pct}%\s+(\S+)", out, re.M)
        r[f"p{pct}_ms"] = to_ms(m.group(1)) if m else None
    m = re.search(r"Transfer/sec:\s+(\S+)", out)
    r["mb_s"] = to_mb(m.group(1)) if m else None
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    r["socket_errors"] = sum(int(x) for x in m.groups()) if m else 0
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    r["non_2xx"] = int(m.group(1)) if m else 0
    return r


def make_cert(run_dir):
    """A self-signed ECDSA P-256 certificate for localhost and 127.0.0.1 (cert.pem, key.pem)."""
    if not os.path.exists(os.path.join(run_dir, "cert.pem")):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                        "-nodes", "-days", "3650", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                        "-keyout", os.path.join(run_dir, "key.pem"), "-out", os.path.join(run_dir, "cert.pem")],
                       check=True, capture_output=True)


def wrk_argv(url, conns, depth, seconds, close=False, extra_headers=(), script=None):
    headers = [h.replace("keep-alive", "close") for h in HEADERS] if close else HEADERS
    headers = headers + list(extra_headers)
    argv = ["taskset", "-c", "1", "wrk", "-t1", "-c", str(conns), "-d", f"{seconds}s", "--latency",
            "--timeout", "8s"] + headers
    if depth > 1:
        return argv + ["-s", os.path.join(HERE, "pipeline.lua"), url, "--", str(depth)]
    if script:
        return argv + ["-s", os.path.join(HERE, script), url]
    return argv + [url]


def h2load_argv(url, conns, streams, seconds, h1=False):
    return ["taskset", "-c", "1", "h2load", "-t1", "-c", str(conns), "-m", str(streams), "-D", str(seconds),
            "-H", "Accept: text/plain,text/html;q=0.9,*/*;q=0.7"] + (["--h1"] if h1 else []) + [url]


def lowlat_load_argv(loader, url, conns, streams, seconds):
    """`lowlat load --h3`: one thread, `conns` QUIC connections of `streams` streams each."""
    return ["taskset", "-c", "1", loader, "load", "--h3", "--insecure", "-t", "1", "-c", str(conns),
            "-m", str(streams), "-d", f"{seconds}s", "--json",
            "-H", "Accept: text/plain,text/html;q=0.9,*/*;q=0.7", url]


def parse_lowlat_load(out):
    r = {"rps": None, "p50_ms": None, "p90_ms": None, "p99_ms": None, "mb_s": None,
         "socket_errors": 0, "non_2xx": 0}
    try:
        j = json.loads(out)
    except ValueError:
        return r
    r["rps"] = j.get("requests_per_sec")
    r["mb_s"] = (j.get("bytes_per_sec") or 0) / 1e6
    lat = j.get("latency_us") or {}
    for pct in ("50", "90", "99"):
        v = lat.get(f"p{pct}")
        r[f"p{pct}_ms"] = v / 1000.0 if isinstance(v, (int, float)) else None
    r["socket_errors"] = (j.get("errors") or {}).get("total", 0)
    st = j.get("status") or {}
    r["non_2xx"] = sum(st.get(k, 0) for k in ("1xx", "3xx", "4xx", "5xx"))
    return r


def parse_h2load(out):
    r = {"p50_ms": None, "p90_ms": None, "p99_ms": None}
    m = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s, ([\d.]+)(B|KB|MB|GB)/s", out)
    r["rps"] = float(m.group(1)) if m else None
    r["mb_s"] = to_mb(m.group(2) + m.group(3)) if m else None
    m = re.search(r"requests: \d+ total, \d+ started, \d+ done, \d+ succeeded, (\d+) failed, (\d+) errored, "
                  r"(\d+) timeout", out)
    r["socket_errors"] = sum(int(x) for x in m.groups()) if m else 0
    m = re.search(r"status codes: \d+ 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    r["non_2xx"] = sum(int(x) for x in m.groups()) if m else 0
    m = re.search(r"time for request:\s+(\S+)\s+(\S+)\s+(\S+)", out)
    r["p50_ms"] = to_ms(m.group(3)) if m else None  # h2load gives no percentiles: its mean
    return r


def measure(srv, argv, seconds):
    mine = set(srv.pids())
    for p in srv.rss_pids():
        try:
            with open(f"/proc/{p}/clear_refs", "w") as f:
                f.write("5")  # reset VmHWM so the peak is this run's
        except OSError:
            pass
    s0 = {p: (ticks(p) or (0, 0))[0] for p in mine}
    a0 = all_ticks()
    c0 = core_busy()
    k0 = core_split()
    l0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60).stdout
    wall = time.time() - t0
    l1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    c1 = core_busy()
    k1 = core_split()
    a1 = all_ticks()
    now = srv.pids()
    srv_ticks = sum((ticks(p) or (0, 0))[0] - s0.get(p, 0) for p in now)
    upstreams = UPSTREAM_PIDS.union(*(proc_tree(p) for p in UPSTREAM_TREES))
    foreign, top = foreign_ticks(a0, a1, set(now) | mine | upstreams)
    rec = (parse_lowlat_load(out) if "--h3" in argv else parse_h2load(out) if "h2load" in argv
           else parse_wrk(out))
    rec.update({
        "server_cpu_pct": round(100.0 * srv_ticks / CLK / wall, 1),
        "server_rss_kb": sum(vm_hwm_kb(p) for p in srv.rss_pids()),
        "loader_cpu_pct": round(100.0 * (l1.ru_utime + l1.ru_stime - l0.ru_utime - l0.ru_stime) / wall, 1),
        "foreign_cpu_pct": round(100.0 * foreign / CLK / wall, 1),
        "server_core_busy_pct": busy_pct(c0, c1, "cpu0"),
        "load_core_busy_pct": busy_pct(c0, c1, "cpu1"),
        # µs of the server's core a request, by where it went (None without a rate).
        "server_core_split_us": (
            {k: round((b - a) / CLK * 1e6 / (rec["rps"] * wall), 2)
             for k, a, b in zip(("user", "system", "softirq"), k0, k1)} if rec.get("rps") else None),
        "foreign_top": top,
        "wrk_tail": out[-1500:],
    })
    return rec


def split_text(rec):
    """`user/system/softirq` µs of the server's core a request, as the run lines print it."""
    sp = rec.get("server_core_split_us")
    return "/".join(str(sp[k]) for k in ("user", "system", "softirq")) if sp else "-"


# ------------------------------------------------------------------ main
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lowlat", help="command that starts lowlat with one worker; {port} and {www} are filled in")
    ap.add_argument("--scenarios", default="plaintext,plaintext-pipe,static,static-pipe",
                    help=f"comma list out of {','.join(SCENARIOS)}")
    ap.add_argument("--targets", default="", help="comma list; default: every target a scenario names")
    ap.add_argument("--streams", default="",
                    help="h2-*/h3-* scenarios: streams per connection, e.g. '1 10 100' (default 100 for h2, 10 for h3)")
    ap.add_argument("--loader", default="",
                    help="the lowlat binary whose `load --h3` drives h3-* scenarios (default: the one --lowlat starts)")
    ap.add_argument("--conns", default="", help="connection levels, e.g. '16 256 1024' (default per scenario)")
    ap.add_argument("--duration", type=int, default=10, help="seconds per run (default 10)")
    ap.add_argument("--reps", type=int, default=3, help="runs per level; the median is reported (default 3)")
    ap.add_argument("--foreign-max", type=float, default=10.0,
                    help="repeat a run when other processes used more than this %% of a CPU (default 10)")
    ap.add_argument("--raw", default="", help="append every run as a JSON line to this file")
    ap.add_argument("--run-dir", default=os.path.join(tempfile.gettempdir(), f"lowlat-anchors-{os.getuid()}"))
    args = ap.parse_args()

    scenarios = [s for s in args.scenarios.split(",") if s]
    for s in scenarios:
        if s not in SCENARIOS:
            ap.error(f"unknown scenario {s!r}; known: {', '.join(SCENARIOS)}")
    only = [t for t in args.targets.split(",") if t]
    for t in only:
        if t not in PORTS:
            ap.error(f"unknown target {t!r}; known: {', '.join(PORTS)}")
    if not shutil.which("wrk"):
        sys.exit("wrk not found: run setup.sh first")
    if any(s.startswith("h3-") for s in scenarios) and not args.loader:
        first = (args.lowlat or "").split()[:1]
        if not first:
            ap.error("h3-* scenarios need --loader (a lowlat binary) or --lowlat")
        args.loader = first[0]

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
    os.makedirs(args.run_dir, exist_ok=True)
    www = os.path.join(args.run_dir, "www")
    os.makedirs(www, exist_ok=True)
    shutil.copy(os.path.join(HERE, "..", "www", "100.html"), www)
    shutil.copy(os.path.join(HERE, "..", "www", "10k.html"), www)
    os.makedirs(os.path.join(www, "cache"), exist_ok=True)
    shutil.copy(os.path.join(HERE, "..", "www", "100.html"), os.path.join(www, "cache"))
    with open(os.path.join(www, "1m.bin"), "wb") as f:
        f.write(bytes(range(256)) * 4096)
    raw = open(args.raw, "a") if args.raw else None
    make_cert(args.run_dir)

    upstream = None
    if any("proxy" in s for s in scenarios):
        exe = os.path.join(BUILD, "ceiling")
        if not os.path.exists(exe):
            sys.exit(f"{exe} missing: run setup.sh first")
        upstream = subprocess.Popen(["taskset", "-c", "1", exe, str(UPSTREAM_PORT)], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
        UPSTREAM_PIDS.add(upstream.pid)
        time.sleep(0.3)
    origin = None
    if set(CACHE_SCENARIOS) & set(scenarios) or "varnish" in targets_of(scenarios, only):
        origin = start_cache_origin(www, scenarios, args.loader or next(iter((args.lowlat or "").split()), ""))
    fpm = start_php_fpm(args.run_dir, www) if "php" in scenarios else None
    try:
        run_all(args, scenarios, only, www, raw)
    finally:
        for p in (upstream, origin, fpm):
            if p:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait()


def targets_of(scenarios, only):
    """The targets that serve any of `scenarios`, in PORTS order, narrowed to `only` if given."""
    return [t for t in PORTS if any(t in SCENARIOS[s][3] for s in scenarios) and (not only or t in only)]


def run_all(args, scenarios, only, www, raw):
    results = {}  # (scenario, conns, target) -> [records]
    skipped = []  # (target, why): targets that did not start
    fetched = {}  # target -> origin requests for CACHE_PATH over the cache scenario (1: all hits)
    targets = targets_of(scenarios, only)
    if "lowlat" in targets and not args.lowlat:
        log("no --lowlat given: measuring the peers only")
        targets.remove("lowlat")
    for target in targets:
        log(f"starting {target}")
        try:
            srv = make_server(target, args, args.run_dir, www)
            srv.start()
        except RuntimeError as e:
            log(f"  {target} skipped: {e}")
            skipped.append((target, str(e)))
            continue
        try:
            for s in scenarios:
                path, depth, levels, serves = SCENARIOS[s]
                if target not in serves:
                    continue
                tls, close = s.startswith(("tls-", "h2-", "h1-")) or s.endswith("-tls"), s == "tls-handshake"
                url = (f"https://127.0.0.1:{srv.port + TLS_PORT_OFFSET}{path}" if tls
                       else f"http://127.0.0.1:{srv.port}{path}")
                h2, h1, h3 = s.startswith("h2-"), s.startswith("h1-"), s.startswith("h3-")
                if h3:
                    # By name: caddy's QUIC handshake fails without SNI (which an IP address has not).
                    url = f"https://localhost:{srv.port + TLS_PORT_OFFSET}{path}"
                    subprocess.run(lowlat_load_argv(args.loader, url, 16, 10, 2), capture_output=True,
                                   timeout=60)  # warm-up
                elif h2 or h1:
                    subprocess.run(h2load_argv(url, 16, 10, 2), capture_output=True, timeout=60)  # warm-up
                else:
                    before = origin_requests(CACHE_PATH) if s == "cache" else None
                    if s == "cache" and not prime(url):
                        log(f"  {target} did not answer 200 to {url}")
                    subprocess.run(wrk_argv(url, 64, 1, 2, close, SCENARIO_HEADERS.get(s, ()),
                                            SCENARIO_SCRIPTS.get(s)),
                                   capture_output=True, timeout=60)  # warm-up
                runs = [(c, m) for c in ([int(c) for c in args.conns.split()] if args.conns else levels)
                        for m in ([int(m) for m in (args.streams or ("10" if h3 else "100")).split()]
                                  if h2 or h3 else [depth])]
                for conns, depth in runs:
                    label = f"{s}-m{depth}" if h2 or h3 else s
                    for rep in range(args.reps):
                        for attempt in range(4):
                            argv = (lowlat_load_argv(args.loader, url, conns, depth, args.duration) if h3
                                    else h2load_argv(url, conns, depth, args.duration, h1) if h2 or h1
                                    else wrk_argv(url, conns, depth, args.duration, close,
                                                  SCENARIO_HEADERS.get(s, ()), SCENARIO_SCRIPTS.get(s)))
                            rec = measure(srv, argv, args.duration)
                            if rec["foreign_cpu_pct"] <= args.foreign_max:
                                break
                            log(f"  neighbour used {rec['foreign_cpu_pct']}% CPU {rec['foreign_top']}: repeating")
                            time.sleep(5)
                        rec.update(target=target, scenario=label, conns=conns, pipeline=depth, rep=rep,
                                   ts=time.strftime("%Y-%m-%dT%H:%M:%S"))
                        if rec["rps"] is None:
                            log(f"  the load generator gave no result:\n{rec['wrk_tail']}")
                        results.setdefault((label, conns, target), []).append(rec)
                        if raw:
                            raw.write(json.dumps(rec) + "\n")
                            raw.flush()
                        log(f"  {target:12s} {label:14s} c={conns:<5d} rps={rec['rps']} p99={rec['p99_ms']}ms "
                            f"cpu={rec['server_cpu_pct']}% rss={rec['server_rss_kb']}kB "
                            f"errors={rec['socket_errors'] + rec['non_2xx']} "
                            f"core µs/req user/sys/softirq={split_text(rec)}")
                if s == "cache":
                    after = origin_requests(CACHE_PATH)
                    fetched[target] = after - before if None not in (before, after) else None
                    log(f"  {target} asked the origin for {CACHE_PATH} {fetched[target]} time(s)")
        finally:
            srv.stop()
            time.sleep(1)

    labels = list(dict.fromkeys(sc for (sc, _, _) in results))
    print(table(results, labels, targets))
    for line in cache_lines(results, fetched):
        print(line)
    for target, why in skipped:
        print(f"skipped {target}: {why}")


def cache_lines(results, fetched):
    """What the cache scenario adds below the table: how often each cache asked the origin (once
    is right: every other request was a hit), and lowlat's hit ÷ the same bytes as a file."""
    lines = []
    if fetched:
        said = ", ".join(f"{t} {n}" if n == 1 else f"{t} {n} (NOT ALL HITS)" for t, n in fetched.items())
        lines.append(f"origin requests for {CACHE_PATH} over the cache scenario (1 = every other request a hit): "
                     + said)
    for conns in sorted({c for (sc, c, t) in results if sc == "cache" and t == "lowlat"}):
        hit, file = cost_us(results[("cache", conns, "lowlat")]), cost_us(results.get(("cache-static", conns,
                                                                                           "lowlat"), []))
        if hit and file:
            asked = fetched.get("lowlat", 1)
            lines.append(f"lowlat c={conns}: server µs per cache hit ÷ per the same bytes as a file "
                         f"(cache-static) = {hit / file:.2f}"
                         + ("" if asked == 1 else f" -- NOT hits: the origin was asked {asked} times"))
    return lines


def median(recs, key):
    vals = [r[key] for r in recs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def cost_us(recs):
    """Server-core microseconds per request: the busy time of CPU 0 (the server's core, kernel
    work included) divided by the requests served. Unlike req/s it still compares servers when
    the load generator, not the server, is the bottleneck."""
    vals = [r["server_core_busy_pct"] / 100.0 / r["rps"] * 1e6 for r in recs if r.get("rps")]
    return statistics.median(vals) if vals else None


def table(results, scenarios, targets):
    lines = ["| scenario | conns | target | req/s | server µs/req | p99 ms | MB/s | server RSS MiB | errors "
             "| bound by | lowlat req/s ÷ target | target µs/req ÷ lowlat |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda v, f: (f.format(v) if v is not None else "-")  # noqa: E731
    for s in scenarios:
        for conns in sorted({c for (sc, c, _) in results if sc == s}):
            base = results.get((s, conns, "lowlat"))
            for t in targets:
                recs = results.get((s, conns, t))
                if not recs:
                    continue
                rps, cost = median(recs, "rps"), cost_us(recs)
                speed = eff = ""
                if base and t != "lowlat":
                    if rps and median(base, "rps"):
                        speed = f"{median(base, 'rps') / rps:.2f}"
                    if cost and cost_us(base):
                        eff = f"{cost / cost_us(base):.2f}"
                load_busy = median(recs, "load_core_busy_pct") or 0
                bound = "load generator" if load_busy >= 97 else (
                    "server" if (median(recs, "server_core_busy_pct") or 0) >= 97 else "neither")
                rss = median(recs, "server_rss_kb")
                errs = sum(r["socket_errors"] + r["non_2xx"] for r in recs)
                lines.append(f"| {s} | {conns} | {t} | {fmt(rps, '{:.0f}')} | {fmt(cost, '{:.2f}')} "
                             f"| {fmt(median(recs, 'p99_ms'), '{:.2f}')} | {fmt(median(recs, 'mb_s'), '{:.1f}')} "
                             f"| {fmt(rss / 1024 if rss else None, '{:.1f}')} | {errs} | {bound} | {speed} | {eff} |")
    lines.append("")
    lines.append("server µs/req: busy time of the server's core per request (lower is better); "
                 "'bound by load generator' means wrk's core was saturated, so req/s understates the server.")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
