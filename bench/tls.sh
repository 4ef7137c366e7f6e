#!/usr/bin/env bash
# Makes bench/tls/ when it is missing: one self-signed ECDSA P-256 certificate for every server
# (CA:FALSE, so rustls accepts it as a server's own certificate when it is also the trust
# anchor), in bench/tls/ (not tracked): the
# peers' configurations (bench/conf/) always open a TLS listener with it, so every spec needs it;
# the same certificate and key in one file (cert+key.pem), as haproxy takes them; and the TLS
# spec's files (bench/specs/tls.toml).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tls="$here/tls"
mkdir -p "$tls/www"
if [ ! -s "$tls/cert.pem" ] || [ ! -s "$tls/key.pem" ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
        -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
        -addext basicConstraints=critical,CA:FALSE \
        -keyout "$tls/key.pem" -out "$tls/cert.pem" 2>/dev/null
fi
if [ ! -s "$tls/cert+key.pem" ] || [ "$tls/cert.pem" -nt "$tls/cert+key.pem" ] || [ "$tls/key.pem" -nt "$tls/cert+key.pem" ]; then
    (umask 077 && cat "$tls/cert.pem" "$tls/key.pem" > "$tls/cert+key.pem")
fi
cp "$here/www/100.html" "$tls/www/100.html"
[ -s "$tls/www/1m.bin" ] || head -c 1048576 /dev/urandom > "$tls/www/1m.bin"
