#include "runtime/formats/safetensors.h"

#include <algorithm>
#include <filesystem>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/util/json.h"
#include "runtime/util/mapped_file.h"

namespace kiln {
namespace {

struct DtypeInfo {
  SafetensorsDtype dtype;
  std::string_view name;
  int64_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {SafetensorsDtype::kF64, "F64", 8},         {SafetensorsDtype::kF32, "F32", 4},
    {SafetensorsDtype::kF16, "F16", 2},         {SafetensorsDtype::kBF16, "BF16", 2},
    {SafetensorsDtype::kI64, "I64", 8},         {SafetensorsDtype::kI32, "I32", 4},
    {SafetensorsDtype::kI16, "I16", 2},         {SafetensorsDtype::kI8, "I8", 1},
    {SafetensorsDtype::kU8, "U8", 1},           {SafetensorsDtype::kBool, "BOOL", 1},
    {SafetensorsDtype::kF8E4M3, "F8_E4M3", 1},  {SafetensorsDtype::kF8E5M2, "F8_E5M2", 1},
};

const DtypeInfo& GetDtypeInfo(SafetensorsDtype dtype) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.dtype == dtype) return info;
  }
  return kDtypes[0];  // unreachable: every enumerator is in the table
}

std::string KnownDtypeList() {
  return absl::StrJoin(kDtypes, ", ", [](std::string* out, const DtypeInfo& info) {
    absl::StrAppend(out, std::string(info.name));
  });
}

absl::Status Invalid(std::string_view file, std::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(file), ": ", std::string(problem)));
}

absl::Status InvalidTensor(std::string_view file, std::string_view tensor, std::string_view problem) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: tensor '%s': %s", file, tensor, problem));
}

std::string Article(JsonValue::Type type) {
  const std::string_view name = JsonTypeName(type);
  const bool vowel = name[0] == 'a' || name[0] == 'o';
  return absl::StrCat(vowel ? "an " : "a ", std::string(name));
}

// Reads the fields of one header entry into `tensor` (offsets still unchecked
// against the data section).
absl::Status ParseTensorEntry(std::string_view file, const std::string& name, const JsonValue& entry,
                              SafetensorsTensor& tensor) {
  tensor.name = name;
  if (!entry.is_object()) {
    return InvalidTensor(file, name, absl::StrCat("header entry is ", Article(entry.type()),
                                                  ", not an object"));
  }
  const JsonValue* dtype = entry.Find("dtype");
  if (dtype == nullptr) return InvalidTensor(file, name, "missing 'dtype'");
  if (!dtype->is_string()) {
    return InvalidTensor(file, name, absl::StrCat("dtype is ", Article(dtype->type()), ", not a string"));
  }
  const std::optional<SafetensorsDtype> parsed_dtype = ParseSafetensorsDtype(dtype->string_value());
  if (!parsed_dtype.has_value()) {
    return InvalidTensor(file, name, absl::StrFormat("unknown dtype '%s' (known: %s)",
                                                     dtype->string_value(), KnownDtypeList()));
  }
  tensor.dtype = *parsed_dtype;

  const JsonValue* shape = entry.Find("shape");
  if (shape == nullptr) return InvalidTensor(file, name, "missing 'shape'");
  if (!shape->is_array()) {
    return InvalidTensor(file, name, absl::StrCat("shape is ", Article(shape->type()), ", not an array"));
  }
  tensor.num_elements = 1;
  for (const JsonValue& dim : shape->array()) {
    if (!dim.is_integer()) {
      return InvalidTensor(file, name, absl::StrFormat("shape %s has a non-integer entry %s",
                                                       ToJson(*shape), ToJson(dim)));
    }
    if (*dim.int_value() < 0) {
      return InvalidTensor(file, name, absl::StrFormat("shape %s has a negative entry %d",
                                                       ToJson(*shape), *dim.int_value()));
    }
    if (__builtin_mul_overflow(tensor.num_elements, *dim.int_value(), &tensor.num_elements)) {
      return InvalidTensor(file, name, absl::StrFormat("shape %s has more elements than fit in 64 bits",
                                                       ToJson(*shape)));
    }
    tensor.shape.push_back(*dim.int_value());
  }
  int64_t byte_size;
  if (__builtin_mul_overflow(tensor.num_elements, SafetensorsDtypeSize(tensor.dtype), &byte_size)) {
    return InvalidTensor(file, name, absl::StrFormat("shape %s of %s has a byte size that overflows 64 bits",
                                                     ToJson(*shape), SafetensorsDtypeName(tensor.dtype)));
  }

  const JsonValue* offsets = entry.Find("data_offsets");
  if (offsets == nullptr) return InvalidTensor(file, name, "missing 'data_offsets'");
  const bool pair_of_offsets = offsets->is_array() && offsets->size() == 2 &&
                               offsets->array()[0].is_integer() && *offsets->array()[0].int_value() >= 0 &&
                               offsets->array()[1].is_integer() && *offsets->array()[1].int_value() >= 0;
  if (!pair_of_offsets) {
    return InvalidTensor(file, name, absl::StrFormat("data_offsets must be [begin, end] with two "
                                                     "non-negative integers, got %s",
                                                     ToJson(*offsets)));
  }
  tensor.data_begin = static_cast<uint64_t>(*offsets->array()[0].int_value());
  tensor.data_end = static_cast<uint64_t>(*offsets->array()[1].int_value());
  if (tensor.data_begin > tensor.data_end) {
    return InvalidTensor(file, name, absl::StrFormat("data_offsets [%d, %d] has begin > end",
                                                     tensor.data_begin, tensor.data_end));
  }
  if (tensor.data_end - tensor.data_begin != static_cast<uint64_t>(byte_size)) {
    return InvalidTensor(file, name, absl::StrFormat("data_offsets [%d, %d] hold %d bytes but %s shape "
                                                     "[%s] needs %d",
                                                     tensor.data_begin, tensor.data_end,
                                                     tensor.data_end - tensor.data_begin,
                                                     SafetensorsDtypeName(tensor.dtype),
                                                     absl::StrJoin(tensor.shape, ", "), byte_size));
  }
  return absl::OkStatus();
}

absl::Status ParseMetadata(std::string_view file, const JsonValue& metadata,
                           std::vector<std::pair<std::string, std::string>>& out) {
  if (!metadata.is_object()) {
    return Invalid(file, absl::StrCat("__metadata__ is ", Article(metadata.type()),
                                      ", not an object of strings"));
  }
  for (const auto& [key, value] : metadata.members()) {
    if (!value.is_string()) {
      return Invalid(file, absl::StrFormat("__metadata__ value for '%s' is %s, not a string", key,
                                           Article(value.type())));
    }
    out.emplace_back(key, value.string_value());
  }
  return absl::OkStatus();
}

// The format requires the tensors to tile the data section exactly: no
// overlaps, no holes, nothing after the last tensor.
absl::Status CheckTiling(std::string_view file, const std::vector<SafetensorsTensor>& tensors,
                         uint64_t data_size) {
  std::vector<const SafetensorsTensor*> by_offset;
  by_offset.reserve(tensors.size());
  for (const SafetensorsTensor& tensor : tensors) {
    if (tensor.data_end > data_size) {
      return InvalidTensor(file, tensor.name,
                           absl::StrFormat("data_offsets [%d, %d] run past the end of the data section "
                                           "(%d bytes)",
                                           tensor.data_begin, tensor.data_end, data_size));
    }
    by_offset.push_back(&tensor);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const SafetensorsTensor* a, const SafetensorsTensor* b) {
    return std::make_pair(a->data_begin, a->data_end) < std::make_pair(b->data_begin, b->data_end);
  });
  uint64_t covered = 0;  // the data section is tiled up to here
  const SafetensorsTensor* previous = nullptr;
  for (const SafetensorsTensor* tensor : by_offset) {
    if (tensor->data_begin > covered) {
      return InvalidTensor(file, tensor->name,
                           absl::StrFormat("data section bytes [%d, %d) before it belong to no tensor "
                                           "(safetensors forbids holes)",
                                           covered, tensor->data_begin));
    }
    if (tensor->data_begin < covered) {
      return InvalidTensor(file, tensor->name,
                           absl::StrFormat("data_offsets [%d, %d] overlap tensor '%s' [%d, %d] "
                                           "(safetensors forbids overlapping tensors)",
                                           tensor->data_begin, tensor->data_end, previous->name,
                                           previous->data_begin, previous->data_end));
    }
    covered = tensor->data_end;
    if (tensor->data_end > tensor->data_begin) previous = tensor;
  }
  if (covered != data_size) {
    return Invalid(file, absl::StrFormat("data section bytes [%d, %d) after the last tensor belong to no "
                                         "tensor (safetensors forbids holes)",
                                         covered, data_size));
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view SafetensorsDtypeName(SafetensorsDtype dtype) { return GetDtypeInfo(dtype).name; }

int64_t SafetensorsDtypeSize(SafetensorsDtype dtype) { return GetDtypeInfo(dtype).size; }

std::optional<SafetensorsDtype> ParseSafetensorsDtype(std::string_view name) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.name == name) return info.dtype;
  }
  return std::nullopt;
}

SafetensorsFile::~SafetensorsFile() = default;

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  absl::StatusOr<std::unique_ptr<MappedFile>> mapped = MappedFile::Open(path);
  if (!mapped.ok()) return mapped.status();
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = Parse((*mapped)->bytes(), path);
  if (!file.ok()) return file.status();
  (*file)->file_ = *std::move(mapped);
  return file;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Parse(std::span<const uint8_t> bytes,
                                                                       std::string_view name) {
  if (bytes.size() < 8) {
    return Invalid(name, absl::StrFormat("file is %d bytes, too small for the 8-byte header length",
                                         bytes.size()));
  }
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | bytes[static_cast<size_t>(i)];
  if (header_size > kSafetensorsMaxHeaderBytes) {
    return Invalid(name, absl::StrFormat("header length %d is absurdly large (limit %d bytes); not a "
                                         "safetensors file?",
                                         header_size, kSafetensorsMaxHeaderBytes));
  }
  if (header_size > bytes.size() - 8) {
    return Invalid(name, absl::StrFormat("header length %d runs past the end of the file (%d bytes)",
                                         header_size, bytes.size()));
  }
  const std::string_view header_text(reinterpret_cast<const char*>(bytes.data()) + 8, header_size);
  absl::StatusOr<JsonValue> header = ParseJson(header_text);
  if (!header.ok()) {
    return Invalid(name, absl::StrCat("header is not valid JSON: ", header.status().message()));
  }
  if (!header->is_object()) {
    return Invalid(name, absl::StrCat("header is ", Article(header->type()), ", not a JSON object"));
  }

  auto file = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  file->name_ = std::string(name);
  file->data_offset_ = 8 + header_size;
  const std::span<const uint8_t> data = bytes.subspan(file->data_offset_);
  for (const auto& [key, entry] : header->members()) {
    if (key == "__metadata__") {
      if (absl::Status status = ParseMetadata(name, entry, file->metadata_); !status.ok()) return status;
      continue;
    }
    SafetensorsTensor tensor;
    if (absl::Status status = ParseTensorEntry(name, key, entry, tensor); !status.ok()) return status;
    file->tensor_index_.emplace(key, file->tensors_.size());
    file->tensors_.push_back(std::move(tensor));
  }
  if (absl::Status status = CheckTiling(name, file->tensors_, data.size()); !status.ok()) return status;
  for (SafetensorsTensor& tensor : file->tensors_) {
    tensor.data = data.subspan(tensor.data_begin, tensor.data_end - tensor.data_begin);
  }
  return file;
}

const SafetensorsTensor* SafetensorsFile::Find(std::string_view tensor_name) const {
  const auto it = tensor_index_.find(tensor_name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::Open(const std::string& path) {
  auto checkpoint = std::unique_ptr<SafetensorsCheckpoint>(new SafetensorsCheckpoint());
  checkpoint->path_ = path;
  if (path.ends_with(".json")) {
    if (absl::Status status = checkpoint->OpenShards(path); !status.ok()) return status;
    return checkpoint;
  }
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  if (!file.ok()) return file.status();
  for (const SafetensorsTensor& tensor : (*file)->tensors()) {
    checkpoint->tensors_.emplace(tensor.name, &tensor);
  }
  checkpoint->shards_.push_back(*std::move(file));
  return checkpoint;
}

absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::OpenFolder(
    const std::string& dir) {
  const std::filesystem::path folder(dir);
  const std::filesystem::path index = folder / "model.safetensors.index.json";
  std::error_code error;
  if (std::filesystem::exists(index, error)) return Open(index.string());
  const std::filesystem::path single = folder / "model.safetensors";
  if (std::filesystem::exists(single, error)) return Open(single.string());
  return absl::NotFoundError(
      absl::StrCat(dir, ": no model.safetensors or model.safetensors.index.json in this folder"));
}

absl::Status SafetensorsCheckpoint::OpenShards(const std::string& index_path) {
  absl::StatusOr<std::unique_ptr<MappedFile>> index_file = MappedFile::Open(index_path);
  if (!index_file.ok()) return index_file.status();
  const std::span<const uint8_t> index_bytes = (*index_file)->bytes();
  absl::StatusOr<JsonValue> index = ParseJson(
      std::string_view(reinterpret_cast<const char*>(index_bytes.data()), index_bytes.size()));
  if (!index.ok()) return Invalid(index_path, absl::StrCat("not valid JSON: ", index.status().message()));
  if (!index->is_object()) {
    return Invalid(index_path, absl::StrCat("is ", Article(index->type()), ", not a JSON object"));
  }
  const JsonValue* weight_map = index->Find("weight_map");
  if (weight_map == nullptr) return Invalid(index_path, "missing 'weight_map'");
  if (!weight_map->is_object()) {
    return Invalid(index_path, absl::StrCat("weight_map is ", Article(weight_map->type()), ", not an object"));
  }

  // Shards in order of first mention, each with the tensors mapped to it.
  std::vector<std::pair<std::string, std::vector<std::string>>> shard_tensors;
  std::map<std::string, size_t, std::less<>> shard_slot;
  for (const auto& [tensor, shard] : weight_map->members()) {
    if (!shard.is_string()) {
      return Invalid(index_path, absl::StrFormat("weight_map entry for tensor '%s' is %s, not a string",
                                                 tensor, Article(shard.type())));
    }
    const std::filesystem::path shard_path(shard.string_value());
    const bool inside_folder =
        !shard_path.empty() && shard_path.is_relative() &&
        std::none_of(shard_path.begin(), shard_path.end(), [](const auto& part) { return part == ".."; });
    if (!inside_folder) {
      return Invalid(index_path, absl::StrFormat("tensor '%s' maps to shard '%s', which is not a file "
                                                 "inside the model folder",
                                                 tensor, shard.string_value()));
    }
    auto [slot, added] = shard_slot.emplace(shard.string_value(), shard_tensors.size());
    if (added) shard_tensors.emplace_back(shard.string_value(), std::vector<std::string>());
    shard_tensors[slot->second].second.push_back(tensor);
  }

  const std::filesystem::path folder = std::filesystem::path(index_path).parent_path();
  for (const auto& [shard_name, tensors] : shard_tensors) {
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> shard =
        SafetensorsFile::Open((folder / shard_name).string());
    if (absl::IsNotFound(shard.status())) {
      return absl::NotFoundError(absl::StrFormat(
          "%s: shard '%s' (holding tensor '%s' and %d more) is missing: %s", index_path, shard_name,
          tensors.front(), tensors.size() - 1, shard.status().message()));
    }
    if (!shard.ok()) return shard.status();
    for (const std::string& tensor : tensors) {
      const SafetensorsTensor* found = (*shard)->Find(tensor);
      if (found == nullptr) {
        return Invalid(index_path, absl::StrFormat("weight_map puts tensor '%s' in shard '%s', which "
                                                   "does not contain it",
                                                   tensor, shard_name));
      }
      tensors_.emplace(tensor, found);
    }
    for (const SafetensorsTensor& tensor : (*shard)->tensors()) {
      const JsonValue* mapped_to = weight_map->Find(tensor.name);
      if (mapped_to == nullptr || mapped_to->string_value() != shard_name) {
        return Invalid(index_path, absl::StrFormat("shard '%s' holds tensor '%s', which weight_map %s",
                                                   shard_name, tensor.name,
                                                   mapped_to == nullptr
                                                       ? std::string("does not list")
                                                       : absl::StrCat("puts in shard '",
                                                                      mapped_to->string_value(), "'")));
      }
    }
    shards_.push_back(*std::move(shard));
  }
  return absl::OkStatus();
}

const SafetensorsTensor* SafetensorsCheckpoint::Find(std::string_view tensor_name) const {
  const auto it = tensors_.find(tensor_name);
  return it == tensors_.end() ? nullptr : it->second;
}

}  // namespace kiln
