// Layer contributions (depth.h).
#include "analysis/depth.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "glass/codec.h"

namespace gb::analysis {
namespace {

constexpr HookPoint kDepthPoints[] = {HookPoint::kResidPre, HookPoint::kAttnOut, HookPoint::kResidMid,
                                      HookPoint::kMlpOut, HookPoint::kResidPost};

double dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return s;
}
double norm(const float* a, int64_t n) { return std::sqrt(dot(a, a, n)); }

}  // namespace

Result<std::shared_ptr<const GlassSpec>> depth_spec(const ModelConfig& c, int32_t n_tokens) {
  std::vector<std::pair<HookPoint, int32_t>> keys;
  for (HookPoint p : kDepthPoints) {
    for (int32_t l = 0; l < c.n_layers; ++l) keys.emplace_back(p, l);
  }
  GB_ASSIGN_OR_RETURN(std::shared_ptr<const GlassSpec> spec, capture_spec(c, n_tokens, keys));
  GlassSpec timed = *spec;
  timed.observe.layer_time = true;
  return seal_resolved_spec(std::move(timed), c);
}

DepthSums::DepthSums(int32_t n_layers)
    : bi_(static_cast<size_t>(n_layers)), attn_(static_cast<size_t>(n_layers)), mlp_(static_cast<size_t>(n_layers)) {
  for (int32_t l = 0; l < n_layers; ++l) dist_.emplace_back(static_cast<size_t>(n_layers - l), 0.0);
  time_.enabled = true;
  time_.layer_ms.assign(static_cast<size_t>(n_layers), 0.0);
}

Status DepthSums::add(const GlassReport& report, const ModelConfig& c) {
  GB_ASSIGN_OR_RETURN(CapturedTensors t, captured_tensors(report));
  const int32_t L = n_layers();
  const int64_t e = c.n_embd;
  auto rows = [&](HookPoint p, int32_t l) -> const CapturedTensor* {
    auto it = t.find(hook_key(p, l));
    return it == t.end() ? nullptr : &it->second;
  };
  const CapturedTensor* first = rows(HookPoint::kResidPre, 0);
  if (first == nullptr || first->width != e) return Status::error("depth: the report has no resid_pre captures");
  const int64_t n = static_cast<int64_t>(first->data.size()) / e;
  for (int32_t l = 0; l < L; ++l) {
    for (HookPoint p : kDepthPoints) {
      const CapturedTensor* r = rows(p, l);
      if (r == nullptr || static_cast<int64_t>(r->data.size()) != n * e)
        return Status::error("depth: the report lacks " + hook_key(p, l) + " at every token");
    }
  }
  // Each row's norm once (the angular distances pair every resid_pre with L − l resid_posts).
  std::vector<double> pre_norm(static_cast<size_t>(L * n)), post_norm(static_cast<size_t>(L * n));
  for (int32_t l = 0; l < L; ++l) {
    const float *pre = rows(HookPoint::kResidPre, l)->data.data(), *post = rows(HookPoint::kResidPost, l)->data.data();
    for (int64_t tok = 0; tok < n; ++tok) {
      pre_norm[static_cast<size_t>(l * n + tok)] = norm(pre + tok * e, e);
      post_norm[static_cast<size_t>(l * n + tok)] = norm(post + tok * e, e);
    }
  }
  auto cos_of = [&](const float* a, double na, const float* b, double nb) {
    const double d = na * nb;
    return d > 0 ? std::clamp(dot(a, b, e) / d, -1.0, 1.0) : 1.0;
  };
  for (int32_t l = 0; l < L; ++l) {
    const float *pre = rows(HookPoint::kResidPre, l)->data.data(), *post = rows(HookPoint::kResidPost, l)->data.data(),
                *attn = rows(HookPoint::kAttnOut, l)->data.data(), *mid = rows(HookPoint::kResidMid, l)->data.data(),
                *mlp = rows(HookPoint::kMlpOut, l)->data.data();
    for (int64_t tok = 0; tok < n; ++tok) {
      const int64_t o = tok * e;
      const double np = pre_norm[static_cast<size_t>(l * n + tok)], nm = norm(mid + o, e);
      bi_[l] += cos_of(pre + o, np, post + o, post_norm[static_cast<size_t>(l * n + tok)]);
      attn_[l] += np > 0 ? norm(attn + o, e) / np : 0.0;
      mlp_[l] += nm > 0 ? norm(mlp + o, e) / nm : 0.0;
      for (int32_t k = l; k < L; ++k) {
        const float* out = rows(HookPoint::kResidPost, k)->data.data();
        dist_[l][k - l] += std::acos(cos_of(pre + o, np, out + o, post_norm[static_cast<size_t>(k * n + tok)])) / M_PI;
      }
    }
  }
  n_ += n;
  const LayerTime& lt = report.layer_time;
  if (lt.enabled && static_cast<int32_t>(lt.layer_ms.size()) == L) {
    time_.steps += lt.steps;
    time_.head_ms += lt.head_ms;
    for (int32_t l = 0; l < L; ++l) time_.layer_ms[l] += lt.layer_ms[l];
  }
  return Status::ok();
}

std::vector<std::vector<double>> DepthSums::distances() const {
  std::vector<std::vector<double>> d;
  for (int32_t l = 0; l < n_layers(); ++l) {
    d.emplace_back();
    for (int32_t k = 1; k <= n_layers() - l; ++k) d.back().push_back(angular_distance(l, k));
  }
  return d;
}

int32_t DepthSums::best_block(int32_t n) const {
  int32_t best = 0;
  for (int32_t l = 0; l + n <= n_layers(); ++l) {
    if (dist_[l][n - 1] < dist_[best][n - 1]) best = l;
  }
  return best;
}

Result<DepthSums> run_depth(const Runner& run, const ModelConfig& c, const std::vector<std::vector<int32_t>>& prompts) {
  DepthSums sums(c.n_layers);
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) return Status::error("prompt " + std::to_string(i) + " encodes to no tokens");
    GB_ASSIGN_OR_RETURN(auto spec, depth_spec(c, static_cast<int32_t>(prompts[i].size())));
    std::vector<GenerationRequest> reqs;
    reqs.push_back(observe_request("depth-" + std::to_string(i), prompts[i], spec));
    GB_ASSIGN_OR_RETURN(std::vector<RunOutput> outs, run(std::move(reqs)));
    if (outs.empty() || outs[0].glass == nullptr) return Status::error("the engine returned no glass report");
    GB_RETURN_IF_ERROR(sums.add(*outs[0].glass, c));
  }
  return sums;
}

Intervention skip_layers(int32_t first, int32_t n) {
  return {
      .op = InterventionOp::kSkip, .point = HookPoint::kResidPost, .layer_first = first, .layer_last = first + n - 1};
}

Result<SkipTable> skip_perplexities(const Runner& run, const ModelConfig& c,
                                    const std::vector<std::vector<int32_t>>& prompts, const DepthSums& d,
                                    int32_t max_block, const std::function<void(size_t, size_t)>& progress) {
  const int32_t L = c.n_layers;
  struct Skip {
    int32_t first, n;  // n = 0: nothing skipped
  };
  std::vector<Skip> runs = {{0, 0}};
  for (int32_t l = 0; l < L; ++l) runs.push_back({l, 1});
  for (int32_t len = 2; len <= std::min(max_block, L); ++len) runs.push_back({d.best_block(len), len});
  std::vector<double> ppl;
  for (size_t k = 0; k < runs.size(); ++k) {
    if (progress) progress(k, runs.size());
    std::shared_ptr<const GlassSpec> spec;
    if (runs[k].n > 0) {
      GlassSpec s;
      s.interventions.push_back(skip_layers(runs[k].first, runs[k].n));
      GB_ASSIGN_OR_RETURN(spec, resolve_glass_spec(std::move(s), c));
    }
    std::vector<GenerationRequest> reqs;
    for (size_t i = 0; i < prompts.size(); ++i) {
      if (prompts[i].size() < 2) return Status::error("prompt " + std::to_string(i) + " has no token after the first");
      reqs.push_back(score_request("skip-" + std::to_string(k) + "-" + std::to_string(i), prompts[i], spec));
    }
    GB_ASSIGN_OR_RETURN(std::vector<RunOutput> outs, run(std::move(reqs)));
    GB_ASSIGN_OR_RETURN(const double p, perplexity(outs));
    ppl.push_back(p);
  }
  if (progress) progress(runs.size(), runs.size());

  SkipTable t;
  int64_t n_scored = 0;
  for (const std::vector<int32_t>& ids : prompts) n_scored += static_cast<int64_t>(ids.size()) - 1;
  t.json = {{"n_scored", n_scored}, {"perplexity", ppl[0]}};
  t.json["layers"] = nlohmann::json::array();
  t.json["blocks"] = nlohmann::json::array();
  t.md = "| skipped | angular distance d(l, n) | perplexity | × none skipped |\n| --- | --- | --- | --- |\n";
  char line[160];
  std::snprintf(line, sizeof(line), "| none | – | %.4f | 1.000 |\n", ppl[0]);
  t.md += line;
  for (size_t k = 1; k < runs.size(); ++k) {
    const Skip& r = runs[k];
    const double dist = d.angular_distance(r.first, r.n);
    if (r.n == 1) {
      t.json["layers"].push_back({{"layer", r.first}, {"angular_distance", dist}, {"perplexity", ppl[k]}});
      std::snprintf(line, sizeof(line), "| layer %d | %.5f | %.4f | %.3f |\n", r.first, dist, ppl[k], ppl[k] / ppl[0]);
    } else {
      t.json["blocks"].push_back(
          {{"n", r.n}, {"first_layer", r.first}, {"angular_distance", dist}, {"perplexity", ppl[k]}});
      std::snprintf(line, sizeof(line), "| layers %d–%d (least-change block of %d) | %.5f | %.4f | %.3f |\n", r.first,
                    r.first + r.n - 1, r.n, dist, ppl[k], ppl[k] / ppl[0]);
    }
    t.md += line;
  }
  return t;
}

nlohmann::json depth_json(const DepthSums& d) {
  const nlohmann::json time = layer_time_json(d.time());
  nlohmann::json j = {{"n_tokens", d.n_tokens()}, {"step_time", time}};
  j["layers"] = nlohmann::json::array();
  for (int32_t l = 0; l < d.n_layers(); ++l) {
    std::vector<double> dist;
    for (int32_t k = 1; k <= d.n_layers() - l; ++k) dist.push_back(d.angular_distance(l, k));
    j["layers"].push_back({{"layer", l},
                           {"block_influence", d.block_influence(l)},
                           {"attn_update_ratio", d.attn_update_ratio(l)},
                           {"mlp_update_ratio", d.mlp_update_ratio(l)},
                           {"angular_distance", dist},
                           {"time_share", time["layers"][static_cast<size_t>(l)]["share"]}});
  }
  j["best_blocks"] = nlohmann::json::array();
  for (int32_t len = 1; len <= d.n_layers(); ++len) {
    const int32_t best = d.best_block(len);
    j["best_blocks"].push_back(
        {{"n", len}, {"first_layer", best}, {"angular_distance", d.angular_distance(best, len)}});
  }
  return j;
}

std::string depth_md(const DepthSums& d) {
  const nlohmann::json time = layer_time_json(d.time());
  std::string md =
      "| layer | block influence | ‖attn_out‖/‖resid_pre‖ | ‖mlp_out‖/‖resid_mid‖ | angular distance n=1 | step time "
      "share |\n"
      "| --- | --- | --- | --- | --- | --- |\n";
  for (int32_t l = 0; l < d.n_layers(); ++l) {
    char line[256];
    std::snprintf(line, sizeof(line), "| %d | %.5f | %.4f | %.4f | %.5f | %.1f%% |\n", l, d.block_influence(l),
                  d.attn_update_ratio(l), d.mlp_update_ratio(l), d.angular_distance(l, 1),
                  100 * time["layers"][static_cast<size_t>(l)]["share"].get<double>());
    md += line;
  }
  char head[96];
  std::snprintf(head, sizeof(head), "| output head | | | | | %.1f%% |\n", 100 * time["head"]["share"].get<double>());
  md += head;
  md += "\n| n layers | least-change block | angular distance |\n| --- | --- | --- |\n";
  for (int32_t len = 1; len <= d.n_layers(); ++len) {
    const int32_t best = d.best_block(len);
    char line[128];
    std::snprintf(line, sizeof(line), "| %d | %d–%d | %.5f |\n", len, best, best + len - 1,
                  d.angular_distance(best, len));
    md += line;
  }
  return md;
}

}  // namespace gb::analysis
