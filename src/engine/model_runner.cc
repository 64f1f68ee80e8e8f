#include "engine/model_runner.h"

#include <algorithm>
#include <cstring>

namespace gb {

bool all_finite(const float* x, int64_t n) {
  // A float is NaN or ±Inf exactly when its exponent bits are all ones. An OR over integers
  // vectorizes (a float sum would not, and would also overflow for large finite values).
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    bad |= static_cast<uint32_t>((u & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

std::string non_finite_message(const NonFiniteSite& site, const GlassSpec* spec) {
  if (!site.found) {
    return "non-finite logits (NaN or Inf); recomputing the sequence found no non-finite hidden state";
  }
  std::string where = is_layer_point(site.point)
                          ? "layer " + std::to_string(site.layer) + " " + std::string(hook_point_name(site.point))
                          : std::string(hook_point_name(site.point));
  std::string msg =
      "non-finite activations (NaN or Inf) first at " + where + ", token position " + std::to_string(site.position);
  if (spec != nullptr && is_layer_point(site.point)) {
    std::string ivs;
    for (size_t k = 0; k < spec->interventions.size(); ++k) {
      const Intervention& iv = spec->interventions[k];
      if (iv.point != site.point || site.layer < iv.layer_first || site.layer > iv.layer_last) continue;
      if (!ivs.empty()) ivs += ", ";
      ivs += "interventions[" + std::to_string(k) + "] (" + std::string(intervention_op_name(iv.op)) + ")";
    }
    if (!ivs.empty()) msg += ", where " + ivs + " apply";
  }
  return msg;
}

ModelRunner::ModelRunner(Model* model, std::unique_ptr<KvCache> cache, int32_t max_num_seqs, int32_t block_size,
                         const MonitorConfig& monitor)
    : model_(model),
      cache_(std::move(cache)),
      block_size_(block_size),
      logits_(static_cast<size_t>(max_num_seqs) * model->config().vocab),
      glass_step_(model->config()),
      hooks_(model->config().n_layers),
      monitor_config_(monitor) {
  monitor_step_.reset(model->config().n_layers);
  glass_step_.set_pool(&model->pool());
  sample_rows_.reserve(static_cast<size_t>(max_num_seqs));
  prompt_rows_.reserve(static_cast<size_t>(max_num_seqs));
  out_positions_.reserve(static_cast<size_t>(model->max_batch_tokens()));
}

void ModelRunner::set_monitor(const MonitorConfig& config) {
  monitor_config_ = config;
  monitor_counter_ = 0;
}

Status ModelRunner::run(const std::vector<ScheduledSeq>& scheduled) {
  batch_.clear();
  glass_step_.clear();
  sample_rows_.clear();
  prompt_rows_.clear();
  bool glass = false;
  for (const ScheduledSeq& s : scheduled) {
    const int32_t row0 = static_cast<int32_t>(batch_.n_tokens());
    out_positions_.clear();
    if (s.seq->glass != nullptr) {
      glass_step_.add_sequence(row0, s.n_tokens, s.start, s.seq->n_prompt, s.seq->glass.get());
      s.seq->glass->output_positions(s.start, s.n_tokens, &out_positions_);
      glass = true;
    }
    // Prompt logprobs: the rows of the chunk that score prompt tokens, merged with the captures'.
    const PromptLogprobRange pr = prompt_logprob_range(*s.seq, s.start, s.n_tokens);
    if (pr.size() > 0) {
      for (int32_t p = pr.begin; p < pr.end; ++p) out_positions_.push_back(p);
      std::sort(out_positions_.begin(), out_positions_.end());
      out_positions_.erase(std::unique(out_positions_.begin(), out_positions_.end()), out_positions_.end());
    }
    const std::span<const int32_t> ids(s.seq->tokens.data() + s.start, s.n_tokens);
    batch_.add_sequence(ids, s.start, s.seq->block_table, block_size_, /*all_logits=*/false, s.seq->state_slot);
    batch_.seqs.back().variant = s.seq->request.variant;
    // add_sequence asked for the last row's logits: kept when the sequence samples (a prefill chunk
    // short of the end has none), after the rows its captures and prompt logprobs need.
    batch_.output_rows.pop_back();
    const int32_t last_pos = s.start + s.n_tokens - 1;
    int32_t prompt_row = static_cast<int32_t>(batch_.output_rows.size());
    for (int32_t p : out_positions_) {
      if (p == pr.begin) prompt_row = static_cast<int32_t>(batch_.output_rows.size());
      if (p != last_pos || !s.samples) batch_.output_rows.push_back(row0 + (p - s.start));
    }
    prompt_rows_.push_back(prompt_row);
    if (s.samples) {
      batch_.output_rows.push_back(row0 + s.n_tokens - 1);
      sample_rows_.push_back(static_cast<int32_t>(batch_.output_rows.size()) - 1);
    }
  }
  const size_t need = static_cast<size_t>(batch_.n_out()) * static_cast<size_t>(model_->config().vocab);
  if (need > logits_.size()) logits_.resize(need);  // only output captures get here
  monitored_ = monitor_config_.enabled && monitor_counter_++ % std::max<int32_t>(1, monitor_config_.every_steps) == 0;
  if (monitored_) glass_step_.set_monitor(monitor_config_, &monitor_step_);
  // Without glass work the step is exactly a plain one: no hooks at all.
  const Hooks* hooks = nullptr;
  if (glass || monitored_) {
    glass_step_.finalize();
    hooks_.set_glass(&glass_step_);
    hooks = &hooks_;
  }
  GB_RETURN_IF_ERROR(model_->forward(batch_, *cache_, hooks, logits_.data()));
  if (hooks != nullptr) glass_step_.finish_forward();
  return Status::ok();
}

namespace {

// Records the first row, in forward order, that holds a NaN or Inf.
class FirstNonFinite : public Observer {
 public:
  void observe(const HookTensor& t) override {
    if (site.found) return;
    for (int64_t r = 0; r < t.n_rows; ++r) {
      if (!all_finite(t.data + r * t.width, t.width)) {
        site = {true, t.point, t.layer, t.batch->positions[t.rows[r]]};
        return;
      }
    }
  }
  NonFiniteSite site;
};

}  // namespace

Result<NonFiniteSite> ModelRunner::locate_non_finite(const Sequence& seq, int32_t n_tokens) {
  const ModelConfig& c = model_->config();
  FirstNonFinite check;
  Hooks hooks(c.n_layers);
  for (int p = 0; p < kNumHookPoints; ++p) hooks.watch(static_cast<HookPoint>(p), -1, &check);
  GlassStep glass(c);
  std::unique_ptr<GlassAccumulator> acc;  // a scratch one: the request's own observation stays as it was
  if (seq.request.glass != nullptr) acc = std::make_unique<GlassAccumulator>(seq.request.glass, c);
  std::vector<float> logits(static_cast<size_t>(c.vocab));
  Batch batch;
  const int32_t chunk = model_->max_batch_tokens();
  for (int32_t start = 0; start < n_tokens && !check.site.found; start += chunk) {
    const int32_t len = std::min(chunk, n_tokens - start);
    batch.clear();
    batch.add_sequence(std::span<const int32_t>(seq.tokens.data() + start, len), start, seq.block_table, block_size_,
                       /*all_logits=*/false, seq.state_slot);
    batch.seqs.back().variant = seq.request.variant;
    if (start + len < n_tokens) batch.output_rows.clear();
    glass.clear();
    if (acc != nullptr) glass.add_sequence(0, len, start, seq.n_prompt, acc.get());
    glass.finalize();
    hooks.set_glass(&glass);
    GB_RETURN_IF_ERROR(model_->forward(batch, *cache_, &hooks, logits.data()));
  }
  return check.site;
}

}  // namespace gb
