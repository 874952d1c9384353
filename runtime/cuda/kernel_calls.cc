#include "runtime/cuda/kernel_calls.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "kernels-templates/cuda/kernel_abi.h"
#include "runtime/cpu/weight_storage.h"

namespace kiln::cuda {
namespace {

absl::Status LaunchError(const PlanLaunch& l, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("launch '", l.kernel, "': ", what));
}

// The plan storage of the weight bound to `role`, or an error.
absl::StatusOr<std::string> WeightStorageOf(const Plan& plan, const PlanLaunch& l, const std::string& role) {
  const PlanBinding* b = l.Find(role);
  if (b == nullptr || b->kind != PlanBinding::Kind::kWeight) return LaunchError(l, "needs weight " + role);
  const PlanWeight* w = plan.FindWeight(b->name);
  if (w == nullptr) return LaunchError(l, "weight '" + b->name + "' is not in the plan");
  if (w->shape.size() != 2) return LaunchError(l, "weight '" + b->name + "' is not a matrix");
  return w->storage;
}

std::string MatmulName(const std::string& storage_template, int epilogue, bool norm, int tile) {
  return absl::StrCat("kiln::matmul_kernel<", storage_template, ", ", epilogue, ", ", norm ? "true" : "false", ", ",
                      tile, ">");
}

KernelCall Matmul(const std::string& storage_template, int epilogue, bool norm, std::vector<int> weights) {
  KernelCall c;
  c.kind = KernelKind::kMatmul;
  c.names.resize(kMatmulSlots);
  const std::string norm_arg = norm ? "true" : "false";
  c.names[kMatmulDecodeSlot] = MatmulName(storage_template, epilogue, norm, 1);
  c.names[kMatmulTiledSlot] = MatmulName(storage_template, epilogue, norm, kPrefillTile);
  c.names[kMatmulTcSlot] = absl::StrCat("kiln::matmul_tc_kernel<", storage_template, ", ", epilogue, ">");
  c.names[kActivationsF16Slot] = absl::StrCat("kiln::activations_f16_kernel<", norm_arg, ", false>");
  if (HasTileTensorCoreKernel(storage_template)) {
    c.names[kActivationsSplitSlot] = absl::StrCat("kiln::activations_f16_kernel<", norm_arg, ", true>");
    c.names[kMatmulTileTcSlot] = absl::StrCat("kiln::matmul_tile_tc_kernel<", storage_template, ", ", epilogue, ">");
    // The head (no epilogue) of larger buckets, over their logit rows.
    if (epilogue == cuda_abi::kEpilogueNone) {
      c.names[kMatmulTileTcLogitsSlot] =
          absl::StrCat("kiln::matmul_tile_tc_kernel<", storage_template, ", ", epilogue, ", true>");
    }
  }
  if (storage_template == "kiln::StorageQ4_K") {
    c.names[kQ4KTableSlot] = "kiln::q4k_scale_table_kernel";
    c.names[kActivationsInt8Slot] = absl::StrCat("kiln::activations_int8_kernel<", norm_arg, ">");
    c.names[kMatmulTileInt8Slot] = absl::StrCat("kiln::matmul_tile_int8_kernel<", storage_template, ", ", epilogue, ", 1>");
    c.names[kMatmulTileInt8WideSlot] =
        absl::StrCat("kiln::matmul_tile_int8_kernel<", storage_template, ", ", epilogue, ", 2>");
    if (epilogue == cuda_abi::kEpilogueNone) {
      c.names[kMatmulTileInt8LogitsSlot] =
          absl::StrCat("kiln::matmul_tile_int8_kernel<", storage_template, ", ", epilogue, ", 1, true>");
    }
    c.names[kMatmulQ4KWgmmaSlot] = absl::StrCat("kiln::matmul_q4k_wgmma_kernel<", epilogue, ">");
  }
  // q8_0's decode lane takes int8 activations and it has no int8 tile
  // kernel: its two-token steps run like decode. (q4_K's took 3.38 ms a step
  // of the 8B that way against 2.81 on matmul_tile_int8_kernel: H200,
  // docs/perf/cuda-h200.md, session 16.)
  if (storage_template == "kiln::StorageQ8_0") {
    c.names[kMatmulPairSlot] = MatmulName(storage_template, epilogue, norm, cuda_abi::kMatmulPairTile);
  }
  // q8_0's one-token steps stream the weights on sm_90.
  if (storage_template == "kiln::StorageQ8_0") {
    c.names[kMatmulStreamSlot] =
        absl::StrCat("kiln::matmul_stream_kernel<", storage_template, ", ", epilogue, ", ", norm_arg, ">");
  }
  // f16 rows are read in place; other storages are decoded to f16 first.
  if (storage_template != "kiln::StorageF16") {
    c.names[kDequantizeSlot] = absl::StrCat("kiln::dequantize_f16_kernel<", storage_template, ">");
  }
  c.names[kMatmulF16TcSlot] = absl::StrCat("kiln::matmul_f16_tc_kernel<", epilogue, ">");
  c.names[kMatmulF16WgmmaSlot] = absl::StrCat("kiln::matmul_f16_wgmma_kernel<", epilogue, ">");
  c.names[kMatmulSplitSumSlot] = absl::StrCat("kiln::matmul_split_sum_kernel<", epilogue, ">");
  c.weights = std::move(weights);
  c.epilogue = epilogue;
  c.norm = norm;
  return c;
}

KernelCall Simple(KernelKind kind, const std::string& name) {
  KernelCall c;
  c.kind = kind;
  c.names = {name};
  return c;
}

absl::StatusOr<std::vector<KernelCall>> LowerFusedMatmul(const Plan& plan, const PlanLaunch& l) {
  absl::StatusOr<std::string> epilogue = l.String("epilogue");
  if (!epilogue.ok()) return epilogue.status();
  const bool norm = l.Find("norm") != nullptr;
  std::vector<std::string> templates;
  for (int i = 0; l.Find(absl::StrCat("weight", i)) != nullptr; ++i) {
    absl::StatusOr<std::string> storage = WeightStorageOf(plan, l, absl::StrCat("weight", i));
    if (!storage.ok()) return storage.status();
    absl::StatusOr<std::string> t = StorageTemplate(*storage);
    if (!t.ok()) return LaunchError(l, std::string(t.status().message()));
    templates.push_back(*t);
  }
  if (templates.empty()) return LaunchError(l, "has no weights");
  std::vector<KernelCall> calls;
  if (*epilogue == "none") {
    // Consecutive weights of one storage share a call (q, k, v usually all do).
    for (size_t i = 0; i < templates.size();) {
      std::vector<int> group;
      size_t j = i;
      while (j < templates.size() && templates[j] == templates[i] &&
             group.size() < static_cast<size_t>(cuda_abi::kMaxFusedWeights)) {
        group.push_back(static_cast<int>(j++));
      }
      calls.push_back(Matmul(templates[i], cuda_abi::kEpilogueNone, norm, group));
      i = j;
    }
    return calls;
  }
  if (*epilogue == "silu_mul") {
    if (templates.size() != 2) return LaunchError(l, "silu_mul needs two weights");
    if (templates[0] == templates[1]) return std::vector<KernelCall>{Matmul(templates[0], cuda_abi::kEpilogueSiluMul, norm, {0, 1})};
    // Gate and up of different storages: each to scratch, then silu(gate) * up.
    KernelCall gate = Matmul(templates[0], cuda_abi::kEpilogueNone, norm, {0});
    KernelCall up = Matmul(templates[1], cuda_abi::kEpilogueNone, norm, {1});
    gate.to_scratch = up.to_scratch = true;
    KernelCall mul = Simple(KernelKind::kElementwise, "kiln::elementwise_kernel");
    mul.elementwise_op = cuda_abi::kSiluMul;
    mul.from_scratch = true;
    return std::vector<KernelCall>{gate, up, mul};
  }
  if (*epilogue == "residual_add") {
    if (templates.size() != 1) return LaunchError(l, "residual_add takes one weight");
    return std::vector<KernelCall>{Matmul(templates[0], cuda_abi::kEpilogueResidualAdd, norm, {0})};
  }
  return LaunchError(l, "unknown epilogue " + *epilogue);
}

}  // namespace

bool HasTileTensorCoreKernel(const std::string& storage_template) {
  // matmul_tile_tc.cuh's TileCodes specialisations.
  return storage_template == "kiln::StorageF16" || storage_template == "kiln::StorageQ8_0" ||
         storage_template == "kiln::StorageQ4_K";
}

int StreamSmemBytesOf(const std::string& storage, int k) {
  return storage == "q8_0" ? cuda_abi::StreamSmemBytes(k, cuda_abi::StreamSliceBytes(32, 34)) : 0;
}

int MatmulRowsPerWarp(const std::string& storage, int tile) {
  if (tile > cuda_abi::kMatmulPairTile) return cuda_abi::kMatmulTiledRowsPerWarp;
  // matmul_lanes.cuh's kRows: q6_K's lane holds 14 words per row (1 row), q8_0's 17 and q5_0/q5_1's 6 (2
  // rows, no spills), the others at most 8.
  // Storage names as WeightStorage::Name() spells them ("q6_K").
  if (storage == "q6_K") return 1;
  return storage == "q8_0" || storage == "q5_0" || storage == "q5_1" ? 2 : 4;
}

absl::StatusOr<std::string> StorageTemplate(const std::string& storage) {
  absl::StatusOr<cpu::WeightStorage> s = cpu::ParseWeightStorage(storage);
  if (!s.ok()) return s.status();
  if (s->grouped) {
    return absl::StrCat(*s->grouped == GroupedKind::kInt4 ? "kiln::StorageInt4<" : "kiln::StorageInt2<", s->group,
                        ">");
  }
  switch (s->ggml) {
    case GgmlType::kF32: return std::string("kiln::StorageF32");
    case GgmlType::kF16: return std::string("kiln::StorageF16");
    case GgmlType::kBF16: return std::string("kiln::StorageBF16");
    case GgmlType::kQ8_0: return std::string("kiln::StorageQ8_0");
    case GgmlType::kQ4_0: return std::string("kiln::StorageQ4_0");
    case GgmlType::kQ4_1: return std::string("kiln::StorageQ4_1");
    case GgmlType::kQ5_0: return std::string("kiln::StorageQ5_0");
    case GgmlType::kQ5_1: return std::string("kiln::StorageQ5_1");
    case GgmlType::kQ2_K: return std::string("kiln::StorageQ2_K");
    case GgmlType::kQ3_K: return std::string("kiln::StorageQ3_K");
    case GgmlType::kQ4_K: return std::string("kiln::StorageQ4_K");
    case GgmlType::kQ5_K: return std::string("kiln::StorageQ5_K");
    case GgmlType::kQ6_K: return std::string("kiln::StorageQ6_K");
    default: break;
  }
  return absl::InvalidArgumentError(absl::StrCat("storage '", storage, "' has no CUDA decoder"));
}

absl::StatusOr<std::vector<KernelCall>> LowerLaunch(const Plan& plan, const PlanLaunch& l) {
  const std::string& op = l.op;
  if (op == "fused_matmul") return LowerFusedMatmul(plan, l);
  if (op == "matmul") {
    absl::StatusOr<std::string> storage = WeightStorageOf(plan, l, "weight");
    if (!storage.ok()) return storage.status();
    absl::StatusOr<std::string> t = StorageTemplate(*storage);
    if (!t.ok()) return LaunchError(l, std::string(t.status().message()));
    return std::vector<KernelCall>{Matmul(*t, cuda_abi::kEpilogueNone, false, {0})};
  }
  if (op == "embedding") {
    absl::StatusOr<std::string> storage = WeightStorageOf(plan, l, "table");
    if (!storage.ok()) return storage.status();
    absl::StatusOr<std::string> t = StorageTemplate(*storage);
    if (!t.ok()) return LaunchError(l, std::string(t.status().message()));
    return std::vector<KernelCall>{Simple(KernelKind::kEmbedding, absl::StrCat("kiln::embedding_kernel<", *t, ">"))};
  }
  if (op == "rms_norm") return std::vector<KernelCall>{Simple(KernelKind::kRmsNorm, "kiln::rms_norm_kernel")};
  if (op == "bias_add" || op == "silu" || op == "mul" || op == "add") {
    KernelCall c = Simple(KernelKind::kElementwise, "kiln::elementwise_kernel");
    c.elementwise_op = op == "silu" ? cuda_abi::kSilu
                       : op == "mul" ? cuda_abi::kMul
                       : op == "add" ? cuda_abi::kAdd
                                     : cuda_abi::kBiasAdd;
    return std::vector<KernelCall>{c};
  }
  if (op == "gather_rows") return std::vector<KernelCall>{Simple(KernelKind::kGatherRows, "kiln::gather_rows_kernel")};
  if (op == "argmax") return std::vector<KernelCall>{Simple(KernelKind::kArgmax, "kiln::argmax_kernel")};
  if (op == "rope") return std::vector<KernelCall>{Simple(KernelKind::kRope, "kiln::rope_kernel")};
  if (op == "paged_attention") {
    // The pool's element type: the launch's kv_type where it has one, else the plan's.
    std::string kv_type = plan.pool.f16 ? "f16" : "f32";
    if (l.constants.Find("kv_type")) {
      absl::StatusOr<std::string> kv = l.String("kv_type");
      if (!kv.ok()) return kv.status();
      kv_type = *kv;
    }
    if (kv_type != "f32" && kv_type != "f16") {
      return LaunchError(l, "the CUDA backend keeps the KV cache in f32 or f16, not " + kv_type);
    }
    if ((kv_type == "f16") != plan.pool.f16) {
      return LaunchError(l, "kv_type " + kv_type + " differs from the page pool's");
    }
    const std::string kv = kv_type == "f16" ? "kiln::KvF16" : "kiln::KvF32";
    absl::StatusOr<int64_t> hd = l.Int("head_dim");
    if (!hd.ok()) return hd.status();
    if (*hd <= 0 || *hd > 256) return LaunchError(l, absl::StrCat("head_dim ", *hd, " is outside 1..256"));
    if (kv_type == "f16" && *hd % 4 != 0) return LaunchError(l, "an f16 KV cache needs head_dim a multiple of 4");
    std::vector<KernelCall> calls = {Simple(KernelKind::kKvAppend, absl::StrCat("kiln::kv_append_kernel<", kv, ">"))};
    // Tensor-core tiles for head dims the kernel's fragments cover.
    if (*hd % 16 == 0 && *hd <= 128) {
      calls.push_back(
          Simple(KernelKind::kAttentionPrefill, absl::StrCat("kiln::attention_prefill_kernel<", *hd, ", ", kv, ">")));
    }
    calls.push_back(Simple(KernelKind::kAttention, absl::StrCat("kiln::attention_kernel<", *hd, ", ", kv, ">")));
    absl::StatusOr<int64_t> heads = l.Int("num_heads");
    if (heads.ok() && *hd % 16 == 0 && *hd <= 128 && *heads % plan.pool.kv_heads == 0 &&
        *heads / plan.pool.kv_heads <= 16) {
      calls.push_back(
          Simple(KernelKind::kAttentionGroup, absl::StrCat("kiln::attention_group_kernel<", *hd, ", ", kv, ">")));
    }
    return calls;
  }
  return LaunchError(l, "the CUDA backend has no kernel for op '" + op + "'");
}

absl::StatusOr<std::vector<std::string>> PlanInstantiations(const Plan& plan) {
  // The executor's StepGreedy picks ids on the device with argmax_kernel
  // whether or not the plan has an argmax launch.
  std::vector<std::string> names = {kGreedyArgmaxKernel};
  std::set<std::string> seen = {kGreedyArgmaxKernel};
  for (const PlanLaunch& l : plan.launches) {
    absl::StatusOr<std::vector<KernelCall>> calls = LowerLaunch(plan, l);
    if (!calls.ok()) return calls.status();
    for (const KernelCall& c : *calls) {
      for (const std::string& n : c.names) {
        if (!n.empty() && seen.insert(n).second) names.push_back(n);
      }
    }
  }
  return names;
}

}  // namespace kiln::cuda
