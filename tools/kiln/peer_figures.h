// Figures of the engines kiln competes with, read from the markdown notes in
// ../shared/peers (tables measured on the same card), so that `kiln bench`
// prints its numbers beside theirs without copying them into the code.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kiln::cli {

// The peers' row name for a kiln weight storage: "q4_k" -> "Q4_K_M".
std::string PeerFormatName(std::string_view storage);

// In any table of `markdown`: the cell of the row whose first cell is `row`
// (case-insensitive, or starts with it when `row_prefix`), in the column
// whose header is `column` or starts with it and a space ("pp512 FA off /
// on"; "pp5" is not "pp512"). "a / b" cells (flash attention off / on)
// give the larger; thousands separators and units after the number are ignored.
std::optional<double> FindPeerFigure(std::string_view markdown, std::string_view row, std::string_view column,
                                     bool row_prefix = false);

}  // namespace kiln::cli
