// Qwen3.5 hybrid beyond the fixture's numbers: the multimodal checkpoint layout loads (vision and
// MTP tensors skipped) and gives the same logits; prefill through the chunked delta rule, across
// chunk boundaries and across forwards, equals feeding the tokens one at a time (the recurrence);
// a sequence restarted at position 0 starts from a clean state; bad batches are refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "reference_util.h"
#include "sequence_feed.h"

namespace gb {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kHf = "testdata/reference/qwen35-hybrid/hf";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<int32_t> random_ids(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& t : ids) t = static_cast<int32_t>(rng() % 556);
  return ids;
}

// Logits of every token of ids, fed in pieces of `piece` tokens (max_batch_tokens bounds them too).
std::vector<float> logits_fed(Model& m, const std::vector<int32_t>& ids, size_t piece) {
  auto cache = KvCache::create(m.config(), 32, 16, 2);
  EXPECT_TRUE(cache.is_ok());
  test::SequenceFeed s(m, **cache);
  std::vector<float> out;
  for (size_t start = 0; start < ids.size(); start += piece) {
    const size_t len = std::min(piece, ids.size() - start);
    Status st = s.feed(std::span(ids).subspan(start, len), nullptr, true);
    EXPECT_TRUE(st.is_ok()) << st.message();
    out.insert(out.end(), s.logits().begin(), s.logits().end());
  }
  return out;
}

TEST(Qwen35, ChunkedPrefillEqualsTokenByTokenRecurrence) {
  auto m = load_model(test::shared_path(kHf), {.max_batch_tokens = 200, .n_threads = 1});
  ASSERT_TRUE(m.is_ok()) << m.message();
  // 64 is the delta rule's chunk: 150 tokens = 2 full chunks + 22; 128 = exactly 2.
  for (int n : {150, 128, 3}) {
    const auto ids = random_ids(n, static_cast<uint32_t>(n));
    const auto one_by_one = logits_fed(**m, ids, 1);
    double worst = 0;
    for (size_t piece : {size_t{200}, size_t{64}, size_t{37}}) {
      const auto got = logits_fed(**m, ids, piece);
      ASSERT_EQ(got.size(), one_by_one.size());
      const double err = test::max_abs_diff(got.data(), one_by_one.data(), got.size());
      EXPECT_LE(err, 1e-5) << "n " << n << " pieces of " << piece;
      worst = std::max(worst, err);
    }
    std::printf("qwen35 n=%d: max |chunked prefill - token-by-token| logits %.3g\n", n, worst);
  }
}

TEST(Qwen35, RestartAtZeroResetsStateAndBadBatchesAreRefused) {
  auto m = load_model(test::shared_path(kHf), {.max_batch_tokens = 64, .n_threads = 1});
  ASSERT_TRUE(m.is_ok()) << m.message();
  const ModelConfig& c = (*m)->config();
  auto cache = KvCache::create(c, 8, 16, 2);
  ASSERT_TRUE(cache.is_ok());
  const auto ids = random_ids(10, 3);
  std::vector<int32_t> table = {0};
  std::vector<float> first(c.vocab), again(c.vocab);
  Batch b;
  b.add_sequence(ids, 0, table, 16, false, 1);
  ASSERT_TRUE((*m)->forward(b, **cache, nullptr, first.data()).is_ok());
  EXPECT_EQ((*cache)->state_len(1), 10);
  // Same slot, from position 0 again: the old state must not leak in.
  ASSERT_TRUE((*m)->forward(b, **cache, nullptr, again.data()).is_ok());
  EXPECT_EQ(first, again);

  auto expect_bad = [&](const Batch& bad, const std::string& fragment) {
    Status st = (*m)->forward(bad, **cache, nullptr, again.data());
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find(fragment), std::string::npos) << st.message();
  };
  Batch skip;  // the state holds 10 tokens; position 12 would skip two
  skip.add_sequence(std::span(ids).first(1), 12, table, 16, false, 1);
  expect_bad(skip, "recurrent state holds 10 tokens");
  Batch no_slot;
  no_slot.add_sequence(ids, 0, table, 16, false);
  expect_bad(no_slot, "recurrent state slot -1");
  Batch shared;
  std::vector<int32_t> table2 = {1};
  shared.add_sequence(ids, 0, table, 16, false, 0);
  shared.add_sequence(ids, 0, table2, 16, false, 0);
  expect_bad(shared, "share state slot 0");
  Batch interleaved;  // two sequences' tokens alternating
  interleaved.add_sequence(std::span(ids).first(2), 0, table, 16, false, 0);
  interleaved.add_sequence(std::span(ids).first(2), 0, table2, 16, false, 1);
  std::swap(interleaved.tokens[1], interleaved.tokens[2]);
  std::swap(interleaved.positions[1], interleaved.positions[2]);
  std::swap(interleaved.seq_index[1], interleaved.seq_index[2]);
  std::swap(interleaved.slots[1], interleaved.slots[2]);
  interleaved.output_rows = {3};
  expect_bad(interleaved, "contiguous");
}

// Qwen3_5ForConditionalGeneration: the text config nested in text_config, tensors under
// model.language_model., plus vision-tower and MTP tensors that are skipped.
TEST(Qwen35, MultimodalCheckpointLayoutLoadsTheTextModel) {
  const std::string src = test::shared_path(kHf);
  const std::string dir = test::temp_dir();
  json text = json::parse(slurp(src + "/config.json"));
  text["model_type"] = "qwen3_5_text";
  text.erase("architectures");
  const json cfg = {{"architectures", {"Qwen3_5ForConditionalGeneration"}},
                    {"model_type", "qwen3_5"},
                    {"text_config", text},
                    {"vision_config", {{"depth", 1}}},
                    {"tie_word_embeddings", false}};
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  fs::copy_file(src + "/generation_config.json", dir + "/generation_config.json");
  // Rename tensors in the safetensors header; add two extra ones (vision, MTP).
  const std::string b = slurp(src + "/model.safetensors");
  uint64_t n;
  std::memcpy(&n, b.data(), 8);
  json header = json::parse(b.substr(8, n));
  std::string data = b.substr(8 + n);
  json out = json::object();
  for (auto& [name, v] : header.items()) {
    if (name == "__metadata__") continue;
    std::string nn = name;
    if (nn.starts_with("model.")) nn = "model.language_model." + nn.substr(6);
    out[nn] = v;
  }
  for (const char* extra : {"model.visual.blocks.0.attn.qkv.weight", "mtp.fc.weight"}) {
    out[extra] = {{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {data.size(), data.size() + 16}}};
    data += std::string(16, '\0');
  }
  const std::string h = out.dump();
  std::string len(8, '\0');
  const uint64_t hn = h.size();
  std::memcpy(len.data(), &hn, 8);
  std::ofstream(dir + "/model.safetensors", std::ios::binary) << len << h << data;

  auto plain = load_model(src, {.max_batch_tokens = 64, .n_threads = 1});
  auto mm = load_model(dir, {.max_batch_tokens = 64, .n_threads = 1});
  ASSERT_TRUE(plain.is_ok()) << plain.message();
  ASSERT_TRUE(mm.is_ok()) << mm.message();
  EXPECT_EQ((*mm)->config().arch, Arch::kQwen35);
  EXPECT_EQ((*mm)->config().arch_name, "Qwen3_5ForConditionalGeneration");
  const auto ids = random_ids(9, 5);
  EXPECT_EQ(logits_fed(**plain, ids, 64), logits_fed(**mm, ids, 64));
}

}  // namespace
}  // namespace gb
