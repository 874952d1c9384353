#!/usr/bin/env bash
# Runs THERE, in one device call (repo root, with .gpu and .gl carried):
# synthesises the 8B weights in the background while the GPU test suite runs,
# then the benchmarks (scripts/gpu/bench.sh with the caller's KILN_* switches),
# and ends with a markdown summary for docs/perf in $OUT/summary.md.
#   run: export OUT; KILN_NCU=1 KILN_SERVE_SWEEP=1 bash scripts/gpu/run-all.sh   (carry [".gpu", ".gl"])
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/.gpu/logs}
mkdir -p "$out"
status=0
bash "$root/scripts/gpu/unpack.sh"

KILN_BENCH_SYNTH_ONLY=1 bash "$root/scripts/gpu/bench.sh" >"$out/synth.txt" 2>&1 &
synth=$!
bash "$root/scripts/gpu/device.sh" >"$out/device.txt" 2>&1 || status=1
wait "$synth" || status=1
bash "$root/scripts/gpu/bench.sh" >"$out/bench-all.txt" 2>&1 || status=1

{
  echo "# kiln on $(head -1 "$out/gpu.txt" 2>/dev/null), $(date -u +%Y-%m-%d)"
  echo
  echo "## GPU tests"
  echo
  sed -n '/^cuda_/p; /^vulkan_/p; /^tests took/p' "$out/device.txt" | sed 's/^/    /'
  echo
  echo "## kiln bench"
  echo
  grep -E '^(== kiln bench|backend:|ceilings:|prefill|decode)' "$out/bench-all.txt" | sed 's/^/    /'
  if grep -q '^c=' "$out/bench-all.txt"; then
    echo
    echo "## kiln serve sweep"
    echo
    grep -E '^(== serve|c=)' "$out/bench-all.txt" | sed 's/^/    /'
  fi
} >"$out/summary.md"
cat "$out/summary.md"
exit $status
