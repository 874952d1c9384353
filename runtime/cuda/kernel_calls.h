// How a plan launch becomes CUDA kernel calls: the one function that both
// codegen (which compiles the template instantiations the calls name) and
// the CUDA executor (which launches them) use, so the two always agree on
// the instantiation names.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/executor/plan.h"

namespace kiln::cuda {

enum class KernelKind {
  kMatmul,       // matmul_kernel<Storage, epilogue, norm, tile>
  kElementwise,  // elementwise_kernel
  kRmsNorm,
  kEmbedding,  // embedding_kernel<Storage>
  kGatherRows,
  kArgmax,
  kRope,
  kKvAppend,
  kAttentionPrefill,  // attention_prefill_kernel<head_dim>: whole 64-token tiles of one sequence
  kAttention,         // attention_kernel<head_dim> (split-K slices merged by the last)
  kAttentionGroup,    // attention_group_kernel<head_dim>: a token's heads of a KV head on tensor cores
};

// The two decode attention kernels (one of them runs a bucket): split into
// context slices, merged by the last slice, staging o's activations.
constexpr bool IsDecodeAttention(KernelKind k) {
  return k == KernelKind::kAttention || k == KernelKind::kAttentionGroup;
}

// Token rows per block of the matmul kernel: 1 for the decode bucket,
// kPrefillTile for larger buckets (the decoded weight chunk serves that many tokens).
constexpr int kPrefillTile = 8;

// Buckets of at least this many tokens run matmuls on tensor cores (f16
// operands, f32 sums: relative error ~1e-3). Smaller ones keep f32 operands,
// so short prompts and decode match the CPU backend closely (stories260K's
// golden prompts, up to 24 tokens, take the f32 path).
// There, quantised weights are decoded to f16 rows first (a fixed cost per
// step, ~0.2 ms per layer of an 8B model) for matmul_f16_tc_kernel: on the
// H200 that beat matmul_tc_kernel, which decodes inside, from 64 tokens on
// (docs/perf/cuda-h200.md).
constexpr int kTensorCoreMinBucket = 64;

// Buckets of at least this many tokens run attention_group_kernel (a
// token's query heads of a KV head on tensor cores; f16 Q and P, relative
// error ~3e-4) where the plan has it, smaller ones attention_kernel (f32
// sums; with an f16 pool it converts every K/V element once per query
// head, which bounds it). H100, 512 positions, ms a step, attention_kernel
// against attention_group_kernel (docs/perf/cuda-h200.md, sessions 34-35):
// f32 pool: 1 token 2.77 / 2.93, 4 3.28 / 3.51, 8 3.83 / 3.88, 16 5.51 /
// 5.08; f16 pool: 1 2.86 / 2.89, 2 3.18 / 3.06, 4 3.57 / 3.39, 8 4.31 /
// 3.72, 16 6.28 / 4.73.
constexpr int AttentionGroupMinBucket(bool f16_pool) { return f16_pool ? 2 : 16; }

// The instantiations of a kMatmul call, by slot of KernelCall::names (an
// empty name where the storage has no such kernel).
enum MatmulSlot : int {
  kMatmulDecodeSlot = 0,      // matmul_kernel, tile 1: bucket 1
  kMatmulTiledSlot = 1,       // matmul_kernel, 8-token tiles (f32): other buckets of 2-63 tokens and logit rows
  kMatmulTcSlot = 2,          // matmul_tc_kernel: larger buckets [7] does not take (K not a multiple of kGemmK)
  kActivationsF16Slot = 3,    // activations_f16_kernel: x (normalised) to f16 before [2] or [7]
  kActivationsSplitSlot = 4,  // activations_f16_kernel split: x as f16 hi | lo | sums per 32, before [5]
  kMatmulTileTcSlot = 5,      // matmul_tile_tc_kernel: buckets of 2-63 tokens and larger ones' logit rows
  kDequantizeSlot = 6,        // dequantize_f16_kernel: quantised weights to f16 rows before [7]
  kMatmulF16TcSlot = 7,       // matmul_f16_tc_kernel: larger buckets over f16 weight rows
  kMatmulF16WgmmaSlot = 8,    // matmul_f16_wgmma_kernel: [7] on sm_90a's warpgroup MMA (sm_90 bundles)
  kActivationsInt8Slot = 9,   // activations_int8_kernel: x as int8 codes, a scale per 256, sums per 32; before [10]
  kMatmulTileInt8Slot = 10,   // matmul_tile_int8_kernel: [5] for q4_K on integer tensor cores
  kMatmulSplitSumSlot = 11,   // matmul_split_sum_kernel: adds [8]'s slices of K (small grids) and applies the epilogue
  kMatmulPairSlot = 12,       // matmul_kernel, tile 2: two-token buckets of q8_0, run like decode
  kMatmulStreamSlot = 13,     // matmul_stream_kernel: [0] for q8_0 on sm_90, weights streamed by the copy engine
  kQ4KTableSlot = 14,         // q4k_scale_table_kernel: q4_K's decode copies for [0] and [12], made at load
  kMatmulTileInt8WideSlot = 15,    // matmul_tile_int8_kernel, two token tiles a block: [10] for buckets of 9-63 tokens
  kMatmulTileTcLogitsSlot = 16,    // [5] over a larger bucket's logit rows (a grid of one token tile, looping)
  kMatmulTileInt8LogitsSlot = 17,  // [10] likewise
  kMatmulQ4KWgmmaSlot = 18,        // matmul_q4k_wgmma_kernel: [8] over q4_K rows as stored, for small prefill steps
  kMatmulSlots = 19,
};

struct KernelCall {
  KernelKind kind = KernelKind::kElementwise;
  // Name expressions to instantiate: [0] for the kernels of one name; a
  // kMatmul call has kMatmulSlots (MatmulSlot).
  std::vector<std::string> names;
  // Whether `names` has the tile tensor-core pair [4], [5].
  bool has_tile_tc() const { return names.size() > kMatmulTileTcSlot && !names[kMatmulTileTcSlot].empty(); }
  // Whether `names` has the int8 tile pair [9], [10].
  bool has_tile_int8() const { return names.size() > kMatmulTileInt8Slot && !names[kMatmulTileInt8Slot].empty(); }
  // kMatmul: the launch's weight indices (weight<i>) this call covers; with
  // `to_scratch` its outputs go to scratch buffers 0.. instead of results.
  std::vector<int> weights;
  int epilogue = 0;
  bool norm = false;
  bool to_scratch = false;
  // kElementwise: the cuda_abi::ElementwiseOp; with `from_scratch` it reads
  // scratch buffers 0 and 1 (the silu_mul of gate and up of different storages).
  int elementwise_op = 0;
  bool from_scratch = false;
};

// Whether matmul_tile_tc_kernel reads this storage template (buckets of 2
// to 63 tokens then run on tensor cores when K is a multiple of 32).
bool HasTileTensorCoreKernel(const std::string& storage_template);

// Dynamic shared memory of matmul_stream_kernel for a weight of `storage`
// and K = k (cuda_abi::StreamSmemBytes), or 0 where it has no stream kernel.
int StreamSmemBytesOf(const std::string& storage, int k);

// Weight rows per warp of matmul_kernel for a weight of `storage` and a tile
// of `tile` tokens (decode: the kRows of its lane in matmul_lanes.cuh).
int MatmulRowsPerWarp(const std::string& storage, int tile);

// The template storage type for a plan storage name: "f16" ->
// "kiln::StorageF16", "int4:g128" -> "kiln::StorageInt4<128>".
absl::StatusOr<std::string> StorageTemplate(const std::string& storage);

// The calls of one launch, in order. Errors name the launch and what the
// CUDA backend cannot run (an unknown op, a KV type other than f32, a head
// dim over 256).
absl::StatusOr<std::vector<KernelCall>> LowerLaunch(const Plan& plan, const PlanLaunch& launch);

// The kernel the executor's StepGreedy runs over the logit rows.
inline constexpr char kGreedyArgmaxKernel[] = "kiln::argmax_kernel";

// Every distinct name expression the plan needs, in first-use order (the
// greedy argmax first; empty slots left out).
absl::StatusOr<std::vector<std::string>> PlanInstantiations(const Plan& plan);

}  // namespace kiln::cuda
