#!/usr/bin/env bash
# Runs HERE (after prepare.sh): stages knockout builds of the 8B q4_K decode
# step for scripts/gpu/ab.sh, to map its critical path. A knockout is a copy
# of the CUDA templates with one part of the one-token kernels removed (the
# results are garbage; the timing is what it measures): the step's time
# without that part, against the main line's in the same call, bounds what
# any change to the part can give. Each goes to .gpu/k<NAME>/ as the
# artifact plus a kiln that runs .gpu/bin/kiln, so ab.sh's @DIR settings
# take them:
#
#   bash scripts/gpu/knockouts.sh [NAME...]          # here; default: all
#   bash scripts/gpu/ab.sh -r 2 - @.gpu/kwalk ... -- --backend cuda --prompt 512 --gen 64 --repeats 1   # there
#   bash scripts/gpu/ab.sh -r 2 - @.gpu/kvk-noload ... -- --backend vulkan --prompt 512 --gen 64 --repeats 1
#
# NAME: walk (the decode matmuls' weight loads and dots), prologue (their
# activation staging; prologue-qkv, prologue-o, prologue-gateup and
# prologue-down: one launch's of each layer, o's and down's the copy of the
# image attention and gate/up staged), attention (the decode attention after its wait),
# merge (attention's merge of context slices), slices (attention's loop over
# positions), query (attention's read and rotation of q), append (its write
# of the step's K/V rows to the pool), tail (all of attention after its K/V
# loop: the warps' merge, the partial writes, the count and the merge of
# slices), chain (walk, prologue, attention and the down projection's
# prestaging: what is left is launches, waits, setup and stores), waits (the
# decode matmuls and attention reduced to their wait: launch boundaries);
# for steps of several sequences, tile-x (the int8 tile kernel's activation
# loads, from one place: L1 hits) and tile-walk (its weight loads, from each
# row's first block).
# The Vulkan backend's (matmul_decode.comp; run with --backend vulkan):
# vk-empty (every decode matmul returns at once), vk-nostage (no activation
# staging: x's loads, the norm and the int8 codes), vk-noload (each DP4 lane
# step's weight words made from its indices: no weight loads, the
# arithmetic as it is); docs/perf/vulkan-h200.md, sessions 38 and 39.
# An edit that no longer matches the templates stops the script.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
kiln=${KILN_BUILD_DIR:-$root/build}/tools/kiln/kiln
model=${KILN_KNOCKOUT_MODEL:-$HOME/.cache/kiln/synth/llama3-8b-q4_k.gguf}
[ -x "$kiln" ] || { echo "knockouts: no $kiln (build the full kiln first)" >&2; exit 1; }
[ -d "$root/.gpu/bin" ] || { echo "knockouts: run scripts/gpu/prepare.sh first" >&2; exit 1; }
[ -f "$model" ] || "$kiln" synth --preset llama3-8b --type q4_k -o "$model" >/dev/null
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(walk prologue attention merge slices query append tail chain waits vk-empty vk-nostage vk-noload)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for name in "${names[@]}"; do
  rm -rf "$work/t" && cp -r "$root/kernels-templates" "$work/t"
  python3 - "$work/t" "$name" <<'EOF'
import sys
d, name = sys.argv[1], sys.argv[2]
def zero(cond):
    return ('        if (%s) {\n'
            '          for (int i = threadIdx.x; i < kTile * (xstride + sstride); i += blockDim.x) xs[i] = 0.0f;\n'
            '        } else if (prestaged) {\n          CopyPrestaged') % cond
edits = {
    'walk': [('matmul.cuh', '      if (!active) continue;', '      if (!active || kDecode) continue;')],
    # (The prologue knockouts zero the staged activations: left as they were,
    # garbage sent later launches down slow paths, e.g. silu's division, and
    # made the step slower, not faster.)
    'prologue': [('matmul.cuh', '        if (prestaged) {\n          CopyPrestaged', zero('kDecode'))],
    'prologue-qkv': [('matmul.cuh', '        if (prestaged) {\n          CopyPrestaged', zero('kDecode && kEpilogue == kEpilogueNone'))],
    # o and down both copy a stage image (attention's, gate/up's): o's K is its output count.
    'prologue-o': [('matmul.cuh', '        if (prestaged) {\n          CopyPrestaged',
                    zero('kDecode && prestaged && p.k == p.total_n'))],
    'prologue-gateup': [('matmul.cuh', '        if (prestaged) {\n          CopyPrestaged',
                         zero('kDecode && kEpilogue == kEpilogueSiluMul'))],
    'prologue-down': [('matmul.cuh', '        if (prestaged) {\n          CopyPrestaged',
                       zero('kDecode && prestaged && p.k != p.total_n'))],
    'attention': [('attention.cuh', '  WaitForPrevious();\n  if (!token || begin >= n) return;',
                   '  WaitForPrevious();\n  LetNextLaunch();\n  if (p.append) return;\n  if (!token || begin >= n) return;')],
    'merge': [('attention.cuh', '  if (!LastBlockToCount(p.split_done + th, used)) return;',
               '  LastBlockToCount(p.split_done + th, used);\n  return;')],
    'slices': [('attention.cuh', 'j0 < end; j0 += kAttnPositions * kAttnWarps', 'j0 < begin; j0 += kAttnPositions * kAttnWarps')],
    'query': [('attention.cuh', '    q[d] = (p.use_rope ? RopeElement(p.rope, qsrc, d, pos) : qsrc[d]) * p.scale;',
               '    q[d] = p.scale;')],
    'tail': [('attention.cuh', '  LetNextLaunch();  // the block\'s K/V loads are done\n',
              '  LetNextLaunch();  // the block\'s K/V loads are done\n  return;\n')],
    'append': [('attention.cuh', '  if (p.append && pos < end && h %', '  if (false && p.append && pos < end && h %')],
    # Steps of 2-63 tokens: the int8 tile kernel's activation loads all
    # from the first 256-element unit of the first token (L1 hits), or its
    # weight loads all from each row's first q4_K block.
    'tile-x': [('matmul_tile_int8.cuh', 'p.x_i8 + tg[i] * p.k + 256 * u + 32 * s + 8 * q', 'p.x_i8 + 32 * s + 8 * q')],
    'tile-walk': [('matmul_tile_int8.cuh', 'LoadTileInt8Block(wrow[h][w], u, q)', 'LoadTileInt8Block(wrow[h][w], 0, q)')],
    'stage': [('matmul.cuh', '    if (p.stage_image != nullptr) {', '    if (!kDecode && p.stage_image != nullptr) {')],
    'waits': [('matmul.cuh', '  if constexpr (kDecode) PrefetchFirstSteps',
               '  if constexpr (kDecode) {\n    WaitForPrevious();\n    LetNextLaunch();\n    return;\n  }\n'
               '  if constexpr (kDecode) PrefetchFirstSteps')],
}
# The Vulkan decode matmul (files named with their folder).
vk = 'vulkan/matmul_decode.comp'
edits['vk-empty'] = [(vk, '  if (t >= launch_rows()) return;  // the same for the whole workgroup',
                      '  return;')]
edits['vk-nostage'] = [(vk, '  stage_normed(t);\n  barrier();', '  barrier();'),
                       (vk, '    stage(t, 0u, K, scale);\n    barrier();', '    barrier();'),
                       (vk, '        stage(t, k0, len, scale);\n', '')]
edits['vk-noload'] = [(vk, '''          head_of[r][0] = wq(slot, at);
          qa_of[r][0] = wq(slot, codes_at);
          qb_of[r][0] = wq(slot, codes_at + 1u);
#if EPILOGUE == 1
          head_of[r][1] = w1q[at];
          qa_of[r][1] = w1q[codes_at];
          qb_of[r][1] = w1q[codes_at + 1u];
#endif''', '''          head_of[r][0] = uvec4(0x1C001C00u ^ (at & 0x3FFu), at * 2654435761u, at ^ gp, gp * 40503u);
          qa_of[r][0] = uvec4(at * 747796405u, gp * 2891336453u, at + gp, at ^ 0x5A5A5A5Au);
          qb_of[r][0] = qa_of[r][0] ^ uvec4(0x0F0F0F0Fu, 0x11111111u, 0x3C3C3C3Cu, 0x55555555u);
#if EPILOGUE == 1
          head_of[r][1] = head_of[r][0] ^ uvec4(0u, 1u, 2u, 3u);
          qa_of[r][1] = qa_of[r][0] ^ uvec4(7u, 5u, 3u, 1u);
          qb_of[r][1] = qb_of[r][0] ^ uvec4(1u, 3u, 5u, 7u);
#endif''')]
edits['chain'] = edits['walk'] + edits['prologue'] + edits['attention'] + edits['stage']
edits['waits'] = edits['waits'] + edits['attention']
if name not in edits:
    sys.exit('knockouts: unknown knockout ' + name)
for f, old, new in edits[name]:
    p = d + '/' + (f if '/' in f else 'cuda/' + f)
    s = open(p).read()
    if s.count(old) != 1:
        sys.exit('knockouts: %s: the edit of %s no longer matches the templates' % (name, f))
    open(p, 'w').write(s.replace(old, new))
EOF
  out=$root/.gpu/k$name
  rm -rf "$out" "$work/a" && mkdir -p "$out" "$work/a/artifacts"
  target=cuda:sm_90
  [ "${name#vk-}" = "$name" ] || target=vulkan
  KILN_KERNEL_TEMPLATES="$work/t" "$kiln" compile "$model" --program-only --target "$target" \
    -o "$work/a/artifacts/llama3-8b-q4_k.prog.kiln" >"$work/log" 2>&1 || { cat "$work/log" >&2; exit 1; }
  (cd "$work/a" && tar -cJf "$out/artifacts.tar.xz" artifacts)
  printf '#!/bin/sh\nexec "$(dirname "$0")/../bin/kiln" "$@"\n' >"$out/kiln"
  chmod +x "$out/kiln"
  echo "knockouts: .gpu/k$name"
done
