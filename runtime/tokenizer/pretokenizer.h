// Pre-tokenizers of byte-level BPE vocabularies: which split regexes apply
// for a `tokenizer.ggml.pre` name (llama.cpp's table), and the splitter that
// runs them with PCRE2.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln {

struct PreTokenizerSpec {
  std::vector<std::string_view> names;    // tokenizer.ggml.pre values that select it
  std::vector<std::string_view> regexes;  // llama.cpp's regex dialect, applied in sequence
  bool ignore_merges = false;  // a piece that is itself a token is emitted whole
  bool add_bos = false;        // default of tokenizer.ggml.add_bos_token
  bool has_bos = true;         // false: the family has no BOS token at all
};

// The entry for `name`, or nullptr. "default" is the fallback llama.cpp uses
// when a file has no tokenizer.ggml.pre.
const PreTokenizerSpec* FindPreTokenizer(std::string_view name);
// Every name FindPreTokenizer knows, sorted.
std::vector<std::string_view> PreTokenizerNames();

// Splits text the way llama.cpp's unicode_regex_split does: the first regex
// cuts the text into its matches and the runs between them; each next regex
// cuts every piece of the previous step the same way, seeing only that piece
// (so a lookahead stops at the piece's end). The llama.cpp dialect is
// translated to PCRE2 (UTF + UCP, compiled once, JIT where available) so
// that character classes mean what they mean there: \s includes U+0085,
// \d and \w and \b are ASCII-only, \p{Lu}/\p{Ll}/... mean any letter, and $
// matches only at the very end.
class RegexSplitter {
 public:
  static absl::StatusOr<std::unique_ptr<RegexSplitter>> Create(
      const std::vector<std::string_view>& regexes);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // `text` must be valid UTF-8 (see SanitizeUtf8). The pieces are non-empty
  // and concatenate to `text`.
  std::vector<std::string_view> Split(std::string_view text) const;

 private:
  struct Compiled;
  RegexSplitter() = default;

  std::vector<std::unique_ptr<Compiled>> regexes_;
};

// The PCRE2 pattern for a llama.cpp-dialect regex (exposed for tests).
absl::StatusOr<std::string> TranslateLlamaRegex(std::string_view pattern);

}  // namespace kiln
