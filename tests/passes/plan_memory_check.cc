// kiln-plan-memory, checked against its contract on a Llama-shaped step and
// on random graphs: no two buffers live at the same time share a byte,
// every offset is aligned, and each bucket's peak lies between the largest
// sum of simultaneously live sizes and the sum of all sizes. Liveness is
// recomputed here from the IR, independently of the pass.

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "dialects/KilnDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "passes/Passes.h"

namespace {

using mlir::kiln::WeightOp;

struct Buffer {
  int64_t first = 0;
  int64_t last = 0;
  int64_t rowBytes = 0;
  std::vector<int64_t> offsets;  // one per bucket
};

int64_t AlignUp(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

// Runs kiln-plan-memory on `source` and checks every step function it holds.
void PlanAndCheck(const std::string& source, const std::vector<int64_t>& buckets, int64_t alignment) {
  mlir::MLIRContext context;
  context.loadDialect<mlir::kiln::KilnDialect, mlir::func::FuncDialect>();
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::parseSourceString<mlir::ModuleOp>(source, &context);
  ASSERT_TRUE(module) << source;

  mlir::PassManager pm(&context);
  mlir::kiln::KilnPlanMemoryPassOptions options;
  options.buckets = buckets;
  options.alignment = alignment;
  pm.addPass(mlir::kiln::createKilnPlanMemoryPass(options));
  ASSERT_TRUE(mlir::succeeded(pm.run(*module)));

  for (auto func : module->getOps<mlir::func::FuncOp>()) {
    mlir::Block& block = func.getBody().front();
    llvm::DenseMap<mlir::Operation*, int64_t> index;
    for (mlir::Operation& op : block) index[&op] = static_cast<int64_t>(index.size());
    const int64_t end = static_cast<int64_t>(index.size());

    std::vector<Buffer> buffers;
    for (mlir::Operation& op : block) {
      if (!llvm::isa<mlir::kiln::KilnDialect>(op.getDialect()) || llvm::isa<WeightOp>(op)) continue;
      mlir::Attribute arena = op.getAttr("kiln.arena");
      ASSERT_TRUE(arena) << "no kiln.arena on " << op.getName().getStringRef().str();
      for (mlir::OpResult result : op.getResults()) {
        mlir::Attribute attr = arena;
        if (op.getNumResults() > 1) {
          auto perResult = llvm::dyn_cast<mlir::ArrayAttr>(arena);
          ASSERT_TRUE(perResult && perResult.size() == op.getNumResults()) << "one array per result expected";
          attr = perResult[result.getResultNumber()];
        }
        auto offsets = llvm::dyn_cast<mlir::DenseI64ArrayAttr>(attr);
        ASSERT_TRUE(offsets && offsets.size() == static_cast<int64_t>(buckets.size()));
        auto type = llvm::cast<mlir::RankedTensorType>(result.getType());
        Buffer b;
        b.first = b.last = index[&op];
        for (mlir::Operation* user : result.getUsers()) {
          b.last = std::max(b.last, llvm::isa<mlir::func::ReturnOp>(user) ? end : index[user]);
        }
        b.rowBytes = (type.getRank() == 2 ? type.getDimSize(1) : 1) * 4;
        b.offsets.assign(offsets.asArrayRef().begin(), offsets.asArrayRef().end());
        buffers.push_back(b);
      }
    }

    auto plan = func->getAttrOfType<mlir::DictionaryAttr>("kiln.memory_plan");
    ASSERT_TRUE(plan);
    auto planBuckets = plan.getAs<mlir::DenseI64ArrayAttr>("buckets");
    auto peaks = plan.getAs<mlir::DenseI64ArrayAttr>("peak_bytes");
    ASSERT_TRUE(planBuckets && peaks);
    ASSERT_EQ(std::vector<int64_t>(planBuckets.asArrayRef().begin(), planBuckets.asArrayRef().end()), buckets);

    for (size_t k = 0; k < buckets.size(); ++k) {
      auto size = [&](const Buffer& b) { return AlignUp(buckets[k] * b.rowBytes, alignment); };
      int64_t total = 0, top = 0;
      for (const Buffer& b : buffers) {
        EXPECT_EQ(b.offsets[k] % alignment, 0);
        EXPECT_GE(b.offsets[k], 0);
        total += size(b);
        top = std::max(top, b.offsets[k] + size(b));
      }
      for (size_t i = 0; i < buffers.size(); ++i) {
        for (size_t j = i + 1; j < buffers.size(); ++j) {
          const Buffer &x = buffers[i], &y = buffers[j];
          if (x.last < y.first || y.last < x.first) continue;
          const bool apart = x.offsets[k] + size(x) <= y.offsets[k] || y.offsets[k] + size(y) <= x.offsets[k];
          EXPECT_TRUE(apart) << "bucket " << buckets[k] << ": buffers " << i << " and " << j << " overlap";
        }
      }
      int64_t maxLive = 0;
      for (int64_t t = 0; t <= end; ++t) {
        int64_t live = 0;
        for (const Buffer& b : buffers) {
          if (b.first <= t && t <= b.last) live += size(b);
        }
        maxLive = std::max(maxLive, live);
      }
      EXPECT_EQ(peaks[k], top) << "the peak is where the highest buffer ends";
      EXPECT_GE(peaks[k], maxLive);
      EXPECT_LE(peaks[k], total);
    }
  }
}

// The line declaring weight %w<counter> (then counter + 1) of shape [rows, cols], or [rows] when cols is 0.
std::string Weight(int& counter, int64_t rows, int64_t cols) {
  const std::string id = std::to_string(counter++);
  return "  %w" + id + " = kiln.weight \"w" + id + "\" : !kiln.weight<[" + std::to_string(rows) +
         (cols ? ", " + std::to_string(cols) : "") + "], #kiln.storage<f32>>\n";
}

std::string Act(int64_t width) { return "tensor<?x" + std::to_string(width) + "xf32>"; }

// A Llama-shaped step of `layers` layers, unfused.
std::string Step(int layers) {
  const int64_t hidden = 64, q = 64, kv = 32, ffn = 160, vocab = 96;
  int w = 0;
  std::string s =
      "func.func @step(%tokens: tensor<?xi32>, %positions: tensor<?xi32>, %starts: tensor<?xi32>, "
      "%lens: tensor<?xi32>, %slots: tensor<?xi32>, %rows: tensor<?xi32>, "
      "%kv: !kiln.kv_cache<" +
      std::to_string(layers) + " x 4 x 8 x 128, f32>) -> " + Act(vocab) + " {\n";
  auto wt = [&](int64_t r, int64_t c) {
    s += Weight(w, r, c);
    return "%w" + std::to_string(w - 1);
  };
  auto wtype = [](int64_t r, int64_t c) {
    return "!kiln.weight<[" + std::to_string(r) + (c ? ", " + std::to_string(c) : "") + "], #kiln.storage<f32>>";
  };
  int v = 0;
  auto fresh = [&] { return "%v" + std::to_string(v++); };
  auto matmul = [&](const std::string& x, int64_t k, int64_t n) {
    std::string wn = wt(n, k), r = fresh();
    s += "  " + r + " = kiln.matmul " + x + ", " + wn + " : (" + Act(k) + ", " + wtype(n, k) + ") -> " + Act(n) + "\n";
    return r;
  };
  auto norm = [&](const std::string& x, int64_t n) {
    std::string g = wt(n, 0), r = fresh();
    s += "  " + r + " = kiln.rms_norm " + x + ", " + g + " {eps = 1.0e-5 : f64} : (" + Act(n) + ", " + wtype(n, 0) +
         ") -> " + Act(n) + "\n";
    return r;
  };
  auto binary = [&](const char* op, const std::string& a, const std::string& b, int64_t n) {
    std::string r = fresh();
    s += "  " + r + " = kiln." + op + " " + a + ", " + b + " : " + Act(n) + "\n";
    return r;
  };
  std::string emb = wt(vocab, hidden), x = fresh();
  s += "  " + x + " = kiln.embedding " + emb + ", %tokens : (" + wtype(vocab, hidden) + ", tensor<?xi32>) -> " +
       Act(hidden) + "\n";
  for (int l = 0; l < layers; ++l) {
    std::string n = norm(x, hidden);
    std::string qv = matmul(n, hidden, q), kv_ = matmul(n, hidden, kv), vv = matmul(n, hidden, kv);
    std::string a = fresh();
    s += "  " + a + " = kiln.attention " + qv + ", " + kv_ + ", " + vv + ", %kv, %positions, %starts, %lens, %slots " +
         "{layer = " + std::to_string(l) + ", num_heads = 8, num_kv_heads = 4, head_dim = 8, scale = 0.35 : f64} : (" +
         Act(q) + ", " + Act(kv) + ", " + Act(kv) + ", !kiln.kv_cache<" + std::to_string(layers) +
         " x 4 x 8 x 128, f32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> " + Act(q) + "\n";
    std::string h = binary("add", x, matmul(a, q, hidden), hidden);
    std::string m = norm(h, hidden);
    std::string g = matmul(m, hidden, ffn), u = matmul(m, hidden, ffn);
    std::string sg = fresh();
    s += "  " + sg + " = kiln.silu " + g + " : " + Act(ffn) + "\n";
    x = binary("add", h, matmul(binary("mul", sg, u, ffn), ffn, hidden), hidden);
  }
  std::string last = fresh();
  s += "  " + last + " = kiln.gather_rows " + x + ", %rows : (" + Act(hidden) + ", tensor<?xi32>) -> " + Act(hidden) +
       "\n";
  std::string logits = matmul(norm(last, hidden), hidden, vocab);
  s += "  return " + logits + " : " + Act(vocab) + "\n}\n";
  return s;
}

// A random graph of matmuls, fused matmuls (two results), norms, elementwise
// ops and argmaxes; a few of its values are returned.
std::string RandomGraph(uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  const int64_t widths[] = {8, 16, 24, 40, 64, 72, 128};
  struct Val {
    std::string name;
    int64_t width;  // 0: a tensor<?xi32> of argmax
  };
  std::vector<Val> vals = {{"%x", 16}};
  std::string body;
  int w = 0, v = 0;
  auto fresh = [&] { return "%v" + std::to_string(v++); };
  auto wtype = [](int64_t r, int64_t c) {
    return "!kiln.weight<[" + std::to_string(r) + (c ? ", " + std::to_string(c) : "") + "], #kiln.storage<f32>>";
  };
  auto anyAct = [&] {
    for (;;) {
      const Val& c = vals[pick(vals.size())];
      if (c.width) return c;
    }
  };
  const int ops = 20 + static_cast<int>(pick(60));
  for (int i = 0; i < ops; ++i) {
    const Val in = anyAct();
    const int64_t n = widths[pick(std::size(widths))], n2 = widths[pick(std::size(widths))];
    switch (pick(6)) {
      case 0: {
        body += Weight(w, n, in.width);
        std::string r = fresh();
        body += "  " + r + " = kiln.matmul " + in.name + ", %w" + std::to_string(w - 1) + " : (" + Act(in.width) +
                ", " + wtype(n, in.width) + ") -> " + Act(n) + "\n";
        vals.push_back({r, n});
        break;
      }
      case 1: {
        body += Weight(w, n, in.width) + Weight(w, n2, in.width);
        std::string r = fresh();
        body += "  " + r + ":2 = kiln.fused_matmul " + in.name + " weights(%w" + std::to_string(w - 2) + ", %w" +
                std::to_string(w - 1) + ") {epilogue = #kiln<epilogue none>} : (" + Act(in.width) + ", " +
                wtype(n, in.width) + ", " + wtype(n2, in.width) + ") -> (" + Act(n) + ", " + Act(n2) + ")\n";
        vals.push_back({r + "#0", n});
        vals.push_back({r + "#1", n2});
        break;
      }
      case 2: {
        body += Weight(w, in.width, 0);
        std::string r = fresh();
        body += "  " + r + " = kiln.rms_norm " + in.name + ", %w" + std::to_string(w - 1) +
                " {eps = 1.0e-5 : f64} : (" + Act(in.width) + ", " + wtype(in.width, 0) + ") -> " + Act(in.width) +
                "\n";
        vals.push_back({r, in.width});
        break;
      }
      case 3:
      case 4: {
        std::vector<Val> same;
        for (const Val& c : vals) {
          if (c.width == in.width) same.push_back(c);
        }
        const Val other = same[pick(same.size())];
        std::string r = fresh();
        body += "  " + r + " = kiln." + (pick(2) ? "add " : "mul ") + in.name + ", " + other.name + " : " +
                Act(in.width) + "\n";
        vals.push_back({r, in.width});
        break;
      }
      default: {
        std::string r = fresh();
        if (pick(3) == 0) {
          body += "  " + r + " = kiln.argmax " + in.name + " : (" + Act(in.width) + ") -> tensor<?xi32>\n";
          vals.push_back({r, 0});
        } else {
          body += "  " + r + " = kiln.silu " + in.name + " : " + Act(in.width) + "\n";
          vals.push_back({r, in.width});
        }
      }
    }
  }
  const Val a = vals.back(), b = vals[1 + pick(vals.size() - 1)];
  auto type = [&](const Val& x) { return x.width ? Act(x.width) : std::string("tensor<?xi32>"); };
  return "func.func @random(%x: " + Act(16) + ") -> (" + type(a) + ", " + type(b) + ") {\n" + body + "  return " +
         a.name + ", " + b.name + " : " + type(a) + ", " + type(b) + "\n}\n";
}

TEST(PlanMemory, LlamaStepDefaultAlignment) { PlanAndCheck(Step(3), {1, 2, 4, 8, 16, 32, 64, 128, 256, 512}, 256); }

TEST(PlanMemory, LlamaStepOddBucketsSmallAlignment) { PlanAndCheck(Step(2), {1, 3, 7, 100}, 16); }

TEST(PlanMemory, RandomGraphs) {
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    PlanAndCheck(RandomGraph(seed), {1, 5, 64}, seed % 2 ? 256 : 4);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
