// The per-step glass-box table: building it from sequences, applying it at a hook point.
#include "glass/step.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "ops/steer.h"

namespace gb {

namespace {

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

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

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
    : n_layers_(c.n_layers), n_embd_(c.n_embd), masks_(static_cast<size_t>(c.n_layers), 0) {
  const size_t n_slots = static_cast<size_t>(n_layers_) * kNumLayerPoints;
  op_offsets_.assign(n_slots + 1, 0);
  obs_offsets_.assign(n_slots + 1, 0);
  cap_offsets_.assign(n_slots + kNumGlobalPoints + 1, 0);
  set_pool(nullptr);
  skip_offsets_.assign(static_cast<size_t>(n_layers_) + 1, 0);
  sink_offsets_.assign(static_cast<size_t>(n_layers_) + 1, 0);
  sinks_stage_.reserve(64), sinks_.reserve(64);
  ops_stage_.reserve(256), ops_.reserve(256);
  skips_stage_.reserve(64), skips_.reserve(64);
  obs_stage_.reserve(256), obs_.reserve(256);
  caps_stage_.reserve(64), caps_.reserve(64);
  timed_.reserve(256);
  stamps_.assign(static_cast<size_t>(n_layers_) + 1, -1);
}

void GlassStep::clear() {
  std::fill(masks_.begin(), masks_.end(), 0u);
  global_mask_ = 0;
  ops_stage_.clear(), ops_.clear();
  obs_stage_.clear(), obs_.clear();
  caps_stage_.clear(), caps_.clear();
  skips_stage_.clear(), skips_.clear();
  timed_.clear();
  std::fill(stamps_.begin(), stamps_.end(), -1);
  sinks_stage_.clear(), sinks_.clear();
  std::fill(sink_offsets_.begin(), sink_offsets_.end(), 0);
  std::fill(op_offsets_.begin(), op_offsets_.end(), 0);
  std::fill(skip_offsets_.begin(), skip_offsets_.end(), 0);
  std::fill(obs_offsets_.begin(), obs_offsets_.end(), 0);
  std::fill(cap_offsets_.begin(), cap_offsets_.end(), 0);
  rows_needed_ = 0;
  monitor_ = nullptr;
  monitor_out_ = nullptr;
}

bool GlassStep::empty() const {
  return ops_stage_.empty() && obs_stage_.empty() && caps_stage_.empty() && skips_stage_.empty() && timed_.empty() &&
         sinks_stage_.empty() && monitor_ == nullptr;
}

void GlassStep::add_sequence(int32_t row_begin, int32_t n_rows, int32_t first_pos, int32_t n_prompt,
                             GlassAccumulator* acc) {
  acc->ensure_storage();
  const GlassSpec& spec = acc->spec();
  rows_needed_ = std::max(rows_needed_, row_begin + n_rows);
  for (size_t k = 0; k < spec.interventions.size(); ++k) {
    const Intervention& iv = spec.interventions[k];
    for_each_range(iv.tokens, row_begin, n_rows, first_pos, n_prompt, [&](int32_t b, int32_t e) {
      for (int32_t l = iv.layer_first; l <= iv.layer_last; ++l) {
        if (iv.op == InterventionOp::kSkip) {
          skips_stage_.push_back({l, b, e, &acc->applied_rows_[k]});
          masks_[l] |= hook_bit(HookPoint::kResidPre) | hook_bit(HookPoint::kResidPost);
        } else {
          ops_stage_.push_back({slot(iv.point, l), b, e, &iv, &acc->applied_rows_[k]});
          masks_[l] |= hook_bit(iv.point);
        }
      }
    });
  }
  const ObserveSpec& ob = spec.observe;
  if (!ob.enabled) return;
  const int32_t seq_end = row_begin + n_rows;
  bool observed = false;
  for_each_range(ob.tokens, row_begin, n_rows, first_pos, n_prompt, [&](int32_t b, int32_t e) {
    observed = true;
    for (int32_t l : ob.layers) {
      for (HookPoint p : ob.points) {
        obs_stage_.push_back({slot(p, l), b, e, row_begin, seq_end, acc});
        masks_[l] |= hook_bit(p);
      }
    }
    if (ob.sink_tokens > 0) {
      for (size_t k = 0; k < ob.sink_layers.size(); ++k)
        sinks_stage_.push_back({ob.sink_layers[k], b, e, static_cast<int32_t>(k), acc});
    }
  });
  // No observed row, but the rows' layer median is the one the sequence's later decode rows
  // compare with (e.g. tokens "generated": the prompt's median).
  if (!observed && n_rows > 1 && ob.detect_massive && spec.massive.median == MassiveMedian::kLayer) {
    for (int32_t l : ob.layers) {
      for (HookPoint p : ob.points) {
        obs_stage_.push_back({slot(p, l), row_begin, row_begin, row_begin, seq_end, acc});
        masks_[l] |= hook_bit(p);
      }
    }
  }
  if (ob.layer_time) {
    timed_.push_back(acc);
    global_mask_ |= hook_bit(HookPoint::kEmbed);
    for (auto& m : masks_) m |= hook_bit(HookPoint::kResidPost);
  }
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
  sort_by_slot(skips_stage_, skips_, skip_offsets_, n_layers_);
  sort_by_slot(sinks_stage_, sinks_, sink_offsets_, n_layers_);
  if (!sinks_.empty()) {
    if (sink_n_.size() < static_cast<size_t>(rows_needed_)) sink_n_.resize(static_cast<size_t>(rows_needed_));
    std::fill(sink_n_.begin(), sink_n_.begin() + rows_needed_, uint8_t{0});
    for (const SinkEntry& e : sinks_) {
      const auto n = static_cast<uint8_t>(e.acc->spec().observe.sink_tokens);
      std::fill(sink_n_.begin() + e.row_begin, sink_n_.begin() + e.row_end, n);
    }
  }
  const size_t saved = skips_.empty() ? 0 : static_cast<size_t>(rows_needed_) * static_cast<size_t>(n_embd_);
  if (saved_.size() < saved) saved_.resize(saved);
}

void GlassStep::finish_forward() {
  if (timed_.empty()) return;
  const int64_t end = now_ns();
  for (int64_t t : stamps_) {
    if (t < 0) return;  // the forward did not reach every layer (it failed): nothing is counted
  }
  for (GlassAccumulator* acc : timed_) {
    for (int32_t l = 0; l < n_layers_; ++l) acc->layer_ns_[static_cast<size_t>(l)] += stamps_[l + 1] - stamps_[l];
    acc->layer_ns_.back() += end - stamps_.back();
    ++acc->timed_steps_;
  }
}

const uint8_t* GlassStep::sink_rows(int32_t layer) const {
  return sink_offsets_[layer] < sink_offsets_[layer + 1] ? sink_n_.data() : nullptr;
}

void GlassStep::apply_sinks(int32_t layer, const float* mass, int64_t n_rows, int64_t n_heads,
                            const Batch& batch) const {
  for (int32_t i = sink_offsets_[layer]; i < sink_offsets_[layer + 1]; ++i) {
    const SinkEntry& e = sinks_[i];
    GlassAccumulator& acc = *e.acc;
    GlassAccumulator::SinkLayer& sl = acc.sink_layers_[static_cast<size_t>(e.index)];
    GlassAccumulator::SinkHead* heads = acc.sink_heads_.data() + static_cast<int64_t>(e.index) * n_heads;
    for (int32_t r = e.row_begin; r < e.row_end && r < n_rows; ++r) {
      const int32_t pos = batch.positions[r];
      if (pos <= sl.last_position) continue;  // recomputed after a preemption: counted already
      sl.last_position = pos;
      ++sl.n_tokens;
      const float* m = mass + int64_t{r} * n_heads;
      for (int64_t h = 0; h < n_heads; ++h) {
        GlassAccumulator::SinkHead& a = heads[h];
        a.sum += m[h];
        if (m[h] > a.max || a.max_position < 0) {
          a.max = m[h];
          a.max_position = pos;
        }
      }
    }
  }
}

void GlassStep::apply_global(HookPoint p, const float* data, int64_t n_rows, int64_t width,
                             const int32_t* row_ids) const {
  if (p == HookPoint::kEmbed && !timed_.empty()) stamps_[0] = now_ns();
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

float GlassStep::sequence_median(const ObsEntry& e, int32_t s, const float* data, int64_t width) const {
  const GlassSpec& spec = e.acc->spec();
  if (!spec.observe.detect_massive || spec.massive.median != MassiveMedian::kLayer) return -1.0f;
  GlassAccumulator::Acc& a = e.acc->acc_[static_cast<size_t>(s)];
  if (e.seq_end - e.seq_begin > 1)
    a.layer_median = ops::median_abs(data + int64_t{e.seq_begin} * width, int64_t{e.seq_end - e.seq_begin} * width);
  return a.layer_median;
}

void GlassStep::observe_rows(const ObsEntry& e, int32_t s, HookPoint p, int32_t layer, const float* data, int64_t width,
                             const Batch& batch, float layer_median) const {
  GlassAccumulator& acc = *e.acc;
  const GlassSpec& spec = acc.spec();
  GlassAccumulator::Acc& a = acc.acc_[static_cast<size_t>(s)];
  for (int32_t r = e.row_begin; r < e.row_end; ++r) {
    const int32_t pos = batch.positions[r];
    if (pos <= a.last_position) continue;  // recomputed after a preemption: counted already
    a.last_position = pos;
    const float* x = data + int64_t{r} * width;
    const ops::RowStats st = ops::row_stats(x, width);
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
      const bool by_layer = layer_median >= 0;
      const float median = by_layer ? layer_median : st.median_abs;
      const MassiveTest t = is_massive(spec.massive, st.max_abs, median);
      if (t.massive()) {
        if (acc.events_.size() < static_cast<size_t>(kMaxEventsPerRequest)) {
          acc.events_.push_back(massive_event(p, layer, pos, x, st.max_dim, st.max_abs, median,
                                              by_layer ? MassiveMedian::kLayer : MassiveMedian::kToken, t));
        } else {
          ++acc.events_dropped_;
        }
      }
    }
  }
}

void GlassStep::set_pool(ThreadPool* pool) {
  pool_ = pool;
  shares_.resize(pool == nullptr ? 1 : static_cast<size_t>(pool->size()));
  for (MonitorShare& sh : shares_) {
    sh.events.reserve(MonitorStep::kMaxEvents);
  }
}

void GlassStep::monitor_range(HookPoint p, int32_t layer, const float* data, int64_t r0, int64_t r1, int64_t n_rows,
                              int64_t width, const Batch& batch, MonitorShare& share) const {
  const bool by_layer = monitor_->rule.median == MassiveMedian::kLayer;
  share.events.clear();
  share.dropped = 0;
  share.max_abs = 0;
  share.max_ratio = 0;
  // The current row's sequence: rows [run_begin, run_end). Its layer median (over all those rows
  // when it has several; else -1, each row's own) is computed when a row first needs it: under the
  // default rule (both tests) only a row above min_abs does, so a prefill chunk's rows rarely
  // pay for a select over all of them.
  int64_t run_begin = r0, run_end = r0;
  float layer_median = -1.0f;
  bool median_known = true;
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = data + r * width;
    if (by_layer && r >= run_end) {
      run_begin = r;
      run_end = r + 1;
      while (run_end < n_rows && batch.seq_index[run_end] == batch.seq_index[r]) ++run_end;
      layer_median = -1.0f;
      median_known = run_end - r == 1;
    }
    const ops::RowStats st = ops::row_max_median(x, width);
    share.max_abs = std::max(share.max_abs, st.max_abs);
    if (st.median_abs > 0) share.max_ratio = std::max(share.max_ratio, st.max_abs / st.median_abs);
    if (!massive_needs_median(monitor_->rule, st.max_abs)) continue;  // no median makes it fire
    if (!median_known) {
      layer_median = ops::median_abs(data + run_begin * width, (run_end - run_begin) * width);
      median_known = true;
    }
    const float median = layer_median >= 0 ? layer_median : st.median_abs;
    const MassiveTest t = is_massive(monitor_->rule, st.max_abs, median);
    if (t.massive()) {
      if (share.events.size() < static_cast<size_t>(MonitorStep::kMaxEvents)) {
        MonitorEvent ev;
        ev.event = massive_event(p, layer, batch.positions[r], x, st.max_dim, st.max_abs, median,
                                 layer_median >= 0 ? MassiveMedian::kLayer : MassiveMedian::kToken, t);
        ev.seq_index = batch.seq_index[r];
        share.events.push_back(ev);
      } else {
        ++share.dropped;
      }
    }
  }
}

void GlassStep::monitor_rows(HookPoint p, int32_t layer, const float* data, int64_t n_rows, int64_t width,
                             const Batch& batch) const {
  // A share per task from 8 rows on (a row costs a select over its width, µs; a parallel region
  // costs about as much); a sequence's rows stay in one share, for its layer median.
  const int n_tasks = pool_ != nullptr && n_rows >= 8 ? pool_->size() : 1;
  const bool by_layer = monitor_->rule.median == MassiveMedian::kLayer;
  auto share_begin = [&](int t) {
    int64_t b = split_range(n_rows, t, n_tasks).begin;
    if (by_layer)
      while (b > 0 && b < n_rows && batch.seq_index[b] == batch.seq_index[b - 1]) ++b;
    return b;
  };
  auto task = [&](int t) {
    monitor_range(p, layer, data, share_begin(t), t + 1 == n_tasks ? n_rows : share_begin(t + 1), n_rows, width, batch,
                  shares_[static_cast<size_t>(t)]);
  };
  if (n_tasks == 1) task(0);
  else pool_->run(task);

  // Merged in row order: the same maxima, events and drop count as one pass over the rows.
  MonitorStep& out = *monitor_out_;
  for (int t = 0; t < n_tasks; ++t) {
    const MonitorShare& sh = shares_[static_cast<size_t>(t)];
    out.max_abs[layer] = std::max(out.max_abs[layer], sh.max_abs);
    out.max_ratio[layer] = std::max(out.max_ratio[layer], sh.max_ratio);
    for (const MonitorEvent& ev : sh.events) {
      if (out.events.size() < static_cast<size_t>(MonitorStep::kMaxEvents)) out.events.push_back(ev);
      else ++out.events_dropped;
    }
    out.events_dropped += sh.dropped;
  }
  out.rows += n_rows;
}

void GlassStep::apply(HookPoint p, int32_t layer, float* data, int64_t n_rows, int64_t width,
                      const Batch& batch) const {
  const int32_t s = slot(p, layer);
  const bool skips = skip_offsets_[layer] < skip_offsets_[layer + 1];

  // 0. Skips: the layer's output row is its input row, before resid_post's interventions.
  if (skips && p == HookPoint::kResidPost) {
    for (int32_t i = skip_offsets_[layer]; i < skip_offsets_[layer + 1]; ++i) {
      const SkipEntry& e = skips_[i];
      const int64_t off = int64_t{e.row_begin} * width;
      std::memcpy(data + off, saved_.data() + off,
                  static_cast<size_t>(int64_t{e.row_end - e.row_begin} * width) * sizeof(float));
      *e.rows += e.row_end - e.row_begin;
    }
  }

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
        ops::clip_massive(x, rows, width, iv.threshold, iv.strength, iv.vector.empty() ? nullptr : iv.vector.data());
        break;
      case InterventionOp::kSkip: break;  // skips_, never in ops_
    }
    *e.rows += rows;
  }

  // 1b. Skips: keep the rows as they enter the layer (after resid_pre's interventions).
  if (skips && p == HookPoint::kResidPre) {
    for (int32_t i = skip_offsets_[layer]; i < skip_offsets_[layer + 1]; ++i) {
      const SkipEntry& e = skips_[i];
      const int64_t off = int64_t{e.row_begin} * width;
      std::memcpy(saved_.data() + off, data + off,
                  static_cast<size_t>(int64_t{e.row_end - e.row_begin} * width) * sizeof(float));
    }
  }

  // 2. Per-request observation. A sequence's entries at a slot are adjacent (staged together,
  // stably sorted): its layer median is computed once, at its first.
  const GlassAccumulator* median_of = nullptr;
  float layer_median = -1.0f;
  for (int32_t i = obs_offsets_[s]; i < obs_offsets_[s + 1]; ++i) {
    if (obs_[i].acc != median_of) {
      median_of = obs_[i].acc;
      layer_median = sequence_median(obs_[i], s, data, width);
    }
    observe_rows(obs_[i], s, p, layer, data, width, batch, layer_median);
  }

  // 3. Raw captures.
  for (int32_t i = cap_offsets_[s]; i < cap_offsets_[s + 1]; ++i) {
    const CapEntry& e = caps_[i];
    std::memcpy(e.dst->data.data(), data + int64_t{e.row} * width, static_cast<size_t>(width) * sizeof(float));
    e.dst->filled = true;
  }

  // 4. The engine-wide monitor over every row.
  if (monitor_ != nullptr && (monitor_->points & hook_bit(p))) monitor_rows(p, layer, data, n_rows, width, batch);

  // 5. layer_time: this layer's forward work (and the glass box's at its points) ends here.
  if (p == HookPoint::kResidPost && !timed_.empty()) stamps_[static_cast<size_t>(layer) + 1] = now_ns();
}

}  // namespace gb
