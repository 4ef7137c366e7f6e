#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets/) for SECONDS each, one after the other on one core,
# starting from its seed corpus (fuzz/seeds/TARGET/, copied into the working corpus
# fuzz/corpus/TARGET/, which keeps growing between runs and is not committed), and prints the
# executions each ran. A crash is saved under fuzz/artifacts/TARGET/ and makes the script exit 1;
# keep it as a regression seed (fuzz/seeds/TARGET/crash-NAME) once fixed.
#
#   scripts/fuzz.sh 60                 every target a minute
#   scripts/fuzz.sh 600 h2_server      one target ten minutes
#   FUZZ_RUNS=10000000 scripts/fuzz.sh 900 hpack_decoder
#                                      stops at 10 M executions, or after 900 s if sooner
#
# Built without a sanitizer (the code fuzzed is safe Rust; AddressSanitizer would slow it ~2x for
# nothing to find) and with debug assertions, so an integer overflow is a crash, not a wrap.
# FUZZ_SANITIZER=address overrides. Needs the nightly toolchain and cargo-fuzz (installed when
# missing).
set -euo pipefail
if [ $# -lt 1 ] || ! [[ $1 =~ ^[0-9]+$ ]]; then
    echo "usage: scripts/fuzz.sh SECONDS [TARGET...]" >&2
    exit 2
fi
seconds=$1
shift
cd "$(dirname "$0")/../fuzz"
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
cargo +nightly fuzz --version >/dev/null 2>&1 || cargo install cargo-fuzz
sanitizer=${FUZZ_SANITIZER:-none}
flags=(-s "$sanitizer" -a --features server)
runs=()
if [ -n "${FUZZ_RUNS:-}" ]; then
    [[ $FUZZ_RUNS =~ ^[0-9]+$ ]] || { echo "FUZZ_RUNS must be a number" >&2; exit 2; }
    runs=(-runs="$FUZZ_RUNS")
fi
if [ $# -gt 0 ]; then
    targets=("$@")
else
    targets=()
    for f in fuzz_targets/*.rs; do targets+=("$(basename "$f" .rs)"); done
fi
cargo +nightly fuzz build "${flags[@]}" >/dev/null
mkdir -p logs
failed=()
printf '%-16s %14s %10s  %s\n' target executions exec/s result
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t"
    [ -d "seeds/$t" ] && cp -n "seeds/$t"/* "corpus/$t"/ 2>/dev/null || true
    log="logs/$t.log"
    # -timeout: one input taking this long is a hang, reported as a crash.
    if cargo +nightly fuzz run "${flags[@]}" "$t" "corpus/$t" -- \
        -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 "${runs[@]}" \
        >"$log" 2>&1; then
        result=ok
    else
        result="CRASH (see fuzz/$log, fuzz/artifacts/$t/)"
        failed+=("$t")
    fi
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo '?')
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo '?')
    printf '%-16s %14s %10s  %s\n' "$t" "$execs" "$rate" "$result"
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "crashed: ${failed[*]}" >&2
    exit 1
fi
