// Each normalizer / pre-tokenizer / decoder / added-token option against Hugging Face
// tokenizers: data/components.json holds small configurations and the ids and text the HF
// library produced for them (see data/make_component_fixtures.js).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "tokenizer/tokenizer.h"

namespace gb {
namespace {

const nlohmann::json& fixtures() {
  static const nlohmann::json j = [] {
    const auto path = std::filesystem::path(GB_TOKENIZER_TEST_DIR) / "data" / "components.json";
    auto data = read_file(path.string());
    if (!data.is_ok()) return nlohmann::json::array();
    return nlohmann::json::parse(*data);
  }();
  return j;
}

class Components : public ::testing::TestWithParam<std::string> {};

TEST_P(Components, MatchesHuggingFace) {
  const nlohmann::json* config = nullptr;
  for (const auto& c : fixtures()) {
    if (c["name"] == GetParam()) config = &c;
  }
  ASSERT_NE(config, nullptr);
  auto tok = Tokenizer::from_hf_json((*config)["tokenizer"].dump());
  ASSERT_TRUE(tok.is_ok()) << tok.message();
  for (const auto& c : (*config)["cases"]) {
    const std::string text = c["text"];
    const bool add_special = c["add_special"];
    const auto want = c["ids"].get<std::vector<int32_t>>();
    const auto got = (*tok)->encode(text, add_special);
    EXPECT_EQ(got, want) << "text '" << text << "' add_special " << add_special;
    EXPECT_EQ((*tok)->decode(want, false), c["decoded"].get<std::string>()) << "decode of '" << text << "'";
    EXPECT_EQ((*tok)->decode(want, true), c["decoded_skip"].get<std::string>())
        << "decode (skip special) of '" << text << "'";
  }
}

std::vector<std::string> names() {
  std::vector<std::string> n;
  for (const auto& c : fixtures()) n.push_back(c["name"]);
  return n;
}

INSTANTIATE_TEST_SUITE_P(Hf, Components, ::testing::ValuesIn(names()), [](const auto& info) { return info.param; });

TEST(Components, FixturesPresent) { EXPECT_GE(fixtures().size(), 20u); }

}  // namespace
}  // namespace gb
