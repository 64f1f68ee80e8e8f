// Stop strings and incremental text: no leak, partial matches held back across tokens.
#include <gtest/gtest.h>

#include "server/fakes.h"
#include "server/text_stream.h"

namespace gb::server {
namespace {

std::string feed(StopStringFilter& f, const std::vector<std::string>& pieces, bool* stopped,
                 std::vector<std::string>* emitted = nullptr) {
  std::string out;
  for (const std::string& p : pieces) {
    std::string e = f.push(p, stopped);
    if (emitted) emitted->push_back(e);
    out += e;
    if (*stopped) return out;
  }
  return out + f.flush();
}

TEST(StopStringFilterTest, NoStops) {
  StopStringFilter f({});
  bool stopped = false;
  EXPECT_EQ(feed(f, {"ab", "cd"}, &stopped), "abcd");
  EXPECT_FALSE(stopped);
}

TEST(StopStringFilterTest, StopInsideOnePiece) {
  StopStringFilter f({"END"});
  bool stopped = false;
  EXPECT_EQ(feed(f, {"abcENDxyz"}, &stopped), "abc");
  EXPECT_TRUE(stopped);
}

TEST(StopStringFilterTest, StopAcrossPiecesIsHeldBackThenDropped) {
  StopStringFilter f({"END"});
  bool stopped = false;
  std::vector<std::string> emitted;
  EXPECT_EQ(feed(f, {"ab", "cE", "N", "Dzz"}, &stopped, &emitted), "abc");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(emitted, (std::vector<std::string>{"ab", "c", "", ""}));  // "E", "EN" held back, never emitted
}

TEST(StopStringFilterTest, PartialMatchThatFailsIsReleased) {
  StopStringFilter f({"END"});
  bool stopped = false;
  std::vector<std::string> emitted;
  EXPECT_EQ(feed(f, {"aE", "Nx", "y"}, &stopped, &emitted), "aENxy");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(emitted, (std::vector<std::string>{"a", "ENx", "y"}));
}

TEST(StopStringFilterTest, PartialAtTheEndIsFlushed) {
  StopStringFilter f({"END"});
  bool stopped = false;
  EXPECT_EQ(feed(f, {"abE", "N"}, &stopped), "abEN");
  EXPECT_FALSE(stopped);
}

TEST(StopStringFilterTest, EarliestOfSeveralStopsWins) {
  StopStringFilter f({"world", "lo w", "o"});
  bool stopped = false;
  EXPECT_EQ(feed(f, {"hel", "lo world"}, &stopped), "hel");
  EXPECT_TRUE(stopped);
}

TEST(StopStringFilterTest, OverlappingPrefixes) {
  StopStringFilter f({"aab"});
  bool stopped = false;
  EXPECT_EQ(feed(f, {"a", "a", "a", "b", "c"}, &stopped), "a");  // "aaab": match starts at 1
  EXPECT_TRUE(stopped);
}

TEST(StopStringFilterTest, MultibyteStop) {
  StopStringFilter f({"é!"});
  bool stopped = false;
  EXPECT_EQ(feed(f, {"caf", "é", "!"}, &stopped), "caf");
  EXPECT_TRUE(stopped);
}

GenerationEvent event_of(const std::string& bytes, FinishReason finish = FinishReason::kNone) {
  GenerationEvent ev;
  for (unsigned char c : bytes) ev.tokens.push_back({test::FakeCodec::kByte0 + c, 0.0f, {}});
  ev.finish = finish;
  ev.prompt_tokens = 5;
  return ev;
}

TEST(ChoiceTextTest, CountsTokensUpToTheStop) {
  test::FakeCodec codec;
  ChoiceText t(codec.stream(), {"lo w"});
  auto ev = event_of("hel");
  ChoiceDelta first = t.on_event(ev);
  EXPECT_EQ(first.text, "he");         // "l" could start "lo w"
  EXPECT_EQ(first.tokens.size(), 2u);  // ... so its token waits for its text
  ev = event_of("lo world");
  ChoiceDelta d = t.on_event(ev);
  EXPECT_EQ(d.text, "l");
  EXPECT_TRUE(d.finished);
  EXPECT_TRUE(t.stopped_by_string());
  EXPECT_EQ(t.finish_reason(), FinishReason::kStop);
  EXPECT_EQ(t.completion_tokens(), 7);  // h e l l o ' ' w: the token that completed the stop counts
  // The held "l", then l o ' ' w; the stop string's tokens add no text.
  ASSERT_EQ(d.tokens.size(), 5u);
  ASSERT_EQ(d.token_texts.size(), 5u);
  EXPECT_EQ(d.token_texts[0].text, "l");
  for (size_t i = 1; i < 5; ++i) EXPECT_EQ(d.token_texts[i].text, "") << i;
  EXPECT_EQ(t.prompt_tokens(), 5);
}

// Each token's text is what it added: the texts concatenate to the choice's text, however the
// stop-string filter and the UTF-8 hold-back delay it.
TEST(ChoiceTextTest, TokenTextsConcatenateToTheText) {
  test::FakeCodec codec;
  ChoiceText t(codec.stream(), {"xyz"});
  std::string text, joined;
  size_t n_tokens = 0;
  auto take = [&](ChoiceDelta d) {
    text += d.text;
    ASSERT_EQ(d.tokens.size(), d.token_texts.size());
    n_tokens += d.tokens.size();
    for (const TokenText& tt : d.token_texts) joined += tt.text;
  };
  for (const std::string part : {"a\xC3", "\xA9 x", "y!", "x"}) {
    GenerationEvent ev = event_of(part);
    take(t.on_event(ev));
    EXPECT_EQ(joined, text.substr(0, joined.size())) << "tokens never run ahead of the text";
  }
  GenerationEvent end = event_of("", FinishReason::kLength);
  take(t.on_event(end));
  EXPECT_EQ(text, "a\xC3\xA9 xy!x");
  EXPECT_EQ(joined, text);
  EXPECT_EQ(n_tokens, 8u);
}

// Alternatives get the text they would have added at their place.
TEST(ChoiceTextTest, AlternativesTextInPlace) {
  test::FakeCodec codec;
  ChoiceText t(codec.stream(), {});
  GenerationEvent ev = event_of("\xC3");
  ev.tokens[0].top = {{test::FakeCodec::kByte0 + 0xC3, -0.1f}, {test::FakeCodec::kByte0 + 'q', -2.0f}};
  ChoiceDelta d = t.on_event(ev);
  ASSERT_EQ(d.token_texts.size(), 1u);
  EXPECT_EQ(d.token_texts[0].text, "");  // ends mid-character: the next token carries it
  EXPECT_EQ(d.token_texts[0].top, (std::vector<std::string>{"\xEF\xBF\xBD", "q"}));
  ev = event_of("\xA9");
  ev.tokens[0].top = {{test::FakeCodec::kByte0 + 0xA9, -0.1f}};
  d = t.on_event(ev);
  EXPECT_EQ(d.token_texts[0].text, "\xC3\xA9");
  EXPECT_EQ(d.token_texts[0].top, (std::vector<std::string>{"\xC3\xA9"}));
}

TEST(ChoiceTextTest, EngineFinishFlushesHeldText) {
  test::FakeCodec codec;
  ChoiceText t(codec.stream(), {"xyz"});
  auto ev = event_of("abx");
  EXPECT_EQ(t.on_event(ev).text, "ab");
  ev = event_of("y", FinishReason::kLength);
  ChoiceDelta d = t.on_event(ev);
  EXPECT_EQ(d.text, "xy");
  EXPECT_TRUE(d.finished);
  EXPECT_EQ(t.finish_reason(), FinishReason::kLength);
  EXPECT_FALSE(t.stopped_by_string());
}

TEST(ChoiceTextTest, Utf8SplitAcrossTokensIsNeverHalfEmitted) {
  test::FakeCodec codec;
  ChoiceText t(codec.stream(), {});
  const std::string e = "é";  // two bytes, two tokens
  auto ev = event_of(e.substr(0, 1));
  EXPECT_EQ(t.on_event(ev).text, "");
  ev = event_of(e.substr(1));
  EXPECT_EQ(t.on_event(ev).text, "é");
}

TEST(ChoiceTextTest, EosGivesNoText) {
  test::FakeCodec codec;
  ChoiceText t(codec.stream(), {});
  GenerationEvent ev = event_of("ok");
  ev.tokens.push_back({test::FakeCodec::kEos, 0.0f, {}});
  ev.finish = FinishReason::kStop;
  ChoiceDelta d = t.on_event(ev);
  EXPECT_EQ(d.text, "ok");
  EXPECT_EQ(t.completion_tokens(), 3);
}

}  // namespace
}  // namespace gb::server
