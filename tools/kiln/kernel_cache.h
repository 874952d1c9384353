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
// their checksum. A hit marks the file used now (its modification time),
// for PruneKernelCache.
absl::StatusOr<std::vector<uint8_t>> ReadCachedKernels(const std::string& path);

// Stores `bytes` at `path` through a temporary file and a rename, so a
// reader never sees half a file; then prunes the cache's folder to
// KernelCacheMaxBytes(), keeping `path`.
absl::Status WriteCachedKernels(const std::string& path, std::span<const uint8_t> bytes);

// The cache's size bound: KILN_KERNEL_CACHE_MAX_MB megabytes (default 2048).
// Every rebuilt kiln keys its kernels anew, so without a bound the folder
// would only grow.
uint64_t KernelCacheMaxBytes();

// Removes the least recently used cache files of `dir` (kernel files by
// modification time, and temporary files a killed writer left over an hour
// ago) until the kernel files take at most `max_bytes`; never `keep`.
// Returns how many files it removed.
int PruneKernelCache(const std::string& dir, uint64_t max_bytes, const std::string& keep);

}  // namespace kiln::cli
