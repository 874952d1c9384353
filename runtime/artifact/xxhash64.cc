#include "runtime/artifact/xxhash64.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace kiln {
namespace {

constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kPrime3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kPrime4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kPrime5 = 0x27D4EB2F165667C5ULL;
constexpr size_t kStripe = 32;

// Lanes are read little-endian whatever the host, so the digest is portable.
uint64_t Read64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint64_t Read32(const uint8_t* p) {
  return uint64_t{p[0]} | uint64_t{p[1]} << 8 | uint64_t{p[2]} << 16 | uint64_t{p[3]} << 24;
}

uint64_t Round(uint64_t acc, uint64_t lane) {
  acc += lane * kPrime2;
  acc = std::rotl(acc, 31);
  return acc * kPrime1;
}

uint64_t MergeAccumulator(uint64_t acc, uint64_t acc_n) {
  acc ^= Round(0, acc_n);
  acc *= kPrime1;
  return acc + kPrime4;
}

inline __attribute__((always_inline)) void ConsumeStripe(uint64_t (&acc)[4], const uint8_t* p) {
  for (int lane = 0; lane < 4; ++lane) acc[lane] = Round(acc[lane], Read64(p + 8 * lane));
}

}  // namespace

Xxh64::Xxh64(uint64_t seed) : seed_(seed), acc_{seed + kPrime1 + kPrime2, seed + kPrime2, seed, seed - kPrime1} {}

void Xxh64::Update(std::span<const uint8_t> bytes) {
  const uint8_t* p = bytes.data();
  size_t n = bytes.size();
  total_len_ += n;
  if (stripe_len_ > 0) {
    const size_t take = std::min(n, kStripe - stripe_len_);
    std::memcpy(stripe_ + stripe_len_, p, take);
    stripe_len_ += take;
    p += take;
    n -= take;
    if (stripe_len_ < kStripe) return;
    ConsumeStripe(acc_, stripe_);
    stripe_len_ = 0;
  }
  // The lanes in locals: kept in the member, each round waited on a store
  // and its reload (8.6 GB/s over an artifact's weights here).
  uint64_t lanes[4] = {acc_[0], acc_[1], acc_[2], acc_[3]};
  for (; n >= kStripe; p += kStripe, n -= kStripe) ConsumeStripe(lanes, p);
  std::copy(lanes, lanes + 4, acc_);
  if (n > 0) std::memcpy(stripe_, p, n);
  stripe_len_ = n;
}

uint64_t Xxh64::Digest() const {
  uint64_t acc;
  if (total_len_ >= kStripe) {
    acc = std::rotl(acc_[0], 1) + std::rotl(acc_[1], 7) + std::rotl(acc_[2], 12) + std::rotl(acc_[3], 18);
    for (uint64_t a : acc_) acc = MergeAccumulator(acc, a);
  } else {
    acc = seed_ + kPrime5;
  }
  acc += total_len_;

  const uint8_t* p = stripe_;
  size_t n = stripe_len_;
  for (; n >= 8; p += 8, n -= 8) {
    acc ^= Round(0, Read64(p));
    acc = std::rotl(acc, 27) * kPrime1 + kPrime4;
  }
  if (n >= 4) {
    acc ^= Read32(p) * kPrime1;
    acc = std::rotl(acc, 23) * kPrime2 + kPrime3;
    p += 4;
    n -= 4;
  }
  for (; n > 0; ++p, --n) {
    acc ^= *p * kPrime5;
    acc = std::rotl(acc, 11) * kPrime1;
  }

  acc ^= acc >> 33;
  acc *= kPrime2;
  acc ^= acc >> 29;
  acc *= kPrime3;
  acc ^= acc >> 32;
  return acc;
}

uint64_t Xxh64Hash(std::span<const uint8_t> bytes, uint64_t seed) {
  Xxh64 h(seed);
  h.Update(bytes);
  return h.Digest();
}

}  // namespace kiln
