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
# The only backend built so far is the CPU executor; GPU backends land later.
echo "backend: cpu (no GPU backend is built yet)"
artifact=$build/default-model.kiln
echo
echo "\$ kiln compile $model -o $artifact"
"$kiln" compile "$model" -o "$artifact" 2>/dev/null
echo
echo "\$ kiln run $artifact -p \"$prompt\" -n 64 --temp 0"
"$kiln" run "$artifact" -p "$prompt" -n 64 --temp 0
