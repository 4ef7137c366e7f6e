#!/bin/sh
# Installs the peer servers and load tools that lowlat is measured against:
# wrk, nginx, lighttpd, h2o, varnish, haproxy, caddy, squid, Apache Traffic Server, ab, h2load and
# php-fpm (the php scenario's application server) from Debian, and a one-worker may-minihttp TechEmpower app (bench/peers/may-mini) built with
# cargo, and the ceiling responder (ceiling/ceiling.c), both into $ANCHORS_BUILD; and wrk2 from the
# source tarball here.
# Safe to run again; it only installs what is missing.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${ANCHORS_BUILD:-${XDG_CACHE_HOME:-$HOME/.cache}/lowlat-anchors}

need=""
for pair in wrk:wrk nginx:nginx-light lighttpd:lighttpd h2o:h2o varnishd:varnish haproxy:haproxy caddy:caddy squid:squid traffic_server:trafficserver ab:apache2-utils h2load:nghttp2-client taskset:util-linux; do
    cmd=${pair%%:*}
    pkg=${pair#*:}
    command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || need="$need $pkg"
done
# php-fpm's binary carries its version (php-fpm8.2): any will do.
ls /usr/sbin/php-fpm* >/dev/null 2>&1 || need="$need php-fpm"
if [ -n "$need" ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $need
fi

# Debian starts the packaged daemons on install; the kit runs its own copies.
for svc in nginx lighttpd h2o varnish haproxy caddy squid trafficserver $(cd /etc/init.d 2>/dev/null && ls -d php*-fpm 2>/dev/null); do
    if command -v systemctl >/dev/null 2>&1; then systemctl stop "$svc" 2>/dev/null || true; fi
    if [ -x "/etc/init.d/$svc" ]; then "/etc/init.d/$svc" stop >/dev/null 2>&1 || true; fi
done

mkdir -p "$build"
# build a copy, so that the repository stays untouched (cargo writes a Cargo.lock beside the manifest)
rm -rf "$build/may-mini-src" && cp -r "$here/../peers/may-mini" "$build/may-mini-src"
CARGO_TARGET_DIR="$build/target" cargo build --release --quiet \
    --manifest-path "$build/may-mini-src/Cargo.toml"
ANCHORS_BUILD="$build" "$here/ceiling/build.sh" >/dev/null
# wrk2 (giltene/wrk2 at 44a94c1, Apache-2.0): wrk with constant-rate, coordinated-omission-corrected
# latency; not packaged by Debian, so built from the source kept here
if [ ! -x "$build/wrk2" ]; then
    rm -rf "$build/wrk2-src" && mkdir -p "$build/wrk2-src"
    tar -xzf "$here/wrk2-44a94c1.tar.gz" -C "$build/wrk2-src"
    make -C "$build/wrk2-src/wrk2" -j2 >"$build/wrk2-build.log" 2>&1
    cp "$build/wrk2-src/wrk2/wrk" "$build/wrk2"
fi
echo "kit ready in $build; $(wrk -v 2>&1 | head -1); wrk2 at $build/wrk2"
