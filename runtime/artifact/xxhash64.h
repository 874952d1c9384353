// XXH64 (xxHash, 64-bit variant), written from the xxHash specification
// (doc/xxhash_spec.md of github.com/Cyan4973/xxHash). The artifact uses it to
// checksum its header and every section; a streaming state lets the writer
// hash gigabytes of weights as they go to disk without a second pass.
#pragma once

#include <cstdint>
#include <span>

namespace kiln {

class Xxh64 {
 public:
  explicit Xxh64(uint64_t seed = 0);

  void Update(std::span<const uint8_t> bytes);
  // The digest of everything passed to Update so far; the state stays usable.
  uint64_t Digest() const;

 private:
  uint64_t seed_;
  uint64_t acc_[4];
  uint64_t total_len_ = 0;
  uint8_t stripe_[32];  // an incomplete stripe carried between Update calls
  size_t stripe_len_ = 0;
};

// One-shot XXH64 of `bytes`.
uint64_t Xxh64Hash(std::span<const uint8_t> bytes, uint64_t seed = 0);

}  // namespace kiln
