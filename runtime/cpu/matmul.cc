#include "runtime/cpu/matmul.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/cpu/q8_dot.h"
#include "runtime/cpu/row_dot.h"
#include "runtime/cpu/row_groups.h"

namespace kiln::cpu {
namespace {

// The fewest rows per parallel chunk, and tokens per pass over a chunk: a
// chunk's weight rows are re-read for every token tile, so the tile keeps x
// in cache while the rows are decoded again.
constexpr int64_t kRowChunk = 16;
constexpr int64_t kTokenTile = 16;

// The integer kernels decode a weight row once per call and run every token
// of the call over it, so they take many more tokens a pass: Qwen2.5-Coder-
// 0.5B's 256-token prefill at 2 threads ran 378 tok/s at 16 tokens a pass,
// 441 at 64 and 478 at 256 (AVX-512 kernels; AVX2's 257 -> 278), the codes
// of 256 tokens (1.2 MB at K = 4864) staying within L2 + L3.
constexpr int64_t kQ8TokenTile = 256;

// Rows per parallel chunk: a few chunks a thread (handing out 16 rows at a
// time cost more than it balanced once rows got quick), and every row on the
// calling thread when the whole product is too small to pay for waking the
// others (stories260K's decode ran at half speed on two threads).
int64_t RowGrain(int64_t n, int64_t k, int64_t tokens, int threads) {
  if (n * k * tokens < (int64_t{1} << 17)) return n;
  return std::max(kRowChunk, (n + 4 * threads - 1) / (4 * threads));
}

RowDotFn FindRowDot(const WeightStorage& s, CpuIsa isa) {
  if (s.grouped) return GroupedRowDot(*s.grouped, isa);
  for (RowDotFn (*family)(GgmlType, CpuIsa) : {FloatRowDot, LegacyRowDot, KQuantRowDot}) {
    if (RowDotFn fn = family(s.ggml, isa)) return fn;
  }
  return nullptr;
}

}  // namespace

CpuIsa MatmulIsa(const WeightStorage& storage, CpuIsa requested) {
  if (requested == CpuIsa::kAvx2 && DetectCpuIsa() == CpuIsa::kAvx2 && IsSupported(storage) &&
      FindRowDot(storage, CpuIsa::kAvx2) != nullptr) {
    return CpuIsa::kAvx2;
  }
  return CpuIsa::kScalar;
}

absl::Status Matmul(const float* x, int64_t tokens, const WeightMatrix& w, float* y,
                    ThreadPool& pool, CpuIsa isa, Activations activations) {
  if (!IsSupported(w.storage)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Matmul: storage %s is not supported", w.storage.Name()));
  }
  if (tokens < 0 || w.rows < 0 || w.cols < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Matmul: negative size (tokens %d, rows %d, cols %d)", tokens, w.rows, w.cols));
  }
  const std::optional<uint64_t> row_bytes = w.storage.RowBytes(w.cols);
  if (!row_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Matmul: %d columns is not a whole number of %s blocks of %d", w.cols,
                        w.storage.Name(), w.storage.block_elems()));
  }
  if (tokens == 0 || w.rows == 0) return absl::OkStatus();
  if (w.cols == 0) {
    std::fill(y, y + tokens * w.rows, 0.0f);
    return absl::OkStatus();
  }
  if (x == nullptr || y == nullptr || w.data == nullptr) {
    return absl::InvalidArgumentError("Matmul: null buffer");
  }
  const int64_t k = w.cols, n = w.rows, stride = static_cast<int64_t>(*row_bytes);
  if (RowDotQ8Fn q8 = activations == Activations::kInt8 && MatmulIsa(w.storage, isa) == CpuIsa::kAvx2 &&
                              !w.storage.grouped && k % 32 == 0
                          ? Q8RowDot(w.storage.ggml)
                          : nullptr) {
    // The codes live per calling thread: executors run one launch at a time.
    thread_local std::vector<int8_t> codes;
    thread_local std::vector<float> scales;
    thread_local std::vector<float> sums;
    thread_local std::vector<float> units;
    thread_local std::vector<float> rescales;
    const int group = Q8GroupOf(w.storage.ggml);
    const int64_t supers = group == 256 ? k / 256 : 0;
    codes.resize(tokens * k);
    scales.resize(tokens * k / 32);
    sums.resize(tokens * k / 32);
    units.resize(tokens * supers);
    rescales.resize(tokens * supers);
    // The workers see this thread's buffers through these pointers (a
    // thread_local named in the lambda would be the worker's own).
    int8_t* const q = codes.data();
    float* const d = scales.data();
    float* const s = sums.data();
    float* const u = units.data();
    float* const rs = rescales.data();
    pool.ParallelFor(tokens, 1, [&](int64_t begin, int64_t end) {
      QuantizeQ8(x + begin * k, end - begin, k, group, q + begin * k, d + begin * k / 32, s + begin * k / 32,
                 u + begin * supers, rs + begin * supers);
    });
    // Rows in groups of eight where the weight has them, the rest one by one.
    const GgmlType type = w.storage.ggml;
    const int64_t groups = w.row_groups != nullptr && HasRowGroupKernel(type) ? n / kRowGroupRows : 0;
    if (groups > 0) {
      const int64_t grain = std::max<int64_t>(1, RowGrain(n, k, tokens, pool.num_threads()) / kRowGroupRows);
      pool.ParallelFor(groups, grain, [&](int64_t begin, int64_t end) {
        for (int64_t t0 = 0; t0 < tokens; t0 += kQ8TokenTile) {
          const int64_t tile = std::min(kQ8TokenTile, tokens - t0);
          const Q8Rows xq{q + t0 * k, d + t0 * k / 32, s + t0 * k / 32, k, u + t0 * supers, rs + t0 * supers};
          RowGroupsDot(BestQ8Kernel(), type, w.row_groups + begin * RowGroupBytes(type, k), end - begin, k, xq, tile,
                       y + t0 * n + kRowGroupRows * begin, n);
        }
      });
    }
    const int64_t first = groups * kRowGroupRows;
    if (first == n) return absl::OkStatus();
    pool.ParallelFor(n - first, RowGrain(n - first, k, tokens, pool.num_threads()), [&](int64_t b0, int64_t e0) {
      const int64_t begin = first + b0, end = first + e0;
      for (int64_t t0 = 0; t0 < tokens; t0 += kQ8TokenTile) {
        const int64_t tile = std::min(kQ8TokenTile, tokens - t0);
        const Q8Rows xq{q + t0 * k, d + t0 * k / 32, s + t0 * k / 32, k, u + t0 * supers, rs + t0 * supers};
        q8(w.data + begin * stride, stride, end - begin, k, xq, tile, y + t0 * n + begin, n);
      }
    });
    return absl::OkStatus();
  }
  const RowDotFn dot = FindRowDot(w.storage, MatmulIsa(w.storage, isa));
  const int64_t group = w.storage.group;
  pool.ParallelFor(n, RowGrain(n, k, tokens, pool.num_threads()), [&](int64_t begin, int64_t end) {
    for (int64_t t0 = 0; t0 < tokens; t0 += kTokenTile) {
      const int64_t tile = std::min(kTokenTile, tokens - t0);
      for (int64_t r = begin; r < end; ++r) {
        dot(w.data + r * stride, k, group, x + t0 * k, k, tile, y + t0 * n + r, n);
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace kiln::cpu
