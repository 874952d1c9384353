#include "runtime/tokenizer/streaming_decoder.h"

#include "runtime/tokenizer/unicode.h"

namespace kiln {

std::string StreamingDecoder::Push(int32_t id) {
  pending_.append(tokenizer_.TokenBytes(id, keep_special_));
  const size_t complete = CompleteUtf8Prefix(pending_);
  std::string out = ReplaceInvalidUtf8(std::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  return out;
}

std::string StreamingDecoder::Finish() {
  std::string out = ReplaceInvalidUtf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace kiln
