// The massive-activation scan (Sun et al. 2024): prompts run with the glass box observing every
// layer at the chosen points (the server's `observe`: the same accumulator, detector and rule);
// per (layer, point) the largest |x| with its dim and token, the mean per-token median |x|, the
// largest max/median ratio and the top dims; then the massive-emergence layer — the first layer
// where a row passes the rule — with its dims and token positions. check_ablation: perplexity of
// the prompts with that layer's massive values untouched, replaced by their mean, and zeroed,
// through the clip_massive intervention a request can send.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "analysis/run.h"
#include "glass/report.h"
#include "glass/spec.h"

namespace gb::analysis {

struct ScanParams {
  std::vector<HookPoint> points = {HookPoint::kResidPost};
  int32_t top_k = 3;  // 1 .. kMaxTopK
  MassiveRule rule;
  // Also the layer × token grid of the first prompt: each resid_post row's max|x| / median|x|
  // (the same request captures those rows: n_layers × its tokens × n_embd floats).
  bool heat_map = false;
  // Also per full-attention layer the attention mass on the first token (observe.attention_sinks,
  // 1 token): the mean over heads and the largest head, to line up with the emergence layer.
  bool sinks = false;
};

// Parses a comma list of per-layer points ("resid_post,mlp_out"); the error names a bad one.
Result<std::vector<HookPoint>> parse_points(const std::string& list);

// The glass spec: every layer at the chosen points, top-k dims, detection under the rule.
Result<std::shared_ptr<const GlassSpec>> scan_spec(const ScanParams& p, const ModelConfig& c);

// One (layer, point) over every prompt.
struct ScanRow {
  HookPoint point = HookPoint::kResidPost;
  int32_t layer = 0;
  float max_abs = 0;
  int32_t max_dim = 0, max_prompt = 0, max_position = -1;
  double median_sum = 0;  // Σ tokens · mean median (to average over prompts by tokens)
  int64_t tokens = 0;
  float max_ratio = 0;
  std::map<int32_t, float> top;  // dim → largest |x| over prompts
  int64_t events = 0;
};

// The reports folded over prompts.
struct ScanResult {
  std::map<std::pair<int32_t, int>, ScanRow> rows;  // (layer, point)
  struct Event {
    int32_t prompt;
    MassiveEvent e;
  };
  std::vector<Event> events;
  int64_t dropped = 0;
  int32_t emergence = -1;                       // the first layer with an event; -1: none
  std::set<int32_t> dims;                       // its events' dims
  std::set<std::pair<int32_t, int32_t>> where;  // its events' (prompt, position)
  std::vector<std::vector<double>> heat;        // heat_map: [layer][position] of prompt 0; else empty
  // sinks: layer → (per head Σ tokens · mean mass, Σ tokens) over the prompts.
  std::map<int32_t, std::pair<std::vector<double>, int64_t>> sinks;
};
ScanResult fold_scan(const std::vector<std::shared_ptr<const GlassReport>>& reports);

// The text of the token at (prompt, position), "" when there is no tokenizer.
using TokenText = std::function<std::string(int32_t prompt, int32_t position)>;

// The JSON and Markdown table of a scan, and the one-line verdict on the emergence layer; with
// sinks, "attention_sinks": [{layer, mean, max_head, max_head_mean, tokens}] and its table.
struct ScanReport {
  nlohmann::json json;
  std::string md, verdict;
};
ScanReport scan_report(const ScanParams& p, const std::vector<std::string>& prompts, const ScanResult& r,
                       const TokenText& text);

// Each row's max|x| / median|x| (the glass box's median: the mean of the two middle values for an
// even width; 0 when the median is 0) of every resid_post capture in report, [layer][position].
Result<std::vector<std::vector<double>>> ratio_grid(const GlassReport& report, int32_t n_layers);

// Runs the prompts under scan_spec and folds them.
Result<ScanResult> run_scan(const Runner& run, const ScanParams& p, const ModelConfig& c,
                            const std::vector<std::vector<int32_t>>& prompts);

// (a) untouched, (b) the emergence layer's massive resid_post values replaced by their per-dim
// mean over the events, (c) zeroed: {"layer", "means", "perplexity": {untouched, mean, zeroed},
// "mean_vs_untouched", "zeroed_vs_untouched"}.
Result<nlohmann::json> check_ablation(const Runner& run, const ScanParams& p, const ModelConfig& c,
                                      const std::vector<std::vector<int32_t>>& prompts, const ScanResult& r);

}  // namespace gb::analysis
