// Tests of the core utilities and the safetensors / GGUF readers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "core/fp16.h"
#include "core/mapped_file.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "support/test_support.h"

namespace gb {
namespace {

std::string write_bytes(const std::string& name, const std::string& bytes) {
  const std::string path = test::temp_dir() + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// An 8-byte little-endian length followed by the JSON header, then the data bytes.
std::string st_file(const std::string& header, const std::string& data) {
  std::string len(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(len.data(), &n, 8);
  return len + header + data;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(Fp16, Bf16RoundTripAndRounding) {
  for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 3.1415926f, 1e-30f, 65504.0f, 1e30f}) {
    const float back = bf16_to_f32(f32_to_bf16(f));
    EXPECT_NEAR(back, f, std::fabs(f) * (1.0f / 128.0f)) << f;
  }
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties to even (1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256.0f)), 1.0f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

TEST(Fp16, F16ExhaustiveRoundTrip) {
  // Every finite half converts to float and back to the same bits.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    if ((bits & 0x7c00) == 0x7c00) continue;  // inf / NaN
    ASSERT_EQ(f32_to_f16(f16_to_f32(bits)), bits) << std::hex << h;
  }
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
}

TEST(ThreadPool, EveryTaskRunsExactlyOncePerJob) {
  ThreadPool pool(3);
  for (int rep = 0; rep < 2000; ++rep) {
    std::atomic<int> counts[3] = {0, 0, 0};
    pool.run([&](int i) { counts[i].fetch_add(1); });
    for (int i = 0; i < 3; ++i) ASSERT_EQ(counts[i].load(), 1) << "rep " << rep << " task " << i;
  }
}

TEST(ThreadPool, SlowTaskDoesNotLoseOrRepeatOthers) {
  // Task 0 is slow: the others are claimed by whichever threads are free, and run() still
  // waits for the slow one before returning.
  ThreadPool pool(4);
  for (int rep = 0; rep < 20; ++rep) {
    std::atomic<int> sum{0};
    pool.run([&](int i) {
      if (i == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      sum.fetch_add(i + 1);
    });
    ASSERT_EQ(sum.load(), 1 + 2 + 3 + 4);
  }
}

TEST(ThreadPool, OversubscribedPoolStillCompletes) {
  // More threads than this machine has cores: descheduled workers must not stall the caller.
  ThreadPool pool(8);
  std::atomic<int64_t> total{0};
  for (int rep = 0; rep < 500; ++rep) pool.run([&](int i) { total.fetch_add(i); });
  EXPECT_EQ(total.load(), 500 * 28);
}

TEST(ThreadPool, SplitRangeCoversEverythingOnce) {
  for (int64_t n : {0, 1, 7, 64, 1000}) {
    for (int t : {1, 2, 3, 5}) {
      int64_t covered = 0, prev_end = 0;
      for (int i = 0; i < t; ++i) {
        const Range r = split_range(n, i, t, 4);
        EXPECT_EQ(r.begin, prev_end);
        if (r.end < n) {
          EXPECT_EQ(r.end % 4, 0);
        }
        covered += r.end - r.begin;
        prev_end = r.end;
      }
      EXPECT_EQ(covered, n);
    }
  }
}

TEST(Safetensors, ReadsStories260K) {
  auto st = read_safetensors(test::shared_path("models/stories260K/model.safetensors"));
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(st->tensors.size(), 47u);
  const TensorView* embed = nullptr;
  for (const auto& t : st->tensors) {
    if (t.name == "model.embed_tokens.weight") embed = &t;
  }
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->dtype, DType::kF32);
  EXPECT_EQ(embed->shape, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(embed->nbytes, 512u * 64u * 4u);
}

TEST(Safetensors, WriteThenRead) {
  const float a[6] = {1, 2, 3, 4, 5, 6};
  const int32_t b[2] = {7, -8};
  const std::string path = test::temp_dir() + "/x.safetensors";
  ASSERT_TRUE(write_safetensors(path, {{"a", DType::kF32, {2, 3}, a}, {"b", DType::kI32, {2}, b}}).is_ok());
  auto st = read_safetensors(path);
  ASSERT_TRUE(st.is_ok()) << st.message();
  ASSERT_EQ(st->tensors.size(), 2u);
  EXPECT_EQ(st->tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(st->tensors[0].data, a, sizeof(a)), 0);
  EXPECT_EQ(std::memcmp(st->tensors[1].data, b, sizeof(b)), 0);
}

TEST(Safetensors, RejectsBadFiles) {
  const std::string good = slurp(test::shared_path("models/stories260K/model.safetensors"));
  struct Case {
    const char* name;
    std::string bytes;
    const char* expect;
  } cases[] = {
      {"empty", "", "shorter than"},
      {"truncated", good.substr(0, good.size() / 2), "outside"},
      {"header_too_long", std::string("\xff\xff\xff\x00\x00\x00\x00\x00", 8) + "{}", "exceeds the file size"},
      {"not_json", std::string("\x04\x00\x00\x00\x00\x00\x00\x00", 8) + "abcd", "not a JSON object"},
      {"bad_dtype", st_file(R"({"w":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", "x"),
       "unsupported dtype F8_E4M3"},
      {"wrong_size", st_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "xxxx"), "needs 8 bytes"},
  };
  for (const auto& c : cases) {
    auto st = read_safetensors(write_bytes(std::string(c.name) + ".safetensors", c.bytes));
    ASSERT_FALSE(st.is_ok()) << c.name;
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << c.name << ": " << st.message();
  }
}

TEST(Gguf, ReadsVocabOnlyFile) {
  auto g = read_gguf(test::shared_path("testdata/tokenizers/llama.cpp-vocab/ggml-vocab-llama-spm.gguf"));
  ASSERT_TRUE(g.is_ok()) << g.message();
  EXPECT_EQ(g->version, 3u);
  EXPECT_TRUE(g->tensors.empty());
  const auto* model = g->find("tokenizer.ggml.model");
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->get<std::string>(), "llama");
  ASSERT_NE(g->find("tokenizer.ggml.tokens"), nullptr);
  EXPECT_EQ(g->find("tokenizer.ggml.tokens")->size(), 32000u);
}

TEST(Gguf, ReadsModelTensors) {
  auto g = read_gguf(test::shared_path("testdata/reference/llama-gqa/gguf/model-q8_0.gguf"));
  ASSERT_TRUE(g.is_ok()) << g.message();
  const TensorView* q = g->find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dtype, DType::kQ8_0);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(q->nbytes, 64u * 2u * 34u);
}

TEST(Gguf, RejectsEveryTruncation) {
  // Cutting the file anywhere must give an error, never a crash or an out-of-bounds read.
  const std::string good = slurp(test::shared_path("testdata/reference/llama-gqa/gguf/model-q4_0.gguf"));
  for (size_t cut = 0; cut < good.size(); cut += (cut < 4096 ? 7 : 4093)) {
    auto g = read_gguf(write_bytes("cut.gguf", good.substr(0, cut)));
    ASSERT_FALSE(g.is_ok()) << "cut at " << cut;
    EXPECT_FALSE(g.message().empty());
  }
  auto bad = read_gguf(write_bytes("magic.gguf", "GGUX" + good.substr(4)));
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("bad magic"), std::string::npos);
}

}  // namespace
}  // namespace gb

#include "formats/gguf_writer.h"

namespace gb {
namespace {

TEST(GgufWriter, RoundTripsMetadataAndTensors) {
  GgufWriter w;
  w.set("general.architecture", "llama");
  w.set("llama.block_count", 3u);
  w.set("llama.rope.freq_base", 10000.5f);
  w.set("x.signed", -4);
  w.set("x.flag", true);
  w.set("tokenizer.ggml.tokens", nlohmann::json::array({"a", "b", "<s>"}));
  w.set("tokenizer.ggml.scores", nlohmann::json::array({0.5, -1.0, 0.0}));
  const float a[6] = {1, 2, 3, 4, 5, 6};
  const float b[3] = {7, 8, 9};
  w.add_tensor("a", DType::kF32, {2, 3}, a, sizeof(a));
  w.add_tensor("b", DType::kF32, {3}, b, sizeof(b));
  const std::string path = test::temp_dir() + "/w.gguf";
  ASSERT_TRUE(w.write(path).is_ok());

  auto g = read_gguf(path);
  ASSERT_TRUE(g.is_ok()) << g.message();
  EXPECT_EQ(g->find("general.architecture")->get<std::string>(), "llama");
  EXPECT_EQ(g->find("llama.block_count")->get<uint32_t>(), 3u);
  EXPECT_FLOAT_EQ(g->find("llama.rope.freq_base")->get<float>(), 10000.5f);
  EXPECT_EQ(g->find("x.signed")->get<int>(), -4);
  EXPECT_EQ(g->find("x.flag")->get<bool>(), true);
  EXPECT_EQ(g->find("tokenizer.ggml.tokens")->size(), 3u);
  EXPECT_FLOAT_EQ((*g->find("tokenizer.ggml.scores"))[1].get<float>(), -1.0f);
  const TensorView* ta = g->find_tensor("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(ta->data, a, sizeof(a)), 0);
  EXPECT_EQ(std::memcmp(g->find_tensor("b")->data, b, sizeof(b)), 0);
}

// Weight-sized files (32 MiB and more) are read into huge-page memory, byte for byte, unless
// GLASSBOX_WEIGHTS=mmap; smaller ones stay mapped. Either way the bytes are the file's and
// prefetch reports the whole size.
TEST(Files, LargeFilesAreReadIntoMemorySmallOnesMapped) {
  std::string big(size_t{33} << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 13);
  const std::string big_path = write_bytes("weights.bin", big);
  const std::string small_path = write_bytes("small.bin", big.substr(0, 4096));
  const char* mode = std::getenv("GLASSBOX_WEIGHTS");
  const bool expect_memory = mode == nullptr || std::string(mode) != "mmap";
  auto f = MappedFile::open(big_path);
  ASSERT_TRUE(f.is_ok()) << f.message();
  EXPECT_EQ((*f)->in_memory(), expect_memory);
  ASSERT_EQ((*f)->size(), big.size());
  EXPECT_EQ(std::memcmp((*f)->data(), big.data(), big.size()), 0);
  size_t reported = 0;
  (*f)->prefetch([&](size_t done) { reported = done; });
  EXPECT_EQ(reported, big.size());
  auto g = MappedFile::open(small_path);
  ASSERT_TRUE(g.is_ok()) << g.message();
  EXPECT_FALSE((*g)->in_memory());
  EXPECT_EQ(std::memcmp((*g)->data(), big.data(), 4096), 0);
}

// Resident anonymous memory of this process, KiB (/proc/self/smaps_rollup).
int64_t anonymous_kib() {
  std::ifstream in("/proc/self/smaps_rollup");
  std::string key;
  int64_t kib = -1;
  while (in >> key) {
    if (key == "Anonymous:") {
      in >> kib;
      break;
    }
  }
  return kib;
}

// Packed weights hold their matrices once (issue 15): the loader releases the in-memory copy of
// bytes it repacked. Released bytes read the same at the same addresses (now from the page
// cache) and the copy's memory goes back; a file changed on disk since it was read is not
// released (its bytes would no longer be the ones read).
TEST(Files, ReleasedBytesReadTheSameAndLeaveMemory) {
  std::string big(size_t{40} << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 11);
  const std::string path = write_bytes("release.bin", big);
  auto f = MappedFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.message();
  const uint8_t* d = (*f)->data();
  EXPECT_FALSE((*f)->release(d + big.size() - 10, 20));  // not inside the file
  const int64_t before = anonymous_kib();
  ASSERT_GT(before, 0);
  const size_t off = 1000, len = size_t{36} << 20;
  EXPECT_TRUE((*f)->release(d + off, len));
  EXPECT_EQ(std::memcmp(d, big.data(), big.size()), 0);
  if ((*f)->in_memory()) {
    EXPECT_GE(before - anonymous_kib(), 34 << 10) << "the released copy's pages were not returned";
  }
  EXPECT_TRUE((*f)->release(d + off, len));  // again: the same bytes, nothing left to return
  EXPECT_EQ(std::memcmp(d + off - 1, big.data() + off - 1, len + 2), 0);

  auto g = MappedFile::open(path);
  ASSERT_TRUE(g.is_ok()) << g.message();
  // Rewritten one byte longer (a size the check sees whatever the file system's mtime granularity).
  std::ofstream(path, std::ios::binary | std::ios::trunc) << std::string(big.size() + 1, 'x');
  if ((*g)->in_memory()) {
    EXPECT_FALSE((*g)->release((*g)->data() + off, len));
  }
  EXPECT_EQ(std::memcmp((*g)->data(), big.data(), big.size()), 0);
}

// An array's element type holds every element, not just the first: [0, 0.5] is f32 (it was
// written as i32, 0.5 truncated to 0), [1u, -1] is signed; mixed kinds are refused.
// Issue 11.7: opening a FIFO for reading waits for a writer, so a FIFO named as a file (a control
// vector, a model, a config) blocked its caller forever. Every reader refuses anything but a
// regular file at once, naming the path and what it is.
TEST(Files, FifoAndDirectoryAreRefusedWithoutBlocking) {
  const std::string dir = test::temp_dir();
  const std::string fifo = dir + "/pipe.gguf";
  ASSERT_TRUE(test::make_fifo(fifo));
  std::string read_message, map_message, gguf_message, st_message;
  ASSERT_TRUE(test::returns_within([&] { read_message = read_file(fifo).message(); }, std::chrono::seconds(5), fifo));
  ASSERT_TRUE(
      test::returns_within([&] { map_message = MappedFile::open(fifo).message(); }, std::chrono::seconds(5), fifo));
  ASSERT_TRUE(test::returns_within([&] { gguf_message = read_gguf(fifo).message(); }, std::chrono::seconds(5), fifo));
  ASSERT_TRUE(
      test::returns_within([&] { st_message = read_safetensors(fifo).message(); }, std::chrono::seconds(5), fifo));
  for (const std::string& m : {read_message, map_message, gguf_message, st_message}) {
    EXPECT_NE(m.find(fifo), std::string::npos) << m;
    EXPECT_NE(m.find("is not a regular file (it is a FIFO)"), std::string::npos) << m;
  }
  EXPECT_NE(read_file(dir).message().find("it is a directory"), std::string::npos) << read_file(dir).message();
  EXPECT_NE(MappedFile::open(dir).message().find("it is a directory"), std::string::npos);
  // A regular file still reads whole.
  const std::string path = write_bytes("plain.txt", std::string(100000, 'x') + "end");
  auto text = read_file(path);
  ASSERT_TRUE(text.is_ok()) << text.message();
  EXPECT_EQ(text->size(), 100003u);
  EXPECT_EQ(text->substr(100000), "end");
}

TEST(GgufWriter, ArrayTypeHoldsEveryElement) {
  GgufWriter w;
  w.set("x.floats", nlohmann::json::array({0, 0.5}));
  w.set("x.signed", nlohmann::json::array({1u, -1}));
  w.set("x.sections", nlohmann::json::array({11, 11, 10, 0}));
  const std::string path = test::temp_dir() + "/array_types.gguf";
  ASSERT_TRUE(w.write(path).is_ok());
  auto g = read_gguf(path);
  ASSERT_TRUE(g.is_ok()) << g.message();
  EXPECT_FLOAT_EQ((*g->find("x.floats"))[1].get<float>(), 0.5f);
  EXPECT_EQ((*g->find("x.signed"))[1].get<int64_t>(), -1);
  EXPECT_EQ((*g->find("x.sections")), nlohmann::json::array({11, 11, 10, 0}));

  GgufWriter mixed;
  mixed.set("x.mixed", nlohmann::json::array({1, "a"}));
  const Status st = mixed.write(test::temp_dir() + "/mixed.gguf");
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("x.mixed"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace gb

#include "formats/quantize.h"

namespace gb {
namespace {

// llama-quantize made the fixtures' Q8_0 / Q4_0 GGUFs from their F32 GGUF: quantizing the same
// F32 rows must reproduce every quantized tensor byte for byte.
void expect_bit_exact_quantization(const std::string& fixture, const char* quant_file) {
  auto f32 = read_gguf(test::shared_path("testdata/reference/" + fixture + "/gguf/model-f32.gguf"));
  auto q = read_gguf(test::shared_path("testdata/reference/" + fixture + "/gguf/" + quant_file));
  ASSERT_TRUE(f32.is_ok() && q.is_ok());
  int checked = 0;
  for (const auto& t : q->tensors) {
    if (t.dtype != DType::kQ8_0 && t.dtype != DType::kQ4_0) continue;
    const TensorView* src = f32->find_tensor(t.name);
    ASSERT_NE(src, nullptr) << t.name;
    std::vector<uint8_t> out(t.nbytes);
    const int64_t cols = t.shape.back();
    const int64_t rows = t.numel() / cols;
    const int64_t rb = row_bytes(t.dtype, cols);
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_TRUE(convert_row(reinterpret_cast<const float*>(src->data) + r * cols, cols, t.dtype, out.data() + r * rb)
                      .is_ok());
    }
    EXPECT_EQ(std::memcmp(out.data(), t.data, t.nbytes), 0) << fixture << " " << t.name;
    ++checked;
  }
  EXPECT_GT(checked, 10);
}

TEST(Quantize, Q8_0MatchesLlamaQuantizeBitForBit) {
  for (const char* f : {"llama-gqa", "llama3-untied", "qwen2-bias", "qwen3-qknorm"})
    expect_bit_exact_quantization(f, "model-q8_0.gguf");
}

TEST(Quantize, Q4_0MatchesLlamaQuantizeBitForBit) {
  for (const char* f : {"llama-gqa", "llama3-untied", "qwen2-bias", "qwen3-qknorm"})
    expect_bit_exact_quantization(f, "model-q4_0.gguf");
}

}  // namespace
}  // namespace gb
