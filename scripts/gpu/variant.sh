#!/usr/bin/env bash
# Runs HERE (after prepare.sh): stages the kernels of another revision as a
# setting for scripts/gpu/ab.sh: .gpu/NAME/ gets the 8B program artifact
# compiled from REV's kernels-templates (with this checkout's compiler) and a
# kiln that runs .gpu/bin/kiln, so one carried runtime A/Bs template changes:
#
#   bash scripts/gpu/variant.sh NAME REV [TYPE] [TARGETS]   # here
#   bash scripts/gpu/ab.sh -r 3 - @.gpu/NAME -- --backend vulkan --prompt 512 --gen 64 --repeats 1   # there
#
# TYPE: the weights' type (q4_k by default); TARGETS: kiln compile's
# --target (vulkan by default; cuda:sm_90 or both). A revision whose own
# commits (since it left HEAD's history) also change runtime/ or codegen/
# needs its own kiln: the script says so and stops (build build-gpu at REV
# and copy its kiln to .gpu/NAME/ instead). REV's templates must take the
# bindings and push constants of HEAD's runtime (an older main line's do:
# a push constant block may be shorter than what the runtime pushes).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -ge 2 ] || { sed -n '2,16p' "$0" >&2; exit 2; }
name=$1 rev=$2 type=${3:-q4_k} targets=${4:-vulkan}
kiln=${KILN_BUILD_DIR:-$root/build}/tools/kiln/kiln
model=${KILN_SYNTH_DIR:-$HOME/.cache/kiln/synth}/llama3-8b-$type.gguf
[ -x "$kiln" ] || { echo "variant: no $kiln (build the full kiln first)" >&2; exit 1; }
[ -d "$root/.gpu/bin" ] || { echo "variant: run scripts/gpu/prepare.sh first" >&2; exit 1; }
git -C "$root" rev-parse --verify -q "$rev^{commit}" >/dev/null || { echo "variant: no revision $rev" >&2; exit 1; }
base=$(git -C "$root" merge-base HEAD "$rev")
changed=$(git -C "$root" diff --name-only "$base" "$rev" -- runtime codegen compiler passes dialects)
if [ -n "$changed" ]; then
  echo "variant: $rev changes more than the templates (a kiln of its own is needed):" >&2
  echo "$changed" >&2
  exit 1
fi
[ -f "$model" ] || "$kiln" synth --preset llama3-8b --type "$type" -o "$model" >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git -C "$root" archive "$rev" kernels-templates | tar -x -C "$work"
mkdir -p "$work/artifacts" "$root/.gpu/$name"
KILN_KERNEL_TEMPLATES=$work/kernels-templates "$kiln" compile "$model" --program-only --target "$targets" \
  -o "$work/artifacts/llama3-8b-$type.prog.kiln" 2>&1 | grep -v -e '^remark' -e '(KILN_KERNEL_TEMPLATES)$' || true
[ -f "$work/artifacts/llama3-8b-$type.prog.kiln" ] || { echo "variant: the compile of $rev's kernels failed" >&2; exit 1; }
(cd "$work" && tar -cf - artifacts | xz -T2 -6 >"$root/.gpu/$name/artifacts.tar.xz")
printf '#!/bin/sh\nexec "$(dirname "$0")/../bin/kiln" "$@"\n' >"$root/.gpu/$name/kiln"
chmod +x "$root/.gpu/$name/kiln"
echo "variant: .gpu/$name holds $rev's $type program ($(git -C "$root" rev-parse --short "$rev")); .gpu is $(du -sh "$root/.gpu" | cut -f1)"
