#include "runtime/artifact/storage_type.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

uint64_t Bytes(std::string_view storage, std::vector<int64_t> shape) {
  absl::StatusOr<uint64_t> n = StorageBytes(storage, shape);
  EXPECT_TRUE(n.ok()) << n.status();
  return n.value_or(0);
}

std::string Error(std::string_view storage, std::vector<int64_t> shape) {
  absl::StatusOr<uint64_t> n = StorageBytes(storage, shape);
  EXPECT_FALSE(n.ok()) << storage;
  return std::string(n.status().message());
}

TEST(StorageBytes, GgmlTypes) {
  EXPECT_EQ(Bytes("f32", {2, 3}), 24u);
  EXPECT_EQ(Bytes("f16", {5}), 10u);
  EXPECT_EQ(Bytes("bf16", {4, 4}), 32u);
  EXPECT_EQ(Bytes("q8_0", {16, 64}), 16u * 2 * 34);
  EXPECT_EQ(Bytes("q4_0", {1, 32}), 18u);
  EXPECT_EQ(Bytes("q4_k", {3, 256}), 3u * 144);
  EXPECT_EQ(Bytes("Q4_K", {3, 256}), 3u * 144);  // ggml's own spelling
  EXPECT_EQ(Bytes("q6_k", {2, 512}), 2u * 2 * 210);
  EXPECT_EQ(Bytes("f32", {2, 3, 4}), 96u);
}

TEST(StorageBytes, GroupwiseInts) {
  EXPECT_EQ(Bytes("int4:g32", {8, 64}), 8u * 2 * (16 + 4));
  EXPECT_EQ(Bytes("int4:g128", {1, 4096}), 32u * (64 + 4));
  EXPECT_EQ(Bytes("int2:g64", {4, 128}), 4u * 2 * (16 + 4));
  EXPECT_EQ(Bytes("int2:g8", {8}), 2u + 4);
}

TEST(StorageBytes, UnknownTypes) {
  for (const char* bad : {"", "q9_z", "int4", "int4:g", "int4:g12", "int4:g0", "int4:g+8", "int4:g 8", "int3:g32",
                          "int4:g1234567890", "f32 "}) {
    EXPECT_THAT(Error(bad, {8, 64}), HasSubstr("unknown storage type")) << bad;
  }
}

TEST(StorageBytes, BadShapes) {
  EXPECT_THAT(Error("q8_0", {2, 31}), HasSubstr("row length 31 is not a multiple of the q8_0 block of 32 elements"));
  EXPECT_THAT(Error("int4:g128", {64}), HasSubstr("row length 64 is not a multiple of the int4:g128 block of 128"));
  EXPECT_THAT(Error("f32", {}), HasSubstr("rank 0 (1 to 8 allowed)"));
  EXPECT_THAT(Error("f32", {1, 1, 1, 1, 1, 1, 1, 1, 1}), HasSubstr("rank 9"));
  EXPECT_THAT(Error("f32", {4, 0}), HasSubstr("shape [4, 0] has a dimension below 1"));
  EXPECT_THAT(Error("f32", {-1, 4}), HasSubstr("dimension below 1"));
  EXPECT_THAT(Error("f32", {int64_t{1} << 40, int64_t{1} << 40}), HasSubstr("overflows 64 bits"));
}

}  // namespace
}  // namespace kiln
