// `glassbox dump` end to end: the built binary writes a safetensors file whose hook tensors equal
// the reference fixture's (llama.cpp) hook states.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "reference_util.h"

namespace gb {
namespace {

#ifdef GB_GLASSBOX_BIN

std::string join_ids(const std::vector<int32_t>& ids) {
  std::ostringstream s;
  for (size_t i = 0; i < ids.size(); ++i) s << (i ? " " : "") << ids[i];
  return s.str();
}

int run(const std::string& args) {
  const std::string cmd = std::string(GB_GLASSBOX_BIN) + " dump " + args + " 2>/dev/null";
  return std::system(cmd.c_str());
}

class DumpCli : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(DumpCli, WritesTheReferenceHookStates) {
  const auto [fixture, file] = GetParam();
  const test::Reference ref = test::load_reference(fixture);
  const int s = 1;
  const std::string out = test::temp_dir() + "/dump.safetensors";
  ASSERT_EQ(run("--model " + ref.dir + "/" + file + " --prompt-ids \"" + join_ids(ref.ids(s)) +
                "\" --points all --layers all -t 1 -o " + out),
            0);
  auto st = read_safetensors(out);
  ASSERT_TRUE(st.is_ok()) << st.message();
  int n_layers = 0;
  while (ref.arrays.count("seq1.layers." + std::to_string(n_layers) + ".resid_post")) ++n_layers;
  ASSERT_GT(n_layers, 0);
  int compared = 0;
  for (const auto& t : st->tensors) {
    std::string tol_key = t.name;
    if (t.name.starts_with("layers.")) tol_key = "layers." + t.name.substr(t.name.rfind('.') + 1);
    const std::string ref_key = "seq" + std::to_string(s) + "." + t.name;
    if (t.name == "ids" || tol_key == "layers.resid_pre" || !ref.arrays.count(ref_key)) continue;
    const auto& want = ref.at(ref_key);
    ASSERT_EQ(t.shape, want.shape) << t.name;
    const double err = test::max_abs_diff(reinterpret_cast<const float*>(t.data), want.f.data(), want.f.size());
    EXPECT_LE(err, ref.tol(tol_key)) << t.name;
    ++compared;
  }
  // embed, final_norm, logits and five points in each layer.
  EXPECT_EQ(compared, 3 + 5 * n_layers);
}

INSTANTIATE_TEST_SUITE_P(Reference, DumpCli,
                         ::testing::Values(std::make_pair("llama-gqa", "hf"),
                                           std::make_pair("qwen3-qknorm", "gguf/model-f32.gguf"),
                                           std::make_pair("qwen35-hybrid", "gguf/model-f32.gguf")));

TEST(DumpCliArgs, SelectsPointsAndLayersAndRejectsBadInput) {
  const std::string model = test::shared_path("models/stories260K");
  const std::string out = test::temp_dir() + "/sel.safetensors";
  ASSERT_EQ(run("--model " + model +
                " --prompt-ids \"1 403 407\" --points mlp_act,resid_post,logits --layers 1-2,4 -o " + out),
            0);
  auto st = read_safetensors(out);
  ASSERT_TRUE(st.is_ok());
  std::vector<std::string> names;
  for (const auto& t : st->tensors) names.push_back(t.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names,
            (std::vector<std::string>{"ids", "layers.1.mlp_act", "layers.1.resid_post", "layers.2.mlp_act",
                                      "layers.2.resid_post", "layers.4.mlp_act", "layers.4.resid_post", "logits"}));
  for (const auto& t : st->tensors) {
    if (t.name == "layers.1.mlp_act") {
      EXPECT_EQ(t.shape, (std::vector<int64_t>{3, 172}));
    }
    if (t.name == "logits") {
      EXPECT_EQ(t.shape, (std::vector<int64_t>{3, 512}));
    }
  }
  EXPECT_NE(run("--model " + model + " --prompt-ids \"1 2\" --points resid_postt -o " + out), 0);
  EXPECT_NE(run("--model " + model + " --prompt-ids \"1 2\" --layers 9 -o " + out), 0);
  EXPECT_NE(run("--model " + model + " --prompt-ids \"1 x\" -o " + out), 0);
  EXPECT_NE(run("--model " + model + " --prompt-ids \"1 99999\" -o " + out), 0);
  EXPECT_NE(run("--model /nonexistent --prompt-ids \"1\" -o " + out), 0);
}

// --prompt tokenizes with the model's tokenizer when the build has the tokenizer library.
TEST(DumpCliArgs, PromptTextIsTokenizedWhenTheTokenizerIsBuiltIn) {
  const std::string dir = test::temp_dir(), out = dir + "/text.safetensors", err = dir + "/stderr.txt";
  const std::string cmd = std::string(GB_GLASSBOX_BIN) + " dump --model " + test::shared_path("models/stories260K") +
                          " --prompt \"Once upon a time\" --points embed -o " + out + " 2>" + err;
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream in(err);
    const std::string msg(std::istreambuf_iterator<char>(in), {});
    if (msg.find("needs the tokenizer library") != std::string::npos) GTEST_SKIP() << msg;
    FAIL() << msg;
  }
  auto st = read_safetensors(out);
  ASSERT_TRUE(st.is_ok());
  for (const auto& t : st->tensors) {
    if (t.name != "ids") continue;
    std::vector<int32_t> ids(t.numel());
    std::memcpy(ids.data(), t.data, t.nbytes);
    EXPECT_EQ(ids, (std::vector<int32_t>{1, 403, 407, 261, 378}));  // <s> ▁Once ▁upon ▁a ▁time
  }
}

#else
TEST(DumpCli, NeedsTheGlassboxBinary) { GTEST_SKIP() << "built without the glassbox target"; }
#endif

}  // namespace
}  // namespace gb
