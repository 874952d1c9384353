#!/usr/bin/env bash
# Runs HERE (no GPU): builds what the GPU machine runs and stages it in .gpu/
# (which `run` carries): the runtime-only kiln and the CUDA test binaries,
# linked with static libstdc++/libgcc (the device has another distribution),
# the Vulkan kernel tests from the full build, the shared libraries they need
# that the device lacks, the artifacts the GPU tests load (compiled with the
# full kiln in build/) and the goldens; Debian's Vulkan loader debs in .gl/
# (carry both), the artifacts packed as artifacts.tar.xz. Then
# scripts/gpu/device.sh runs there.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
gpu_build=${KILN_GPU_BUILD_DIR:-$root/build-gpu}
full_build=${KILN_BUILD_DIR:-$root/build}
stage=$root/.gpu
testdata=${KILN_TESTDATA:-$root/../shared/testdata}
export CCACHE_BASEDIR=$root
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}

grep -qx '/.gpu/' "$root/.git/info/exclude" 2>/dev/null || echo '/.gpu/' >>"$root/.git/info/exclude"

if [ ! -f "$gpu_build/build.ninja" ]; then
  cmake -S "$root" -B "$gpu_build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
    -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
    -DKILN_BUILD_COMPILER=OFF -DKILN_BUILD_FUZZERS=OFF \
    "-DCMAKE_EXE_LINKER_FLAGS=-static-libstdc++ -static-libgcc"
fi
tests=(cuda_kernels_test cuda_golden_test cuda_backend_test cuda_perf_test)
ninja -C "$gpu_build" kiln "${tests[@]}"
# The artifacts come from the full build (the compiler is not in build-gpu).
KILN_BUILD_DIR=$full_build bash "$root/scripts/build.sh" kiln

rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib" "$stage/artifacts" "$stage/testdata/golden"
cp "$gpu_build/tools/kiln/kiln" "$stage/bin/"
for t in "${tests[@]}"; do cp "$gpu_build/tests/$t" "$stage/bin/"; done
# The Vulkan kernel tests link the SPIR-V codegen (glslang, SPIRV-Tools,
# both static), so they come from the full build; they run there against
# NVIDIA's driver (`bin/vulkan_kernels_test`, with .gl's loader extracted).
if [ -x "$full_build/tests/vulkan_kernels_test" ]; then
  ninja -C "$full_build" vulkan_kernels_test
  cp "$full_build/tests/vulkan_kernels_test" "$stage/bin/"
fi
# The read-only bound of the decode launches (scripts/gpu/gemv_read_probe.cu,
# docs/perf/cuda-h200.md session 30), where this machine has nvcc.
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ -x "$nvcc" ]; then
  "$nvcc" -O3 -std=c++17 -arch=sm_90 -cudart static -Xcompiler -static-libstdc++,-static-libgcc \
    -o "$stage/bin/gemv_read_probe" "$root/scripts/gpu/gemv_read_probe.cu"
fi
strip "$stage"/bin/*

# Shared libraries the device lacks: Debian's absl, pcre2 and the like. The
# C library, the CUDA driver and the toolkit's NVRTC/nvJitLink are there.
for b in "$stage"/bin/*; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libgcc_s.so*|libstdc++.so*) ;;
    libcuda.so*|libnvrtc*|libnvJitLink*) ;;
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done

# The newer glslang that the workgroup-scope tensor-core kernels compile with
# (vulkan_kernels_test compiles its kernels there); device.sh points
# KILN_SLANG_GLSLANG at it. 10 MB.
next=$(python3 "$root/scripts/glslang_next.py" --fetch 2>/dev/null | sed -n 's/^libslang-glslang: //p' || true)
if [ -n "$next" ]; then cp "$next" "$stage/lib/libslang-glslang.so"; fi

for tag in stories260K stories260K-f16 stories260K-q8_0-mix stories260K-q4_0-mix; do
  model=$testdata/models/$tag.gguf
  [ -f "$model" ] || continue
  "$full_build/tools/kiln/kiln" compile "$model" --target cuda:sm_90,vulkan -o "$stage/artifacts/$tag.kiln" >/dev/null 2>&1 ||
    { echo "compile of $tag failed" >&2; exit 1; }
  [ -d "$testdata/golden/$tag" ] && cp -r "$testdata/golden/$tag" "$stage/testdata/golden/"
  chmod -R u+w "$stage/testdata"
done
# llama-perplexity's figures for CudaGolden.PerplexityAsLlamaPerplexity.
[ -d "$testdata/golden/perplexity" ] && cp -r "$testdata/golden/perplexity" "$stage/testdata/golden/" &&
  chmod -R u+w "$stage/testdata"
# The same with an f16 KV cache (the Vulkan backend keeps f32 pages: CUDA only).
"$full_build/tools/kiln/kiln" compile "$testdata/models/stories260K.gguf" --target cuda:sm_90 --kv-type f16 \
  -o "$stage/artifacts/stories260K-kvf16.kiln" >/dev/null 2>&1 || { echo "compile of stories260K-kvf16 failed" >&2; exit 1; }
# Llama-3-8B-shaped programs for the benchmarks (scripts/gpu/bench.sh): the
# weights are synthesised here once (cached) only to compile from; the device
# synthesises the same file again (kiln synth is deterministic per seed) and
# binds it with --weights. Program-only artifacts are a few MB each.
big_types=${KILN_GPU_BIG_TYPES-q4_k q8_0 f16}
synth_dir=${KILN_SYNTH_DIR:-$HOME/.cache/kiln/synth}
mkdir -p "$synth_dir"
for type in $big_types; do
  gguf=$synth_dir/llama3-8b-$type.gguf
  [ -f "$gguf" ] || "$full_build/tools/kiln/kiln" synth --preset llama3-8b --type "$type" -o "$gguf"
  "$full_build/tools/kiln/kiln" compile "$gguf" --program-only --target cuda:sm_90,vulkan \
    -o "$stage/artifacts/llama3-8b-$type.prog.kiln" >/dev/null || { echo "compile of llama3-8b $type failed" >&2; exit 1; }
  if [ "$type" = q4_k ]; then
    "$full_build/tools/kiln/kiln" compile "$gguf" --program-only --target cuda:sm_90 --kv-type f16 \
      -o "$stage/artifacts/llama3-8b-$type-kvf16.prog.kiln" >/dev/null ||
      { echo "compile of llama3-8b $type with an f16 KV cache failed" >&2; exit 1; }
  fi
done
mkdir -p "$stage/peers"
cp "$testdata/../peers/"*.md "$stage/peers/"
# Teacher-forced logits and activations are not read on the GPU: keep the stage small.
find "$stage/testdata" -name '*.f32' -delete
# Vulkan there: Debian's loader and libglvnd family, which NVIDIA's ICD needs
# (../shared/TOOLCHAIN.md, section 9), carried in .gl (bench.sh extracts them).
grep -qx '/.gl/' "$root/.git/info/exclude" 2>/dev/null || echo '/.gl/' >>"$root/.git/info/exclude"
if ! ls "$root"/.gl/libvulkan1_*.deb >/dev/null 2>&1; then
  mkdir -p "$root/.gl"
  (cd "$root/.gl" && apt-get download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >/dev/null 2>&1) ||
    echo "warning: could not download the Vulkan loader debs into .gl (Vulkan runs there need them)" >&2
fi
# A run carries at most 64 MiB: the artifacts travel as one .tar.xz (about a
# quarter of their size); device.sh and bench.sh unpack it there.
(cd "$stage" && tar -cf - artifacts | xz -T2 -6 >artifacts.tar.xz && rm -rf artifacts)
du -sh "$stage"
