// Loading: HF shards and 16-bit weights, config parsing, and one test per kind of bad file (each
// built here from the good fixtures): a clear error naming what is wrong, never a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/fp16.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "reference_util.h"
#include "sequence_feed.h"

namespace gb {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kLlamaHf = "testdata/reference/llama-gqa/hf";
const std::string kLlamaGguf = "testdata/reference/llama-gqa/gguf/model-f32.gguf";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void spit(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// A writable copy of an HF fixture directory.
std::string copy_hf(const std::string& rel) {
  const std::string dir = test::temp_dir();
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"}) {
    fs::copy_file(test::shared_path(rel) + "/" + f, dir + "/" + f);
  }
  return dir;
}

// safetensors: split into header JSON and data, edit, and join again.
struct StFile {
  json header;
  std::string data;
};
StFile read_st(const std::string& path) {
  const std::string b = slurp(path);
  uint64_t n;
  std::memcpy(&n, b.data(), 8);
  return {json::parse(b.substr(8, n)), b.substr(8 + n)};
}
void write_st(const std::string& path, const StFile& f) {
  const std::string h = f.header.dump();
  std::string len(8, '\0');
  const uint64_t n = h.size();
  std::memcpy(len.data(), &n, 8);
  spit(path, len + h + f.data);
}
// Rebuilds the data section from a list of (name, dtype, shape, bytes).
struct StTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
std::vector<StTensor> st_tensors(const StFile& f) {
  std::vector<StTensor> out;
  for (const auto& [name, v] : f.header.items()) {
    if (name == "__metadata__") continue;
    const auto b = v["data_offsets"][0].get<size_t>(), e = v["data_offsets"][1].get<size_t>();
    out.push_back({name, v["dtype"], v["shape"].get<std::vector<int64_t>>(), f.data.substr(b, e - b)});
  }
  return out;
}
StFile make_st(const std::vector<StTensor>& ts) {
  StFile f{json::object(), ""};
  for (const auto& t : ts) {
    f.header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {f.data.size(), f.data.size() + t.bytes.size()}}};
    f.data += t.bytes;
  }
  return f;
}

void edit_json(const std::string& path, const std::function<void(json&)>& fn) {
  json j = json::parse(slurp(path));
  fn(j);
  spit(path, j.dump(2));
}

// Loads path and expects an error containing every fragment.
void expect_load_error(const std::string& path, std::initializer_list<std::string> fragments) {
  auto m = load_model(path, {.max_batch_tokens = 16, .n_threads = 1});
  ASSERT_FALSE(m.is_ok()) << "loaded " << path;
  for (const auto& f : fragments) EXPECT_NE(m.message().find(f), std::string::npos) << m.message();
  std::printf("  error: %s\n", m.message().c_str());
}

std::vector<float> logits_of(const std::string& path, const std::vector<int32_t>& ids) {
  auto m = load_model(path, {.max_batch_tokens = 64, .n_threads = 1});
  EXPECT_TRUE(m.is_ok()) << m.message();
  if (!m.is_ok()) return {};
  auto cache = KvCache::create((*m)->config(), 4, 16);
  test::SequenceFeed s(**m, **cache);
  EXPECT_TRUE(s.feed(ids, nullptr, true).is_ok());
  return {s.logits().begin(), s.logits().end()};
}

const std::vector<int32_t> kIds = {1, 160, 483, 357, 185, 71, 402};

// ---------------------------------------------------------------- good files

TEST(Loader, ReadsConfigOfEveryFixture) {
  auto m = load_model(test::shared_path("testdata/reference/llama3-untied/hf"), {.n_threads = 1});
  ASSERT_TRUE(m.is_ok()) << m.message();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.n_layers, 3);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_FALSE(c.tied_embeddings);
  ASSERT_EQ(c.rope_freq_divisors.size(), 8u);
  // The llama3 divisors computed from config.json equal those the GGUF stores in rope_freqs.weight.
  auto g = load_model(test::shared_path("testdata/reference/llama3-untied/gguf/model-f32.gguf"), {.n_threads = 1});
  ASSERT_TRUE(g.is_ok()) << g.message();
  for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(c.rope_freq_divisors[i], (*g)->config().rope_freq_divisors[i], 1e-5);
  EXPECT_EQ((*g)->config().rope_style, ops::RopeStyle::kPairs);
  EXPECT_EQ(c.rope_style, ops::RopeStyle::kNeox);

  auto s = load_model(test::shared_path("models/stories260K"), {.n_threads = 1});
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ((*s)->config().eos_ids, (std::vector<int32_t>{2, 1}));  // generation_config.json list
  EXPECT_EQ((*s)->config().bos_id, 1);
  EXPECT_TRUE((*s)->config().tied_embeddings);
  auto q3 = load_model(test::shared_path("testdata/reference/qwen3-qknorm/gguf/model-q4_0.gguf"), {.n_threads = 1});
  ASSERT_TRUE(q3.is_ok()) << q3.message();
  EXPECT_EQ((*q3)->config().head_dim, 32);
  EXPECT_TRUE((*q3)->config().qk_norm);
  EXPECT_EQ((*q3)->config().eos_ids, (std::vector<int32_t>{558}));
  auto q2 = load_model(test::shared_path("testdata/reference/qwen2-bias/hf"), {.n_threads = 1});
  ASSERT_TRUE(q2.is_ok());
  EXPECT_TRUE((*q2)->config().qkv_bias);
  EXPECT_FALSE((*q2)->config().o_bias);
  EXPECT_EQ((*q2)->config().eos_ids, (std::vector<int32_t>{556}));  // a single id
}

TEST(Loader, ShardedSafetensorsEqualOneFile) {
  const std::string dir = copy_hf(kLlamaHf);
  const auto want = logits_of(dir, kIds);
  const StFile f = read_st(dir + "/model.safetensors");
  auto ts = st_tensors(f);
  std::vector<StTensor> a(ts.begin(), ts.begin() + ts.size() / 2), b(ts.begin() + ts.size() / 2, ts.end());
  write_st(dir + "/model-00001-of-00002.safetensors", make_st(a));
  write_st(dir + "/model-00002-of-00002.safetensors", make_st(b));
  json index = {{"metadata", json::object()}, {"weight_map", json::object()}};
  for (const auto& t : a) index["weight_map"][t.name] = "model-00001-of-00002.safetensors";
  for (const auto& t : b) index["weight_map"][t.name] = "model-00002-of-00002.safetensors";
  spit(dir + "/model.safetensors.index.json", index.dump());
  fs::remove(dir + "/model.safetensors");
  EXPECT_EQ(logits_of(dir, kIds), want);
  // An index naming a tensor its shard does not hold.
  index["weight_map"]["model.layers.9.mlp.up_proj.weight"] = "model-00001-of-00002.safetensors";
  spit(dir + "/model.safetensors.index.json", index.dump());
  expect_load_error(dir, {"model.layers.9.mlp.up_proj.weight", "missing"});
}

// 16-bit HF weights are used in place; they give the logits of an f32 model holding the same
// rounded values (up to the 16-bit matmul kernels' own summation).
TEST(Loader, Bf16AndF16WeightsMatchTheirF32Rounding) {
  for (const std::string dtype : {"BF16", "F16"}) {
    const std::string dir16 = copy_hf(kLlamaHf), dir32 = copy_hf(kLlamaHf);
    auto ts = st_tensors(read_st(dir16 + "/model.safetensors"));
    std::vector<StTensor> t16, t32;
    for (const auto& t : ts) {
      const size_t n = t.bytes.size() / 4;
      std::string b16(2 * n, '\0'), b32(4 * n, '\0');
      for (size_t i = 0; i < n; ++i) {
        float x;
        std::memcpy(&x, t.bytes.data() + 4 * i, 4);
        const uint16_t h = dtype == "BF16" ? f32_to_bf16(x) : f32_to_f16(x);
        const float back = dtype == "BF16" ? bf16_to_f32(h) : f16_to_f32(h);
        std::memcpy(b16.data() + 2 * i, &h, 2);
        std::memcpy(b32.data() + 4 * i, &back, 4);
      }
      t16.push_back({t.name, dtype, t.shape, b16});
      t32.push_back({t.name, "F32", t.shape, b32});
    }
    write_st(dir16 + "/model.safetensors", make_st(t16));
    write_st(dir32 + "/model.safetensors", make_st(t32));
    const auto got = logits_of(dir16, kIds), want = logits_of(dir32, kIds);
    ASSERT_EQ(got.size(), want.size());
    const double err = test::max_abs_diff(got.data(), want.data(), got.size());
    EXPECT_LE(err, 2e-3) << dtype;
    std::printf("%s weights vs their f32 rounding: max |logit diff| %.2g\n", dtype.c_str(), err);
  }
}

// ---------------------------------------------------------------- bad HF files

TEST(BadHf, TruncatedWeights) {
  const std::string dir = copy_hf(kLlamaHf);
  const std::string b = slurp(dir + "/model.safetensors");
  spit(dir + "/model.safetensors", b.substr(0, b.size() / 2));
  expect_load_error(dir, {"model.safetensors", "truncated"});
}

TEST(BadHf, WrongHeaderLength) {
  const std::string dir = copy_hf(kLlamaHf);
  std::string b = slurp(dir + "/model.safetensors");
  const uint64_t n = b.size() + 100;
  std::memcpy(b.data(), &n, 8);
  spit(dir + "/model.safetensors", b);
  expect_load_error(dir, {"header length"});
  const uint64_t short_len = 16;  // points into the middle of the JSON
  std::memcpy(b.data(), &short_len, 8);
  spit(dir + "/model.safetensors", b);
  expect_load_error(dir, {"not a JSON object"});
}

TEST(BadHf, MissingTensor) {
  const std::string dir = copy_hf(kLlamaHf);
  auto ts = st_tensors(read_st(dir + "/model.safetensors"));
  std::erase_if(ts, [](const StTensor& t) { return t.name == "model.layers.1.mlp.up_proj.weight"; });
  write_st(dir + "/model.safetensors", make_st(ts));
  expect_load_error(dir, {"'model.layers.1.mlp.up_proj.weight' is missing"});
}

TEST(BadHf, WrongShape) {
  const std::string dir = copy_hf(kLlamaHf);
  auto ts = st_tensors(read_st(dir + "/model.safetensors"));
  for (auto& t : ts) {
    if (t.name == "model.layers.0.self_attn.k_proj.weight") t.shape = {8, 64}, t.bytes.resize(8 * 64 * 4);
  }
  write_st(dir + "/model.safetensors", make_st(ts));
  expect_load_error(dir, {"model.layers.0.self_attn.k_proj.weight", "shape [8, 64]", "expected [16, 64]"});
}

TEST(BadHf, UnknownAndUnsupportedDtypes) {
  const std::string dir = copy_hf(kLlamaHf);
  StFile f = read_st(dir + "/model.safetensors");
  f.header["model.norm.weight"]["dtype"] = "F8_E4M3";
  write_st(dir + "/model.safetensors", f);
  expect_load_error(dir, {"model.norm.weight", "unsupported dtype F8_E4M3"});
  // A dtype the file format knows but a weight matrix cannot have.
  f = read_st(test::shared_path(kLlamaHf) + "/model.safetensors");
  f.header["model.layers.2.mlp.down_proj.weight"]["dtype"] = "I32";
  write_st(dir + "/model.safetensors", f);
  expect_load_error(dir, {"model.layers.2.mlp.down_proj.weight", "dtype i32"});
}

TEST(BadHf, UnsupportedArchitecture) {
  const std::string dir = copy_hf(kLlamaHf);
  edit_json(dir + "/config.json", [](json& j) { j["architectures"] = {"GPT2LMHeadModel"}; });
  expect_load_error(dir, {"unsupported architecture 'GPT2LMHeadModel'"});
}

TEST(BadHf, BadConfigKeys) {
  const std::string dir = copy_hf(kLlamaHf);
  edit_json(dir + "/config.json", [](json& j) { j["hidden_size"] = "64"; });
  expect_load_error(dir, {"config.json", "'hidden_size' must be an integer"});
  edit_json(dir + "/config.json", [](json& j) { j["hidden_size"] = 64, j["num_key_value_heads"] = 3; });
  expect_load_error(dir, {"not a multiple of 3 key/value heads"});
  edit_json(dir + "/config.json", [](json& j) { j["num_key_value_heads"] = 2, j.erase("num_hidden_layers"); });
  expect_load_error(dir, {"'num_hidden_layers' is missing"});
  edit_json(dir + "/config.json", [](json& j) {
    j["num_hidden_layers"] = 3, j["rope_scaling"] = {{"rope_type", "yarn"}};
  });
  expect_load_error(dir, {"rope scaling type 'yarn'"});
  spit(dir + "/config.json", "{\"architectures\": [");
  expect_load_error(dir, {"config.json", "not valid JSON"});
  fs::remove(dir + "/config.json");
  expect_load_error(dir, {"no config.json"});
  expect_load_error(dir + "/nothing-here", {"no such file"});
}

// Issue 11.7: a FIFO where a model file should be blocked load_model forever (open() waits for a
// writer); each is now refused at once, naming the file.
TEST(BadHf, FifoInsteadOfAFileIsRefusedAtOnce) {
  for (const char* name : {"config.json", "generation_config.json", "model.safetensors"}) {
    SCOPED_TRACE(name);
    const std::string dir = copy_hf(kLlamaHf);
    fs::remove(dir + "/" + name);
    ASSERT_TRUE(test::make_fifo(dir + "/" + name));
    std::string message;
    ASSERT_TRUE(
        test::returns_within([&] { message = load_model(dir, {.max_batch_tokens = 16, .n_threads = 1}).message(); },
                             std::chrono::seconds(5), dir + "/" + name));
    EXPECT_NE(message.find(dir + "/" + name + " is not a regular file (it is a FIFO)"), std::string::npos) << message;
  }
  const std::string gguf = test::temp_dir() + "/model.gguf";
  ASSERT_TRUE(test::make_fifo(gguf));
  std::string message;
  ASSERT_TRUE(
      test::returns_within([&] { message = load_model(gguf, {.max_batch_tokens = 16, .n_threads = 1}).message(); },
                           std::chrono::seconds(5), gguf));
  EXPECT_NE(message.find(gguf + " is not a regular file (it is a FIFO)"), std::string::npos) << message;
}

// ---------------------------------------------------------------- bad GGUF files

// Rewrites a GGUF through the reader and writer, letting `edit` change metadata and tensors.
std::string rewrite_gguf(const std::string& rel, const std::function<void(GgufFile&)>& edit) {
  auto g = read_gguf(test::shared_path(rel));
  EXPECT_TRUE(g.is_ok());
  edit(*g);
  GgufWriter w;
  for (const auto& [k, v] : g->metadata) w.set(k, v);
  for (const auto& t : g->tensors) w.add_tensor(t.name, t.dtype, t.shape, t.data, t.nbytes);
  const std::string path = test::temp_dir() + "/model.gguf";
  EXPECT_TRUE(w.write(path).is_ok());
  return path;
}

TEST(BadGguf, RoundTripLoadsAndTruncationIsAnError) {
  const std::string good = rewrite_gguf(kLlamaGguf, [](GgufFile&) {});
  EXPECT_EQ(logits_of(good, kIds), logits_of(test::shared_path(kLlamaGguf), kIds));
  const std::string b = slurp(good);
  for (size_t cut : {size_t{3}, size_t{40}, b.size() / 3, b.size() - 1}) {
    spit(good, b.substr(0, cut));
    expect_load_error(good, {"model.gguf"});
  }
}

TEST(BadGguf, MissingTensor) {
  expect_load_error(rewrite_gguf(kLlamaGguf,
                                 [](GgufFile& g) {
                                   std::erase_if(g.tensors,
                                                 [](const TensorView& t) { return t.name == "blk.1.ffn_up.weight"; });
                                 }),
                    {"'blk.1.ffn_up.weight' is missing"});
}

TEST(BadGguf, WrongShape) {
  expect_load_error(rewrite_gguf(kLlamaGguf,
                                 [](GgufFile& g) {
                                   for (auto& t : g.tensors) {
                                     if (t.name == "blk.0.attn_q.weight") t.shape = {32, 128};
                                   }
                                 }),
                    {"blk.0.attn_q.weight", "shape [32, 128]", "expected [64, 64]"});
}

TEST(BadGguf, UnknownAndUnsupportedDtypes) {
  // An I32 weight matrix: a type GGUF knows, not one a matmul takes.
  expect_load_error(rewrite_gguf(kLlamaGguf,
                                 [](GgufFile& g) {
                                   for (auto& t : g.tensors) {
                                     if (t.name == "blk.2.ffn_gate.weight") t.dtype = DType::kI32;
                                   }
                                 }),
                    {"blk.2.ffn_gate.weight", "dtype i32"});
  // A GGML type id Glassbox does not know (16 = IQ2_XXS), patched into the tensor info.
  const std::string path = rewrite_gguf(kLlamaGguf, [](GgufFile&) {});
  std::string b = slurp(path);
  const std::string name = "blk.0.ffn_down.weight";
  const size_t at = b.find(name);
  ASSERT_NE(at, std::string::npos);
  const size_t type_at = at + name.size() + 4 + 2 * 8;  // after n_dims (u32) and two u64 dims
  const uint32_t iq2_xxs = 16;
  std::memcpy(b.data() + type_at, &iq2_xxs, 4);
  spit(path, b);
  expect_load_error(path, {"blk.0.ffn_down.weight", "GGML type 16"});
}

TEST(BadGguf, UnsupportedArchitectureAndMissingKey) {
  expect_load_error(rewrite_gguf(kLlamaGguf, [](GgufFile& g) { g.metadata["general.architecture"] = "gpt2"; }),
                    {"unsupported architecture 'gpt2'"});
  expect_load_error(rewrite_gguf(kLlamaGguf, [](GgufFile& g) { g.metadata.erase("llama.block_count"); }),
                    {"'llama.block_count' is missing"});
  expect_load_error(rewrite_gguf(kLlamaGguf,
                                 [](GgufFile& g) {
                                   g.metadata["llama.attention.head_count_kv"] = {2, 2, 2};
                                 }),
                    {"llama.attention.head_count_kv", "one integer"});
}

// ---------------------------------------------------------------- Qwen3.5 (hybrid)

namespace qwen35 {

const std::string kHf = "testdata/reference/qwen35-hybrid/hf";
const std::string kGguf = "testdata/reference/qwen35-hybrid/gguf/model-f32.gguf";

TEST(Qwen35Loader, ReadsHybridConfigFromBothForms) {
  auto h = load_model(test::shared_path(kHf), {.n_threads = 1});
  ASSERT_TRUE(h.is_ok()) << h.message();
  auto g = load_model(test::shared_path(kGguf), {.n_threads = 1});
  ASSERT_TRUE(g.is_ok()) << g.message();
  for (const ModelConfig* c : {&(*h)->config(), &(*g)->config()}) {
    EXPECT_EQ(c->arch, Arch::kQwen35);
    EXPECT_EQ(c->layer_kinds, (std::vector<LayerKind>{LayerKind::kLinearAttention, LayerKind::kLinearAttention,
                                                      LayerKind::kLinearAttention, LayerKind::kAttention}));
    EXPECT_EQ(c->lin_k_heads, 2);
    EXPECT_EQ(c->lin_v_heads, 4);
    EXPECT_EQ(c->lin_k_dim, 16);
    EXPECT_EQ(c->lin_v_dim, 16);
    EXPECT_EQ(c->lin_conv_kernel, 4);
    EXPECT_EQ(c->rope_dims, 8);  // partial_rotary_factor 0.25 of head_dim 32
    EXPECT_TRUE(c->attn_output_gate);
    EXPECT_TRUE(c->qk_norm);
    EXPECT_FALSE(c->tied_embeddings);
  }
  EXPECT_FALSE((*h)->config().lin_v_tiled);
  EXPECT_TRUE((*g)->config().lin_v_tiled);
}

TEST(Qwen35Loader, BadLayerTypes) {
  const std::string dir = copy_hf(kHf);
  edit_json(dir + "/config.json", [](json& j) { j["layer_types"][1] = "sliding_attention"; });
  expect_load_error(dir, {"config.json", "layer_types[1] = 'sliding_attention' is not supported"});
  edit_json(dir + "/config.json", [](json& j) { j["layer_types"] = {"linear_attention", "full_attention"}; });
  expect_load_error(dir, {"'layer_types' must be a list of 4 entries"});
  edit_json(dir + "/config.json", [](json& j) {
    j["layer_types"] = {"linear_attention", "linear_attention", "linear_attention", "full_attention"};
    j.erase("linear_num_value_heads");
  });
  expect_load_error(dir, {"'linear_num_value_heads' is missing"});
  edit_json(dir + "/config.json", [](json& j) { j["linear_num_value_heads"] = 3; });
  expect_load_error(dir, {"3 linear attention value heads are not a multiple of 2 key heads"});
}

TEST(Qwen35Loader, MissingOrMisshapedLinearAttentionTensor) {
  const std::string dir = copy_hf(kHf);
  auto ts = st_tensors(read_st(dir + "/model.safetensors"));
  std::erase_if(ts, [](const StTensor& t) { return t.name == "model.layers.1.linear_attn.A_log"; });
  write_st(dir + "/model.safetensors", make_st(ts));
  expect_load_error(dir, {"'model.layers.1.linear_attn.A_log' is missing"});

  expect_load_error(
      rewrite_gguf(kGguf,
                   [](GgufFile& g) {
                     std::erase_if(g.tensors, [](const TensorView& t) { return t.name == "blk.2.ssm_conv1d.weight"; });
                   }),
      {"'blk.2.ssm_conv1d.weight' is missing"});
  expect_load_error(rewrite_gguf(kGguf,
                                 [](GgufFile& g) {
                                   for (auto& t : g.tensors) {
                                     if (t.name == "blk.0.ssm_conv1d.weight") t.shape = {64, 8};
                                   }
                                 }),
                    {"blk.0.ssm_conv1d.weight", "shape [64, 8]", "expected [128, 1, 4] or [128, 4]"});
  expect_load_error(rewrite_gguf(kGguf, [](GgufFile& g) { g.metadata.erase("qwen35.ssm.group_count"); }),
                    {"'qwen35.ssm.group_count' is missing"});
}

}  // namespace qwen35

}  // namespace
}  // namespace gb
