// glassbox-make-model as a user runs it: its default tokenizer is found wherever it runs, a
// tokenizer path that does not exist is an error, and its GGUFs are what llama.cpp requires
// (one vocabulary token per embedding row, qwen35 M-RoPE sections).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/mapped_file.h"
#include "formats/gguf.h"
#include "model/model.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace gb {
namespace {

// Runs the binary in `cwd` with `args`; returns its exit status, *output its stdout + stderr.
int run_make_model(const std::string& cwd, const std::string& args, std::string* output) {
  const std::string log = test::temp_dir() + "/make_model_output.txt";
  const std::string cmd = "cd '" + cwd + "' && '" GB_MAKE_MODEL "' " + args + " > '" + log + "' 2>&1";
  const int status = std::system(cmd.c_str());
  auto text = read_file(log);
  *output = text.is_ok() ? *text : "";
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(MakeModel, Qwen35GgufHasOneTokenPerEmbeddingRowAndRopeSections) {
  // From a directory that is not the repository root: the default tokenizer must still be found.
  const std::string cwd = test::temp_dir();
  const std::string out = cwd + "/qwen35-small";
  std::string log;
  ASSERT_EQ(run_make_model(
                cwd, "--out '" + out + "' --shape qwen3.5-0.8b --layers 4 --hidden 256 --ffn 256 --types q8_0", &log),
            0)
      << log;
  const std::string path = out + "/gguf/model-q8_0.gguf";
  auto g = read_gguf(path);
  ASSERT_TRUE(g.is_ok()) << g.message();
  const TensorView* embd = g->find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->shape[0], 248320);
  ASSERT_NE(g->find("tokenizer.ggml.tokens"), nullptr);
  EXPECT_EQ(static_cast<int64_t>(g->find("tokenizer.ggml.tokens")->size()), embd->shape[0]);
  EXPECT_EQ(static_cast<int64_t>(g->find("tokenizer.ggml.token_type")->size()), embd->shape[0]);
  EXPECT_EQ((*g->find("tokenizer.ggml.tokens"))[248319], "[PAD248319]");
  ASSERT_NE(g->find("qwen35.rope.dimension_sections"), nullptr);
  EXPECT_EQ(*g->find("qwen35.rope.dimension_sections"), nlohmann::json::array({11, 11, 10, 0}));
  // Glassbox itself loads the file, tokenizer and all, with the padded vocabulary.
  auto tok = Tokenizer::load(path);
  ASSERT_TRUE(tok.is_ok()) << tok.message();
  EXPECT_EQ((*tok)->vocab_size(), 248320);
  EXPECT_EQ((*tok)->decode((*tok)->encode("Hello world", false), false), "Hello world");
  auto model = load_model(path, {.max_batch_tokens = 16, .n_threads = 1});
  ASSERT_TRUE(model.is_ok()) << model.message();
  EXPECT_EQ((*model)->config().vocab, 248320);
}

TEST(MakeModel, MissingTokenizerFilesAreErrors) {
  const std::string cwd = test::temp_dir();
  std::string log;
  EXPECT_EQ(run_make_model(cwd, "--out '" + cwd + "/none' --layers 1 --vocab-gguf /no/such/vocab.gguf", &log), 1);
  EXPECT_NE(log.find("--vocab-gguf /no/such/vocab.gguf: no such file"), std::string::npos) << log;
  EXPECT_EQ(run_make_model(cwd, "--out '" + cwd + "/none' --layers 1 --tokenizer-json /no/such/tokenizer.json", &log),
            1);
  EXPECT_NE(log.find("--tokenizer-json /no/such/tokenizer.json: no such file"), std::string::npos) << log;
  EXPECT_FALSE(std::filesystem::exists(cwd + "/none")) << "nothing is written before the inputs are checked";
}

}  // namespace
}  // namespace gb
