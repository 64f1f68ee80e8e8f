// `glassbox scan`: where massive activations appear (Sun et al. 2024). Runs prompts through the
// engine with the glass box observing every layer at the chosen points (the server's `observe`:
// the same accumulator, detector and rule) and reports per (layer, point) the largest |x| with
// its dim and token, the mean per-token median |x|, the largest max/median ratio and the top
// dims; then the massive-emergence layer — the first layer where a row passes the rule
// (|x| > min_abs and > min_ratio × the median |x| of the prompt's rows at that layer, Sun et al.;
// --median token: of that row; --fire-on: which tests an event needs) — with its dims and token
// positions.
// Writes a table to stdout, and with --out DIR scan.json, scan.md, scan.svg (the top-3
// magnitudes of resid_post per layer on a log scale) and scan-heat.svg (layer × token of the
// first prompt: each resid_post row's max|x| / median|x|, log scale).
// --sinks adds per full-attention layer the attention mass on the first token (mean over heads
// and the largest head), the glass box's attention-sink statistic, to line up with that layer.
//
// --check-ablation (Sun et al. 2024, §3): the perplexity of the prompts with the emergence
// layer's massive values (a) untouched, (b) replaced by their mean over the prompts' events and
// (c) zeroed — through the glass box's clip_massive intervention at that layer's resid_post (the
// rows passing the ratio test), the same op a request can send.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "analysis/scan.h"
#include "cli/commands.h"
#include "cli/common_flags.h"
#include "cli/glass_flags.h"
#include "cli/report_files.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace gb::cli {
namespace {

struct ScanOptions {
  std::string model, prompt, prompt_ids, prompts_file, points = "resid_post", out;
  int threads = 0, top_k = 3;
  float min_abs = 100.0f, min_ratio = 1000.0f;
  std::string median = "layer", fire_on = "both";
  bool json = false, check_ablation = false, sinks = false;
  GlassFlags glass;
};

int fail(const std::string& msg) {
  std::fprintf(stderr, "glassbox scan: %s\n", msg.c_str());
  return 1;
}

std::string svg_top3(const std::vector<const analysis::ScanRow*>& rows, int top_k, const std::string& title) {
  const int w = 640, h = 360, left = 70, right = 20, top = 50, bottom = 50;
  double lo = INFINITY, hi = 0;
  std::vector<std::vector<float>> series(static_cast<size_t>(top_k));
  for (const analysis::ScanRow* r : rows) {
    std::vector<float> v;
    for (const auto& [d, a] : r->top) v.push_back(a);
    std::sort(v.rbegin(), v.rend());
    for (int k = 0; k < top_k; ++k) {
      const float a = k < static_cast<int>(v.size()) ? v[static_cast<size_t>(k)] : 0.0f;
      series[static_cast<size_t>(k)].push_back(a);
      if (a > 0) lo = std::min(lo, static_cast<double>(a)), hi = std::max(hi, static_cast<double>(a));
    }
  }
  if (!(hi > 0)) lo = 0.1, hi = 1;
  const double l0 = std::floor(std::log10(lo)), l1 = std::max(l0 + 1, std::ceil(std::log10(hi)));
  const int n = static_cast<int>(rows.size());
  auto X = [&](int i) { return left + (n > 1 ? i * (w - left - right) / (n - 1) : (w - left - right) / 2); };
  auto Y = [&](double a) {
    const double t = (std::log10(std::max(a, lo)) - l0) / (l1 - l0);
    return static_cast<int>(h - bottom - t * (h - top - bottom));
  };
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(w) + "\" height=\"" +
                  std::to_string(h) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + std::to_string(left) + "\" y=\"20\" font-size=\"14\">" + title + "</text>\n";
  for (double e = l0; e <= l1; e += 1) {
    const int y = Y(std::pow(10.0, e));
    s += "<line x1=\"" + std::to_string(left) + "\" x2=\"" + std::to_string(w - right) + "\" y1=\"" +
         std::to_string(y) + "\" y2=\"" + std::to_string(y) + "\" stroke=\"#ddd\"/>\n";
    s += "<text x=\"" + std::to_string(left - 6) + "\" y=\"" + std::to_string(y + 4) + "\" text-anchor=\"end\">1e" +
         std::to_string(static_cast<int>(e)) + "</text>\n";
  }
  for (int i = 0; i < n; ++i) {
    s += "<text x=\"" + std::to_string(X(i)) + "\" y=\"" + std::to_string(h - bottom + 16) +
         "\" text-anchor=\"middle\">" + std::to_string(rows[static_cast<size_t>(i)]->layer) + "</text>\n";
  }
  s += "<text x=\"" + std::to_string((left + w - right) / 2) + "\" y=\"" + std::to_string(h - 12) +
       "\" text-anchor=\"middle\">layer (resid_post)</text>\n";
  s += "<text x=\"16\" y=\"" + std::to_string((top + h - bottom) / 2) + "\" transform=\"rotate(-90 16 " +
       std::to_string((top + h - bottom) / 2) + ")\" text-anchor=\"middle\">|x|, log scale</text>\n";
  const char* colours[] = {"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b"};
  for (int k = 0; k < top_k; ++k) {
    std::string pts;
    for (int i = 0; i < n; ++i)
      pts +=
          std::to_string(X(i)) + "," + std::to_string(Y(series[static_cast<size_t>(k)][static_cast<size_t>(i)])) + " ";
    const char* c = colours[k % 5];
    s += std::string("<polyline fill=\"none\" stroke=\"") + c + "\" stroke-width=\"2\" points=\"" + pts + "\"/>\n";
    s += std::string("<text x=\"") + std::to_string(w - right - 60) + "\" y=\"" + std::to_string(top + 14 * k) +
         "\" fill=\"" + c + "\">top " + std::to_string(k + 1) + "</text>\n";
  }
  return s + "</svg>\n";
}

// The prompts as token ids, their texts, and the tokenizer (null with --prompt-ids).
struct ScanInputs {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> texts;
  std::unique_ptr<Tokenizer> tok;
};

Result<ScanInputs> scan_inputs(const ScanOptions& o) {
  ScanInputs in;
  if (!o.prompt_ids.empty()) {
    std::vector<int32_t> ids;
    GB_RETURN_IF_ERROR(parse_token_ids(o.prompt_ids, &ids));
    in.prompts.push_back(std::move(ids));
    in.texts.push_back(o.prompt_ids);
    return in;
  }
  GB_ASSIGN_OR_RETURN(in.tok, Tokenizer::load(o.model));
  GB_ASSIGN_OR_RETURN(in.texts, read_prompts(o.prompt, o.prompts_file));
  for (const std::string& t : in.texts) in.prompts.push_back(in.tok->encode(t, /*add_special=*/true));
  return in;
}

std::string svg_ratio_heat(const std::vector<std::vector<double>>& g, const std::vector<std::string>& tokens,
                           const std::string& title) {
  const int L = static_cast<int>(g.size()), T = g.empty() ? 0 : static_cast<int>(g[0].size());
  const int cell = std::clamp(900 / std::max(T, 1), 10, 36), left = 70, top = 50, bottom = 90;
  const int w = left + cell * T + 30, h = top + 16 * L + bottom;
  double hi = 1;
  for (const auto& r : g) {
    for (double v : r) hi = std::max(hi, v);
  }
  const double lhi = std::max(1.0, std::ceil(std::log10(hi)));
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(w) + "\" height=\"" +
                  std::to_string(h) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + std::to_string(left) + "\" y=\"20\" font-size=\"14\">" + title + "</text>\n";
  s += "<text x=\"" + std::to_string(left) +
       "\" y=\"36\" fill=\"#555\">max|x| / median|x| of each resid_post row, log " + "scale: white 1, dark red 1e" +
       std::to_string(static_cast<int>(lhi)) + "</text>\n";
  for (int l = 0; l < L; ++l) {
    const int y = top + 16 * l;
    s += "<text x=\"" + std::to_string(left - 6) + "\" y=\"" + std::to_string(y + 12) +
         "\" text-anchor=\"end\">layer " + std::to_string(l) + "</text>\n";
    for (int t = 0; t < T; ++t) {
      const double v = g[static_cast<size_t>(l)][static_cast<size_t>(t)];
      const double f = std::clamp(v > 1 ? std::log10(v) / lhi : 0.0, 0.0, 1.0);
      char fill[16];
      std::snprintf(fill, sizeof(fill), "#%02x%02x%02x", 255 - static_cast<int>(f * 100),
                    255 - static_cast<int>(f * 255), 255 - static_cast<int>(f * 255));
      char tip[48];
      std::snprintf(tip, sizeof(tip), "%.4g", v);
      s += "<rect x=\"" + std::to_string(left + t * cell) + "\" y=\"" + std::to_string(y) + "\" width=\"" +
           std::to_string(cell - 1) + "\" height=\"15\" fill=\"" + fill + "\"><title>layer " + std::to_string(l) +
           ", token " + std::to_string(t) + ": " + tip + "</title></rect>\n";
    }
  }
  for (int t = 0; t < T; ++t) {
    std::string label = t < static_cast<int>(tokens.size()) ? tokens[static_cast<size_t>(t)] : std::to_string(t);
    std::string esc;
    for (char c : label.substr(0, 12)) {
      if (c == '<') esc += "&lt;";
      else if (c == '>') esc += "&gt;";
      else if (c == '&') esc += "&amp;";
      else if (static_cast<unsigned char>(c) >= 0x20) esc += c;
    }
    const int x = left + t * cell + cell / 2, y = top + 16 * L + 8;
    s += "<text x=\"" + std::to_string(x) + "\" y=\"" + std::to_string(y) + "\" transform=\"rotate(60 " +
         std::to_string(x) + " " + std::to_string(y) + ")\">" + esc + "</text>\n";
  }
  return s + "</svg>\n";
}

int run_scan(const ScanOptions& o) {
  auto in = scan_inputs(o);
  if (!in.is_ok()) return fail(in.message());
  analysis::ScanParams params;
  auto points = analysis::parse_points(o.points);
  if (!points.is_ok()) return fail("--points: " + points.message());
  params.points = *points;
  params.top_k = o.top_k;
  params.rule = {o.min_abs, o.min_ratio, parse_massive_median(o.median).value_or(MassiveMedian::kLayer),
                 parse_massive_fire(o.fire_on).value_or(MassiveFire::kBoth)};
  params.heat_map = !o.out.empty();
  params.sinks = o.sinks;
  int32_t longest = 0;
  for (const auto& p : in->prompts) longest = std::max(longest, static_cast<int32_t>(p.size()));
  auto model = load_model(o.model, {.n_threads = o.threads});
  if (!model.is_ok()) return fail(model.message());
  Model& m = **model;
  auto engine = analysis::local_engine(m, static_cast<int32_t>(std::min<size_t>(in->prompts.size(), 16)), longest);
  if (!engine.is_ok()) return fail(engine.message());
  auto steer = load_glass_interventions(o.glass, m.config());
  if (!steer.is_ok()) return fail(steer.message());
  const analysis::Runner run =
      analysis::with_interventions(analysis::local_runner(**engine, "scan"), *steer, m.config());
  auto result = analysis::run_scan(run, params, m.config(), in->prompts);
  if (!result.is_ok()) return fail(result.message());
  auto piece = [&](int32_t prompt, int32_t position) -> std::string {
    if (in->tok == nullptr) return "";
    const int32_t id = in->prompts[static_cast<size_t>(prompt)][static_cast<size_t>(position)];
    return in->tok->decode(std::span<const int32_t>(&id, 1), /*skip_special=*/false);
  };
  analysis::ScanReport rep = analysis::scan_report(params, in->texts, *result, piece);
  rep.json["model"] = o.model;
  if (o.check_ablation) {
    if (result->emergence < 0) return fail("--check-ablation: " + rep.verdict);
    auto ab = analysis::check_ablation(run, params, m.config(), in->prompts, *result);
    if (!ab.is_ok()) return fail("--check-ablation: " + ab.message());
    rep.json["ablation"] = *ab;
    const auto& ppl = (*ab)["perplexity"];
    char line[320];
    std::snprintf(
        line, sizeof(line),
        "\nAblation at layer %d (perplexity of the prompts): untouched %.4g, massive values replaced by their "
        "mean %.4g (×%.3f), zeroed %.4g (×%.3g)\n",
        result->emergence, ppl["untouched"].get<double>(), ppl["mean"].get<double>(),
        (*ab)["mean_vs_untouched"].get<double>(), ppl["zeroed"].get<double>(),
        (*ab)["zeroed_vs_untouched"].get<double>());
    rep.md += line;
  }
  if (o.json) {
    std::printf("%s\n", json_text(rep.json).c_str());
  } else {
    std::printf("%s\n%zu prompt(s); %s\n\n%s", m.describe().c_str(), in->prompts.size(), rep.verdict.c_str(),
                rep.md.c_str());
  }
  if (o.out.empty()) return 0;
  std::vector<const analysis::ScanRow*> resid;
  for (const auto& [key, row] : result->rows) {
    if (row.point == HookPoint::kResidPost) resid.push_back(&row);
  }
  std::vector<std::pair<std::string, std::string>> files = {
      {"scan.json", json_text(rep.json) + "\n"},
      {"scan.md", "# Massive-activation scan: " + m.describe() + "\n\n" + rep.verdict + "\n\n" + rep.md}};
  if (!resid.empty()) files.emplace_back("scan.svg", svg_top3(resid, std::min(o.top_k, 5), "Top |x| per layer"));
  std::vector<std::string> pieces;
  for (int32_t id : in->prompts[0]) {
    pieces.push_back(in->tok != nullptr ? in->tok->decode(std::span<const int32_t>(&id, 1), /*skip_special=*/false)
                                        : std::to_string(id));
  }
  files.emplace_back("scan-heat.svg",
                     svg_ratio_heat(result->heat, pieces, "Max / median per layer and token (prompt 1)"));
  if (Status st = write_report_files("scan", o.out, files); !st) return fail(st.message());
  return 0;
}

}  // namespace

void register_scan(CLI::App& app, Action* action) {
  auto o = std::make_shared<ScanOptions>();
  CLI::App* cmd =
      app.add_subcommand("scan", "Massive activations: per-layer magnitudes and the layer where they emerge");
  add_model_flag(*cmd, &o->model)->required();
  add_glass_flags(*cmd, &o->glass);
  auto* text = cmd->add_option("--prompt,-p", o->prompt, "prompt text");
  auto* file =
      cmd->add_option("--prompts", o->prompts_file, "a file of prompts, one per line")->check(CLI::ExistingFile);
  auto* ids = cmd->add_option("--prompt-ids", o->prompt_ids, "token ids, e.g. \"1 2 3\" (no tokenizer needed)");
  ids->excludes(text)->excludes(file);
  cmd->add_option("--points", o->points, "comma list of per-layer points (" + hook_point_list(true) + ")")
      ->capture_default_str();
  cmd->add_option("--top-k,-k", o->top_k, "top dims per (layer, point)")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  cmd->add_option("--min-abs", o->min_abs, "the rule: |x| above this ...")->capture_default_str();
  cmd->add_option("--min-ratio", o->min_ratio, "... and above this × the median |x|")->capture_default_str();
  cmd->add_option("--median", o->median,
                  "the median of the rule: layer (of the prompt's rows at that layer, Sun et al.) or token (the row's)")
      ->capture_default_str()
      ->check(CLI::IsMember({"layer", "token"}));
  cmd->add_option("--fire-on", o->fire_on, "which tests an event needs: both, abs, ratio or either")
      ->capture_default_str()
      ->check(CLI::IsMember({"both", "abs", "ratio", "either"}));
  cmd->add_option("--out,-o", o->out, "directory for scan.json, scan.md and scan.svg");
  add_threads_flag(*cmd, &o->threads);
  cmd->add_flag("--json", o->json, "print the JSON instead of the table");
  cmd->add_flag("--sinks", o->sinks,
                "also the attention mass on the first token per full-attention layer (mean over heads, max head)");
  cmd->add_flag("--check-ablation", o->check_ablation,
                "perplexity with the emergence layer's massive values untouched, replaced by their mean, zeroed");
  cmd->callback([action, o] { *action = [o] { return run_scan(*o); }; });
}

}  // namespace gb::cli
