#!/usr/bin/env bash
# Runs THERE: issue 8's real pair on the GPU, Qwen2.5-Coder-1.5B (target)
# with Qwen2.5-Coder-0.5B (draft), both full CUDA artifacts moved over in
# pieces by scripts/gpu/ship.sh (together ~1.6 GB). Plain, --draft and
# --lookup decoding, greedy, twice each; prints tok/s, acceptance, and
# whether the three give the same ids. Output to $OUT.
#
#   here:  kiln compile qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --target cuda:sm_90 -o q15-cuda.kiln
#          kiln compile qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --target cuda:sm_90 -o q05-cuda.kiln
#          bash scripts/gpu/ship.sh split q15-cuda.kiln; bash scripts/gpu/ship.sh split q05-cuda.kiln
#          (then one device call per piece: bash scripts/gpu/ship.sh take)
#   there: bash scripts/gpu/speculative-pair.sh          (carry [".gpu"])
# With .gpu/artifacts/q15-cuda.prog.kiln and q05-cuda.prog.kiln present
# (program-only, compiled by this kiln: `--program-only`), they run with the
# shipped artifacts' weights, so new kernels need no new shipment.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
stage=$root/.gpu
out=${OUT:-$stage/logs}
dir=${KILN_PAIR_DIR:-/tmp/kiln-pair}
mkdir -p "$out" "$dir"
bash "$root/scripts/gpu/unpack.sh"  # the artifacts travel packed
export LD_LIBRARY_PATH=$stage/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for name in q15-cuda.kiln q05-cuda.kiln; do
  [ -f "$dir/$name" ] || bash "$root/scripts/gpu/ship.sh" join "$name" "$dir/$name" || exit 1
done
target=("$dir/q15-cuda.kiln") draft=("$dir/q05-cuda.kiln")
if [ -f "$stage/artifacts/q15-cuda.prog.kiln" ] && [ -f "$stage/artifacts/q05-cuda.prog.kiln" ]; then
  target=("$stage/artifacts/q15-cuda.prog.kiln" --weights "$dir/q15-cuda.kiln")
  draft=("$stage/artifacts/q05-cuda.prog.kiln" --draft-weights "$dir/q05-cuda.kiln")
fi
echo "target: ${target[*]}; draft: ${draft[*]}"
prompt="Write a Python function that checks whether a number is prime, with a docstring and tests."
for mode in plain draft lookup; do
  extra=()
  [ "$mode" = draft ] && extra=(--draft "${draft[@]}")
  [ "$mode" = lookup ] && extra=(--lookup)
  for rep in 1 2; do
    "$stage/bin/kiln" run "${target[@]}" -p "$prompt" --chat -n 128 --temp 0 --backend cuda \
      --output-format json "${extra[@]}" >"$out/pair-$mode-$rep.json" 2>"$out/pair-$mode-$rep.err" ||
      echo "pair $mode run $rep failed: $(tail -2 "$out/pair-$mode-$rep.err")"
  done
done
python3 - "$out" <<'EOF'
import json, os, sys
out = sys.argv[1]
runs = {}
for mode in ("plain", "draft", "lookup"):
    for rep in (1, 2):
        path = os.path.join(out, "pair-%s-%d.json" % (mode, rep))
        try:
            runs.setdefault(mode, []).append(json.load(open(path)))
        except (OSError, ValueError):
            pass
plain = [r["timings"]["generate_tokens_per_second"] for r in runs.get("plain", [])]
for mode, rs in runs.items():
    tps = [r["timings"]["generate_tokens_per_second"] for r in rs]
    spec = rs[0].get("speculative", {})
    same = all(r["ids"] == runs["plain"][0]["ids"] for r in rs) if runs.get("plain") else False
    print("%-7s decode %s tok/s  speedup %s  acceptance %s  accepted/step %s  ids equal to plain: %s" % (
        mode, ", ".join("%.1f" % t for t in tps),
        "%.2fx" % (max(tps) / max(plain)) if plain and tps else "-",
        "%.1f %%" % (100 * spec["acceptance_rate"]) if spec else "-",
        "%.2f" % spec["mean_accepted_length"] if spec else "-", same))
EOF
