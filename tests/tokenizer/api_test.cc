// Tokenizer API: special ids, add_bos/add_eos, chat template exposure, decode options,
// streaming decode (never half a UTF-8 character) and concurrent use from many threads.
#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "formats/gguf.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace gb {
namespace {

const Tokenizer& load_cached(const std::string& rel) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(rel);
  if (it != cache.end()) return *it->second;
  auto t = Tokenizer::load(test::shared_path(rel));
  if (!t.is_ok()) {
    ADD_FAILURE() << t.message();
    std::abort();
  }
  return *(cache[rel] = std::move(*t));
}

const char* kLlama2 = "testdata/tokenizers/hf/llama2-spm";
const char* kLlama3 = "testdata/tokenizers/hf/llama3-bpe/tokenizer.json";
const char* kQwen2 = "testdata/tokenizers/hf/qwen2-bpe/tokenizer.json";
const char* kGpt2Gguf = "testdata/tokenizers/llama.cpp-vocab/ggml-vocab-gpt-2.gguf";
const char* kPhi3Gguf = "testdata/tokenizers/llama.cpp-vocab/ggml-vocab-phi-3.gguf";
const char* kQwen2Gguf = "testdata/tokenizers/llama.cpp-vocab/ggml-vocab-qwen2.gguf";
const char* kSpmGguf = "testdata/tokenizers/llama.cpp-vocab/ggml-vocab-llama-spm.gguf";

TEST(Api, Llama2DirectoryWithConfig) {
  const Tokenizer& t = load_cached(kLlama2);
  EXPECT_EQ(t.vocab_size(), 32000);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_EQ(t.unk_id(), 0);
  EXPECT_EQ(t.bos_token(), "<s>");
  EXPECT_EQ(t.eos_token(), "</s>");
  EXPECT_TRUE(t.add_bos());
  EXPECT_FALSE(t.add_eos());
  EXPECT_TRUE(t.is_special(1));
  EXPECT_FALSE(t.is_special(100));
  EXPECT_EQ(t.token_to_piece(13), "<0x0A>");
  EXPECT_EQ(t.find_token("<0x0A>"), 13);
  EXPECT_EQ(t.find_token("no such piece"), -1);
  EXPECT_EQ(t.token_to_piece(-1), "");
  EXPECT_EQ(t.token_to_piece(32000), "");
  const auto ids = t.encode("Hello", true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(t.decode(ids, true), "Hello");
  EXPECT_EQ(t.decode(ids, false), "<s> Hello");  // HF: the special token then "▁Hello"
}

TEST(Api, Llama3SpecialTokens) {
  const Tokenizer& t = load_cached(kLlama3);
  EXPECT_EQ(t.bos_id(), 128000);
  EXPECT_EQ(t.eos_id(), 128001);
  EXPECT_EQ(t.eot_id(), 128009);
  EXPECT_TRUE(t.add_bos());
  const std::vector<int32_t> stops = t.stop_ids();
  EXPECT_NE(std::find(stops.begin(), stops.end(), 128009), stops.end());
  const auto ids = t.encode("<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>", true);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids[0], 128000);
  EXPECT_EQ(ids[1], 128006);
  EXPECT_EQ(ids.back(), 128009);
  EXPECT_EQ(t.decode(ids, true), "user\n\nHi");
  EXPECT_EQ(t.token_to_piece(t.encode(" hello", false)[0]), "Ġhello");
}

TEST(Api, Qwen2NoBos) {
  const Tokenizer& t = load_cached(kQwen2);
  EXPECT_FALSE(t.add_bos());
  EXPECT_EQ(t.encode("hi", true), t.encode("hi", false));
  EXPECT_EQ(t.eot_id(), 151645);  // <|im_end|>
}

TEST(Api, GgufSpecialsAndTemplates) {
  const Tokenizer& phi3 = load_cached(kPhi3Gguf);
  EXPECT_EQ(phi3.bos_id(), 1);
  EXPECT_EQ(phi3.eos_id(), 32000);
  EXPECT_TRUE(phi3.add_bos());
  EXPECT_NE(phi3.chat_template().find("<|user|>"), std::string::npos);
  EXPECT_EQ(phi3.encode("hi", true)[0], 1);
  const Tokenizer& qwen = load_cached(kQwen2Gguf);
  EXPECT_NE(qwen.chat_template().find("<|im_start|>"), std::string::npos);
  EXPECT_EQ(qwen.eos_id(), 151643);
  const Tokenizer& gpt2 = load_cached(kGpt2Gguf);
  EXPECT_FALSE(gpt2.add_bos());
  EXPECT_EQ(gpt2.bos_id(), 50256);
  EXPECT_TRUE(gpt2.chat_template().empty());
  const Tokenizer& spm = load_cached(kSpmGguf);
  EXPECT_TRUE(spm.add_bos());
  EXPECT_FALSE(spm.add_eos());
}

TEST(Api, ChatTemplateFromConfig) {
  auto data = read_file(test::shared_path("models/stories260K/tokenizer.json"));
  ASSERT_TRUE(data.is_ok());
  auto t = Tokenizer::from_hf_json(
      *data, R"({"chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}",
                                              "bos_token": {"content": "<s>"}, "eos_token": "</s>", "add_eos_token": true})");
  ASSERT_TRUE(t.is_ok()) << t.message();
  EXPECT_EQ((*t)->chat_template(), "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}");
  EXPECT_EQ((*t)->bos_token(), "<s>");
  EXPECT_TRUE((*t)->add_eos());
  const auto ids = (*t)->encode("Once", true);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
  // The list form: [{name, template}], "default" is the default.
  t = Tokenizer::from_hf_json(
      *data, R"({"chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]})");
  ASSERT_TRUE(t.is_ok()) << t.message();
  EXPECT_EQ((*t)->chat_template(), "D");
  EXPECT_EQ((*t)->chat_templates().at("tool_use"), "T");
}

TEST(Api, InvalidUtf8InputIsReplaced) {
  const Tokenizer& t = load_cached(kLlama3);
  const auto ids = t.encode(
      "a\xff"
      "b\xe6\x97",
      false);
  EXPECT_EQ(t.decode(ids, false),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD");
}

TEST(Api, OutOfRangeIdsDecodeToNothing) {
  const Tokenizer& t = load_cached(kLlama3);
  const std::vector<int32_t> ids = {-7, 9906, 1 << 30};
  EXPECT_EQ(t.decode(ids, false), "Hello");
}

// Long runs that stress the regex (\s+(?!\S) backtracking) and the heap merge path.
TEST(Api, LongInputsRoundTrip) {
  std::string cjk;
  for (int i = 0; i < 20000; ++i) tok::append_utf8(0x4E00 + (i * 7919) % 20000, &cjk);
  for (const char* path : {kLlama3, kLlama2, kQwen2}) {
    const Tokenizer& t = load_cached(path);
    for (const std::string& s : {std::string(200000, ' '), std::string(200000, 'a'), std::string(100000, '\n') + "x",
                                 cjk, std::string(50000, '7')}) {
      const auto ids = t.encode(s, false);
      EXPECT_FALSE(ids.empty());
      EXPECT_EQ(t.decode(ids, false), path == kQwen2 ? tok::normalize(s, tok::NormForm::kNfc) : s) << path;
    }
  }
}

// --- streaming -------------------------------------------------------------------------------

// Streams ids one by one and checks: every chunk is valid UTF-8; whenever decode(ids so far)
// ends in a complete character, the streamed text equals it; the total equals decode(all).
// Returns the chunks.
std::vector<std::string> check_stream(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special) {
  StreamDecoder stream(t, skip_special);
  std::vector<std::string> chunks;
  std::string so_far;
  for (size_t k = 0; k < ids.size(); ++k) {
    std::string chunk = stream.push(ids[k]);
    EXPECT_TRUE(tok::is_valid_utf8(chunk)) << "chunk " << k;
    so_far += chunk;
    chunks.push_back(chunk);
    const std::string full = t.decode(std::span<const int32_t>(ids.data(), k + 1), skip_special);
    // While a character is incomplete, HF's ByteFallback turns the whole pending byte run into
    // U+FFFDs, so only complete states are compared.
    const bool incomplete = full.size() >= 3 && full.compare(full.size() - 3, 3, "\xEF\xBF\xBD") == 0;
    if (!incomplete) {
      EXPECT_EQ(so_far, full) << "complete text not emitted at " << k;
    }
  }
  so_far += stream.flush();
  EXPECT_EQ(so_far, t.decode(ids, skip_special));
  return chunks;
}

const char* kStreamText =
    "Hello wörld! 日本語のテキスト 🎉👨‍👩‍👧 Ελληνικά\n\tcode(x) { return 42; }  end";

TEST(Stream, ByteFallbackSplitsMultiByteChars) {
  const Tokenizer& t = load_cached(kLlama2);
  const auto ids = t.encode("a🎉b", false);
  // ▁a, then 🎉 as four <0xNN> byte tokens, then b.
  ASSERT_EQ(ids.size(), 6u) << ids.size();
  const auto chunks = check_stream(t, ids, false);
  EXPECT_EQ(chunks[0], "a");
  EXPECT_EQ(chunks[1], "");
  EXPECT_EQ(chunks[2], "");
  EXPECT_EQ(chunks[3], "");
  EXPECT_EQ(chunks[4], "🎉");  // emitted as soon as its last byte arrives
  EXPECT_EQ(chunks[5], "b");
  check_stream(t, t.encode(kStreamText, true), false);
  check_stream(t, t.encode(kStreamText, true), true);
}

TEST(Stream, ByteLevelSplitsMultiByteChars) {
  for (const char* path : {kLlama3, kQwen2, kGpt2Gguf}) {
    const Tokenizer& t = load_cached(path);
    const auto ids = t.encode(kStreamText, true);
    const auto chunks = check_stream(t, ids, false);
    check_stream(t, ids, true);
    // At least one character must have been split across tokens for this test to mean anything.
    int empty = 0;
    for (const auto& c : chunks) empty += c.empty();
    EXPECT_GT(empty, 0) << path;
  }
}

TEST(Stream, IncompleteAtEndFlushesReplacement) {
  const Tokenizer& t = load_cached(kLlama2);
  const auto ids = t.encode("🎉", false);  // ▁ + 4 byte tokens
  ASSERT_EQ(ids.size(), 5u);
  StreamDecoder stream(t, false);
  std::string out;
  for (size_t k = 0; k + 1 < ids.size(); ++k) out += stream.push(ids[k]);
  EXPECT_EQ(out, "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // 3 dangling bytes, as HF decode
}

TEST(Stream, SkipsSpecialTokens) {
  const Tokenizer& t = load_cached(kLlama3);
  const auto ids = t.encode("<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>", true);
  std::string out;
  StreamDecoder stream(t, true);
  for (int32_t id : ids) out += stream.push(id);
  out += stream.flush();
  EXPECT_EQ(out, "assistant\n\nHi there");
}

TEST(Stream, GarbageBytesStayLinearAndComplete) {
  // 5000 byte tokens that never form valid UTF-8 (0xFF): emitted in bounded windows as
  // U+FFFD, never all held back until the end.
  const Tokenizer& t = load_cached(kLlama2);
  const int32_t ff = t.find_token("<0xFF>");
  ASSERT_GE(ff, 0);
  StreamDecoder stream(t, false);
  std::string out;
  size_t max_gap = 0, gap = 0;
  for (int i = 0; i < 5000; ++i) {
    const std::string c = stream.push(ff);
    gap = c.empty() ? gap + 1 : 0;
    max_gap = std::max(max_gap, gap);
    out += c;
  }
  out += stream.flush();
  EXPECT_LE(max_gap, 16u);
  std::string want;
  for (int i = 0; i < 5000; ++i) want += "\xEF\xBF\xBD";
  EXPECT_EQ(out, want);
}

// peek(id) is the text push(id) would give in place, without moving the stream: SentencePiece
// words keep their space after the prompt, and a pending byte completes into its character.
TEST(Stream, PeekShowsTheTextInPlace) {
  const Tokenizer& t = load_cached(kLlama2);
  const auto prompt = t.encode("Once upon a", true);
  const auto time = t.encode("Once upon a time", true);
  ASSERT_EQ(time.size(), prompt.size() + 1);
  StreamDecoder stream(t, true);
  stream.prime(prompt);
  EXPECT_EQ(stream.peek(time.back()), " time");
  EXPECT_EQ(stream.peek(time.back()), " time") << "peek leaves the stream as it was";
  EXPECT_EQ(stream.push(time.back()), " time");
  const auto ids = t.encode("🎉", false);  // ▁ + 4 byte tokens
  ASSERT_EQ(ids.size(), 5u);
  EXPECT_EQ(stream.push(ids[0]), " ");
  for (size_t k = 1; k < 4; ++k) EXPECT_EQ(stream.push(ids[k]), "");
  EXPECT_EQ(stream.peek(ids[4]), "🎉");
  EXPECT_EQ(stream.peek(ids[1]), "\xEF\xBF\xBD") << "a byte that cannot continue the character";
  EXPECT_EQ(stream.push(ids[4]), "🎉");
}

// The issue's case on stories260K: after "Once", the pieces of " upon a time," are streamed with
// their spaces (what a logprob token must show), and peek gives each one before it is pushed.
TEST(Stream, SentencePieceTokensKeepTheirSpaceAfterThePrompt) {
  const Tokenizer& t = load_cached("models/stories260K");
  const auto prompt = t.encode("Once", true);
  const auto all = t.encode("Once upon a time,", true);
  ASSERT_GT(all.size(), prompt.size());
  StreamDecoder stream(t, true);
  stream.prime(prompt);
  std::vector<std::string> pieces;
  for (size_t k = prompt.size(); k < all.size(); ++k) {
    const std::string peeked = stream.peek(all[k]);
    pieces.push_back(stream.push(all[k]));
    EXPECT_EQ(peeked, pieces.back()) << k;
  }
  EXPECT_EQ(pieces, (std::vector<std::string>{" upon", " a", " time", ","}));
}

// --- concurrency -----------------------------------------------------------------------------

TEST(Concurrency, ManyThreadsSameResults) {
  const Tokenizer& a = load_cached(kLlama3);
  const Tokenizer& b = load_cached(kLlama2);
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) texts.push_back(std::string(kStreamText) + " #" + std::to_string(i * 7919));
  std::vector<std::vector<int32_t>> want_a, want_b;
  for (const auto& s : texts) {
    want_a.push_back(a.encode(s, true));
    want_b.push_back(b.encode(s, true));
  }
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < 8; ++th) {
    threads.emplace_back([&, th] {
      for (int rep = 0; rep < 20; ++rep) {
        for (size_t i = 0; i < texts.size(); ++i) {
          // Alternate tokenizers so the per-thread word cache switches owners.
          const size_t k = (i + th + rep) % texts.size();
          if (a.encode(texts[k], true) != want_a[k]) ++bad;
          if (b.encode(texts[k], true) != want_b[k]) ++bad;
          if (a.decode(want_a[k], true) != b.decode(want_b[k], true)) ++bad;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace gb
