#include "runtime/vulkan/vulkan_bundle.h"

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln::vulkan {
namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'V', 'K', 'B', '\0'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kSpirvMagic = 0x07230203;

void PutU32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void PutString(std::vector<uint8_t>& out, const std::string& s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out.insert(out.end(), s.begin(), s.end());
}

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}
  absl::StatusOr<uint32_t> U32(const char* what) {
    if (b_.size() - at_ < 4) return Truncated(what);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(b_[at_ + i]) << (8 * i);
    at_ += 4;
    return v;
  }
  absl::StatusOr<std::span<const uint8_t>> Bytes(const char* what) {
    absl::StatusOr<uint32_t> n = U32(what);
    if (!n.ok()) return n.status();
    if (b_.size() - at_ < *n) return Truncated(what);
    std::span<const uint8_t> s = b_.subspan(at_, *n);
    at_ += *n;
    return s;
  }
  absl::StatusOr<std::string> String(const char* what) {
    absl::StatusOr<std::span<const uint8_t>> s = Bytes(what);
    if (!s.ok()) return s.status();
    return std::string(s->begin(), s->end());
  }
  size_t at() const { return at_; }

 private:
  absl::Status Truncated(const char* what) const {
    return absl::DataLossError(absl::StrFormat("vulkan kernels: %s at byte %d runs past the section's %d bytes",
                                               what, at_, b_.size()));
  }
  std::span<const uint8_t> b_;
  size_t at_ = 0;
};

}  // namespace

std::vector<uint8_t> SerializeBundle(const std::vector<SpirvModule>& modules) {
  std::vector<uint8_t> out(kMagic, kMagic + sizeof(kMagic));
  PutU32(out, kVersion);
  PutU32(out, static_cast<uint32_t>(modules.size()));
  for (const SpirvModule& m : modules) {
    PutString(out, m.template_name);
    PutString(out, m.constants);
    PutString(out, m.entry_point);
    PutString(out, absl::StrCat(m.workgroup_size));
    PutU32(out, static_cast<uint32_t>(m.words.size() * 4));
    const size_t at = out.size();
    out.resize(at + m.words.size() * 4);
    std::memcpy(out.data() + at, m.words.data(), m.words.size() * 4);
  }
  return out;
}

absl::StatusOr<std::vector<SpirvModule>> ParseBundle(std::span<const uint8_t> bytes) {
  if (bytes.size() < sizeof(kMagic) || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError("vulkan kernels: not a kiln Vulkan kernel bundle (bad magic)");
  }
  Reader r(bytes.subspan(sizeof(kMagic)));
  absl::StatusOr<uint32_t> version = r.U32("version");
  if (!version.ok()) return version.status();
  if (*version != kVersion) {
    return absl::FailedPreconditionError(
        absl::StrFormat("vulkan kernels: bundle version %d, this kiln reads version %d (recompile)", *version,
                        kVersion));
  }
  absl::StatusOr<uint32_t> count = r.U32("module count");
  if (!count.ok()) return count.status();
  std::vector<SpirvModule> modules;
  for (uint32_t i = 0; i < *count; ++i) {
    SpirvModule m;
    absl::StatusOr<std::string> name = r.String("template name");
    absl::StatusOr<std::string> constants = r.String("constants");
    absl::StatusOr<std::string> entry = r.String("entry point");
    absl::StatusOr<std::string> wg = r.String("workgroup size");
    for (const absl::Status& s : {name.status(), constants.status(), entry.status(), wg.status()}) {
      if (!s.ok()) return s;
    }
    m.template_name = *name;
    m.constants = *constants;
    m.entry_point = *entry;
    // The writer's own decimal text only ("064", "+64" or " 64" are damage),
    // so that what parses serializes back to the same bytes.
    if (!absl::SimpleAtoi(*wg, &m.workgroup_size) || m.workgroup_size <= 0 ||
        absl::StrCat(m.workgroup_size) != *wg) {
      return absl::DataLossError(absl::StrFormat("vulkan kernels: module %d (%s) has workgroup size '%s'", i,
                                                 m.template_name, *wg));
    }
    absl::StatusOr<std::span<const uint8_t>> code = r.Bytes("SPIR-V");
    if (!code.ok()) return code.status();
    if (code->size() < 20 || code->size() % 4 != 0) {
      return absl::DataLossError(absl::StrFormat("vulkan kernels: module %d (%s) has %d bytes of SPIR-V, not whole "
                                                 "words of a module",
                                                 i, m.template_name, code->size()));
    }
    m.words.resize(code->size() / 4);
    std::memcpy(m.words.data(), code->data(), code->size());
    if (m.words[0] != kSpirvMagic) {
      return absl::DataLossError(absl::StrFormat("vulkan kernels: module %d (%s) lacks the SPIR-V magic", i,
                                                 m.template_name));
    }
    modules.push_back(std::move(m));
  }
  if (r.at() + sizeof(kMagic) != bytes.size()) {
    return absl::DataLossError(absl::StrFormat("vulkan kernels: %d bytes after the last module",
                                               bytes.size() - r.at() - sizeof(kMagic)));
  }
  return modules;
}

std::string DescribeBundle(std::span<const uint8_t> bytes) {
  absl::StatusOr<std::vector<SpirvModule>> modules = ParseBundle(bytes);
  if (!modules.ok()) return absl::StrCat("  (unreadable: ", modules.status().message(), ")\n");
  std::string out;
  for (const SpirvModule& m : *modules) {
    absl::StrAppendFormat(&out, "  %-16s %7d bytes  wg %-3d %s\n", m.template_name, m.words.size() * 4,
                          m.workgroup_size, m.constants);
  }
  return out;
}

}  // namespace kiln::vulkan
