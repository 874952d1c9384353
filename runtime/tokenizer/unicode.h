// Unicode helpers shared by the tokenizer models: lenient UTF-8 decoding in
// the way llama.cpp does it, character classes, and the byte <-> character
// mapping of byte-level BPE.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/tokenizer/unicode_tables.h"

namespace kiln {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Length of the UTF-8 sequence a lead byte announces (1 for continuation and
// invalid bytes), from the high nibble only, as llama.cpp splits text.
size_t Utf8SequenceLength(uint8_t lead);

// Decodes `text` leniently: each byte that does not start a well-formed
// sequence becomes one U+FFFD. Like llama.cpp, overlong forms are accepted.
std::vector<uint32_t> DecodeUtf8Lenient(std::string_view text);

void AppendUtf8(uint32_t cpt, std::string& out);

// `text` with every ill-formed UTF-8 byte (and every encoded surrogate or
// codepoint past U+10FFFF) replaced by U+FFFD, so that a strict UTF-8 engine
// (PCRE2) sees the same characters llama.cpp's lenient decoder sees.
std::string SanitizeUtf8(std::string_view text);

// Length of the longest prefix of `bytes` that ends on a complete UTF-8
// sequence boundary, treating an incomplete but so far valid sequence at the
// very end as "not yet complete". Used by the streaming decoder.
size_t CompleteUtf8Prefix(std::string_view bytes);

// `bytes` with every ill-formed sequence replaced by U+FFFD (one per maximal
// ill-formed subpart, as the Unicode standard recommends).
std::string ReplaceInvalidUtf8(std::string_view bytes);

CharClass ClassOf(uint32_t cpt);
// White_Space as llama.cpp defines it (\t..\r, space, U+0085, Z separators).
bool IsWhitespace(uint32_t cpt);
// Simple (one-to-one) lowercase mapping.
uint32_t ToLower(uint32_t cpt);
// First codepoint of the canonical decomposition (the base letter of an
// accented letter); the codepoint itself when it does not decompose.
uint32_t NfdBase(uint32_t cpt);
// CJK ideographs that BERT splits into single-character words (the ranges of
// HF's BasicTokenizer, including its off-by-one start of Extension E).
bool IsCjkIdeograph(uint32_t cpt);

// Byte-level BPE (GPT-2): every byte is shown as a printable character.
// ByteToUnicode(b) is that character's UTF-8; UnicodeToByte inverts it and
// returns -1 for characters outside the mapping.
const std::string& ByteToUnicode(uint8_t byte);
int UnicodeToByte(uint32_t cpt);

}  // namespace kiln
