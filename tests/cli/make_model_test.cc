// glassbox-make-model as a user runs it: its default tokenizer is found wherever it runs, a
// tokenizer path that does not exist is an error, and its GGUFs are what llama.cpp requires
// (one vocabulary token per embedding row, qwen35 M-RoPE sections).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "../model/sequence_feed.h"
#include "core/mapped_file.h"
#include "formats/gguf.h"
#include "model/model.h"
#include "ops/matmul_kernels.h"
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

// Qwen3.5's mixes: its linear-attention layers' fused attn_qkv shares attn_v's counter (llama.cpp
// counts both as attn_v-like), so with 4 layers (three linear, then one full attention) Q4_K_M
// gives Q6_K to the third attn_qkv and to the attn_v (use_more_bits(i, 4): i = 2, 3), and Q3_K_M
// gives Q5_K to the first two attn_qkv. These are the types llama-quantize writes from this
// bf16 file; each mix loads.
TEST(MakeModel, Qwen35MixesCountAttnQkvWithAttnV) {
  const std::string cwd = test::temp_dir();
  const std::string out = cwd + "/q35mix";
  std::string log;
  ASSERT_EQ(run_make_model(cwd,
                           "--out '" + out +
                               "' --shape qwen3.5-0.8b --layers 4 --hidden 256 --ffn 256 "
                               "--types q3_k_m,q4_k_m",
                           &log),
            0)
      << log;
  struct Want {
    const char* tensor;
    const char* q3_k_m;
    const char* q4_k_m;
  };
  const Want wants[] = {
      {"token_embd.weight", "q6_k", "q6_k"},        {"blk.0.attn_qkv.weight", "q5_k", "q4_k"},
      {"blk.1.attn_qkv.weight", "q5_k", "q4_k"},    {"blk.2.attn_qkv.weight", "q4_k", "q6_k"},
      {"blk.3.attn_v.weight", "q4_k", "q6_k"},      {"blk.3.attn_q.weight", "q3_k", "q4_k"},
      {"blk.3.attn_output.weight", "q4_k", "q4_k"}, {"blk.0.ssm_out.weight", "q3_k", "q4_k"},
      {"blk.0.ffn_down.weight", "q4_k", "q4_k"},    {"blk.2.ffn_down.weight", "q4_k", "q6_k"},
      {"blk.1.ffn_up.weight", "q3_k", "q4_k"},
  };
  for (const char* type : {"q3_k_m", "q4_k_m"}) {
    SCOPED_TRACE(type);
    const std::string path = out + "/gguf/model-" + type + ".gguf";
    auto g = read_gguf(path);
    ASSERT_TRUE(g.is_ok()) << g.message();
    for (const Want& w : wants) {
      const TensorView* t = g->find_tensor(w.tensor);
      ASSERT_NE(t, nullptr) << w.tensor;
      EXPECT_EQ(dtype_name(t->dtype), std::string(type) == "q3_k_m" ? w.q3_k_m : w.q4_k_m) << w.tensor;
    }
    auto model = load_model(path, {.max_batch_tokens = 16, .n_threads = 1});
    ASSERT_TRUE(model.is_ok()) << model.message();
    // The summary names the file's type of the first layer's MLP (Q3_K runs as itself).
    EXPECT_NE((*model)->describe().find(std::string(type) == "q3_k_m" ? "(gguf, q3_k)" : "(gguf, q4_k)"),
              std::string::npos)
        << (*model)->describe();
  }
}

// Logits of ids fed as one prompt.
std::vector<float> prompt_logits(const std::string& path, const std::vector<int32_t>& ids) {
  auto model = load_model(path, {.max_batch_tokens = 16, .n_threads = 2});
  EXPECT_TRUE(model.is_ok()) << model.message();
  if (!model.is_ok()) return {};
  auto cache = KvCache::create((*model)->config(), 4, 16);
  EXPECT_TRUE(cache.is_ok()) << cache.message();
  test::SequenceFeed feed(**model, **cache);
  EXPECT_TRUE(feed.feed(ids, nullptr, true).is_ok());
  return std::vector<float>(feed.logits().begin(), feed.logits().end());
}

// --types q3_k_m / q4_k_m / q5_k_m write llama.cpp's Q3_K_M / Q4_K_M / Q5_K_M mixes (tensor types
// as llama-quantize picks them from the same bf16 file), which Glassbox loads and runs (the
// integer K-quant kernels, Q3_K's included) close to the bf16 file of the same weights, each
// extra bit closer.
TEST(MakeModel, KQuantMixesLoadAndTrackTheBf16File) {
  const std::string cwd = test::temp_dir();
  const std::string out = cwd + "/kmix";
  std::string log;
  ASSERT_EQ(run_make_model(
                cwd, "--out '" + out + "' --layers 8 --hidden 256 --ffn 512 --types bf16,q3_k_m,q4_k_m,q5_k_m", &log),
            0)
      << log;
  const std::vector<int32_t> ids = {9707, 1879, 11, 419, 374, 264, 1273, 13};
  const auto bf16 = prompt_logits(out + "/gguf/model-bf16.gguf", ids);
  ASSERT_FALSE(bf16.empty());
  struct Mix {
    const char* type;
    const char* base;  // the mix's type for most matrices
    int file_type;     // LLAMA_FTYPE_MOSTLY_Q3_K_M / Q4_K_M / Q5_K_M
    double rel_bf16 = 0;
  };
  Mix mixes[] = {{"q3_k_m", "q3_k", 12}, {"q4_k_m", "q4_k", 15}, {"q5_k_m", "q5_k", 17}};
  for (Mix& m : mixes) {
    SCOPED_TRACE(m.type);
    const std::string path = out + "/gguf/model-" + m.type + ".gguf";
    auto g = read_gguf(path);
    ASSERT_TRUE(g.is_ok()) << g.message();
    EXPECT_EQ(*g->find("general.file_type"), m.file_type);
    auto type_of = [&](const std::string& name) {
      const TensorView* t = g->find_tensor(name);
      return t == nullptr ? std::string("missing") : std::string(dtype_name(t->dtype));
    };
    EXPECT_EQ(type_of("token_embd.weight"), "q6_k");  // tied: the output matrix
    EXPECT_EQ(type_of("output_norm.weight"), "f32");
    const bool q3 = std::string(m.type) == "q3_k_m";
    for (int l = 0; l < 8; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      if (q3) {  // attn_v: Q5_K on the first two, then Q4_K; ffn_down Q4_K (Q5_K below layer 8/16)
        EXPECT_EQ(type_of(p + "attn_v.weight"), l < 2 ? "q5_k" : "q4_k") << "layer " << l;
        EXPECT_EQ(type_of(p + "ffn_down.weight"), "q4_k") << "layer " << l;
        EXPECT_EQ(type_of(p + "attn_output.weight"), "q4_k") << "layer " << l;
      } else {  // use_more_bits(i, 8): the first and last eighth (layers 0, 7) and (i - 1) % 3 == 2 (3, 6)
        const std::string more = l == 0 || l == 3 || l == 6 || l == 7 ? "q6_k" : m.base;
        EXPECT_EQ(type_of(p + "attn_v.weight"), more) << "layer " << l;
        EXPECT_EQ(type_of(p + "ffn_down.weight"), more) << "layer " << l;
        EXPECT_EQ(type_of(p + "attn_output.weight"), m.base) << "layer " << l;
      }
      EXPECT_EQ(type_of(p + "attn_q.weight"), m.base) << "layer " << l;
      EXPECT_EQ(type_of(p + "ffn_up.weight"), m.base) << "layer " << l;
      EXPECT_EQ(type_of(p + "attn_norm.weight"), "f32") << "layer " << l;
    }
    const auto q = prompt_logits(path, ids);
    // The same file through the dequantize-to-f32 path (exact activations): the integer kernels'
    // own error, Q8_K activation rounding, without the weights' rounding.
    ops::g_kernel_variant = 4;
    const auto deq = prompt_logits(path, ids);
    ops::g_kernel_variant = 0;
    ASSERT_EQ(bf16.size(), q.size());
    ASSERT_EQ(deq.size(), q.size());
    auto compare = [&](const std::vector<float>& ref, double* rel, double* corr) {
      double se = 0, ss = 0, dot = 0, qq = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        se += (q[i] - ref[i]) * (q[i] - ref[i]);
        ss += ref[i] * ref[i];
        dot += q[i] * ref[i];
        qq += q[i] * q[i];
      }
      *rel = std::sqrt(se / ss), *corr = dot / std::sqrt(ss * qq);
    };
    for (float v : q) ASSERT_TRUE(std::isfinite(v));
    double rel_deq, corr_deq, corr_bf16;
    compare(deq, &rel_deq, &corr_deq);
    compare(bf16, &m.rel_bf16, &corr_bf16);
    std::printf("%s logits, relative RMS difference: %.4f vs its dequantized f32 run, %.4f vs bf16\n", m.type, rel_deq,
                m.rel_bf16);
    // Q8_K activations (RMS rounding ≈ 0.3% of a block's amax per value) through 8 layers: about
    // 1% of the logits' RMS; a wrong kernel (sign, scale, nibble order, fifth bit) moves them by ~100%.
    EXPECT_LT(rel_deq, 0.03);
    EXPECT_GT(rel_deq, 0.0) << "the integer path should round the activations";
    // 4-bit weights (RMS error ≈ 6% of a weight with these uniform random weights) compound
    // through the layers to ~14% of the logits' RMS (3-bit: ~30%); still correlated with bf16.
    EXPECT_LT(m.rel_bf16, q3 ? 0.4 : 0.2);
    EXPECT_GT(corr_bf16, q3 ? 0.93 : 0.98);
  }
  // A fifth bit halves the weights' rounding step: Q5_K_M tracks bf16 clearly better than Q4_K_M.
  // Q3_K_M keeps attn_v, attn_output and ffn_down at 4-5 bits, so it trails Q4_K_M by less (here
  // 0.156 vs 0.139; llama-quantize's own Q3_K_M / Q4_K_M files of such a model: 0.147 / 0.122).
  EXPECT_LT(mixes[1].rel_bf16, 0.95 * mixes[0].rel_bf16);
  EXPECT_LT(mixes[2].rel_bf16, 0.7 * mixes[1].rel_bf16);
}

// --types iq4_xs writes llama-quantize's IQ4_XS mix without an importance matrix (Q6_K for the
// tied output matrix, Q5_K for ffn_down in the first eighth of the layers, IQ4_NL / Q5_1 where
// rows are not whole super-blocks), which Glassbox runs on its native IQ4_XS kernels close to the same file
// dequantized to f32 and to the bf16 file.
TEST(MakeModel, Iq4XsMixLoadsAndTracksTheBf16File) {
  const std::string cwd = test::temp_dir();
  const std::string out = cwd + "/iq4xs";
  std::string log;
  ASSERT_EQ(run_make_model(cwd, "--out '" + out + "' --layers 8 --hidden 256 --ffn 640 --types bf16,iq4_xs", &log), 0)
      << log;
  const std::string path = out + "/gguf/model-iq4_xs.gguf";
  auto g = read_gguf(path);
  ASSERT_TRUE(g.is_ok()) << g.message();
  EXPECT_EQ(*g->find("general.file_type"), 30);  // LLAMA_FTYPE_MOSTLY_IQ4_XS
  auto type_of = [&](const std::string& name) {
    const TensorView* t = g->find_tensor(name);
    return t == nullptr ? std::string("missing") : std::string(dtype_name(t->dtype));
  };
  EXPECT_EQ(type_of("token_embd.weight"), "q6_k");
  // 640 columns, not whole super-blocks: Q5_K falls back to Q5_1, IQ4_XS to IQ4_NL.
  EXPECT_EQ(type_of("blk.0.ffn_down.weight"), "q5_1");
  EXPECT_EQ(type_of("blk.1.ffn_down.weight"), "iq4_nl");
  for (int l = 0; l < 8; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    EXPECT_EQ(type_of(p + "attn_v.weight"), "iq4_xs") << "layer " << l;  // 2 query heads per KV head
    EXPECT_EQ(type_of(p + "attn_q.weight"), "iq4_xs") << "layer " << l;
    EXPECT_EQ(type_of(p + "ffn_up.weight"), "iq4_xs") << "layer " << l;
  }
  // ffn_down's first eighth gets Q5_K where its rows allow.
  const std::string out2 = cwd + "/iq4xs2";
  ASSERT_EQ(run_make_model(cwd, "--out '" + out2 + "' --layers 8 --hidden 256 --ffn 512 --types iq4_xs", &log), 0)
      << log;
  auto g2 = read_gguf(out2 + "/gguf/model-iq4_xs.gguf");
  ASSERT_TRUE(g2.is_ok()) << g2.message();
  EXPECT_EQ(dtype_name(g2->find_tensor("blk.0.ffn_down.weight")->dtype), std::string("q5_k"));
  EXPECT_EQ(dtype_name(g2->find_tensor("blk.1.ffn_down.weight")->dtype), std::string("iq4_xs"));

  const std::vector<int32_t> ids = {9707, 1879, 11, 419, 374, 264, 1273, 13};
  const auto bf16 = prompt_logits(out + "/gguf/model-bf16.gguf", ids);
  const auto q = prompt_logits(path, ids);
  ops::g_kernel_variant = 4;  // the K-quant rows (IQ4_XS's too) dequantized to f32, exact activations
  const auto deq = prompt_logits(path, ids);
  ops::g_kernel_variant = 0;
  ASSERT_FALSE(q.empty());
  ASSERT_EQ(bf16.size(), q.size());
  ASSERT_EQ(deq.size(), q.size());
  auto rel = [&](const std::vector<float>& ref) {
    double se = 0, ss = 0;
    for (size_t i = 0; i < ref.size(); ++i) se += (q[i] - ref[i]) * (q[i] - ref[i]), ss += ref[i] * ref[i];
    return std::sqrt(se / ss);
  };
  for (float v : q) ASSERT_TRUE(std::isfinite(v));
  std::printf("iq4_xs logits, relative RMS difference: %.4f vs its dequantized f32 run, %.4f vs bf16\n", rel(deq),
              rel(bf16));
  EXPECT_LT(rel(deq), 0.03);  // the activations' Q8_K / Q8_0 rounding only
  EXPECT_GT(rel(deq), 0.0);
  EXPECT_LT(rel(bf16), 0.2);  // 4-bit non-linear levels, as Q4_K_M
}

// --types q2_k writes llama-quantize's Q2_K mix (Q6_K for the tied output matrix, Q3_K for
// attn_v, attn_output and ffn_down, Q2_K for the rest), which Glassbox runs on its native Q2_K
// kernels close to the same file dequantized to f32, and correlated with the bf16 file.
TEST(MakeModel, Q2_KMixLoadsAndTracksTheBf16File) {
  const std::string cwd = test::temp_dir();
  const std::string out = cwd + "/q2k";
  std::string log;
  ASSERT_EQ(run_make_model(cwd, "--out '" + out + "' --layers 8 --hidden 256 --ffn 512 --types bf16,q2_k", &log), 0)
      << log;
  const std::string path = out + "/gguf/model-q2_k.gguf";
  auto g = read_gguf(path);
  ASSERT_TRUE(g.is_ok()) << g.message();
  EXPECT_EQ(*g->find("general.file_type"), 10);  // LLAMA_FTYPE_MOSTLY_Q2_K
  auto type_of = [&](const std::string& name) {
    const TensorView* t = g->find_tensor(name);
    return t == nullptr ? std::string("missing") : std::string(dtype_name(t->dtype));
  };
  EXPECT_EQ(type_of("token_embd.weight"), "q6_k");
  for (int l = 0; l < 8; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    EXPECT_EQ(type_of(p + "attn_v.weight"), "q3_k") << "layer " << l;  // 2 query heads per KV head
    EXPECT_EQ(type_of(p + "attn_output.weight"), "q3_k") << "layer " << l;
    EXPECT_EQ(type_of(p + "ffn_down.weight"), "q3_k") << "layer " << l;
    EXPECT_EQ(type_of(p + "attn_q.weight"), "q2_k") << "layer " << l;
    EXPECT_EQ(type_of(p + "ffn_up.weight"), "q2_k") << "layer " << l;
  }
  const std::vector<int32_t> ids = {9707, 1879, 11, 419, 374, 264, 1273, 13};
  const auto bf16 = prompt_logits(out + "/gguf/model-bf16.gguf", ids);
  const auto q = prompt_logits(path, ids);
  ops::g_kernel_variant = 4;  // the K-quant rows dequantized to f32, exact activations
  const auto deq = prompt_logits(path, ids);
  ops::g_kernel_variant = 0;
  ASSERT_FALSE(q.empty());
  ASSERT_EQ(bf16.size(), q.size());
  ASSERT_EQ(deq.size(), q.size());
  auto rel = [&](const std::vector<float>& ref, double* corr) {
    double se = 0, ss = 0, dot = 0, qq = 0;
    for (size_t i = 0; i < ref.size(); ++i)
      se += (q[i] - ref[i]) * (q[i] - ref[i]), ss += ref[i] * ref[i], dot += q[i] * ref[i], qq += q[i] * q[i];
    *corr = dot / std::sqrt(ss * qq);
    return std::sqrt(se / ss);
  };
  for (float v : q) ASSERT_TRUE(std::isfinite(v));
  double c_deq, c_bf16;
  const double r_deq = rel(deq, &c_deq), r_bf16 = rel(bf16, &c_bf16);
  std::printf("q2_k logits, relative RMS difference: %.4f vs its dequantized f32 run, %.4f vs bf16 (corr %.3f)\n",
              r_deq, r_bf16, c_bf16);
  EXPECT_LT(r_deq, 0.03);  // the activations' Q8_K rounding only
  EXPECT_GT(r_deq, 0.0);
  EXPECT_GT(c_bf16, 0.8);  // 2-bit codes: far from bf16, still correlated with it
}

// `glassbox score` on a model whose full context (Qwen3's 40960 positions, 28 layers) would take
// more K/V than the automatic KV cache holds: it scores the text in a context as long as the
// text, instead of refusing to build its engine.
TEST(MakeModel, ScoreRunsOnAModelWhoseFullContextExceedsTheKvCache) {
  const std::string cwd = test::temp_dir();
  const std::string out = cwd + "/deep";
  std::string log;
  ASSERT_EQ(run_make_model(cwd, "--out '" + out + "' --layers 28 --hidden 256 --ffn 256 --types q8_0", &log), 0) << log;
  const std::string score_log = cwd + "/score_deep.txt";
  const int rc =
      std::system(("'" GB_GLASSBOX_BIN "' score -m '" + out +
                   "/gguf/model-q8_0.gguf' --text 'Hello world, this is a test' -t 1 > '" + score_log + "' 2>&1")
                      .c_str());
  auto text = read_file(score_log);
  ASSERT_TRUE(text.is_ok());
  EXPECT_EQ(WEXITSTATUS(rc), 0) << *text;
  EXPECT_NE(text->find("perplexity"), std::string::npos) << *text;
}

// Rows that are not whole super-blocks (hidden 384): llama.cpp's Q4_K_M falls back to Q5_0 there,
// its Q5_K_M to Q5_1 (and Q6_K to Q8_0); Glassbox runs them on their own kernels and tracks the
// bf16 file.
TEST(MakeModel, KMixFallbacksToQ5_0AndQ5_1LoadAndTrackTheBf16File) {
  const std::string cwd = test::temp_dir();
  const std::string out = cwd + "/q50";
  std::string log;
  ASSERT_EQ(
      run_make_model(cwd, "--out '" + out + "' --layers 4 --hidden 384 --ffn 512 --types bf16,q4_k_m,q5_k_m", &log), 0)
      << log;
  const std::vector<int32_t> ids = {9707, 1879, 11, 419, 374, 264, 1273, 13};
  const auto bf16 = prompt_logits(out + "/gguf/model-bf16.gguf", ids);
  for (const char* type : {"q4_k_m", "q5_k_m"}) {
    SCOPED_TRACE(type);
    const bool q4 = std::string(type) == "q4_k_m";
    const std::string path = out + "/gguf/model-" + type + ".gguf";
    auto g = read_gguf(path);
    ASSERT_TRUE(g.is_ok()) << g.message();
    auto type_of = [&](const std::string& name) {
      const TensorView* t = g->find_tensor(name);
      return t == nullptr ? std::string("missing") : std::string(dtype_name(t->dtype));
    };
    EXPECT_EQ(type_of("token_embd.weight"), "q8_0");                       // Q6_K's fallback
    EXPECT_EQ(type_of("blk.1.attn_q.weight"), q4 ? "q5_0" : "q5_1");       // 384 columns
    EXPECT_EQ(type_of("blk.1.ffn_up.weight"), q4 ? "q5_0" : "q5_1");       // 384 columns
    EXPECT_EQ(type_of("blk.1.ffn_down.weight"), q4 ? "q4_k" : "q5_k");     // 512 columns
    EXPECT_EQ(type_of("blk.1.attn_output.weight"), q4 ? "q4_k" : "q5_k");  // 2048 columns
    const auto q = prompt_logits(path, ids);
    ASSERT_FALSE(q.empty());
    ASSERT_EQ(bf16.size(), q.size());
    double se = 0, ss = 0, dot = 0, qq = 0;
    for (size_t i = 0; i < q.size(); ++i) {
      ASSERT_TRUE(std::isfinite(q[i]));
      se += (q[i] - bf16[i]) * (q[i] - bf16[i]);
      ss += bf16[i] * bf16[i];
      dot += q[i] * bf16[i];
      qq += q[i] * q[i];
    }
    std::printf("%s with fallbacks, relative RMS difference vs bf16: %.4f\n", type, std::sqrt(se / ss));
    // `glassbox bench --read` reads what decode reads: the Q5_1 offsets are a run of their own.
    const std::string bench_log = cwd + "/bench_" + type + ".txt";
    const int rc = std::system(
        ("'" GB_GLASSBOX_BIN "' bench -m '" + path + "' -p 0 -n 4 -r 1 -t 1 --read > '" + bench_log + "' 2>&1")
            .c_str());
    auto bench_out = read_file(bench_log);
    ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << (bench_out.is_ok() ? *bench_out : "");
    EXPECT_NE(bench_out->find("weights read per decode token"), std::string::npos) << *bench_out;
    // Q5_K_M (5 bits in every matrix here) about halves Q4_K_M's distance: 0.065 vs 0.103.
    EXPECT_LT(std::sqrt(se / ss), q4 ? 0.2 : 0.09);
    EXPECT_GT(dot / std::sqrt(ss * qq), 0.98);
  }
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
