// The launch plan as the runtime reads it: the "kiln-plan-v1" JSON that the
// compiler exports from kiln.plan (compiler/PlanExport.cpp). Parsing checks
// everything the executor relies on, so a bad plan is an error here and
// never a wrong memory access later.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/util/json.h"

namespace kiln {

struct PlanBinding {
  enum class Kind { kArena, kWeight, kInput };
  std::string role;
  Kind kind = Kind::kArena;
  std::vector<int64_t> arena;  // kArena: byte offset per bucket
  std::string name;            // kWeight: tensor name; kInput: the input's role
};

struct PlanLaunch {
  std::string kernel;  // "fused_matmul.norm.silu_mul.q4_k"
  std::string op;      // the kernel name up to the first '.': "fused_matmul"
  std::vector<PlanBinding> bindings;
  JsonValue constants;

  const PlanBinding* Find(std::string_view role) const;
  // A constant, or an error naming the launch and the key.
  absl::StatusOr<int64_t> Int(std::string_view key) const;
  absl::StatusOr<double> Float(std::string_view key) const;
  absl::StatusOr<std::string> String(std::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> IntList(std::string_view key) const;
};

struct PlanWeight {
  std::string name;
  std::string storage;        // "f32", "q4_k", "int4:g128", ...
  std::vector<int64_t> shape; // [rows, cols] or [n]
  std::string source;         // the file's storage where the compiler changed it, else empty
};

struct PlanPagePool {
  int64_t layers = 0, kv_heads = 0, head_dim = 0, page_size = 0, max_tokens = 0;
  bool f16 = false;  // kv_type: "f16" (halves) or "f32" (plans before kv_type: f32)
  int64_t element_bytes() const { return f16 ? 2 : 4; }
  // K and V of every layer for one position.
  int64_t bytes_per_token() const { return 2 * layers * kv_heads * head_dim * element_bytes(); }
  int64_t page_bytes() const { return bytes_per_token() * page_size; }
};

struct Plan {
  std::string function;
  JsonValue model;  // kiln.model: architecture, n_vocab, ...
  std::vector<int64_t> buckets;
  std::vector<int64_t> arena_bytes;
  std::vector<PlanBinding> results;
  std::vector<std::string> input_roles;  // in argument order
  PlanPagePool pool;
  std::vector<PlanWeight> weights;
  std::vector<PlanLaunch> launches;

  // The smallest bucket holding `tokens`, or nullopt if none does.
  std::optional<size_t> BucketFor(int64_t tokens) const;
  const PlanWeight* FindWeight(std::string_view name) const;
};

absl::StatusOr<Plan> ParsePlan(std::string_view json);

}  // namespace kiln
