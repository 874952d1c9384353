// Generated Unicode character data (see gen_unicode_tables.py); read it
// through unicode.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln {

// General-category class of a codepoint (the first letter of its category).
enum class CharClass : uint8_t {
  kUnassigned,   // Cn
  kNumber,       // N*
  kLetter,       // L*
  kSeparator,    // Z*
  kMark,         // M*
  kPunctuation,  // P*
  kSymbol,       // S*
  kControl,      // Cc, Cf, Cs, Co
};

namespace unicode_tables {

struct ClassRange {
  uint32_t first;  // the range runs up to the next entry's first
  CharClass cls;
};
struct CodepointPair {
  uint32_t from;
  uint32_t to;
};
struct NfdRange {
  uint32_t first;
  uint32_t last;
  uint32_t base;  // first codepoint of the canonical decomposition
};

extern const char kUnicodeVersion[];
extern const ClassRange kClassRanges[];
extern const size_t kClassRangeCount;
extern const CodepointPair kLowercase[];
extern const size_t kLowercaseCount;
extern const NfdRange kNfdRanges[];
extern const size_t kNfdRangeCount;

}  // namespace unicode_tables
}  // namespace kiln
