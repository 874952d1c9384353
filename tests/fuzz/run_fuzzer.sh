#!/usr/bin/env bash
# run_fuzzer.sh FUZZER SECONDS CORPUS_DIR [SEED_FILES...]
# Runs one libFuzzer target for a bounded time over a corpus seeded with the
# given files (each cut to 64 KiB, so seeds stay fast). Exits non-zero on a
# crash or sanitizer report; the reproducer is left in CORPUS_DIR/../artifacts.
# libFuzzer's progress lines go to CORPUS_DIR/../fuzz.log; on a failure the
# end of that log (the report and its stack) is printed, so that a CI log
# that keeps only the start and end of a test's output still shows why.
set -euo pipefail
fuzzer=$1 seconds=$2 corpus=$3
shift 3
mkdir -p "$corpus" "$corpus/../artifacts"
for seed in "$@"; do
  [ -f "$seed" ] && head -c 65536 "$seed" > "$corpus/seed-$(basename "$seed")"
done
log="$corpus/../fuzz.log"
status=0
"$fuzzer" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$corpus/../artifacts/" "$corpus" > "$log" 2>&1 || status=$?
if [ "$status" -ne 0 ]; then
  echo "$(basename "$fuzzer"): exit $status; the last 100 lines of $log:"
  tail -n 100 "$log"
  for f in "$corpus"/../artifacts/*; do
    [ -f "$f" ] || continue
    echo "reproducer: $f ($(stat -c %s "$f") bytes), first 256 bytes in hex:"
    head -c 256 "$f" | od -An -tx1 | head -n 16
  done
  exit "$status"
fi
grep -E "^(Done|stat::)" "$log" || true
