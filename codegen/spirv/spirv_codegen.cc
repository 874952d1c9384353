#include "codegen/spirv/spirv_codegen.h"

#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "codegen/spirv/glslang_next.h"
#include "codegen/spirv/spirv_templates.h"
#include "codegen/template_dir.h"
#include "glslang/Public/ResourceLimits.h"
#include "glslang/Public/ShaderLang.h"
#include "glslang/SPIRV/GlslangToSpv.h"
#include "runtime/cpu/weight_storage.h"
#include "runtime/vulkan/vulkan_bundle.h"
#include "spirv-tools/libspirv.hpp"
#include "spirv-tools/optimizer.hpp"

namespace kiln::codegen::spirv {
namespace {

using vulkan::KernelInstance;

absl::Status InstanceError(const KernelInstance& k, const std::string& what) {
  return absl::InternalError(
      absl::StrCat("vulkan kernel template '", k.template_name, "' with ", k.ConstantsText(), ": ", what));
}

absl::StatusOr<std::string_view> TemplateText(const std::string& file) {
  // KILN_KERNEL_TEMPLATES' copy where it has one. Every distinct text read
  // is kept for the process: views into it outlive the call, and replacing
  // a kept text would leave earlier views dangling.
  if (std::optional<std::string> text = TemplateFromDir("vulkan", file)) {
    static std::mutex mu;
    static std::set<std::string> kept;
    std::lock_guard<std::mutex> lock(mu);
    return std::string_view(*kept.insert(*std::move(text)).first);
  }
  for (const EmbeddedTemplate& t : EmbeddedTemplates()) {
    if (t.file == file) return t.text;
  }
  return absl::NotFoundError(absl::StrCat("no Vulkan kernel template '", file, "' in this kiln"));
}

// The ST_* constant of weights.glsl for a plan storage name.
absl::StatusOr<std::string> StorageConstant(const cpu::WeightStorage& s) {
  if (s.grouped) return std::string(*s.grouped == GroupedKind::kInt4 ? "ST_INT4" : "ST_INT2");
  switch (s.ggml) {
    case GgmlType::kF32: return std::string("ST_F32");
    case GgmlType::kF16: return std::string("ST_F16");
    case GgmlType::kBF16: return std::string("ST_BF16");
    case GgmlType::kQ8_0: return std::string("ST_Q8_0");
    case GgmlType::kQ4_0: return std::string("ST_Q4_0");
    case GgmlType::kQ4_1: return std::string("ST_Q4_1");
    case GgmlType::kQ5_0: return std::string("ST_Q5_0");
    case GgmlType::kQ5_1: return std::string("ST_Q5_1");
    case GgmlType::kQ2_K: return std::string("ST_Q2_K");
    case GgmlType::kQ3_K: return std::string("ST_Q3_K");
    case GgmlType::kQ4_K: return std::string("ST_Q4_K");
    case GgmlType::kQ5_K: return std::string("ST_Q5_K");
    case GgmlType::kQ6_K: return std::string("ST_Q6_K");
    default: break;
  }
  return absl::UnimplementedError(absl::StrCat("weight storage ", s.Name(), " has no Vulkan decoder"));
}

// One weights.glsl per slot the instance reads (constants W<i> and W<i>_COLS).
absl::StatusOr<std::string> WeightReaders(const KernelInstance& k) {
  std::map<std::string, std::string> c(k.constants.begin(), k.constants.end());
  absl::StatusOr<std::string_view> reader = TemplateText("weights.glsl");
  if (!reader.ok()) return reader.status();
  std::string out;
  for (int slot = 0; slot < 3; ++slot) {
    auto storage = c.find(absl::StrCat("W", slot));
    auto cols = c.find(absl::StrCat("W", slot, "_COLS"));
    if (storage == c.end()) continue;
    absl::StatusOr<cpu::WeightStorage> s = cpu::ParseWeightStorage(storage->second);
    if (!s.ok()) return InstanceError(k, std::string(s.status().message()));
    absl::StatusOr<std::string> st = StorageConstant(*s);
    if (!st.ok()) return InstanceError(k, std::string(st.status().message()));
    int64_t n = 0;
    if (cols == c.end() || !absl::SimpleAtoi(cols->second, &n)) return InstanceError(k, "missing W_COLS");
    const std::optional<uint64_t> row_bytes = s->RowBytes(n);
    if (!row_bytes) return InstanceError(k, absl::StrFormat("a row of %d is not whole blocks of %s", n, s->Name()));
    absl::StrAppendFormat(&out,
                          "#define WBUF w%d\n#define WBYTE wbyte%d\n#define WWORD wword%d\n#define WF16 wf16_%d\n"
                          "#define WSCALEMINK wscalemink%d\n"
                          "#define WREAD wread%d\n#define WREAD4 wread4_%d\n#define WDOTQ4K wdotq4k_%d\n"
                          "#define WSTORAGE %s\n#define WROW_BYTES %du\n#define WGROUP %du\n",
                          slot, slot, slot, slot, slot, slot, slot, slot, *st, *row_bytes, s->grouped ? s->group : 0);
    out += *reader;
    out += "\n#undef WBUF\n#undef WBYTE\n#undef WWORD\n#undef WF16\n#undef WSCALEMINK\n#undef WREAD\n#undef WREAD4\n#undef WDOTQ4K\n#undef WSTORAGE\n"
           "#undef WROW_BYTES\n#undef WGROUP\n";
  }
  return out;
}

void InitGlslangOnce() {
  static std::once_flag once;
  std::call_once(once, [] { glslang::InitializeProcess(); });
}

absl::StatusOr<std::vector<uint32_t>> Glslang(const KernelInstance& k, const std::string& source) {
  InitGlslangOnce();
  glslang::TShader shader(EShLangCompute);
  const char* text = source.c_str();
  const char* name = k.template_name.c_str();
  shader.setStringsWithLengthsAndNames(&text, nullptr, &name, 1);
  shader.setEnvInput(glslang::EShSourceGlsl, EShLangCompute, glslang::EShClientVulkan, 100);
  shader.setEnvClient(glslang::EShClientVulkan, glslang::EShTargetVulkan_1_1);
  shader.setEnvTarget(glslang::EShTargetSpv, glslang::EShTargetSpv_1_3);
  shader.setEntryPoint("main");
  const EShMessages messages = static_cast<EShMessages>(EShMsgSpvRules | EShMsgVulkanRules);
  if (!shader.parse(GetDefaultResources(), 450, false, messages)) {
    return InstanceError(k, absl::StrCat("GLSL does not compile:\n", shader.getInfoLog()));
  }
  glslang::TProgram program;
  program.addShader(&shader);
  if (!program.link(messages)) return InstanceError(k, absl::StrCat("does not link:\n", program.getInfoLog()));
  std::vector<uint32_t> words;
  glslang::SpvOptions options;
  options.validate = false;
  glslang::GlslangToSpv(*program.getIntermediate(EShLangCompute), words, &options);
  return words;
}

absl::Status Validate(const KernelInstance& k, const std::vector<uint32_t>& words, const char* stage) {
  spvtools::SpirvTools tools(SPV_ENV_VULKAN_1_1);
  std::string log;
  tools.SetMessageConsumer([&log](spv_message_level_t, const char*, const spv_position_t& at, const char* msg) {
    absl::StrAppendFormat(&log, "  word %d: %s\n", at.index, msg);
  });
  if (!tools.Validate(words)) return InstanceError(k, absl::StrCat("SPIR-V ", stage, " fails validation:\n", log));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> InstanceSource(const KernelInstance& k) {
  absl::StatusOr<std::string_view> common = TemplateText("common.glsl");
  absl::StatusOr<std::string_view> reduce = TemplateText("reduce.glsl");
  absl::StatusOr<std::string_view> rope = TemplateText("rope.glsl");
  absl::StatusOr<std::string_view> matmul = TemplateText("matmul_common.glsl");
  absl::StatusOr<std::string_view> kv_pages = TemplateText("kv_pages.glsl");
  absl::StatusOr<std::string_view> body = TemplateText(k.template_name + ".comp");
  for (const absl::Status& s : {common.status(), reduce.status(), rope.status(), matmul.status(), kv_pages.status()}) {
    if (!s.ok()) return s;
  }
  if (!body.ok()) return InstanceError(k, std::string(body.status().message()));
  std::string src =
      "#version 450\n"
      "#extension GL_KHR_shader_subgroup_basic : require\n"
      "#extension GL_KHR_shader_subgroup_arithmetic : require\n";
  // Tensor cores: the 2019 NV cooperative matrices (Debian 12's glslang has
  // no KHR ones), f16 arithmetic for their inputs.
  // Integer dot products (SPV_KHR_integer_dot_product) declared through SPIR-V
  // intrinsics: Debian 12's glslang has no GLSL extension for them.
  // DP4's staging takes a group's max through subgroup shuffles.
  for (const auto& [name, value] : k.constants) {
    if (name == "DP4" && value == "1") {
      src += "#extension GL_EXT_spirv_intrinsics : require\n#extension GL_KHR_shader_subgroup_shuffle : require\n";
    }
  }
  if (k.template_name == "paged_attention_prefill") src += "#extension GL_KHR_shader_subgroup_shuffle : require\n";
  if (NeedsGlslangNext(k)) {
    src += "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n"
           "#extension GL_EXT_shader_16bit_storage : require\n#extension GL_KHR_memory_scope_semantics : require\n"
           "#extension GL_KHR_cooperative_matrix : require\n#extension GL_NV_cooperative_matrix2 : require\n"
           "#extension GL_EXT_control_flow_attributes : require\n";
  }
  if (k.template_name == "matmul_coopmat") {
    src += "#extension GL_NV_cooperative_matrix : require\n#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n";
  }
  for (const auto& [name, value] : k.constants) {
    // Weight slots become decoders below, not macros.
    if (name.size() >= 2 && name[0] == 'W' && name[1] >= '0' && name[1] <= '9') continue;
    absl::StrAppend(&src, "#define ", name, " ", value, "\n");
  }
  src += *common;
  absl::StatusOr<std::string> readers = WeightReaders(k);
  if (!readers.ok()) return readers.status();
  src += *readers;
  const std::string reduce_text(*reduce), rope_text(*rope), matmul_text(*matmul), kv_pages_text(*kv_pages);
  src += absl::StrReplaceAll(absl::string_view(body->data(), body->size()), {{"#include_reduce", reduce_text},
                                                                             {"#include_rope", rope_text},
                                                                             {"#include_matmul", matmul_text},
                                                                             {"#include_kv_pages", kv_pages_text}});
  return src;
}

bool NeedsGlslangNext(const KernelInstance& k) {
  return k.template_name == "matmul_coopmat2" || k.template_name == "paged_attention_coopmat2";
}

absl::StatusOr<std::vector<uint32_t>> CompileInstance(const KernelInstance& k) {
  absl::StatusOr<std::string> source = InstanceSource(k);
  if (!source.ok()) return source.status();
  if (NeedsGlslangNext(k)) {
    absl::StatusOr<std::vector<uint32_t>> words = CompileGlslNext(*source, k.template_name + ".comp");
    if (!words.ok()) return InstanceError(k, std::string(words.status().message()));
    if (absl::Status s = ValidateNext(*words); !s.ok()) return InstanceError(k, std::string(s.message()));
    return words;
  }
  absl::StatusOr<std::vector<uint32_t>> words = Glslang(k, *source);
  if (!words.ok()) return words.status();
  if (absl::Status s = Validate(k, *words, "from glslang"); !s.ok()) return s;
  spvtools::Optimizer optimizer(SPV_ENV_VULKAN_1_1);
  std::string log;
  optimizer.SetMessageConsumer([&log](spv_message_level_t, const char*, const spv_position_t&, const char* msg) {
    absl::StrAppend(&log, "  ", msg, "\n");
  });
  optimizer.RegisterPerformancePasses();
  std::vector<uint32_t> optimized;
  if (!optimizer.Run(words->data(), words->size(), &optimized)) {
    return InstanceError(k, absl::StrCat("spirv-opt failed:\n", log));
  }
  if (absl::Status s = Validate(k, optimized, "after spirv-opt"); !s.ok()) return s;
  return optimized;
}

absl::StatusOr<std::vector<uint8_t>> GenerateVulkanKernels(const Plan& plan) {
  absl::StatusOr<std::vector<std::vector<vulkan::PlannedDispatch>>> dispatches = vulkan::PlanDispatches(plan);
  if (!dispatches.ok()) return dispatches.status();
  std::map<std::string, KernelInstance> instances;
  // Without the newer glslang, matmul_coopmat2 is left out, and with it the
  // dispatches that only run beside it.
  const absl::Status next = GlslangNextAvailable();
  for (const auto& launch : *dispatches) {
    for (const vulkan::PlannedDispatch& d : launch) {
      instances.emplace(d.kernel.Key(), d.kernel);
      if (d.decode_kernel) instances.emplace(d.decode_kernel->Key(), *d.decode_kernel);
      if (d.tiled_kernel) instances.emplace(d.tiled_kernel->Key(), *d.tiled_kernel);
      if (d.coopmat_kernel) instances.emplace(d.coopmat_kernel->Key(), *d.coopmat_kernel);
      if (d.coopmat_f16_kernel) instances.emplace(d.coopmat_f16_kernel->Key(), *d.coopmat_f16_kernel);
      if (d.coopmat2_kernel && next.ok()) {
        instances.emplace(d.coopmat2_kernel->Key(), *d.coopmat2_kernel);
        instances.emplace(d.coopmat2_small_kernel->Key(), *d.coopmat2_small_kernel);
        instances.emplace(d.activations_f16_kernel->Key(), *d.activations_f16_kernel);
        if (d.silu_mul_kernel) instances.emplace(d.silu_mul_kernel->Key(), *d.silu_mul_kernel);
        for (const KernelInstance& slice : d.coopmat2_slice_kernels) instances.emplace(slice.Key(), slice);
        if (d.split_sum_kernel) instances.emplace(d.split_sum_kernel->Key(), *d.split_sum_kernel);
      }
      for (const std::optional<KernelInstance>& copy : d.f16_copy_kernels) {
        if (copy) instances.emplace(copy->Key(), *copy);
      }
      if (d.decode_dp4_kernel) instances.emplace(d.decode_dp4_kernel->Key(), *d.decode_dp4_kernel);
      if (d.prefill_kernel) instances.emplace(d.prefill_kernel->Key(), *d.prefill_kernel);
      if (d.coopmat2_prefill_kernel && next.ok()) {
        instances.emplace(d.coopmat2_prefill_kernel->Key(), *d.coopmat2_prefill_kernel);
      }
      if (d.fold_kernel) instances.emplace(d.fold_kernel->Key(), *d.fold_kernel);
    }
  }
  for (const vulkan::PlannedDispatch& own : {vulkan::CopyLogitsDispatch(plan), vulkan::GreedyIdsDispatch(plan)}) {
    instances.emplace(own.kernel.Key(), own.kernel);
  }
  std::vector<vulkan::SpirvModule> modules;
  bool noted = false;
  for (const auto& launch : *dispatches) {
    for (const vulkan::PlannedDispatch& d : launch) {
      if (!d.coopmat2_kernel || next.ok() || noted) continue;
      std::fprintf(stderr, "note: vulkan: workgroup-scope cooperative-matrix kernels left out: %s; prefill runs "
                   "the subgroup-scope ones\n", std::string(next.message()).c_str());
      noted = true;
    }
  }
  for (const auto& [key, k] : instances) {
    absl::StatusOr<std::vector<uint32_t>> words = CompileInstance(k);
    if (!words.ok()) return words.status();
    vulkan::SpirvModule m;
    m.template_name = k.template_name;
    m.constants = k.ConstantsText();
    m.workgroup_size = k.workgroup_size;
    m.words = *std::move(words);
    modules.push_back(std::move(m));
  }
  return vulkan::SerializeBundle(modules);
}

}  // namespace kiln::codegen::spirv
