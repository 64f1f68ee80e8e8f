// The massive-activation scan (scan.h).
#include "analysis/scan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace gb::analysis {

Result<std::vector<HookPoint>> parse_points(const std::string& list) {
  std::vector<HookPoint> points;
  std::istringstream in(list);
  for (std::string name; std::getline(in, name, ',');) {
    auto p = parse_hook_point(name);
    if (!p || !is_layer_point(*p)) {
      std::string names;
      for (int i = 0; i < kNumLayerPoints; ++i) {
        if (!names.empty()) names += ", ";
        names += hook_point_name(static_cast<HookPoint>(i));
      }
      return Status::error("'" + name + "' is not a per-layer point (" + names + ")");
    }
    if (std::find(points.begin(), points.end(), *p) == points.end()) points.push_back(*p);
  }
  if (points.empty()) return Status::error("no point given");
  return points;
}

namespace {

GlassSpec scan_glass(const ScanParams& p) {
  GlassSpec spec;
  spec.observe.enabled = true;
  spec.observe.points = p.points;
  spec.observe.top_k = p.top_k;
  spec.observe.detect_massive = true;
  spec.massive = p.rule;
  if (p.sinks) spec.observe.sink_tokens = 1;
  return spec;
}

}  // namespace

Result<std::shared_ptr<const GlassSpec>> scan_spec(const ScanParams& p, const ModelConfig& c) {
  return resolve_glass_spec(scan_glass(p), c);
}

Result<std::vector<std::vector<double>>> ratio_grid(const GlassReport& report, int32_t n_layers) {
  std::vector<std::vector<double>> grid(static_cast<size_t>(n_layers));
  std::vector<float> a;
  for (const Capture& cap : report.captures) {
    if (cap.point != HookPoint::kResidPost || cap.layer < 0 || cap.layer >= n_layers) continue;
    if (!cap.filled)
      return Status::error("no resid_post row of layer " + std::to_string(cap.layer) + " for token " +
                           std::to_string(cap.position));
    a.resize(cap.data.size());
    for (size_t d = 0; d < a.size(); ++d) a[d] = std::fabs(cap.data[d]);
    const float mx = *std::max_element(a.begin(), a.end());
    std::nth_element(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(a.size() / 2), a.end());
    float med = a[a.size() / 2];
    if (a.size() % 2 == 0)
      med = (med + *std::max_element(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(a.size() / 2))) / 2;
    grid[static_cast<size_t>(cap.layer)].push_back(med > 0 ? mx / med : 0.0);
  }
  return grid;
}

ScanResult fold_scan(const std::vector<std::shared_ptr<const GlassReport>>& reports) {
  ScanResult out;
  for (size_t i = 0; i < reports.size(); ++i) {
    const GlassReport& rep = *reports[i];
    for (const PointStats& s : rep.stats) {
      ScanRow& r = out.rows[{s.layer, static_cast<int>(s.point)}];
      r.point = s.point;
      r.layer = s.layer;
      if (s.max_abs > r.max_abs || r.max_position < 0) {
        r.max_abs = s.max_abs, r.max_dim = s.max_dim, r.max_position = s.max_position;
        r.max_prompt = static_cast<int32_t>(i);
      }
      r.median_sum += static_cast<double>(s.median_abs) * static_cast<double>(s.n_tokens);
      r.tokens += s.n_tokens;
      r.max_ratio = std::max(r.max_ratio, s.max_ratio);
      for (const TopDim& t : s.top) r.top[t.dim] = std::max(r.top[t.dim], t.abs);
    }
    for (const MassiveEvent& e : rep.events) {
      out.events.push_back({static_cast<int32_t>(i), e});
      ++out.rows[{e.layer, static_cast<int>(e.point)}].events;
    }
    out.dropped += rep.events_dropped;
    for (const SinkStats& s : rep.sinks) {
      auto& [sum, tokens] = out.sinks[s.layer];
      sum.resize(s.mean.size(), 0.0);
      for (size_t h = 0; h < s.mean.size(); ++h) sum[h] += static_cast<double>(s.mean[h]) * s.n_tokens;
      tokens += s.n_tokens;
    }
  }
  for (const auto& ev : out.events)
    out.emergence = out.emergence < 0 ? ev.e.layer : std::min(out.emergence, ev.e.layer);
  for (const auto& ev : out.events) {
    if (ev.e.layer != out.emergence) continue;
    out.dims.insert(ev.e.dim);
    out.where.insert({ev.prompt, ev.e.position});
  }
  return out;
}

ScanReport scan_report(const ScanParams& p, const std::vector<std::string>& prompts, const ScanResult& r,
                       const TokenText& text) {
  ScanReport rep;
  nlohmann::json& j = rep.json;
  j = {{"rule",
        {{"min_abs", p.rule.min_abs},
         {"min_ratio", p.rule.min_ratio},
         {"median", std::string(massive_median_name(p.rule.median))},
         {"fire_on", std::string(massive_fire_name(p.rule.fire_on))}}},
       {"prompts", prompts},
       {"events", r.events.size() + static_cast<size_t>(r.dropped)}};
  j["layers"] = nlohmann::json::array();
  rep.md =
      "| layer | point | max \\|x\\| | dim | token | mean median \\|x\\| | max ratio | top dims | events |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const auto& [key, row] : r.rows) {
    std::vector<std::pair<float, int32_t>> top;
    for (const auto& [d, a] : row.top) top.push_back({a, d});
    std::sort(top.rbegin(), top.rend());
    if (top.size() > static_cast<size_t>(p.top_k)) top.resize(static_cast<size_t>(p.top_k));
    nlohmann::json top_json = nlohmann::json::array();
    std::string top_md;
    for (const auto& [a, d] : top) {
      top_json.push_back({{"dim", d}, {"abs", a}});
      char buf[48];
      std::snprintf(buf, sizeof(buf), "%s%d (%.3g)", top_md.empty() ? "" : ", ", d, a);
      top_md += buf;
    }
    const double median = row.tokens > 0 ? row.median_sum / static_cast<double>(row.tokens) : 0.0;
    const std::string pname(hook_point_name(row.point));
    const std::string token = row.max_position >= 0 ? text(row.max_prompt, row.max_position) : "";
    j["layers"].push_back({{"layer", row.layer},
                           {"point", pname},
                           {"max_abs", row.max_abs},
                           {"max_dim", row.max_dim},
                           {"max_prompt", row.max_prompt},
                           {"max_position", row.max_position},
                           {"max_token", token},
                           {"median_abs", median},
                           {"max_ratio", row.max_ratio},
                           {"top", top_json},
                           {"events", row.events}});
    const std::string token_json = nlohmann::json(token).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    char line[512];
    std::snprintf(line, sizeof(line), "| %d | %s | %.4g | %d | %d %s | %.4g | %.4g | %s | %lld |\n", row.layer,
                  pname.c_str(), row.max_abs, row.max_dim, row.max_position, token_json.c_str(), median, row.max_ratio,
                  top_md.c_str(), static_cast<long long>(row.events));
    rep.md += line;
  }
  if (p.sinks) {
    nlohmann::json rows = nlohmann::json::array();
    rep.md +=
        "\nAttention on the first token (mean softmax mass per query, over the prompts' tokens; full-attention "
        "layers):\n\n| layer | mean over heads | max head | its mass |\n| --- | --- | --- | --- |\n";
    for (const auto& [layer, acc] : r.sinks) {
      const auto& [sum, tokens] = acc;
      if (sum.empty() || tokens == 0) continue;
      double total = 0;
      size_t best = 0;
      for (size_t h = 0; h < sum.size(); ++h) {
        total += sum[h];
        if (sum[h] > sum[best]) best = h;
      }
      const double mean = total / static_cast<double>(tokens) / static_cast<double>(sum.size());
      const double top = sum[best] / static_cast<double>(tokens);
      rows.push_back(
          {{"layer", layer}, {"mean", mean}, {"max_head", best}, {"max_head_mean", top}, {"tokens", tokens}});
      char line[128];
      std::snprintf(line, sizeof(line), "| %d | %.4f | %zu | %.4f |\n", layer, mean, best, top);
      rep.md += line;
    }
    j["attention_sinks"] = std::move(rows);
  }
  if (r.emergence < 0) {
    char abs_test[48], ratio_test[96], rule[160];
    std::snprintf(abs_test, sizeof(abs_test), "|x| > %g", p.rule.min_abs);
    std::snprintf(ratio_test, sizeof(ratio_test), "%g × the %s median |x|", p.rule.min_ratio,
                  p.rule.median == MassiveMedian::kLayer ? "layer's" : "row's");
    if (p.rule.fire_on == MassiveFire::kAbs) {
      std::snprintf(rule, sizeof(rule), "%s", abs_test);
    } else if (p.rule.fire_on == MassiveFire::kRatio) {
      std::snprintf(rule, sizeof(rule), "|x| > %s", ratio_test);
    } else {
      std::snprintf(rule, sizeof(rule), "%s %s > %s", abs_test, p.rule.fire_on == MassiveFire::kEither ? "or" : "and",
                    ratio_test);
    }
    rep.verdict = std::string("no massive activations: no row passes ") + rule;
    j["emergence_layer"] = nullptr;
    return rep;
  }
  rep.verdict = "massive-emergence layer: " + std::to_string(r.emergence) + " (dims";
  for (int32_t d : r.dims) rep.verdict += " " + std::to_string(d);
  rep.verdict += "; tokens";
  for (const auto& [pr, pos] : r.where) {
    rep.verdict += " " + std::to_string(pos);
    const std::string t = text(pr, pos);
    if (!t.empty())
      rep.verdict += " " + nlohmann::json(t).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  rep.verdict += ")";
  j["emergence_layer"] = {{"layer", r.emergence}, {"dims", r.dims}, {"positions", nlohmann::json::array()}};
  for (const auto& [pr, pos] : r.where)
    j["emergence_layer"]["positions"].push_back({{"prompt", pr}, {"position", pos}});
  return rep;
}

Result<ScanResult> run_scan(const Runner& run, const ScanParams& p, const ModelConfig& c,
                            const std::vector<std::vector<int32_t>>& prompts) {
  GB_ASSIGN_OR_RETURN(std::shared_ptr<const GlassSpec> spec, scan_spec(p, c));
  std::vector<GenerationRequest> reqs;
  for (size_t i = 0; i < prompts.size(); ++i)
    reqs.push_back(observe_request("scan-" + std::to_string(i), prompts[i], spec));
  if (p.heat_map && !prompts.empty()) {  // prompt 0 also captures its resid_post rows
    GlassSpec first = scan_glass(p);
    for (int32_t l = 0; l < c.n_layers; ++l) {
      for (int32_t pos = 0; pos < static_cast<int32_t>(prompts[0].size()); ++pos)
        first.observe.captures.push_back({HookPoint::kResidPost, l, pos});
    }
    first.observe.max_capture_floats = INT64_MAX;
    GB_ASSIGN_OR_RETURN(reqs[0].glass, resolve_glass_spec(std::move(first), c));
  }
  GB_ASSIGN_OR_RETURN(std::vector<RunOutput> outs, run(std::move(reqs)));
  std::vector<std::shared_ptr<const GlassReport>> reports;
  for (const RunOutput& o : outs) {
    if (o.glass == nullptr) return Status::error("the engine returned no glass report");
    reports.push_back(o.glass);
  }
  ScanResult r = fold_scan(reports);
  if (p.heat_map && !reports.empty()) {
    GB_ASSIGN_OR_RETURN(r.heat, ratio_grid(*reports[0], c.n_layers));
  }
  return r;
}

Result<nlohmann::json> check_ablation(const Runner& run, const ScanParams& p, const ModelConfig& c,
                                      const std::vector<std::vector<int32_t>>& prompts, const ScanResult& r) {
  std::vector<float> mean(static_cast<size_t>(c.n_embd), 0.0f);
  std::map<int32_t, std::pair<double, int64_t>> sums;
  for (const auto& ev : r.events) {
    if (ev.e.layer != r.emergence || ev.e.point != HookPoint::kResidPost) continue;
    sums[ev.e.dim].first += ev.e.value;
    ++sums[ev.e.dim].second;
  }
  if (sums.empty())
    return Status::error("layer " + std::to_string(r.emergence) +
                         " has no massive value at resid_post (scan resid_post to check the ablation)");
  for (const auto& [d, s] : sums) mean[static_cast<size_t>(d)] = static_cast<float>(s.first / s.second);
  auto score = [&](std::shared_ptr<const GlassSpec> spec) -> Result<double> {
    std::vector<GenerationRequest> reqs;
    for (size_t i = 0; i < prompts.size(); ++i)
      reqs.push_back(score_request("ablation-" + std::to_string(i), prompts[i], spec));
    GB_ASSIGN_OR_RETURN(std::vector<RunOutput> outs, run(std::move(reqs)));
    return perplexity(outs);
  };
  auto clip = [&](bool with_mean) -> Result<std::shared_ptr<const GlassSpec>> {
    GlassSpec spec;
    Intervention iv;
    iv.op = InterventionOp::kClipMassive;
    iv.point = HookPoint::kResidPost;
    iv.layer_first = iv.layer_last = r.emergence;
    iv.threshold = p.rule.min_ratio;
    iv.strength = 0;
    if (with_mean) iv.vector = mean;
    spec.interventions.push_back(std::move(iv));
    return resolve_glass_spec(std::move(spec), c);
  };
  GB_ASSIGN_OR_RETURN(const double base, score(nullptr));
  GB_ASSIGN_OR_RETURN(auto mean_spec, clip(true));
  GB_ASSIGN_OR_RETURN(const double with_mean, score(mean_spec));
  GB_ASSIGN_OR_RETURN(auto zero_spec, clip(false));
  GB_ASSIGN_OR_RETURN(const double zeroed, score(zero_spec));
  nlohmann::json means = nlohmann::json::object();
  for (const auto& [d, s] : sums) means[std::to_string(d)] = mean[static_cast<size_t>(d)];
  return nlohmann::json{{"layer", r.emergence},
                        {"means", means},
                        {"perplexity", {{"untouched", base}, {"mean", with_mean}, {"zeroed", zeroed}}},
                        {"mean_vs_untouched", with_mean / base},
                        {"zeroed_vs_untouched", zeroed / base}};
}

}  // namespace gb::analysis
