// The kernels section of one CUDA target ("cuda:sm_90") as codegen writes it
// and the CUDA executor reads it: one module (PTX and the cubin linked from
// it), the lowered name of every template instantiation, and the
// assembler's resource report per kernel for `kiln inspect`.
//
// Layout (little-endian): "KILNCUDA" | u32 version | u32 sm | blob ptx |
// blob cubin | blob info_log | u32 count | count x kernel, where a blob is
// u64 length + bytes and a kernel is blob name_expression | blob
// lowered_name | i32 registers | i32 spill_store_bytes | i32
// spill_load_bytes | i32 shared_bytes | i32 stack_bytes. Parsing checks every
// length against the bytes left, so a damaged section is an error.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::cuda {

// 2 (2026-12-02): the decode matmul walks 2 rows per warp for q5_0/q5_1 and
// 1 for q6_K (their own lanes); a runtime of the other version would size
// the grid for the wrong rows, so the two refuse each other's kernels.
// 3: decode launches of few row blocks split K over two warps per set of
// rows (MatmulParams::ksplit, MatmulKSplit).
// 4: buckets of 64 tokens and more run matmul_f16_tc_kernel over f16 weight
// rows (dequantize_f16_kernel first for quantised weights).
// 5: the last split-K attention slice merges (AttentionParams::split_done;
// no attention_combine_kernel), one-token steps append K/V inside
// attention_kernel (AttentionParams::append), and sm_90 bundles carry
// matmul_f16_wgmma_kernel (sm_90a) for the prefill matmul.
// 6: q4_K buckets of 2-63 tokens run matmul_tile_int8_kernel after
// activations_int8_kernel (MatmulParams::x_i8 and its per-32 meta; two more matmul slots).
// 7: matmul_f16_wgmma_kernel cuts K into slices where its tiles are few
// (MatmulParams::k_partials, k_splits), added by matmul_split_sum_kernel.
// 8: matmul_tile_int8_kernel's grid is (token tiles, row blocks).
// 9: q4_K and q8_0 buckets of two tokens run matmul_kernel<..., 2> like
// decode (a 13th matmul slot).
// 10: activations_int8_kernel scales per 256 elements and writes f16 sums
// (MatmulParams::x_i8_sums, x_i8_scales); matmul_tile_int8_kernel's blocks
// are 16 outputs.
// 11: q8_0's one-token decode runs matmul_stream_kernel on sm_90 (a 14th
// matmul slot).
// 12: q4_K's matmul_kernel reads scale tables made at load (MatmulParams::tables).
// 13: matmul_tile_int8_kernel takes its token tiles per block (a 16th
// matmul slot: two tiles, for buckets of 9-63 tokens).
// 14: matmul_tile_int8_kernel takes tile_row_tiles 16-row tiles a block;
// attention_kernel appends the K/V rows of every step without prefill tiles
// (AttentionParams::append; no kv_append launch there).
// 15: the head's looping tile-kernel instances for a larger bucket's logit
// rows (a 17th and an 18th matmul slot).
// 16: q4_K's small prefill steps run matmul_q4k_wgmma_kernel over the rows
// as stored (a 19th matmul slot).
// 17: every kernel waits for the launch before it (griddepcontrol.wait), so
// sm_90 launches may overlap (programmatic dependent launch); decode
// matmuls prefetch weights before that (MatmulParams::prefetch_steps).
// 18: one-token decode attention stages o's int8 activations
// (AttentionParams::stage_image).
// 19: the attention kernels take the pool's element type (<..., kiln::KvF32>
// or kiln::KvF16: an f16 page pool, kiln compile --kv-type f16).
// 20: q4_K's scale tables hold the codes too (kQ4KTableBlockBytes 160).
constexpr uint32_t kBundleVersion = 20;

struct BundleKernel {
  std::string name_expression;  // "kiln::matmul_kernel<kiln::StorageQ4_K, 0, true, 1>"
  std::string lowered_name;     // the mangled symbol in the module
  // From the assembler's verbose report; -1 where it said nothing.
  int32_t registers = -1;
  int32_t spill_store_bytes = -1;
  int32_t spill_load_bytes = -1;
  int32_t shared_bytes = -1;
  int32_t stack_bytes = -1;
};

struct CudaBundle {
  uint32_t sm = 0;  // 90 for sm_90
  std::string ptx;
  std::vector<uint8_t> cubin;
  std::string info_log;  // nvJitLink's verbose log
  std::vector<BundleKernel> kernels;

  const BundleKernel* Find(const std::string& name_expression) const;
};

std::vector<uint8_t> SerializeBundle(const CudaBundle& bundle);
absl::StatusOr<CudaBundle> ParseBundle(std::span<const uint8_t> bytes);

// "sm_90" from "cuda:sm_90"; an error for anything else.
absl::StatusOr<uint32_t> SmOfTarget(const std::string& target);

// One line per kernel (registers, spills, shared memory) for `kiln inspect`.
std::string DescribeBundle(const CudaBundle& bundle);

}  // namespace kiln::cuda
