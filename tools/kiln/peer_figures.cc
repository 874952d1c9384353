#include "tools/kiln/peer_figures.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kiln::cli {
namespace {

// Debian's absl has its own string_view type.
absl::string_view A(std::string_view s) { return {s.data(), s.size()}; }

std::vector<std::string> Cells(std::string_view line) {
  absl::string_view s = absl::StripAsciiWhitespace(A(line));
  if (!absl::ConsumePrefix(&s, "|")) return {};
  absl::ConsumeSuffix(&s, "|");
  std::vector<std::string> cells;
  for (absl::string_view c : absl::StrSplit(s, '|')) {
    cells.emplace_back(absl::StripAsciiWhitespace(c));
  }
  return cells;
}

// The larger number of "12,343", "111.0 / 94.7", "4.27 TB/s".
std::optional<double> CellValue(const std::string& cell) {
  std::optional<double> best;
  for (absl::string_view part : absl::StrSplit(cell, '/')) {
    std::string digits;
    for (char c : absl::StripAsciiWhitespace(part)) {
      if (c == ',') continue;
      if ((c >= '0' && c <= '9') || c == '.') {
        digits += c;
      } else {
        break;
      }
    }
    if (digits.empty()) continue;
    const double v = std::strtod(digits.c_str(), nullptr);
    if (!best || v > *best) best = v;
  }
  return best;
}

}  // namespace

std::string PeerFormatName(std::string_view storage) {
  if (storage == "q4_k") return "Q4_K_M";
  if (storage == "f16" || storage == "bf16") return "F16";
  return absl::AsciiStrToUpper(A(storage));
}

std::optional<double> FindPeerFigure(std::string_view markdown, std::string_view row, std::string_view column,
                                     bool row_prefix) {
  std::vector<std::string> header;
  for (absl::string_view line : absl::StrSplit(absl::string_view(markdown.data(), markdown.size()), '\n')) {
    std::vector<std::string> cells = Cells(std::string_view(line.data(), line.size()));
    if (cells.empty()) {
      header.clear();
      continue;
    }
    if (header.empty()) {
      header = cells;
      continue;
    }
    if (absl::StartsWith(cells[0], "--") || absl::StartsWith(cells[0], ":-")) continue;  // the rule under a header
    const bool match = row_prefix ? absl::StartsWithIgnoreCase(cells[0], A(row)) : absl::EqualsIgnoreCase(cells[0], A(row));
    if (!match) continue;
    for (size_t i = 1; i < std::min(header.size(), cells.size()); ++i) {
      // The header's first word is the column ("pp512 FA off / on" is pp512, not pp5).
      const absl::string_view h = header[i];
      if (absl::StartsWith(h, A(column)) && (h.size() == column.size() || h[column.size()] == ' ')) {
        return CellValue(cells[i]);
      }
    }
  }
  return std::nullopt;
}

}  // namespace kiln::cli
