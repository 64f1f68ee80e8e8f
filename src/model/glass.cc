// Glass-box specs, their resolution, the per-request accumulator and the per-step table.
#include "model/glass.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/steer.h"

namespace gb {

namespace {

constexpr std::string_view kScopeNames[] = {"all", "prompt", "generated", "first", "positions"};
constexpr std::string_view kOpNames[] = {"scale", "add", "set", "clamp", "ablate", "clip_massive"};

int64_t point_width(HookPoint p, const ModelConfig& c) {
  return p == HookPoint::kMlpAct ? c.n_ff : p == HookPoint::kLogits ? c.vocab : c.n_embd;
}
constexpr int kNumGlobalPoints = kNumHookPoints - kNumLayerPoints;  // embed, final_norm, logits
bool is_output_point(HookPoint p) { return p == HookPoint::kFinalNorm || p == HookPoint::kLogits; }

// Calls fn(begin, end) for the maximal row ranges of a sequence's rows [row_begin, row_begin + n)
// (positions first_pos..) that the selector picks.
template <class F>
void for_each_range(const TokenSelector& sel, int32_t row_begin, int32_t n, int32_t first_pos, int32_t n_prompt, F fn) {
  const int32_t end_pos = first_pos + n;
  auto rows = [&](int32_t p0, int32_t p1) {  // positions [p0, p1) clipped to this step's
    p0 = std::max(p0, first_pos);
    p1 = std::min(p1, end_pos);
    if (p0 < p1) fn(row_begin + (p0 - first_pos), row_begin + (p1 - first_pos));
  };
  switch (sel.scope) {
    case TokenScope::kAll: rows(first_pos, end_pos); return;
    case TokenScope::kPrompt: rows(0, n_prompt); return;
    case TokenScope::kGenerated: rows(n_prompt, end_pos); return;
    case TokenScope::kFirst: rows(0, 1); return;
    case TokenScope::kPositions: {
      auto it = std::lower_bound(sel.positions.begin(), sel.positions.end(), first_pos);
      while (it != sel.positions.end() && *it < end_pos) {
        const int32_t p0 = *it;
        int32_t p1 = p0 + 1;
        for (++it; it != sel.positions.end() && *it == p1 && p1 < end_pos; ++it) ++p1;
        rows(p0, p1);
      }
      return;
    }
  }
}

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}
uint64_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

Status resolve_selector(TokenSelector& sel, const std::string& where) {
  if (sel.scope != TokenScope::kPositions) {
    if (!sel.positions.empty()) return Status::error(where + ".positions: only allowed with scope 'positions'");
    return Status::ok();
  }
  if (sel.positions.empty()) return Status::error(where + ".positions: scope 'positions' needs at least one position");
  if (static_cast<int32_t>(sel.positions.size()) > kMaxSelectedPositions) {
    return Status::error(where + ".positions: more than " + std::to_string(kMaxSelectedPositions) + " positions");
  }
  for (int32_t p : sel.positions) {
    if (p < 0) return Status::error(where + ".positions: " + std::to_string(p) + " is negative");
  }
  std::sort(sel.positions.begin(), sel.positions.end());
  sel.positions.erase(std::unique(sel.positions.begin(), sel.positions.end()), sel.positions.end());
  return Status::ok();
}

Status check_layer_point(HookPoint p, const std::string& where) {
  if (!is_layer_point(p)) {
    return Status::error(where + ": '" + std::string(hook_point_name(p)) +
                         "' is not a per-layer point (resid_pre, attn_out, resid_mid, mlp_act, mlp_out, resid_post)");
  }
  return Status::ok();
}

Status check_layer(int32_t l, const ModelConfig& c, const std::string& where) {
  if (l < 0 || l >= c.n_layers) {
    return Status::error(where + ": layer " + std::to_string(l) + " is outside the model's " + std::to_string(c.n_layers) +
                         " layers (0.." + std::to_string(c.n_layers - 1) + ")");
  }
  return Status::ok();
}

}  // namespace

std::string_view token_scope_name(TokenScope s) {
  const auto i = static_cast<size_t>(s);
  return i < std::size(kScopeNames) ? kScopeNames[i] : "?";
}
std::optional<TokenScope> parse_token_scope(std::string_view name) {
  for (size_t i = 0; i < std::size(kScopeNames); ++i) {
    if (kScopeNames[i] == name) return static_cast<TokenScope>(i);
  }
  return std::nullopt;
}
std::string_view intervention_op_name(InterventionOp op) {
  const auto i = static_cast<size_t>(op);
  return i < std::size(kOpNames) ? kOpNames[i] : "?";
}
std::optional<InterventionOp> parse_intervention_op(std::string_view name) {
  for (size_t i = 0; i < std::size(kOpNames); ++i) {
    if (kOpNames[i] == name) return static_cast<InterventionOp>(i);
  }
  return std::nullopt;
}

GlassSpec::Shape glass_shape(const ModelConfig& c) { return {c.n_layers, c.n_embd, c.n_ff}; }

Result<std::shared_ptr<const GlassSpec>> resolve_glass_spec(GlassSpec spec, const ModelConfig& c) {
  if (!(spec.massive.min_abs >= 0) || !(spec.massive.min_ratio >= 0)) {
    return Status::error("massive: min_abs and min_ratio must be non-negative numbers");
  }
  for (size_t k = 0; k < spec.interventions.size(); ++k) {
    Intervention& iv = spec.interventions[k];
    const std::string where = "interventions[" + std::to_string(k) + "]";
    GB_RETURN_IF_ERROR(check_layer_point(iv.point, where + ".point"));
    if (iv.layer_first == -1 && iv.layer_last == -1) {
      iv.layer_first = 0;
      iv.layer_last = c.n_layers - 1;
    }
    GB_RETURN_IF_ERROR(check_layer(iv.layer_first, c, where + ".layers"));
    GB_RETURN_IF_ERROR(check_layer(iv.layer_last, c, where + ".layers"));
    if (iv.layer_last < iv.layer_first) return Status::error(where + ".layers: the range is empty (last < first)");
    const int64_t width = point_width(iv.point, c);
    const std::string pname(hook_point_name(iv.point));
    for (size_t j = 0; j < iv.dims.size(); ++j) {
      if (iv.dims[j] < 0 || iv.dims[j] >= width) {
        return Status::error(where + ".dims[" + std::to_string(j) + "]: " + std::to_string(iv.dims[j]) + " is outside " +
                             pname + "'s " + std::to_string(width) + " dims");
      }
    }
    std::sort(iv.dims.begin(), iv.dims.end());
    iv.dims.erase(std::unique(iv.dims.begin(), iv.dims.end()), iv.dims.end());
    if (!iv.vector.empty() && static_cast<int64_t>(iv.vector.size()) != width) {
      return Status::error(where + ".vector: " + std::to_string(iv.vector.size()) + " values, " + pname + " has " +
                           std::to_string(width) + " dims");
    }
    for (float v : iv.vector) {
      if (!std::isfinite(v)) return Status::error(where + ".vector: values must be finite");
    }
    const bool is_clamp = iv.op == InterventionOp::kClamp;
    if (std::isnan(iv.strength) || (!is_clamp && !std::isfinite(iv.strength))) {
      return Status::error(where + ".strength: must be a finite number");
    }
    switch (iv.op) {
      case InterventionOp::kScale:
      case InterventionOp::kSet:
        if (!iv.vector.empty()) return Status::error(where + ".vector: not used by " + std::string(intervention_op_name(iv.op)));
        break;
      case InterventionOp::kAdd:
        if (!iv.vector.empty() && !iv.dims.empty()) return Status::error(where + ": add takes dims or a vector, not both");
        break;
      case InterventionOp::kClamp:
        if (iv.strength < 0) return Status::error(where + ".strength: a clamp bound must be >= 0");
        if (!iv.vector.empty()) return Status::error(where + ".vector: not used by clamp");
        break;
      case InterventionOp::kAblate: {
        if (iv.vector.empty()) return Status::error(where + ".vector: ablate needs a direction");
        if (!iv.dims.empty()) return Status::error(where + ".dims: not used by ablate");
        double n2 = 0;
        for (float v : iv.vector) n2 += static_cast<double>(v) * v;
        if (!(n2 > 0)) return Status::error(where + ".vector: the ablation direction is zero");
        const double inv = 1.0 / std::sqrt(n2);
        for (float& v : iv.vector) v = static_cast<float>(v * inv);
        break;
      }
      case InterventionOp::kClipMassive:
        if (!(iv.threshold > 0) || !std::isfinite(iv.threshold)) {
          return Status::error(where + ".threshold: clip_massive needs a positive threshold (× median |x|)");
        }
        if (!iv.dims.empty()) return Status::error(where + ".dims: not used by clip_massive");
        break;
    }
    GB_RETURN_IF_ERROR(resolve_selector(iv.tokens, where + ".tokens"));
  }

  ObserveSpec& ob = spec.observe;
  if (ob.enabled) {
    if (ob.points.empty()) ob.points.push_back(HookPoint::kResidPost);
    for (size_t j = 0; j < ob.points.size(); ++j) {
      GB_RETURN_IF_ERROR(check_layer_point(ob.points[j], "observe.points[" + std::to_string(j) + "]"));
    }
    std::sort(ob.points.begin(), ob.points.end());
    ob.points.erase(std::unique(ob.points.begin(), ob.points.end()), ob.points.end());
    if (ob.layers.empty()) {
      for (int32_t l = 0; l < c.n_layers; ++l) ob.layers.push_back(l);
    }
    for (size_t j = 0; j < ob.layers.size(); ++j) {
      GB_RETURN_IF_ERROR(check_layer(ob.layers[j], c, "observe.layers[" + std::to_string(j) + "]"));
    }
    std::sort(ob.layers.begin(), ob.layers.end());
    ob.layers.erase(std::unique(ob.layers.begin(), ob.layers.end()), ob.layers.end());
    if (ob.top_k < 0 || ob.top_k > kMaxTopK) {
      return Status::error("observe.top_k: " + std::to_string(ob.top_k) + " is outside 0.." + std::to_string(kMaxTopK));
    }
    GB_RETURN_IF_ERROR(resolve_selector(ob.tokens, "observe.tokens"));
    int64_t floats = 0;
    for (size_t j = 0; j < ob.captures.size(); ++j) {
      CaptureRequest& cr = ob.captures[j];
      const std::string where = "observe.captures[" + std::to_string(j) + "]";
      if (is_layer_point(cr.point)) {
        GB_RETURN_IF_ERROR(check_layer(cr.layer, c, where));
      } else {
        cr.layer = -1;
      }
      if (cr.position < 0) return Status::error(where + ".position: must be >= 0");
      floats += is_output_point(cr.point) ? c.vocab : point_width(cr.point, c);
    }
    if (floats > ob.max_capture_floats) {
      return Status::error("observe.captures: " + std::to_string(floats) + " values exceed the cap of " +
                           std::to_string(ob.max_capture_floats));
    }
  } else if (!ob.captures.empty()) {
    return Status::error("observe.captures: observation is not enabled");
  }
  spec.resolved_for = glass_shape(c);
  return std::shared_ptr<const GlassSpec>(std::make_shared<GlassSpec>(std::move(spec)));
}

uint64_t glass_kv_salt(const GlassSpec& spec, int32_t n_prompt) {
  if (spec.interventions.empty()) return 0;
  uint64_t h = 0x676c617373626f78ULL;  // "glassbox"
  bool prompt_relative = false;
  for (const Intervention& iv : spec.interventions) {
    h = mix(h, static_cast<uint64_t>(iv.op));
    h = mix(h, static_cast<uint64_t>(iv.point));
    h = mix(h, static_cast<uint64_t>(static_cast<uint32_t>(iv.layer_first)));
    h = mix(h, static_cast<uint64_t>(static_cast<uint32_t>(iv.layer_last)));
    h = mix(h, iv.dims.size());
    for (int32_t d : iv.dims) h = mix(h, static_cast<uint32_t>(d));
    h = mix(h, float_bits(iv.strength));
    h = mix(h, float_bits(iv.threshold));
    h = mix(h, iv.vector.size());
    for (float v : iv.vector) h = mix(h, float_bits(v));
    h = mix(h, static_cast<uint64_t>(iv.tokens.scope));
    for (int32_t p : iv.tokens.positions) h = mix(h, static_cast<uint32_t>(p));
    prompt_relative |= iv.tokens.scope == TokenScope::kPrompt || iv.tokens.scope == TokenScope::kGenerated;
  }
  if (prompt_relative) h = mix(h, static_cast<uint32_t>(n_prompt));
  return h == 0 ? 1 : h;
}

// ---- GlassAccumulator ----

GlassAccumulator::GlassAccumulator(std::shared_ptr<const GlassSpec> spec, const ModelConfig& c)
    : spec_(std::move(spec)), n_layers_(c.n_layers) {
  const size_t n_slots = static_cast<size_t>(n_layers_) * kNumLayerPoints;
  observed_.assign(n_slots, 0);
  acc_.resize(n_slots);
  const ObserveSpec& ob = spec_->observe;
  if (ob.enabled) {
    for (int32_t l : ob.layers) {
      for (HookPoint p : ob.points) observed_[static_cast<size_t>(l) * kNumLayerPoints + static_cast<int>(p)] = 1;
    }
    for (const CaptureRequest& cr : ob.captures) {
      Capture cap;
      cap.point = cr.point;
      cap.layer = cr.layer;
      cap.position = cr.position;
      cap.data.assign(static_cast<size_t>(point_width(cr.point, c)), 0.0f);
      captures_.push_back(std::move(cap));
    }
  }
  events_.reserve(kMaxEventsPerRequest);
  applied_rows_.assign(spec_->interventions.size(), 0);
}

AppliedIntervention applied_intervention(const Intervention& iv) {
  AppliedIntervention a;
  a.op = iv.op;
  a.point = iv.point;
  a.layer_first = iv.layer_first;
  a.layer_last = iv.layer_last;
  a.dims = iv.dims;
  a.strength = iv.strength;
  a.threshold = iv.threshold;
  a.vector_size = static_cast<int64_t>(iv.vector.size());
  double n2 = 0;
  for (float v : iv.vector) n2 += static_cast<double>(v) * v;
  a.vector_norm = static_cast<float>(std::sqrt(n2));
  a.tokens = iv.tokens;
  a.label = iv.label;
  return a;
}

GlassReport GlassAccumulator::report() const {
  GlassReport r;
  for (int32_t l = 0; l < n_layers_; ++l) {
    for (int p = 0; p < kNumLayerPoints; ++p) {
      const size_t i = static_cast<size_t>(l) * kNumLayerPoints + p;
      if (!observed_[i]) continue;
      const Acc& a = acc_[i];
      PointStats s;
      s.point = static_cast<HookPoint>(p);
      s.layer = l;
      s.n_tokens = a.n_tokens;
      s.max_abs = a.max_abs;
      s.max_dim = a.max_dim;
      s.max_position = a.max_position;
      s.median_abs = a.n_tokens > 0 ? static_cast<float>(a.sum_median / static_cast<double>(a.n_tokens)) : 0.0f;
      s.max_ratio = a.max_ratio;
      s.max_ratio_position = a.max_ratio_position;
      if (a.n_values > 0) {
        s.rms = static_cast<float>(std::sqrt(a.sum_sq / static_cast<double>(a.n_values)));
        s.mean = static_cast<float>(a.sum / static_cast<double>(a.n_values));
      }
      s.top.assign(a.top, a.top + a.n_top);
      r.stats.push_back(std::move(s));
    }
  }
  r.events = events_;
  r.events_dropped = events_dropped_;
  r.captures = captures_;
  for (size_t k = 0; k < spec_->interventions.size(); ++k) {
    AppliedIntervention a = applied_intervention(spec_->interventions[k]);
    a.rows = applied_rows_[k];
    r.applied.push_back(std::move(a));
  }
  return r;
}

void GlassAccumulator::output_positions(int32_t first_pos, int32_t n, std::vector<int32_t>* positions) const {
  const size_t begin = positions->size();
  for (const Capture& cap : captures_) {
    if (is_output_point(cap.point) && cap.position >= first_pos && cap.position < first_pos + n) {
      positions->push_back(cap.position);
    }
  }
  std::sort(positions->begin() + static_cast<std::ptrdiff_t>(begin), positions->end());
  positions->erase(std::unique(positions->begin() + static_cast<std::ptrdiff_t>(begin), positions->end()),
                   positions->end());
}

// ---- MonitorStep ----

void MonitorStep::reset(int32_t n_layers) {
  max_abs.assign(static_cast<size_t>(n_layers), 0.0f);
  max_ratio.assign(static_cast<size_t>(n_layers), 0.0f);
  if (events.capacity() < static_cast<size_t>(kMaxEvents)) events.reserve(kMaxEvents);
  events.clear();
  events_dropped = 0;
  rows = 0;
}

// ---- GlassStep ----

GlassStep::GlassStep(const ModelConfig& c)
    : n_layers_(c.n_layers),
      masks_(static_cast<size_t>(c.n_layers), 0),
      scratch_(static_cast<size_t>(std::max(c.n_embd, c.n_ff))) {
  const size_t n_slots = static_cast<size_t>(n_layers_) * kNumLayerPoints;
  op_offsets_.assign(n_slots + 1, 0);
  obs_offsets_.assign(n_slots + 1, 0);
  cap_offsets_.assign(n_slots + kNumGlobalPoints + 1, 0);
  ops_stage_.reserve(256), ops_.reserve(256);
  obs_stage_.reserve(256), obs_.reserve(256);
  caps_stage_.reserve(64), caps_.reserve(64);
}

void GlassStep::clear() {
  std::fill(masks_.begin(), masks_.end(), 0u);
  global_mask_ = 0;
  ops_stage_.clear(), ops_.clear();
  obs_stage_.clear(), obs_.clear();
  caps_stage_.clear(), caps_.clear();
  std::fill(op_offsets_.begin(), op_offsets_.end(), 0);
  std::fill(obs_offsets_.begin(), obs_offsets_.end(), 0);
  std::fill(cap_offsets_.begin(), cap_offsets_.end(), 0);
  rows_needed_ = 0;
  monitor_ = nullptr;
  monitor_out_ = nullptr;
}

bool GlassStep::empty() const {
  return ops_stage_.empty() && obs_stage_.empty() && caps_stage_.empty() && monitor_ == nullptr;
}

void GlassStep::add_sequence(int32_t row_begin, int32_t n_rows, int32_t first_pos, int32_t n_prompt,
                             GlassAccumulator* acc) {
  const GlassSpec& spec = acc->spec();
  rows_needed_ = std::max(rows_needed_, row_begin + n_rows);
  for (size_t k = 0; k < spec.interventions.size(); ++k) {
    const Intervention& iv = spec.interventions[k];
    for_each_range(iv.tokens, row_begin, n_rows, first_pos, n_prompt, [&](int32_t b, int32_t e) {
      for (int32_t l = iv.layer_first; l <= iv.layer_last; ++l) {
        ops_stage_.push_back({slot(iv.point, l), b, e, &iv, &acc->applied_rows_[k]});
        masks_[l] |= hook_bit(iv.point);
      }
    });
  }
  const ObserveSpec& ob = spec.observe;
  if (!ob.enabled) return;
  for_each_range(ob.tokens, row_begin, n_rows, first_pos, n_prompt, [&](int32_t b, int32_t e) {
    for (int32_t l : ob.layers) {
      for (HookPoint p : ob.points) {
        obs_stage_.push_back({slot(p, l), b, e, acc});
        masks_[l] |= hook_bit(p);
      }
    }
  });
  for (Capture& cap : acc->captures_) {
    if (cap.position >= first_pos && cap.position < first_pos + n_rows) {
      caps_stage_.push_back({slot(cap.point, cap.layer), row_begin + (cap.position - first_pos), &cap});
      if (is_layer_point(cap.point)) masks_[cap.layer] |= hook_bit(cap.point);
      else global_mask_ |= hook_bit(cap.point);
    }
  }
}

void GlassStep::set_monitor(const MonitorConfig& config, MonitorStep* out) {
  monitor_ = &config;
  monitor_out_ = out;
  out->reset(n_layers_);
  const uint32_t bits = config.points & ((1u << kNumLayerPoints) - 1);
  for (auto& m : masks_) m |= bits;
}

template <class E>
void GlassStep::sort_by_slot(std::vector<E>& staged, std::vector<E>& sorted, std::vector<int32_t>& offsets,
                             int32_t n_slots) {
  // Counting sort: stable, so entries of one slot keep the order they were added in (a request's
  // interventions apply in spec order; requests in batch order).
  std::fill(offsets.begin(), offsets.end(), 0);
  for (const E& e : staged) ++offsets[e.slot + 1];
  for (int32_t s = 0; s < n_slots; ++s) offsets[s + 1] += offsets[s];
  sorted.resize(staged.size());
  // offsets[s] is the write cursor of slot s while placing; restore afterwards by shifting.
  for (const E& e : staged) sorted[offsets[e.slot]++] = e;
  for (int32_t s = n_slots; s > 0; --s) offsets[s] = offsets[s - 1];
  offsets[0] = 0;
}

void GlassStep::finalize() {
  const int32_t n_slots = n_layers_ * kNumLayerPoints;
  sort_by_slot(ops_stage_, ops_, op_offsets_, n_slots);
  sort_by_slot(obs_stage_, obs_, obs_offsets_, n_slots);
  sort_by_slot(caps_stage_, caps_, cap_offsets_, n_slots + kNumGlobalPoints);
}

void GlassStep::apply_global(HookPoint p, const float* data, int64_t n_rows, int64_t width,
                             const int32_t* row_ids) const {
  const int32_t s = slot(p, -1);
  for (int32_t i = cap_offsets_[s]; i < cap_offsets_[s + 1]; ++i) {
    const CapEntry& e = caps_[i];
    // Per-token points hold every batch row; final_norm / logits only the output rows.
    for (int64_t r = 0; r < n_rows; ++r) {
      if (row_ids[r] != e.row) continue;
      std::memcpy(e.dst->data.data(), data + r * width, static_cast<size_t>(width) * sizeof(float));
      e.dst->filled = true;
      break;
    }
  }
}

void GlassStep::apply(HookPoint p, int32_t layer, float* data, int64_t n_rows, int64_t width, const Batch& batch) const {
  const int32_t s = slot(p, layer);
  float* scratch = scratch_.data();

  // 1. Interventions, in table order.
  for (int32_t i = op_offsets_[s]; i < op_offsets_[s + 1]; ++i) {
    const OpEntry& e = ops_[i];
    const Intervention& iv = *e.op;
    float* x = data + int64_t{e.row_begin} * width;
    const int64_t rows = e.row_end - e.row_begin;
    const int32_t* dims = iv.dims.empty() ? nullptr : iv.dims.data();
    const int64_t nd = static_cast<int64_t>(iv.dims.size());
    switch (iv.op) {
      case InterventionOp::kScale: ops::scale_dims(x, rows, width, dims, nd, iv.strength); break;
      case InterventionOp::kAdd:
        if (!iv.vector.empty()) ops::add_vector(x, rows, width, iv.vector.data(), iv.strength);
        else ops::add_dims(x, rows, width, dims, nd, iv.strength);
        break;
      case InterventionOp::kSet: ops::set_dims(x, rows, width, dims, nd, iv.strength); break;
      case InterventionOp::kClamp: ops::clamp_dims(x, rows, width, dims, nd, iv.strength); break;
      case InterventionOp::kAblate: ops::ablate_direction(x, rows, width, iv.vector.data(), iv.strength); break;
      case InterventionOp::kClipMassive:
        ops::clip_massive(x, rows, width, iv.threshold, iv.strength, iv.vector.empty() ? nullptr : iv.vector.data(),
                          scratch);
        break;
    }
    *e.rows += rows;
  }

  // 2. Per-request observation.
  for (int32_t i = obs_offsets_[s]; i < obs_offsets_[s + 1]; ++i) {
    const ObsEntry& e = obs_[i];
    GlassAccumulator& acc = *e.acc;
    const GlassSpec& spec = acc.spec();
    GlassAccumulator::Acc& a = acc.acc_[static_cast<size_t>(s)];
    for (int32_t r = e.row_begin; r < e.row_end; ++r) {
      const int32_t pos = batch.positions[r];
      if (pos <= a.last_position) continue;  // recomputed after a preemption: counted already
      a.last_position = pos;
      const float* x = data + int64_t{r} * width;
      const ops::RowStats st = ops::row_stats(x, width, scratch);
      ++a.n_tokens;
      if (st.max_abs > a.max_abs || a.max_position < 0) {
        a.max_abs = st.max_abs;
        a.max_dim = st.max_dim;
        a.max_position = pos;
      }
      a.sum_median += st.median_abs;
      const float ratio = st.median_abs > 0 ? st.max_abs / st.median_abs : 0.0f;
      if (ratio > a.max_ratio || a.max_ratio_position < 0) {
        a.max_ratio = ratio;
        a.max_ratio_position = pos;
      }
      a.sum += st.sum;
      a.sum_sq += st.sum_sq;
      a.n_values += width;
      if (spec.observe.top_k > 0) {
        int32_t dims[kMaxTopK];
        float vals[kMaxTopK];
        const int32_t n = ops::row_top_k(x, width, spec.observe.top_k, dims, vals);
        // Merge into the running list: one entry per dim holding its largest |x|.
        for (int32_t j = 0; j < n; ++j) {
          int32_t at = -1;
          for (int32_t q = 0; q < a.n_top; ++q) {
            if (a.top[q].dim == dims[j]) at = q;
          }
          if (at >= 0) {
            if (vals[j] <= a.top[at].abs) continue;
            for (int32_t q = at; q + 1 < a.n_top; ++q) a.top[q] = a.top[q + 1];  // remove, reinsert below
            --a.n_top;
          } else if (a.n_top == spec.observe.top_k && vals[j] <= a.top[a.n_top - 1].abs) {
            continue;
          }
          int32_t q = std::min(a.n_top, spec.observe.top_k - 1);
          if (a.n_top < spec.observe.top_k) ++a.n_top;
          while (q > 0 && a.top[q - 1].abs < vals[j]) {
            a.top[q] = a.top[q - 1];
            --q;
          }
          a.top[q] = {dims[j], vals[j], pos};
        }
      }
      if (spec.observe.detect_massive) {
        const bool abs_test = st.max_abs > spec.massive.min_abs;
        const bool ratio_test = st.max_abs > spec.massive.min_ratio * st.median_abs;
        if (abs_test && ratio_test) {
          if (acc.events_.size() < static_cast<size_t>(kMaxEventsPerRequest)) {
            acc.events_.push_back({p, layer, pos, st.max_dim, x[st.max_dim], st.median_abs,
                                   st.median_abs > 0 ? st.max_abs / st.median_abs
                                                     : std::numeric_limits<float>::infinity(),
                                   abs_test, ratio_test});
          } else {
            ++acc.events_dropped_;
          }
        }
      }
    }
  }

  // 3. Raw captures.
  for (int32_t i = cap_offsets_[s]; i < cap_offsets_[s + 1]; ++i) {
    const CapEntry& e = caps_[i];
    std::memcpy(e.dst->data.data(), data + int64_t{e.row} * width, static_cast<size_t>(width) * sizeof(float));
    e.dst->filled = true;
  }

  // 4. The engine-wide monitor over every row.
  if (monitor_ != nullptr && (monitor_->points & hook_bit(p))) {
    MonitorStep& out = *monitor_out_;
    const MassiveRule& rule = monitor_->rule;
    for (int64_t r = 0; r < n_rows; ++r) {
      const float* x = data + r * width;
      const ops::RowStats st = ops::row_max_median(x, width, scratch);
      out.max_abs[layer] = std::max(out.max_abs[layer], st.max_abs);
      if (st.median_abs > 0) out.max_ratio[layer] = std::max(out.max_ratio[layer], st.max_abs / st.median_abs);
      const bool abs_test = st.max_abs > rule.min_abs;
      const bool ratio_test = st.max_abs > rule.min_ratio * st.median_abs;
      if (abs_test && ratio_test) {
        if (out.events.size() < static_cast<size_t>(MonitorStep::kMaxEvents)) {
          MonitorEvent ev;
          ev.event = {p, layer, batch.positions[r], st.max_dim, x[st.max_dim], st.median_abs,
                      st.median_abs > 0 ? st.max_abs / st.median_abs : std::numeric_limits<float>::infinity(),
                      abs_test, ratio_test};
          ev.seq_index = batch.seq_index[r];
          out.events.push_back(ev);
        } else {
          ++out.events_dropped;
        }
      }
    }
    out.rows += n_rows;
  }
}

}  // namespace gb
