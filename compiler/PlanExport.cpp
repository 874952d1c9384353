//===- PlanExport.cpp - kiln.plan to the runtime's JSON plan --------------===//

#include "compiler/PlanExport.h"

#include "absl/strings/str_cat.h"
#include "dialects/KilnDialect.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "runtime/util/json.h"

namespace kiln::compiler {
namespace {

std::string StorageName(mlir::kiln::StorageAttr s) {
  std::string name = mlir::kiln::stringifyStorageKind(s.getKind()).str();
  if (s.getGroup() != 0) absl::StrAppend(&name, ":g", s.getGroup());
  return name;
}

// Plan attributes are integers, floats, strings, arrays and dictionaries;
// anything else is printed as MLIR text, so nothing is dropped silently.
JsonValue ToJsonValue(mlir::Attribute attr) {
  if (auto i = llvm::dyn_cast<mlir::IntegerAttr>(attr)) return JsonValue::Int(i.getInt());
  if (auto f = llvm::dyn_cast<mlir::FloatAttr>(attr)) return JsonValue::Number(f.getValueAsDouble());
  if (auto b = llvm::dyn_cast<mlir::BoolAttr>(attr)) return JsonValue::Bool(b.getValue());
  if (auto s = llvm::dyn_cast<mlir::StringAttr>(attr)) return JsonValue::String(s.str());
  if (auto a = llvm::dyn_cast<mlir::DenseI64ArrayAttr>(attr)) {
    JsonValue out = JsonValue::MakeArray();
    for (int64_t v : a.asArrayRef()) out.array().push_back(JsonValue::Int(v));
    return out;
  }
  if (auto a = llvm::dyn_cast<mlir::ArrayAttr>(attr)) {
    JsonValue out = JsonValue::MakeArray();
    for (mlir::Attribute e : a) out.array().push_back(ToJsonValue(e));
    return out;
  }
  if (auto d = llvm::dyn_cast<mlir::DictionaryAttr>(attr)) {
    JsonValue out = JsonValue::MakeObject();
    for (mlir::NamedAttribute n : d) out.Set(n.getName().str(), ToJsonValue(n.getValue()));
    return out;
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  attr.print(os);
  return JsonValue::String(os.str());
}

JsonValue IntArray(llvm::ArrayRef<int64_t> values) {
  JsonValue out = JsonValue::MakeArray();
  for (int64_t v : values) out.array().push_back(JsonValue::Int(v));
  return out;
}

}  // namespace

absl::StatusOr<std::string> ExportPlan(mlir::ModuleOp module) {
  mlir::kiln::PlanOp plan;
  int plans = 0;
  module.walk([&](mlir::kiln::PlanOp p) {
    plan = p;
    ++plans;
  });
  if (plans != 1) {
    return absl::FailedPreconditionError(absl::StrCat("expected one kiln.plan after kiln-emit-plan, found ", plans));
  }
  auto func = module.lookupSymbol<mlir::func::FuncOp>(plan.getFunc());
  if (!func) return absl::FailedPreconditionError("the plan's function is missing");

  JsonValue root = JsonValue::MakeObject();
  root.Set("format", JsonValue::String("kiln-plan-v1"));
  root.Set("function", JsonValue::String(plan.getFunc().str()));
  if (auto model = module->getAttrOfType<mlir::DictionaryAttr>("kiln.model")) root.Set("model", ToJsonValue(model));
  root.Set("buckets", IntArray(plan.getBuckets()));
  root.Set("arena_bytes", IntArray(plan.getArenaBytes()));
  root.Set("results", ToJsonValue(plan.getResults()));

  JsonValue inputs = JsonValue::MakeArray();
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto role = func.getArgAttrOfType<mlir::StringAttr>(i, "kiln.role");
    JsonValue in = JsonValue::MakeObject();
    in.Set("role", JsonValue::String(role ? role.str() : ""));
    mlir::Type type = func.getArgument(i).getType();
    if (auto pool = llvm::dyn_cast<mlir::kiln::PagePoolType>(type)) {
      in.Set("kind", JsonValue::String("page_pool"));
      in.Set("layers", JsonValue::Int(pool.getLayers()));
      in.Set("kv_heads", JsonValue::Int(pool.getKvHeads()));
      in.Set("head_dim", JsonValue::Int(pool.getHeadDim()));
      in.Set("page_size", JsonValue::Int(pool.getPageSize()));
      std::string element;
      llvm::raw_string_ostream(element) << pool.getElementType();
      in.Set("kv_type", JsonValue::String(element));
      if (auto max = func.getArgAttrOfType<mlir::IntegerAttr>(i, "kiln.max_tokens")) {
        in.Set("max_tokens", JsonValue::Int(max.getInt()));
      }
    } else if (auto cache = llvm::dyn_cast<mlir::kiln::KVCacheType>(type)) {
      return absl::FailedPreconditionError("the step still reads a contiguous KV cache: run kiln-paged-attention");
    } else {
      auto t = llvm::cast<mlir::RankedTensorType>(type);
      in.Set("kind", JsonValue::String("tensor"));
      in.Set("rank", JsonValue::Int(t.getRank()));
    }
    inputs.array().push_back(std::move(in));
  }
  root.Set("inputs", std::move(inputs));

  JsonValue weights = JsonValue::MakeArray();
  func.walk([&](mlir::kiln::WeightOp w) {
    auto type = llvm::cast<mlir::kiln::WeightType>(w.getType());
    JsonValue entry = JsonValue::MakeObject();
    entry.Set("name", JsonValue::String(w.getName().str()));
    entry.Set("storage", JsonValue::String(StorageName(type.getStorage())));
    entry.Set("shape", IntArray(type.getShape()));
    if (w.getSource()) entry.Set("source", JsonValue::String(StorageName(*w.getSource())));
    weights.array().push_back(std::move(entry));
  });
  root.Set("weights", std::move(weights));

  JsonValue launches = JsonValue::MakeArray();
  for (auto launch : plan.getBody().front().getOps<mlir::kiln::LaunchOp>()) {
    JsonValue l = JsonValue::MakeObject();
    l.Set("kernel", JsonValue::String(launch.getKernel().str()));
    l.Set("bindings", ToJsonValue(launch.getBindings()));
    l.Set("constants", ToJsonValue(launch.getConstants()));
    launches.array().push_back(std::move(l));
  }
  root.Set("launches", std::move(launches));
  return ToJson(root, /*pretty=*/true);
}

}  // namespace kiln::compiler
