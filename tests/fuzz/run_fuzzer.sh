#!/usr/bin/env bash
# run_fuzzer.sh FUZZER SECONDS CORPUS_DIR [SEED_FILES...]
# Runs one libFuzzer target for a bounded time over a corpus seeded with the
# given files (each cut to 64 KiB, so seeds stay fast). Exits non-zero on a
# crash or sanitizer report; the reproducer is left in CORPUS_DIR/../artifacts.
set -euo pipefail
fuzzer=$1 seconds=$2 corpus=$3
shift 3
mkdir -p "$corpus" "$corpus/../artifacts"
for seed in "$@"; do
  [ -f "$seed" ] && head -c 65536 "$seed" > "$corpus/seed-$(basename "$seed")"
done
exec "$fuzzer" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$corpus/../artifacts/" "$corpus"
