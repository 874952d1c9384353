#include "runtime/executor/plan.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln {
namespace {

absl::Status Bad(const std::string& what) { return absl::InvalidArgumentError(absl::StrCat("plan: ", what)); }

absl::StatusOr<std::vector<int64_t>> Ints(const JsonValue* v, const std::string& what) {
  if (v == nullptr || !v->is_array()) return Bad(what + " must be an array of integers");
  std::vector<int64_t> out;
  for (const JsonValue& e : v->array()) {
    std::optional<int64_t> i = e.int_value();
    if (!e.is_integer() || !i) return Bad(what + " must be an array of integers");
    out.push_back(*i);
  }
  return out;
}

absl::StatusOr<std::string> Str(const JsonValue& obj, std::string_view key, const std::string& what) {
  const JsonValue* v = obj.Find(key);
  if (v == nullptr || !v->is_string()) return Bad(absl::StrCat(what, ": '", std::string(key), "' must be a string"));
  return v->string_value();
}

absl::StatusOr<PlanBinding> ParseBinding(const JsonValue& b, const std::string& where, size_t n_buckets,
                                         const std::vector<int64_t>& arena_bytes) {
  if (!b.is_object()) return Bad(where + ": a binding must be an object");
  PlanBinding out;
  absl::StatusOr<std::string> role = Str(b, "role", where);
  if (!role.ok()) return role.status();
  out.role = *role;
  const std::string at = absl::StrCat(where, ", binding '", out.role, "'");
  if (const JsonValue* a = b.Find("arena")) {
    absl::StatusOr<std::vector<int64_t>> offsets = Ints(a, at + ": arena");
    if (!offsets.ok()) return offsets.status();
    if (offsets->size() != n_buckets) {
      return Bad(absl::StrFormat("%s: %d arena offsets for %d buckets", at, offsets->size(), n_buckets));
    }
    for (size_t k = 0; k < n_buckets; ++k) {
      if ((*offsets)[k] < 0 || (*offsets)[k] >= arena_bytes[k]) {
        return Bad(absl::StrFormat("%s: arena offset %d outside the %d-byte arena of bucket %d", at, (*offsets)[k],
                                   arena_bytes[k], k));
      }
    }
    out.kind = PlanBinding::Kind::kArena;
    out.arena = *std::move(offsets);
  } else if (b.Find("weight")) {
    absl::StatusOr<std::string> w = Str(b, "weight", at);
    if (!w.ok()) return w.status();
    out.kind = PlanBinding::Kind::kWeight;
    out.name = *w;
  } else if (b.Find("input")) {
    absl::StatusOr<std::string> in = Str(b, "input", at);
    if (!in.ok()) return in.status();
    out.kind = PlanBinding::Kind::kInput;
    out.name = *in;
  } else {
    return Bad(at + ": needs one of arena, weight, input");
  }
  return out;
}

}  // namespace

const PlanBinding* PlanLaunch::Find(std::string_view role) const {
  for (const PlanBinding& b : bindings) {
    if (b.role == role) return &b;
  }
  return nullptr;
}

absl::StatusOr<int64_t> PlanLaunch::Int(std::string_view key) const {
  const JsonValue* v = constants.Find(key);
  if (v == nullptr || !v->is_integer() || !v->int_value()) {
    return Bad(absl::StrCat("launch '", kernel, "': constant '", std::string(key), "' must be an integer"));
  }
  return *v->int_value();
}

absl::StatusOr<double> PlanLaunch::Float(std::string_view key) const {
  const JsonValue* v = constants.Find(key);
  if (v == nullptr || !v->is_number()) {
    return Bad(absl::StrCat("launch '", kernel, "': constant '", std::string(key), "' must be a number"));
  }
  return v->number();
}

absl::StatusOr<std::string> PlanLaunch::String(std::string_view key) const {
  return Str(constants, key, absl::StrCat("launch '", kernel, "'"));
}

absl::StatusOr<std::vector<int64_t>> PlanLaunch::IntList(std::string_view key) const {
  return Ints(constants.Find(key), absl::StrCat("launch '", kernel, "': constant '", std::string(key), "'"));
}

std::optional<size_t> Plan::BucketFor(int64_t tokens) const {
  for (size_t k = 0; k < buckets.size(); ++k) {
    if (buckets[k] >= tokens) return k;
  }
  return std::nullopt;
}

const PlanWeight* Plan::FindWeight(std::string_view name) const {
  for (const PlanWeight& w : weights) {
    if (w.name == name) return &w;
  }
  return nullptr;
}

absl::StatusOr<Plan> ParsePlan(std::string_view json) {
  absl::StatusOr<JsonValue> root = ParseJson(json);
  if (!root.ok()) return Bad(absl::StrCat("not valid JSON: ", root.status().message()));
  if (!root->is_object()) return Bad("the document must be an object");
  absl::StatusOr<std::string> format = Str(*root, "format", "document");
  if (!format.ok()) return format.status();
  if (*format != "kiln-plan-v1") return Bad(absl::StrCat("unsupported format '", *format, "' (reads kiln-plan-v1)"));

  Plan plan;
  absl::StatusOr<std::string> fn = Str(*root, "function", "document");
  if (!fn.ok()) return fn.status();
  plan.function = *fn;
  if (const JsonValue* m = root->Find("model")) plan.model = *m;
  absl::StatusOr<std::vector<int64_t>> buckets = Ints(root->Find("buckets"), "buckets");
  absl::StatusOr<std::vector<int64_t>> arena = Ints(root->Find("arena_bytes"), "arena_bytes");
  if (!buckets.ok()) return buckets.status();
  if (!arena.ok()) return arena.status();
  if (buckets->empty() || buckets->size() != arena->size()) {
    return Bad("buckets and arena_bytes must be non-empty and of equal length");
  }
  for (size_t k = 0; k < buckets->size(); ++k) {
    if ((*buckets)[k] <= 0 || (k > 0 && (*buckets)[k] <= (*buckets)[k - 1]) || (*arena)[k] <= 0) {
      return Bad("buckets must increase and every arena must be positive");
    }
  }
  plan.buckets = *std::move(buckets);
  plan.arena_bytes = *std::move(arena);

  const JsonValue* results = root->Find("results");
  if (results == nullptr || !results->is_array() || results->array().empty()) return Bad("results must be a non-empty array");
  for (const JsonValue& r : results->array()) {
    absl::StatusOr<PlanBinding> b = ParseBinding(r, "results", plan.buckets.size(), plan.arena_bytes);
    if (!b.ok()) return b.status();
    plan.results.push_back(*std::move(b));
  }

  const JsonValue* inputs = root->Find("inputs");
  if (inputs == nullptr || !inputs->is_array()) return Bad("inputs must be an array");
  bool have_pool = false;
  for (const JsonValue& in : inputs->array()) {
    if (!in.is_object()) return Bad("each input must be an object");
    absl::StatusOr<std::string> role = Str(in, "role", "input");
    absl::StatusOr<std::string> kind = Str(in, "kind", "input");
    if (!role.ok()) return role.status();
    if (!kind.ok()) return kind.status();
    plan.input_roles.push_back(*role);
    if (*kind == "page_pool") {
      have_pool = true;
      for (auto [key, field] : {std::pair<const char*, int64_t*>{"layers", &plan.pool.layers},
                                {"kv_heads", &plan.pool.kv_heads},
                                {"head_dim", &plan.pool.head_dim},
                                {"page_size", &plan.pool.page_size},
                                {"max_tokens", &plan.pool.max_tokens}}) {
        const JsonValue* v = in.Find(key);
        if (v == nullptr || !v->int_value() || *v->int_value() <= 0) {
          return Bad(absl::StrCat("page pool: '", key, "' must be a positive integer"));
        }
        *field = *v->int_value();
      }
      if (in.Find("kv_type")) {
        absl::StatusOr<std::string> kv_type = Str(in, "kv_type", "page pool");
        if (!kv_type.ok()) return kv_type.status();
        if (*kv_type != "f32" && *kv_type != "f16") {
          return Bad(absl::StrCat("page pool: kv_type '", *kv_type, "' is not f32 or f16"));
        }
        plan.pool.f16 = *kv_type == "f16";
      }
    }
  }
  if (!have_pool) return Bad("no page_pool input");

  const JsonValue* weights = root->Find("weights");
  if (weights == nullptr || !weights->is_array()) return Bad("weights must be an array");
  std::set<std::string> names;
  for (const JsonValue& w : weights->array()) {
    if (!w.is_object()) return Bad("each weight must be an object");
    PlanWeight pw;
    absl::StatusOr<std::string> name = Str(w, "name", "weight");
    absl::StatusOr<std::string> storage = Str(w, "storage", "weight");
    if (!name.ok()) return name.status();
    if (!storage.ok()) return storage.status();
    pw.name = *name;
    pw.storage = *storage;
    absl::StatusOr<std::vector<int64_t>> shape = Ints(w.Find("shape"), "weight '" + pw.name + "': shape");
    if (!shape.ok()) return shape.status();
    if (shape->empty() || shape->size() > 2 || std::any_of(shape->begin(), shape->end(), [](int64_t d) { return d <= 0; })) {
      return Bad("weight '" + pw.name + "': shape must be 1-D or 2-D with positive sizes");
    }
    pw.shape = *std::move(shape);
    if (w.Find("source")) {
      absl::StatusOr<std::string> source = Str(w, "source", "weight '" + pw.name + "'");
      if (!source.ok()) return source.status();
      pw.source = *source;
    }
    if (!names.insert(pw.name).second) return Bad("weight '" + pw.name + "' is listed twice");
    plan.weights.push_back(std::move(pw));
  }

  const JsonValue* launches = root->Find("launches");
  if (launches == nullptr || !launches->is_array() || launches->array().empty()) {
    return Bad("launches must be a non-empty array");
  }
  std::set<std::string> roles(plan.input_roles.begin(), plan.input_roles.end());
  for (size_t k = 0; k < launches->array().size(); ++k) {
    const JsonValue& l = launches->array()[k];
    if (!l.is_object()) return Bad("each launch must be an object");
    PlanLaunch pl;
    absl::StatusOr<std::string> kernel = Str(l, "kernel", absl::StrCat("launch #", k));
    if (!kernel.ok()) return kernel.status();
    pl.kernel = *kernel;
    pl.op = pl.kernel.substr(0, pl.kernel.find('.'));
    const std::string where = absl::StrCat("launch #", k, " '", pl.kernel, "'");
    const JsonValue* bindings = l.Find("bindings");
    if (bindings == nullptr || !bindings->is_array()) return Bad(where + ": bindings must be an array");
    for (const JsonValue& b : bindings->array()) {
      absl::StatusOr<PlanBinding> pb = ParseBinding(b, where, plan.buckets.size(), plan.arena_bytes);
      if (!pb.ok()) return pb.status();
      if (pb->kind == PlanBinding::Kind::kWeight && !names.count(pb->name)) {
        return Bad(absl::StrCat(where, ": weight '", pb->name, "' is not among the plan's weights"));
      }
      if (pb->kind == PlanBinding::Kind::kInput && !roles.count(pb->name)) {
        return Bad(absl::StrCat(where, ": input '", pb->name, "' is not among the step's inputs"));
      }
      pl.bindings.push_back(*std::move(pb));
    }
    const JsonValue* constants = l.Find("constants");
    if (constants == nullptr || !constants->is_object()) return Bad(where + ": constants must be an object");
    pl.constants = *constants;
    plan.launches.push_back(std::move(pl));
  }
  return plan;
}

}  // namespace kiln
