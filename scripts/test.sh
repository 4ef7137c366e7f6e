#!/usr/bin/env bash
# Every test: installs what the suite drives for real (when missing), then the whole workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/test-deps.sh
exec cargo test --workspace "$@"
