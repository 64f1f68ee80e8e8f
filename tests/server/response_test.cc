// OpenAI response shapes and SSE framing.
#include <gtest/gtest.h>

#include "server/fakes.h"
#include "server/openai_response.h"

namespace gb::server {
namespace {

using json = nlohmann::json;

TEST(ResponseTest, ErrorBodyShape) {
  ApiError e = invalid_field("top_p", "top_p: bad");
  EXPECT_EQ(error_body(e), json::parse(R"({"error":{"message":"top_p: bad","type":"invalid_request_error",
                                          "param":"top_p","code":null}})"));
}

TEST(ResponseTest, SseFraming) {
  EXPECT_EQ(sse_data(json{{"a", "x\ny"}}), "data: {\"a\":\"x\\ny\"}\n\n");
  EXPECT_STREQ(kSseDone, "data: [DONE]\n\n");
}

TEST(ResponseTest, CompletionShapes) {
  ResponseMeta meta{Endpoint::kCompletions, "cmpl-1", 7, "tiny"};
  json full = full_response(meta, {{0, "hi", nullptr, "length"}}, {3, 2, 1});
  EXPECT_EQ(full, json::parse(R"({"id":"cmpl-1","object":"text_completion","created":7,"model":"tiny",
    "choices":[{"index":0,"text":"hi","logprobs":null,"finish_reason":"length"}],
    "usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":1}}})"));
  json chunk = stream_chunk(meta, 1, false, "x", nullptr, "", true);
  EXPECT_EQ(chunk, json::parse(R"({"id":"cmpl-1","object":"text_completion","created":7,"model":"tiny",
    "choices":[{"index":1,"text":"x","logprobs":null,"finish_reason":null}],"usage":null})"));
  EXPECT_EQ(usage_chunk(meta, {3, 2, 0})["choices"], json::array());
}

TEST(ResponseTest, ChatShapes) {
  ResponseMeta meta{Endpoint::kChat, "chatcmpl-1", 7, "tiny"};
  json full = full_response(meta, {{0, "hi", nullptr, "stop"}}, {3, 2, 0});
  EXPECT_EQ(full["object"], "chat.completion");
  EXPECT_EQ(full["choices"][0]["message"], json::parse(R"({"role":"assistant","content":"hi"})"));
  EXPECT_EQ(stream_chunk(meta, 0, true, "", nullptr, "", false)["choices"][0]["delta"],
            json::parse(R"({"role":"assistant","content":""})"));
  EXPECT_EQ(stream_chunk(meta, 0, false, "yo", nullptr, "", false)["choices"][0]["delta"],
            json::parse(R"({"content":"yo"})"));
  json fin = stream_chunk(meta, 0, false, "", nullptr, "stop", false);
  EXPECT_EQ(fin["choices"][0]["delta"], json::object());
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(fin["object"], "chat.completion.chunk");
  EXPECT_FALSE(fin.contains("usage"));
}

TEST(ResponseTest, Logprobs) {
  std::vector<GeneratedToken> toks = {{3 + 'a', -0.5f, {{3 + 'a', -0.5f}, {3 + 'b', -1.5f}}}, {3 + 'c', -0.1f, {}}};
  // Texts as ChoiceText makes them: what each token added (here with a leading space), and the
  // alternatives' texts at their place.
  std::vector<TokenText> texts = {{" a", {" a", " b"}}, {"\xC3\xA9", {}}};
  int64_t offset = 10;
  json c = logprobs_json(Endpoint::kCompletions, toks, texts, &offset);
  EXPECT_EQ(c, json::parse(R"({"tokens":[" a","é"],"token_logprobs":[-0.5,-0.10000000149011612],
    "top_logprobs":[{" a":-0.5," b":-1.5},{}],"text_offset":[10,12]})"));
  EXPECT_EQ(offset, 13) << "offsets count characters: é is one";
  json chat = logprobs_json(Endpoint::kChat, toks, texts, &offset);
  EXPECT_EQ(chat["content"][0]["token"], " a");
  EXPECT_EQ(chat["content"][0]["bytes"], json::array({32, 97}));
  EXPECT_EQ(chat["content"][0]["top_logprobs"][1]["token"], " b");
  EXPECT_EQ(chat["content"][1]["bytes"], json::array({0xC3, 0xA9}));
  // An alternative that ends mid-character is made valid UTF-8.
  std::vector<GeneratedToken> partial = {{3 + 'x', -1.0f, {{3 + 0xC3, -2.0f}}}};
  std::vector<TokenText> partial_texts = {{"x", {"\xC3"}}};
  json p = logprobs_json(Endpoint::kChat, partial, partial_texts, &offset);
  EXPECT_EQ(p["content"][0]["top_logprobs"][0]["token"], "\xEF\xBF\xBD");
  // vLLM's return_tokens_as_token_ids: tokens and alternatives by id; offsets still by text.
  offset = 0;
  json ids = logprobs_json(Endpoint::kCompletions, toks, texts, &offset, /*token_ids=*/true);
  EXPECT_EQ(ids["tokens"], json::parse(R"(["token_id:100","token_id:102"])"));
  EXPECT_EQ(ids["top_logprobs"][0], json::parse(R"({"token_id:100":-0.5,"token_id:101":-1.5})"));
  EXPECT_EQ(ids["text_offset"], json::parse("[0,2]"));
  json chat_ids = logprobs_json(Endpoint::kChat, toks, texts, &offset, /*token_ids=*/true);
  EXPECT_EQ(chat_ids["content"][1]["token"], "token_id:102");
  EXPECT_EQ(chat_ids["content"][0]["top_logprobs"][1]["token"], "token_id:101");
}

}  // namespace
}  // namespace gb::server
