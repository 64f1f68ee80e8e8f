// OpenAI request validation: each field, each error's status, param and message.
#include <gtest/gtest.h>

#include "server/fakes.h"
#include "server/openai_request.h"

namespace gb::server {
namespace {

using json = nlohmann::json;

class RequestTest : public ::testing::Test {
 protected:
  RequestTest() {
    limits_.served_model_name = "tiny";
    limits_.max_model_len = 64;
    limits_.max_n = 4;
    limits_.max_stop = 3;
    limits_.max_logprobs = 5;
  }
  std::optional<ApiError> parse(Endpoint e, const json& body) { return parse_request(e, body, limits_, codec_, &out_); }
  std::optional<ApiError> completion(json extra) {
    json body = {{"model", "tiny"}, {"prompt", "hi"}};
    if (extra.is_object()) body.update(extra);
    return parse(Endpoint::kCompletions, body);
  }
  std::optional<ApiError> chat(json extra) {
    json body = {{"model", "tiny"}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
    if (extra.is_object()) body.update(extra);
    return parse(Endpoint::kChat, body);
  }

  test::FakeCodec codec_;
  RequestLimits limits_;
  ParsedRequest out_;
};

TEST_F(RequestTest, CompletionDefaults) {
  ASSERT_FALSE(completion({}));
  ASSERT_EQ(out_.prompts.size(), 1u);
  EXPECT_EQ(out_.prompts[0].tokens, (std::vector<int32_t>{1, 3 + 'h', 3 + 'i'}));  // BOS added
  EXPECT_EQ(out_.prompts[0].max_tokens, 61);                                       // the rest of the context
  EXPECT_EQ(out_.n, 1);
  EXPECT_EQ(out_.top_logprobs, -1);
  EXPECT_FALSE(out_.stream);
}

TEST_F(RequestTest, EveryFieldIsParsed) {
  ASSERT_FALSE(completion({{"max_tokens", 5},
                           {"temperature", 0.5},
                           {"top_p", 0.9},
                           {"top_k", 7},
                           {"min_p", 0.05},
                           {"presence_penalty", 0.5},
                           {"frequency_penalty", -0.5},
                           {"repetition_penalty", 1.1},
                           {"seed", 42},
                           {"stop", {"x", "yz"}},
                           {"n", 2},
                           {"logprobs", 3},
                           {"logit_bias", {{"5", -100}, {"7", 2.5}}},
                           {"ignore_eos", true},
                           {"user", "u1"},
                           {"stream", true},
                           {"stream_options", {{"include_usage", true}}}}));
  EXPECT_EQ(out_.prompts[0].max_tokens, 5);
  EXPECT_FLOAT_EQ(out_.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(out_.sampling.top_p, 0.9f);
  EXPECT_EQ(out_.sampling.top_k, 7);
  EXPECT_FLOAT_EQ(out_.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(out_.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(out_.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(out_.sampling.repetition_penalty, 1.1f);
  EXPECT_TRUE(out_.sampling.has_seed);
  EXPECT_EQ(out_.sampling.seed, 42u);
  EXPECT_EQ(out_.stop, (std::vector<std::string>{"x", "yz"}));
  EXPECT_EQ(out_.n, 2);
  EXPECT_EQ(out_.top_logprobs, 3);
  EXPECT_EQ(out_.sampling.logit_bias.at(5), -100.0f);
  EXPECT_EQ(out_.sampling.logit_bias.at(7), 2.5f);
  EXPECT_TRUE(out_.ignore_eos);
  EXPECT_EQ(out_.user, "u1");
  EXPECT_TRUE(out_.stream);
  EXPECT_TRUE(out_.include_usage);
}

TEST_F(RequestTest, PromptShapes) {
  ASSERT_FALSE(completion({{"prompt", {"a", "bc"}}}));
  ASSERT_EQ(out_.prompts.size(), 2u);
  EXPECT_EQ(out_.prompts[1].tokens.size(), 3u);
  ASSERT_FALSE(completion({{"prompt", {5, 6, 7}}}));
  ASSERT_EQ(out_.prompts.size(), 1u);
  EXPECT_EQ(out_.prompts[0].tokens, (std::vector<int32_t>{5, 6, 7}));  // ids as given, no BOS
  ASSERT_FALSE(completion({{"prompt", {{5}, {6, 7}}}}));
  ASSERT_EQ(out_.prompts.size(), 2u);
  EXPECT_EQ(out_.prompts[1].tokens, (std::vector<int32_t>{6, 7}));
}

struct BadCase {
  json extra;
  std::string param;
  std::string message_part;
};

TEST_F(RequestTest, InvalidCompletionFieldsAre400NamingTheField) {
  const BadCase cases[] = {
      {{{"temperature", "hot"}}, "temperature", "expected a number"},
      {{{"temperature", -1}}, "temperature", "must be in [0, 100]"},
      {{{"top_p", 0}}, "top_p", "must be in (0, 1]"},
      {{{"top_k", -2}}, "top_k", "must be in [-1,"},
      {{{"top_k", 1.5}}, "top_k", "expected an integer"},
      {{{"min_p", 2}}, "min_p", "[0, 1]"},
      {{{"presence_penalty", 3}}, "presence_penalty", "[-2, 2]"},
      {{{"frequency_penalty", -3}}, "frequency_penalty", "[-2, 2]"},
      {{{"repetition_penalty", 0}}, "repetition_penalty", "(0, 100]"},
      {{{"seed", "x"}}, "seed", "expected an integer"},
      {{{"stop", 5}}, "stop", "expected a string or a list of strings"},
      {{{"stop", {"a", "b", "c", "d"}}}, "stop", "at most 3 stop strings"},
      {{{"stop", ""}}, "stop", "must not be empty"},
      {{{"n", 0}}, "n", "must be in [1, 4]"},
      {{{"n", 5}}, "n", "must be in [1, 4]"},
      {{{"logprobs", 6}}, "logprobs", "must be in [0, 5]"},
      {{{"logprobs", true}}, "logprobs", "expected an integer"},
      {{{"logit_bias", {{"abc", 1}}}}, "logit_bias", "is not a token id"},
      {{{"logit_bias", {{"999", 1}}}}, "logit_bias", "outside the vocabulary"},
      {{{"logit_bias", {{"5", 101}}}}, "logit_bias", "[-100, 100]"},
      {{{"logit_bias", {1, 2}}}, "logit_bias", "expected an object"},
      {{{"ignore_eos", 1}}, "ignore_eos", "expected a boolean"},
      {{{"user", 5}}, "user", "expected a string"},
      {{{"stream", "yes"}}, "stream", "expected a boolean"},
      {{{"stream_options", {{"include_usage", true}}}}, "stream_options", "only allowed when stream is true"},
      {{{"stream", true}, {"stream_options", {{"include_usage", 1}}}},
       "stream_options.include_usage",
       "expected a boolean"},
      {{{"max_tokens", 0}}, "max_tokens", "must be in [1,"},
      {{{"max_tokens", "many"}}, "max_tokens", "expected an integer"},
      {{{"prompt", json::array()}}, "prompt", "must not be an empty list"},
      {{{"prompt", {1, "a"}}}, "prompt", "expected token ids"},
      {{{"prompt", {"a", 1}}}, "prompt", "expected a string, a list of strings"},
      {{{"prompt", {999}}}, "prompt", "outside the vocabulary [0, 259)"},
      {{{"prompt", 5}}, "prompt", "expected a string"},
      {{{"prompt", nullptr}}, "prompt", "required"},
      {{{"echo", "yes"}}, "echo", "expected a boolean"},
      {{{"echo", true}, {"max_tokens", -1}}, "max_tokens", "must be in [0,"},
      {{{"prompt_logprobs", 21}}, "prompt_logprobs", "must be in [0,"},
      {{{"suffix", "x"}}, "suffix", "not supported"},
      {{{"best_of", 3}}, "best_of", "equal to n"},
      {{{"model", 7}}, "model", "expected a string"},
  };
  for (const BadCase& c : cases) {
    auto err = completion(c.extra);
    ASSERT_TRUE(err) << c.extra.dump();
    EXPECT_EQ(err->status, 400) << c.extra.dump();
    EXPECT_EQ(err->type, "invalid_request_error");
    EXPECT_EQ(err->param, c.param) << c.extra.dump() << " -> " << err->message;
    EXPECT_NE(err->message.find(c.message_part), std::string::npos) << c.extra.dump() << " -> " << err->message;
  }
}

TEST_F(RequestTest, EchoAndPromptLogprobs) {
  ASSERT_FALSE(completion({{"echo", true}, {"max_tokens", 0}, {"logprobs", 3}, {"prompt_logprobs", 1}}));
  EXPECT_TRUE(out_.echo);
  EXPECT_EQ(out_.prompts[0].max_tokens, 0);  // scoring only
  EXPECT_EQ(out_.top_logprobs, 3);
  EXPECT_EQ(out_.prompt_logprobs, 1);
  ASSERT_FALSE(chat({{"prompt_logprobs", 0}}));
  EXPECT_EQ(out_.prompt_logprobs, 0);
  ASSERT_FALSE(completion({}));
  EXPECT_FALSE(out_.echo);
  EXPECT_EQ(out_.prompt_logprobs, -1);
}

TEST_F(RequestTest, ChatMessagesAndLogprobs) {
  ASSERT_FALSE(chat({{"logprobs", true}, {"top_logprobs", 2}, {"max_completion_tokens", 3}, {"max_tokens", 9}}));
  EXPECT_EQ(out_.top_logprobs, 2);
  EXPECT_EQ(out_.prompts[0].max_tokens, 3);  // max_completion_tokens wins
  EXPECT_EQ(out_.prompts[0].text, "<|user|>hi\n<|assistant|>");
  EXPECT_EQ(out_.prompts[0].tokens.size(), out_.prompts[0].text.size());  // no BOS: the template owns it
  ASSERT_FALSE(chat({{"logprobs", true}}));
  EXPECT_EQ(out_.top_logprobs, 0);
  ASSERT_FALSE(chat(
      {{"messages",
        {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}}}}}));
  EXPECT_EQ(out_.prompts[0].text, "<|user|>ab\n<|assistant|>");
}

TEST_F(RequestTest, InvalidChatFields) {
  const BadCase cases[] = {
      {{{"messages", json::array()}}, "messages", "non-empty list"},
      {{{"messages", "hi"}}, "messages", "non-empty list"},
      {{{"messages", {{{"role", "wizard"}, {"content", "x"}}}}}, "messages[0].role", "must be one of"},
      {{{"messages", {{{"role", "user"}}}}}, "messages[0].content", "required"},
      {{{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}},
       "messages[0].content[0].type",
       "only text"},
      {{{"messages", {{{"role", "user"}, {"content", "{% raise %}"}}}}}, "messages", "chat template failed"},
      {{{"top_logprobs", 2}}, "top_logprobs", "requires logprobs"},
      {{{"logprobs", true}, {"top_logprobs", 9}}, "top_logprobs", "must be in [0, 5]"},
      {{{"logprobs", 1}}, "logprobs", "expected a boolean"},
      {{{"tools", {{{"type", "function"}}}}}, "tools", "not supported"},
      {{{"response_format", {{"type", "json_object"}}}}, "response_format", "only"},
      {{{"max_completion_tokens", -1}}, "max_completion_tokens", "must be in [1,"},
  };
  for (const BadCase& c : cases) {
    auto err = chat(c.extra);
    ASSERT_TRUE(err) << c.extra.dump();
    EXPECT_EQ(err->status, 400);
    EXPECT_EQ(err->param, c.param) << c.extra.dump() << " -> " << err->message;
    EXPECT_NE(err->message.find(c.message_part), std::string::npos) << c.extra.dump() << " -> " << err->message;
  }
}

TEST_F(RequestTest, UnknownModelIs404) {
  auto err = completion({{"model", "gpt-4"}});
  ASSERT_TRUE(err);
  EXPECT_EQ(err->status, 404);
  EXPECT_EQ(err->param, "model");
  EXPECT_EQ(err->code, "model_not_found");
  EXPECT_NE(err->message.find("'gpt-4' does not exist"), std::string::npos);
  ASSERT_FALSE(completion({{"model", nullptr}}));  // absent model: the served one
  EXPECT_EQ(out_.model, "tiny");
}

TEST_F(RequestTest, VariantsAreModelsToo) {
  limits_.other_models = {"lora", "fix"};
  ASSERT_FALSE(completion({{"model", "lora"}}));
  EXPECT_EQ(out_.model, "lora");
  auto err = completion({{"model", "lora2"}});
  ASSERT_TRUE(err);
  EXPECT_EQ(err->status, 404);
  EXPECT_NE(err->message.find("this server serves 'tiny', 'lora', 'fix'"), std::string::npos) << err->message;
  // A long list is cut, pointing at /v1/models.
  for (int i = 0; i < 20; ++i) {
    std::string name = "v";  // (not "v" + to_string: GCC 12's -Wrestrict false positive)
    name += std::to_string(i);
    limits_.other_models.push_back(name);
  }
  err = completion({{"model", "nope"}});
  ASSERT_TRUE(err);
  EXPECT_NE(err->message.find("and 14 more (GET /v1/models)"), std::string::npos) << err->message;
  ASSERT_FALSE(completion({{"return_tokens_as_token_ids", true}}));
  EXPECT_TRUE(out_.return_tokens_as_token_ids);
  err = completion({{"return_tokens_as_token_ids", 1}});
  ASSERT_TRUE(err);
  EXPECT_EQ(err->param, "return_tokens_as_token_ids");
}

TEST_F(RequestTest, ContextOverflowNamesBothNumbers) {
  // "hi" is 3 tokens with BOS; 3 + 62 = 65 > 64.
  auto err = completion({{"max_tokens", 62}});
  ASSERT_TRUE(err);
  EXPECT_EQ(err->status, 400);
  EXPECT_EQ(err->code, "context_length_exceeded");
  EXPECT_NE(err->message.find("maximum context length is 64 tokens"), std::string::npos) << err->message;
  EXPECT_NE(err->message.find("you requested 65 tokens (3 in the prompt, 62 in the completion)"), std::string::npos)
      << err->message;
  ASSERT_FALSE(completion({{"max_tokens", 61}}));  // exactly fits
  auto full = completion({{"prompt", std::string(70, 'x')}});
  ASSERT_TRUE(full);
  EXPECT_NE(full->message.find("has 71 tokens"), std::string::npos) << full->message;
}

TEST_F(RequestTest, BodyMustBeAnObject) {
  auto err = parse(Endpoint::kCompletions, json::array());
  ASSERT_TRUE(err);
  EXPECT_EQ(err->status, 400);
}

}  // namespace
}  // namespace gb::server
