#include "runtime/tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace kiln {
namespace {

bool IsContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// Allowed range of the second byte of a well-formed sequence, by lead byte
// (Unicode Table 3-7); {0, 0} for bytes that cannot lead.
struct LeadInfo {
  size_t length;
  uint8_t second_lo;
  uint8_t second_hi;
};

LeadInfo StrictLeadInfo(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

struct ByteLevelTables {
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 256 + 256> cpt_to_byte;  // codepoints 0..511 cover the mapping
};

const ByteLevelTables& GetByteLevelTables() {
  static const ByteLevelTables* tables = [] {
    auto* t = new ByteLevelTables;
    t->cpt_to_byte.fill(-1);
    auto printable = [](int b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int next_spare = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cpt = printable(b) ? b : next_spare++;
      AppendUtf8(cpt, t->byte_to_utf8[b]);
      t->cpt_to_byte[cpt] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return *tables;
}

}  // namespace

size_t Utf8SequenceLength(uint8_t lead) {
  static constexpr size_t kByHighNibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kByHighNibble[lead >> 4];
}

std::vector<uint32_t> DecodeUtf8Lenient(std::string_view text) {
  std::vector<uint32_t> cpts;
  cpts.reserve(text.size());
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b = s[i];
    size_t len = 0;
    uint32_t cpt = 0;
    if (b < 0x80) {
      len = 1;
      cpt = b;
    } else if ((b & 0xE0) == 0xC0) {
      len = 2;
      cpt = b & 0x1F;
    } else if ((b & 0xF0) == 0xE0) {
      len = 3;
      cpt = b & 0x0F;
    } else if ((b & 0xF8) == 0xF0) {
      len = 4;
      cpt = b & 0x07;
    }
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) {
      ok = IsContinuation(s[i + k]);
      cpt = (cpt << 6) | (s[i + k] & 0x3F);
    }
    if (ok) {
      cpts.push_back(cpt);
      i += len;
    } else {
      cpts.push_back(kReplacementChar);
      i += 1;
    }
  }
  return cpts;
}

void AppendUtf8(uint32_t cpt, std::string& out) {
  if (cpt < 0x80) {
    out.push_back(static_cast<char>(cpt));
  } else if (cpt < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | ((cpt >> 18) & 0x07)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  }
}

std::string SanitizeUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (uint32_t cpt : DecodeUtf8Lenient(text)) {
    const bool encodable = cpt <= 0x10FFFF && !(cpt >= 0xD800 && cpt <= 0xDFFF);
    AppendUtf8(encodable ? cpt : kReplacementChar, out);
  }
  return out;
}

size_t CompleteUtf8Prefix(std::string_view bytes) {
  const auto* s = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  // Walk back over at most three continuation bytes to the lead byte.
  size_t i = n;
  while (i > 0 && n - i < 3 && IsContinuation(s[i - 1])) --i;
  if (i == 0) return n;
  const size_t lead = i - 1;
  const LeadInfo info = StrictLeadInfo(s[lead]);
  if (info.length <= 1 || n - lead >= info.length) return n;
  // Incomplete: hold it back only if what is there can still become valid.
  if (n - lead >= 2 && (s[lead + 1] < info.second_lo || s[lead + 1] > info.second_hi)) return n;
  return lead;
}

std::string ReplaceInvalidUtf8(std::string_view bytes) {
  static constexpr char kReplacementUtf8[] = "\xEF\xBF\xBD";
  const auto* s = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  std::string out;
  out.reserve(n);
  size_t i = 0;
  while (i < n) {
    const LeadInfo info = StrictLeadInfo(s[i]);
    if (info.length == 1) {
      out.push_back(static_cast<char>(s[i++]));
      continue;
    }
    if (info.length == 0) {
      out += kReplacementUtf8;
      ++i;
      continue;
    }
    // Consume the maximal well-formed prefix; replace it as one unit if cut short.
    size_t j = i + 1;
    if (j < n && s[j] >= info.second_lo && s[j] <= info.second_hi) {
      ++j;
      while (j < i + info.length && j < n && IsContinuation(s[j])) ++j;
    }
    if (j == i + info.length) {
      out.append(bytes.substr(i, info.length));
    } else {
      out += kReplacementUtf8;
    }
    i = j;
  }
  return out;
}

CharClass ClassOf(uint32_t cpt) {
  using unicode_tables::kClassRangeCount;
  using unicode_tables::kClassRanges;
  if (cpt > 0x10FFFF) return CharClass::kUnassigned;
  const auto* end = kClassRanges + kClassRangeCount;
  const auto* it = std::upper_bound(kClassRanges, end, cpt,
                                    [](uint32_t c, const unicode_tables::ClassRange& r) { return c < r.first; });
  return (it - 1)->cls;
}

bool IsWhitespace(uint32_t cpt) {
  return (cpt >= 0x09 && cpt <= 0x0D) || cpt == 0x20 || cpt == 0x85 || cpt == 0xA0 || cpt == 0x1680 ||
         (cpt >= 0x2000 && cpt <= 0x200A) || cpt == 0x2028 || cpt == 0x2029 || cpt == 0x202F ||
         cpt == 0x205F || cpt == 0x3000;
}

uint32_t ToLower(uint32_t cpt) {
  using unicode_tables::kLowercase;
  using unicode_tables::kLowercaseCount;
  const auto* end = kLowercase + kLowercaseCount;
  const auto* it = std::lower_bound(kLowercase, end, cpt,
                                    [](const unicode_tables::CodepointPair& p, uint32_t c) { return p.from < c; });
  return (it != end && it->from == cpt) ? it->to : cpt;
}

uint32_t NfdBase(uint32_t cpt) {
  using unicode_tables::kNfdRangeCount;
  using unicode_tables::kNfdRanges;
  const auto* end = kNfdRanges + kNfdRangeCount;
  const auto* it = std::upper_bound(kNfdRanges, end, cpt,
                                    [](uint32_t c, const unicode_tables::NfdRange& r) { return c < r.first; });
  if (it == kNfdRanges) return cpt;
  --it;
  return cpt <= it->last ? it->base : cpt;
}

bool IsCjkIdeograph(uint32_t cpt) {
  return (cpt >= 0x4E00 && cpt <= 0x9FFF) || (cpt >= 0x3400 && cpt <= 0x4DBF) ||
         (cpt >= 0x20000 && cpt <= 0x2A6DF) || (cpt >= 0x2A700 && cpt <= 0x2B73F) ||
         (cpt >= 0x2B740 && cpt <= 0x2B81F) || (cpt >= 0x2B920 && cpt <= 0x2CEAF) ||
         (cpt >= 0xF900 && cpt <= 0xFAFF) || (cpt >= 0x2F800 && cpt <= 0x2FA1F);
}

const std::string& ByteToUnicode(uint8_t byte) { return GetByteLevelTables().byte_to_utf8[byte]; }

int UnicodeToByte(uint32_t cpt) {
  const auto& table = GetByteLevelTables().cpt_to_byte;
  return cpt < table.size() ? table[cpt] : -1;
}

}  // namespace kiln
