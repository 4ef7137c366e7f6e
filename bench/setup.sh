#!/bin/sh
# Installs what the shipped benchmark specs (bench/specs/*.toml) need besides lowlat itself:
# nginx, lighttpd, h2o, varnish, haproxy and caddy from Debian's packages (python3 serves
# varnish's origin; a C compiler builds the ceiling), release builds of the comparison peers
# under bench/peers/ into bench/peers/target/release/ (lowlat-axum-peer, may-mini), and the
# ceiling responder the proxy spec starts as its upstream, built by bench/kit/ceiling/build.sh
# where the kit builds it too. Safe to run again: installs only what is missing, and cargo
# rebuilds only what changed. Then: `cargo build --release && lowlat bench bench/specs/NAME.toml`
# (or target/release/lowlat bench ...).
set -eu
here=$(cd "$(dirname "$0")" && pwd)

need=""
for pair in nginx:nginx-light lighttpd:lighttpd h2o:h2o varnishd:varnish haproxy:haproxy caddy:caddy python3:python3 cc:gcc; do
    cmd=${pair%%:*}
    pkg=${pair#*:}
    command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || need="$need $pkg"
done
if [ -n "$need" ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $need >/dev/null
fi

# Debian starts the packaged daemons on install; the specs start their own copies on other ports,
# but a packaged one on a benchmark core would distort every figure.
for svc in nginx lighttpd h2o varnish haproxy caddy; do
    if command -v systemctl >/dev/null 2>&1; then systemctl stop "$svc" 2>/dev/null || true; fi
    if [ -x "/etc/init.d/$svc" ]; then "/etc/init.d/$svc" stop >/dev/null 2>&1 || true; fi
done

# The TLS certificate and files every spec needs (bench/tls/, not tracked).
"$here/tls.sh"

# The proxy spec's upstream: the kit's ceiling, in the kit's build directory.
"$here/kit/ceiling/build.sh"

# The peers share one target directory so that the specs find them at a fixed place.
export CARGO_TARGET_DIR="${PEERS_TARGET_DIR:-$here/peers/target}"
for peer in axum-app may-mini; do
    cargo build --release --quiet --locked --manifest-path "$here/peers/$peer/Cargo.toml"
done
echo "peers ready in $CARGO_TARGET_DIR/release: lowlat-axum-peer may-mini"
