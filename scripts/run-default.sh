#!/usr/bin/env bash
# kiln's main job on the default model, from a fresh machine: installs what
# is missing, builds kiln, picks the default model, compiles it into an
# artifact and generates text with it on the best backend present.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh" >/dev/null
"$root/scripts/build.sh" kiln >/dev/null
build=${KILN_BUILD_DIR:-$root/build}
kiln=$build/tools/kiln/kiln

testdata=${KILN_TESTDATA:-$root/../shared/testdata}
models=${KILN_MODELS:-$HOME/.cache/kiln/models}
prompt="Once upon a time"
if [ -f "$testdata/models/stories260K.gguf" ]; then
  model=$testdata/models/stories260K.gguf
  echo "default model: stories260K (trained TinyStories model, from $testdata)"
elif [ -f "$models/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
  model=$models/SmolLM2-135M-Instruct.Q4_1.gguf
  prompt="What is the capital of France?"
  echo "default model: SmolLM2-135M-Instruct (from $models)"
else
  model=$build/kiln-tiny-synth.gguf
  echo "default model: none found; synthesising a tiny model with RANDOM weights (its text is gibberish) at $model"
  "$kiln" synth --preset tiny --type f16 -o "$model"
fi
# Kernels for the GPUs this machine has: CUDA for an NVIDIA GPU of a compute
# capability codegen knows, Vulkan always (any Vulkan GPU). kiln run then picks
# the fastest backend present (cuda, vulkan, cpu) and says which and why.
targets=vulkan
if command -v nvidia-smi >/dev/null 2>&1; then
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
  case "$cc" in 80|89|90) targets="cuda:sm_$cc,vulkan" ;; 8*|9*|1[0-9]*) targets="cuda:sm_80,vulkan" ;; esac
fi
artifact=$build/default-model.kiln
echo
echo "\$ kiln compile $model --target $targets -o $artifact"
"$kiln" compile "$model" --target "$targets" -o "$artifact" 2>/dev/null ||
  { echo "(no CUDA codegen in this build: vulkan only)"; "$kiln" compile "$model" --target vulkan -o "$artifact"; }
echo
echo "\$ kiln run $artifact -p \"$prompt\" -n 64 --temp 0"
"$kiln" run "$artifact" -p "$prompt" -n 64 --temp 0
