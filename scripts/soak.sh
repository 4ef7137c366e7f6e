#!/usr/bin/env bash
# Soak: lowlat serve for DURATION under a steady mixed load, with reloads, upstream restarts and
# bad clients, judged for leaks, errors, crashes and latency drift. The work is scripts/soak.py
# (its --help says every option); this is its name from the issue's and the docs' examples.
#   scripts/soak.sh 1h [--binary target/release/lowlat] [--out DIR]
exec python3 "$(dirname "$0")/soak.py" "$@"
