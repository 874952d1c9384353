#include "runtime/cuda/cuda_bundle.h"

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln::cuda {
namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'C', 'U', 'D', 'A'};

class Writer {
 public:
  void Raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  void U32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void U64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void Blob(const void* p, size_t n) {
    U64(n);
    Raw(p, n);
  }
  std::vector<uint8_t> Take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}
  absl::Status Need(uint64_t n, const char* what) {
    if (n > b_.size() - pos_) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "cuda kernels section: %s needs %d bytes at offset %d, only %d left", what, n, pos_, b_.size() - pos_));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<uint64_t> Uint(int bytes, const char* what) {
    if (absl::Status s = Need(bytes, what); !s.ok()) return s;
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(b_[pos_ + i]) << (8 * i);
    pos_ += bytes;
    return v;
  }
  absl::StatusOr<std::span<const uint8_t>> Blob(const char* what) {
    absl::StatusOr<uint64_t> n = Uint(8, what);
    if (!n.ok()) return n.status();
    if (absl::Status s = Need(*n, what); !s.ok()) return s;
    std::span<const uint8_t> r = b_.subspan(pos_, *n);
    pos_ += *n;
    return r;
  }
  absl::StatusOr<std::string> String(const char* what) {
    absl::StatusOr<std::span<const uint8_t>> b = Blob(what);
    if (!b.ok()) return b.status();
    return std::string(b->begin(), b->end());
  }
  bool AtEnd() const { return pos_ == b_.size(); }

 private:
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
};

}  // namespace

const BundleKernel* CudaBundle::Find(const std::string& name_expression) const {
  for (const BundleKernel& k : kernels) {
    if (k.name_expression == name_expression) return &k;
  }
  return nullptr;
}

std::vector<uint8_t> SerializeBundle(const CudaBundle& b) {
  Writer w;
  w.Raw(kMagic, sizeof(kMagic));
  w.U32(kBundleVersion);
  w.U32(b.sm);
  w.Blob(b.ptx.data(), b.ptx.size());
  w.Blob(b.cubin.data(), b.cubin.size());
  w.Blob(b.info_log.data(), b.info_log.size());
  w.U32(static_cast<uint32_t>(b.kernels.size()));
  for (const BundleKernel& k : b.kernels) {
    w.Blob(k.name_expression.data(), k.name_expression.size());
    w.Blob(k.lowered_name.data(), k.lowered_name.size());
    for (int32_t v : {k.registers, k.spill_store_bytes, k.spill_load_bytes, k.shared_bytes, k.stack_bytes}) {
      w.U32(static_cast<uint32_t>(v));
    }
  }
  return w.Take();
}

absl::StatusOr<CudaBundle> ParseBundle(std::span<const uint8_t> bytes) {
  if (bytes.size() < sizeof(kMagic) || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError("cuda kernels section: bad magic (not written by kiln's CUDA codegen)");
  }
  Reader r(bytes.subspan(sizeof(kMagic)));
  CudaBundle b;
  absl::StatusOr<uint64_t> version = r.Uint(4, "version");
  if (!version.ok()) return version.status();
  if (*version != kBundleVersion) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cuda kernels section: version %d, this kiln reads version %d (recompile the artifact)", *version,
        kBundleVersion));
  }
  absl::StatusOr<uint64_t> sm = r.Uint(4, "sm");
  if (!sm.ok()) return sm.status();
  b.sm = static_cast<uint32_t>(*sm);
  absl::StatusOr<std::string> ptx = r.String("ptx");
  if (!ptx.ok()) return ptx.status();
  b.ptx = *std::move(ptx);
  absl::StatusOr<std::span<const uint8_t>> cubin = r.Blob("cubin");
  if (!cubin.ok()) return cubin.status();
  b.cubin.assign(cubin->begin(), cubin->end());
  absl::StatusOr<std::string> log = r.String("info log");
  if (!log.ok()) return log.status();
  b.info_log = *std::move(log);
  absl::StatusOr<uint64_t> count = r.Uint(4, "kernel count");
  if (!count.ok()) return count.status();
  for (uint64_t i = 0; i < *count; ++i) {
    BundleKernel k;
    absl::StatusOr<std::string> name = r.String("kernel name");
    if (!name.ok()) return name.status();
    absl::StatusOr<std::string> lowered = r.String("lowered name");
    if (!lowered.ok()) return lowered.status();
    k.name_expression = *std::move(name);
    k.lowered_name = *std::move(lowered);
    for (int32_t* field : {&k.registers, &k.spill_store_bytes, &k.spill_load_bytes, &k.shared_bytes, &k.stack_bytes}) {
      absl::StatusOr<uint64_t> v = r.Uint(4, "kernel resources");
      if (!v.ok()) return v.status();
      *field = static_cast<int32_t>(static_cast<uint32_t>(*v));
    }
    b.kernels.push_back(std::move(k));
  }
  if (!r.AtEnd()) return absl::InvalidArgumentError("cuda kernels section: trailing bytes after the kernel table");
  if (b.ptx.empty() && b.cubin.empty()) return absl::InvalidArgumentError("cuda kernels section: no PTX and no cubin");
  return b;
}

absl::StatusOr<uint32_t> SmOfTarget(const std::string& target) {
  constexpr std::string_view kPrefix = "cuda:sm_";
  uint32_t sm = 0;
  if (target.rfind(kPrefix, 0) != 0 || !absl::SimpleAtoi(target.substr(kPrefix.size()), &sm) || sm < 50 ||
      sm > 200) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA target '", target, "' is not of the form cuda:sm_NN"));
  }
  return sm;
}

std::string DescribeBundle(const CudaBundle& b) {
  // The shared memory the compiler reports is the static part: the
  // matmuls' staging, rings and tiles are dynamic, sized at launch.
  std::string out = absl::StrFormat(
      "  sm_%d: PTX %d bytes, cubin %d bytes, %d kernels (static shared memory; dynamic is sized at launch)\n", b.sm,
      b.ptx.size(), b.cubin.size(), b.kernels.size());
  for (const BundleKernel& k : b.kernels) {
    absl::StrAppendFormat(&out, "    %-64s %3d regs, spill %d/%d B (store/load), smem %d B, stack %d B\n",
                          k.name_expression, k.registers, k.spill_store_bytes, k.spill_load_bytes, k.shared_bytes,
                          k.stack_bytes);
  }
  return out;
}

}  // namespace kiln::cuda
