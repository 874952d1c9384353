#!/usr/bin/env bash
# Runs THERE (the GPU machine, repo root, with .gpu carried): the CUDA test
# suite on the staged binaries, then a one-line summary per binary. Logs go
# to $OUT when it is set.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
stage=$root/.gpu
out=${OUT:-$root/.gpu/logs}
mkdir -p "$out"
export LD_LIBRARY_PATH=$stage/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export KILN_TESTDATA=$stage/testdata
export KILN_CUDA_ARTIFACTS=$stage/artifacts
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | tee "$out/gpu.txt"
status=0
summary=()
for t in cuda_backend_test cuda_kernels_test cuda_golden_test; do
  SECONDS=0
  "$stage/bin/$t" >"$out/$t.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || status=1
  summary+=("$(printf '%-20s rc=%d %4ds  %s' "$t" "$rc" "$SECONDS" "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/$t.log" | tr '\n' ' ')")")
done
if [ -n "${KILN_CUDA_PERF:-}" ]; then
  "$stage/bin/cuda_perf_test" >"$out/cuda_perf_test.log" 2>&1 || status=1
  grep -E '^(perf|\[  FAILED)' "$out/cuda_perf_test.log"
fi
printf '%s\n' "${summary[@]}"
for t in cuda_backend_test cuda_kernels_test cuda_golden_test; do grep -E 'Failure|FAILED|error' "$out/$t.log" | head -20; done
exit $status
