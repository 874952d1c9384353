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
  kEmbedding,    // embedding_kernel<Storage>
  kGatherRows,
  kArgmax,
  kRope,
  kKvAppend,
  kAttention,
};

// Token rows per block of the matmul kernel: 1 for the decode bucket,
// kPrefillTile for larger buckets (the decoded weight chunk serves that many tokens).
constexpr int kPrefillTile = 8;

struct KernelCall {
  KernelKind kind = KernelKind::kElementwise;
  // Name expressions to instantiate: [0] for bucket 1; [1], where present,
  // for larger buckets (the matmul's prefill tile).
  std::vector<std::string> names;
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

// The template storage type for a plan storage name: "f16" ->
// "kiln::StorageF16", "int4:g128" -> "kiln::StorageInt4<128>".
absl::StatusOr<std::string> StorageTemplate(const std::string& storage);

// The calls of one launch, in order. Errors name the launch and what the
// CUDA backend cannot run (an unknown op, a KV type other than f32, a head
// dim over 256).
absl::StatusOr<std::vector<KernelCall>> LowerLaunch(const Plan& plan, const PlanLaunch& launch);

// Every distinct name expression the plan needs, in first-use order.
absl::StatusOr<std::vector<std::string>> PlanInstantiations(const Plan& plan);

}  // namespace kiln::cuda
