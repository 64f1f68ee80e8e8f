// Issue 11.7: a config declaring absurd sizes (1e9 layers) allocated ~1 GB before validate()
// refused it; sizes beyond 32 bits silently wrapped. Every size a config declares is now bounded
// as it is read, with the key named, before anything is sized by it. The largest single heap
// allocation during each refused load is measured with a replaced operator new.
// Replacing the global operator new/delete pair with malloc/free is correct; GCC 12's heuristic
// flags the pairing wherever the replaced delete is inlined into std::allocator.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <new>

#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "model/model.h"
#include "support/test_support.h"

namespace {
std::atomic<size_t> g_largest{0};
}  // namespace

void* operator new(size_t n) {
  size_t seen = g_largest.load(std::memory_order_relaxed);
  while (n > seen && !g_largest.compare_exchange_weak(seen, n, std::memory_order_relaxed)) {
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace gb {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr size_t kMaxAllocation = size_t{16} << 20;  // the fixtures are far smaller; 1e9 layers were 1 GB

// Loads path and expects a refusal naming every fragment, with no allocation over kMaxAllocation.
void expect_refused_small(const std::string& path, std::initializer_list<std::string> fragments) {
  g_largest.store(0);
  auto m = load_model(path, {.max_batch_tokens = 16, .n_threads = 1});
  const size_t largest = g_largest.load();
  ASSERT_FALSE(m.is_ok()) << "loaded " << path;
  for (const auto& f : fragments) EXPECT_NE(m.message().find(f), std::string::npos) << m.message();
  EXPECT_LT(largest, kMaxAllocation) << "a " << largest << "-byte allocation before refusing: " << m.message();
}

// stories260K's directory with config.json edited (the weights linked, not copied).
std::string hf_with(const std::function<void(json&)>& edit) {
  const std::string src = test::shared_path("models/stories260K");
  const std::string dir = test::temp_dir();
  for (const auto& e : fs::directory_iterator(src)) {
    if (e.path().filename() != "config.json") fs::create_symlink(e.path(), dir + "/" + e.path().filename().string());
  }
  std::ifstream in(src + "/config.json");
  json c = json::parse(in);
  edit(c);
  std::ofstream(dir + "/config.json") << c.dump(2);
  return dir;
}

std::string gguf_with(const std::function<void(std::map<std::string, json>&)>& edit,
                      const std::string& rel = "testdata/reference/llama-gqa/gguf/model-f32.gguf") {
  auto g = read_gguf(test::shared_path(rel));
  EXPECT_TRUE(g.is_ok()) << g.message();
  edit(g->metadata);
  GgufWriter w;
  for (const auto& [k, v] : g->metadata) w.set(k, v);
  for (const auto& t : g->tensors) w.add_tensor(t.name, t.dtype, t.shape, t.data, t.nbytes);
  const std::string path = test::temp_dir() + "/model.gguf";
  EXPECT_TRUE(w.write(path).is_ok());
  return path;
}

TEST(ConfigBounds, TheUneditedFixturesLoad) {
  g_largest.store(0);
  auto m = load_model(hf_with([](json&) {}), {.max_batch_tokens = 16, .n_threads = 1});
  ASSERT_TRUE(m.is_ok()) << m.message();
  auto g = load_model(gguf_with([](auto&) {}), {.max_batch_tokens = 16, .n_threads = 1});
  ASSERT_TRUE(g.is_ok()) << g.message();
}

TEST(ConfigBounds, HfConfigWithABillionLayersIsRefusedBeforeAllocating) {
  expect_refused_small(hf_with([](json& c) { c["num_hidden_layers"] = 1000000000; }),
                       {"config.json", "'num_hidden_layers' = 1000000000", "out of range [1, 4096]"});
  // 2^32 + 1 used to wrap to 1 layer.
  expect_refused_small(hf_with([](json& c) { c["num_hidden_layers"] = 4294967297LL; }),
                       {"'num_hidden_layers' = 4294967297"});
}

TEST(ConfigBounds, EveryHfSizeIsBoundedAndNamed) {
  for (const char* key :
       {"hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "vocab_size", "head_dim"}) {
    SCOPED_TRACE(key);
    expect_refused_small(hf_with([&](json& c) { c[key] = 2000000000; }), {std::string("'") + key + "' = 2000000000"});
  }
  // head_dim sizes the rope tables before validate(): linear and llama3 scaling build one entry per
  // rotary pair.
  for (const char* type : {"linear", "llama3"}) {
    SCOPED_TRACE(type);
    expect_refused_small(hf_with([&](json& c) {
                           c["head_dim"] = 2147483647;
                           c["rope_scaling"] = {{"rope_type", type}, {"factor", 2.0}};
                         }),
                         {"'head_dim' = 2147483647"});
  }
}

TEST(ConfigBounds, GgufWithAHugeBlockCountIsRefusedBeforeAllocating) {
  expect_refused_small(gguf_with([](auto& md) { md["llama.block_count"] = 1000000000; }),
                       {"model.gguf", "'llama.block_count' = 1000000000", "out of range [1, 4096]"});
  for (const char* key : {"llama.embedding_length", "llama.feed_forward_length", "llama.attention.head_count",
                          "llama.attention.head_count_kv", "llama.vocab_size"}) {
    SCOPED_TRACE(key);
    expect_refused_small(gguf_with([&](auto& md) { md[key] = 2000000000; }),
                         {std::string("'") + key + "' = 2000000000"});
  }
  // The 175 KB model_gguf_fuzz input that took 20 s under ASan: the Qwen3.5 seed with a block_count
  // of 1e9 (1 GB of layer kinds, then a loop over a billion layers, before validate()).
  expect_refused_small(gguf_with([](auto& md) { md["qwen35.block_count"] = 1000000000; },
                                 "testdata/reference/qwen35-hybrid/gguf/model-q8_0.gguf"),
                       {"'qwen35.block_count' = 1000000000"});
  // rope.dimension_count sizes linear scaling's divisors before validate().
  expect_refused_small(gguf_with([](auto& md) {
                         md["llama.rope.dimension_count"] = 2000000000;
                         md["llama.rope.scaling.type"] = "linear";
                         md["llama.rope.scaling.factor"] = 2.0;
                       }),
                       {"'llama.rope.dimension_count' = 2000000000"});
}

}  // namespace
}  // namespace gb
