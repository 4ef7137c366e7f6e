#!/bin/sh
# Builds the ceiling responder, its client, the proxy ceiling and the FastCGI ceiling (ceiling.c,
# ceiling-client.c, ceiling-proxy.c, ceiling-fcgi.c) into $ANCHORS_BUILD
# (default: lowlat-anchors in the user's cache directory), where bench/kit/compare.py and the
# specs that start a ceiling (bench/specs/proxy.toml's upstream) find them. Rebuilds a program
# only when its source is newer; prints where they are.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${ANCHORS_BUILD:-${XDG_CACHE_HOME:-$HOME/.cache}/lowlat-anchors}
mkdir -p "$build"
for prog in ceiling ceiling-client ceiling-proxy ceiling-fcgi; do
    if [ ! -x "$build/$prog" ] || [ "$here/$prog.c" -nt "$build/$prog" ]; then
        cc -O2 -Wall -o "$build/$prog" "$here/$prog.c"
    fi
done
echo "ceiling ready in $build"
