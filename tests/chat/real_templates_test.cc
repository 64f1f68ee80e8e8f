// The basic system+user+assistant conversation through each real template, against prompts
// written out by hand from each template's semantics (independent of the generated expected/
// files), plus the ChatML templates shipped with the shared tiny Qwen fixtures.
#include <gtest/gtest.h>

#include "case_support.h"
#include "support/test_support.h"

namespace gb::chat {
namespace {

using Json = nlohmann::ordered_json;
const std::string kDir = GB_CHAT_TEST_DIR;

const Json kBasic = Json::parse(R"([
  {"role": "system", "content": "You are a helpful assistant."},
  {"role": "user", "content": "Hello!"},
  {"role": "assistant", "content": "Hi there. How can I help?"}])");

std::string apply(const std::string& name, const Json& messages, bool gen, const std::string& bos,
                  const std::string& eos, const Json& kwargs = Json::object()) {
  auto t = ChatTemplate::parse(testing::read_file(kDir + "/templates/" + name + ".jinja"));
  if (!t.is_ok()) return "PARSE ERROR: " + t.message();
  ChatTemplateOptions o;
  o.add_generation_prompt = gen;
  o.bos_token = bos;
  o.eos_token = eos;
  o.kwargs = kwargs;
  o.render.now = 1721995200;  // 26 Jul 2024
  auto r = apply_chat_template(*t, messages, o);
  return r.is_ok() ? *r : "RENDER ERROR: " + r.message();
}

const char kChatMlBasicGen[] =
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n"
    "<|im_start|>assistant\nHi there. How can I help?<|im_end|>\n<|im_start|>assistant\n";

TEST(RealTemplates, ChatMl) { EXPECT_EQ(apply("chatml", kBasic, true, "", "<|im_end|>"), kChatMlBasicGen); }

TEST(RealTemplates, Llama2) {
  EXPECT_EQ(
      apply("llama-2-7b-chat", kBasic, false, "<s>", "</s>"),
      "<s>[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\nHello! [/INST] Hi there. How can I help? </s>");
}

TEST(RealTemplates, Llama3) {
  EXPECT_EQ(apply("llama-3-8b-instruct", kBasic, true, "<|begin_of_text|>", "<|eot_id|>"),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHi there. How can I help?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(RealTemplates, Llama31And32) {
  const std::string want =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
      "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nYou are a helpful assistant.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\nHi there. How can I help?<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n";
  EXPECT_EQ(apply("llama-3.2-3b-instruct", kBasic, true, "<|begin_of_text|>", "<|eot_id|>"), want);
  EXPECT_EQ(apply("llama-3.3-70b-instruct", kBasic, true, "<|begin_of_text|>", "<|eot_id|>"), want);
  // date_string passed by the caller wins over strftime_now.
  const std::string dated = apply("llama-3.2-3b-instruct", kBasic, true, "", "", Json{{"date_string", "01 Jan 2025"}});
  EXPECT_NE(dated.find("Today Date: 01 Jan 2025\n"), std::string::npos) << dated;
}

TEST(RealTemplates, Mistral) {
  const Json no_system = Json::parse(R"([{"role": "user", "content": "Hello!"},
    {"role": "assistant", "content": "Hi."}, {"role": "user", "content": "Who are you?"}])");
  EXPECT_EQ(apply("mistral-7b-instruct-v0.1", no_system, false, "<s>", "</s>"),
            "<s>[INST] Hello! [/INST]Hi.</s> [INST] Who are you? [/INST]");
  EXPECT_EQ(apply("mistral-7b-instruct-v0.3", kBasic, false, "<s>", "</s>"),
            "<s>[INST] You are a helpful assistant.\n\nHello![/INST] Hi there. How can I help?</s>");
  EXPECT_NE(apply("mistral-7b-instruct-v0.1", kBasic, false, "<s>", "</s>")
                .find("raise_exception: Conversation roles must alternate user/assistant/user/assistant/..."),
            std::string::npos);
}

TEST(RealTemplates, Qwen) {
  EXPECT_EQ(apply("qwen2.5-7b-instruct", kBasic, true, "", "<|im_end|>"), kChatMlBasicGen);
  const std::string thinking_turn =
      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n"
      "<|im_start|>assistant\n<think>\n\n</think>\n\nHi there. How can I help?<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(apply("qwen3-0.6b", kBasic, true, "", "<|im_end|>", Json{{"enable_thinking", false}}),
            thinking_turn + "<think>\n\n</think>\n\n");
  EXPECT_EQ(apply("qwen3-0.6b", kBasic, true, "", "<|im_end|>", Json{{"enable_thinking", true}}), thinking_turn);
  EXPECT_EQ(apply("qwen3.5-27b", kBasic, true, "", "<|im_end|>"), thinking_turn + "<think>\n");
  EXPECT_EQ(apply("qwen3.5-27b", kBasic, true, "", "<|im_end|>", Json{{"enable_thinking", false}}),
            thinking_turn + "<think>\n\n</think>\n\n");
}

TEST(RealTemplates, ZephyrAndTinyLlama) {
  const std::string want =
      "<|system|>\nYou are a helpful assistant.</s>\n<|user|>\nHello!</s>\n"
      "<|assistant|>\nHi there. How can I help?</s>\n<|assistant|>\n";
  EXPECT_EQ(apply("zephyr-7b-beta", kBasic, true, "<s>", "</s>"), want);
  EXPECT_EQ(apply("tinyllama-1.1b-chat-v1.0", kBasic, true, "<s>", "</s>"), want);
}

TEST(RealTemplates, SharedTinyQwenFixturesShipChatMl) {
  for (const char* fixture : {"qwen2-bias", "qwen3-qknorm", "qwen35-hybrid"}) {
    const std::string path =
        gb::test::shared_path(std::string("testdata/reference/") + fixture + "/hf/tokenizer_config.json");
    const std::string text = testing::read_file(path);
    if (text.empty()) GTEST_SKIP() << "missing " << path;
    const nlohmann::json cfg = nlohmann::json::parse(text);
    auto source = chat_template_from_config(cfg);
    ASSERT_TRUE(source.is_ok()) << source.message();
    auto t = ChatTemplate::parse(*source);
    ASSERT_TRUE(t.is_ok()) << t.message();
    ChatTemplateOptions o;
    o.add_generation_prompt = true;
    o.eos_token = special_token_from_config(cfg, "eos_token");
    auto r = apply_chat_template(*t, kBasic, o);
    ASSERT_TRUE(r.is_ok()) << r.message();
    EXPECT_EQ(*r, kChatMlBasicGen) << fixture;
  }
}

TEST(RealTemplates, AllFixturesParse) {
  for (const char* name :
       {"chatml", "llama-2-7b-chat", "llama-3-8b-instruct", "llama-3.2-3b-instruct", "llama-3.3-70b-instruct",
        "mistral-7b-instruct-v0.1", "mistral-7b-instruct-v0.3", "qwen2.5-7b-instruct", "qwen3-0.6b", "qwen3.5-27b",
        "tinyllama-1.1b-chat-v1.0", "zephyr-7b-beta"}) {
    const std::string src = testing::read_file(kDir + "/templates/" + name + ".jinja");
    ASSERT_FALSE(src.empty()) << name;
    auto t = ChatTemplate::parse(src);
    EXPECT_TRUE(t.is_ok()) << name << ": " << t.message();
  }
}

}  // namespace
}  // namespace gb::chat
