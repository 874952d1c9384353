#!/usr/bin/env bash
# Runs THERE (the GPU machine, repo root, with .gpu and .gl carried): the
# Llama-3-8B-shaped benchmarks of docs/perf. Synthesises the weights the
# program-only artifacts of scripts/gpu/prepare.sh were compiled from (same
# preset, type and default seed), then `kiln bench` on CUDA for each type and
# on Vulkan for the types in KILN_VULKAN_TYPES. Output goes to $OUT.
#   KILN_BENCH_TYPES   storage types (default: q4_k q8_0 f16)
#   KILN_VULKAN_TYPES  types also run on Vulkan (default: q4_k)
#   KILN_BENCH_ARGS    extra kiln bench arguments (default: --prompt 512,1024 --gen 128 --repeats 3)
#   KILN_NCU=1         also profile ~40 kernels of a q4_k decode step with ncu
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
stage=$root/.gpu
out=${OUT:-$stage/logs}
weights=${KILN_BENCH_WEIGHTS_DIR:-/tmp/kiln-bench}
mkdir -p "$out" "$weights"
# cuBLAS for the matrix probe: the toolkit's, else the one beside PyTorch.
cublas_dir=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH=$stage/lib:/usr/local/cuda/lib64:${cublas_dir:+$cublas_dir:}${LD_LIBRARY_PATH:-}
kiln=$stage/bin/kiln
types=${KILN_BENCH_TYPES-q4_k q8_0 f16}
vulkan_types=${KILN_VULKAN_TYPES-q4_k}
bench_args=${KILN_BENCH_ARGS:---prompt 512,1024 --gen 128 --repeats 3}
status=0

# Synthesis is CPU and disk work: all types at once, in the background.
synth_pids=()
for type in $types; do
  [ -f "$weights/llama3-8b-$type.gguf" ] && continue
  "$kiln" synth --preset llama3-8b --type "$type" -o "$weights/llama3-8b-$type.gguf" >"$out/synth-$type.log" 2>&1 &
  synth_pids+=($!)
done
SECONDS=0
for p in "${synth_pids[@]}"; do wait "$p" || status=1; done
echo "synthesis: ${SECONDS}s"

bench() {  # backend type peers-file label
  local backend=$1 type=$2 peers=$3 probe=${4:-}
  local args=("$stage/artifacts/llama3-8b-$type.prog.kiln" --weights "$weights/llama3-8b-$type.gguf"
    --backend "$backend" --peers "$stage/peers/$peers" $bench_args $probe)
  echo "== kiln bench llama3-8b-$type.prog.kiln --backend $backend $bench_args $probe"
  SECONDS=0
  "$kiln" bench "${args[@]}" 2>&1 | tee "$out/bench-$backend-$type.txt" || status=1
  echo "($backend $type: ${SECONDS}s)"
}

first=--probe
for type in $types; do
  bench cuda "$type" llama.cpp-h200.md "$first"
  first=
done

if [ -n "${KILN_NCU:-}" ] && [ -f "$weights/llama3-8b-q4_k.gguf" ]; then
  # One decode step's kernels (past the prefill of the first run): time,
  # DRAM bytes and throughput, occupancy, launch shape per kernel.
  metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
  metrics+=,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__block_size
  metrics+=,launch__registers_per_thread,smsp__inst_executed.sum
  SECONDS=0
  ncu --clock-control none --launch-skip 2000 --launch-count 40 --csv --metrics "$metrics" \
    "$kiln" bench "$stage/artifacts/llama3-8b-q4_k.prog.kiln" --weights "$weights/llama3-8b-q4_k.gguf" \
    --backend cuda --prompt 64 --gen 16 --repeats 1 --peers "$stage/peers/llama.cpp-h200.md" \
    >"$out/ncu-q4_k-decode.csv" 2>"$out/ncu.log" || echo "ncu failed: $(tail -3 "$out/ncu.log")"
  echo "(ncu: ${SECONDS}s)"
fi

if [ -n "$vulkan_types" ]; then
  # The NVIDIA Vulkan ICD is there but no loader: Debian's libvulkan1 and
  # libglvnd family, carried in .gl (../shared/TOOLCHAIN.md, section 9).
  for f in "$root"/.gl/*.deb; do dpkg -x "$f" / ; done
  ldconfig
  first=--probe
  for type in $vulkan_types; do
    bench vulkan "$type" llama.cpp-vulkan-h200.md "$first"
    first=
  done
fi
exit $status
