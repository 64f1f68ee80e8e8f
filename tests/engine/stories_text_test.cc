// stories260K end to end: tokenizer prompt ids, greedy generation through the engine, and the
// streamed text equal llama2.c's reference (reference.json) for every case.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "engine/engine.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace gb {
namespace {

TEST(StoriesEndToEnd, PromptIdsGreedyIdsAndTextMatchReference) {
  const std::string dir = test::shared_path("models/stories260K");
  auto tok = Tokenizer::load(dir);
  ASSERT_TRUE(tok.is_ok()) << tok.message();
  auto model = load_model(dir);
  ASSERT_TRUE(model.is_ok()) << model.message();
  EngineConfig ec;
  ec.scheduler.max_num_seqs = 8;
  ec.scheduler.max_num_batched_tokens = 64;
  auto engine = Engine::create(model->get(), ec);
  ASSERT_TRUE(engine.is_ok()) << engine.message();
  auto ref_text = read_file(dir + "/reference.json");
  ASSERT_TRUE(ref_text.is_ok());
  const auto ref = nlohmann::json::parse(*ref_text);

  // All five cases in one batch, each streamed through its own decoder.
  struct Case {
    std::shared_ptr<RequestChannel> channel = std::make_shared<RequestChannel>();
    std::vector<int32_t> prompt, ids;
    std::string text;
  };
  std::vector<Case> cases(ref["cases"].size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = ref["cases"][i];
    cases[i].prompt = (*tok)->encode(c["prompt"].get<std::string>(), /*add_special=*/true);
    EXPECT_EQ(cases[i].prompt, c["prompt_ids"].get<std::vector<int32_t>>()) << c["prompt"];
    GenerationRequest r;
    r.prompt = cases[i].prompt;
    r.max_tokens = 64;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    ASSERT_TRUE((*engine)->submit(r, cases[i].channel).is_ok());
  }
  ASSERT_TRUE((*engine)->run_until_idle().is_ok());
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = ref["cases"][i];
    StreamDecoder dec(**tok, /*skip_special=*/true);
    dec.prime(cases[i].prompt);
    GenerationEvent ev;
    while (cases[i].channel->pop(&ev, std::chrono::milliseconds(0))) {
      for (const auto& t : ev.tokens) {
        cases[i].ids.push_back(t.token);
        cases[i].text += dec.push(t.token);
      }
    }
    cases[i].text += dec.flush();
    EXPECT_EQ(cases[i].ids, c["continuation_ids"].get<std::vector<int32_t>>()) << c["prompt"];
    EXPECT_EQ(cases[i].text, c["continuation_text"].get<std::string>()) << c["prompt"];
  }
}

}  // namespace
}  // namespace gb
