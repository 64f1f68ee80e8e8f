// Weight variants in the engine (GenerationRequest::variant): base and variant requests batched
// together give exactly what each gives alone, the variant's greedy tokens are the patch
// fixture's reference greedy tokens (and the base's the base fixture's), the prefix cache never
// shares a block across variants, and an unknown variant is refused at submit.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/engine_fixture.h"
#include "patch/patch.h"

namespace gb {
namespace {

using nlohmann::json;
using test::run_together;

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

struct VariantSetup {
  std::unique_ptr<Model> model;
  int32_t id = 0;
  json base_ref, var_ref;
};

VariantSetup setup(const std::string& base_fixture, const std::string& model_rel, const std::string& patch_name,
                   const std::string& patch_path) {
  VariantSetup s;
  auto m = load_model(test::shared_path("testdata/reference/" + base_fixture + "/" + model_rel),
                      {.max_batch_tokens = 64, .n_threads = 2});
  EXPECT_TRUE(m.is_ok()) << m.message();
  if (!m.is_ok()) return s;
  s.model = std::move(m).value();
  auto p = patch::load_patch(patch_path);
  EXPECT_TRUE(p.is_ok()) << p.message();
  if (!p.is_ok()) return s;
  auto id = s.model->add_variant(*p, patch_name);
  EXPECT_TRUE(id.is_ok()) << id.message();
  s.id = id.is_ok() ? *id : 0;
  s.base_ref = read_json(test::shared_path("testdata/reference/" + base_fixture + "/reference.json"));
  s.var_ref = read_json(test::shared_path("testdata/patches/" + patch_name + "/reference.json"));
  return s;
}

std::unique_ptr<Engine> make_engine(Model* m) {
  EngineConfig ec;
  ec.scheduler.max_num_seqs = 8;
  ec.scheduler.max_num_batched_tokens = 64;
  auto e = Engine::create(m, ec);
  EXPECT_TRUE(e.is_ok()) << e.message();
  return std::move(e).value();
}

GenerationRequest greedy(std::vector<int32_t> prompt, int32_t variant) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = 16;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  r.variant = variant;
  return r;
}

void check_mixed(VariantSetup& s) {
  ASSERT_NE(s.id, 0);
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 3; ++i) {
    const auto ids = s.var_ref["sequences"][i].get<std::vector<int32_t>>();
    reqs.push_back(greedy(ids, 0));
    reqs.push_back(greedy(ids, s.id));
  }
  std::vector<test::Output> alone;
  for (const auto& r : reqs) alone.push_back(run_together(*make_engine(s.model.get()), {r})[0]);
  const auto together = run_together(*make_engine(s.model.get()), reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(together[i].tokens, alone[i].tokens) << "request " << i;
    const int seq = static_cast<int>(i / 2);
    if (i % 2 == 1) {
      EXPECT_EQ(together[i].tokens, s.var_ref["greedy_16"][seq].get<std::vector<int32_t>>()) << "variant, seq " << seq;
    } else {
      auto want = s.base_ref["greedy"]["f32"][seq].get<std::vector<int32_t>>();
      want.resize(16);
      EXPECT_EQ(together[i].tokens, want) << "base, seq " << seq;
      EXPECT_NE(together[i].tokens, together[i + 1].tokens) << "seq " << seq;
    }
  }
}

TEST(VariantEngine, LoraAndBaseRequestsBatchedTogetherAreExact) {
  VariantSetup s = setup("qwen3-qknorm", "hf", "qwen3-lora", test::shared_path("testdata/patches/qwen3-lora/adapter"));
  check_mixed(s);
}

TEST(VariantEngine, LoopfixAndBaseRequestsOnTheHybridModel) {
  const std::string dir = test::temp_dir() + "/loopfix";
  auto st = patch::diff_checkpoints(test::shared_path("testdata/reference/qwen35-hybrid/hf"),
                                    test::shared_path("testdata/patches/qwen35-loopfix/edited-hf"), dir,
                                    {"loopfix", "1", "", "qwen35-hybrid"});
  ASSERT_TRUE(st.is_ok()) << st.message();
  VariantSetup s = setup("qwen35-hybrid", "hf", "qwen35-loopfix", dir);
  check_mixed(s);
}

// The 33-token prompt fills two KV blocks: after the base ran it, the variant must not reuse
// them (and the base still does).
TEST(VariantEngine, PrefixCacheNeverSharesBlocksAcrossVariants) {
  VariantSetup s = setup("qwen3-qknorm", "hf", "qwen3-lora", test::shared_path("testdata/patches/qwen3-lora/adapter"));
  ASSERT_NE(s.id, 0);
  auto e = make_engine(s.model.get());
  const auto ids = s.var_ref["sequences"][2].get<std::vector<int32_t>>();
  const auto base1 = run_together(*e, {greedy(ids, 0)})[0];
  const auto var1 = run_together(*e, {greedy(ids, s.id)})[0];
  const auto base2 = run_together(*e, {greedy(ids, 0)})[0];
  const auto var2 = run_together(*e, {greedy(ids, s.id)})[0];
  EXPECT_EQ(var1.cached, 0);
  EXPECT_GT(base2.cached, 0);
  EXPECT_GT(var2.cached, 0);  // the variant's own blocks serve it again
  EXPECT_EQ(var1.tokens, s.var_ref["greedy_16"][2].get<std::vector<int32_t>>());
  EXPECT_EQ(var2.tokens, var1.tokens);
  EXPECT_EQ(base2.tokens, base1.tokens);
}

TEST(VariantEngine, UnknownVariantIsRefusedAtSubmit) {
  VariantSetup s = setup("qwen3-qknorm", "hf", "qwen3-lora", test::shared_path("testdata/patches/qwen3-lora/adapter"));
  auto e = make_engine(s.model.get());
  for (int32_t v : {-1, 2}) {
    EngineErrorCode code = EngineErrorCode::kNone;
    Status st = e->submit(greedy({1, 2, 3}, v), std::make_shared<RequestChannel>(), &code);
    ASSERT_FALSE(st.is_ok());
    EXPECT_EQ(code, EngineErrorCode::kInvalidRequest);
    EXPECT_NE(st.message().find("variant " + std::to_string(v) + " is not loaded"), std::string::npos) << st.message();
  }
}

}  // namespace
}  // namespace gb
