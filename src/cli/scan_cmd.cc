// `glassbox scan`: where massive activations appear (Sun et al. 2024). Runs prompts through the
// engine with the glass box observing every layer at the chosen points (the server's `observe`:
// the same accumulator, detector and rule) and reports per (layer, point) the largest |x| with
// its dim and token, the mean per-token median |x|, the largest max/median ratio and the top
// dims; then the massive-emergence layer — the first layer where a row passes the rule
// (|x| > min_abs and > min_ratio × median|x| of that row) — with its dims and token positions.
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

#include "cli/capture.h"
#include "cli/commands.h"
#include "cli/common_flags.h"
#include "cli/report_files.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace gb::cli {
namespace {

struct ScanOptions {
  std::string model, prompt, prompt_ids, prompts_file, points = "resid_post", out;
  int threads = 0, top_k = 3;
  float min_abs = 100.0f, min_ratio = 1000.0f;
  bool json = false, check_ablation = false, sinks = false;
};

int fail(const std::string& msg) {
  std::fprintf(stderr, "glassbox scan: %s\n", msg.c_str());
  return 1;
}

// One (layer, point) over every prompt.
struct Row {
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

std::string svg_top3(const std::vector<const Row*>& rows, int top_k, const std::string& title) {
  const int w = 640, h = 360, left = 70, right = 20, top = 50, bottom = 50;
  double lo = INFINITY, hi = 0;
  std::vector<std::vector<float>> series(static_cast<size_t>(top_k));
  for (const Row* r : rows) {
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

// The glass spec: every layer at the chosen points, top-k dims, detection under the rule.
Result<std::shared_ptr<const GlassSpec>> scan_spec(const ScanOptions& o, const ModelConfig& c) {
  GlassSpec spec;
  spec.observe.enabled = true;
  std::istringstream pin(o.points);
  for (std::string name; std::getline(pin, name, ',');) {
    auto p = parse_hook_point(name);
    if (!p || !is_layer_point(*p))
      return Status::error("--points: '" + name + "' is not a per-layer point (" + hook_point_list(true) + ")");
    spec.observe.points.push_back(*p);
  }
  spec.observe.top_k = o.top_k;
  if (o.sinks) spec.observe.sink_tokens = 1;
  spec.observe.detect_massive = true;
  spec.massive = {o.min_abs, o.min_ratio};
  return resolve_glass_spec(std::move(spec), c);
}

// Runs every prompt as one request under spec (together, in one engine) and returns their reports.
Result<std::vector<std::shared_ptr<const GlassReport>>> observe_prompts(
    Model& m, const std::vector<std::vector<int32_t>>& prompts, std::shared_ptr<const GlassSpec> spec) {
  int64_t longest = 0;
  for (const auto& p : prompts) longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
  if (longest + 1 > m.config().max_pos) return Status::error("a prompt does not fit the model's context");
  EngineConfig ec;
  ec.scheduler.max_num_seqs = static_cast<int32_t>(std::min<size_t>(prompts.size(), 16));
  ec.scheduler.max_num_batched_tokens = m.max_batch_tokens();
  ec.max_model_len = static_cast<int32_t>(longest + 1);
  GB_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::create(&m, ec));
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r;
    r.id = "scan-" + std::to_string(i);
    r.prompt = prompts[i];
    r.max_tokens = 1;  // the prompt is what is scanned; one sampled token ends it (and is never computed)
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    r.glass = spec;
    channels.push_back(std::make_shared<RequestChannel>());
    GB_RETURN_IF_ERROR(engine->submit(std::move(r), channels.back()));
  }
  GB_RETURN_IF_ERROR(engine->run_until_idle());
  std::vector<std::shared_ptr<const GlassReport>> reports;
  for (const auto& ch : channels) {
    std::shared_ptr<const GlassReport> rep;
    for (GenerationEvent ev; ch->pop(&ev, std::chrono::milliseconds(0));) {
      if (ev.finish == FinishReason::kError) return Status::error(ev.error);
      if (ev.glass != nullptr) rep = ev.glass;
    }
    if (rep == nullptr) return Status::error("the engine returned no glass report");
    reports.push_back(std::move(rep));
  }
  return reports;
}

// The reports folded over prompts: a Row per (layer, point), the events, the emergence layer.
struct ScanResult {
  std::map<std::pair<int32_t, int>, Row> rows;  // (layer, point)
  struct Event {
    int32_t prompt;
    MassiveEvent e;
  };
  std::vector<Event> events;
  int64_t dropped = 0;
  int32_t emergence = -1;                       // the first layer with an event; -1: none
  std::set<int32_t> dims;                       // its events' dims
  std::set<std::pair<int32_t, int32_t>> where;  // its events' (prompt, position)
};

ScanResult fold_reports(const std::vector<std::shared_ptr<const GlassReport>>& reports) {
  ScanResult out;
  for (size_t i = 0; i < reports.size(); ++i) {
    const GlassReport& rep = *reports[i];
    for (const PointStats& s : rep.stats) {
      Row& r = out.rows[{s.layer, static_cast<int>(s.point)}];
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
      ++out.rows.at({e.layer, static_cast<int>(e.point)}).events;
    }
    out.dropped += rep.events_dropped;
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

// The JSON and Markdown of a scan, and the one-line verdict on the emergence layer.
struct ScanReport {
  nlohmann::json json;
  std::string md, verdict;
};

ScanReport scan_report(const ScanOptions& o, const ScanInputs& in, const ScanResult& r) {
  auto piece = [&](int32_t prompt, int32_t position) -> std::string {
    if (in.tok == nullptr || position < 0) return "";
    const int32_t id = in.prompts[static_cast<size_t>(prompt)][static_cast<size_t>(position)];
    return in.tok->decode(std::span<const int32_t>(&id, 1), /*skip_special=*/false);
  };
  ScanReport rep;
  nlohmann::json& j = rep.json;
  j = {{"model", o.model},
       {"rule", {{"min_abs", o.min_abs}, {"min_ratio", o.min_ratio}}},
       {"prompts", in.texts},
       {"events", r.events.size() + static_cast<size_t>(r.dropped)}};
  j["layers"] = nlohmann::json::array();
  rep.md =
      "| layer | point | max \\|x\\| | dim | token | mean median \\|x\\| | max ratio | top dims | events |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const auto& [key, row] : r.rows) {
    std::vector<std::pair<float, int32_t>> top;
    for (const auto& [d, a] : row.top) top.push_back({a, d});
    std::sort(top.rbegin(), top.rend());
    if (top.size() > static_cast<size_t>(o.top_k)) top.resize(static_cast<size_t>(o.top_k));
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
    const std::string token = piece(row.max_prompt, row.max_position);
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
    char line[512];
    std::snprintf(line, sizeof(line), "| %d | %s | %.4g | %d | %d %s | %.4g | %.4g | %s | %lld |\n", row.layer,
                  pname.c_str(), row.max_abs, row.max_dim, row.max_position, json_text(token).c_str(), median,
                  row.max_ratio, top_md.c_str(), static_cast<long long>(row.events));
    rep.md += line;
  }
  if (r.emergence < 0) {
    char rule[96];
    std::snprintf(rule, sizeof(rule), "|x| > %g and > %g × its median |x|", o.min_abs, o.min_ratio);
    rep.verdict = std::string("no massive activations: no row passes ") + rule;
    j["emergence_layer"] = nullptr;
    return rep;
  }
  rep.verdict = "massive-emergence layer: " + std::to_string(r.emergence) + " (dims";
  for (int32_t d : r.dims) rep.verdict += " " + std::to_string(d);
  rep.verdict += "; tokens";
  for (const auto& [p, pos] : r.where) {
    rep.verdict += " " + std::to_string(pos);
    if (in.tok != nullptr) rep.verdict += " " + json_text(piece(p, pos));
  }
  rep.verdict += ")";
  j["emergence_layer"] = {{"layer", r.emergence}, {"dims", r.dims}, {"positions", nlohmann::json::array()}};
  for (const auto& [p, pos] : r.where) j["emergence_layer"]["positions"].push_back({{"prompt", p}, {"position", pos}});
  return rep;
}

// --sinks: per full-attention layer, the attention mass the prompts' tokens put on the first token
// (seed 000: massive activations make it an attention sink), averaged over heads, and the head
// with the most, each head's mean weighted by tokens over the prompts; linear-attention layers
// have no softmax and no row. Added to scan.json ("attention_sinks") and scan.md.
void add_sink_rows(const std::vector<std::shared_ptr<const GlassReport>>& reports, ScanReport* rep) {
  std::map<int32_t, std::pair<std::vector<double>, int64_t>> layers;  // layer → (Σ tokens · mean per head, Σ tokens)
  for (const auto& r : reports) {
    for (const SinkStats& s : r->sinks) {
      auto& [sum, tokens] = layers[s.layer];
      sum.resize(s.mean.size(), 0.0);
      for (size_t h = 0; h < s.mean.size(); ++h) sum[h] += static_cast<double>(s.mean[h]) * s.n_tokens;
      tokens += s.n_tokens;
    }
  }
  nlohmann::json rows = nlohmann::json::array();
  std::string md =
      "\nAttention on the first token (mean softmax mass per query, over the prompts' tokens; full-attention "
      "layers):\n\n| layer | mean over heads | max head | its mass |\n| --- | --- | --- | --- |\n";
  for (const auto& [layer, acc] : layers) {
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
    rows.push_back({{"layer", layer}, {"mean", mean}, {"max_head", best}, {"max_head_mean", top}, {"tokens", tokens}});
    char line[128];
    std::snprintf(line, sizeof(line), "| %d | %.4f | %zu | %.4f |\n", layer, mean, best, top);
    md += line;
  }
  rep->json["attention_sinks"] = std::move(rows);
  rep->md += md;
}

// Each resid_post row's max|x| / median|x| of one prompt, [layer][position].
Result<std::vector<std::vector<double>>> ratio_grid(Model& m, const std::vector<int32_t>& ids) {
  std::vector<std::pair<HookPoint, int32_t>> keys;
  for (int32_t l = 0; l < m.config().n_layers; ++l) keys.push_back({HookPoint::kResidPost, l});
  GB_ASSIGN_OR_RETURN(auto captured, capture_hidden_states(m, ids, keys));
  std::vector<std::vector<double>> grid;
  for (int32_t l = 0; l < m.config().n_layers; ++l) {
    const CapturedTensor& t = captured.at(hook_key(HookPoint::kResidPost, l));
    std::vector<double> row;
    std::vector<float> a(static_cast<size_t>(t.width));
    for (size_t p = 0; p < ids.size(); ++p) {
      for (int64_t d = 0; d < t.width; ++d) a[static_cast<size_t>(d)] = std::fabs(t.data[p * t.width + d]);
      const float mx = *std::max_element(a.begin(), a.end());
      std::nth_element(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(a.size() / 2), a.end());
      float med = a[a.size() / 2];
      if (a.size() % 2 == 0) {  // the mean of the two middle values, as the glass box's median
        med = (med + *std::max_element(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(a.size() / 2))) / 2;
      }
      row.push_back(med > 0 ? mx / med : 0.0);
    }
    grid.push_back(std::move(row));
  }
  return grid;
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

// exp(−mean log p) of every prompt token after the first, under spec (null: untouched).
Result<double> perplexity(Model& m, const std::vector<std::vector<int32_t>>& prompts,
                          std::shared_ptr<const GlassSpec> spec) {
  int64_t longest = 0;
  for (const auto& p : prompts) longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
  EngineConfig ec;
  ec.scheduler.max_num_seqs = static_cast<int32_t>(std::min<size_t>(prompts.size(), 16));
  ec.scheduler.max_num_batched_tokens = m.max_batch_tokens();
  ec.max_model_len = static_cast<int32_t>(longest + 1);
  GB_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::create(&m, ec));
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r;
    r.id = "ablation-" + std::to_string(i);
    r.prompt = prompts[i];
    r.max_tokens = 0;
    r.prompt_logprobs = 0;
    r.sampling.temperature = 0;
    r.glass = spec;
    channels.push_back(std::make_shared<RequestChannel>());
    GB_RETURN_IF_ERROR(engine->submit(std::move(r), channels.back()));
  }
  GB_RETURN_IF_ERROR(engine->run_until_idle());
  double logp = 0;
  int64_t n = 0;
  for (const auto& ch : channels) {
    for (GenerationEvent ev; ch->pop(&ev, std::chrono::milliseconds(0));) {
      if (ev.finish == FinishReason::kError) return Status::error(ev.error);
      for (const GeneratedToken& t : ev.prompt_logprobs) logp += t.logprob, ++n;
    }
  }
  if (n == 0) return Status::error("--check-ablation: the prompts have no token after the first to score");
  return std::exp(-logp / static_cast<double>(n));
}

// (a) untouched, (b) the emergence layer's massive values replaced by their mean, (c) zeroed.
Result<nlohmann::json> check_ablation(Model& m, const ScanOptions& o, const ScanInputs& in, const ScanResult& r) {
  const ModelConfig& c = m.config();
  std::vector<float> mean(static_cast<size_t>(c.n_embd), 0.0f);
  std::map<int32_t, std::pair<double, int64_t>> sums;
  for (const auto& ev : r.events) {
    if (ev.e.layer != r.emergence || ev.e.point != HookPoint::kResidPost) continue;
    sums[ev.e.dim].first += ev.e.value;
    ++sums[ev.e.dim].second;
  }
  if (sums.empty())
    return Status::error("--check-ablation: layer " + std::to_string(r.emergence) +
                         " has no massive value at resid_post (scan --points resid_post)");
  for (const auto& [d, s] : sums) mean[static_cast<size_t>(d)] = static_cast<float>(s.first / s.second);
  auto clip = [&](bool with_mean) -> Result<std::shared_ptr<const GlassSpec>> {
    GlassSpec spec;
    Intervention iv;
    iv.op = InterventionOp::kClipMassive;
    iv.point = HookPoint::kResidPost;
    iv.layer_first = iv.layer_last = r.emergence;
    iv.threshold = o.min_ratio;
    iv.strength = 0;
    if (with_mean) iv.vector = mean;
    spec.interventions.push_back(std::move(iv));
    return resolve_glass_spec(std::move(spec), c);
  };
  GB_ASSIGN_OR_RETURN(const double base, perplexity(m, in.prompts, nullptr));
  GB_ASSIGN_OR_RETURN(auto mean_spec, clip(true));
  GB_ASSIGN_OR_RETURN(const double with_mean, perplexity(m, in.prompts, mean_spec));
  GB_ASSIGN_OR_RETURN(auto zero_spec, clip(false));
  GB_ASSIGN_OR_RETURN(const double zeroed, perplexity(m, in.prompts, zero_spec));
  nlohmann::json means = nlohmann::json::object();
  for (const auto& [d, s] : sums) means[std::to_string(d)] = mean[static_cast<size_t>(d)];
  return nlohmann::json{{"layer", r.emergence},
                        {"means", means},
                        {"perplexity", {{"untouched", base}, {"mean", with_mean}, {"zeroed", zeroed}}},
                        {"mean_vs_untouched", with_mean / base},
                        {"zeroed_vs_untouched", zeroed / base}};
}

int run_scan(const ScanOptions& o) {
  auto in = scan_inputs(o);
  if (!in.is_ok()) return fail(in.message());
  auto model = load_model(o.model, {.n_threads = o.threads});
  if (!model.is_ok()) return fail(model.message());
  Model& m = **model;
  auto spec = scan_spec(o, m.config());
  if (!spec.is_ok()) return fail(spec.message());
  auto reports = observe_prompts(m, in->prompts, *spec);
  if (!reports.is_ok()) return fail(reports.message());
  const ScanResult result = fold_reports(*reports);
  ScanReport rep = scan_report(o, *in, result);
  if (o.sinks) add_sink_rows(*reports, &rep);
  if (o.check_ablation) {
    if (result.emergence < 0) return fail("--check-ablation: " + rep.verdict);
    auto ab = check_ablation(m, o, *in, result);
    if (!ab.is_ok()) return fail(ab.message());
    rep.json["ablation"] = *ab;
    const auto& ppl = (*ab)["perplexity"];
    char line[320];
    std::snprintf(
        line, sizeof(line),
        "\nAblation at layer %d (perplexity of the prompts): untouched %.4g, massive values replaced by their "
        "mean %.4g (×%.3f), zeroed %.4g (×%.3g)\n",
        result.emergence, ppl["untouched"].get<double>(), ppl["mean"].get<double>(),
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
  std::vector<const Row*> resid;
  for (const auto& [key, row] : result.rows) {
    if (row.point == HookPoint::kResidPost) resid.push_back(&row);
  }
  std::vector<std::pair<std::string, std::string>> files = {
      {"scan.json", json_text(rep.json) + "\n"},
      {"scan.md", "# Massive-activation scan: " + m.describe() + "\n\n" + rep.verdict + "\n\n" + rep.md}};
  if (!resid.empty()) files.emplace_back("scan.svg", svg_top3(resid, std::min(o.top_k, 5), "Top |x| per layer"));
  auto grid = ratio_grid(m, in->prompts[0]);
  if (!grid.is_ok()) return fail(grid.message());
  std::vector<std::string> pieces;
  for (int32_t id : in->prompts[0]) {
    pieces.push_back(in->tok != nullptr ? in->tok->decode(std::span<const int32_t>(&id, 1), /*skip_special=*/false)
                                        : std::to_string(id));
  }
  files.emplace_back("scan-heat.svg", svg_ratio_heat(*grid, pieces, "Max / median per layer and token (prompt 1)"));
  if (Status st = write_report_files("scan", o.out, files); !st) return fail(st.message());
  return 0;
}

}  // namespace

void register_scan(CLI::App& app, Action* action) {
  auto o = std::make_shared<ScanOptions>();
  CLI::App* cmd =
      app.add_subcommand("scan", "Massive activations: per-layer magnitudes and the layer where they emerge");
  add_model_flag(*cmd, &o->model)->required();
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
  cmd->add_option("--min-ratio", o->min_ratio, "... and above this × the row's median |x|")->capture_default_str();
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
