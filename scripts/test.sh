#!/usr/bin/env bash
# The whole test suite from a fresh machine: installs dependencies, builds
# everything, runs every test (unit, real-model, CLI, fuzzers for a bounded
# time) under ctest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
start=$(date +%s)
"$root/scripts/setup.sh"
# Real models for the tests that use them (skipped with a message if absent).
python3 "$root/scripts/fetch_models.py" --only smollm2-135m --only qwen2.5-coder-0.5b ||
  echo "test.sh: could not fetch the real models; the tests that need them will skip"
"$root/scripts/build.sh"
build=${KILN_BUILD_DIR:-$root/build}
cd "$build"
status=0
ctest --output-on-failure -j "$(nproc)" "$@" || status=$?
echo "test.sh: finished in $(( $(date +%s) - start )) s (exit $status)"
exit $status
