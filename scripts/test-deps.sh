#!/usr/bin/env bash
# Installs the system packages that the test suite drives for real (a second HTTP server, an HTTP
# client, a headless browser). Safe to run again: installs only what is missing.
set -euo pipefail
need=()
command -v curl >/dev/null 2>&1 || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
