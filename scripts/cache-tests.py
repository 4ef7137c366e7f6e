#!/usr/bin/env python3
"""The HTTP caching test suite (the npm package http-cache-tests, pinned below) run against a
reverse proxy cache: the suite's own origin server, the cache under test in front of it, and the
suite's command-line client asking the cache, as the suite's README describes for reverse proxies.

  scripts/cache-tests.py --install                    # the suite, into the cache directory
  scripts/cache-tests.py --target nginx --json nginx.json
  scripts/cache-tests.py --cache "target/release/lowlat serve --workers 1 \\
      --listen 127.0.0.1:{port} --proxy /=http://{origin} --cache" --name lowlat
  scripts/cache-tests.py --published                  # the results the package ships, counted

--cache is a command template: {port} is where the cache must listen (127.0.0.1), {origin} the
suite's origin server (127.0.0.1:PORT), {run_dir} a directory for its files. --target starts a
peer configured as the suite's own Docker image configures it (docker/ in the package), with
paths and ports of its own: nginx (proxy_cache), varnish (-s malloc), squid (memory only) and
trafficserver (Apache Traffic Server, RAM cache over a small cache file).

It prints the counts the project compares caches by, over the tests of the suite's index (the
client also runs the Surrogate-Control tests, a CDN header outside RFC 9111; they are listed in
the JSON but not counted, as the published figures do not count them):
  - tests of kind "required" (or of no kind) that ran and did not pass;
  - tests of kind "optimal" that passed, of all the suite's optimal tests (the two browser-only
    ones, which a command-line client never runs, among them);
then the failing ids, and writes every result to --json. Exit 0 when the suite ran (whatever
it found), 1 when it could not (a one-line reason), 2 for bad usage.
"""
import argparse
import json
import os
import shutil
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time

PACKAGE = "http-cache-tests"
VERSION = "0.4.5"
# Its dependencies, pinned too (it asks for ranges): the versions it was first run with here.
DEPENDENCIES = {"node-fetch": "2.7.0", "liquidjs": "9.43.0", "npm": "6.14.18"}
# The suite's client takes about 20 s against its origin alone; a cache that answers slowly or
# holds a request open would otherwise hold the run for ever.
CLIENT_TIMEOUT_S = 600
START_TIMEOUT_S = 20  # for the origin and the cache to accept connections
# What node prints for the suite's tests: id, kind, suite, browser_only, and whether the test
# belongs to the index (the published counts) or to the Surrogate-Control suite the client adds.
LIST_TESTS = """
const dir = process.argv[1]
const index = (await import(dir + '/tests/index.mjs')).default
const surrogate = (await import(dir + '/tests/surrogate-control.mjs')).default
const out = []
for (const [suites, counted] of [[index, true], [[surrogate], false]]) {
  for (const s of suites) {
    for (const t of s.tests) {
      out.push({ id: t.id, kind: t.kind || 'required', suite: s.id, counted,
                 browser_only: t.browser_only === true, depends_on: t.depends_on || [] })
    }
  }
}
console.log(JSON.stringify(out))
"""


def cache_home():
    return os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")


def default_install_dir():
    return os.path.join(cache_home(), "lowlat-cache-tests")


def suite_dir(install_dir):
    return os.path.join(install_dir, "node_modules", PACKAGE)


def installed_version(install_dir):
    try:
        with open(os.path.join(suite_dir(install_dir), "package.json")) as f:
            return json.load(f).get("version")
    except (OSError, ValueError):
        return None


def install(install_dir):
    """npm installs the pinned version into install_dir (with the machine's own npm
    configuration) unless it is there already."""
    if installed_version(install_dir) == VERSION:
        return
    if not shutil.which("npm"):
        raise SystemExit("cache-tests: npm not found (install Node.js and npm)")
    os.makedirs(install_dir, exist_ok=True)
    # A package.json of its own, so that npm installs here and not into a project above it.
    manifest = os.path.join(install_dir, "package.json")
    with open(manifest, "w") as f:
        json.dump({"name": "lowlat-cache-tests", "private": True,
                   "dependencies": {PACKAGE: VERSION}, "overrides": DEPENDENCIES}, f)
    done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--no-package-lock",
                           "--prefix", install_dir], capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or installed_version(install_dir) != VERSION:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"cache-tests: npm could not install {PACKAGE}@{VERSION}: {tail[0]}")


def list_tests(pkg):
    """The suite's tests as LIST_TESTS describes them."""
    url = "file://" + os.path.abspath(pkg)
    out = subprocess.run(["node", "--no-warnings", "--input-type=module", "-e", LIST_TESTS, url],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return json.loads(out)


# ------------------------------------------------------------------ counting
def count(tests, results):
    """The counts over the index's tests (see the module's doc): a dict with required_not_passed
    (ids), optimal_passed (ids), optimal_total, required_total, ran (counted tests with a result),
    expected (counted tests a command-line client runs) and surrogate_not_passed (ids, not
    counted). A result is `true` for a pass, else a list [error name, message]."""
    req_failed, opt_passed, opt_failed, sur_failed = [], [], [], []
    req_total = opt_total = ran = expected = 0
    for t in tests:
        r = results.get(t["id"])
        if not t["counted"]:
            if r is not None and r is not True:
                sur_failed.append(t["id"])
            continue
        if not t["browser_only"]:
            expected += 1
            if r is not None:
                ran += 1
        if t["kind"] == "required":
            req_total += 1
            if r is not None and r is not True:
                req_failed.append(t["id"])
        elif t["kind"] == "optimal":
            opt_total += 1
            (opt_passed if r is True else opt_failed).append(t["id"])
    return {"required_not_passed": sorted(req_failed), "required_total": req_total,
            "optimal_passed": sorted(opt_passed), "optimal_not_passed": sorted(opt_failed),
            "optimal_total": opt_total, "ran": ran, "expected": expected,
            "surrogate_not_passed": sorted(sur_failed)}


def parse_client_output(text):
    """The client prints its results as one JSON object ({test id: true | [name, message]});
    anything else is the harness failing."""
    try:
        results = json.loads(text)
    except ValueError:
        raise ValueError("the suite's client printed no JSON results: "
                         + (text.strip().splitlines() or ["nothing"])[-1][:200])
    if not isinstance(results, dict) or not all(v is True or isinstance(v, list) for v in results.values()):
        raise ValueError("the suite's client printed JSON that is not a map of test results")
    return results


def summary(name, c):
    return (f"{name}: required not passed {len(c['required_not_passed'])} of {c['required_total']}; "
            f"optimal passed {len(c['optimal_passed'])} of {c['optimal_total']} "
            f"({c['ran']} of {c['expected']} tests ran)")


# ------------------------------------------------------------------ the peers
def peer_nginx(run, port, origin):
    """docker/nginx/nginx.conf: proxy_cache with proxy_cache_revalidate, paths in the run dir."""
    conf = os.path.join(run, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""# written by scripts/cache-tests.py, after the suite's docker/nginx/nginx.conf
user root;
worker_processes 1;
daemon off;
pid {run}/nginx.pid;
error_log {run}/nginx-error.log warn;
events {{ worker_connections 2048; }}
http {{
    access_log off;
    client_body_temp_path {run}/nginx-body;
    fastcgi_temp_path {run}/nginx-fastcgi;
    uwsgi_temp_path {run}/nginx-uwsgi;
    scgi_temp_path {run}/nginx-scgi;
    proxy_cache_path {run}/nginx-cache levels=1:2 keys_zone=my-cache:8m max_size=1000m inactive=600m;
    proxy_temp_path {run}/nginx-proxy;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://{origin};
            proxy_cache my-cache;
            proxy_cache_revalidate on;
        }}
    }}
}}
""")
    return ["nginx", "-p", run, "-c", conf, "-e", f"{run}/nginx-error.log"]


def peer_varnish(run, port, origin):
    """docker/serve.sh: the built-in VCL with a backend, no default TTL or grace, a keep for
    revalidation, 64 MiB of malloc storage."""
    return ["varnishd", "-F", "-a", f"127.0.0.1:{port}", "-b", origin, "-n", os.path.join(run, "varnish"),
            "-p", "default_ttl=0", "-p", "default_grace=0", "-p", "default_keep=3600", "-s", "malloc,64M"]


def peer_squid(run, port, origin):
    """docker/squid/squid.conf (an accelerator in front of the origin) with the refresh_pattern
    lines of Debian's default squid.conf, which it is included from there; memory only (no
    cache_dir, as Debian's default)."""
    host, oport = origin.rsplit(":", 1)
    conf = os.path.join(run, "squid.conf")
    with open(conf, "w") as f:
        f.write(f"""# written by scripts/cache-tests.py, after the suite's docker/squid/squid.conf
http_port 127.0.0.1:{port} accel defaultsite=localhost no-vhost
cache_peer {host} parent {oport} 0 no-query no-digest originserver default name=myAccel
acl our_sites dstdomain localhost
cache_peer_access myAccel allow all
http_access allow all
shutdown_lifetime 1 second
connect_retries 3
refresh_pattern ^ftp:		1440	20%	10080
refresh_pattern ^gopher:	1440	0%	1440
refresh_pattern -i (/cgi-bin/|\\?) 0	0%	0
refresh_pattern .		0	20%	4320
visible_hostname localhost
pid_filename {run}/squid.pid
cache_log {run}/squid-cache.log
access_log none
cache_store_log none
coredump_dir {run}
logfile_rotate 0
""")
    return ["squid", "-N", "-f", conf]


def peer_trafficserver(run, port, origin):
    """docker/trafficserver/records.config's cache settings (heuristic freshness, cookies and
    dynamic-looking URLs cached, Accept-Encoding normalised, no negative caching) in a runroot of
    its own, one remap rule to the origin, a 64 MiB cache file behind the RAM cache."""
    return trafficserver_runroot(run, port, origin, threads=0)


def trafficserver_runroot(run, port, origin, threads):
    """A runroot of its own for traffic_server in run/ats: the package's programs and plugins,
    and a copy of its default configuration (/etc/trafficserver, only read) with the settings
    below, so that nothing outside the run directory is written. threads > 0 fixes the event
    threads (the benchmark's one); 0 keeps ATS's own count. Returns the command."""
    root = os.path.join(run, "ats")
    etc, cache = os.path.join(root, "etc"), os.path.join(root, "cache")
    if not os.path.isdir(etc):
        shutil.copytree("/etc/trafficserver", etc)
    for d in ("cache", "run", "log", "var"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    with open(os.path.join(root, "runroot.yaml"), "w") as f:
        f.write(f"prefix: {root}\nexec_prefix: /usr\nbindir: /usr/bin\nsbindir: /usr/sbin\n"
                f"sysconfdir: {etc}\ndatadir: {root}/var\nincludedir: /usr/include\n"
                f"libdir: /usr/lib/trafficserver\nlibexecdir: /usr/lib/trafficserver/modules\n"
                f"localstatedir: {root}/var\nruntimedir: {root}/run\nlogdir: {root}/log\n"
                f"cachedir: {cache}\n")
    thread_lines = (f"CONFIG proxy.config.exec_thread.autoconfig INT 0\n"
                    f"CONFIG proxy.config.exec_thread.limit INT {threads}\n"
                    f"CONFIG proxy.config.accept_threads INT 0\n"
                    f"CONFIG proxy.config.task_threads INT 1\n"
                    f"CONFIG proxy.config.cache.threads_per_disk INT 1\n") if threads else ""
    with open(os.path.join(etc, "records.config"), "w") as f:
        f.write(f"""# written by scripts/cache-tests.py, after the suite's docker/trafficserver/records.config
CONFIG proxy.config.http.server_ports STRING {port}
CONFIG proxy.config.admin.user_id STRING #-1
CONFIG proxy.config.body_factory.template_sets_dir STRING {etc}/body_factory
{thread_lines}CONFIG proxy.config.http.insert_request_via_str INT 1
CONFIG proxy.config.http.insert_response_via_str INT 0
CONFIG proxy.config.http.negative_caching_enabled INT 0
CONFIG proxy.config.http.push_method_enabled INT 0
CONFIG proxy.config.http.cache.http INT 1
CONFIG proxy.config.http.cache.ignore_client_cc_max_age INT 1
CONFIG proxy.config.http.normalize_ae INT 1
CONFIG proxy.config.http.cache.cache_responses_to_cookies INT 1
CONFIG proxy.config.http.cache.cache_urls_that_look_dynamic INT 1
CONFIG proxy.config.http.cache.when_to_revalidate INT 0
CONFIG proxy.config.http.cache.required_headers INT 2
CONFIG proxy.config.http.cache.heuristic_min_lifetime INT 3600
CONFIG proxy.config.http.cache.heuristic_max_lifetime INT 86400
CONFIG proxy.config.http.cache.heuristic_lm_factor FLOAT 0.10
CONFIG proxy.config.cache.ram_cache.size INT 67108864
CONFIG proxy.config.cache.ram_cache_cutoff INT 4194304
CONFIG proxy.config.cache.limits.http.max_alts INT 5
CONFIG proxy.config.cache.max_doc_size INT 0
CONFIG proxy.config.cache.min_average_object_size INT 8000
CONFIG proxy.config.log.logging_enabled INT 0
CONFIG proxy.config.url_remap.remap_required INT 1
CONFIG proxy.config.url_remap.pristine_host_hdr INT 1
CONFIG proxy.config.reverse_proxy.enabled INT 1
CONFIG proxy.config.diags.debug.enabled INT 0
""")
    with open(os.path.join(etc, "remap.config"), "w") as f:
        f.write(f"map http://127.0.0.1:{port}/ http://{origin}/\n")
    # A file for the cache, made here: traffic_server does not create one.
    with open(os.path.join(cache, "cache.db"), "ab") as f:
        f.truncate(64 << 20)
    with open(os.path.join(etc, "storage.config"), "w") as f:
        f.write(f"{cache}/cache.db 64M\n")
    with open(os.path.join(etc, "ip_allow.yaml"), "w") as f:
        f.write("ip_allow:\n  - apply: in\n    ip_addrs: 0/0\n    action: allow\n"
                "  - apply: in\n    ip_addrs: ::/0\n    action: allow\n")
    return ["traffic_server", f"--run-root={root}"]


PEERS = {"nginx": peer_nginx, "varnish": peer_varnish, "squid": peer_squid,
         "trafficserver": peer_trafficserver}


# ------------------------------------------------------------------ processes
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(proc, port, what, log_path):
    deadline = time.time() + START_TIMEOUT_S
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening: {last_line(log_path)}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {START_TIMEOUT_S} s: "
                       f"{last_line(log_path)}")


def last_line(path):
    """What a process's log says in one line: its first line that names an error (a command-line
    parser prints its usage after it), else its last line."""
    try:
        with open(path, errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError:
        return "no output"
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["no output"])[0 if errors else -1][:300]


def start(argv, log_path, cwd=None, env=None):
    log = open(log_path, "ab")
    return subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, cwd=cwd, env=env,
                            start_new_session=True)


def stop(proc):
    """SIGTERM to its process group, SIGKILL after 10 s."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_suite(pkg, argv, run, origin_port, port, timeout, test_id=""):
    """Starts the origin and the cache, runs the client; returns its output (stdout)."""
    origin = cache = None
    env = dict(os.environ, npm_config_port=str(origin_port), npm_config_protocol="http",
               npm_config_pidfile=os.path.join(run, "origin.pid"))
    try:
        origin_log = os.path.join(run, "origin.log")
        origin = start(["node", "--no-warnings", "server/server.mjs"], origin_log, cwd=pkg, env=env)
        wait_listening(origin, origin_port, "the suite's origin server", origin_log)
        cache_log = os.path.join(run, "cache.log")
        try:
            cache = start(argv, cache_log, cwd=run)
        except OSError as e:
            raise RuntimeError(f"cannot start the cache under test ({argv[0]}): {e.strerror}")
        wait_listening(cache, port, "the cache under test", cache_log)
        client_env = dict(os.environ, npm_config_base=f"http://127.0.0.1:{port}",
                          npm_config_id=test_id, npm_package_config_id=test_id)
        try:
            done = subprocess.run(["node", "--no-warnings", "cli.mjs"], cwd=pkg, env=client_env,
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the suite's client did not finish within {timeout} s")
        if cache.poll() is not None:
            raise RuntimeError(f"the cache under test exited with {cache.returncode} during the run: "
                               f"{last_line(cache_log)}")
        return done.stdout
    finally:
        stop(cache)
        stop(origin)


# ------------------------------------------------------------------ main
def published(pkg, tests, directory):
    """Counts every results/*.json of `directory` (the package's own by default)."""
    directory = directory or os.path.join(pkg, "results")
    rows = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".json"):
            with open(os.path.join(directory, name)) as f:
                rows.append((name[:-5], count(tests, json.load(f))))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--target", choices=sorted(PEERS), help="a peer, configured as the suite's Docker image does")
    which.add_argument("--cache", help="the command that starts the cache under test ({port}, {origin}, {run_dir})")
    which.add_argument("--install", action="store_true", help=f"install {PACKAGE}@{VERSION} and exit")
    which.add_argument("--published", nargs="?", const="", metavar="DIR",
                       help="count published results (DIR/*.json; default: those the package ships)")
    ap.add_argument("--name", help="the cache's name in the report (default: --target, or 'cache')")
    ap.add_argument("--id", default="", help="run this one test, printing its requests and responses")
    ap.add_argument("--json", help="write the results and the counts to this file")
    ap.add_argument("--install-dir", default=default_install_dir(),
                    help="where the suite is installed (default: %(default)s)")
    ap.add_argument("--run-dir", help="the cache's and the origin's files and logs (default: a new temporary one)")
    ap.add_argument("--timeout", type=int, default=CLIENT_TIMEOUT_S, help="seconds for the client (default: %(default)s)")
    args = ap.parse_args(argv)
    if not (args.target or args.cache or args.install or args.published is not None):
        ap.error("one of --target, --cache, --install or --published is needed")
    if args.cache and "{port}" not in args.cache:
        ap.error("--cache must contain {port}, where the cache listens")
    if not shutil.which("node"):
        print("cache-tests: node not found (install Node.js)", file=sys.stderr)
        return 1
    install(args.install_dir)
    pkg = suite_dir(args.install_dir)
    if args.install:
        print(f"{PACKAGE}@{VERSION} in {pkg}")
        return 0
    tests = list_tests(pkg)
    if args.published is not None:
        for name, c in published(pkg, tests, args.published):
            print(summary(name, c))
        return 0

    name = args.name or args.target or "cache"
    run = args.run_dir or tempfile.mkdtemp(prefix="lowlat-cache-tests-")
    os.makedirs(run, exist_ok=True)
    os.chmod(run, 0o755)  # the peers' workers (varnish, squid) drop to users of their own
    port, origin_port = free_port(), free_port()
    origin = f"127.0.0.1:{origin_port}"
    try:
        if args.target:
            cmd = PEERS[args.target](run, port, origin)
        else:
            cmd = shlex.split(args.cache.format(port=port, origin=origin, run_dir=run))
        out = run_suite(pkg, cmd, run, origin_port, port, args.timeout, args.id)
    except (RuntimeError, subprocess.CalledProcessError, OSError) as e:
        print(f"cache-tests: {name}: {e} (files in {run})", file=sys.stderr)
        return 1
    if args.id:
        print(out)
        return 0
    try:
        results = parse_client_output(out)
    except ValueError as e:
        print(f"cache-tests: {name}: {e} (files in {run})", file=sys.stderr)
        return 1
    c = count(tests, results)
    if not args.run_dir:
        shutil.rmtree(run, ignore_errors=True)  # kept only when something went wrong, or asked for
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"suite": PACKAGE, "version": VERSION, "name": name,
                       "command": args.target or args.cache, "counts": c, "results": results}, f, indent=1)
    print(f"{PACKAGE} {VERSION}, " + summary(name, c))
    print("required not passed: " + (" ".join(c["required_not_passed"]) or "none"))
    print("optimal not passed: " + (" ".join(c["optimal_not_passed"]) or "none"))
    if c["ran"] < c["expected"]:
        print(f"cache-tests: {name}: only {c['ran']} of the {c['expected']} tests ran", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
