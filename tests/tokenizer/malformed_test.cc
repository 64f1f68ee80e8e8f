// Malformed tokenizer.json and GGUF vocabularies give a clear error, never a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "formats/gguf.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace gb {
namespace {

using nlohmann::json;

// A small valid SentencePiece-style tokenizer to corrupt one field at a time.
json valid_json() {
  return json::parse(R"({
    "version": "1.0",
    "added_tokens": [{"id": 0, "content": "<unk>", "special": true}, {"id": 1, "content": "<s>", "special": true}],
    "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
    "pre_tokenizer": null,
    "post_processor": null,
    "decoder": {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
    "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": false,
              "vocab": {"<unk>": 0, "<s>": 1, "a": 2, "b": 3, "ab": 4, "▁": 5},
              "merges": ["a b"]}
  })");
}

std::string expect_error(const json& j) {
  auto r = Tokenizer::from_hf_json(j.dump());
  EXPECT_FALSE(r.is_ok());
  return r.is_ok() ? std::string() : r.message();
}

// Issue 11.7: a FIFO as tokenizer.json (or its tokenizer_config.json) blocked Tokenizer::load
// forever; it is refused at once, naming the file.
TEST(MalformedFiles, FifoInsteadOfTokenizerJsonIsRefusedAtOnce) {
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    SCOPED_TRACE(name);
    const std::string dir = test::temp_dir();
    std::ofstream(dir + "/tokenizer.json") << valid_json().dump();
    std::filesystem::remove(dir + "/" + std::string(name));
    const std::string fifo = dir + "/" + name;
    ASSERT_TRUE(test::make_fifo(fifo));
    std::string message;
    ASSERT_TRUE(test::returns_within([&] { message = Tokenizer::load(dir).message(); }, std::chrono::seconds(5), fifo));
    EXPECT_NE(message.find(fifo + " is not a regular file (it is a FIFO)"), std::string::npos) << message;
  }
}

TEST(MalformedJson, ValidBaseLoads) {
  auto r = Tokenizer::from_hf_json(valid_json().dump());
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ((*r)->encode("ab a", false), (std::vector<int32_t>{4, 5, 2}));
}

TEST(MalformedJson, NotJson) {
  auto r = Tokenizer::from_hf_json("{\"model\": ");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("not valid JSON"), std::string::npos) << r.message();
  EXPECT_FALSE(Tokenizer::from_hf_json("").is_ok());
  EXPECT_FALSE(Tokenizer::from_hf_json("[1, 2]").is_ok());
}

// 200,000 nested Sequence normalizers (7 MB) overflowed the stack (the component parsers recurse
// per level, j.value() copies the subtree): now a clear error, as is any document nested deeper
// than 64 levels. A nesting real tokenizers use (a Sequence of Sequences) still loads.
TEST(MalformedJson, DeeplyNestedIsAnError) {
  const std::string base = valid_json().dump();
  const std::string normalizer = valid_json()["normalizer"].dump();
  const size_t at = base.find(normalizer);
  ASSERT_NE(at, std::string::npos);
  const size_t n = 200000;
  std::string deep;
  for (size_t i = 0; i < n; ++i) deep += R"({"type":"Sequence","normalizers":[)";
  deep += normalizer;
  for (size_t i = 0; i < n; ++i) deep += "]}";
  auto r = Tokenizer::from_hf_json(std::string(base).replace(at, normalizer.size(), deep));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("tokenizer.json: nested deeper than 64 levels"), std::string::npos) << r.message();
  // Unbalanced deep input is still just invalid JSON, and a deep tokenizer_config.json is refused.
  EXPECT_FALSE(Tokenizer::from_hf_json(std::string(n, '[')).is_ok());
  auto c = Tokenizer::from_hf_json(base, "{\"x\": " + std::string(n, '[') + std::string(n, ']') + "}");
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.message().find("tokenizer_config.json: nested deeper"), std::string::npos) << c.message();
  // A Sequence of Sequences, as real tokenizers nest, still loads.
  json nested = valid_json();
  nested["normalizer"] = {{"type", "Sequence"},
                          {"normalizers", {{{"type", "Sequence"}, {"normalizers", {valid_json()["normalizer"]}}}}}};
  auto ok = Tokenizer::from_hf_json(nested.dump());
  ASSERT_TRUE(ok.is_ok()) << ok.message();
  EXPECT_EQ((*ok)->encode("ab a", false), (std::vector<int32_t>{4, 5, 2}));
}

TEST(MalformedJson, Truncated) {
  auto data = read_file(test::shared_path("models/stories260K/tokenizer.json"));
  ASSERT_TRUE(data.is_ok());
  for (size_t cut : {size_t{1}, data->size() / 3, data->size() / 2, data->size() - 2}) {
    auto r = Tokenizer::from_hf_json(std::string_view(*data).substr(0, cut));
    EXPECT_FALSE(r.is_ok()) << "cut at " << cut;
  }
}

TEST(MalformedJson, MissingModel) {
  json j = valid_json();
  j.erase("model");
  EXPECT_NE(expect_error(j).find("no 'model'"), std::string::npos);
}

TEST(MalformedJson, UnsupportedModelType) {
  json j = valid_json();
  j["model"]["type"] = "WordPiece";
  EXPECT_NE(expect_error(j).find("'WordPiece'"), std::string::npos);
}

TEST(MalformedJson, VocabWrongType) {
  json j = valid_json();
  j["model"]["vocab"] = json::array({"a", "b"});
  EXPECT_NE(expect_error(j).find("'vocab' must be an object"), std::string::npos);
  j = valid_json();
  j["model"]["vocab"]["a"] = "two";
  EXPECT_NE(expect_error(j).find("must be an integer"), std::string::npos);
}

TEST(MalformedJson, IdsOutOfRange) {
  json j = valid_json();
  j["model"]["vocab"]["a"] = 1000000000;
  EXPECT_NE(expect_error(j).find("out of range"), std::string::npos);
  j = valid_json();
  j["model"]["vocab"]["a"] = -3;
  EXPECT_NE(expect_error(j).find("out of range"), std::string::npos);
  j = valid_json();
  j["added_tokens"][1]["id"] = 99999;
  EXPECT_NE(expect_error(j).find("out of range"), std::string::npos);
  j = valid_json();
  j["model"]["vocab"]["b"] = 2;  // duplicate id
  EXPECT_NE(expect_error(j).find("used twice"), std::string::npos);
}

TEST(MalformedJson, BadMerges) {
  json j = valid_json();
  j["model"]["merges"] = json::array({"ab"});
  EXPECT_NE(expect_error(j).find("not two tokens"), std::string::npos);
  j["model"]["merges"] = json::array({"a c"});
  EXPECT_NE(expect_error(j).find("not in the vocabulary"), std::string::npos);
  j["model"]["merges"] = json::array({"b a"});  // "ba" is not a token
  EXPECT_NE(expect_error(j).find("'ba'"), std::string::npos);
  j["model"]["merges"] = json::array({json::array({"a"})});
  EXPECT_NE(expect_error(j).find("pair"), std::string::npos);
  j["model"]["merges"] = "a b";
  EXPECT_NE(expect_error(j).find("'merges' must be an array"), std::string::npos);
  // Both accepted forms load.
  j["model"]["merges"] = json::array({json::array({"a", "b"})});
  EXPECT_TRUE(Tokenizer::from_hf_json(j.dump()).is_ok());
}

TEST(MalformedJson, AddedTokensWrongTypes) {
  json j = valid_json();
  j["added_tokens"] = "nope";
  EXPECT_NE(expect_error(j).find("added_tokens"), std::string::npos);
  j = valid_json();
  j["added_tokens"][0].erase("content");
  EXPECT_NE(expect_error(j).find("'content'"), std::string::npos);
  j = valid_json();
  j["added_tokens"][0]["id"] = "zero";
  EXPECT_NE(expect_error(j).find("'id'"), std::string::npos);
}

TEST(MalformedJson, UnsupportedComponentsAreNamed) {
  json j = valid_json();
  j["normalizer"] = {{"type", "BertNormalizer"}};
  EXPECT_NE(expect_error(j).find("unsupported normalizer type 'BertNormalizer'"), std::string::npos);
  j = valid_json();
  j["pre_tokenizer"] = {{"type", "UnicodeScripts"}};
  EXPECT_NE(expect_error(j).find("unsupported pre_tokenizer type 'UnicodeScripts'"), std::string::npos);
  j = valid_json();
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_NE(expect_error(j).find("unsupported decoder type 'WordPiece'"), std::string::npos);
  j = valid_json();
  j["post_processor"] = {{"type", "Whatever"}};
  EXPECT_NE(expect_error(j).find("unsupported post_processor type 'Whatever'"), std::string::npos);
  j = valid_json();
  j["normalizer"] = 5;
  EXPECT_NE(expect_error(j).find("normalizer must be an object"), std::string::npos);
  j = valid_json();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  EXPECT_NE(expect_error(j).find("invalid regex"), std::string::npos);
  j = valid_json();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}};
  EXPECT_NE(expect_error(j).find("'Sideways'"), std::string::npos);
  j = valid_json();
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", json::array({{{"SpecialToken", {{"id", "<x>"}}}}})},
                         {"special_tokens", json::object()}};
  EXPECT_NE(expect_error(j).find("'<x>'"), std::string::npos);
}

TEST(MalformedJson, BadConfig) {
  auto r = Tokenizer::from_hf_json(valid_json().dump(), "{not json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("tokenizer_config.json"), std::string::npos);
  r = Tokenizer::from_hf_json(valid_json().dump(), R"({"chat_template": 7})");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("chat_template"), std::string::npos);
}

TEST(MalformedJson, MissingFile) {
  auto r = Tokenizer::load("/nonexistent/tokenizer.json");
  EXPECT_FALSE(r.is_ok());
  r = Tokenizer::load(test::temp_dir());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("no tokenizer.json"), std::string::npos);
}

// --- GGUF ------------------------------------------------------------------------------------

GgufFile valid_gguf() {
  GgufFile g;
  g.metadata["tokenizer.ggml.model"] = "llama";
  g.metadata["tokenizer.ggml.tokens"] = json::array({"<unk>", "<s>", "</s>", "a", "b", "ab", "▁"});
  g.metadata["tokenizer.ggml.scores"] = json::array({0.0, 0.0, 0.0, -1.0, -2.0, -0.5, -3.0});
  g.metadata["tokenizer.ggml.token_type"] = json::array({2, 3, 3, 1, 1, 1, 1});
  g.metadata["tokenizer.ggml.bos_token_id"] = 1;
  g.metadata["tokenizer.ggml.eos_token_id"] = 2;
  return g;
}

std::string expect_gguf_error(const GgufFile& g) {
  auto r = Tokenizer::from_gguf(g);
  EXPECT_FALSE(r.is_ok());
  return r.is_ok() ? std::string() : r.message();
}

TEST(MalformedGguf, ValidBaseLoads) {
  auto r = Tokenizer::from_gguf(valid_gguf());
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ((*r)->encode("ab", true), (std::vector<int32_t>{1, 6, 5}));
}

TEST(MalformedGguf, MissingModel) {
  GgufFile g = valid_gguf();
  g.metadata.erase("tokenizer.ggml.model");
  EXPECT_NE(expect_gguf_error(g).find("tokenizer.ggml.model is missing"), std::string::npos);
  g.metadata["tokenizer.ggml.model"] = "bert";
  EXPECT_NE(expect_gguf_error(g).find("'bert'"), std::string::npos);
  g.metadata["tokenizer.ggml.model"] = 3;
  EXPECT_NE(expect_gguf_error(g).find("must be a string"), std::string::npos);
}

TEST(MalformedGguf, TokensWrongTypes) {
  GgufFile g = valid_gguf();
  g.metadata.erase("tokenizer.ggml.tokens");
  EXPECT_NE(expect_gguf_error(g).find("missing tokenizer.ggml.tokens"), std::string::npos);
  g = valid_gguf();
  g.metadata["tokenizer.ggml.tokens"] = "abc";
  EXPECT_NE(expect_gguf_error(g).find("must be an array"), std::string::npos);
  g = valid_gguf();
  g.metadata["tokenizer.ggml.tokens"][3] = 17;
  EXPECT_NE(expect_gguf_error(g).find("not a string"), std::string::npos);
  g = valid_gguf();
  g.metadata["tokenizer.ggml.token_type"][3] = "normal";
  EXPECT_NE(expect_gguf_error(g).find("must be integers"), std::string::npos);
}

TEST(MalformedGguf, LengthMismatch) {
  GgufFile g = valid_gguf();
  g.metadata["tokenizer.ggml.scores"].erase(0);
  EXPECT_NE(expect_gguf_error(g).find("scores has 6 entries"), std::string::npos);
  g = valid_gguf();
  g.metadata.erase("tokenizer.ggml.scores");
  EXPECT_NE(expect_gguf_error(g).find("missing tokenizer.ggml.scores"), std::string::npos);
}

TEST(MalformedGguf, IdsOutOfRange) {
  GgufFile g = valid_gguf();
  g.metadata["tokenizer.ggml.bos_token_id"] = 7;
  EXPECT_NE(expect_gguf_error(g).find("bos_token_id = 7 is out of range"), std::string::npos);
  g = valid_gguf();
  g.metadata["tokenizer.ggml.eos_token_id"] = -5;
  EXPECT_NE(expect_gguf_error(g).find("out of range"), std::string::npos);
  g = valid_gguf();
  g.metadata["tokenizer.ggml.unknown_token_id"] = "zero";
  EXPECT_NE(expect_gguf_error(g).find("must be an integer"), std::string::npos);
}

TEST(MalformedGguf, BadMerges) {
  GgufFile g;
  g.metadata["tokenizer.ggml.model"] = "gpt2";
  g.metadata["tokenizer.ggml.tokens"] = json::array({"a", "b", "ab"});
  EXPECT_NE(expect_gguf_error(g).find("missing tokenizer.ggml.merges"), std::string::npos);
  g.metadata["tokenizer.ggml.merges"] = json::array({"a c"});
  EXPECT_NE(expect_gguf_error(g).find("not in the vocabulary"), std::string::npos);
  g.metadata["tokenizer.ggml.merges"] = json::array({"ab"});
  EXPECT_NE(expect_gguf_error(g).find("not two tokens"), std::string::npos);
  g.metadata["tokenizer.ggml.merges"] = json::array({1});
  EXPECT_NE(expect_gguf_error(g).find("must be strings"), std::string::npos);
  g.metadata["tokenizer.ggml.merges"] = json::array({"a b"});
  g.metadata["tokenizer.ggml.pre"] = "mystery";
  EXPECT_NE(expect_gguf_error(g).find("unsupported tokenizer.ggml.pre 'mystery'"), std::string::npos);
  g.metadata["tokenizer.ggml.pre"] = "gpt-2";
  EXPECT_TRUE(Tokenizer::from_gguf(g).is_ok());
}

TEST(MalformedGguf, TruncatedFile) {
  auto data = read_file(test::shared_path("testdata/tokenizers/llama.cpp-vocab/ggml-vocab-llama-spm.gguf"));
  ASSERT_TRUE(data.is_ok());
  const std::string dir = test::temp_dir();
  for (size_t cut : {size_t{3}, size_t{24}, data->size() / 2, data->size() - 1}) {
    const std::string path = dir + "/cut" + std::to_string(cut) + ".gguf";
    std::ofstream(path, std::ios::binary).write(data->data(), static_cast<std::streamsize>(cut));
    auto r = Tokenizer::load(path);
    EXPECT_FALSE(r.is_ok()) << "cut at " << cut;
  }
}

TEST(MalformedGguf, WeightsOnlyFileHasNoTokenizer) {
  GgufFile g;
  g.metadata["general.architecture"] = "llama";
  EXPECT_NE(expect_gguf_error(g).find("has no tokenizer"), std::string::npos);
}

}  // namespace
}  // namespace gb
