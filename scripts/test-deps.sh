#!/usr/bin/env bash
# Installs what the test suite drives for real (other HTTP servers, HTTP and gRPC clients, a
# headless browser, the proxy's upstreams). Safe to run again: installs only what is missing.
set -euo pipefail
need=()
command -v curl >/dev/null 2>&1 || need+=(curl)
# The TLS tests drive openssl s_client (SNI, ALPN) and nginx with ssl.
command -v openssl >/dev/null 2>&1 || need+=(openssl)
# lowlat load's text report is compared line by line with wrk's own.
command -v wrk >/dev/null 2>&1 || need+=(wrk)
# lowlat bench's sweep test runs nginx beside lowlat; its lifecycle tests use python3's http.server.
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
command -v python3 >/dev/null 2>&1 || need+=(python3)
# CI's instructions gate (scripts/instructions.py) counts the server's instructions under callgrind.
command -v valgrind >/dev/null 2>&1 || need+=(valgrind)
# lowlat bench's service test builds the ceiling responder (bench/kit/ceiling/ceiling.c) as an upstream.
command -v gcc >/dev/null 2>&1 || need+=(gcc)
# The proxy's upstreams run in a virtual environment (below); Debian's python3 makes one only with
# python3-venv (ensurepip).
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
# The benchmarks put lowlat's proxy beside HAProxy and Caddy; the PROXY protocol tests put HAProxy
# in front of lowlat.
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || need+=(haproxy)
command -v caddy >/dev/null 2>&1 || need+=(caddy)
# HTTP/2 is tested with curl --http2, nghttp and h2load (Debian's nghttp2-client).
command -v h2load >/dev/null 2>&1 || need+=(nghttp2-client)
# Socket activation is tested with systemd-socket-activate (Debian's systemd package).
command -v systemd-socket-activate >/dev/null 2>&1 || need+=(systemd)
# lowlat load --h2 is checked against h2o, the reference HTTP/2 server.
command -v h2o >/dev/null 2>&1 || need+=(h2o)
# h2spec, grpcurl and Pebble (below) are built with Go.
command -v go >/dev/null 2>&1 || { command -v h2spec >/dev/null 2>&1 && command -v grpcurl >/dev/null 2>&1 \
    && command -v pebble >/dev/null 2>&1 && command -v pebble-challtestsrv >/dev/null 2>&1; } \
    || need+=(golang-go)
# lowlat bench's report test opens the HTML report in headless Chromium.
command -v chromium >/dev/null 2>&1 || need+=(chromium)
# The Basic authentication tests write their htpasswd files with Apache's own htpasswd.
command -v htpasswd >/dev/null 2>&1 || need+=(apache2-utils)
# The cache's conformance test runs the HTTP caching test suite, a Node.js package (below).
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
# The PHP tests run Debian's php-fpm (whichever version is current: they find /usr/sbin/php-fpm*)
# and DokuWiki, from Debian's package, in front of it.
ls /usr/sbin/php-fpm* >/dev/null 2>&1 || need+=(php-fpm)
[ -f /usr/share/dokuwiki/doku.php ] || need+=(dokuwiki)
# WordPress, from Debian's package too, with a MariaDB the test starts in a directory of its own.
[ -f /usr/share/wordpress/wp-settings.php ] || need+=(wordpress wordpress-theme-twentytwentythree php-mysql)
[ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
# Rate-limit zones kept in Redis are tested against a redis-server the test starts on a free port.
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
if [ ${#need[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
    # nginx's, HAProxy's, Caddy's and Redis's packages start a daemon (Caddy's on port 80, as nginx's); the
    # tests start their own on free ports.
    for daemon in nginx h2o haproxy caddy mariadb redis-server $(cd /etc/init.d 2>/dev/null && ls -d php*-fpm 2>/dev/null); do
        if command -v systemctl >/dev/null 2>&1; then $sudo systemctl stop $daemon 2>/dev/null || true; fi
        if [ -x /etc/init.d/$daemon ]; then $sudo /etc/init.d/$daemon stop >/dev/null 2>&1 || true; fi
    done
fi
# The benchmark specs' certificate and files (bench/tls/): the peers' configurations always
# open a TLS listener, so checking any spec needs them.
"$(dirname "$0")/../bench/tls.sh"
# h2spec (the HTTP/2 conformance suite) from the Go module proxy, built with the dependencies
# pinned in scripts/h2spec/go.mod (so Debian's Go builds it too), into $(go env GOPATH)/bin.
if ! command -v h2spec >/dev/null 2>&1 && [ ! -x "$(go env GOPATH)/bin/h2spec" ]; then
    (cd "$(dirname "$0")/h2spec" && go build -o "$(go env GOPATH)/bin/h2spec" github.com/summerwind/h2spec/cmd/h2spec)
fi
# grpcurl (the gRPC client the proxy's gRPC tests call through it), built the same way from
# scripts/grpcurl/go.mod: v1.8.9 is the newest release that Go 1.19 builds (v1.9 needs 1.21).
if ! command -v grpcurl >/dev/null 2>&1 && [ ! -x "$(go env GOPATH)/bin/grpcurl" ]; then
    (cd "$(dirname "$0")/grpcurl" && go build -ldflags "-X main.version=v1.8.9" \
        -o "$(go env GOPATH)/bin/grpcurl" github.com/fullstorydev/grpcurl/cmd/grpcurl)
fi
# oauth2-proxy, the auth service the forward-auth tests sign in with (an htpasswd user, then its
# /oauth2/auth: crates/lowlat/tests/forward_auth.rs), from the Go module proxy at a pinned
# release, into $(go env GOPATH)/bin. Its go.mod asks for Go 1.26: an older go fetches that
# toolchain itself (GOTOOLCHAIN=auto, the default).
if ! command -v oauth2-proxy >/dev/null 2>&1 && [ ! -x "$(go env GOPATH)/bin/oauth2-proxy" ]; then
    go install github.com/oauth2-proxy/oauth2-proxy/v7@v7.15.6
fi
# Pebble, Let's Encrypt's test ACME server, and pebble-challtestsrv (its DNS server) for the ACME
# tests, built the same way from scripts/pebble/go.mod. Pebble needs Go 1.21 or newer; Debian 12's
# own is 1.19, so its bookworm-backports golang-1.21-go is installed beside it when needed, from
# the archive the machine's own apt sources name for bookworm (scripts/apt-backports.py), so this
# works behind whatever mirror apt is set up with.
if ! command -v pebble >/dev/null 2>&1 || ! command -v pebble-challtestsrv >/dev/null 2>&1; then
    gobin="$(go env GOPATH)/bin"
    if [ ! -x "$gobin/pebble" ] || [ ! -x "$gobin/pebble-challtestsrv" ]; then
        go_for_pebble=go
        go_minor="$(go env GOVERSION | sed -n 's/^go1\.\([0-9]*\).*/\1/p')"
        if [ "${go_minor:-0}" -lt 21 ]; then
            if [ ! -x /usr/lib/go-1.21/bin/go ]; then
                sudo=""
                [ "$(id -u)" -eq 0 ] || sudo=sudo
                if ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
                    backports="$(python3 "$(dirname "$0")/apt-backports.py" bookworm)"
                    echo "$backports" | $sudo tee /etc/apt/sources.list.d/bookworm-backports.list >/dev/null
                fi
                $sudo apt-get update -qq
                DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq -t bookworm-backports golang-1.21-go >/dev/null
            fi
            go_for_pebble=/usr/lib/go-1.21/bin/go
        fi
        mkdir -p "$gobin"
        (cd "$(dirname "$0")/pebble" && GOTOOLCHAIN=local "$go_for_pebble" build -o "$gobin/pebble" \
            github.com/letsencrypt/pebble/v2/cmd/pebble \
            && GOTOOLCHAIN=local "$go_for_pebble" build -o "$gobin/pebble-challtestsrv" \
            github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv)
    fi
fi
# The proxy's upstreams (gunicorn, uvicorn, websockets, grpcio: crates/lowlat/tests/upstreams/)
# and the QUIC/HTTP/3 client of the --h3-listen tests (aioquic: crates/lowlat/tests/quic/)
# and the HTTP/3 server of `lowlat load --h3`'s tests (aioquic: crates/load/tests/h3/)
# in a virtual environment with the versions of scripts/upstreams/requirements.txt. It is made
# anew whenever that file changes (a copy of it in the environment says what it holds) or the
# environment no longer works (its Python was removed, say). The tests find it at the same path:
# $LOWLAT_TEST_VENV, else lowlat-test-venv in the user's cache directory.
# oha with HTTP/3 (an HTTP/3 client the HTTP/3 tests use beside aioquic): built once into the
# cache, pinned; about 20 minutes on two cores the first time.
oha_root="${XDG_CACHE_HOME:-$HOME/.cache}/lowlat-oha"
if [ ! -x "$oha_root/bin/oha" ]; then
    env -u CARGO_TARGET_DIR cargo install -q oha --version 1.16.0 --locked --features http3 --root "$oha_root"
fi
venv="${LOWLAT_TEST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/lowlat-test-venv}"
requirements="$(dirname "$0")/upstreams/requirements.txt"
if ! cmp -s "$requirements" "$venv/requirements.txt" \
    || ! "$venv/bin/python" -c 'import gunicorn, uvicorn, websockets, grpc, grpc_tools, h2, wsproto, aioquic' 2>/dev/null; then
    python3 -m venv --clear "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check --no-input -r "$requirements"
    cp "$requirements" "$venv/requirements.txt"
fi
# The HTTP caching test suite (npm's http-cache-tests at the version pinned in
# scripts/cache-tests.py) for crates/lowlat/tests/cache_conformance.rs, into
# lowlat-cache-tests in the cache directory, where the test and the script look for it.
"$(dirname "$0")/cache-tests.py" --install >/dev/null
