// The kernel cache of `kiln run/serve/bench MODEL.gguf` (tools/kiln/kernel_cache):
// what it stores reads back, and the folder stays within its bound by
// dropping the least recently used files.
#include "tools/kiln/kernel_cache.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/test_support.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> Bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + i * 7);
  return b;
}

// Sets the file's last use `minutes` ago.
void Age(const fs::path& p, int minutes) {
  fs::last_write_time(p, fs::file_time_type::clock::now() - std::chrono::minutes(minutes));
}

TEST(KernelCache, WritesReadBackAndTheFolderKeepsItsBound) {
  const fs::path dir = testing::ScratchDir("kernel_cache_bound");
  const std::string a = (dir / "cuda-sm_90-a.bin").string(), b = (dir / "cuda-sm_90-b.bin").string(),
                    c = (dir / "vulkan-c.bin").string(), d = (dir / "vulkan-d.bin").string();
  const std::vector<uint8_t> mb = Bytes(1 << 20, 3);
  const testing::ScopedEnv bound("KILN_KERNEL_CACHE_MAX_MB", "4");
  ASSERT_TRUE(WriteCachedKernels(a, mb).ok());
  ASSERT_TRUE(WriteCachedKernels(b, mb).ok());
  ASSERT_TRUE(WriteCachedKernels(c, mb).ok());
  Age(a, 30);
  Age(b, 20);
  Age(c, 10);
  // Reading a marks it used: a is now the newest of the three.
  absl::StatusOr<std::vector<uint8_t>> got = ReadCachedKernels(a);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, mb);
  // A fourth file passes the 4 MiB bound (each file is 1 MiB and a 16-byte
  // header): the least recently used goes, b.
  ASSERT_TRUE(WriteCachedKernels(d, mb).ok());
  EXPECT_TRUE(fs::exists(a));
  EXPECT_FALSE(fs::exists(b));
  EXPECT_TRUE(fs::exists(c));
  EXPECT_TRUE(fs::exists(d));
  EXPECT_TRUE(ReadCachedKernels(d).ok());
  EXPECT_FALSE(ReadCachedKernels(b).ok());
}

TEST(KernelCache, PruneKeepsTheFileJustWrittenAndDropsStaleTemporaries) {
  const fs::path dir = testing::ScratchDir("kernel_cache_prune");
  const std::string big = (dir / "cuda-big.bin").string(), old = (dir / "cuda-old.bin").string();
  ASSERT_TRUE(WriteCachedKernels(old, Bytes(4096, 1)).ok());
  ASSERT_TRUE(WriteCachedKernels(big, Bytes(8192, 2)).ok());
  Age(old, 5);
  const fs::path stale = dir / "cuda-x.bin.123.tmp", fresh = dir / "cuda-y.bin.456.tmp", other = dir / "notes.txt";
  for (const fs::path& p : {stale, fresh, other}) std::ofstream(p) << "partial";
  Age(stale, 120);
  // A bound below the file just written alone: everything else goes, it stays.
  EXPECT_EQ(PruneKernelCache(dir.string(), 100, big), 2);  // old.bin and the stale temporary
  EXPECT_TRUE(fs::exists(big));
  EXPECT_FALSE(fs::exists(old));
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(fresh));  // a writer may still be at it
  EXPECT_TRUE(fs::exists(other));  // not the cache's
  EXPECT_EQ(PruneKernelCache(dir.string(), 100, big), 0);
  EXPECT_EQ(PruneKernelCache((dir / "absent").string(), 0, ""), 0);
}

TEST(KernelCache, MaxBytesReadsTheEnvironment) {
  const testing::ScopedEnv restored("KILN_KERNEL_CACHE_MAX_MB", nullptr);
  EXPECT_EQ(KernelCacheMaxBytes(), uint64_t{2048} << 20);
  ::setenv("KILN_KERNEL_CACHE_MAX_MB", "64", 1);
  EXPECT_EQ(KernelCacheMaxBytes(), uint64_t{64} << 20);
  ::setenv("KILN_KERNEL_CACHE_MAX_MB", "lots", 1);
  EXPECT_EQ(KernelCacheMaxBytes(), uint64_t{2048} << 20);
  ::setenv("KILN_KERNEL_CACHE_MAX_MB", "-5", 1);
  EXPECT_EQ(KernelCacheMaxBytes(), uint64_t{2048} << 20);
  ::setenv("KILN_KERNEL_CACHE_MAX_MB", "99999999999999999999", 1);
  EXPECT_EQ(KernelCacheMaxBytes(), uint64_t{2048} << 20);
  ::setenv("KILN_KERNEL_CACHE_MAX_MB", "0", 1);
  EXPECT_EQ(KernelCacheMaxBytes(), 0u);
}

}  // namespace
}  // namespace kiln::cli
