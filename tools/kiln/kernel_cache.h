// The kernels `kiln run/serve/bench MODEL.gguf` compiles in memory for the
// GPU that runs, kept on disk so that the next run of the same model starts
// without compiling again (CUDA's take ~10-15 s for a small model here).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::cli {

// $XDG_CACHE_HOME/kiln/kernels, else ~/.cache/kiln/kernels.
std::string KernelCacheDir();

// The file for this key (the plan and what else decides the kernels) and
// target, keyed also by this kiln binary's size and modification time, so a
// rebuilt kiln (other templates) compiles again.
std::string KernelCachePath(const std::string& key, const std::string& target);

// The bytes stored at `path`; NotFound where there are none or they fail
// their checksum.
absl::StatusOr<std::vector<uint8_t>> ReadCachedKernels(const std::string& path);

// Stores `bytes` at `path` through a temporary file and a rename, so a
// reader never sees half a file.
absl::Status WriteCachedKernels(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace kiln::cli
