#include "engine/sse_reader.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace crl {
namespace {

std::vector<SseEvent> read_all(SseReader& reader) {
  std::vector<SseEvent> out;
  SseEvent event;
  while (reader.next(event)) out.push_back(event);
  return out;
}

// The events of `bytes` fed `step` bytes at a time.
std::vector<SseEvent> read_in_steps(std::string_view bytes, size_t step) {
  SseReader reader(1 << 20);
  std::vector<SseEvent> out;
  for (size_t at = 0; at < bytes.size(); at += step) {
    EXPECT_TRUE(reader.feed(bytes.substr(at, step)));
    for (SseEvent& e : read_all(reader)) out.push_back(std::move(e));
  }
  return out;
}

TEST(SseReader, ReadsDataEventsAsSglangWritesThem) {
  const std::string stream = "data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: [DONE]\n\n";
  const auto events = read_in_steps(stream, stream.size());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].data, "{\"a\":1}");
  EXPECT_EQ(events[1].data, "{\"a\":2}");
  EXPECT_EQ(events[2].data, "[DONE]");
  EXPECT_EQ(events[0].name, "");
}

TEST(SseReader, EveryLineEndingAndEverySplitGiveTheSameEvents) {
  for (const std::string end : {"\n", "\r\n", "\r"}) {
    const std::string stream = ": keep-alive" + end + end + "event: message_start" + end + "data: one" + end +
                               "data:two" + end + "id: 7" + end + end + "data: three" + end + end;
    for (size_t step = 1; step <= stream.size(); ++step) {
      const auto events = read_in_steps(stream, step);
      ASSERT_EQ(events.size(), 2u) << "step " << step;
      EXPECT_EQ(events[0].name, "message_start");
      EXPECT_EQ(events[0].data, "one\ntwo");  // data lines joined; one space after the colon dropped
      EXPECT_EQ(events[1].name, "");
      EXPECT_EQ(events[1].data, "three");
    }
  }
}

TEST(SseReader, AnEventIsDispatchedOnlyAtItsBlankLine) {
  SseReader reader(1 << 20);
  SseEvent event;
  ASSERT_TRUE(reader.feed("data: partial\n"));
  EXPECT_FALSE(reader.next(event));
  ASSERT_TRUE(reader.feed("\n"));
  ASSERT_TRUE(reader.next(event));
  EXPECT_EQ(event.data, "partial");
  ASSERT_TRUE(reader.feed("event: nothing\n\n"));  // no data: not dispatched
  EXPECT_FALSE(reader.next(event));
}

TEST(SseReader, AnEventThatNeverEndsIsRefusedAtItsLimit) {
  SseReader reader(64);
  ASSERT_TRUE(reader.feed("data: " + std::string(40, 'x') + "\n"));
  SseEvent event;
  EXPECT_FALSE(reader.next(event));
  EXPECT_FALSE(reader.feed(std::string(40, 'y')));
  EXPECT_NE(reader.error().find("64 bytes"), std::string::npos) << reader.error();
  EXPECT_FALSE(reader.next(event));
}

TEST(SseReader, ReadBytesDoNotCountAgainstTheLimit) {
  SseReader reader(64);
  SseEvent event;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(reader.feed("data: " + std::to_string(i) + "\n\n")) << reader.error();
    ASSERT_TRUE(reader.next(event));
    EXPECT_EQ(event.data, std::to_string(i));
  }
}

}  // namespace
}  // namespace crl
