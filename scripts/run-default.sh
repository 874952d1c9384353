#!/usr/bin/env bash
# kiln's main job on the default model, from a fresh machine: installs what
# is missing, builds the kiln binary, picks the default model and runs it.
# Until the runtime lands, "runs" means: inspect the model and tokenize a text
# with its own tokenizer.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh" >/dev/null
"$root/scripts/build.sh" kiln >/dev/null
kiln=${KILN_BUILD_DIR:-$root/build}/tools/kiln/kiln

testdata=${KILN_TESTDATA:-$root/../shared/testdata}
models=${KILN_MODELS:-$HOME/.cache/kiln/models}
if [ -f "$testdata/models/stories260K.gguf" ]; then
  model=$testdata/models/stories260K.gguf
  echo "default model: stories260K (trained TinyStories model, from $testdata)"
elif [ -f "$models/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
  model=$models/SmolLM2-135M-Instruct.Q4_1.gguf
  echo "default model: SmolLM2-135M-Instruct (from $models)"
else
  model=${TMPDIR:-/tmp}/kiln-tiny-synth.gguf
  echo "default model: none found; synthesising a tiny model with RANDOM weights at $model"
  "$kiln" synth --preset tiny --type f16 -o "$model"
fi
echo "backend: none needed yet: inspect and tokenize run on the CPU (the execution backends land with the runtime)"
echo
echo "\$ kiln inspect $model"
"$kiln" inspect "$model"
text="Once upon a time, a little cat found a café 🐶."
echo
echo "\$ kiln tokenize $model -p \"$text\""
"$kiln" tokenize "$model" -p "$text" --show-pieces
