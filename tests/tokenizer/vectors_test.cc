// Every reference vector in shared/testdata/tokenizers (llama.cpp .inp/.out through the GGUF
// loader and the tokenizer.json loader, extra.inp, stories260K) must give exact ids.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/mapped_file.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace gb {
namespace {

const std::string kDir = "testdata/tokenizers/";

std::vector<std::string> read_inp(const std::string& rel) {
  auto data = read_file(test::shared_path(rel));
  EXPECT_TRUE(data.is_ok()) << data.message();
  std::vector<std::string> texts;
  const std::string sep = "\n__ggml_vocab_test__\n";
  const std::string& s = *data;
  size_t pos = 0;
  for (;;) {
    const size_t next = s.find(sep, pos);
    if (next == std::string::npos) break;
    texts.push_back(s.substr(pos, next - pos));
    pos = next + sep.size();
  }
  return texts;
}

std::vector<std::vector<int32_t>> read_out(const std::string& rel) {
  auto data = read_file(test::shared_path(rel));
  EXPECT_TRUE(data.is_ok()) << data.message();
  std::vector<std::vector<int32_t>> out;
  std::istringstream in(*data);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    int32_t id;
    while (ls >> id) ids.push_back(id);
    out.push_back(std::move(ids));
  }
  return out;
}

const Tokenizer& load_cached(const std::string& rel_or_abs) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(rel_or_abs);
  if (it != cache.end()) return *it->second;
  const std::string path = rel_or_abs[0] == '/' ? rel_or_abs : test::shared_path(rel_or_abs);
  auto t = Tokenizer::load(path);
  if (!t.is_ok()) {
    ADD_FAILURE() << t.message();
    std::abort();
  }
  return *(cache[rel_or_abs] = std::move(*t));
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    s.push_back(' ');
    s += std::to_string(id);
  }
  return s;
}

// What decode(encode(x)) must give: x itself, except where the tokenizer is lossy by design
// (an NFC normalizer composes characters; SentencePiece reads a literal "▁" as a space).
enum class Lossy { kNone, kNfc, kMetaspace };

std::string expected_roundtrip(const std::string& text, Lossy lossy) {
  if (lossy == Lossy::kNfc) return tok::normalize(text, tok::NormForm::kNfc);
  if (lossy == Lossy::kMetaspace) {
    std::string out;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text.compare(i, 3, "\xE2\x96\x81") == 0) {
        out.push_back(' ');
        i += 2;
      } else {
        out.push_back(text[i]);
      }
    }
    return out;
  }
  return text;
}

// Checks ids for every text, and decode(encode(x)) for texts without special-token text.
void check(const Tokenizer& tok, const std::vector<std::string>& texts, const std::vector<std::vector<int32_t>>& want,
           bool check_roundtrip, Lossy lossy = Lossy::kNone) {
  ASSERT_EQ(texts.size(), want.size());
  int failed = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::vector<int32_t> got = tok.encode(texts[i], false);
    if (got != want[i]) {
      ++failed;
      if (failed <= 5)
        ADD_FAILURE() << "text " << i << " '" << texts[i] << "'\n got:" << show(got) << "\nwant:" << show(want[i]);
      continue;
    }
    if (check_roundtrip) {
      bool has_added = false;
      for (int32_t id : got) has_added = has_added || tok.is_special(id);
      if (!has_added) {
        EXPECT_EQ(tok.decode(got, false), expected_roundtrip(texts[i], lossy)) << "roundtrip of text " << i;
      }
    }
  }
  EXPECT_EQ(failed, 0) << failed << " of " << texts.size() << " texts differ";
}

class GgufVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufVectors, LlamaCppVectors) {
  const std::string base = kDir + "llama.cpp-vocab/ggml-vocab-" + GetParam() + ".gguf";
  const Tokenizer& tok = load_cached(base);
  const bool spm = GetParam() == "llama-spm" || GetParam() == "phi-3";
  check(tok, read_inp(base + ".inp"), read_out(base + ".out"), true,
        spm                     ? Lossy::kMetaspace
        : GetParam() == "qwen2" ? Lossy::kNfc
                                : Lossy::kNone);
}

INSTANTIATE_TEST_SUITE_P(All, GgufVectors, ::testing::Values("llama-spm", "phi-3", "llama-bpe", "qwen2", "gpt-2"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return n;
                         });

struct HfCase {
  const char* dir;
  const char* gguf_name;
  Lossy lossy;
};

class HfVectors : public ::testing::TestWithParam<HfCase> {};

TEST_P(HfVectors, LlamaCppVectors) {
  const Tokenizer& tok = load_cached(kDir + "hf/" + GetParam().dir + "/tokenizer.json");
  const std::string base = kDir + "llama.cpp-vocab/ggml-vocab-" + GetParam().gguf_name + ".gguf";
  check(tok, read_inp(base + ".inp"), read_out(base + ".out"), true, GetParam().lossy);
}

TEST_P(HfVectors, ExtraVectors) {
  const Tokenizer& tok = load_cached(kDir + "hf/" + GetParam().dir + "/tokenizer.json");
  check(tok, read_inp(kDir + "vectors/extra.inp"), read_out(kDir + "vectors/extra." + GetParam().dir + ".out"), true,
        GetParam().lossy);
}

INSTANTIATE_TEST_SUITE_P(All, HfVectors,
                         ::testing::Values(HfCase{"llama2-spm", "llama-spm", Lossy::kMetaspace},
                                           HfCase{"llama3-bpe", "llama-bpe", Lossy::kNone},
                                           HfCase{"qwen2-bpe", "qwen2", Lossy::kNfc},
                                           HfCase{"gpt2-bpe", "gpt-2", Lossy::kNone}),
                         [](const auto& info) {
                           std::string n = info.param.dir;
                           for (char& c : n) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return n;
                         });

// The llama2-spm tokenizer.json must also reproduce the phi-3 vectors (same SentencePiece base).
TEST(HfVectors, Llama2SpmOnPhi3Vectors) {
  const Tokenizer& tok = load_cached(kDir + "hf/llama2-spm/tokenizer.json");
  const std::string base = kDir + "llama.cpp-vocab/ggml-vocab-phi-3.gguf";
  check(tok, read_inp(base + ".inp"), read_out(base + ".out"), false);
}

TEST(Stories260K, Vectors) {
  const Tokenizer& tok = load_cached("models/stories260K/tokenizer.json");
  check(tok, read_inp(kDir + "vectors/llamacpp.inp"), read_out(kDir + "vectors/llamacpp.tok512.out"), true,
        Lossy::kMetaspace);
  check(tok, read_inp(kDir + "vectors/extra.inp"), read_out(kDir + "vectors/extra.tok512.out"), true,
        Lossy::kMetaspace);
}

TEST(Stories260K, ReferencePromptIdsWithBos) {
  // Loaded from the directory: tokenizer.json + tokenizer_config.json (add_bos_token).
  auto tok = Tokenizer::load(test::shared_path("models/stories260K"));
  ASSERT_TRUE(tok.is_ok()) << tok.message();
  auto ref = read_file(test::shared_path("models/stories260K/reference.json"));
  ASSERT_TRUE(ref.is_ok());
  const auto j = nlohmann::json::parse(*ref);
  int n = 0;
  for (const auto& c : j.at("cases")) {
    const auto want = c.at("prompt_ids").get<std::vector<int32_t>>();
    EXPECT_EQ((*tok)->encode(c.at("prompt").get<std::string>(), true), want) << c.at("prompt");
    ++n;
  }
  EXPECT_GT(n, 0);
  EXPECT_EQ((*tok)->bos_id(), 1);
  EXPECT_EQ((*tok)->eos_id(), 2);
  EXPECT_TRUE((*tok)->add_bos());
}

}  // namespace
}  // namespace gb
