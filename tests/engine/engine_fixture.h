// What the engine tests share: a model and its reference.json loaded once per suite, engines of a
// given shape, greedy requests, and running requests together and collecting their outputs
// (collect and run_together, also used by the tests without the fixture).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "engine/engine.h"
#include "support/test_support.h"

namespace gb::test {

struct Output {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  FinishReason finish = FinishReason::kNone;
  EngineErrorCode code = EngineErrorCode::kNone;
  std::string error;
  int32_t cached = 0;
  std::shared_ptr<const GlassReport> glass;
  std::vector<GeneratedToken> prompt_logprobs;
  bool prompt_logprobs_after_token = false;  // a prompt logprob arrived after a generated token (never should)
};

// Drains a channel: every token with its logprob, the prefix-cache hits, the finish with its code,
// error and glass report.
inline Output collect(RequestChannel& ch) {
  Output out;
  GenerationEvent ev;
  while (ch.pop(&ev, std::chrono::milliseconds(0))) {
    if (!ev.prompt_logprobs.empty() && !out.tokens.empty()) out.prompt_logprobs_after_token = true;
    for (auto& t : ev.prompt_logprobs) out.prompt_logprobs.push_back(std::move(t));
    for (const auto& t : ev.tokens) {
      out.tokens.push_back(t.token);
      out.logprobs.push_back(t.logprob);
    }
    out.cached = ev.cached_prompt_tokens;
    if (ev.finish != FinishReason::kNone) {
      out.finish = ev.finish;
      out.code = ev.error_code;
      out.error = ev.error;
      out.glass = ev.glass;
    }
  }
  return out;
}

// Runs requests together in one engine (stepped on this thread until idle) and returns their
// outputs in order.
inline std::vector<Output> run_together(Engine& e, const std::vector<GenerationRequest>& reqs) {
  std::vector<std::shared_ptr<RequestChannel>> chans;
  for (const auto& r : reqs) {
    chans.push_back(std::make_shared<RequestChannel>());
    const Status st = e.submit(r, chans.back());
    EXPECT_TRUE(st.is_ok()) << st.message();
  }
  EXPECT_TRUE(e.run_until_idle().is_ok());
  std::vector<Output> outs;
  for (auto& c : chans) outs.push_back(collect(*c));
  return outs;
}

class EngineFixture : public ::testing::Test {
 protected:
  // Loads the model (a path under ../shared) and the reference.json in reference_dir.
  static void load(const std::string& model, const std::string& reference_dir, const LoadOptions& options) {
    auto m = load_model(shared_path(model), options);
    ASSERT_TRUE(m.is_ok()) << m.message();
    model_ = std::move(m).value().release();
    auto ref = read_file(shared_path(reference_dir + "/reference.json"));
    ASSERT_TRUE(ref.is_ok());
    ref_ = new nlohmann::json(nlohmann::json::parse(*ref));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete ref_;
    model_ = nullptr;
    ref_ = nullptr;
  }

  static std::unique_ptr<Engine> engine(int32_t max_seqs, int32_t batched, int64_t kv_bytes) {
    EngineConfig ec;
    ec.scheduler.max_num_seqs = max_seqs;
    ec.scheduler.max_num_batched_tokens = batched;
    ec.kv_cache_bytes = kv_bytes;
    auto e = Engine::create(model_, ec);
    EXPECT_TRUE(e.is_ok()) << e.message();
    return std::move(e).value();
  }

  static GenerationRequest greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
    GenerationRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    return r;
  }

  inline static Model* model_ = nullptr;
  inline static nlohmann::json* ref_ = nullptr;
};

}  // namespace gb::test
