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

// Waits for a channel's finish while an engine thread steps (background mode).
test::Output wait_for(RequestChannel& ch) {
  test::Output out;
  GenerationEvent ev;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (out.finish == FinishReason::kNone && std::chrono::steady_clock::now() < end) {
    if (!ch.pop(&ev, std::chrono::milliseconds(20))) continue;
    for (const auto& t : ev.tokens) out.tokens.push_back(t.token);
    if (ev.finish != FinishReason::kNone) {
      out.finish = ev.finish;
      out.error = ev.error;
    }
  }
  return out;
}

// Loading while serving (issue 12.3): a running engine thread keeps answering base requests while
// a variant is resolved and committed between two steps; the variant then gives the fixture's
// reference tokens; unloaded, it is refused at once and freed once nothing runs on it; ids are
// never reused, so a reload is a new id with the same outputs.
TEST(VariantEngine, LoadAndUnloadWhileServing) {
  auto m =
      load_model(test::shared_path("testdata/reference/qwen3-qknorm/hf"), {.max_batch_tokens = 64, .n_threads = 2});
  ASSERT_TRUE(m.is_ok()) << m.message();
  std::unique_ptr<Model> model = std::move(m).value();
  const json ref = read_json(test::shared_path("testdata/patches/qwen3-lora/reference.json"));
  const json base_ref = read_json(test::shared_path("testdata/reference/qwen3-qknorm/reference.json"));
  auto p = patch::load_patch(test::shared_path("testdata/patches/qwen3-lora/adapter"));
  ASSERT_TRUE(p.is_ok()) << p.message();
  auto e = make_engine(model.get());
  e->start();
  const auto ids = ref["sequences"][1].get<std::vector<int32_t>>();
  auto want_base = base_ref["greedy"]["f32"][1].get<std::vector<int32_t>>();
  want_base.resize(16);
  // Base traffic in flight across the load.
  std::vector<std::shared_ptr<RequestChannel>> base;
  for (int i = 0; i < 4; ++i) {
    base.push_back(std::make_shared<RequestChannel>());
    ASSERT_TRUE(e->submit(greedy(ids, 0), base.back()).is_ok());
  }
  auto id = e->load_variant(*p, "lora", 1.0);
  ASSERT_TRUE(id.is_ok()) << id.message();
  EXPECT_EQ(*id, 1);
  ASSERT_EQ(e->variants().size(), 1u);
  EXPECT_EQ(e->variants()[0].name, "lora");
  auto on_variant = std::make_shared<RequestChannel>();
  ASSERT_TRUE(e->submit(greedy(ids, *id), on_variant).is_ok());
  for (auto& ch : base) EXPECT_EQ(wait_for(*ch).tokens, want_base);
  EXPECT_EQ(wait_for(*on_variant).tokens, ref["greedy_16"][1].get<std::vector<int32_t>>());

  // Unload with a request still running on it: refused for new requests at once, freed after.
  auto running = std::make_shared<RequestChannel>();
  GenerationRequest longer = greedy(ids, *id);
  longer.max_tokens = 200;
  ASSERT_TRUE(e->submit(longer, running).is_ok());
  ASSERT_TRUE(e->unload_variant(*id).is_ok());
  EXPECT_TRUE(e->variants().empty());
  Status refused = e->submit(greedy(ids, *id), std::make_shared<RequestChannel>());
  EXPECT_FALSE(refused.is_ok());
  EXPECT_NE(refused.message().find("is not loaded"), std::string::npos) << refused.message();
  const test::Output finished = wait_for(*running);
  EXPECT_EQ(finished.finish, FinishReason::kLength) << finished.error;
  EXPECT_EQ(finished.tokens.size(), 200u);
  // Freed at the next step boundary.
  for (int i = 0; i < 200 && model->variant_active(*id); ++i) {
    auto poke = std::make_shared<RequestChannel>();
    ASSERT_TRUE(e->submit(greedy({1, 2}, 0), poke).is_ok());
    wait_for(*poke);
  }
  EXPECT_FALSE(model->variant_active(*id));
  EXPECT_EQ(model->variants()[0].bytes, 0);
  EXPECT_FALSE(e->unload_variant(*id).is_ok());

  // Reloaded: a new id, the same outputs.
  auto again = e->load_variant(*p, "lora", 1.0);
  ASSERT_TRUE(again.is_ok()) << again.message();
  EXPECT_EQ(*again, 2);
  auto ch = std::make_shared<RequestChannel>();
  ASSERT_TRUE(e->submit(greedy(ids, *again), ch).is_ok());
  EXPECT_EQ(wait_for(*ch).tokens, ref["greedy_16"][1].get<std::vector<int32_t>>());
  e->stop();
}

}  // namespace
}  // namespace gb
