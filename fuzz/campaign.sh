#!/usr/bin/env bash
# A fuzz campaign over every cargo-fuzz target (issue #40, item 9), one target at a time, each
# started from its committed seeds, with a figures line per target (fuzz/CAMPAIGN.md).
#
#   fuzz/campaign.sh [SECONDS_PER_TARGET] [TARGET...]
#
# SECONDS_PER_TARGET defaults to 600 (the 10-minute campaign); the targets default to all 26.
# Environment: FUZZ_TARGET_DIR (cargo's target dir for the fuzz build; default fuzz/target),
# OUT (where corpora, artifacts, logs and the figures go; default /tmp/inabench-fuzz), NICE
# (default 19: a shared machine keeps building), BUILD=0 (use the binaries already built).
#
# Seeds: fuzz/seeds/<target>/ (the wire parsers', endpoints' and requests' seeds are real frames
# and requests of clean runs; harness/tests/fuzz_seeds.rs and each system crate's fuzz_smoke
# test write them with INABENCH_WRITE_SEEDS=1), and for `spec` the experiments' specs
# themselves (experiments/). A campaign's corpus grows under $OUT/corpus/<target>/ (the seeds
# are only read); a crash's input is left under $OUT/artifacts/<target>/: once its cause is
# fixed it belongs in fuzz/regressions/<target>/ with a test that replays it.
#
# figures.tsv columns: target, seconds, execs, exec/s, cov (edges), ft (features), corpus
# (libFuzzer's: inputs/size, the seeds that add coverage included), the new inputs written
# under $OUT/corpus/<target>/ and their largest length, peak RSS MB, crashes (artifacts
# left), exit status.
set -euo pipefail
cd "$(dirname "$0")"
SECS=${1:-600}
shift || true
OUT=${OUT:-/tmp/inabench-fuzz}
NICE=${NICE:-19}
TD=${FUZZ_TARGET_DIR:-$PWD/target}
if [ "${BUILD:-1}" != 0 ]; then
    nice -n "$NICE" cargo +nightly fuzz build -O --target-dir "$TD"
fi
BIN=$TD/x86_64-unknown-linux-gnu/release
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
    mapfile -t TARGETS < <(cargo +nightly fuzz list)
fi
mkdir -p "$OUT"
FIG=$OUT/figures.tsv
[ -f "$FIG" ] || printf 'target\tseconds\texecs\texec_s\tcov\tft\tcorpus\tnew_inputs\tnew_max_len\trss_mb\tcrashes\tstatus\n' >"$FIG"
for t in "${TARGETS[@]}"; do
    case $t in
    spec) seeds=(../experiments) ;;
    *) seeds=(seeds/$t) ;;
    esac
    [ -d "${seeds[0]}" ] || seeds=()
    ml=8192
    [ "$t" = p4rt_sequence ] && ml=20000
    corpus=$OUT/corpus/$t
    art=$OUT/artifacts/$t
    log=$OUT/$t.log
    mkdir -p "$corpus" "$art"
    status=0
    nice -n "$NICE" "$BIN/$t" -max_total_time="$SECS" -max_len=$ml -rss_limit_mb=4096 \
        -timeout=60 -print_final_stats=1 -artifact_prefix="$art/" "$corpus" "${seeds[@]}" \
        >"$log" 2>&1 || status=$?
    # libFuzzer's last status line (#N DONE/pulse cov: C ft: F corp: N/B ...) and final stats
    last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[bKMG]*\).*/\1/p' <<<"$last")
    files=$(find "$corpus" -type f | wc -l)
    maxlen=$(find "$corpus" -type f -printf '%s\n' | sort -n | tail -1)
    crashes=$(find "$art" -type f | wc -l)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$SECS" "${execs:-?}" "${eps:-?}" \
        "${cov:-?}" "${ft:-?}" "${corp:-?}" "$files" "${maxlen:-0}" "${rss:-?}" "$crashes" "$status" | tee -a "$FIG"
done
