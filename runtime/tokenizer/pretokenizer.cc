#include "runtime/tokenizer/pretokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "runtime/tokenizer/unicode.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace kiln {
namespace {

// Regexes shared by several families, as llama.cpp writes them.
constexpr std::string_view kGpt2Regex =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";
constexpr std::string_view kLlama3Regex =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kQwen2Regex =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kPoroRegex = R"re( ?[^(\s|.,!?…。，、।۔،)]+)re";
constexpr std::string_view kCjkRunRegex = R"re([一-龥ࠀ-一가-퟿]+)re";

// llama.cpp's pre-tokenizer table (llama-vocab.cpp, llm_tokenizer_bpe), by
// the names its loader accepts. Families that need code of their own rather
// than regexes (kimi-k2, afmoe, gemma4, ...) are not here.
const std::vector<PreTokenizerSpec>& PreTokenizerTable() {
  static const std::vector<PreTokenizerSpec>* table = new std::vector<PreTokenizerSpec>{
      {.names = {"default"},
       .regexes = {R"re([\p{P}\$\+<=>\^~\|]+)re", kGpt2Regex, R"re(\p{N}+)re", R"re([0-9][0-9][0-9])re"}},
      {.names = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
       .regexes = {kLlama3Regex},
       .ignore_merges = true,
       .add_bos = true},
      {.names = {"dbrx", "smaug-bpe"}, .regexes = {kLlama3Regex}},
      // The codepoints written as \x{..} have singleton canonical decompositions;
      // literal copies would not survive Unicode normalisation of this file.
      {.names = {"deepseek-llm"},
       .regexes = {R"re([\r\n])re",
                   R"re(\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\x{1F7D}ᾀ-ᾴᾶ-ᾼ\x{1FBE}ῂ-ῄῆ-ῌῐ-\x{1FD3}ῖ-\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\x{2126}ℨ\x{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+)re",
                   R"re(\s?[!-/:-~！-／：-～‘-‟　-。]+)re", R"re(\s+$)re", kCjkRunRegex, R"re(\p{N}+)re"}},
      {.names = {"deepseek-coder"},
       .regexes = {R"re([\r\n])re", R"re(\s?\p{L}+)re", R"re(\s?\p{P}+)re", kCjkRunRegex, R"re(\p{N})re"}},
      {.names = {"deepseek-v3"},
       .regexes = {R"re(\p{N}{1,3})re", R"re([一-龥぀-ゟ゠-ヿ]+)re",
                   R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
      {.names = {"falcon"},
       .regexes = {R"re([\p{P}\$\+<=>\^~\|`]+)re", kGpt2Regex, R"re([0-9][0-9][0-9])re"}},
      {.names = {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"},
       .regexes = {R"re(\p{N})re", kGpt2Regex}},
      {.names = {"gpt-2", "phi-2", "jina-es", "jina-de", "jina-v2-es", "jina-v2-de", "gigachat", "mpt", "olmo",
                 "jais"},
       .regexes = {kGpt2Regex}},
      {.names = {"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"}, .regexes = {kQwen2Regex}},
      {.names = {"poro-chat", "bloom", "gpt3-finnish"}, .regexes = {kPoroRegex}},
      {.names = {"chatglm-bpe", "glm4"}, .regexes = {kLlama3Regex}, .has_bos = false},
      {.names = {"viking"}, .regexes = {kPoroRegex, R"re(\p{N})re"}},
      {.names = {"tekken"},
       .regexes = {R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"},
       .ignore_merges = true,
       .add_bos = true},
      {.names = {"chameleon"},
       .regexes = {R"re(<sentinel:[0-9]+>)re", R"re((IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z)re",
                   R"re(([\t\n]|    |  ))re", R"re(\p{N})re", R"re([\p{P}!-/:-@\[-`{-~])re", kGpt2Regex},
       .add_bos = true},
      {.names = {"gpt-4o", "llama4"},
       .regexes = {R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
  };
  return *table;
}

constexpr std::string_view kAsciiWordBoundary =
    "(?:(?<=[A-Za-z0-9_])(?![A-Za-z0-9_])|(?<![A-Za-z0-9_])(?=[A-Za-z0-9_]))";

// Appends the matches of `code` in `piece` and the runs between them.
void SplitPiece(const pcre2_code* code, pcre2_match_data* match, std::string_view piece,
                std::vector<std::string_view>& out) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
  const size_t len = piece.size();
  size_t start = 0;
  size_t last_end = 0;
  uint32_t retry_options = 0;  // set after an empty match, as std::regex_iterator does
  while (start <= len) {
    const uint32_t options = retry_options | PCRE2_NO_UTF_CHECK;
    int rc = pcre2_match(code, subject, len, start, options, match, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code, subject, len, start, options | PCRE2_NO_JIT, match, nullptr);
    }
    if (rc < 0) {
      // No match (or a resource limit, which ends the splitting of this piece
      // the same way). After an empty match, move one character on and retry.
      if (retry_options == 0 || start == len) break;
      retry_options = 0;
      start += std::min(Utf8SequenceLength(static_cast<uint8_t>(piece[start])), len - start);
      continue;
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    const size_t match_start = ovector[0];
    const size_t match_end = ovector[1];
    if (match_start > last_end) out.push_back(piece.substr(last_end, match_start - last_end));
    if (match_end > match_start) out.push_back(piece.substr(match_start, match_end - match_start));
    last_end = match_end;
    start = match_end;
    retry_options = match_end == match_start ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
  }
  if (last_end < len) out.push_back(piece.substr(last_end));
}

}  // namespace

const PreTokenizerSpec* FindPreTokenizer(std::string_view name) {
  for (const PreTokenizerSpec& spec : PreTokenizerTable()) {
    if (std::find(spec.names.begin(), spec.names.end(), name) != spec.names.end()) return &spec;
  }
  return nullptr;
}

std::vector<std::string_view> PreTokenizerNames() {
  std::vector<std::string_view> names;
  for (const PreTokenizerSpec& spec : PreTokenizerTable()) names.insert(names.end(), spec.names.begin(), spec.names.end());
  std::sort(names.begin(), names.end());
  return names;
}

// llama.cpp runs these regexes with std::regex over a copy of the text in
// which every non-ASCII codepoint is replaced by one byte standing for its
// category (and non-ASCII whitespace by \v). Escapes therefore mean what they
// mean on ASCII in the C locale, and \p{..} names only a category.
absl::StatusOr<std::string> TranslateLlamaRegex(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  auto unsupported = [&](std::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("pre-tokenizer regex '", std::string(pattern), "': ", std::string(what),
                     " inside a character class is not supported"));
  };
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      switch (e) {
        case 's': out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]"; break;
        case 'S':
          if (in_class) return unsupported("\\S");
          out += "[^\\s\\x{85}]";
          break;
        case 'd': out += in_class ? "0-9" : "[0-9]"; break;
        case 'D':
          if (in_class) return unsupported("\\D");
          out += "[^0-9]";
          break;
        case 'w': out += in_class ? "A-Za-z0-9_" : "[A-Za-z0-9_]"; break;
        case 'W':
          if (in_class) return unsupported("\\W");
          out += "[^A-Za-z0-9_]";
          break;
        case 'b':
          if (in_class) return unsupported("\\b");
          out += kAsciiWordBoundary;
          break;
        case 'p': {
          const size_t close = pattern.find('}', i);
          const std::string_view name =
              close == std::string_view::npos ? std::string_view() : pattern.substr(i + 1, close - i);
          if (name == "{Lu}" || name == "{Ll}" || name == "{Lt}" || name == "{Lm}" || name == "{Lo}") {
            out += "\\p{L}";  // llama.cpp maps every letter subcategory to "letter"
            i = close;
          } else {
            out += "\\p";
          }
          break;
        }
        default:
          out += '\\';
          out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
    } else if (c == ']' && in_class) {
      in_class = false;
    }
    out += c;
  }
  return out;
}

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

RegexSplitter::~RegexSplitter() = default;

absl::StatusOr<std::unique_ptr<RegexSplitter>> RegexSplitter::Create(
    const std::vector<std::string_view>& regexes) {
  std::unique_ptr<RegexSplitter> splitter(new RegexSplitter);
  for (std::string_view regex : regexes) {
    absl::StatusOr<std::string> pattern = TranslateLlamaRegex(regex);
    if (!pattern.ok()) return pattern.status();
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    auto compiled = std::make_unique<Compiled>();
    compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern->data()), pattern->size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &error, &error_offset, nullptr);
    if (compiled->code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      return absl::InvalidArgumentError(absl::StrCat("pre-tokenizer regex '", std::string(regex),
                                                     "' does not compile (as '", *pattern, "'): ",
                                                     reinterpret_cast<const char*>(message), " at offset ",
                                                     error_offset));
    }
    // JIT is an optimisation only: without it pcre2_match interprets.
    pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);
    splitter->regexes_.push_back(std::move(compiled));
  }
  return splitter;
}

std::vector<std::string_view> RegexSplitter::Split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (!text.empty()) pieces.push_back(text);
  std::vector<std::string_view> next;
  for (const auto& regex : regexes_) {
    next.clear();
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(regex->code, nullptr);
    for (std::string_view piece : pieces) SplitPiece(regex->code, match, piece, next);
    pcre2_match_data_free(match);
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace kiln
