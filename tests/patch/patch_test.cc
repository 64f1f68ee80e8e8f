// Weight patches (src/patch) on the fixtures of ../shared/testdata/patches: patch diff of the
// Qwen3.5 loop-fix edit (2 tensors, 32 columns each), bit-exact apply, refused damaged patches and
// base tensors, malformed manifests / adapter configs / files, and the qwen3-lora adapter in its
// PEFT and GGUF forms: the same low-rank deltas, and merged into the base they reproduce the
// variant's reference logits.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "formats/gguf_writer.h"
#include "formats/safetensors.h"
#include "model/model.h"
#include "patch/patch.h"
#include "support/test_support.h"

namespace gb {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using patch::EditKind;
using patch::Patch;

std::string base35() { return test::shared_path("testdata/reference/qwen35-hybrid/hf"); }
std::string loopfix(const std::string& rel) { return test::shared_path("testdata/patches/qwen35-loopfix/" + rel); }
std::string qwen3_base() { return test::shared_path("testdata/reference/qwen3-qknorm/hf"); }
std::string lora(const std::string& rel) { return test::shared_path("testdata/patches/qwen3-lora/" + rel); }

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void spit(const std::string& path, const std::string& s) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << s;
}
json read_json(const std::string& path) { return json::parse(slurp(path)); }

void copy_dir(const std::string& from, const std::string& to) {
  fs::create_directories(to);
  for (const auto& e : fs::directory_iterator(from)) {
    fs::copy_file(e.path(), to + "/" + e.path().filename().string(), fs::copy_options::overwrite_existing);
    fs::permissions(to + "/" + e.path().filename().string(), fs::perms::owner_read | fs::perms::owner_write);
  }
}

// A fresh loop-fix patch in a new directory.
std::string make_loopfix_patch(patch::DiffStats* stats = nullptr) {
  const std::string out = test::temp_dir() + "/loopfix";
  auto st = patch::diff_checkpoints(base35(), loopfix("edited-hf"), out, {"loopfix", "1", "test", "qwen35-hybrid"});
  EXPECT_TRUE(st.is_ok()) << st.message();
  if (stats != nullptr && st.is_ok()) *stats = *st;
  return out;
}

TEST(PatchDiff, LoopfixIsTwoTensorsOf32ColumnsEach) {
  patch::DiffStats stats;
  const std::string dir = make_loopfix_patch(&stats);
  const json ref = read_json(loopfix("reference.json"));
  const json recipe = read_json(loopfix("recipe.json"));
  EXPECT_EQ(stats.tensors_changed, 2);
  EXPECT_EQ(stats.weights_changed, ref["weights_changed"].get<int64_t>());
  EXPECT_EQ(stats.weights_changed, 4096);
  EXPECT_TRUE(stats.other_files_differing.empty());
  auto p = patch::load_patch(dir);
  ASSERT_TRUE(p.is_ok()) << p.message();
  EXPECT_EQ(p->source, patch::PatchSource::kArtifact);
  EXPECT_EQ(p->name, "loopfix");
  EXPECT_EQ(p->base_model, "qwen35-hybrid");
  ASSERT_EQ(p->edits.size(), 2u);
  std::set<std::string> names;
  for (const auto& e : p->edits) {
    names.insert(e.tensor);
    EXPECT_EQ(e.kind, EditKind::kColumns) << e.tensor;
    EXPECT_EQ(e.indices.size(), 32u);
    EXPECT_EQ(e.weights_changed, 2048);
    EXPECT_EQ(e.indices, recipe["tensors"][e.tensor]["columns"].get<std::vector<int64_t>>());
    // 32 columns of 64 f32 values + 32 indices: a quarter of the 64 x 128 tensor.
    EXPECT_EQ(e.stored_bytes(), 32 * 64 * 4 + 32 * 8);
    EXPECT_LT(e.stored_bytes(), e.numel() * 4 / 3);
    EXPECT_TRUE(p->base_tensors.count(e.tensor));
  }
  EXPECT_EQ(names, (ref["edited_tensors"].get<std::set<std::string>>()));
  const json m = read_json(dir + "/manifest.json");
  EXPECT_EQ(m["edits"][0]["kind"], "columns");
  EXPECT_EQ(m["files"][0]["sha256"], ref["edited_model_sha256"]);
  EXPECT_TRUE(m["files"][0]["header"].is_null());
}

// Serving an edited checkpoint beside its base: the same edits as `patch diff` writes, in memory,
// with the base tensors pinned and the edited file's hash as the identity.
TEST(PatchDiff, InMemoryDiffOfAnEditedCheckpointEqualsTheArtifact) {
  auto mem = patch::load_patch(loopfix("edited-hf"), base35());
  ASSERT_TRUE(mem.is_ok()) << mem.message();
  auto art = patch::load_patch(make_loopfix_patch());
  ASSERT_TRUE(art.is_ok()) << art.message();
  EXPECT_EQ(mem->source, patch::PatchSource::kCheckpoint);
  EXPECT_EQ(patch::identity_sha256(*mem), read_json(loopfix("reference.json"))["edited_model_sha256"]);
  EXPECT_EQ(mem->base_tensors, art->base_tensors);
  ASSERT_EQ(mem->edits.size(), art->edits.size());
  for (size_t i = 0; i < mem->edits.size(); ++i) {
    EXPECT_EQ(mem->edits[i].tensor, art->edits[i].tensor);
    EXPECT_EQ(mem->edits[i].kind, art->edits[i].kind);
    EXPECT_EQ(mem->edits[i].indices, art->edits[i].indices);
    EXPECT_TRUE(mem->edits[i].values == art->edits[i].values);
  }
  // Without a base, or against a base that is not a directory, it is a clear error.
  auto no_base = patch::load_patch(loopfix("edited-hf"));
  ASSERT_FALSE(no_base.is_ok());
  EXPECT_NE(no_base.message().find("diffed against a Hugging Face base directory"), std::string::npos)
      << no_base.message();
  auto gguf_base = patch::load_patch(loopfix("edited-hf"),
                                     test::shared_path("testdata/reference/qwen35-hybrid/gguf/model-f32.gguf"));
  ASSERT_FALSE(gguf_base.is_ok());
  EXPECT_NE(gguf_base.message().find("glassbox patch diff"), std::string::npos) << gguf_base.message();
  // The base itself is no edit.
  auto same = patch::load_patch(base35(), base35());
  ASSERT_FALSE(same.is_ok());
  EXPECT_NE(same.message().find("no tensor differs"), std::string::npos) << same.message();
}

TEST(PatchApply, RoundTripsBitExactly) {
  const std::string dir = make_loopfix_patch();
  auto p = patch::load_patch(dir);
  ASSERT_TRUE(p.is_ok()) << p.message();
  ASSERT_TRUE(patch::verify_patch(*p, base35()).is_ok());
  const std::string out = test::temp_dir() + "/applied";
  Status st = patch::apply_patch(base35(), *p, out);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_TRUE(slurp(out + "/model.safetensors") == slurp(loopfix("edited-hf/model.safetensors")));
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_EQ(slurp(out + "/" + f), slurp(base35() + "/" + f)) << f;
  }
  // The output directory must be new or empty.
  Status again = patch::apply_patch(base35(), *p, out);
  ASSERT_FALSE(again.is_ok());
  EXPECT_NE(again.message().find("not empty"), std::string::npos) << again.message();
}

TEST(PatchVerify, OneByteChangedInAnEditFileIsRefusedWithBothHashes) {
  const std::string dir = make_loopfix_patch();
  const json m = read_json(dir + "/manifest.json");
  const std::string file = m["edits"][1]["file"], want = m["edits"][1]["sha256"];
  std::string bytes = slurp(dir + "/" + file);
  bytes[bytes.size() - 5] ^= 0x01;
  spit(dir + "/" + file, bytes);
  const std::string got = patch::sha256_hex(bytes.data(), bytes.size());
  auto p = patch::load_patch(dir);
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.message().find(file), std::string::npos) << p.message();
  EXPECT_NE(p.message().find(want), std::string::npos) << p.message();
  EXPECT_NE(p.message().find(got), std::string::npos) << p.message();
}

TEST(PatchVerify, ADifferentBaseTensorIsRefusedWithBothHashes) {
  const std::string dir = make_loopfix_patch();
  auto p = patch::load_patch(dir);
  ASSERT_TRUE(p.is_ok());
  const std::string base = test::temp_dir() + "/base";
  copy_dir(base35(), base);
  // Change one weight of layer 3's down_proj in the copy of the base.
  auto st = read_safetensors(base35() + "/model.safetensors");
  ASSERT_TRUE(st.is_ok());
  size_t offset = 0;
  for (const auto& t : st->tensors) {
    if (t.name == "model.layers.3.mlp.down_proj.weight") offset = t.data - t.file->data();
  }
  ASSERT_GT(offset, 0u);
  std::string bytes = slurp(base + "/model.safetensors");
  bytes[offset + 100] ^= 0x40;
  spit(base + "/model.safetensors", bytes);
  Status v = patch::verify_patch(*p, base);
  ASSERT_FALSE(v.is_ok());
  const std::string& msg = v.message();
  EXPECT_NE(msg.find("model.layers.3.mlp.down_proj.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find(p->base_tensors.at("model.layers.3.mlp.down_proj.weight")), std::string::npos) << msg;
  auto changed = read_safetensors(base + "/model.safetensors");
  ASSERT_TRUE(changed.is_ok());
  for (const auto& t : changed->tensors) {
    if (t.name == "model.layers.3.mlp.down_proj.weight") {
      EXPECT_NE(msg.find(patch::sha256_hex(t.data, t.nbytes)), std::string::npos) << msg;
    }
  }
  EXPECT_FALSE(patch::apply_patch(base, *p, test::temp_dir() + "/out").is_ok());
}

// ---- malformed inputs ----

struct ManifestCase {
  const char* what;
  std::function<void(json&)> mutate;
  const char* expect;  // in the message
};

TEST(PatchArtifact, MalformedManifestsAreClearErrors) {
  const std::string good = make_loopfix_patch();
  const json m0 = read_json(good + "/manifest.json");
  const std::vector<ManifestCase> cases = {
      {"wrong format", [](json& m) { m["format"] = "other"; }, "\"format\""},
      {"future version", [](json& m) { m["format_version"] = 9; }, "format_version 9"},
      {"no name", [](json& m) { m.erase("name"); }, "missing \"name\""},
      {"no edits", [](json& m) { m.erase("edits"); }, "\"edits\""},
      {"edits not array", [](json& m) { m["edits"] = 3; }, "\"edits\""},
      {"edit not object", [](json& m) { m["edits"][0] = "x"; }, "must be an object"},
      {"bad kind", [](json& m) { m["edits"][0]["kind"] = "diagonal"; }, "diagonal"},
      {"path traversal", [](json& m) { m["edits"][0]["file"] = "../../etc/passwd"; }, "not a file name"},
      {"absolute path", [](json& m) { m["edits"][0]["file"] = "/etc/passwd"; }, "not a file name"},
      {"bad sha", [](json& m) { m["edits"][0]["sha256"] = "xyz"; }, "sha256"},
      {"missing file", [](json& m) { m["edits"][0]["file"] = "nope.safetensors"; }, "nope.safetensors"},
      {"shape mismatch",
       [](json& m) {
         m["edits"][0]["shape"] = {64, 100};
       },
       "out of range"},
      {"shape 1-D for columns", [](json& m) { m["edits"][0]["shape"] = {8192}; }, "2-D"},
      {"negative dim",
       [](json& m) {
         m["edits"][0]["shape"] = {-1, 128};
       },
       "positive"},
      {"huge dims",
       [](json& m) {
         m["edits"][0]["shape"] = {int64_t{1} << 40, int64_t{1} << 40};
       },
       "too large"},
      {"bad dtype", [](json& m) { m["edits"][0]["dtype"] = "f8"; }, "f8"},
      {"dtype mismatch", [](json& m) { m["edits"][0]["dtype"] = "bf16"; }, "tensor's dtype"},
      {"twice", [](json& m) { m["edits"][1] = m["edits"][0]; }, "edited twice"},
      {"no base hash", [](json& m) { m["base_model"]["tensors"].erase(m["edits"][0]["tensor"].get<std::string>()); },
       "no SHA-256"},
      {"base hash not hex", [](json& m) { m["base_model"]["tensors"].begin().value() = "00"; }, "not a SHA-256"},
      {"no base_model", [](json& m) { m.erase("base_model"); }, "base_model"},
      {"files not array", [](json& m) { m["files"] = "x"; }, "\"files\""},
      {"golden not array", [](json& m) { m["golden"] = 1; }, "\"golden\" must be an array"},
      {"golden without greedy",
       [](json& m) {
         m["golden"] = json::array({{{"prompt", {1, 2}}}});
       },
       "golden[0]"},
      {"golden negative id",
       [](json& m) {
         m["golden"] = json::array({{{"prompt", {1, -2}}, {"greedy", {3}}}});
       },
       "golden[0]"},
      {"header traversal", [](json& m) { m["files"][0]["header"] = "../h"; }, "not a file name"},
      {"low_rank without rank", [](json& m) { m["edits"][0]["kind"] = "low_rank"; }, "\"rank\""},
  };
  for (const auto& c : cases) {
    const std::string dir = test::temp_dir() + "/case";
    fs::remove_all(dir);
    copy_dir(good, dir);
    json m = m0;
    c.mutate(m);
    spit(dir + "/manifest.json", m.dump());
    auto p = patch::load_artifact(dir);
    ASSERT_FALSE(p.is_ok()) << c.what;
    EXPECT_NE(p.message().find(c.expect), std::string::npos) << c.what << ": " << p.message();
  }
  // Not JSON, not an object, nested 100,000 deep, empty.
  for (const std::string& text :
       {std::string("{\"format\":"), std::string("[1, 2]"), std::string(100000, '['), std::string()}) {
    const std::string dir = test::temp_dir() + "/case";
    fs::remove_all(dir);
    copy_dir(good, dir);
    spit(dir + "/manifest.json", text);
    auto p = patch::load_artifact(dir);
    ASSERT_FALSE(p.is_ok());
    EXPECT_NE(p.message().find("manifest.json"), std::string::npos) << p.message();
  }
}

// Edit files whose hashes match the manifest but whose contents are wrong.
TEST(PatchArtifact, MalformedEditFilesAreClearErrors) {
  const std::string good = make_loopfix_patch();
  const json m0 = read_json(good + "/manifest.json");
  std::vector<float> vals(64 * 32, 0.5f);
  std::vector<int64_t> idx(32);
  for (int i = 0; i < 32; ++i) idx[i] = i;
  struct FileCase {
    const char* what;
    std::function<std::string(const std::string& path)> write;  // returns the file's bytes
    const char* expect;
  };
  auto st_file = [&](std::vector<SafetensorsEntry> entries) {
    return [entries](const std::string& path) {
      EXPECT_TRUE(write_safetensors(path, entries).is_ok());
      return slurp(path);
    };
  };
  std::vector<int64_t> bad_idx = idx, unsorted = idx;
  bad_idx[5] = 500;
  std::swap(unsorted[1], unsorted[2]);
  std::vector<int32_t> idx32(32, 0);
  const std::vector<FileCase> cases = {
      {"index out of range",
       st_file({{"indices", DType::kI64, {32}, bad_idx.data()}, {"values", DType::kF32, {64, 32}, vals.data()}}),
       "out of range"},
      {"indices not increasing",
       st_file({{"indices", DType::kI64, {32}, unsorted.data()}, {"values", DType::kF32, {64, 32}, vals.data()}}),
       "not increasing"},
      {"indices i32",
       st_file({{"indices", DType::kI32, {32}, idx32.data()}, {"values", DType::kF32, {64, 32}, vals.data()}}), "i64"},
      {"values wrong shape",
       st_file({{"indices", DType::kI64, {32}, idx.data()}, {"values", DType::kF32, {32, 64}, vals.data()}}),
       "needs [64, 32]"},
      {"no values", st_file({{"indices", DType::kI64, {32}, idx.data()}}), "'values'"},
      {"no indices", st_file({{"values", DType::kF32, {64, 32}, vals.data()}}), "'indices'"},
      {"truncated",
       [&](const std::string& path) {
         std::string b = slurp(good + "/" + m0["edits"][0]["file"].get<std::string>());
         b.resize(b.size() / 2);
         spit(path, b);
         return b;
       },
       "safetensors"},
      {"garbage",
       [&](const std::string& path) {
         spit(path, "not a safetensors file at all");
         return std::string("not a safetensors file at all");
       },
       ""},
  };
  for (const auto& c : cases) {
    const std::string dir = test::temp_dir() + "/case";
    fs::remove_all(dir);
    copy_dir(good, dir);
    const std::string bytes = c.write(dir + "/" + m0["edits"][0]["file"].get<std::string>());
    json m = m0;
    m["edits"][0]["sha256"] = patch::sha256_hex(bytes.data(), bytes.size());
    spit(dir + "/manifest.json", m.dump());
    auto p = patch::load_artifact(dir);
    ASSERT_FALSE(p.is_ok()) << c.what;
    EXPECT_NE(p.message().find(m0["edits"][0]["file"].get<std::string>()), std::string::npos)
        << c.what << ": " << p.message();
    EXPECT_NE(p.message().find(c.expect), std::string::npos) << c.what << ": " << p.message();
  }
}

// ---- diff on synthetic checkpoints: every kind, other dtypes, a changed header ----

struct Synth {
  std::vector<float> mat;          // [16, 32] f32
  std::vector<uint16_t> half;      // [8, 64] bf16 bits
  std::vector<float> vec;          // [40] f32
  std::vector<float> wide;         // [4, 100] f32
  std::vector<float> cols_tensor;  // [50, 20] f32
};

Synth synth_base() {
  Synth s;
  s.mat = test::random_vec(16 * 32, 1);
  for (float v : test::random_vec(8 * 64, 2)) s.half.push_back(static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16));
  s.vec = test::random_vec(40, 3);
  s.wide = test::random_vec(400, 4);
  s.cols_tensor = test::random_vec(1000, 5);
  return s;
}

void write_synth(const std::string& dir, const Synth& s, const std::map<std::string, std::string>& meta = {}) {
  fs::create_directories(dir);
  ASSERT_TRUE(write_safetensors(dir + "/model.safetensors",
                                {{"a.mat", DType::kF32, {16, 32}, s.mat.data()},
                                 {"b.half", DType::kBF16, {8, 64}, s.half.data()},
                                 {"c.vec", DType::kF32, {40}, s.vec.data()},
                                 {"d.wide", DType::kF32, {4, 100}, s.wide.data()},
                                 {"e.cols", DType::kF32, {50, 20}, s.cols_tensor.data()}},
                                meta)
                  .is_ok());
  spit(dir + "/config.json", "{}");
}

TEST(PatchDiff, ChoosesTheSmallestKindAndRoundTripsEveryDtype) {
  const std::string root = test::temp_dir();
  Synth b = synth_base(), e = b;
  for (int c = 0; c < 32; ++c) e.mat[5 * 32 + c] += 1.0f;  // one row -> rows
  e.half[3] ^= 1;                                          // one element of a bf16 tensor -> sparse
  e.half[200] ^= 1;
  for (float& v : e.vec) v = -v;                                  // every element of a 1-D tensor -> full
  for (int r = 0; r < 50; ++r) e.cols_tensor[r * 20 + 7] = 0.0f;  // one column -> columns
  // d.wide unchanged.
  write_synth(root + "/base", b);
  write_synth(root + "/edited", e);
  auto st = patch::diff_checkpoints(root + "/base", root + "/edited", root + "/patch", {});
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(st->tensors_changed, 4);
  EXPECT_EQ(st->weights_changed, 32 + 2 + 40 + 50);
  auto p = patch::load_patch(root + "/patch");
  ASSERT_TRUE(p.is_ok()) << p.message();
  std::map<std::string, EditKind> kinds;
  for (const auto& ed : p->edits) kinds[ed.tensor] = ed.kind;
  EXPECT_EQ(kinds["a.mat"], EditKind::kRows);
  EXPECT_EQ(kinds["b.half"], EditKind::kSparse);
  EXPECT_EQ(kinds["c.vec"], EditKind::kFull);
  EXPECT_EQ(kinds["e.cols"], EditKind::kColumns);
  EXPECT_FALSE(kinds.count("d.wide"));
  ASSERT_TRUE(patch::apply_patch(root + "/base", *p, root + "/out").is_ok());
  EXPECT_TRUE(slurp(root + "/out/model.safetensors") == slurp(root + "/edited/model.safetensors"));
  EXPECT_EQ(slurp(root + "/out/config.json"), "{}");
}

TEST(PatchDiff, SignOfZeroIsAChange) {
  const std::string root = test::temp_dir();
  Synth b = synth_base(), e = b;
  b.mat[7] = 0.0f;
  e.mat[7] = -0.0f;
  write_synth(root + "/base", b);
  write_synth(root + "/edited", e);
  auto st = patch::diff_checkpoints(root + "/base", root + "/edited", root + "/patch", {});
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(st->weights_changed, 1);
}

TEST(PatchDiff, AChangedHeaderIsStoredAndReproduced) {
  const std::string root = test::temp_dir();
  Synth b = synth_base(), e = b;
  e.mat[0] += 1;
  write_synth(root + "/base", b);
  write_synth(root + "/edited", e, {{"edited_by", "someone"}});
  spit(root + "/edited/config.json", "{\"x\": 1}");
  auto st = patch::diff_checkpoints(root + "/base", root + "/edited", root + "/patch", {});
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(st->other_files_differing, std::vector<std::string>{"config.json"});
  const json m = read_json(root + "/patch/manifest.json");
  EXPECT_TRUE(m["files"][0]["header"].is_string());
  auto p = patch::load_patch(root + "/patch");
  ASSERT_TRUE(p.is_ok()) << p.message();
  ASSERT_TRUE(patch::apply_patch(root + "/base", *p, root + "/out").is_ok());
  EXPECT_TRUE(slurp(root + "/out/model.safetensors") == slurp(root + "/edited/model.safetensors"));
}

TEST(PatchDiff, RefusesCheckpointsThatDifferInShape) {
  const std::string root = test::temp_dir();
  Synth b = synth_base();
  write_synth(root + "/base", b);
  fs::create_directories(root + "/edited");
  ASSERT_TRUE(
      write_safetensors(root + "/edited/model.safetensors", {{"a.mat", DType::kF32, {32, 16}, b.mat.data()}}).is_ok());
  auto st = patch::diff_checkpoints(root + "/base", root + "/edited", root + "/patch", {});
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("a.mat"), std::string::npos) << st.message();
  auto none = patch::diff_checkpoints(root + "/base", root + "/nowhere", root + "/patch2", {});
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.message().find("nowhere"), std::string::npos) << none.message();
}

// ---- LoRA adapters ----

TEST(PatchLora, PeftAndGgufFormsGiveTheSameLowRankDeltas) {
  auto peft = patch::load_patch(lora("adapter"));
  auto gguf = patch::load_patch(lora("adapter.gguf"));
  ASSERT_TRUE(peft.is_ok()) << peft.message();
  ASSERT_TRUE(gguf.is_ok()) << gguf.message();
  EXPECT_EQ(peft->source, patch::PatchSource::kPeft);
  EXPECT_EQ(gguf->source, patch::PatchSource::kGgufLora);
  const json ref = read_json(lora("reference.json"));
  ASSERT_EQ(peft->edits.size(), 9u);
  ASSERT_EQ(gguf->edits.size(), 9u);
  for (const auto& e : peft->edits) {
    const patch::Edit* g = gguf->find(e.tensor);
    ASSERT_NE(g, nullptr) << e.tensor;
    EXPECT_EQ(e.kind, EditKind::kLowRank);
    EXPECT_EQ(g->kind, EditKind::kLowRank);
    EXPECT_EQ(e.rank, ref["adapter"]["r"].get<int64_t>());
    EXPECT_EQ(g->rank, e.rank);
    EXPECT_EQ(e.scale, ref["adapter"]["scale"].get<float>());
    EXPECT_EQ(g->scale, e.scale);
    EXPECT_EQ(e.shape, g->shape);
    EXPECT_FALSE(g->gguf_rope_permuted);  // qwen3: no q/k permutation
    // The deltas scale · B · A, element by element.
    double max_diff = 0, max_abs = 0;
    for (int64_t r = 0; r < e.rows(); ++r) {
      for (int64_t c = 0; c < e.cols(); ++c) {
        double dp = 0, dg = 0;
        for (int64_t j = 0; j < e.rank; ++j) {
          dp += double(e.b[r * e.rank + j]) * e.a[j * e.cols() + c];
          dg += double(g->b[r * g->rank + j]) * g->a[j * g->cols() + c];
        }
        max_diff = std::max(max_diff, std::abs(e.scale * dp - g->scale * dg));
        max_abs = std::max(max_abs, std::abs(e.scale * dp));
      }
    }
    EXPECT_LE(max_diff, 1e-6) << e.tensor;
    EXPECT_GT(max_abs, 1e-3) << e.tensor;  // a real delta
  }
  const auto t = patch::target_of("model.layers.2.mlp.down_proj.weight");
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(t->layer, 2);
  EXPECT_EQ(t->proj, patch::Proj::kDown);
}

// Runs every reference sequence of fixture_dir through the model in model_dir; the largest
// |logit - reference| over every position of every sequence.
double max_logit_diff(const std::string& model_dir, const std::string& fixture_dir) {
  auto model = load_model(model_dir, LoadOptions{});
  EXPECT_TRUE(model.is_ok()) << model.message();
  if (!model.is_ok()) return INFINITY;
  const ModelConfig& c = (*model)->config();
  const json ref = read_json(fixture_dir + "/reference.json");
  auto logits_ref = read_safetensors(fixture_dir + "/reference.safetensors");
  EXPECT_TRUE(logits_ref.is_ok()) << logits_ref.message();
  if (!logits_ref.is_ok()) return INFINITY;
  std::map<std::string, const TensorView*> by_name;
  for (const auto& t : logits_ref->tensors) by_name[t.name] = &t;
  double max_diff = 0;
  EXPECT_EQ(ref["sequences"].size(), 3u);
  for (size_t s = 0; s < ref["sequences"].size(); ++s) {
    const auto ids = ref["sequences"][s].get<std::vector<int32_t>>();
    auto cache = KvCache::create(c, 8, 16);
    EXPECT_TRUE(cache.is_ok());
    if (!cache.is_ok()) return INFINITY;
    const std::vector<int32_t> table = {0, 1, 2, 3};
    Batch batch;
    batch.add_sequence(ids, 0, table, 16, true, 0);
    std::vector<float> logits(batch.n_out() * c.vocab);
    Status st = (*model)->forward(batch, **cache, nullptr, logits.data());
    EXPECT_TRUE(st.is_ok()) << st.message();
    const TensorView* want = by_name["seq" + std::to_string(s) + ".logits"];
    EXPECT_NE(want, nullptr);
    if (want == nullptr || want->numel() != static_cast<int64_t>(logits.size())) return INFINITY;
    const float* w = reinterpret_cast<const float*>(want->data);
    for (size_t i = 0; i < logits.size(); ++i) max_diff = std::max(max_diff, double(std::abs(logits[i] - w[i])));
  }
  std::printf("%s on %s: max |logit - reference| = %.3g\n", model_dir.c_str(), fixture_dir.c_str(), max_diff);
  return max_diff;
}

double tolerance(const std::string& fixture_dir) {
  return read_json(fixture_dir + "/reference.json")["tolerance_logits_f32"].get<double>();
}

TEST(PatchLora, MergedPeftAdapterReproducesTheVariantsReferenceLogits) {
  auto p = patch::load_patch(lora("adapter"));
  ASSERT_TRUE(p.is_ok()) << p.message();
  const std::string out = test::temp_dir() + "/merged-peft";
  Status st = patch::apply_patch(qwen3_base(), *p, out);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_LE(max_logit_diff(out, lora("")), tolerance(lora("")));
}

TEST(PatchLora, MergedGgufAdapterReproducesTheVariantsReferenceLogits) {
  auto p = patch::load_patch(lora("adapter.gguf"));
  ASSERT_TRUE(p.is_ok()) << p.message();
  const std::string out = test::temp_dir() + "/merged-gguf";
  Status st = patch::apply_patch(qwen3_base(), *p, out);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_LE(max_logit_diff(out, lora("")), tolerance(lora("")));
}

TEST(PatchApply, AppliedLoopfixReproducesReferenceLogits) {
  auto p = patch::load_patch(make_loopfix_patch());
  ASSERT_TRUE(p.is_ok()) << p.message();
  const std::string out = test::temp_dir() + "/loopfix-applied";
  ASSERT_TRUE(patch::apply_patch(base35(), *p, out).is_ok());
  EXPECT_LE(max_logit_diff(out, loopfix("")), tolerance(loopfix("")));
}

// The bases alone are far from the variants' references, so the tests above see the deltas.
TEST(PatchLora, BasesAloneAreFarFromTheVariantsReferences) {
  EXPECT_GT(max_logit_diff(qwen3_base(), lora("")), 100 * tolerance(lora("")));
  EXPECT_GT(max_logit_diff(base35(), loopfix("")), 100 * tolerance(loopfix("")));
}

std::string make_peft(const json& config, bool copy_weights = true) {
  static int n = 0;
  const std::string dir = test::temp_dir() + "/peft" + std::to_string(n++);
  fs::create_directories(dir);
  spit(dir + "/adapter_config.json", config.dump());
  if (copy_weights) {
    fs::copy_file(lora("adapter/adapter_model.safetensors"), dir + "/adapter_model.safetensors");
  }
  return dir;
}

TEST(PatchLora, RsLoraAndPatternsSetTheScale) {
  json c = read_json(lora("adapter/adapter_config.json"));
  c["use_rslora"] = true;
  auto rs = patch::load_patch(make_peft(c));
  ASSERT_TRUE(rs.is_ok()) << rs.message();
  for (const auto& e : rs->edits) EXPECT_FLOAT_EQ(e.scale, 8.0f / 2.0f) << e.tensor;  // alpha / sqrt(4)
  c["use_rslora"] = false;
  c["alpha_pattern"] = {{"q_proj", 16}};
  auto pat = patch::load_patch(make_peft(c));
  ASSERT_TRUE(pat.is_ok()) << pat.message();
  for (const auto& e : pat->edits) {
    EXPECT_FLOAT_EQ(e.scale, e.tensor.find("q_proj") != std::string::npos ? 4.0f : 2.0f) << e.tensor;
  }
  c.erase("alpha_pattern");
  c["rank_pattern"] = {{"v_proj", 8}};
  auto bad_rank = patch::load_patch(make_peft(c));
  ASSERT_FALSE(bad_rank.is_ok());
  EXPECT_NE(bad_rank.message().find("v_proj"), std::string::npos) << bad_rank.message();
}

TEST(PatchLora, MalformedAdapterConfigsAndFilesAreClearErrors) {
  const json c0 = read_json(lora("adapter/adapter_config.json"));
  struct Case {
    const char* what;
    std::function<void(json&)> mutate;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"not lora", [](json& c) { c["peft_type"] = "IA3"; }, "IA3"},
      {"no r", [](json& c) { c.erase("r"); }, "\"r\""},
      {"r zero", [](json& c) { c["r"] = 0; }, "\"r\""},
      {"r string", [](json& c) { c["r"] = "4"; }, "\"r\""},
      {"r mismatch", [](json& c) { c["r"] = 8; }, "rank 4"},
      {"no alpha", [](json& c) { c.erase("lora_alpha"); }, "lora_alpha"},
      {"dora", [](json& c) { c["use_dora"] = true; }, "DoRA"},
      {"fan_in_fan_out", [](json& c) { c["fan_in_fan_out"] = true; }, "fan_in_fan_out"},
      {"bias", [](json& c) { c["bias"] = "all"; }, "bias"},
      {"modules_to_save", [](json& c) { c["modules_to_save"] = {"lm_head"}; }, "modules_to_save"},
      {"pattern not object", [](json& c) { c["rank_pattern"] = 3; }, "rank_pattern"},
  };
  for (const auto& k : cases) {
    json c = c0;
    k.mutate(c);
    auto p = patch::load_patch(make_peft(c));
    ASSERT_FALSE(p.is_ok()) << k.what;
    EXPECT_NE(p.message().find(k.expect), std::string::npos) << k.what << ": " << p.message();
  }
  {
    const std::string dir = make_peft(c0);
    spit(dir + "/adapter_config.json", "{\"r\": ");
    auto p = patch::load_patch(dir);
    ASSERT_FALSE(p.is_ok());
    EXPECT_NE(p.message().find("adapter_config.json"), std::string::npos) << p.message();
  }
  {
    auto p = patch::load_patch(make_peft(c0, /*copy_weights=*/false));
    ASSERT_FALSE(p.is_ok());
    EXPECT_NE(p.message().find("adapter_model.safetensors"), std::string::npos) << p.message();
  }
  {  // A factor without its partner, a factor of the wrong shape, a tensor that is not a factor.
    const std::string dir = make_peft(c0, false);
    std::vector<float> a(4 * 64, 0.1f), b(128 * 4, 0.1f);
    ASSERT_TRUE(
        write_safetensors(
            dir + "/adapter_model.safetensors",
            {{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", DType::kF32, {4, 64}, a.data()}})
            .is_ok());
    auto p = patch::load_patch(dir);
    ASSERT_FALSE(p.is_ok());
    EXPECT_NE(p.message().find("no lora_B"), std::string::npos) << p.message();
    ASSERT_TRUE(
        write_safetensors(
            dir + "/adapter_model.safetensors",
            {{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", DType::kF32, {4, 64}, a.data()},
             {"base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", DType::kF32, {64, 8}, b.data()}})
            .is_ok());
    p = patch::load_patch(dir);
    ASSERT_FALSE(p.is_ok());
    EXPECT_NE(p.message().find("same r"), std::string::npos) << p.message();
    ASSERT_TRUE(
        write_safetensors(
            dir + "/adapter_model.safetensors",
            {{"base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector", DType::kF32, {128}, b.data()}})
            .is_ok());
    p = patch::load_patch(dir);
    ASSERT_FALSE(p.is_ok());
    EXPECT_NE(p.message().find("not a LoRA factor"), std::string::npos) << p.message();
    // Shapes that fit no base tensor: refused when applied, naming the tensor.
    std::vector<float> a2(4 * 32, 0.1f), b2(128 * 4, 0.1f);
    ASSERT_TRUE(
        write_safetensors(
            dir + "/adapter_model.safetensors",
            {{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", DType::kF32, {4, 32}, a2.data()},
             {"base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", DType::kF32, {128, 4}, b2.data()}})
            .is_ok());
    p = patch::load_patch(dir);
    ASSERT_TRUE(p.is_ok()) << p.message();
    Status st = patch::apply_patch(qwen3_base(), *p, test::temp_dir() + "/wrong-shape");
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("q_proj"), std::string::npos) << st.message();
  }
  // GGUF: a model file is not an adapter; a truncated adapter; an adapter of another type.
  {
    auto p = patch::load_patch(test::shared_path("testdata/reference/qwen3-qknorm/gguf/model-f32.gguf"));
    ASSERT_FALSE(p.is_ok());
    EXPECT_NE(p.message().find("general.type"), std::string::npos) << p.message();
    std::string bytes = slurp(lora("adapter.gguf"));
    const std::string cut = test::temp_dir() + "/cut.gguf";
    spit(cut, bytes.substr(0, bytes.size() / 2));
    p = patch::load_patch(cut);
    ASSERT_FALSE(p.is_ok());
    EXPECT_NE(p.message().find("cut.gguf"), std::string::npos) << p.message();
    GgufWriter w;
    w.set("general.architecture", "qwen3");
    w.set("general.type", "adapter");
    w.set("adapter.type", "control_vector");
    const std::string cv = test::temp_dir() + "/cv.gguf";
    ASSERT_TRUE(w.write(cv).is_ok());
    p = patch::load_patch(cv);
    ASSERT_FALSE(p.is_ok());
    EXPECT_NE(p.message().find("control_vector"), std::string::npos) << p.message();
  }
  {  // llama GGUF LoRAs keep llama.cpp's q/k row order: flagged, and not merged into an HF base.
    GgufWriter w;
    std::vector<float> a(4 * 64, 0.1f), b(128 * 4, 0.1f);
    w.set("general.architecture", "llama");
    w.set("general.type", "adapter");
    w.set("adapter.type", "lora");
    w.set("adapter.lora.alpha", 8.0);
    w.add_tensor("blk.0.attn_q.weight.lora_a", DType::kF32, {4, 64}, a.data(), a.size() * 4);
    w.add_tensor("blk.0.attn_q.weight.lora_b", DType::kF32, {128, 4}, b.data(), b.size() * 4);
    const std::string path = test::temp_dir() + "/llama-lora.gguf";
    ASSERT_TRUE(w.write(path).is_ok());
    auto p = patch::load_patch(path);
    ASSERT_TRUE(p.is_ok()) << p.message();
    ASSERT_EQ(p->edits.size(), 1u);
    EXPECT_TRUE(p->edits[0].gguf_rope_permuted);
    EXPECT_FLOAT_EQ(p->edits[0].scale, 2.0f);
    Status st = patch::apply_patch(qwen3_base(), *p, test::temp_dir() + "/llama-merged");
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("permuted"), std::string::npos) << st.message();
  }
  {
    auto p = patch::load_patch(test::temp_dir());
    ASSERT_FALSE(p.is_ok());
    EXPECT_NE(p.message().find("manifest.json"), std::string::npos) << p.message();
    p = patch::load_patch(lora("reference.json"));
    ASSERT_FALSE(p.is_ok());
    EXPECT_NE(p.message().find("not a patch"), std::string::npos) << p.message();
  }
}

// A low_rank edit in an artifact (A, B in the patch, scale in the manifest) merges like the
// PEFT adapter it was made from.
TEST(PatchArtifact, LowRankEditMergesLikeThePeftAdapter) {
  auto peft = patch::load_patch(lora("adapter"));
  ASSERT_TRUE(peft.is_ok());
  const patch::Edit& e = peft->edits[0];
  auto base = read_safetensors(qwen3_base() + "/model.safetensors");
  ASSERT_TRUE(base.is_ok());
  std::string base_sha;
  for (const auto& t : base->tensors) {
    if (t.name == e.tensor) base_sha = patch::sha256_hex(t.data, t.nbytes);
  }
  const std::string dir = test::temp_dir() + "/lowrank";
  fs::create_directories(dir);
  ASSERT_TRUE(
      write_safetensors(dir + "/edit-0000.safetensors", {{"lora_A", DType::kF32, {e.rank, e.cols()}, e.a.data()},
                                                         {"lora_B", DType::kF32, {e.rows(), e.rank}, e.b.data()}})
          .is_ok());
  const std::string bytes = slurp(dir + "/edit-0000.safetensors");
  json m = {{"format", "glassbox-patch"},
            {"format_version", 1},
            {"name", "one-lora"},
            {"version", "1"},
            {"base_model", {{"name", "qwen3-qknorm"}, {"tensors", {{e.tensor, base_sha}}}}},
            {"edits",
             {{{"tensor", e.tensor},
               {"kind", "low_rank"},
               {"file", "edit-0000.safetensors"},
               {"sha256", patch::sha256_hex(bytes.data(), bytes.size())},
               {"dtype", "f32"},
               {"shape", e.shape},
               {"rank", e.rank},
               {"scale", e.scale}}}}};
  spit(dir + "/manifest.json", m.dump());
  auto art = patch::load_patch(dir);
  ASSERT_TRUE(art.is_ok()) << art.message();
  Patch only_first = *peft;
  only_first.edits.resize(1);
  ASSERT_TRUE(patch::apply_patch(qwen3_base(), *art, test::temp_dir() + "/lr-art").is_ok());
  ASSERT_TRUE(patch::apply_patch(qwen3_base(), only_first, test::temp_dir() + "/lr-peft").is_ok());
  EXPECT_TRUE(slurp(test::temp_dir() + "/lr-art/model.safetensors") ==
              slurp(test::temp_dir() + "/lr-peft/model.safetensors"));
  EXPECT_FALSE(slurp(test::temp_dir() + "/lr-art/model.safetensors") == slurp(qwen3_base() + "/model.safetensors"));
}

TEST(PatchNames, HfAndGgufNamesMapBothWays) {
  EXPECT_EQ(patch::hf_name_from_gguf("blk.12.attn_q.weight"), "model.layers.12.self_attn.q_proj.weight");
  EXPECT_EQ(patch::hf_name_from_gguf("blk.0.ffn_down.weight"), "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(patch::hf_name_from_gguf("blk.3.ssm_out.weight"), "model.layers.3.linear_attn.out_proj.weight");
  EXPECT_EQ(patch::hf_name_from_gguf("token_embd.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(patch::hf_name_from_gguf("blk.x.attn_q.weight"), "");
  EXPECT_EQ(patch::hf_name_from_gguf("blk.0.attn_norm.weight"), "");
  EXPECT_EQ(patch::gguf_name_from_hf("model.language_model.layers.4.mlp.up_proj.weight"), "blk.4.ffn_up.weight");
  EXPECT_EQ(patch::gguf_name_from_hf("lm_head.weight"), "output.weight");
  EXPECT_FALSE(patch::target_of("model.norm.weight").is_ok());
  auto t = patch::target_of("blk.7.attn_output.weight");
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(t->layer, 7);
  EXPECT_EQ(t->proj, patch::Proj::kO);
}

// apply_edit is public (the serving path will call it): an inconsistent Edit is an error.
TEST(PatchApplyEdit, InconsistentEditsAreErrorsNotWildWrites) {
  std::vector<uint8_t> buf(4 * 6 * 4, 0);
  patch::Edit e;
  e.tensor = "t";
  e.dtype = DType::kF32;
  e.shape = {4, 6};
  e.kind = EditKind::kColumns;
  e.indices = {1, 9};
  e.values.resize(4 * 2 * 4);
  EXPECT_FALSE(patch::apply_edit(e, buf.data(), buf.size()).is_ok());  // column 9 of 6
  e.indices = {1, 2};
  e.values.resize(3);
  EXPECT_FALSE(patch::apply_edit(e, buf.data(), buf.size()).is_ok());  // too few values
  e.values.assign(4 * 2 * 4, 0x3f);
  EXPECT_TRUE(patch::apply_edit(e, buf.data(), buf.size()).is_ok());
  EXPECT_FALSE(patch::apply_edit(e, buf.data(), buf.size() - 4).is_ok());  // wrong tensor size
  e.kind = EditKind::kLowRank;
  e.rank = 2;
  e.a.assign(2 * 6, 1.0f);
  e.b.assign(3, 1.0f);
  EXPECT_FALSE(patch::apply_edit(e, buf.data(), buf.size()).is_ok());  // B is not [4, 2]
  e.shape = {24};
  EXPECT_FALSE(patch::apply_edit(e, buf.data(), buf.size()).is_ok());  // low_rank of a 1-D tensor
  e.kind = EditKind::kSparse;
  e.indices = {24};
  e.values.assign(4, 0);
  EXPECT_FALSE(patch::apply_edit(e, buf.data(), buf.size()).is_ok());  // element 24 of 24
}

#ifdef GB_GLASSBOX_BIN
// The CLI: a damaged patch is refused (exit 1) with the file and both hashes on stderr.
TEST(PatchCli, VerifyRefusesADamagedPatch) {
  const std::string dir = make_loopfix_patch();
  const json m = read_json(dir + "/manifest.json");
  const std::string file = m["edits"][0]["file"], want = m["edits"][0]["sha256"];
  std::string bytes = slurp(dir + "/" + file);
  bytes[bytes.size() - 1] ^= 0x80;
  spit(dir + "/" + file, bytes);
  const std::string cmd =
      std::string(GB_GLASSBOX_BIN) + " patch verify " + dir + " --base " + base35() + " 2>&1; echo rc=$?";
  std::FILE* f = popen(cmd.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  pclose(f);
  EXPECT_NE(out.find("rc=1"), std::string::npos) << out;
  EXPECT_NE(out.find(file), std::string::npos) << out;
  EXPECT_NE(out.find(want), std::string::npos) << out;
  EXPECT_NE(out.find(patch::sha256_hex(bytes.data(), bytes.size())), std::string::npos) << out;
}
#endif

}  // namespace
}  // namespace gb
