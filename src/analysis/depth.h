// What each layer contributes (ShortGPT, Gromov et al. 2024, the curse-of-depth update ratios),
// from the hidden states of engine requests (captures), averaged over every token of the prompts:
//   Block Influence BI_l = 1 − mean_t cos(resid_pre_l, resid_post_l)
//   update ratios        mean_t ‖attn_out_l‖ / ‖resid_pre_l‖ and mean_t ‖mlp_out_l‖ / ‖resid_mid_l‖
//   angular distance     d(l, n) = mean_t arccos(cos(resid_pre_l, resid_post_{l+n−1})) / π, n = 1..L−l
// The smallest d(l, n) for each n names the block of n layers that changes the stream least. The
// same requests time the forward pass per layer (observe.layer_time): each layer's share of it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/run.h"

namespace gb::analysis {

// The captures depth needs for a prompt of n_tokens: resid_pre, attn_out, resid_mid, mlp_out and
// resid_post of every layer at every token; and the layer times.
Result<std::shared_ptr<const GlassSpec>> depth_spec(const ModelConfig& c, int32_t n_tokens);

// Sums over tokens, prompt by prompt (a prompt's captures can be dropped once added).
class DepthSums {
 public:
  explicit DepthSums(int32_t n_layers);
  // Adds every token of one prompt's report (a depth_spec request).
  Status add(const GlassReport& report, const ModelConfig& c);
  int64_t n_tokens() const { return n_; }
  int32_t n_layers() const { return static_cast<int32_t>(bi_.size()); }
  // The means (valid once a token was added).
  double block_influence(int32_t l) const { return 1.0 - bi_[l] / static_cast<double>(n_); }
  double attn_update_ratio(int32_t l) const { return attn_[l] / static_cast<double>(n_); }
  double mlp_update_ratio(int32_t l) const { return mlp_[l] / static_cast<double>(n_); }
  // d(l, n), n = 1 .. n_layers − l.
  double angular_distance(int32_t l, int32_t n) const { return dist_[l][n - 1] / static_cast<double>(n_); }
  // [l][n − 1] = d(l, n).
  std::vector<std::vector<double>> distances() const;
  // For a block length n: the first layer of the block with the least angular distance.
  int32_t best_block(int32_t n) const;
  // The forward passes' time per layer and in the head, summed over the prompts.
  const LayerTime& time() const { return time_; }

 private:
  int64_t n_ = 0;
  std::vector<double> bi_, attn_, mlp_;    // Σ_t cos, Σ_t ratios
  std::vector<std::vector<double>> dist_;  // Σ_t arccos(...)/π
  LayerTime time_;
};

// Runs every prompt (one at a time: each holds all its hidden states) and sums them.
Result<DepthSums> run_depth(const Runner& run, const ModelConfig& c, const std::vector<std::vector<int32_t>>& prompts);

// The perplexity of the prompts (prompt logprobs, every token after the first) with nothing, each
// single layer, and the least-change block of n = 2..max_block layers (by d's angular distances,
// Gromov's pruning rule) skipped through the glass box's `skip` op: the JSON ({n_scored,
// perplexity, layers: [{layer, angular_distance, perplexity}], blocks: [{n, first_layer,
// angular_distance, perplexity}]}) and a Markdown table. progress(k, n): before run k of n, and
// (n, n) at the end.
struct SkipTable {
  nlohmann::json json;
  std::string md;
};
Result<SkipTable> skip_perplexities(const Runner& run, const ModelConfig& c,
                                    const std::vector<std::vector<int32_t>>& prompts, const DepthSums& d,
                                    int32_t max_block, const std::function<void(size_t, size_t)>& progress = nullptr);
// The skip intervention over layers [first, first + n) (the op the runs above send).
Intervention skip_layers(int32_t first, int32_t n);

// {"n_tokens", "layers": [{layer, block_influence, attn_update_ratio, mlp_update_ratio,
// angular_distance: [n = 1..], time_share}], "best_blocks": [{n, first_layer, angular_distance}],
// "step_time": layer_time_json}
nlohmann::json depth_json(const DepthSums& d);
// The per-layer table (with each layer's share of the step time, and the head's) and the
// least-change blocks table (Markdown).
std::string depth_md(const DepthSums& d);

}  // namespace gb::analysis
