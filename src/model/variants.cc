// Weight variants: registration (a Patch resolved against the model's bound matrices) and the
// per-matrix corrections of a variant's rows after each base matmul.
#include "model/variants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/model.h"

namespace gb {

int64_t MatrixDelta::memory_bytes() const {
  return static_cast<int64_t>(bytes1.size() + bytes2.size() + idx.size() * sizeof(int64_t) +
                              row_ptr.size() * sizeof(int32_t) + col.size() * sizeof(int32_t) +
                              val.size() * sizeof(float));
}

namespace {

// Rows R of x [*, cols] into xg [m, cols].
void gather_rows(const float* x, int64_t cols, const int32_t* R, int64_t m, float* xg) {
  for (int64_t i = 0; i < m; ++i) std::memcpy(xg + i * cols, x + int64_t{R[i]} * cols, cols * sizeof(float));
}

}  // namespace

void apply_variant_deltas_slow(const VariantStep& vs, int32_t layer, patch::Proj proj, const float* x, float* y,
                               ThreadPool& pool) {
  const std::vector<MatrixDelta>& list = (*vs.deltas)[static_cast<size_t>(layer) * kProjCount + int(proj)];
  for (const MatrixDelta& d : list) {
    const int32_t* R = vs.rows + vs.offsets[d.variant];
    const int64_t m = vs.offsets[d.variant + 1] - vs.offsets[d.variant];
    if (m == 0) continue;
    const int64_t rows = d.rows, cols = d.cols;
    switch (d.kind) {
      case patch::EditKind::kLowRank: {  // Punica's shrink (x·Aᵀ) and expand (t·(scale·B)ᵀ)
        gather_rows(x, cols, R, m, vs.xg);
        ops::matmul(pool, vs.xg, m, d.w1, vs.tg);
        ops::matmul(pool, vs.tg, m, d.w2, vs.yg);
        for (int64_t i = 0; i < m; ++i) {
          float* yr = y + int64_t{R[i]} * rows;
          const float* g = vs.yg + i * rows;
          for (int64_t o = 0; o < rows; ++o) yr[o] += g[o];
        }
        break;
      }
      case patch::EditKind::kColumns: {  // y += x[:, J] · ΔWᵀ
        const int64_t k = static_cast<int64_t>(d.idx.size());
        for (int64_t i = 0; i < m; ++i) {
          const float* xr = x + int64_t{R[i]} * cols;
          for (int64_t j = 0; j < k; ++j) vs.xg[i * k + j] = xr[d.idx[j]];
        }
        ops::matmul(pool, vs.xg, m, d.w1, vs.yg);
        for (int64_t i = 0; i < m; ++i) {
          float* yr = y + int64_t{R[i]} * rows;
          const float* g = vs.yg + i * rows;
          for (int64_t o = 0; o < rows; ++o) yr[o] += g[o];
        }
        break;
      }
      case patch::EditKind::kRows: {  // only the edited output rows recomputed with their new weights
        const int64_t k = static_cast<int64_t>(d.idx.size());
        gather_rows(x, cols, R, m, vs.xg);
        ops::matmul(pool, vs.xg, m, d.w1, vs.yg);
        for (int64_t i = 0; i < m; ++i) {
          float* yr = y + int64_t{R[i]} * rows;
          for (int64_t j = 0; j < k; ++j) yr[d.idx[j]] = vs.yg[i * k + j];
        }
        break;
      }
      case patch::EditKind::kFull: {  // the patched copy of the matrix
        gather_rows(x, cols, R, m, vs.xg);
        ops::matmul(pool, vs.xg, m, d.w1, vs.yg);
        for (int64_t i = 0; i < m; ++i) std::memcpy(y + int64_t{R[i]} * rows, vs.yg + i * rows, rows * sizeof(float));
        break;
      }
      case patch::EditKind::kSparse: {
        for (int64_t i = 0; i < m; ++i) {
          const float* xr = x + int64_t{R[i]} * cols;
          float* yr = y + int64_t{R[i]} * rows;
          for (int64_t r = 0; r < rows; ++r) {
            float acc = 0.0f;
            for (int32_t p = d.row_ptr[r]; p < d.row_ptr[r + 1]; ++p) acc += xr[d.col[p]] * d.val[p];
            if (d.row_ptr[r + 1] > d.row_ptr[r]) yr[r] += acc;
          }
        }
        break;
      }
    }
  }
}

namespace {

const ops::Weight* bound_weight(const ModelWeights& w, const patch::Target& t) {
  if (t.layer < 0 || static_cast<size_t>(t.layer) >= w.layers.size()) return nullptr;
  const LayerWeights& L = w.layers[t.layer];
  switch (t.proj) {
    case patch::Proj::kQ: return &L.wq;
    case patch::Proj::kK: return &L.wk;
    case patch::Proj::kV: return &L.wv;
    case patch::Proj::kO: return &L.wo;
    case patch::Proj::kGate: return &L.w_gate;
    case patch::Proj::kUp: return &L.w_up;
    case patch::Proj::kDown: return &L.w_down;
    case patch::Proj::kLinQkv: return &L.lin_qkv;
    case patch::Proj::kLinZ: return &L.lin_z;
    case patch::Proj::kLinB: return &L.lin_b;
    case patch::Proj::kLinA: return &L.lin_a;
    case patch::Proj::kLinOut: return &L.lin_out;
    case patch::Proj::kEmbed:
    case patch::Proj::kOutput: return nullptr;
  }
  return nullptr;
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(float));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

}  // namespace

Result<int32_t> Model::add_variant(const patch::Patch& p, const std::string& name, float scale) {
  GB_ASSIGN_OR_RETURN(std::shared_ptr<PreparedVariant> prepared, prepare_variant(p, name, scale));
  return commit_variant(std::move(*prepared));
}

Result<std::shared_ptr<PreparedVariant>> Model::prepare_variant(const patch::Patch& p, const std::string& name,
                                                                float scale) const {
  const std::string who = "variant '" + name + "' (" + p.path + "): ";
  auto bad = [&](const std::string& m) { return Status::error(who + m); };
  if (p.edits.empty()) return bad("the patch has no edits");
  if (!(scale > 0.0f) || !std::isfinite(scale)) return bad("scale must be a positive finite number");
  const bool hf = format_ == "hf";
  auto prepared = std::make_shared<PreparedVariant>();
  std::vector<std::pair<size_t, MatrixDelta>>& made = prepared->deltas;
  int64_t max_in = 0, max_rank = 0, max_out = 0, bytes = 0;
  for (const patch::Edit& e : p.edits) {
    const std::string what = "edit of " + e.tensor + ": ";
    auto target = patch::target_of(e.tensor);
    if (!target.is_ok()) return bad(what + target.message());
    if (target->proj == patch::Proj::kEmbed || target->proj == patch::Proj::kOutput) {
      return bad(what +
                 "embedding and lm_head edits are not served as variants yet; merge the patch with `glassbox patch "
                 "apply` and serve the result");
    }
    const ops::Weight* w = bound_weight(weights_, *target);
    if (w == nullptr || w->data == nullptr) return bad(what + "the served model has no such matrix");
    if (e.shape.size() != 2 || e.shape[0] != w->rows || e.shape[1] != w->cols) {
      std::string s;
      for (int64_t d : e.shape) s += (s.empty() ? "" : ", ") + std::to_string(d);
      return bad(what + "shape [" + s + "] differs from the served matrix's [" + std::to_string(w->rows) + ", " +
                 std::to_string(w->cols) + "]");
    }
    // Row / column orders that llama.cpp's converter changes and the loader keeps (see loading).
    const bool qk = target->proj == patch::Proj::kQ || target->proj == patch::Proj::kK;
    if (qk && config_.rope_style == ops::RopeStyle::kPairs && !e.gguf_rope_permuted) {
      return bad(what +
                 "this GGUF llama base keeps llama.cpp's permuted q/k rows; an edit in Hugging Face row order "
                 "cannot be applied to it (use the HF base, or a GGUF LoRA made for this base)");
    }
    if (e.gguf_rope_permuted && config_.rope_style != ops::RopeStyle::kPairs) {
      return bad(what + "the edit's q/k rows are in llama.cpp's permuted order; this base is not (use the GGUF base)");
    }
    const bool lin = target->proj >= patch::Proj::kLinQkv && target->proj <= patch::Proj::kLinOut;
    if (lin && config_.lin_v_tiled) {
      return bad(what +
                 "this GGUF base reorders the Gated DeltaNet value heads; edits of its projections are "
                 "served from the HF base only");
    }
    // An artifact pins the base tensor's bytes: checked where the served bytes are the checkpoint's.
    const auto pinned = p.base_tensors.find(e.tensor);
    if (pinned != p.base_tensors.end() && hf && owned_weights_.empty() && w->dtype == e.dtype) {
      const std::string have = patch::sha256_hex(w->data, static_cast<size_t>(row_bytes(w->dtype, w->cols) * w->rows));
      if (have != pinned->second) {
        return bad(what + "the served base tensor has SHA-256 " + have + ", the patch was made for " + pinned->second);
      }
    }
    if (e.kind != patch::EditKind::kLowRank && e.kind != patch::EditKind::kColumns &&
        e.kind != patch::EditKind::kSparse && scale != 1.0f) {
      return bad(what + "a scale other than 1 applies to low_rank, columns and sparse edits only, not " +
                 patch::edit_kind_name(e.kind));
    }
    if ((e.kind == patch::EditKind::kRows || e.kind == patch::EditKind::kFull) && !ops::matmul_supported(e.dtype)) {
      return bad(what + "values of dtype " + std::string(dtype_name(e.dtype)) + " cannot be multiplied");
    }
    MatrixDelta d;
    d.kind = e.kind;
    d.rows = w->rows;
    d.cols = w->cols;
    const int64_t rows = w->rows, cols = w->cols;
    switch (e.kind) {
      case patch::EditKind::kLowRank: {
        const int64_t r = e.rank;
        if (r <= 0 || static_cast<int64_t>(e.a.size()) != r * cols || static_cast<int64_t>(e.b.size()) != rows * r)
          return bad(what + "low-rank factors do not match the matrix");
        std::vector<float> b = e.b;
        for (float& v : b) v *= e.scale * scale;
        d.bytes1 = f32_bytes(e.a);
        d.bytes2 = f32_bytes(b);
        d.w1 = {d.bytes1.data(), DType::kF32, r, cols};
        d.w2 = {d.bytes2.data(), DType::kF32, rows, r};
        d.rank = r;
        max_rank = std::max(max_rank, r);
        max_in = std::max(max_in, cols);
        max_out = std::max(max_out, rows);
        break;
      }
      case patch::EditKind::kColumns: {  // ΔW = edited − dequantized base, over the k columns
        const int64_t k = static_cast<int64_t>(e.indices.size());
        const ops::Weight vals{e.values.data(), e.dtype, rows, k};
        std::vector<float> base(cols), edited(k), delta(rows * k);
        for (int64_t r = 0; r < rows; ++r) {
          ops::dequantize_row(*w, r, base.data());
          ops::dequantize_row(vals, r, edited.data());
          for (int64_t j = 0; j < k; ++j) delta[r * k + j] = (edited[j] - base[e.indices[j]]) * scale;
        }
        d.idx = e.indices;
        d.bytes1 = f32_bytes(delta);
        d.w1 = {d.bytes1.data(), DType::kF32, rows, k};
        max_in = std::max(max_in, k);
        max_out = std::max(max_out, rows);
        break;
      }
      case patch::EditKind::kRows: {
        const int64_t k = static_cast<int64_t>(e.indices.size());
        d.idx = e.indices;
        d.bytes1 = e.values;
        d.w1 = {d.bytes1.data(), e.dtype, k, cols};
        max_in = std::max(max_in, cols);
        max_out = std::max(max_out, k);
        break;
      }
      case patch::EditKind::kFull: {
        d.bytes1 = e.values;
        d.w1 = {d.bytes1.data(), e.dtype, rows, cols};
        max_in = std::max(max_in, cols);
        max_out = std::max(max_out, rows);
        break;
      }
      case patch::EditKind::kSparse: {  // CSR by output row of Δ = edited − dequantized base
        const int64_t k = static_cast<int64_t>(e.indices.size());
        const ops::Weight vals{e.values.data(), e.dtype, 1, k};
        std::vector<float> edited(k), base(cols);
        ops::dequantize_row(vals, 0, edited.data());
        d.row_ptr.assign(rows + 1, 0);
        int64_t cur = -1;
        for (int64_t i = 0; i < k; ++i) {
          const int64_t r = e.indices[i] / cols, c = e.indices[i] % cols;
          if (r != cur) {
            ops::dequantize_row(*w, r, base.data());
            cur = r;
          }
          ++d.row_ptr[r + 1];
          d.col.push_back(static_cast<int32_t>(c));
          d.val.push_back((edited[i] - base[c]) * scale);
        }
        for (int64_t r = 0; r < rows; ++r) d.row_ptr[r + 1] += d.row_ptr[r];
        break;
      }
    }
    const size_t slot = static_cast<size_t>(target->layer) * kProjCount + int(target->proj);
    for (const auto& [s, _] : made) {
      if (s == slot) return bad(what + "a second edit of the same matrix");
    }
    bytes += d.memory_bytes();
    made.emplace_back(slot, std::move(d));
  }
  prepared->info = VariantInfo{true,      name,
                               p.path,    patch::patch_source_name(p.source),
                               bytes,     static_cast<int32_t>(p.edits.size()),
                               p.version, patch::identity_sha256(p),
                               p.golden};
  prepared->max_in = max_in;
  prepared->max_rank = max_rank;
  prepared->max_out = max_out;
  return prepared;
}

int32_t Model::commit_variant(PreparedVariant&& v) {
  const int32_t id = static_cast<int32_t>(variants_.size()) + 1;
  // Deltas, then scratch sized for the largest matrix any variant edits.
  if (deltas_.empty()) deltas_.resize(static_cast<size_t>(config_.n_layers) * kProjCount);
  for (auto& [slot, d] : v.deltas) {
    d.variant = id;
    deltas_[slot].push_back(std::move(d));
  }
  const size_t t = static_cast<size_t>(acts_.max_tokens);
  var_max_in_ = std::max(var_max_in_, v.max_in);
  var_max_rank_ = std::max(var_max_rank_, v.max_rank);
  var_max_out_ = std::max(var_max_out_, v.max_out);
  var_xg_.resize(t * var_max_in_);
  var_tg_.resize(t * std::max<int64_t>(var_max_rank_, 1));
  var_yg_.resize(t * var_max_out_);
  var_rows_.resize(t);
  var_offsets_.assign(variants_.size() + 3, 0);
  var_cursor_.assign(variants_.size() + 3, 0);
  variants_.push_back(std::move(v.info));
  var_step_.deltas = &deltas_;
  var_step_.rows = var_rows_.data();
  var_step_.offsets = var_offsets_.data();
  var_step_.xg = var_xg_.data();
  var_step_.tg = var_tg_.data();
  var_step_.yg = var_yg_.data();
  return id;
}

Status Model::remove_variant(int32_t id) {
  if (!variant_active(id)) return Status::error("variant " + std::to_string(id) + " is not loaded");
  for (std::vector<MatrixDelta>& slot : deltas_) {
    std::erase_if(slot, [id](const MatrixDelta& d) { return d.variant == id; });
  }
  variants_[id - 1].active = false;
  variants_[id - 1].bytes = 0;
  return Status::ok();
}

const VariantStep* Model::prepare_variants(const Batch& b) {
  if (variants_.empty()) return nullptr;
  bool any = false;
  for (const BatchSeq& s : b.seqs) any = any || s.variant != 0;
  if (!any) return nullptr;
  const size_t nv = variants_.size() + 2;
  std::fill(var_offsets_.begin(), var_offsets_.begin() + nv, 0);
  for (int64_t t = 0; t < b.n_tokens(); ++t) {
    const int32_t v = b.seqs[b.seq_index[t]].variant;
    if (v != 0) ++var_offsets_[v + 1];
  }
  for (size_t v = 1; v < nv; ++v) var_offsets_[v] += var_offsets_[v - 1];
  std::copy(var_offsets_.begin(), var_offsets_.begin() + nv, var_cursor_.begin());
  for (int64_t t = 0; t < b.n_tokens(); ++t) {
    const int32_t v = b.seqs[b.seq_index[t]].variant;
    if (v != 0) var_rows_[var_cursor_[v]++] = static_cast<int32_t>(t);
  }
  return &var_step_;
}

}  // namespace gb
