// Weight variants served beside one copy of the base weights (issue 12 part 2): each registered
// variant is a patch::Patch resolved against the model's bound matrices, stored as per-matrix
// deltas. A batch sequence names its variant (BatchSeq::variant, 0 = base); after each base
// matmul whose weight some variant edits, the layer loop calls apply_variant_deltas, which
// corrects only that variant's rows. Internal to gb_model (the engine uses Model::add_variant).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "ops/matmul.h"
#include "patch/patch.h"

namespace gb {

inline constexpr int kProjCount = static_cast<int>(patch::Proj::kOutput) + 1;

// One variant's edit of one matrix [rows, cols], in the form the forward pass applies.
struct MatrixDelta {
  int32_t variant = 0;  // >= 1
  patch::EditKind kind = patch::EditKind::kFull;
  int64_t rows = 0, cols = 0;
  // low_rank: w1 = A [r, cols] f32, w2 = scale·B [rows, r] f32 (scale folded in at registration).
  // columns:  w1 = ΔW [rows, k] f32 (edited − dequantized base, × scale), idx = the k columns.
  // rows:     w1 = the k replaced rows [k, cols] in the edit's dtype, idx = their row indices.
  // full:     w1 = the whole edited matrix in the edit's dtype.
  // sparse:   CSR by output row: row_ptr [rows + 1], col / val the changed elements' Δ (f32).
  ops::Weight w1, w2;
  std::vector<uint8_t> bytes1, bytes2;  // storage of w1 / w2
  std::vector<int64_t> idx;
  std::vector<int32_t> row_ptr, col;
  std::vector<float> val;
  int64_t rank = 0;

  int64_t memory_bytes() const;
};

// A registered weight variant (Model::add_variant).
struct VariantInfo {
  bool active = true;  // false once removed (its id is never reused)
  std::string name;
  std::string path;
  std::string source;  // "patch", "peft", "gguf-lora", "checkpoint"
  int64_t bytes = 0;   // memory its deltas take beside the base
  int32_t n_edits = 0;
  std::string version;                      // the patch's
  std::string sha256;                       // the patch's identity (patch::identity_sha256)
  std::vector<patch::GoldenPrompt> golden;  // the manifest's, checked before the variant serves
};

// A variant resolved against a model's matrices, not yet served (Model::prepare_variant): the
// deltas by (layer, projection) slot and the scratch sizes they need.
struct PreparedVariant {
  VariantInfo info;
  std::vector<std::pair<size_t, MatrixDelta>> deltas;  // slot = layer · kProjCount + proj
  int64_t max_in = 0, max_rank = 0, max_out = 0;
};

// The per-step view the layer loops read (Activations::variants; null for a plain batch).
struct VariantStep {
  const std::vector<std::vector<MatrixDelta>>* deltas = nullptr;  // [n_layers · kProjCount]
  const int32_t* rows = nullptr;                                  // batch rows grouped by variant (base rows excluded)
  const int32_t* offsets = nullptr;  // [n_variants + 2]: variant v's rows are rows[offsets[v], offsets[v+1])
  float* xg = nullptr;               // [max_tokens, max_in] gathered inputs
  float* tg = nullptr;               // [max_tokens, max_rank] low-rank intermediate
  float* yg = nullptr;               // [max_tokens, max_out] gathered outputs
};

// y [n, rows] = x [n, cols] · Wᵀ was just computed with the base weight of (layer, proj); corrects
// the rows of every variant that edits that matrix. Allocates nothing.
void apply_variant_deltas_slow(const VariantStep& vs, int32_t layer, patch::Proj proj, const float* x, float* y,
                               ThreadPool& pool);
inline void apply_variant_deltas(const VariantStep* vs, int32_t layer, patch::Proj proj, const float* x, float* y,
                                 ThreadPool& pool) {
  if (vs != nullptr) apply_variant_deltas_slow(*vs, layer, proj, x, y, pool);
}

}  // namespace gb
