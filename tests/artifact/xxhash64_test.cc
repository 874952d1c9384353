// XXH64 against published vectors: the sanity-check table of the reference
// implementation (cli/xsum_sanity_check.c of github.com/Cyan4973/xxHash),
// which hashes a generated buffer at lengths that exercise every step of the
// algorithm, and short strings from the reference's bindings and users.
#include "runtime/artifact/xxhash64.h"

#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

namespace kiln {
namespace {

constexpr uint64_t kPrime32 = 2654435761u;
constexpr uint64_t kPrime64 = 11400714785074694797ull;

// XSUM_fillTestBuffer of the reference sanity check.
std::vector<uint8_t> SanityBuffer(size_t len) {
  std::vector<uint8_t> buffer(len);
  uint64_t byte_gen = kPrime32;
  for (uint8_t& b : buffer) {
    b = static_cast<uint8_t>(byte_gen >> 56);
    byte_gen *= kPrime64;
  }
  return buffer;
}

std::span<const uint8_t> Bytes(std::string_view s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

struct Vector {
  size_t len;
  uint64_t seed;
  uint64_t digest;
};

// XSUM_XXH64_testdata: lengths 0 (no input), 1 and 4 (the byte and 4-byte
// tails), 14 (8 + 4 + 2 tail), 222 (six 32-byte stripes, then a tail).
constexpr Vector kSanityVectors[] = {
    {0, 0, 0xEF46DB3751D8E999ull},         {0, kPrime32, 0xAC75FDA2929B17EFull}, {1, 0, 0xE934A84ADB052768ull},
    {1, kPrime32, 0x5014607643A9B4C3ull},  {4, 0, 0x9136A0DCA57457EEull},        {14, 0, 0x8282DCC4994E35C8ull},
    {14, kPrime32, 0xC3BD6BF63DEB6DF0ull}, {222, 0, 0xB641AE8CB691C174ull},      {222, kPrime32, 0x20CB8AB7AE10C14Aull},
};

TEST(Xxh64, ReferenceSanityVectors) {
  const std::vector<uint8_t> buffer = SanityBuffer(222);
  for (const Vector& v : kSanityVectors) {
    const std::span<const uint8_t> input(buffer.data(), v.len);
    EXPECT_EQ(Xxh64Hash(input, v.seed), v.digest) << "len " << v.len << " seed " << v.seed;
    // The reference also checks one Update of everything and byte-at-a-time.
    Xxh64 whole(v.seed);
    whole.Update(input);
    EXPECT_EQ(whole.Digest(), v.digest) << "len " << v.len;
    Xxh64 bytewise(v.seed);
    for (size_t i = 0; i < v.len; ++i) bytewise.Update(input.subspan(i, 1));
    EXPECT_EQ(bytewise.Digest(), v.digest) << "len " << v.len;
  }
}

TEST(Xxh64, ShortStrings) {
  EXPECT_EQ(Xxh64Hash(Bytes("")), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(Xxh64Hash(Bytes("a")), 0xD24EC4F1A98C6E5Bull);
  EXPECT_EQ(Xxh64Hash(Bytes("abc")), 0x44BC2CF5AD770999ull);
  EXPECT_EQ(Xxh64Hash(Bytes("ab")), 0x65F708CA92D04A61ull);
  EXPECT_EQ(Xxh64Hash(Bytes("ABC")), 0xE66AE7354FCFEE98ull);
  EXPECT_EQ(Xxh64Hash(Bytes("xxhash")), 0x32DD38952C4BC720ull);
}

// Any way of cutting the input into Update calls gives the one-shot digest,
// across the 32-byte stripe boundaries where the carried state matters.
TEST(Xxh64, StreamingMatchesOneShot) {
  const std::vector<uint8_t> buffer = SanityBuffer(300);
  for (size_t len : {31u, 32u, 33u, 63u, 64u, 65u, 100u, 300u}) {
    const std::span<const uint8_t> input(buffer.data(), len);
    const uint64_t expected = Xxh64Hash(input, 7);
    for (size_t chunk : {1u, 3u, 7u, 31u, 32u, 33u, 64u}) {
      Xxh64 h(7);
      for (size_t at = 0; at < len; at += chunk) h.Update(input.subspan(at, std::min(chunk, len - at)));
      EXPECT_EQ(h.Digest(), expected) << "len " << len << " chunk " << chunk;
    }
  }
}

TEST(Xxh64, DigestLeavesTheStateUsable) {
  const std::vector<uint8_t> buffer = SanityBuffer(222);
  Xxh64 h;
  h.Update(std::span<const uint8_t>(buffer).first(14));
  EXPECT_EQ(h.Digest(), 0x8282DCC4994E35C8ull);
  h.Update(std::span<const uint8_t>(buffer).subspan(14));
  EXPECT_EQ(h.Digest(), 0xB641AE8CB691C174ull);
}

}  // namespace
}  // namespace kiln
