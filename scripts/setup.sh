#!/usr/bin/env bash
# Installs every build and test dependency of kiln from Debian's packages.
# Idempotent: packages already present are skipped, so a second run takes ~1 s.
set -euo pipefail

PACKAGES=(
  # build
  cmake ninja-build ccache lld clang-19 libclang-rt-19-dev pkg-config python3
  # compiler side: MLIR/LLVM 19
  libmlir-19-dev mlir-19-tools llvm-19-dev llvm-19-tools
  # runtime/common libraries
  libabsl-dev libpcre2-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  # SPIR-V / Vulkan (lavapipe for CI)
  libshaderc-dev glslc glslang-dev glslang-tools spirv-tools spirv-headers
  libvulkan-dev mesa-vulkan-drivers vulkan-tools
  # Khronos validation layers: VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation on the Vulkan tests
  vulkan-validationlayers
  # the chat page's browser test (tests/serving/chat_page_test.py): headless
  # Chromium; 25 packages, 122 MB download, 414 MB installed, 8 s on the dev box
  chromium
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${#missing[@]} package(s): ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#PACKAGES[@]} packages present"
fi

if [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: CUDA toolkit found at /usr/local/cuda ($(/usr/local/cuda/bin/nvcc --version | tail -n 2 | head -n 1))"
else
  echo "setup: no CUDA toolkit at /usr/local/cuda: CUDA parts will be skipped"
fi

# A newer glslang/SPIRV-Tools for the workgroup-scope cooperative-matrix
# kernels (Debian 12's cannot compile them): slang's libslang-glslang from
# the slangpy wheel on PyPI (~92 MB download once), into ~/.cache/kiln/slang.
python3 "$(dirname "$0")/glslang_next.py" --fetch || echo "setup: could not fetch libslang-glslang: Vulkan artifacts will lack the workgroup-scope tensor-core kernels"
