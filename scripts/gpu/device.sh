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
# The test binaries run side by side (NVRTC compiles dominate their time);
# the timing run comes after, alone on the GPU.
tests=(cuda_backend_test cuda_kernels_test cuda_golden_test)
SECONDS=0
for t in "${tests[@]}"; do "$stage/bin/$t" >"$out/$t.log" 2>&1 & done
wait
for t in "${tests[@]}"; do
  if grep -q '^\[  PASSED  \]' "$out/$t.log" && ! grep -q '^\[  FAILED  \]' "$out/$t.log"; then rc=0; else rc=1; status=1; fi
  summary+=("$(printf '%-20s %s  %s' "$t" "$([ $rc -eq 0 ] && echo ok || echo FAIL)" "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/$t.log" | tr '\n' ' ')")")
done
summary+=("tests took ${SECONDS}s")
if [ -n "${KILN_CUDA_PERF:-}" ]; then
  "$stage/bin/cuda_perf_test" >"$out/cuda_perf_test.log" 2>&1 || status=1
  grep -E '^(perf|\[  FAILED)' "$out/cuda_perf_test.log"
fi
printf '%s\n' "${summary[@]}"
for t in "${tests[@]}"; do grep -E 'Failure|FAILED|error' "$out/$t.log" | head -20; done
exit $status
