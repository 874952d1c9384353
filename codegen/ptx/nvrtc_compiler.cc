#include "codegen/ptx/nvrtc_compiler.h"

#include <nvJitLink.h>
#include <nvrtc.h>

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/ptx/embedded_templates.h"
#include "codegen/template_dir.h"

namespace kiln::codegen::ptx {
namespace {

constexpr const char* kMainSource = "#include \"kernels.cuh\"\n";

// sm_90 compiles for sm_90a, whose warpgroup MMA the prefill matmul uses
// (matmul_f16_wgmma.cuh); such code runs on sm_90 GPUs only, as a cubin
// for sm_90 does anyway.
std::string ArchSuffix(int sm) { return sm == 90 ? std::string("90a") : absl::StrCat(sm); }

struct NvrtcResult {
  nvrtcResult status = NVRTC_SUCCESS;
  std::string log;
  std::string ptx;
  std::vector<std::string> lowered;
};

// One NVRTC program over the embedded templates with `names` instantiated.
NvrtcResult RunNvrtc(const std::vector<std::string>& names, uint32_t sm) {
  NvrtcResult r;
  // NUL-terminated copies of the embedded names and texts.
  std::vector<std::string> names_z, texts_z;
  std::vector<const char*> header_names, header_texts;
  for (const TemplateSource& t : EmbeddedTemplates()) {
    names_z.emplace_back(t.name);
    std::optional<std::string> from_dir = TemplateFromDir("cuda", t.name);
    texts_z.emplace_back(from_dir ? *std::move(from_dir) : std::string(t.text));
  }
  for (size_t i = 0; i < names_z.size(); ++i) {
    header_names.push_back(names_z[i].c_str());
    header_texts.push_back(texts_z[i].c_str());
  }
  nvrtcProgram prog;
  r.status = nvrtcCreateProgram(&prog, kMainSource, "kiln_kernels.cu", static_cast<int>(header_texts.size()),
                                header_texts.data(), header_names.data());
  if (r.status != NVRTC_SUCCESS) return r;
  for (const std::string& n : names) nvrtcAddNameExpression(prog, n.c_str());
  const std::string arch = absl::StrCat("--gpu-architecture=compute_", ArchSuffix(sm));
  const char* options[] = {arch.c_str(), "-std=c++17", "--fmad=true"};
  r.status = nvrtcCompileProgram(prog, 3, options);
  size_t log_size = 0;
  nvrtcGetProgramLogSize(prog, &log_size);
  r.log.resize(log_size);
  if (log_size > 0) nvrtcGetProgramLog(prog, r.log.data());
  while (!r.log.empty() && (r.log.back() == '\0' || r.log.back() == '\n')) r.log.pop_back();
  if (r.status == NVRTC_SUCCESS) {
    size_t ptx_size = 0;
    nvrtcGetPTXSize(prog, &ptx_size);
    r.ptx.resize(ptx_size);
    nvrtcGetPTX(prog, r.ptx.data());
    while (!r.ptx.empty() && r.ptx.back() == '\0') r.ptx.pop_back();
    for (const std::string& n : names) {
      const char* lowered = nullptr;
      if (nvrtcGetLoweredName(prog, n.c_str(), &lowered) != NVRTC_SUCCESS || lowered == nullptr) {
        r.status = NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID;
        r.log = absl::StrCat("no lowered name for ", n);
        break;
      }
      r.lowered.emplace_back(lowered);
    }
  }
  nvrtcDestroyProgram(&prog);
  return r;
}

std::string JitLinkLog(nvJitLinkHandle h, bool errors) {
  size_t size = 0;
  std::string log;
  if ((errors ? nvJitLinkGetErrorLogSize(h, &size) : nvJitLinkGetInfoLogSize(h, &size)) == NVJITLINK_SUCCESS &&
      size > 0) {
    log.resize(size);
    if (errors) {
      nvJitLinkGetErrorLog(h, log.data());
    } else {
      nvJitLinkGetInfoLog(h, log.data());
    }
    while (!log.empty() && log.back() == '\0') log.pop_back();
  }
  return log;
}

}  // namespace

absl::StatusOr<CompiledModule> CompileInstantiations(const std::vector<std::string>& names, uint32_t sm) {
  if (names.empty()) return absl::InvalidArgumentError("CUDA codegen: no kernel instantiations to compile");
  NvrtcResult r = RunNvrtc(names, sm);
  if (r.status != NVRTC_SUCCESS) {
    // Compile each instantiation alone so the error names the ones that fail.
    std::vector<std::string> failing;
    std::string first_log;
    for (const std::string& n : names) {
      NvrtcResult one = RunNvrtc({n}, sm);
      if (one.status != NVRTC_SUCCESS) {
        failing.push_back(n);
        if (first_log.empty()) first_log = one.log;
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "NVRTC (compute_", sm, ") failed: ", nvrtcGetErrorString(r.status), "; failing template instantiation(s): ",
        failing.empty() ? std::string("(all compile alone; the combined program fails)") : absl::StrJoin(failing, ", "),
        "\n", first_log.empty() ? r.log : first_log));
  }
  CompiledModule m;
  m.ptx = std::move(r.ptx);
  m.lowered_names = std::move(r.lowered);

  nvJitLinkHandle h;
  const std::string arch = absl::StrCat("-arch=sm_", ArchSuffix(sm));
  const char* options[] = {arch.c_str(), "-O3", "-verbose"};
  if (nvJitLinkCreate(&h, 3, options) != NVJITLINK_SUCCESS) {
    return absl::InternalError(absl::StrCat("nvJitLink: cannot create a linker for sm_", sm));
  }
  nvJitLinkResult lr = nvJitLinkAddData(h, NVJITLINK_INPUT_PTX, m.ptx.data(), m.ptx.size(), "kiln_kernels.ptx");
  if (lr == NVJITLINK_SUCCESS) lr = nvJitLinkComplete(h);
  m.info_log = JitLinkLog(h, false);
  if (lr != NVJITLINK_SUCCESS) {
    const std::string err = JitLinkLog(h, true);
    nvJitLinkDestroy(&h);
    return absl::InvalidArgumentError(absl::StrCat("nvJitLink (sm_", sm, ") failed with code ", static_cast<int>(lr),
                                                   " assembling ", names.size(), " instantiations: ", err));
  }
  size_t cubin_size = 0;
  nvJitLinkGetLinkedCubinSize(h, &cubin_size);
  m.cubin.resize(cubin_size);
  nvJitLinkGetLinkedCubin(h, m.cubin.data());
  nvJitLinkDestroy(&h);
  return m;
}

}  // namespace kiln::codegen::ptx
