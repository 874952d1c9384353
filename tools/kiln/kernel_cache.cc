#include "tools/kiln/kernel_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/artifact/xxhash64.h"

namespace kiln::cli {
namespace {

// File layout: magic, XXH64 of the bytes, the bytes.
constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'K', 'C', '0', '1'};

uint64_t HashText(const std::string& text, uint64_t seed) {
  return Xxh64Hash(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()), seed);
}

}  // namespace

std::string KernelCacheDir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string base = xdg != nullptr && *xdg != '\0' ? std::string(xdg)
                                                          : std::string(home != nullptr ? home : "/tmp") + "/.cache";
  return base + "/kiln/kernels";
}

std::string KernelCachePath(const std::string& key, const std::string& target) {
  struct stat st {};
  std::string binary = "unknown";
  if (::stat("/proc/self/exe", &st) == 0) {
    binary = absl::StrCat(st.st_size, ":", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec);
  }
  const uint64_t hash = HashText(key, HashText(absl::StrCat(target, "|", binary), 0));
  std::string name = target;
  for (char& c : name) {
    if (c == ':') c = '-';
  }
  return absl::StrFormat("%s/%s-%016x.bin", KernelCacheDir(), name, hash);
}

absl::StatusOr<std::vector<uint8_t>> ReadCachedKernels(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": not cached"));
  std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (file.size() < 16 || std::memcmp(file.data(), kMagic, 8) != 0) {
    return absl::NotFoundError(absl::StrCat(path, ": not a kernel cache file"));
  }
  uint64_t sum = 0;
  std::memcpy(&sum, file.data() + 8, 8);
  std::vector<uint8_t> bytes(file.begin() + 16, file.end());
  if (Xxh64Hash(bytes) != sum) return absl::NotFoundError(absl::StrCat(path, ": damaged (checksum)"));
  std::error_code ec;  // a read-only cache still serves; it just ages
  std::filesystem::last_write_time(path, std::filesystem::file_time_type::clock::now(), ec);
  return bytes;
}

absl::Status WriteCachedKernels(const std::string& path, std::span<const uint8_t> bytes) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot create its folder: ", ec.message()));
  const std::string tmp = absl::StrCat(path, ".", ::getpid(), ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    const uint64_t sum = Xxh64Hash(bytes);
    out.write(kMagic, 8);
    out.write(reinterpret_cast<const char*>(&sum), 8);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::remove(tmp.c_str());
      return absl::DataLossError(absl::StrCat(tmp, ": cannot write"));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    return absl::PermissionDeniedError(absl::StrCat(path, ": cannot rename into place: ", why));
  }
  PruneKernelCache(std::filesystem::path(path).parent_path().string(), KernelCacheMaxBytes(), path);
  return absl::OkStatus();
}

uint64_t KernelCacheMaxBytes() {
  const char* v = std::getenv("KILN_KERNEL_CACHE_MAX_MB");
  uint64_t mb = 2048;
  // Digits only (strtoull would take "-5" as a huge number), at most what
  // fits in bytes; anything else keeps the default.
  if (v != nullptr && *v >= '0' && *v <= '9') {
    char* end = nullptr;
    const unsigned long long parsed = std::strtoull(v, &end, 10);
    if (*end == '\0' && parsed <= (~uint64_t{0} >> 20)) mb = parsed;
  }
  return mb << 20;
}

int PruneKernelCache(const std::string& dir, uint64_t max_bytes, const std::string& keep) {
  namespace fs = std::filesystem;
  struct Entry {
    fs::path path;
    fs::file_time_type used;
    uint64_t bytes;
  };
  std::vector<Entry> kernels;
  uint64_t total = 0;
  int removed = 0;
  std::error_code ec;
  const fs::file_time_type stale = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e;
    if (!it->is_regular_file(e)) continue;
    const fs::path& p = it->path();
    const fs::file_time_type used = fs::last_write_time(p, e);
    if (e) continue;
    if (p.extension() == ".tmp") {
      if (used < stale && fs::remove(p, e)) ++removed;
      continue;
    }
    if (p.extension() != ".bin") continue;
    const uint64_t bytes = it->file_size(e);
    if (e) continue;
    total += bytes;
    if (fs::equivalent(p, keep, e)) continue;  // counted, never removed
    kernels.push_back({p, used, bytes});
  }
  std::sort(kernels.begin(), kernels.end(), [](const Entry& a, const Entry& b) { return a.used < b.used; });
  for (const Entry& k : kernels) {
    if (total <= max_bytes) break;
    std::error_code e;
    if (fs::remove(k.path, e)) {
      total -= k.bytes;
      ++removed;
    }
  }
  return removed;
}

}  // namespace kiln::cli
