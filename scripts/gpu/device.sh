#!/usr/bin/env bash
# Runs THERE (the GPU machine, repo root, with .gpu carried): the CUDA test
# suite on the staged binaries and, where .gpu/bin/vulkan_kernels_test and
# the loader debs in .gl/ are carried too, the Vulkan kernel tests on
# NVIDIA's Vulkan driver; then a one-line summary per binary. Logs go to
# $OUT when it is set.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
stage=$root/.gpu
out=${OUT:-$root/.gpu/logs}
mkdir -p "$out"
bash "$root/scripts/gpu/unpack.sh"  # the artifacts travel packed
export LD_LIBRARY_PATH=$stage/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export KILN_TESTDATA=$stage/testdata
export KILN_CUDA_ARTIFACTS=$stage/artifacts
if [ -f "$stage/lib/libslang-glslang.so" ]; then export KILN_SLANG_GLSLANG=$stage/lib/libslang-glslang.so; fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | tee "$out/gpu.txt"
status=0
summary=()
# The test binaries run side by side (NVRTC compiles dominate their time),
# cuda_kernels_test in KILN_KERNEL_SHARDS gtest shards (default 6: its
# compiles are one thread each, the GPU machine has 16 cores); the timing
# run comes after, alone on the GPU.
tests=(cuda_backend_test cuda_kernels_test cuda_golden_test)
shards=${KILN_KERNEL_SHARDS:-6}
SECONDS=0
for t in cuda_backend_test cuda_golden_test; do "$stage/bin/$t" >"$out/$t.log" 2>&1 & done
rm -f "$out"/cuda_kernels_test.*.log  # a run of more shards left its own
for ((i = 0; i < shards; i++)); do
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i "$stage/bin/cuda_kernels_test" >"$out/cuda_kernels_test.$i.log" 2>&1 &
done
wait
cat "$out"/cuda_kernels_test.*.log >"$out/cuda_kernels_test.log"
# One summary line for test binary $1 whose log holds $2 gtest runs: ok
# where every run passed and none failed, with the counts added over runs.
summarise() {
  local t=$1 runs=$2 passed rc counts
  passed=$(grep -c '^\[  PASSED  \]' "$out/$t.log")
  if [ "$passed" -eq "$runs" ] && ! grep -q '^\[  FAILED  \]' "$out/$t.log"; then rc=0; else rc=1; status=1; fi
  counts=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/$t.log" | awk '{print $2, $4}' | sort | awk '{n[$1] += $2} END {for (k in n) printf "%s %d  ", k, n[k]}')
  summary+=("$(printf '%-20s %s  %s' "$t" "$([ $rc -eq 0 ] && echo ok || echo FAIL)" "$counts")")
}
for t in "${tests[@]}"; do
  summarise "$t" "$([ "$t" = cuda_kernels_test ] && echo "$shards" || echo 1)"
done
# Vulkan: the machine has NVIDIA's driver but no loader; Debian's (carried
# in .gl/ by prepare.sh) goes in first where none is installed.
if [ -x "$stage/bin/vulkan_kernels_test" ]; then
  if ! ldconfig -p | grep -q 'libvulkan\.so\.1'; then
    for deb in "$root"/.gl/*.deb; do [ -f "$deb" ] && dpkg -x "$deb" /; done
    ldconfig
  fi
  "$stage/bin/vulkan_kernels_test" >"$out/vulkan_kernels_test.log" 2>&1
  summarise vulkan_kernels_test 1
  tests+=(vulkan_kernels_test)
fi
summary+=("tests took ${SECONDS}s")
if [ -n "${KILN_CUDA_PERF:-}" ]; then
  "$stage/bin/cuda_perf_test" >"$out/cuda_perf_test.log" 2>&1 || status=1
  grep -E '^(perf|\[  FAILED)' "$out/cuda_perf_test.log"
fi
printf '%s\n' "${summary[@]}"
for t in "${tests[@]}"; do grep -E 'Failure|FAILED|error' "$out/$t.log" | head -20; done
exit $status
