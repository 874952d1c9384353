// Reading the peers' figures out of their markdown notes.
#include "tools/kiln/peer_figures.h"

#include "gtest/gtest.h"
#include "tests/test_support.h"

namespace kiln::cli {
namespace {

constexpr char kNotes[] = R"(# Peer
| ceiling | median |
|---|---|
| device-to-device copy (bytes read + written) | 4.27 TB/s |

| format | file GB | pp512 | tg128 |
|---|---|---|---|
| F16 | 16.06 | 17122 / 18999 | 153 / 160 |
| Q4_K_M | 4.92 | 8,777 / 9,091 | 189 / 202 |

| format | B=1 | B=8 |
|---|---|---|
| Q4_K_M | 172 | 541 |
)";

TEST(PeerFigures, TakesTheBestOfOffAndOnAndIgnoresSeparatorsAndUnits) {
  EXPECT_EQ(FindPeerFigure(kNotes, "Q4_K_M", "pp512"), 9091);
  EXPECT_EQ(FindPeerFigure(kNotes, "q4_k_m", "tg128"), 202);
  EXPECT_EQ(FindPeerFigure(kNotes, "F16", "pp512"), 18999);
  EXPECT_EQ(FindPeerFigure(kNotes, "Q4_K_M", "B=8"), 541);
  EXPECT_EQ(FindPeerFigure(kNotes, "device-to-device copy", "median", true), 4.27);
}

TEST(PeerFigures, MissingRowsAndColumnsGiveNothing) {
  EXPECT_FALSE(FindPeerFigure(kNotes, "Q8_0", "pp512").has_value());
  EXPECT_FALSE(FindPeerFigure(kNotes, "Q4_K_M", "pp1024").has_value());
  EXPECT_FALSE(FindPeerFigure(kNotes, "device-to-device", "median").has_value()) << "exact row names unless a prefix";
  EXPECT_FALSE(FindPeerFigure("", "F16", "pp512").has_value());
  // A column is its header's first word: pp5 and tg1 are not pp512 and tg128.
  EXPECT_FALSE(FindPeerFigure(kNotes, "Q4_K_M", "pp5").has_value());
  EXPECT_FALSE(FindPeerFigure(kNotes, "Q4_K_M", "tg1").has_value());
  EXPECT_EQ(FindPeerFigure("| format | pp512 FA off / on |\n|---|---|\n| Q4_K_M | 9,084 / 9,250 |\n", "Q4_K_M", "pp512"),
            9250);
}

TEST(PeerFigures, StorageNamesMapToThePeersRows) {
  EXPECT_EQ(PeerFormatName("q4_k"), "Q4_K_M");
  EXPECT_EQ(PeerFormatName("q8_0"), "Q8_0");
  EXPECT_EQ(PeerFormatName("f16"), "F16");
  EXPECT_EQ(PeerFormatName("q2_k"), "Q2_K");
}

TEST(PeerFigures, ReadsTheSharedNotesOfTheH200) {
  const std::filesystem::path cuda = testing::TestDataFile("../peers/llama.cpp-h200.md");
  const std::filesystem::path vulkan = testing::TestDataFile("../peers/llama.cpp-vulkan-h200.md");
  if (cuda.empty() || vulkan.empty()) GTEST_SKIP() << "../shared/peers is not here";
  const std::string c = testing::ReadFileOrDie(cuda), v = testing::ReadFileOrDie(vulkan);
  EXPECT_EQ(FindPeerFigure(c, "Q4_K_M", "tg128"), 202);
  EXPECT_EQ(FindPeerFigure(c, "Q8_0", "pp1024"), 10848);
  EXPECT_EQ(FindPeerFigure(c, "bf16 GEMM", "median", true), 774);
  EXPECT_EQ(FindPeerFigure(v, "Q4_K_M", "pp512"), 9250);
  EXPECT_EQ(FindPeerFigure(v, "Q4_K_M", "tg128"), 152.6);
}

}  // namespace
}  // namespace kiln::cli
