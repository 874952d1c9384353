#include "runtime/vulkan/vulkan_kernels.h"

#include <algorithm>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/executor/launch_rope.h"
#include "runtime/formats/quant.h"

namespace kiln::vulkan {
namespace {

absl::Status Unsupported(const PlanLaunch& l, const std::string& why) {
  return absl::UnimplementedError(absl::StrCat("vulkan: launch '", l.kernel, "': ", why));
}

// Float constants as GLSL float literals that round-trip to the same f32.
std::string FloatLiteral(double v) { return absl::StrFormat("%.9e", v); }

class InstanceBuilder {
 public:
  InstanceBuilder(std::string name, int64_t wg) {
    k_.template_name = std::move(name);
    k_.workgroup_size = wg;
    Int("WG", wg);
  }
  InstanceBuilder& Int(const std::string& n, int64_t v) { return Set(n, absl::StrCat(v)); }
  InstanceBuilder& Float(const std::string& n, double v) { return Set(n, FloatLiteral(v)); }
  // Sets constant n, replacing an earlier value.
  InstanceBuilder& Set(const std::string& n, std::string v) {
    for (auto& [name, value] : k_.constants) {
      if (name == n) {
        value = std::move(v);
        return *this;
      }
    }
    k_.constants.emplace_back(n, std::move(v));
    return *this;
  }
  KernelInstance Build() const { return k_; }
  // Another template with this one's constants and its own workgroup size.
  InstanceBuilder Variant(std::string name, int64_t wg) const {
    InstanceBuilder v(std::move(name), wg);
    for (const auto& [n, value] : k_.constants) {
      if (n != "WG") v.Set(n, value);
    }
    return v;
  }

 private:
  KernelInstance k_;
};

struct Ctx {
  const Plan& plan;
  const PlanLaunch& l;
  size_t index;  // l is plan.launches[index]

  const PlanBinding* Arena(const std::string& role) const {
    const PlanBinding* b = l.Find(role);
    return b != nullptr && b->kind == PlanBinding::Kind::kArena ? b : nullptr;
  }
  const PlanWeight* Weight(const std::string& role) const {
    const PlanBinding* b = l.Find(role);
    if (b == nullptr || b->kind != PlanBinding::Kind::kWeight) return nullptr;
    return plan.FindWeight(b->name);
  }
};

int64_t Rows(const PlanWeight& w) { return w.shape.size() == 2 ? w.shape[0] : 1; }
int64_t Cols(const PlanWeight& w) { return w.shape.back(); }

absl::StatusOr<RopeTable> RopeOf(const PlanLaunch& l) {
  absl::StatusOr<cpu::RopeParams> rope = LaunchRope(l);
  if (!rope.ok()) return Unsupported(l, std::string(rope.status().message()));
  return RopeTable{rope->theta, rope->dims, rope->linear_factor};
}

absl::Status AddRopeConstants(const PlanLaunch& l, int64_t head_dim, InstanceBuilder& b, PlannedDispatch& d) {
  absl::StatusOr<RopeTable> rope = RopeOf(l);
  if (!rope.ok()) return rope.status();
  absl::StatusOr<std::string> style = l.String("rope_style");  // checked by LaunchRope
  if (!style.ok()) return style.status();
  if (rope->dims > head_dim) return Unsupported(l, "rope dims exceed head_dim");
  b.Int("ROPE_DIMS", rope->dims).Int("ROPE_STYLE", *style == "half" ? 1 : 0);
  d.uses_rope_table = true;
  d.rope = *rope;
  return absl::OkStatus();
}

// The paged_attention launch right after a q, k, v matmul (c.l) that reads
// that matmul's k and v, or null.
const PlanLaunch* AttentionOfKv(const Ctx& c) {
  if (c.index + 1 >= c.plan.launches.size() || c.plan.launches[c.index + 1].op != "paged_attention") return nullptr;
  const PlanLaunch& next = c.plan.launches[c.index + 1];
  auto same = [&](const char* read, const char* written) {
    const PlanBinding *r = next.Find(read), *w = c.l.Find(written);
    return r != nullptr && w != nullptr && r->kind == PlanBinding::Kind::kArena &&
           w->kind == PlanBinding::Kind::kArena && r->arena == w->arena;
  };
  return same("k", "result1") && same("v", "result2") ? &next : nullptr;
}

// Where a q, k, v matmul's decode variants can append k and v to the pages
// themselves (matmul_decode.comp's APPEND_KV): the attention after it reads
// them, its rotation (if any) takes interleaved pairs, and every weight's
// rows are whole groups of the variants' R rows a subgroup (so a subgroup's
// rows hold whole pairs of one weight). Then d skips the layer's kv_append
// in decode-sized steps; else the decode variants stay as they are.
void AddKvAppend(const Ctx& c, const std::vector<const PlanWeight*>& ws, int64_t rows, PlannedDispatch& d,
                 const std::vector<InstanceBuilder*>& variants) {
  const PlanLaunch* a = AttentionOfKv(c);
  if (a == nullptr || ws.size() != 3 || rows % 2 != 0) return;
  for (const PlanWeight* w : ws) {
    if (Rows(*w) % rows != 0) return;
  }
  const PlanPagePool& pool = c.plan.pool;
  absl::StatusOr<int64_t> kv_heads = a->Int("num_kv_heads"), head_dim = a->Int("head_dim"), layer = a->Int("layer");
  if (!kv_heads.ok() || !head_dim.ok() || !layer.ok()) return;  // Attention() says why
  if (*kv_heads != pool.kv_heads || *head_dim != pool.head_dim || *head_dim % 2 != 0 || *layer < 0 ||
      *layer >= pool.layers || Rows(*ws[1]) != *kv_heads * *head_dim || Rows(*ws[2]) != Rows(*ws[1])) {
    return;
  }
  const bool rope = a->constants.Find("rope_theta") != nullptr;
  std::optional<RopeTable> table;
  if (rope) {
    absl::StatusOr<std::string> style = a->String("rope_style");
    absl::StatusOr<RopeTable> t = RopeOf(*a);
    if (!style.ok() || !t.ok() || *style == "half" || t->dims % 2 != 0 || t->dims > *head_dim) return;
    table = *t;
  }
  for (InstanceBuilder* v : variants) {
    v->Int("APPEND_KV", 1).Int("NUM_KV_HEADS", *kv_heads).Int("HEAD_DIM", *head_dim).Int("PAGE_SIZE", pool.page_size);
    v->Int("KV_F16", pool.f16 ? 1 : 0).Int("HAS_ROPE", rope ? 1 : 0);
    if (table) v->Int("ROPE_DIMS", table->dims).Int("ROPE_STYLE", 0);
  }
  d.appends_kv_layer = *layer;
  if (table) {
    d.appends_kv_rope = true;
    d.rope = *table;
  }
}

void AddWeightSlot(InstanceBuilder& b, int slot, const PlanWeight& w) {
  b.Set(absl::StrCat("W", slot), w.storage).Int(absl::StrCat("W", slot, "_COLS"), Cols(w));
}

absl::StatusOr<std::vector<PlannedDispatch>> Matmul(const Ctx& c) {
  const PlanLaunch& l = c.l;
  const bool fused = l.op == "fused_matmul";
  std::string epilogue = "none";
  if (fused) {
    absl::StatusOr<std::string> e = l.String("epilogue");
    if (!e.ok()) return e.status();
    epilogue = *e;
  }
  std::vector<const PlanWeight*> ws;
  if (fused) {
    for (int i = 0;; ++i) {
      const PlanWeight* w = c.Weight(absl::StrCat("weight", i));
      if (w == nullptr) break;
      ws.push_back(w);
    }
  } else if (const PlanWeight* w = c.Weight("weight")) {
    ws.push_back(w);
  }
  if (ws.empty()) return Unsupported(l, "has no weights");
  const int64_t k = Cols(*ws[0]);
  for (const PlanWeight* w : ws) {
    if (w->shape.size() != 2 || Cols(*w) != k) return Unsupported(l, "weights must be matrices of the same width");
  }
  const int epi = epilogue == "none" ? 0 : epilogue == "silu_mul" ? 1 : epilogue == "residual_add" ? 2 : -1;
  if (epi < 0) return Unsupported(l, "unknown epilogue " + epilogue);
  if (epi == 0 && ws.size() > 3) return Unsupported(l, "the Vulkan matmul takes at most three weights");
  if (epi == 1 && (ws.size() != 2 || Rows(*ws[0]) != Rows(*ws[1]))) {
    return Unsupported(l, "silu_mul needs two weights of the same shape");
  }
  if (epi == 2 && ws.size() != 1) return Unsupported(l, "residual_add takes one weight");
  const PlanWeight* norm = fused ? c.Weight("norm") : nullptr;
  if (!c.Arena("input")) return Unsupported(l, "needs an arena input");

  // Small buckets: 8 tokens x 2 columns per workgroup reuse each decoded
  // weight 8 times; decode (at most 2 tokens): below; prefill
  // (64 tokens and up): 64 x 64 tiles through shared memory, 16 k at a time
  // (12.5 KB of shared memory with silu_mul, under Vulkan's 16 KB minimum).
  constexpr int64_t kTokensPerGroup = 8, kColumnsPerGroup = 2, kDecodeMaxBucket = 2;
  constexpr int64_t kTileTokens = 64, kTileColumns = 64, kTileK = 16, kTiledMinBucket = 64;
  InstanceBuilder b("matmul", 64);
  b.Int("K", k).Int("NUM_W", static_cast<int64_t>(ws.size()));
  int64_t columns = 0;
  for (size_t i = 0; i < 3; ++i) {
    const int64_t n = i < ws.size() ? Rows(*ws[i]) : 0;
    b.Int(absl::StrCat("N", i), n);
    if (epi == 0 || i == 0) columns += n;
  }
  b.Int("EPILOGUE", epi).Int("HAS_NORM", norm ? 1 : 0);
  // Every weight q4_K: matmul.comp's 32-element lane steps (no K tail: a
  // q4_K row is whole 256-element blocks).
  bool all_q4k = true;
  for (const PlanWeight* w : ws) {
    const std::optional<StorageName> storage = ParseStorageName(w->storage);
    all_q4k = all_q4k && storage && !storage->grouped && storage->ggml == GgmlType::kQ4_K;
  }
  b.Int("Q4K_LANES", all_q4k ? 1 : 0);
  PlannedDispatch d;
  double eps = 0;
  if (norm) {
    absl::StatusOr<double> e = l.Float("eps");
    if (!e.ok()) return e.status();
    if (Cols(*norm) != k) return Unsupported(l, "norm gain width differs from the weights'");
    eps = *e;
    b.Float("EPS", eps);
    d.vector_weight = norm->name;
  }
  // The decode variant (matmul_decode.comp): R = 4 rows a subgroup (R = 1,
  // 2 and two lane steps' loads at once measured slower on the H200 before
  // the int8 staging, docs/perf/vulkan-h200.md), at most 4 workgroups an SM (2-16 measured
  // alike); the token's activations staged in at most 30 KB of shared memory
  // (lavapipe has 32, the H200's driver 48): f32 up to 7168 elements, f16
  // past that, 15360 at a time.
  constexpr int64_t kDecodeStagedF32 = 7168, kDecodeStagedF16 = 15360;
  constexpr int64_t kDecodeWorkgroup = 256, kDecodeGroupsPerUnit = 4;
  // silu_mul's two weights: R = 2 (gate/up 32.5 -> 31.4 us a layer on the
  // H200, session 20).
  const int64_t decode_rows = epi == 1 ? 2 : 4;
  // K slices (KS subgroups share R rows, each every KS-th lane step) where a
  // launch's rows would leave subgroups of 4 workgroups on each of an H200's
  // 132 SMs idle and each would walk K in several dependent lane steps: o
  // (KS 4) and qkv (KS 2), decode +4.6% on an H100 (docs/perf/vulkan-h200.md,
  // session 38). Not down (K = 14336): it lost with them in session 19.
  // Slices are counted in lane steps of `step` elements: q4_K on DP4 takes
  // 64 a step (o and qkv then KS 2: decode +3.6% on an H100 against 32 a
  // step and o at KS 4, session 40), other storages 32 or fewer.
  const int64_t row_slots = 132 * kDecodeGroupsPerUnit * (kDecodeWorkgroup / 32) * decode_rows;
  auto k_slices = [&](int64_t step) {
    int64_t ks = 1;
    while (epi != 1 && k <= 8192 && ks < 8 && columns * ks * 2 <= row_slots && k / (step * 32) >= ks * 2) ks *= 2;
    return ks;
  };
  const int64_t ks = k_slices(32), ks_dp4 = k_slices(64);
  InstanceBuilder decode = b.Variant("matmul_decode", kDecodeWorkgroup);
  decode.Int("R", decode_rows);
  // q4_K on integer dot products: int8 codes, a scale, a sum and an offset
  // per 32 (22 KB for 16384 elements).
  constexpr int64_t kDecodeStagedInt8 = 16384;
  std::optional<InstanceBuilder> decode_dp4;
  if (all_q4k) {
    decode_dp4 = decode;
    decode_dp4->Int("KS", ks_dp4).Int("DP4", 1).Int("XF16", 0).Int("XCHUNK", std::min(k, kDecodeStagedInt8));
  }
  decode.Int("KS", ks);
  decode.Int("DP4", 0).Int("XF16", k > kDecodeStagedF32 ? 1 : 0);
  decode.Int("XCHUNK", k <= kDecodeStagedF16 ? (k + 7) / 8 * 8 : kDecodeStagedF16);
  // The tiled variant: the same constants, its own workgroup size (one
  // thread per 4 x 4 outputs of the tile).
  InstanceBuilder tiled = b.Variant("matmul_tiled", kTileTokens * kTileColumns / 16);
  // The tensor-core tiled variant: 64 tokens x 128 columns, 32 k a step.
  constexpr int64_t kCoopTokens = 64, kCoopColumns = 128, kCoopK = 32, kCoopWorkgroup = 256, kCopyWorkgroup = 256;
  InstanceBuilder coopmat = b.Variant("matmul_coopmat", kCoopWorkgroup);
  coopmat.Int("BM", kCoopTokens).Int("BN", kCoopColumns).Int("BK", kCoopK).Int("F16W", 0);
  b.Int("TT", kTokensPerGroup).Int("COLS", kColumnsPerGroup);
  tiled.Int("BM", kTileTokens).Int("BN", kTileColumns).Int("BK", kTileK);
  for (size_t i = 0; i < ws.size(); ++i) {
    AddWeightSlot(b, static_cast<int>(i), *ws[i]);
    AddWeightSlot(decode, static_cast<int>(i), *ws[i]);
    if (decode_dp4) AddWeightSlot(*decode_dp4, static_cast<int>(i), *ws[i]);
    AddWeightSlot(tiled, static_cast<int>(i), *ws[i]);
    AddWeightSlot(coopmat, static_cast<int>(i), *ws[i]);
    d.weights[i] = ws[i]->name;
  }
  std::vector<InstanceBuilder*> decode_variants = {&decode};
  if (decode_dp4) decode_variants.push_back(&*decode_dp4);
  AddKvAppend(c, ws, decode_rows, d, decode_variants);
  d.kernel = b.Build();
  d.decode_kernel = decode.Build();
  if (decode_dp4) d.decode_dp4_kernel = decode_dp4->Build();
  d.decode_max_bucket = kDecodeMaxBucket;
  // Rows a workgroup covers where subgroups are 32 wide (the kernel takes any
  // width: narrower ones cover more, wider ones take more rounds).
  d.decode_columns_per_group = decode_rows * kDecodeWorkgroup / 32 / ks;
  d.decode_dp4_columns_per_group = decode_rows * kDecodeWorkgroup / 32 / ks_dp4;
  d.decode_groups_per_unit = kDecodeGroupsPerUnit;
  d.tiled_kernel = tiled.Build();
  d.tiled_min_bucket = kTiledMinBucket;
  d.tiled_tokens_per_group = kTileTokens;
  d.tiled_columns_per_group = kTileColumns;
  d.coopmat_kernel = coopmat.Build();
  d.coopmat_tokens_per_group = kCoopTokens;
  d.coopmat_columns_per_group = kCoopColumns;
  if (k % 8 == 0) {
    // The same on f16 rows (16-byte words): the executor's f16 copy of the
    // weights, or f16 weights themselves.
    // silu_mul's 512 threads: a subgroup per weight's 32 x 32 (SPLIT), 4
    // accumulators a subgroup instead of 8, twice the warps an SM.
    InstanceBuilder f16 = epi == 1 ? coopmat.Variant("matmul_coopmat", 2 * kCoopWorkgroup) : coopmat;
    f16.Int("Q4K_LANES", 0).Int("F16W", 1);
    if (epi == 1) f16.Int("SPLIT", 1);
    for (size_t i = 0; i < ws.size(); ++i) {
      f16.Set(absl::StrCat("W", i), "f16");
      const std::optional<StorageName> storage = ParseStorageName(ws[i]->storage);
      if (storage && !storage->grouped && storage->ggml == GgmlType::kF16) continue;  // read in place
      InstanceBuilder copy("dequant_f16", kCopyWorkgroup);
      copy.Int("K", k);
      AddWeightSlot(copy, 0, *ws[i]);
      d.f16_copy_kernels[i] = copy.Build();
    }
    d.coopmat_f16_kernel = f16.Build();
    // On workgroup-scope cooperative matrices (matmul_coopmat2.comp) after
    // activations_f16.comp, in two tile sizes: 128 tokens x 256 columns (the
    // fastest tile of the H200 probe) and 64 x 128, which the executor picks
    // by the bucket's waves of each (and runs as a large launch's tail); 32 k
    // a step. silu_mul's gate and up run as two weights to two outputs
    // (EPILOGUE 0), then elementwise's silu_mul. A column tile must lie in
    // one weight.
    constexpr int64_t kCm2Tokens = 128, kCm2Columns = 256, kCm2K = 32, kCm2Workgroup = 256, kCm2KSlices = 2;
    constexpr int64_t kActivationsWorkgroup = 256, kSiluWorkgroup = 256;
    bool tiles_fit = true;
    for (size_t i = 0; i + 1 < ws.size(); ++i) tiles_fit = tiles_fit && Rows(*ws[i]) % kCm2Columns == 0;
    if (tiles_fit) {
      InstanceBuilder cm2 = coopmat.Variant("matmul_coopmat2", kCm2Workgroup);
      cm2.Int("Q4K_LANES", 0).Int("BM", kCm2Tokens).Int("BN", kCm2Columns).Int("BK", kCm2K).Int("F16W", 1);
      if (epi == 1) cm2.Int("EPILOGUE", 0);
      for (size_t i = 0; i < ws.size(); ++i) cm2.Set(absl::StrCat("W", i), "f16");
      d.coopmat2_kernel = cm2.Build();
      d.coopmat2_tokens_per_group = kCm2Tokens;
      d.coopmat2_columns_per_group = kCm2Columns;
      d.coopmat2_columns = epi == 1 ? 2 * columns : columns;
      cm2.Int("BM", kCm2Tokens / 2).Int("BN", kCm2Columns / 2);
      d.coopmat2_small_kernel = cm2.Build();
      InstanceBuilder act("activations_f16", kActivationsWorkgroup);
      act.Int("K", k).Int("HAS_NORM", norm ? 1 : 0);
      d.activations_f16_kernel = act.Build();
      if (epi == 1) {
        d.silu_mul_kernel = InstanceBuilder("elementwise", kSiluWorkgroup).Int("OP", 4).Int("WIDTH", columns).Build();
      }
      if (epi == 2) {
        // K in kCm2KSlices slices of whole unrolled runs (the large tile's
        // instance per slice), then split_sum.
        constexpr int64_t kRun = 8 * kCm2K;
        const int64_t per_slice = (k / kCm2KSlices + kRun - 1) / kRun * kRun;
        cm2.Int("BM", kCm2Tokens).Int("BN", kCm2Columns).Int("K_SLICES", kCm2KSlices);
        for (int64_t slice = 0; slice < kCm2KSlices; ++slice) {
          const int64_t begin = std::min(k, slice * per_slice), end = std::min(k, begin + per_slice);
          cm2.Int("K_SLICE", slice).Int("K_BEGIN", begin).Int("K_END", end);
          d.coopmat2_slice_kernels.push_back(cm2.Build());
        }
        d.split_sum_kernel = InstanceBuilder("elementwise", kSiluWorkgroup).Int("OP", 5).Int("WIDTH", columns).Build();
      }
    }
  }
  d.inputs[0] = {"input", k};
  if (epi == 2) {
    if (!c.Arena("residual")) return Unsupported(l, "residual_add needs a residual");
    d.inputs[1] = {"residual", Rows(*ws[0])};
  }
  const size_t results = epi == 0 ? ws.size() : 1;
  for (size_t i = 0; i < results; ++i) {
    const std::string role = fused ? absl::StrCat("result", i) : "result";
    if (!c.Arena(role)) return Unsupported(l, "missing " + role);
    d.outputs[i] = {role, Rows(*ws[i])};
  }
  d.shape.kind = LaunchShape::Kind::kMatmul;
  d.shape.columns = columns;
  d.shape.tokens_per_group = kTokensPerGroup;
  d.shape.columns_per_group = kColumnsPerGroup;
  if (!norm) return std::vector<PlannedDispatch>{d};
  // The tiled variants' 1 / rms per token, once per launch: each of their
  // workgroups summed its 64 tokens' whole rows (1 MB from L2 for K = 4096),
  // and gate/up's 896 workgroups in a 512-token step did so 112 times a
  // token. A subgroup a token, as they did (the same sums, in the same order).
  static_assert(kDecodeMaxBucket < kTiledMinBucket, "row_rms runs where the tiled variant does");
  constexpr int64_t kRowRmsWorkgroup = 256;
  PlannedDispatch rms;
  InstanceBuilder rb("row_rms", kRowRmsWorkgroup);
  rb.Int("K", k).Float("EPS", eps);
  rms.kernel = rb.Build();
  rms.inputs[0] = {"input", k};
  rms.outputs[0] = {kRowRmsRole, 1};
  rms.shape.kind = LaunchShape::Kind::kStride;
  rms.shape.items_per_token = 32;
  rms.only_when_tiled = true;
  rms.tiled_min_bucket = kTiledMinBucket;
  d.reads_row_rms = true;
  return std::vector<PlannedDispatch>{rms, d};
}

absl::StatusOr<std::vector<PlannedDispatch>> Attention(const Ctx& c) {
  const PlanLaunch& l = c.l;
  const Plan& p = c.plan;
  absl::StatusOr<int64_t> heads = l.Int("num_heads");
  absl::StatusOr<int64_t> head_dim = l.Int("head_dim");
  if (!heads.ok()) return heads.status();
  if (!head_dim.ok()) return head_dim.status();
  if (l.op == "rope") {
    if (!c.Arena("input") || !c.Arena("result")) return Unsupported(l, "needs input and result");
    InstanceBuilder b("rope", 64);
    b.Int("NUM_HEADS", *heads).Int("HEAD_DIM", *head_dim);
    PlannedDispatch d;
    if (absl::Status s = AddRopeConstants(l, *head_dim, b, d); !s.ok()) return s;
    d.kernel = b.Build();
    d.inputs[0] = {"input", *heads * *head_dim};
    d.outputs[0] = {"result", *heads * *head_dim};
    d.shape.items_per_token = *heads * (*head_dim - d.rope.dims / 2);
    return std::vector<PlannedDispatch>{d};
  }
  absl::StatusOr<int64_t> kv_heads = l.Int("num_kv_heads");
  absl::StatusOr<int64_t> layer = l.Int("layer");
  absl::StatusOr<double> scale = l.Float("scale");
  if (!kv_heads.ok()) return kv_heads.status();
  if (!layer.ok()) return layer.status();
  if (!scale.ok()) return scale.status();
  // The launch's kv_type (where it has one) is the pool's: f32, or f16 for
  // head dims of multiples of 4 (read four halves at a time).
  absl::StatusOr<std::string> kv_type =
      l.constants.Find("kv_type") ? l.String("kv_type") : std::string(p.pool.f16 ? "f16" : "f32");
  if (!kv_type.ok()) return kv_type.status();
  if (*kv_type != (p.pool.f16 ? "f16" : "f32"))
    return Unsupported(l, "kv_type " + *kv_type + " is not the page pool's");
  if (p.pool.f16 && *head_dim % 4 != 0) return Unsupported(l, "an f16 KV cache needs head_dim a multiple of 4");
  const int64_t kv_f16 = p.pool.f16 ? 1 : 0;
  if (*kv_heads != p.pool.kv_heads || *head_dim != p.pool.head_dim || *layer < 0 || *layer >= p.pool.layers ||
      *kv_heads <= 0 || *heads % *kv_heads != 0) {
    return Unsupported(l, "heads, head_dim or layer disagree with the page pool");
  }
  if (!c.Arena("q") || !c.Arena("k") || !c.Arena("v") || !c.Arena("result")) {
    return Unsupported(l, "needs q, k, v and result");
  }
  const bool rope = l.constants.Find("rope_theta") != nullptr;
  const int64_t kv_w = *kv_heads * *head_dim, q_w = *heads * *head_dim;

  InstanceBuilder append("kv_append", 64);
  append.Int("NUM_KV_HEADS", *kv_heads).Int("HEAD_DIM", *head_dim).Int("PAGE_SIZE", p.pool.page_size);
  append.Int("HAS_ROPE", rope ? 1 : 0).Int("KV_F16", kv_f16);
  PlannedDispatch a;
  if (rope) {
    if (absl::Status s = AddRopeConstants(l, *head_dim, append, a); !s.ok()) return s;
  }
  a.kernel = append.Build();
  a.layer = *layer;
  a.inputs = {ArenaOperand{"k", kv_w}, ArenaOperand{"v", kv_w}};
  a.shape.items_per_token = kv_f16 ? kv_w / 2 : kv_w;

  // A workgroup per (KV head, token, split): a thread per (query head, slice
  // of VEC dims) of the KV head's group, in whole subgroups of 32 up to 256
  // (larger groups take several outputs a thread); TILE positions a step.
  const int64_t group = *heads / *kv_heads, vec = *head_dim % 4 == 0 ? 4 : 1;
  const int64_t outs = group * (*head_dim / vec);
  const int64_t wg = std::clamp<int64_t>((outs + 31) / 32 * 32, 32, 256);
  constexpr int64_t kAttentionTile = 32;
  InstanceBuilder attend("paged_attention", wg);
  attend.Int("NUM_HEADS", *heads).Int("NUM_KV_HEADS", *kv_heads).Int("HEAD_DIM", *head_dim);
  attend.Int("PAGE_SIZE", p.pool.page_size).Float("SCALE", *scale).Int("HAS_ROPE", rope ? 1 : 0).Int("USES_PARTIALS", 1);
  attend.Int("VEC", vec).Int("KV_F16", kv_f16).Int("TILE", kAttentionTile);
  PlannedDispatch d;
  if (rope) {
    if (absl::Status s = AddRopeConstants(l, *head_dim, attend, d); !s.ok()) return s;
  }
  d.kernel = attend.Build();
  // Split steps: the same with the combine folded in (its own merge).
  d.fold_kernel = InstanceBuilder(attend).Int("FOLD", 1).Int("MAX_SPLITS", kMaxAttentionSplits).Build();
  // Prefill-sized steps: 32 query rows (QT tokens x the group's heads) a
  // workgroup over K and V tiles of kPrefillTile rows in shared memory
  // (16 KB at most: lavapipe has 32 KB), LPR lanes a row.
  constexpr int64_t kPrefillTile = 16;
  if (*head_dim % 8 == 0 && group <= 32 && 2 * kPrefillTile * *head_dim * 4 <= 16384) {
    int64_t lanes = 8;
    while ((*head_dim / 4) % lanes != 0) lanes /= 2;
    const int64_t qt = 32 / group;
    InstanceBuilder prefill("paged_attention_prefill", (qt * group * lanes + 31) / 32 * 32);
    prefill.Int("NUM_HEADS", *heads).Int("NUM_KV_HEADS", *kv_heads).Int("HEAD_DIM", *head_dim);
    prefill.Int("PAGE_SIZE", p.pool.page_size).Float("SCALE", *scale).Int("HAS_ROPE", rope ? 1 : 0);
    prefill.Int("USES_PARTIALS", 1).Int("QT", qt).Int("LPR", lanes).Int("KT", kPrefillTile).Int("KV_F16", kv_f16);
    if (rope) {  // the same table as `attend`'s, set on d again
      if (absl::Status s = AddRopeConstants(l, *head_dim, prefill, d); !s.ok()) return s;
    }
    d.prefill_kernel = prefill.Build();
    d.prefill_tokens_per_group = qt;
    d.prefill_lanes = lanes;
  }
  // The same on workgroup-scope tensor cores: 64 query rows (QT tokens x the
  // group's heads) a workgroup over tiles of 32 positions, 256 threads (on
  // an H100, prefill 512 +2% against 128; 64-position tiles -0.5%;
  // docs/perf/vulkan-h200.md, session 48), 128 where head_dim is not a
  // multiple of 32 (NVIDIA's driver wants a 256-thread workgroup's matrix
  // sides in multiples of 32: head_dim 16 gave NaNs); Q and one K and V tile
  // in f16 in shared memory, at most 32 KB (24 KB at head_dim 128; the
  // driver keeps some of the 48 KB a workgroup may have for its own staging).
  constexpr int64_t kCoopmat2Rows = 64, kCoopmat2Tile = 32;
  const int64_t cm2_threads = *head_dim % 32 == 0 ? 256 : 128;
  if (*head_dim % 16 == 0 && (std::max(kCoopmat2Rows, kCoopmat2Tile) + kCoopmat2Tile) * *head_dim * 2 <= 32768 &&
      kCoopmat2Rows % group == 0) {
    InstanceBuilder cm2("paged_attention_coopmat2", cm2_threads);
    cm2.Int("NUM_HEADS", *heads).Int("NUM_KV_HEADS", *kv_heads).Int("HEAD_DIM", *head_dim);
    cm2.Int("PAGE_SIZE", p.pool.page_size).Float("SCALE", *scale).Int("HAS_ROPE", rope ? 1 : 0);
    cm2.Int("BR", kCoopmat2Rows).Int("BC", kCoopmat2Tile).Int("KV_F16", kv_f16);
    if (rope) {
      if (absl::Status s = AddRopeConstants(l, *head_dim, cm2, d); !s.ok()) return s;
    }
    d.coopmat2_prefill_kernel = cm2.Build();
    d.coopmat2_prefill_tokens_per_group = kCoopmat2Rows / group;
  }
  d.layer = *layer;
  d.inputs[0] = {"q", q_w};
  d.outputs[0] = {"result", q_w};
  d.shape.kind = LaunchShape::Kind::kPerHeadToken;
  d.shape.heads = *heads;
  d.shape.heads_per_group = group;
  d.uses_partials = true;

  PlannedDispatch combine;
  combine.kernel = InstanceBuilder("attention_combine", 64)
                       .Int("NUM_HEADS", *heads)
                       .Int("HEAD_DIM", *head_dim)
                       .Int("TILE", kAttentionTile)
                       .Int("USES_PARTIALS", 1)
                       .Build();
  combine.outputs[0] = {"result", q_w};
  combine.shape.items_per_token = q_w;
  combine.uses_partials = true;
  combine.only_when_split = true;
  return std::vector<PlannedDispatch>{a, d, combine};
}

absl::StatusOr<std::vector<PlannedDispatch>> OneLaunch(const Ctx& c) {
  const PlanLaunch& l = c.l;
  const std::string& op = l.op;
  if (op == "matmul" || op == "fused_matmul") return Matmul(c);
  if (op == "rope" || op == "paged_attention") return Attention(c);
  PlannedDispatch d;
  if (op == "embedding") {
    const PlanWeight* table = c.Weight("table");
    if (!table || table->shape.size() != 2 || !c.Arena("result")) return Unsupported(l, "needs table and result");
    InstanceBuilder b("embedding", 64);
    b.Int("WIDTH", Cols(*table));
    AddWeightSlot(b, 0, *table);
    d.kernel = b.Build();
    d.weights[0] = table->name;
    d.outputs[0] = {"result", Cols(*table)};
    d.shape.items_per_token = Cols(*table);
    return std::vector<PlannedDispatch>{d};
  }
  if (op == "rms_norm") {
    const PlanWeight* gamma = c.Weight("gamma");
    absl::StatusOr<double> eps = l.Float("eps");
    if (!gamma || !c.Arena("input") || !c.Arena("result") || !eps.ok()) {
      return Unsupported(l, "needs input, gamma, result and eps");
    }
    d.kernel = InstanceBuilder("rms_norm", 64).Int("WIDTH", Cols(*gamma)).Float("EPS", *eps).Build();
    d.vector_weight = gamma->name;
    d.inputs[0] = {"input", Cols(*gamma)};
    d.outputs[0] = {"result", Cols(*gamma)};
    d.shape.kind = LaunchShape::Kind::kPerRow;
    return std::vector<PlannedDispatch>{d};
  }
  if (op == "bias_add" || op == "silu" || op == "mul" || op == "add") {
    int64_t width = 0;
    int op_code = 0;
    if (op == "bias_add") {
      const PlanWeight* bias = c.Weight("bias");
      if (!bias || !c.Arena("input")) return Unsupported(l, "needs input and bias");
      width = Cols(*bias);
      op_code = 3;
      d.vector_weight = bias->name;
      d.inputs[0] = {"input", width};
    } else {
      absl::StatusOr<int64_t> w = l.Int("width");
      if (!w.ok()) return w.status();
      width = *w;
      op_code = op == "silu" ? 0 : op == "mul" ? 1 : 2;
      if (op == "silu") {
        if (!c.Arena("input")) return Unsupported(l, "needs input");
        d.inputs[0] = {"input", width};
      } else {
        if (!c.Arena("lhs") || !c.Arena("rhs")) return Unsupported(l, "needs lhs and rhs");
        d.inputs = {ArenaOperand{"lhs", width}, ArenaOperand{"rhs", width}};
      }
    }
    if (!c.Arena("result")) return Unsupported(l, "needs result");
    d.kernel = InstanceBuilder("elementwise", 64).Int("OP", op_code).Int("WIDTH", width).Build();
    d.outputs[0] = {"result", width};
    d.shape.items_per_token = width;
    return std::vector<PlannedDispatch>{d};
  }
  if (op == "gather_rows" || op == "argmax") {
    absl::StatusOr<int64_t> width = l.Int("width");
    if (!width.ok()) return width.status();
    if (!c.Arena("input") || !c.Arena("result")) return Unsupported(l, "needs input and result");
    d.kernel = InstanceBuilder(op, 64).Int("WIDTH", *width).Build();
    d.inputs[0] = {"input", *width};
    d.outputs[0] = {"result", op == "argmax" ? 1 : *width};
    if (op == "argmax") {
      d.shape.kind = LaunchShape::Kind::kPerRow;
    } else {
      d.shape.items_per_token = *width;
    }
    return std::vector<PlannedDispatch>{d};
  }
  return Unsupported(l, "kiln has no Vulkan kernel for op '" + op + "'");
}

}  // namespace

int64_t AttentionSplits(int64_t bucket, int64_t max_splits) {
  return bucket >= max_splits ? 1 : max_splits / std::max<int64_t>(bucket, 1);
}

std::string KernelInstance::ConstantsText() const {
  std::vector<std::string> parts;
  for (const auto& [name, value] : constants) parts.push_back(absl::StrCat(name, "=", value));
  return absl::StrJoin(parts, " ");
}

std::string KernelInstance::Key() const { return absl::StrCat(template_name, " ", ConstantsText()); }

absl::StatusOr<std::vector<std::vector<PlannedDispatch>>> PlanDispatches(const Plan& plan) {
  std::vector<std::vector<PlannedDispatch>> out;
  for (size_t i = 0; i < plan.launches.size(); ++i) {
    absl::StatusOr<std::vector<PlannedDispatch>> d = OneLaunch(Ctx{plan, plan.launches[i], i});
    if (!d.ok()) return d.status();
    out.push_back(*std::move(d));
  }
  return out;
}

namespace {
int64_t VocabWidth(const Plan& plan) {
  const JsonValue* vocab = plan.model.Find("n_vocab");
  return vocab != nullptr && vocab->int_value() ? *vocab->int_value() : 0;
}
}  // namespace

PlannedDispatch CopyLogitsDispatch(const Plan& plan) {
  const int64_t width = VocabWidth(plan);
  PlannedDispatch d;
  d.kernel = InstanceBuilder("copy_logits", 64).Int("WIDTH", width).Build();
  d.inputs[0] = {"", width};  // the plan's result, not a launch binding
  d.shape.items_per_token = width;
  return d;
}

PlannedDispatch GreedyIdsDispatch(const Plan& plan) {
  const int64_t width = VocabWidth(plan);
  PlannedDispatch d;
  // A workgroup per row: 1024 threads, so that one row's scan (128256
  // logits for Llama 3) has many loads in flight.
  d.kernel = InstanceBuilder("argmax", 1024).Int("WIDTH", width).Int("TO_HOST", 1).Build();
  d.inputs[0] = {"", width};
  d.shape.kind = LaunchShape::Kind::kPerRow;
  return d;
}

std::vector<std::vector<bool>> RowsAreLogitRows(const Plan& plan) {
  std::vector<std::vector<bool>> out(plan.launches.size(), std::vector<bool>(plan.buckets.size(), false));
  for (size_t b = 0; b < plan.buckets.size(); ++b) {
    std::map<int64_t, bool> logit_rows_at;  // arena offset -> written with R rows
    for (size_t i = 0; i < plan.launches.size(); ++i) {
      const PlanLaunch& l = plan.launches[i];
      bool r = false;
      if (l.op == "gather_rows") {
        r = true;
      } else if (l.op != "embedding" && l.op != "rope" && l.op != "paged_attention") {
        const PlanBinding* in = l.Find("input");
        if (in == nullptr) in = l.Find("lhs");
        if (in != nullptr && in->kind == PlanBinding::Kind::kArena) {
          auto it = logit_rows_at.find(in->arena[b]);
          r = it != logit_rows_at.end() && it->second;
          out[i][b] = r;
        }
      }
      for (const PlanBinding& binding : l.bindings) {
        if (binding.kind == PlanBinding::Kind::kArena && absl::StartsWith(binding.role, "result")) {
          logit_rows_at[binding.arena[b]] = r;
        }
      }
    }
  }
  return out;
}

}  // namespace kiln::vulkan
