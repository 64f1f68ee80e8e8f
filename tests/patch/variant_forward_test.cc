// Weight variants in the forward pass (Model::add_variant, BatchSeq::variant): base rows and
// variant rows in the SAME forward batch, the variant rows reproducing the patch fixtures'
// reference logits (qwen3-lora as PEFT and GGUF on the qwen3 fixture; qwen35-loopfix on the
// hybrid fixture, as a diffed artifact and as every other edit kind), the base rows the base
// fixture's reference, from HF and GGUF bases; plain batches bitwise unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "model/model.h"
#include "patch/patch.h"
#include "support/alloc_counter.h"
#include "support/test_support.h"

namespace gb {
namespace {

using nlohmann::json;

std::string ref_dir(const std::string& base) { return test::shared_path("testdata/reference/" + base); }
std::string fix_dir(const std::string& name) { return test::shared_path("testdata/patches/" + name); }

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// seq{i}.logits of a reference.safetensors, as vectors.
std::vector<std::vector<float>> reference_logits(const std::string& dir, const std::string& prefix = "") {
  auto st = read_safetensors(dir + "/reference.safetensors");
  EXPECT_TRUE(st.is_ok()) << st.message();
  std::vector<std::vector<float>> out(3);
  if (!st.is_ok()) return out;
  for (const auto& t : st->tensors) {
    for (int i = 0; i < 3; ++i) {
      if (t.name == prefix + "seq" + std::to_string(i) + ".logits") {
        const float* p = reinterpret_cast<const float*>(t.data);
        out[i].assign(p, p + t.numel());
      }
    }
  }
  return out;
}

// The loop-fix artifact, diffed once per process.
std::string loopfix_patch() {
  static std::string dir;
  if (dir.empty()) {
    dir = test::temp_dir() + "/loopfix";
    auto st = patch::diff_checkpoints(ref_dir("qwen35-hybrid") + "/hf", fix_dir("qwen35-loopfix") + "/edited-hf", dir,
                                      {"loopfix", "1", "test", "qwen35-hybrid"});
    EXPECT_TRUE(st.is_ok()) << st.message();
  }
  return dir;
}

struct MixedResult {
  double base_err = INFINITY, variant_err = INFINITY;
  std::vector<std::vector<float>> base_logits, variant_logits;  // per sequence, from the mixed batch
  double delta_err = INFINITY, base_vs_f32 = INFINITY;          // check_case only
};

// One forward over the three reference sequences twice each: on the base (variant 0) and on
// variant `id`, interleaved, all logits. Errors against the two references.
MixedResult run_mixed(Model& m, int32_t id, const std::vector<std::vector<float>>& base_ref,
                      const std::vector<std::vector<float>>& var_ref, const json& seqs) {
  MixedResult r;
  const ModelConfig& c = m.config();
  auto cache = KvCache::create(c, 32, 16, 8);
  EXPECT_TRUE(cache.is_ok());
  if (!cache.is_ok()) return r;
  std::vector<std::vector<int32_t>> tables(6);
  Batch batch;
  for (int i = 0; i < 6; ++i) {
    const auto ids = seqs[i / 2].get<std::vector<int32_t>>();
    for (int b = 0; b < 3; ++b) tables[i].push_back(i * 3 + b);
    const int32_t s = batch.add_sequence(ids, 0, tables[i], 16, true, i);
    batch.seqs[s].variant = (i % 2 == 1) ? id : 0;
  }
  std::vector<float> logits(batch.n_out() * c.vocab);
  Status st = m.forward(batch, **cache, nullptr, logits.data());
  EXPECT_TRUE(st.is_ok()) << st.message();
  if (!st.is_ok()) return r;
  r.base_err = r.variant_err = 0;
  int64_t row = 0;
  for (int i = 0; i < 6; ++i) {
    const int64_t len = static_cast<int64_t>(seqs[i / 2].size());
    std::vector<float> got(logits.begin() + row * c.vocab, logits.begin() + (row + len) * c.vocab);
    row += len;
    const auto& want = (i % 2 == 1) ? var_ref[i / 2] : base_ref[i / 2];
    EXPECT_EQ(want.size(), got.size());
    if (want.size() != got.size()) return MixedResult{};
    double e = 0;
    for (size_t j = 0; j < got.size(); ++j) e = std::max(e, double(std::abs(got[j] - want[j])));
    if (i % 2 == 1) {
      r.variant_err = std::max(r.variant_err, e);
      r.variant_logits.push_back(std::move(got));
    } else {
      r.base_err = std::max(r.base_err, e);
      r.base_logits.push_back(std::move(got));
    }
  }
  return r;
}

struct Case {
  std::string base_fixture, model_rel, patch_name, patch_path;
  std::string quant;  // "q8_0" / "q4_0": the base rows are checked against llama.cpp's quantized reference
};

MixedResult check_case(const Case& k, double base_tol, double var_tol) {
  auto m = load_model(ref_dir(k.base_fixture) + "/" + k.model_rel, LoadOptions{});
  EXPECT_TRUE(m.is_ok()) << m.message();
  if (!m.is_ok()) return {};
  auto p = patch::load_patch(k.patch_path);
  EXPECT_TRUE(p.is_ok()) << p.message();
  if (!p.is_ok()) return {};
  auto id = (*m)->add_variant(*p, k.patch_name);
  EXPECT_TRUE(id.is_ok()) << id.message();
  if (!id.is_ok()) return {};
  EXPECT_EQ(*id, 1);
  const json ref = read_json(fix_dir(k.patch_name) + "/reference.json");
  const auto base_f32 = reference_logits(ref_dir(k.base_fixture));
  const auto var_f32 = reference_logits(fix_dir(k.patch_name));
  MixedResult r =
      run_mixed(**m, *id, k.quant.empty() ? base_f32 : reference_logits(ref_dir(k.base_fixture), k.quant + "."),
                var_f32, ref["sequences"]);
  // The variant's delta as the batch computed it (variant rows − base rows) against the
  // reference's (variant reference − base reference): on a quantized base this removes most of
  // the base's own quantization error from the comparison.
  double delta_err = 0, base_vs_f32 = 0;
  for (size_t s = 0; s < r.variant_logits.size(); ++s) {
    for (size_t j = 0; j < r.variant_logits[s].size(); ++j) {
      const double got = double(r.variant_logits[s][j]) - r.base_logits[s][j];
      const double want = double(var_f32[s][j]) - base_f32[s][j];
      delta_err = std::max(delta_err, std::abs(got - want));
      base_vs_f32 = std::max(base_vs_f32, double(std::abs(r.base_logits[s][j] - base_f32[s][j])));
    }
  }
  r.delta_err = delta_err;
  r.base_vs_f32 = base_vs_f32;
  std::printf("%s %s + %s: base rows %.3g, variant rows %.3g (max |logit - reference|); delta %.3g, base vs f32 %.3g\n",
              k.base_fixture.c_str(), k.model_rel.c_str(), k.patch_path.c_str(), r.base_err, r.variant_err, delta_err,
              base_vs_f32);
  EXPECT_LE(r.base_err, base_tol);
  if (k.quant.empty()) {
    EXPECT_LE(r.variant_err, var_tol);
  } else {
    EXPECT_LE(r.delta_err, var_tol);
  }
  return r;
}

double f32_tol(const std::string& patch_name) {
  return read_json(fix_dir(patch_name) + "/reference.json")["tolerance_logits_f32"].get<double>();
}

// The base alone is this far from the variant's reference: the deltas are really applied.
constexpr double kBaseF32Tol = 1e-4;  // the base fixtures' f32 logits tolerance

TEST(VariantForward, PeftLoraOnHfBaseInOneBatchWithBaseRows) {
  check_case({"qwen3-qknorm", "hf", "qwen3-lora", fix_dir("qwen3-lora") + "/adapter", ""}, kBaseF32Tol,
             f32_tol("qwen3-lora"));
}

TEST(VariantForward, GgufLoraOnHfBase) {
  check_case({"qwen3-qknorm", "hf", "qwen3-lora", fix_dir("qwen3-lora") + "/adapter.gguf", ""}, kBaseF32Tol,
             f32_tol("qwen3-lora"));
}

TEST(VariantForward, LoraOnF32GgufBase) {
  check_case({"qwen3-qknorm", "gguf/model-f32.gguf", "qwen3-lora", fix_dir("qwen3-lora") + "/adapter.gguf", ""},
             kBaseF32Tol, f32_tol("qwen3-lora"));
  check_case({"qwen3-qknorm", "gguf/model-f32.gguf", "qwen3-lora", fix_dir("qwen3-lora") + "/adapter", ""}, kBaseF32Tol,
             f32_tol("qwen3-lora"));
}

// Quantized bases: the delta is added in f32 to the quantized base matmul's output; the error
// against the float reference is the base's own quantization error (tolerance 2e-2 for the base
// fixtures' quantized logits).
TEST(VariantForward, LoraOnQuantizedGgufBases) {
  for (const char* q : {"q8_0", "q4_0"}) {
    check_case({"qwen3-qknorm", std::string("gguf/model-") + q + ".gguf", "qwen3-lora",
                fix_dir("qwen3-lora") + "/adapter.gguf", q},
               2e-2, q[1] == '8' ? 0.1 : 1.0);
  }
}

TEST(VariantForward, LoopfixColumnsOnHybridHfAndGgufBases) {
  check_case({"qwen35-hybrid", "hf", "qwen35-loopfix", loopfix_patch(), ""}, kBaseF32Tol, f32_tol("qwen35-loopfix"));
  check_case({"qwen35-hybrid", "gguf/model-f32.gguf", "qwen35-loopfix", loopfix_patch(), ""}, kBaseF32Tol,
             f32_tol("qwen35-loopfix"));
  for (const char* q : {"q8_0", "q4_0"}) {
    check_case({"qwen35-hybrid", std::string("gguf/model-") + q + ".gguf", "qwen35-loopfix", loopfix_patch(), q}, 2e-2,
               q[1] == '8' ? 0.02 : 0.2);
  }
}

// The loop-fix edit re-expressed in every other kind (full, rows, sparse, low_rank-free): each
// reproduces the reference; full and rows recompute with the edited values through the same
// kernel, so those rows are bitwise what the edited checkpoint gives.
TEST(VariantForward, EveryEditKindReproducesTheLoopfix) {
  auto base = read_safetensors(ref_dir("qwen35-hybrid") + "/hf/model.safetensors");
  auto edited = read_safetensors(fix_dir("qwen35-loopfix") + "/edited-hf/model.safetensors");
  ASSERT_TRUE(base.is_ok() && edited.is_ok());
  auto find = [](const auto& f, const std::string& n) -> const TensorView* {
    for (const auto& t : f->tensors)
      if (t.name == n) return &t;
    return nullptr;
  };
  const json ref = read_json(fix_dir("qwen35-loopfix") + "/reference.json");
  auto edited_model = load_model(fix_dir("qwen35-loopfix") + "/edited-hf", LoadOptions{});
  ASSERT_TRUE(edited_model.is_ok());
  for (patch::EditKind kind : {patch::EditKind::kFull, patch::EditKind::kRows, patch::EditKind::kSparse}) {
    patch::Patch p;
    p.path = "synthetic";
    for (const std::string& name : ref["edited_tensors"].get<std::vector<std::string>>()) {
      const TensorView* b = find(base, name);
      const TensorView* e = find(edited, name);
      ASSERT_TRUE(b != nullptr && e != nullptr);
      patch::Edit ed;
      ed.tensor = name;
      ed.kind = kind;
      ed.dtype = e->dtype;
      ed.shape = e->shape;
      const int64_t rows = e->shape[0], cols = e->shape[1];
      const float* ev = reinterpret_cast<const float*>(e->data);
      const float* bv = reinterpret_cast<const float*>(b->data);
      ASSERT_EQ(e->dtype, DType::kF32);
      if (kind == patch::EditKind::kFull) {
        ed.values.assign(e->data, e->data + rows * cols * 4);
      } else if (kind == patch::EditKind::kRows) {  // every row changes (a column edit): all replaced
        for (int64_t r = 0; r < rows; ++r) ed.indices.push_back(r);
        ed.values.assign(e->data, e->data + rows * cols * 4);
      } else {
        for (int64_t i = 0; i < rows * cols; ++i) {
          if (std::memcmp(ev + i, bv + i, 4) != 0) {
            ed.indices.push_back(i);
            const auto* vb = reinterpret_cast<const uint8_t*>(ev + i);
            ed.values.insert(ed.values.end(), vb, vb + 4);
          }
        }
        EXPECT_EQ(ed.indices.size(), 2048u);
      }
      p.edits.push_back(std::move(ed));
    }
    auto m = load_model(ref_dir("qwen35-hybrid") + "/hf", LoadOptions{});
    ASSERT_TRUE(m.is_ok());
    auto id = (*m)->add_variant(p, patch::edit_kind_name(kind));
    ASSERT_TRUE(id.is_ok()) << id.message();
    MixedResult r = run_mixed(**m, *id, reference_logits(ref_dir("qwen35-hybrid")),
                              reference_logits(fix_dir("qwen35-loopfix")), ref["sequences"]);
    std::printf("loop-fix as %s: base rows %.3g, variant rows %.3g\n", patch::edit_kind_name(kind), r.base_err,
                r.variant_err);
    EXPECT_LE(r.base_err, kBaseF32Tol);
    EXPECT_LE(r.variant_err, f32_tol("qwen35-loopfix"));
    if (kind != patch::EditKind::kSparse) {  // bitwise = the edited checkpoint run as a model
      auto want = run_mixed(**edited_model, 0, reference_logits(fix_dir("qwen35-loopfix")),
                            reference_logits(fix_dir("qwen35-loopfix")), ref["sequences"]);
      ASSERT_EQ(want.base_logits.size(), r.variant_logits.size());
      for (size_t s = 0; s < r.variant_logits.size(); ++s) EXPECT_EQ(r.variant_logits[s], want.base_logits[s]);
    }
  }
}

// Base rows of a mixed batch, and a plain batch on a model with variants registered, are
// bitwise what the model without variants gives.
TEST(VariantForward, BaseRowsAndPlainBatchesAreBitwiseUnchanged) {
  auto plain = load_model(ref_dir("qwen3-qknorm") + "/hf", LoadOptions{});
  auto with = load_model(ref_dir("qwen3-qknorm") + "/hf", LoadOptions{});
  ASSERT_TRUE(plain.is_ok() && with.is_ok());
  auto p = patch::load_patch(fix_dir("qwen3-lora") + "/adapter");
  ASSERT_TRUE(p.is_ok());
  auto id = (*with)->add_variant(*p, "lora");
  ASSERT_TRUE(id.is_ok()) << id.message();
  const json ref = read_json(fix_dir("qwen3-lora") + "/reference.json");
  const auto base_ref = reference_logits(ref_dir("qwen3-qknorm"));
  const auto var_ref = reference_logits(fix_dir("qwen3-lora"));
  MixedResult a = run_mixed(**plain, 0, base_ref, base_ref, ref["sequences"]);  // all rows on the base
  MixedResult b = run_mixed(**with, 0, base_ref, base_ref, ref["sequences"]);   // plain batch, variants loaded
  MixedResult c = run_mixed(**with, *id, base_ref, var_ref, ref["sequences"]);  // mixed
  ASSERT_EQ(a.base_logits.size(), 3u);
  ASSERT_EQ(b.base_logits.size(), 3u);
  ASSERT_EQ(c.base_logits.size(), 3u);
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(a.base_logits[s], b.base_logits[s]);
    EXPECT_EQ(a.base_logits[s], b.variant_logits[s]);
    EXPECT_EQ(a.base_logits[s], c.base_logits[s]);
    EXPECT_NE(a.base_logits[s], c.variant_logits[s]);
  }
}

TEST(VariantForward, TwoVariantsInOneBatch) {
  auto m = load_model(ref_dir("qwen3-qknorm") + "/hf", LoadOptions{});
  ASSERT_TRUE(m.is_ok());
  auto peft = patch::load_patch(fix_dir("qwen3-lora") + "/adapter");
  auto gguf = patch::load_patch(fix_dir("qwen3-lora") + "/adapter.gguf");
  ASSERT_TRUE(peft.is_ok() && gguf.is_ok());
  auto id1 = (*m)->add_variant(*peft, "peft");
  auto id2 = (*m)->add_variant(*gguf, "gguf", 0.5f);  // half the delta: a third logit set
  ASSERT_TRUE(id1.is_ok() && id2.is_ok());
  EXPECT_EQ(*id2, 2);
  EXPECT_EQ((*m)->n_variants(), 2);
  EXPECT_GT((*m)->variants()[0].bytes, 0);
  const json ref = read_json(fix_dir("qwen3-lora") + "/reference.json");
  const auto base_ref = reference_logits(ref_dir("qwen3-qknorm"));
  const auto var_ref = reference_logits(fix_dir("qwen3-lora"));
  // Variants 1 and 2 interleaved in one batch: 1 still reproduces the reference; 2 lies between.
  const ModelConfig& c = (*m)->config();
  auto cache = KvCache::create(c, 32, 16, 8);
  ASSERT_TRUE(cache.is_ok());
  std::vector<std::vector<int32_t>> tables(6);
  Batch batch;
  for (int i = 0; i < 6; ++i) {
    const auto ids = ref["sequences"][i / 2].get<std::vector<int32_t>>();
    for (int b = 0; b < 3; ++b) tables[i].push_back(i * 3 + b);
    batch.add_sequence(ids, 0, tables[i], 16, true, i);
    batch.seqs[i].variant = 1 + i % 2;
  }
  std::vector<float> logits(batch.n_out() * c.vocab);
  ASSERT_TRUE((*m)->forward(batch, **cache, nullptr, logits.data()).is_ok());
  int64_t row = 0;
  for (int i = 0; i < 6; ++i) {
    const auto& vr = var_ref[i / 2];
    const auto& br = base_ref[i / 2];
    double e_var = 0, e_base = 0;
    for (size_t j = 0; j < vr.size(); ++j) {
      e_var = std::max(e_var, double(std::abs(logits[row * c.vocab + j] - vr[j])));
      e_base = std::max(e_base, double(std::abs(logits[row * c.vocab + j] - br[j])));
    }
    row += static_cast<int64_t>(vr.size()) / c.vocab;
    if (i % 2 == 0) {
      EXPECT_LE(e_var, f32_tol("qwen3-lora"));
    } else {
      EXPECT_GT(e_var, 10 * f32_tol("qwen3-lora"));
      EXPECT_GT(e_base, 10 * f32_tol("qwen3-lora"));
    }
  }
}

TEST(VariantForward, BadVariantsAndBatchesAreRefused) {
  auto m = load_model(ref_dir("qwen3-qknorm") + "/hf", LoadOptions{});
  ASSERT_TRUE(m.is_ok());
  {  // a batch naming an unregistered variant
    auto cache = KvCache::create((*m)->config(), 4, 16, 1);
    ASSERT_TRUE(cache.is_ok());
    const std::vector<int32_t> table = {0}, ids = {1, 2, 3};
    Batch batch;
    batch.add_sequence(ids, 0, table, 16, false);
    batch.seqs[0].variant = 1;
    std::vector<float> logits((*m)->config().vocab);
    Status st = (*m)->forward(batch, **cache, nullptr, logits.data());
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("variant 1"), std::string::npos) << st.message();
  }
  auto p = patch::load_patch(fix_dir("qwen3-lora") + "/adapter");
  ASSERT_TRUE(p.is_ok());
  auto expect_refused = [&](patch::Patch q, const std::string& needle, float scale = 1.0f) {
    auto id = (*m)->add_variant(q, "bad", scale);
    ASSERT_FALSE(id.is_ok()) << needle;
    EXPECT_NE(id.message().find(needle), std::string::npos) << id.message();
  };
  {
    patch::Patch q = *p;
    q.edits[0].shape = {q.edits[0].shape[0] + 1, q.edits[0].shape[1]};
    expect_refused(q, "differs from the served matrix");
  }
  {
    patch::Patch q = *p;
    q.edits[0].tensor = "model.embed_tokens.weight";
    expect_refused(q, "embedding and lm_head");
  }
  {
    patch::Patch q = *p;
    q.edits[0].tensor = "model.layers.9.mlp.down_proj.weight";
    expect_refused(q, "no such matrix");
  }
  {
    patch::Patch q = *p;
    q.edits.push_back(q.edits[0]);
    expect_refused(q, "second edit of the same matrix");
  }
  {
    patch::Patch q = *p;
    q.edits[0].gguf_rope_permuted = true;
    expect_refused(q, "permuted order");
  }
  expect_refused(*p, "scale", 0.0f);
  {
    patch::Patch q;
    expect_refused(q, "no edits");
  }
  {  // an artifact for another base: its pinned hash differs
    auto lf = patch::load_patch(loopfix_patch());
    ASSERT_TRUE(lf.is_ok());
    auto m35 = load_model(ref_dir("qwen35-hybrid") + "/hf", LoadOptions{});
    ASSERT_TRUE(m35.is_ok());
    patch::Patch q = *lf;
    q.base_tensors.begin()->second = std::string(64, '0');
    auto id = (*m35)->add_variant(q, "bad");
    ASSERT_FALSE(id.is_ok());
    EXPECT_NE(id.message().find(std::string(64, '0')), std::string::npos) << id.message();
  }
  EXPECT_EQ((*m)->n_variants(), 0);  // nothing half-registered
}

// A warm step with base and variant rows (low-rank and column deltas, 1 and 2 threads) performs no
// heap allocation: the scratch is sized when the variant is registered.
TEST(VariantForward, WarmMixedStepsDoNotAllocate) {
  for (int threads : {1, 2}) {
    for (int hybrid = 0; hybrid < 2; ++hybrid) {
      const std::string model =
          hybrid ? ref_dir("qwen35-hybrid") + "/gguf/model-q8_0.gguf" : ref_dir("qwen3-qknorm") + "/hf";
      SCOPED_TRACE(model + " threads " + std::to_string(threads));
      auto m = load_model(model, {.max_batch_tokens = 32, .n_threads = threads});
      ASSERT_TRUE(m.is_ok()) << m.message();
      auto p = patch::load_patch(hybrid ? loopfix_patch() : fix_dir("qwen3-lora") + "/adapter");
      ASSERT_TRUE(p.is_ok()) << p.message();
      auto id = (*m)->add_variant(*p, "v");
      ASSERT_TRUE(id.is_ok()) << id.message();
      auto cache = KvCache::create((*m)->config(), 8, 16, 2);
      ASSERT_TRUE(cache.is_ok());
      const std::vector<int32_t> t0 = {0, 1}, t1 = {2, 3};
      std::vector<int32_t> prompt(12, 5);
      std::vector<float> logits(32 * (*m)->config().vocab);
      Batch batch;
      batch.tokens.reserve(32), batch.positions.reserve(32), batch.seq_index.reserve(32), batch.slots.reserve(32);
      batch.output_rows.reserve(32), batch.seqs.reserve(4);
      auto step = [&](int pos, int n) {
        batch.clear();
        batch.add_sequence(std::span(prompt).first(n), pos, t0, 16, true, 0);
        batch.add_sequence(std::span(prompt).first(n), pos, t1, 16, true, 1);
        batch.seqs[1].variant = *id;
        return (*m)->forward(batch, **cache, nullptr, logits.data());
      };
      ASSERT_TRUE(step(0, 12).is_ok());  // warm-up: prefill, then decode
      ASSERT_TRUE(step(12, 1).is_ok());
      test::AllocCounter counter;
      Status a = step(13, 1);
      Status b = step(14, 1);
      EXPECT_EQ(counter.stop(), 0);
      EXPECT_TRUE(a.is_ok() && b.is_ok());
    }
  }
}

}  // namespace
}  // namespace gb
