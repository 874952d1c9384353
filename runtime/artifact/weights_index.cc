#include "runtime/artifact/weights_index.h"

#include <algorithm>
#include <map>
#include <optional>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/artifact/storage_type.h"
#include "runtime/util/json.h"

namespace kiln {
namespace {

constexpr size_t kMaxWeightName = 255;

std::optional<uint64_t> NonNegativeInt(const JsonValue* v) {
  if (v == nullptr || !v->is_integer() || *v->int_value() < 0) return std::nullopt;
  return static_cast<uint64_t>(*v->int_value());
}

// Errors about an entry whose name is not known (yet) name its position.
absl::Status EntryError(size_t index, std::string_view problem) {
  return absl::InvalidArgumentError(absl::StrFormat("tensor #%d: %s", index, problem));
}

absl::Status TensorError(std::string_view name, std::string_view problem) {
  return absl::InvalidArgumentError(absl::StrFormat("tensor '%s': %s", name, problem));
}

absl::StatusOr<ArtifactWeight> DecodeEntry(size_t index, const JsonValue& entry) {
  if (!entry.is_object()) return EntryError(index, "not an object");
  ArtifactWeight w;
  const JsonValue* name = entry.Find("name");
  if (name == nullptr || !name->is_string()) return EntryError(index, "'name' must be a string");
  if (absl::Status s = CheckWeightName(name->string_value()); !s.ok())
    return EntryError(index, std::string(s.message()));
  w.name = name->string_value();
  for (const auto& [key, value] : entry.members()) {
    if (key != "name" && key != "storage" && key != "shape" && key != "offset" && key != "nbytes") {
      return TensorError(w.name, absl::StrFormat("unknown key '%s'", absl::CHexEscape(key)));
    }
  }

  const JsonValue* storage = entry.Find("storage");
  if (storage == nullptr || !storage->is_string()) return TensorError(w.name, "'storage' must be a string");
  w.storage = storage->string_value();

  const JsonValue* shape = entry.Find("shape");
  if (shape == nullptr || !shape->is_array()) return TensorError(w.name, "'shape' must be an array");
  for (const JsonValue& d : shape->array()) {
    if (!d.is_integer()) return TensorError(w.name, "'shape' must hold integers");
    w.shape.push_back(*d.int_value());
  }

  const std::optional<uint64_t> offset = NonNegativeInt(entry.Find("offset"));
  const std::optional<uint64_t> nbytes = NonNegativeInt(entry.Find("nbytes"));
  if (!offset || !nbytes) {
    return TensorError(w.name, "'offset' and 'nbytes' must be non-negative integers");
  }
  w.offset = *offset;
  w.nbytes = *nbytes;
  return w;
}

// Storage, size, alignment and bounds of one decoded entry.
absl::Status CheckExtent(const ArtifactWeight& w, uint64_t section_size) {
  absl::StatusOr<uint64_t> expected = StorageBytes(w.storage, w.shape);
  if (!expected.ok()) return TensorError(w.name, std::string(expected.status().message()));
  if (*expected != w.nbytes) {
    return TensorError(w.name, absl::StrFormat("nbytes %d does not match shape [%s] stored as %s (%d bytes)", w.nbytes,
                                               absl::StrJoin(w.shape, ", "), w.storage, *expected));
  }
  if (w.offset % kWeightAlignment != 0) {
    return TensorError(w.name, absl::StrFormat("offset %d is not a multiple of %d", w.offset, kWeightAlignment));
  }
  if (w.offset > section_size || w.nbytes > section_size - w.offset) {
    return TensorError(w.name, absl::StrFormat("bytes [%d, +%d) run past the end of the weights section (%d bytes)",
                                               w.offset, w.nbytes, section_size));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckWeightName(std::string_view name) {
  if (name.empty() || name.size() > kMaxWeightName) {
    return absl::InvalidArgumentError(
        absl::StrFormat("weight name of %d bytes (1 to %d allowed)", name.size(), kMaxWeightName));
  }
  for (char c : name) {
    if (c <= 0x20 || c >= 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrFormat("weight name '%s' holds byte 0x%02x (printable ASCII without spaces allowed)",
                          absl::CHexEscape(std::string(name)), static_cast<uint8_t>(c)));
    }
  }
  return absl::OkStatus();
}

std::string EncodeWeightsIndex(std::span<const ArtifactWeight> weights) {
  JsonValue tensors = JsonValue::MakeArray();
  for (const ArtifactWeight& w : weights) {
    JsonValue shape = JsonValue::MakeArray();
    for (int64_t d : w.shape) shape.array().push_back(JsonValue::Int(d));
    JsonValue entry = JsonValue::MakeObject();
    entry.Set("name", JsonValue::String(w.name));
    entry.Set("storage", JsonValue::String(w.storage));
    entry.Set("shape", std::move(shape));
    entry.Set("offset", JsonValue::Int(static_cast<int64_t>(w.offset)));
    entry.Set("nbytes", JsonValue::Int(static_cast<int64_t>(w.nbytes)));
    tensors.array().push_back(std::move(entry));
  }
  JsonValue root = JsonValue::MakeObject();
  root.Set("version", JsonValue::Int(kWeightsIndexVersion));
  root.Set("tensors", std::move(tensors));
  return ToJson(root);
}

absl::StatusOr<std::vector<ArtifactWeight>> DecodeWeightsIndex(std::span<const uint8_t> index,
                                                               std::span<const uint8_t> weights_section) {
  absl::StatusOr<JsonValue> root =
      ParseJson(std::string_view(reinterpret_cast<const char*>(index.data()), index.size()));
  if (!root.ok()) return absl::InvalidArgumentError(absl::StrCat("not valid JSON: ", root.status().message()));
  const JsonValue* version = root->is_object() ? root->Find("version") : nullptr;
  const JsonValue* tensors = root->is_object() ? root->Find("tensors") : nullptr;
  if (version == nullptr || tensors == nullptr || !tensors->is_array() || root->size() != 2) {
    return absl::InvalidArgumentError("expected an object with exactly 'version' and 'tensors' (an array)");
  }
  if (!version->is_integer() || *version->int_value() != kWeightsIndexVersion) {
    return absl::InvalidArgumentError(absl::StrFormat("index version %s is not supported (this build reads version %d)",
                                                      ToJson(*version), kWeightsIndexVersion));
  }

  std::vector<ArtifactWeight> weights;
  std::map<std::string, size_t, std::less<>> by_name;
  for (size_t i = 0; i < tensors->array().size(); ++i) {
    absl::StatusOr<ArtifactWeight> w = DecodeEntry(i, tensors->array()[i]);
    if (!w.ok()) return w.status();
    if (!by_name.emplace(w->name, i).second) return TensorError(w->name, "listed twice");
    if (absl::Status s = CheckExtent(*w, weights_section.size()); !s.ok()) return s;
    w->data = weights_section.subspan(w->offset, w->nbytes);
    weights.push_back(*std::move(w));
  }

  std::vector<const ArtifactWeight*> by_offset;
  for (const ArtifactWeight& w : weights) {
    if (w.nbytes > 0) by_offset.push_back(&w);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const ArtifactWeight* a, const ArtifactWeight* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const ArtifactWeight& prev = *by_offset[i - 1];
    const ArtifactWeight& next = *by_offset[i];
    if (next.offset < prev.offset + prev.nbytes) {
      return TensorError(next.name, absl::StrFormat("bytes [%d, +%d) overlap tensor '%s' [%d, +%d)", next.offset,
                                                    next.nbytes, prev.name, prev.offset, prev.nbytes));
    }
  }
  return weights;
}

}  // namespace kiln
