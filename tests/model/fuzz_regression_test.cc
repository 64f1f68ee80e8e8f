// Inputs the libFuzzer targets in fuzz/ found to crash (or to hit undefined behaviour), inlined:
// each must now be a clear error.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "model/config.h"
#include "model/model.h"
#include "support/test_support.h"

namespace gb {
namespace {

// model_hf_config_fuzz: a huge partial_rotary_factor overflowed the int conversion of
// head_dim * factor (UBSan: "1e+301 is outside the range of representable values of type 'int'").
TEST(FuzzRegression, HfConfigHugePartialRotaryFactor) {
  for (const char* factor : {"1e300", "-3", "0", "1.5"}) {
    const std::string text = std::string(R"({"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 2,
      "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 100,
      "partial_rotary_factor": )") +
                             factor + "}";
    auto c = parse_hf_config(nlohmann::json::parse(text), nullptr);
    ASSERT_FALSE(c.is_ok()) << factor;
    EXPECT_NE(c.message().find("'partial_rotary_factor' must be in (0, 1]"), std::string::npos) << c.message();
  }
  // In rope_parameters (transformers 5) the same bound applies; a valid factor still works.
  const auto j = nlohmann::json::parse(R"({"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 2,
      "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 100})");
  nlohmann::json bad = j, good = j;
  bad["rope_parameters"] = {{"partial_rotary_factor", 1e300}};
  good["rope_parameters"] = {{"partial_rotary_factor", 0.5}};
  EXPECT_FALSE(parse_hf_config(bad, nullptr).is_ok());
  auto c = parse_hf_config(good, nullptr);
  ASSERT_TRUE(c.is_ok()) << c.message();
  EXPECT_EQ(c->rope_dims, 8);  // head_dim 16 · 0.5
}

// A config.json nested 100,000 deep overflowed the stack: error messages dump the offending value
// (and Qwen3.5's text_config is copied), both recursing once per level. Found by running
// model_hf_config_fuzz on a generated input (its -max_len kept the fuzzer itself below the depth).
TEST(FuzzRegression, HfConfigDeepNesting) {
  const size_t n = 100000;
  const std::string deep = std::string(n, '[') + std::string(n, ']');
  for (const std::string& text :
       {R"({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": )" + deep + "}",
        R"({"architectures": ["Qwen3_5ForConditionalGeneration"], "text_config": {"x": )" + deep + "}}"}) {
    auto c = parse_hf_config(nlohmann::json::parse(text), nullptr);
    ASSERT_FALSE(c.is_ok());
    EXPECT_NE(c.message().find("config.json: nested deeper than 64 levels"), std::string::npos) << c.message();
  }
  const auto ok = nlohmann::json::parse(R"({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2,
      "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 100})");
  const auto gen = nlohmann::json::parse(R"({"eos_token_id": )" + deep + "}");
  auto c = parse_hf_config(ok, &gen);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.message().find("generation_config.json: nested deeper than 64 levels"), std::string::npos) << c.message();
  EXPECT_TRUE(parse_hf_config(ok, nullptr).is_ok());
}

// model_gguf_fuzz: a rope_freqs.weight of shape [0] made the loader memcpy from/to null (UBSan:
// "null pointer passed as argument 1"). The file, cut down to what reaches that point: GGUF v3,
// general.architecture = llama, token_embd.weight f32 [4, 8] and rope_freqs.weight f32 [0].
TEST(FuzzRegression, GgufEmptyRopeFreqs) {
  std::string bytes(
      "\x47\x47\x55\x46\x03\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00"
      "\x01\x00\x00\x00\x00\x00\x00\x00\x14\x00\x00\x00\x00\x00\x00\x00"
      "\x67\x65\x6e\x65\x72\x61\x6c\x2e\x61\x72\x63\x68\x69\x74\x65\x63"
      "\x74\x75\x72\x65\x08\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00"
      "\x6c\x6c\x61\x6d\x61\x11\x00\x00\x00\x00\x00\x00\x00\x74\x6f\x6b"
      "\x65\x6e\x5f\x65\x6d\x62\x64\x2e\x77\x65\x69\x67\x68\x74\x02\x00"
      "\x00\x00\x08\x00\x00\x00\x00\x00\x00\x00\x04\x00\x00\x00\x00\x00"
      "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x11\x00"
      "\x00\x00\x00\x00\x00\x00\x72\x6f\x70\x65\x5f\x66\x72\x65\x71\x73"
      "\x2e\x77\x65\x69\x67\x68\x74\x01\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\x00\x00\x00\x00\x00\x80\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
      192);
  bytes.append(128, '\0');  // token_embd's data
  ASSERT_EQ(bytes.size(), 320u);
  const std::string path = test::temp_dir() + "/rope_freqs_empty.gguf";
  std::ofstream(path, std::ios::binary) << bytes;
  auto m = load_model(path);
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.message().find("'rope_freqs.weight' must be a non-empty 1-D f32 tensor, found f32 [0]"),
            std::string::npos)
      << m.message();
}

}  // namespace
}  // namespace gb
