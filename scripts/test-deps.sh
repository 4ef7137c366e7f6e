#!/usr/bin/env bash
# Installs the system packages that the test suite drives for real (a second HTTP server, an HTTP
# client, a headless browser). Safe to run again: installs only what is missing.
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
# HTTP/2 is tested with curl --http2, nghttp and h2load (Debian's nghttp2-client).
command -v h2load >/dev/null 2>&1 || need+=(nghttp2-client)
# lowlat load --h2 is checked against h2o, the reference HTTP/2 server.
command -v h2o >/dev/null 2>&1 || need+=(h2o)
# h2spec (below) is built with Go.
command -v go >/dev/null 2>&1 || command -v h2spec >/dev/null 2>&1 || need+=(golang-go)
# lowlat bench's report test opens the HTML report in headless Chromium.
command -v chromium >/dev/null 2>&1 || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
    # nginx's package starts a daemon on port 80; the tests start their own on free ports.
    for daemon in nginx h2o; do
        if command -v systemctl >/dev/null 2>&1; then $sudo systemctl stop $daemon 2>/dev/null || true; fi
        if [ -x /etc/init.d/$daemon ]; then $sudo /etc/init.d/$daemon stop >/dev/null 2>&1 || true; fi
    done
fi
# h2spec (the HTTP/2 conformance suite) from the Go module proxy, built with the dependencies
# pinned in scripts/h2spec/go.mod (so Debian's Go builds it too), into $(go env GOPATH)/bin.
if ! command -v h2spec >/dev/null 2>&1 && [ ! -x "$(go env GOPATH)/bin/h2spec" ]; then
    (cd "$(dirname "$0")/h2spec" && go build -o "$(go env GOPATH)/bin/h2spec" github.com/summerwind/h2spec/cmd/h2spec)
fi
