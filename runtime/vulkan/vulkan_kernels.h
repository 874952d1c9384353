// Which kernel instances run each launch of a plan, and how: the one mapping
// that both codegen (which compiles the instances) and the Vulkan executor
// (which binds and dispatches them) read, so the two cannot disagree.
//
// A launch becomes one or more dispatches (paged_attention is kv_append then
// paged_attention; decode steps skip the kv_append where the q, k, v matmul
// before wrote the pages itself); each names a template of
// kernels-templates/vulkan and its constants. The instance key (template +
// constants) names the SPIR-V module in the artifact.
#pragma once

#include <array>
#include <optional>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/executor/plan.h"

namespace kiln::vulkan {

// A template with its compile-time constants, in a fixed order.
struct KernelInstance {
  std::string template_name;                                // "matmul"
  std::vector<std::pair<std::string, std::string>> constants;  // {"K", "64"}, {"W0", "q4_K"}, ...
  int64_t workgroup_size = 64;

  // "matmul K=64 NUM_W=3 ..." : the module's name in the bundle.
  std::string Key() const;
  std::string ConstantsText() const;  // "K=64 NUM_W=3 ..."
};

// The rope cos/sin table a dispatch reads (binding 4), computed by the runtime.
struct RopeTable {
  double theta = 10000.0;
  int64_t dims = 0;
  double linear_factor = 1.0;
  bool operator==(const RopeTable&) const = default;
};

// How many workgroups a dispatch needs for a bucket of B tokens.
struct LaunchShape {
  enum class Kind {
    kStride,  // x = min(ceil(B * items_per_token / WG), kMaxStrideGroups)
    kPerRow,  // x = B
    kMatmul,  // x = ceil(columns / columns_per_group) (at most the device's limit), y = ceil(B / tokens_per_group)
    kPerHeadToken,  // x = heads / heads_per_group, y = B, z = AttentionSplits(B, ...) where uses_partials
  };
  Kind kind = Kind::kStride;
  int64_t items_per_token = 0;
  int64_t columns = 0;
  int64_t tokens_per_group = 1;
  int64_t columns_per_group = 1;
  int64_t heads = 0;
  int64_t heads_per_group = 1;  // query heads one workgroup takes (those of a KV head)
  static constexpr int64_t kMaxStrideGroups = 1024;
};

// The arena operand role of the per-token 1 / rms that a row_rms dispatch
// writes for the normed matmul after it: a region past the plan's arena,
// which the executor adds (one float a token of the largest bucket).
inline constexpr char kRowRmsRole[] = "@row_rms";

// An arena operand: the launch's binding role and its width in floats per row.
struct ArenaOperand {
  std::string role;
  int64_t width = 0;
};

struct PlannedDispatch {
  KernelInstance kernel;
  std::array<std::string, 3> weights;  // weight names of slots 0..2 ("" = unused)
  std::string vector_weight;           // binding 4 from a 1-D weight (gain, bias), or
  bool uses_rope_table = false;        // binding 4 is the table of `rope`
  RopeTable rope;                      // (or binding 3: appends_kv_rope below)
  int64_t layer = -1;                  // >= 0: binding 6 holds this layer's pages
  // Push constants in0, in1, out0, out1, out2 (role "" = unused).
  std::array<ArenaOperand, 2> inputs;
  std::array<ArenaOperand, 3> outputs;
  LaunchShape shape;
  // Split-K attention: binding 0 holds the partials, push constant `splits`
  // is AttentionSplits(B, ...); a combine runs only where that is above 1.
  bool uses_partials = false;
  bool only_when_split = false;
  // paged_attention: the variant whose last split merges the partials
  // itself (FOLD), run in split steps instead of kernel + the combine.
  std::optional<KernelInstance> fold_kernel;
  // row_rms.comp: runs only in buckets of at least tiled_min_bucket tokens,
  // where the normed matmul after it runs a tiled variant (which reads its
  // 1 / rms per token instead of every workgroup summing its tokens' rows).
  bool only_when_tiled = false;
  // matmul with a norm: its tiled variants read each token's 1 / rms at
  // push constant row_rms (kRowRmsRole); the other variants sum themselves.
  bool reads_row_rms = false;
  // matmul: a variant for buckets of at most decode_max_bucket tokens, one
  // token per workgroup row (decode leaves the prefill variant's token tile
  // mostly empty), decode_columns_per_group columns per workgroup.
  std::optional<KernelInstance> decode_kernel;
  int64_t decode_max_bucket = 0;
  int64_t decode_columns_per_group = 1;
  int64_t decode_groups_per_unit = 0;  // workgroups per SM at most, where the device counts them
  // The decode variant on integer dot products (q4_K: activations as int8
  // codes), run instead of decode_kernel where the device has them.
  std::optional<KernelInstance> decode_dp4_kernel;
  int64_t decode_dp4_columns_per_group = 1;  // its K slices counted in 64-element lane steps
  // matmul of q, k and v: where >= 0, its decode variants also write k and
  // v into this layer's pages (binding 6), k rotated by `rope` where
  // appends_kv_rope (binding 3 holds its table), and the layer's kv_append
  // dispatch is skipped in the buckets where they run.
  int64_t appends_kv_layer = -1;
  bool appends_kv_rope = false;
  // matmul: the shared-memory tiled variant (matmul_tiled.comp) for buckets
  // of at least tiled_min_bucket tokens, tiled_tokens_per_group x
  // tiled_columns_per_group outputs per workgroup.
  std::optional<KernelInstance> tiled_kernel;
  int64_t tiled_min_bucket = 0;
  int64_t tiled_tokens_per_group = 1;
  int64_t tiled_columns_per_group = 1;
  // matmul: the tiled variant on tensor cores (matmul_coopmat.comp), run
  // instead of tiled_kernel where the device has NV cooperative matrices
  // (16 x 16 x 16, f16 inputs, f32 sums).
  std::optional<KernelInstance> coopmat_kernel;
  int64_t coopmat_tokens_per_group = 1;
  int64_t coopmat_columns_per_group = 1;
  // The same on f16 weight rows (K a multiple of 8), run instead of
  // coopmat_kernel where the executor holds an f16 copy of the weights (or
  // they are f16): staging copies 16 bytes at a time and decodes nothing.
  std::optional<KernelInstance> coopmat_f16_kernel;
  // The same on workgroup-scope cooperative matrices (matmul_coopmat2.comp,
  // SPV_NV_cooperative_matrix2), run instead of coopmat_f16_kernel where the
  // device has them and the artifact carries it, after
  // activations_f16_kernel (activations_f16.comp) has written the launch's
  // input as f16 rows past the arena (normalised where it has a norm).
  // Its tiles are coopmat2_tokens_per_group x coopmat2_columns_per_group;
  // coopmat2_small_kernel's half that each way, for buckets whose grid of
  // large tiles would leave SMs idle.
  std::optional<KernelInstance> coopmat2_kernel;
  std::optional<KernelInstance> coopmat2_small_kernel;
  std::optional<KernelInstance> activations_f16_kernel;
  int64_t coopmat2_tokens_per_group = 1;
  int64_t coopmat2_columns_per_group = 1;
  int64_t coopmat2_columns = 0;  // its grid's columns (silu_mul: gate's and up's)
  // silu_mul launches: coopmat2_kernel writes gate's and up's sums apart
  // (past the arena), then this elementwise silu_mul makes the result.
  std::optional<KernelInstance> silu_mul_kernel;
  // residual_add launches: where coopmat2_kernel's grid of large tiles
  // would leave SMs idle, K split in slices instead, one instance a slice
  // (dispatched side by side), each storing its sums apart (past the arena);
  // then this elementwise split_sum adds them and the residual.
  std::vector<KernelInstance> coopmat2_slice_kernels;
  std::optional<KernelInstance> split_sum_kernel;
  // Per weight slot that is not f16 already: the kernel that makes its f16
  // copy at load (dequant_f16.comp).
  std::array<std::optional<KernelInstance>, 3> f16_copy_kernels;
  // paged_attention: the variant for prefill-sized steps
  // (paged_attention_prefill.comp), prefill_tokens_per_group tokens a
  // workgroup (y = ceil(B / that)), run instead of `kernel` where a step has
  // one split and at least that many tokens, on devices whose subgroup
  // shuffles reach prefill_lanes lanes.
  std::optional<KernelInstance> prefill_kernel;
  int64_t prefill_tokens_per_group = 1;
  int64_t prefill_lanes = 1;
  // paged_attention: the variant for prefill-sized steps on workgroup-scope
  // cooperative matrices (paged_attention_coopmat2.comp), run instead of
  // prefill_kernel where the device has them; coopmat2_prefill_tokens_per_group
  // tokens a workgroup.
  std::optional<KernelInstance> coopmat2_prefill_kernel;
  int64_t coopmat2_prefill_tokens_per_group = 1;
};

// Workgroups per (token, head) of attention in a bucket of B tokens: up to
// `max_splits` for decode-sized steps (few tokens over long contexts would
// leave a GPU idle), one for prefill-sized steps (their tokens fill it).
int64_t AttentionSplits(int64_t bucket, int64_t max_splits);
// The most splits an executor gives attention.
constexpr int64_t kMaxAttentionSplits = 64;

// The dispatches of every launch, in plan order, or an error naming the
// launch when kiln has no Vulkan kernel for it.
absl::StatusOr<std::vector<std::vector<PlannedDispatch>>> PlanDispatches(const Plan& plan);

// The step's last dispatch: the R result rows into the io buffer.
PlannedDispatch CopyLogitsDispatch(const Plan& plan);

// Instead of CopyLogitsDispatch in a greedy step: the argmax of each of the R
// result rows into the io buffer, so that R ids cross to the host rather than
// R x n_vocab floats (513 KB a token for Llama 3).
PlannedDispatch GreedyIdsDispatch(const Plan& plan);

// [launch][bucket]: true where the launch's rows are the step's R logit rows
// (its input was written by gather_rows or by a launch downstream of one),
// false where they are its T tokens; the CPU executor counts rows the same way.
std::vector<std::vector<bool>> RowsAreLogitRows(const Plan& plan);

}  // namespace kiln::vulkan
