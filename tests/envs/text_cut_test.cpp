// cut_middle (envs/text_cut.h): the over-long observations of coding_repo and remote environments.
#include "envs/text_cut.h"

#include <gtest/gtest.h>

#include <string>

#include "engine/utf8.h"

namespace crl {
namespace {

TEST(CutMiddle, TextThatFitsIsUnchanged) {
  EXPECT_EQ(cut_middle("hello", 5), "hello");
  EXPECT_EQ(cut_middle("", 0), "");
}

TEST(CutMiddle, KeepsAThirdOfTheHeadAndTheRestOfTheTailAroundTheMarker) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += static_cast<char>('a' + i % 26);
  const std::string marker = "\n[... 1000 bytes, middle cut ...]\n";
  const std::string cut = cut_middle(text, 300);
  ASSERT_EQ(cut.size(), 300u);
  const size_t keep = 300 - marker.size(), head = keep / 3;
  EXPECT_EQ(cut, text.substr(0, head) + marker + text.substr(1000 - (keep - head)));
}

TEST(CutMiddle, ALimitBelowTheMarkerGivesTheMarkerAlone) {
  EXPECT_EQ(cut_middle(std::string(100, 'x'), 3), "\n[... 100 bytes, middle cut ...]\n");
}

// Every limit, on text made of 2-, 3- and 4-byte sequences: the cut never splits one (coding_repo's own cut
// once could, on a tool's non-ASCII output), and never exceeds the limit once the marker fits.
TEST(CutMiddle, NeverCutsInsideAUtf8Sequence) {
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += i % 3 == 0 ? "\xC3\xA9" : i % 3 == 1 ? "\xE2\x82\xAC" : "\xF0\x9F\x98\x80";
  ASSERT_TRUE(is_valid_utf8(text));
  const size_t marker =
      std::string("\n[... " + std::to_string(text.size()) + " bytes, middle cut ...]\n").size();
  for (size_t limit = 0; limit < text.size(); ++limit) {
    const std::string cut = cut_middle(text, limit);
    ASSERT_TRUE(is_valid_utf8(cut)) << "limit " << limit;
    if (limit >= marker) {
      ASSERT_LE(cut.size(), limit) << "limit " << limit;
    }
  }
}

}  // namespace
}  // namespace crl
