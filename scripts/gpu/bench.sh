#!/usr/bin/env bash
# Runs THERE (the GPU machine, repo root, with .gpu and .gl carried): the
# Llama-3-8B-shaped benchmarks of docs/perf. Synthesises the weights the
# program-only artifacts of scripts/gpu/prepare.sh were compiled from (same
# preset, type and default seed), then `kiln bench` on CUDA for each type and
# on Vulkan for the types in KILN_VULKAN_TYPES. Output goes to $OUT.
#   KILN_BENCH_TYPES   storage types (default: q4_k q8_0 f16)
#   KILN_VULKAN_TYPES  types also run on Vulkan (default: q4_k)
#   KILN_BENCH_ARGS    extra kiln bench arguments (default: --prompt 512,1024 --gen 128 --repeats 3)
#   KILN_BENCH_SYNTH_ONLY=1  only synthesise (to overlap with scripts/gpu/device.sh)
#   KILN_NCU=1         also profile ~40 kernels of a q4_k decode step with ncu
#                      (KILN_NCU_BATCH sequences per step, default 1)
#   KILN_SERVE_SWEEP=1 also serve q4_k on CUDA and sweep bench_serve.py's
#                      concurrency 1..64 (dynamic batching, docs/perf), at each
#                      of KILN_SERVE_TEMPERATURES (default 0.8); the server
#                      runs with KILN_SERVE_ARGS (default: --max-running 64
#                      --token-budget 512) and KILN_SERVE_ROUNDS requests per
#                      client (default 2: max(2C, 8) requests per level; more
#                      rounds measure the steady state rather than the ramp);
#                      each level draws its prompts from seed C, so a sweep's
#                      first pass meets no prompt cached by an earlier level;
#                      prompts of KILN_SERVE_PROMPT_WORDS words (default 64;
#                      the synthetic model's tokenizer makes ~4.2 tokens of a
#                      word, bench_serve.py prints the measured rate);
#                      KILN_SERVE_KV_TYPE=f16 serves the program compiled
#                      with `--kv-type f16` (prepare.sh's -kvf16 artifact)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
stage=$root/.gpu
out=${OUT:-$stage/logs}
weights=${KILN_BENCH_WEIGHTS_DIR:-/tmp/kiln-bench}
mkdir -p "$out" "$weights"
bash "$root/scripts/gpu/unpack.sh"  # the artifacts travel packed
# cuBLAS for the matrix probe: the toolkit's, else the one beside PyTorch.
cublas_dir=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH=$stage/lib:/usr/local/cuda/lib64:${cublas_dir:+$cublas_dir:}${LD_LIBRARY_PATH:-}
kiln=$stage/bin/kiln
export PATH=$PATH:/usr/local/cuda/bin
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
[ -n "${KILN_BENCH_SYNTH_ONLY:-}" ] && exit $status

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
# Batched decode (llama-batched-bench's B=8 and B=32 in the peers' notes).
for b in ${KILN_BENCH_BATCHES-8 32}; do
  [ -f "$weights/llama3-8b-q4_k.gguf" ] || break
  echo "== kiln bench llama3-8b-q4_k.prog.kiln --backend cuda --batch $b --prompt 512 --gen 128 --repeats 1"
  "$kiln" bench "$stage/artifacts/llama3-8b-q4_k.prog.kiln" --weights "$weights/llama3-8b-q4_k.gguf" --backend cuda \
    --peers "$stage/peers/llama.cpp-h200.md" --batch "$b" --prompt 512 --gen 128 --repeats 1 2>&1 |
    tee "$out/bench-cuda-q4_k-b$b.txt" || status=1
done

if [ -n "${KILN_NCU:-}" ] && [ -f "$weights/llama3-8b-q4_k.gguf" ]; then
  # One decode step's kernels (past the prefill of the first run): time,
  # DRAM bytes and throughput, occupancy, launch shape, IPC, stalls on
  # memory and barriers, shared-memory bank conflicts per kernel.
  metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
  metrics+=,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__block_size
  metrics+=,launch__registers_per_thread,sm__inst_executed.avg.per_cycle_active
  metrics+=,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_barrier_per_warp_active.pct
  metrics+=,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum
  metrics+=,lts__t_bytes.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__t_sector_hit_rate.pct
  # Past the warm-up and the timed prefill: kiln bench first prefills each
  # of the B sequences alone (8 tokens, then the prompt: ~330-400 launches a
  # step on the 8B) and decodes 4 steps, so a fixed skip of 2000 landed in
  # the warm-up prefill for B > 4 (session 15). Skip (2B + 8) steps of 400
  # launches (a decode step has ~160 at B = 1, ~290 at B = 2-63), which
  # lands some 10-15 steps into the 64 decode steps.
  ncu_batch=${KILN_NCU_BATCH:-1}
  SECONDS=0
  ncu --clock-control none --launch-skip $(( (2 * ncu_batch + 8) * 400 )) --launch-count 40 --csv --metrics "$metrics" \
    "$kiln" bench "$stage/artifacts/llama3-8b-q4_k.prog.kiln" --weights "$weights/llama3-8b-q4_k.gguf" \
    --backend cuda --prompt 64 --gen 64 --repeats 1 --batch "$ncu_batch" --peers "$stage/peers/llama.cpp-h200.md" \
    >/tmp/ncu-q4_k-decode.csv 2>/tmp/ncu.log || echo "ncu failed: $(tail -3 /tmp/ncu.log)"
  python3 "$root/scripts/gpu/ncu_summary.py" /tmp/ncu-q4_k-decode.csv | tee "$out/ncu-q4_k-decode.txt"
  echo "(ncu: ${SECONDS}s)"
fi

if [ -n "${KILN_SERVE_SWEEP:-}" ] && [ -f "$weights/llama3-8b-q4_k.gguf" ]; then
  SECONDS=0
  log=$out/serve-q4_k.log
  serve_artifact=$stage/artifacts/llama3-8b-q4_k${KILN_SERVE_KV_TYPE:+-kv$KILN_SERVE_KV_TYPE}.prog.kiln
  "$kiln" serve "$serve_artifact" --weights "$weights/llama3-8b-q4_k.gguf" \
    --backend cuda --port 0 ${KILN_SERVE_ARGS:---max-running 64 --token-budget 512} >"$log" 2>&1 &
  server=$!
  url=
  for _ in $(seq 600); do
    url=$(sed -n 's/^kiln serve: listening on \(http:\/\/[^ ]*\) .*/\1/p' "$log" | head -n 1)
    [ -n "$url" ] && break
    kill -0 $server 2>/dev/null || break
    sleep 0.2
  done
  if [ -n "$url" ]; then
    echo "== serve sweep on $url (server up after ${SECONDS}s)"
    grep "^kiln serve: listening" "$log"
    for temp in ${KILN_SERVE_TEMPERATURES:-0.8}; do
      echo "temperature $temp"
      for c in 1 2 4 8 16 32 64; do
        rounds=${KILN_SERVE_ROUNDS:-2}
        n=$(( c * rounds > 8 ? c * rounds : 8 ))
        json=$out/serve-t$temp-c$c.json
        python3 "$root/scripts/bench_serve.py" --url "$url" --requests $n --concurrency $c --mix fixed --seed $c \
          --prompt-len ${KILN_SERVE_PROMPT_WORDS:-64} --max-tokens 64 --temperature "$temp" --metrics-interval 0 --json >"$json" 2>"$json.err" ||
          echo "sweep c=$c failed: $(tail -2 "$json.err")"
        python3 -c "import json,sys; r=json.load(open(sys.argv[1])); i=r['itl_ms']; t=r['ttft_ms']; st=r.get('server_steps') or 0; ss=r.get('server_step_s') or 0; se=r.get('server_executor_s') or 0; print('c=%3s  %5d/%d ok  %8.1f tok/s  ITL p50 %.1f p99 %.1f ms  TTFT p50 %.0f p99 %.0f ms  | server %.1f tok/s, %d steps, %.2f ms/step (%.2f backend, %.2f host)' % (sys.argv[2], r['completed'], r['requests'], r['throughput_tok_s'], i['p50'], i['p99'], t['p50'], t['p99'], r.get('server_throughput_tok_s') or 0, st, 1e3 * ss / max(st, 1), 1e3 * se / max(st, 1), 1e3 * (ss - se) / max(st, 1)))" \
          "$json" $c
      done
    done
  else
    echo "serve did not start: $(tail -5 "$log")"
  fi
  kill -TERM $server 2>/dev/null; wait $server 2>/dev/null
  echo "(serve sweep: ${SECONDS}s)"
fi

if [ -n "$vulkan_types" ]; then
  # The NVIDIA Vulkan ICD is there but no loader: Debian's libvulkan1 and
  # libglvnd family, carried in .gl (../shared/TOOLCHAIN.md, section 9).
  for f in "$root"/.gl/*.deb; do dpkg -x "$f" / ; done
  ldconfig
  # --profile: one more decode step with a GPU timestamp per dispatch, the
  # Vulkan counterpart of KILN_NCU (ncu does not see Vulkan work).
  first=--probe
  for type in $vulkan_types; do
    bench vulkan "$type" llama.cpp-vulkan-h200.md "$first --profile"
    first=
  done
fi
exit $status
