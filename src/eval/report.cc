#include "eval/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>

#include "eval/stats.h"
#include "glass/repetition.h"

namespace gb::eval {

using json = nlohmann::json;

namespace {

// The sequence the repetition measures run on: the token ids, or (a server that does not name
// them) the words of the text, each word an id.
std::vector<int32_t> units_of(const Sample& s) {
  if (!s.token_ids.empty() || s.text.empty()) return s.token_ids;
  std::vector<int32_t> ids;
  std::map<std::string, int32_t> vocab;
  size_t i = 0;
  while (i < s.text.size()) {
    while (i < s.text.size() && std::isspace(static_cast<unsigned char>(s.text[i]))) ++i;
    size_t j = i;
    while (j < s.text.size() && !std::isspace(static_cast<unsigned char>(s.text[j]))) ++j;
    if (j > i) ids.push_back(vocab.emplace(s.text.substr(i, j - i), static_cast<int32_t>(vocab.size())).first->second);
    i = j;
  }
  return ids;
}

json interval(int64_t k, int64_t n) {
  const Interval ci = wilson_interval(k, n);
  return json::array({ci.lo, ci.hi});
}

json rate(int64_t k, int64_t n) {
  return {{"count", k},
          {"n", n},
          {"rate", n > 0 ? static_cast<double>(k) / static_cast<double>(n) : 0.0},
          {"ci95", interval(k, n)}};
}

json quantiles(const std::vector<double>& v) {
  if (v.empty()) return nullptr;
  return {{"p50", percentile(v, 0.5)}, {"p99", percentile(v, 0.99)}};
}

std::string fixed(double v, int digits) {
  if (!std::isfinite(v)) return "–";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string pct(const json& r) {
  if (r.is_null() || r["n"].get<int64_t>() == 0) return "–";
  return fixed(100 * r["rate"].get<double>(), 1) + "% [" + fixed(100 * r["ci95"][0].get<double>(), 1) + ", " +
         fixed(100 * r["ci95"][1].get<double>(), 1) + "]";
}

std::string num(const json& j, const char* key, int digits = 0) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? fixed(j[key].get<double>(), digits) : "–";
}

std::string xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// Markdown table cells must not break the table.
std::string cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return out;
}

const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};

}  // namespace

json build_report(const json& settings, const std::vector<Sample>& samples) {
  std::vector<std::string> arm_names;
  std::map<std::string, json> arm_settings;
  for (const json& a : settings.value("arms", json::array())) {
    arm_names.push_back(a.value("name", ""));
    arm_settings[arm_names.back()] = a;
  }
  std::map<std::string, std::vector<const Sample*>> by_arm;
  for (const Sample& s : samples) by_arm[s.arm].push_back(&s);

  // One histogram range for every arm: 0 .. the largest max_tokens (or the longest output).
  double hi = 1;
  for (const auto& [name, a] : arm_settings) hi = std::max(hi, a.value("max_tokens", 0.0));
  for (const Sample& s : samples) hi = std::max(hi, static_cast<double>(s.completion_tokens));
  const int bins = 20;

  json arms = json::array();
  for (const std::string& name : arm_names) {
    const std::vector<const Sample*>& v = by_arm[name];
    int64_t graded = 0, correct = 0, strict = 0, truncated = 0, loops = 0;
    std::map<std::string, int64_t> finish;
    std::vector<double> lengths, ttft, itl, e2e, tps, reps;
    std::set<std::string> problems;
    bool words = false;
    for (const Sample* s : v) {
      problems.insert(s->problem_id);
      if (s->graded) {
        ++graded;
        correct += s->correct;
        strict += s->strict_correct;
      }
      truncated += s->finish_reason == "length";
      ++finish[s->finish_reason];
      lengths.push_back(static_cast<double>(s->completion_tokens));
      ttft.push_back(s->ttft_ms);
      e2e.push_back(s->latency_ms);
      itl.insert(itl.end(), s->itl_ms.begin(), s->itl_ms.end());
      if (s->completion_tokens > 1 && s->latency_ms > s->ttft_ms)
        tps.push_back(1000.0 * static_cast<double>(s->completion_tokens - 1) / (s->latency_ms - s->ttft_ms));
      words = words || (s->token_ids.empty() && !s->text.empty());
      RepetitionTracker rep(kRepetitionNgram, kLoopWindow);  // ngram_repetition_rate's, with the window for loops
      for (int32_t id : units_of(*s)) rep.push(id);
      reps.push_back(rep.rate());
      loops += rep.should_stop({kRepetitionNgram, kLoopWindow, kLoopMaxRate});
    }
    const json& as = arm_settings[name];
    json a = {{"name", name},
              {"spec", as.value("spec", json(nullptr))},
              {"max_tokens", as.value("max_tokens", json(nullptr))},
              {"samples", v.size()},
              {"problems", problems.size()},
              {"accuracy", graded > 0 ? rate(correct, graded) : json(nullptr)},
              {"truncation", rate(truncated, static_cast<int64_t>(v.size()))},
              {"finish_reasons", finish}};
    if (settings.value("task", "") == "gsm8k" && graded > 0) a["strict_accuracy"] = rate(strict, graded);
    json length = nullptr;
    if (!lengths.empty()) {
      double sum = 0;
      for (double x : lengths) sum += x;
      const Histogram h = histogram(lengths, 0, hi, bins);
      length = {{"unit", "tokens"},
                {"mean", sum / static_cast<double>(lengths.size())},
                {"p50", percentile(lengths, 0.5)},
                {"p90", percentile(lengths, 0.9)},
                {"p99", percentile(lengths, 0.99)},
                {"max", *std::max_element(lengths.begin(), lengths.end())},
                {"histogram", {{"lo", h.lo}, {"width", h.width}, {"counts", h.counts}}}};
    }
    a["length"] = length;
    double rep_sum = 0;
    for (double r : reps) rep_sum += r;
    a["repetition"] = {{"unit", words ? "words" : "tokens"},
                       {"ngram", kRepetitionNgram},
                       {"mean_rate", reps.empty() ? 0.0 : rep_sum / static_cast<double>(reps.size())},
                       {"loops", rate(loops, static_cast<int64_t>(v.size()))}};
    a["latency"] = {{"ttft_ms", quantiles(ttft)},
                    {"itl_ms", quantiles(itl)},
                    {"e2e_ms", quantiles(e2e)},
                    {"decode_tokens_per_s", tps.empty() ? json(nullptr) : json(percentile(tps, 0.5))}};
    arms.push_back(std::move(a));
  }

  // Paired: each arm against the first, on the (problem, sample) pairs both have graded.
  json paired = json::array();
  if (!arm_names.empty()) {
    std::map<std::pair<std::string, int32_t>, bool> base;
    for (const Sample* s : by_arm[arm_names[0]]) {
      if (s->graded) base[{s->problem_id, s->sample}] = s->correct;
    }
    for (size_t i = 1; i < arm_names.size(); ++i) {
      int64_t both = 0, base_only = 0, arm_only = 0, neither = 0;
      std::map<std::string, std::pair<int64_t, int64_t>> per_problem;  // id -> (base correct, arm correct)
      std::map<std::string, int64_t> pairs_of;
      for (const Sample* s : by_arm[arm_names[i]]) {
        if (!s->graded) continue;
        auto it = base.find({s->problem_id, s->sample});
        if (it == base.end()) continue;
        const bool b = it->second, c = s->correct;
        both += b && c;
        base_only += b && !c;
        arm_only += !b && c;
        neither += !b && !c;
        per_problem[s->problem_id].first += b;
        per_problem[s->problem_id].second += c;
        ++pairs_of[s->problem_id];
      }
      // In the dataset's order when the settings give it (else by id).
      std::vector<std::string> order;
      for (const json& id : settings.value("problem_ids", json::array())) {
        if (id.is_string() && per_problem.count(id.get<std::string>())) order.push_back(id.get<std::string>());
      }
      if (order.size() != per_problem.size()) {
        order.clear();
        for (const auto& [id, bc] : per_problem) order.push_back(id);
      }
      json diffs = json::array();
      int64_t wins = 0, losses = 0;
      for (const std::string& id : order) {
        const std::pair<int64_t, int64_t>& bc = per_problem[id];
        if (bc.first == bc.second) continue;
        (bc.second > bc.first ? wins : losses) += 1;
        diffs.push_back(
            {{"problem", id}, {"baseline_correct", bc.first}, {"arm_correct", bc.second}, {"samples", pairs_of[id]}});
      }
      paired.push_back({{"arm", arm_names[i]},
                        {"baseline", arm_names[0]},
                        {"pairs", both + base_only + arm_only + neither},
                        {"both_correct", both},
                        {"baseline_only", base_only},
                        {"arm_only", arm_only},
                        {"both_wrong", neither},
                        {"mcnemar_p", mcnemar_exact_p(base_only, arm_only)},
                        {"problems_won", wins},
                        {"problems_lost", losses},
                        {"differing_problems", diffs}});
    }
  }
  const int64_t expected = settings.value("expected_samples", int64_t{0});
  return {{"settings", settings},
          {"arms", arms},
          {"paired", paired},
          {"samples", samples.size()},
          {"missing_samples", std::max<int64_t>(0, expected - static_cast<int64_t>(samples.size()))}};
}

std::string report_markdown(const json& r) {
  const json& st = r["settings"];
  std::string md = "# glassbox eval\n\n";
  md += "Dataset `" + cell(st.value("data", "")) + "` (" + std::to_string(st.value("problems", 0)) + " problems, " +
        cell(st.value("task", "")) + "), " + std::to_string(st.value("samples_per_problem", 1)) +
        " sample(s) per problem, served by " + cell(st.value("server", "")) + ". Sampling: `" +
        cell(st.value("sampling", json::object()).dump()) + "`.\n";
  if (r.value("missing_samples", 0) > 0)
    md += "\n**Incomplete:** " + std::to_string(r["missing_samples"].get<int64_t>()) +
          " samples are not stored yet (re-run the same command to finish).\n";
  md +=
      "\n| arm | samples | accuracy [95% CI] | truncated (length) [95% CI] | length mean / p50 / p90 / p99 | "
      "repetition | loops | TTFT p50 / p99 ms | ITL p50 / p99 ms | decode tok/s |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const json& a : r["arms"]) {
    const json& L = a["length"];
    const json& lat = a["latency"];
    std::string acc = pct(a["accuracy"]);
    if (a.contains("strict_accuracy")) acc += " (strict: " + pct(a["strict_accuracy"]) + ")";
    md += "| " + cell(a["name"].get<std::string>()) + " | " + std::to_string(a["samples"].get<int64_t>()) + " | " +
          acc + " | " + pct(a["truncation"]) + " | " + num(L, "mean", 1) + " / " + num(L, "p50") + " / " +
          num(L, "p90") + " / " + num(L, "p99") + " | " + fixed(100 * a["repetition"]["mean_rate"].get<double>(), 1) +
          "% | " + pct(a["repetition"]["loops"]) + " | " + num(lat["ttft_ms"], "p50", 1) + " / " +
          num(lat["ttft_ms"], "p99", 1) + " | " + num(lat["itl_ms"], "p50", 1) + " / " + num(lat["itl_ms"], "p99", 1) +
          " | " + (lat["decode_tokens_per_s"].is_number() ? fixed(lat["decode_tokens_per_s"].get<double>(), 1) : "–") +
          " |\n";
  }
  if (!r["paired"].empty()) {
    md +=
        "\nPaired against the baseline on the same (problem, sample): McNemar's exact test on the discordant "
        "pairs.\n\n| arm | vs | pairs | both right | baseline only | arm only | both wrong | p (McNemar exact) | "
        "problems won / lost |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
    for (const json& p : r["paired"]) {
      char pv[32];
      std::snprintf(pv, sizeof pv, "%.4g", p["mcnemar_p"].get<double>());
      md += "| " + cell(p["arm"].get<std::string>()) + " | " + cell(p["baseline"].get<std::string>()) + " | " +
            std::to_string(p["pairs"].get<int64_t>()) + " | " + std::to_string(p["both_correct"].get<int64_t>()) +
            " | " + std::to_string(p["baseline_only"].get<int64_t>()) + " | " +
            std::to_string(p["arm_only"].get<int64_t>()) + " | " + std::to_string(p["both_wrong"].get<int64_t>()) +
            " | " + pv + " | " + std::to_string(p["problems_won"].get<int64_t>()) + " / " +
            std::to_string(p["problems_lost"].get<int64_t>()) + " |\n";
    }
    for (const json& p : r["paired"]) {
      const json& d = p["differing_problems"];
      if (d.empty()) continue;
      md += "\nProblems where `" + cell(p["arm"].get<std::string>()) + "` and `" +
            cell(p["baseline"].get<std::string>()) + "` differ (correct samples of each)" +
            (d.size() > 50 ? ", the first 50 of " + std::to_string(d.size()) : std::string()) +
            ":\n\n| problem | baseline | arm |\n| --- | --- | --- |\n";
      for (size_t i = 0; i < d.size() && i < 50; ++i) {
        const std::string n = std::to_string(d[i]["samples"].get<int64_t>());
        md += "| " + cell(d[i]["problem"].get<std::string>()) + " | " +
              std::to_string(d[i]["baseline_correct"].get<int64_t>()) + "/" + n + " | " +
              std::to_string(d[i]["arm_correct"].get<int64_t>()) + "/" + n + " |\n";
      }
    }
  }
  md +=
      "\nDefinitions: accuracy = correct / graded samples; truncated = finish_reason `length`; length = completion "
      "tokens (the server's usage); repetition = share of 4-grams already seen earlier in the output; a loop = more "
      "than 60% repeats among the last 64 4-grams (the server's stop_on_repetition rule); ITL = gaps between "
      "streamed chunks; decode tok/s = (tokens − 1) / (latency − TTFT), median over samples. Intervals: Wilson, "
      "95%.\n";
  return md;
}

std::string lengths_svg(const json& r) {
  const int w = 720, h = 380, left = 70, right = 150, top = 50, bottom = 50;
  const json& arms = r["arms"];
  double lo = 0, width = 1, ymax = 0;
  size_t bins = 0;
  for (const json& a : arms) {
    if (a["length"].is_null()) continue;
    const json& hist = a["length"]["histogram"];
    lo = hist["lo"].get<double>();
    width = hist["width"].get<double>();
    bins = hist["counts"].size();
    const double n = static_cast<double>(a["samples"].get<int64_t>());
    for (const auto& c : hist["counts"]) ymax = std::max(ymax, c.get<double>() / std::max(1.0, n));
  }
  if (!(ymax > 0)) ymax = 1;
  const double xmax = lo + width * static_cast<double>(std::max<size_t>(bins, 1));
  auto X = [&](double v) { return left + static_cast<int>((v - lo) / (xmax - lo) * (w - left - right)); };
  auto Y = [&](double f) { return h - bottom - static_cast<int>(f / ymax * (h - top - bottom)); };
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(w) + "\" height=\"" +
                  std::to_string(h) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + std::to_string(left) +
       "\" y=\"20\" font-size=\"14\">Output length per arm (share of samples)</text>\n";
  for (int t = 0; t <= 4; ++t) {
    const double f = ymax * t / 4;
    s += "<line x1=\"" + std::to_string(left) + "\" x2=\"" + std::to_string(w - right) + "\" y1=\"" +
         std::to_string(Y(f)) + "\" y2=\"" + std::to_string(Y(f)) + "\" stroke=\"#ddd\"/>\n";
    s += "<text x=\"" + std::to_string(left - 6) + "\" y=\"" + std::to_string(Y(f) + 4) + "\" text-anchor=\"end\">" +
         fixed(100 * f, 0) + "%</text>\n";
  }
  for (int t = 0; t <= 5; ++t) {
    const double v = lo + (xmax - lo) * t / 5;
    s += "<text x=\"" + std::to_string(X(v)) + "\" y=\"" + std::to_string(h - bottom + 16) +
         "\" text-anchor=\"middle\">" + fixed(v, 0) + "</text>\n";
  }
  s += "<text x=\"" + std::to_string((left + w - right) / 2) + "\" y=\"" + std::to_string(h - 12) +
       "\" text-anchor=\"middle\">completion tokens</text>\n";
  int k = 0;
  for (const json& a : arms) {
    const char* c = kColours[k % 8];
    const std::string name = xml(a["name"].get<std::string>());
    s += std::string("<text x=\"") + std::to_string(w - right + 10) + "\" y=\"" + std::to_string(top + 16 * k) +
         "\" fill=\"" + c + "\">" + name + "</text>\n";
    if (!a["length"].is_null()) {
      const json& counts = a["length"]["histogram"]["counts"];
      const double n = std::max(1.0, static_cast<double>(a["samples"].get<int64_t>()));
      std::string pts = std::to_string(X(lo)) + "," + std::to_string(Y(0)) + " ";
      for (size_t b = 0; b < counts.size(); ++b) {  // a step outline per arm, so overlaid arms stay readable
        const int y = Y(counts[b].get<double>() / n);
        pts += std::to_string(X(lo + width * static_cast<double>(b))) + "," + std::to_string(y) + " ";
        pts += std::to_string(X(lo + width * static_cast<double>(b + 1))) + "," + std::to_string(y) + " ";
      }
      pts += std::to_string(X(xmax)) + "," + std::to_string(Y(0));
      s += std::string("<polyline fill=\"none\" stroke=\"") + c + "\" stroke-width=\"2\" points=\"" + pts + "\"/>\n";
    }
    if (a["max_tokens"].is_number()) {
      const int x = X(a["max_tokens"].get<double>());
      s += std::string("<line x1=\"") + std::to_string(x) + "\" x2=\"" + std::to_string(x) + "\" y1=\"" +
           std::to_string(top) + "\" y2=\"" + std::to_string(h - bottom) + "\" stroke=\"" + c +
           "\" stroke-dasharray=\"4 3\"/>\n";
      s += std::string("<text x=\"") + std::to_string(x + 3) + "\" y=\"" + std::to_string(top + 10 + 12 * k) +
           "\" fill=\"" + c + "\">max_tokens " + fixed(a["max_tokens"].get<double>(), 0) + "</text>\n";
    }
    ++k;
  }
  return s + "</svg>\n";
}

std::string accuracy_svg(const json& r) {
  const json& arms = r["arms"];
  const int bar = 48, gap = 28, left = 70, top = 50, bottom = 60, plot_h = 260;
  const int n = static_cast<int>(arms.size());
  const int w = left + n * (bar + gap) + 40, h = top + plot_h + bottom;
  auto Y = [&](double f) { return top + plot_h - static_cast<int>(f * plot_h); };
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(w) + "\" height=\"" +
                  std::to_string(h) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + std::to_string(left) +
       "\" y=\"20\" font-size=\"14\">Accuracy per arm (95% Wilson interval)</text>\n";
  for (int t = 0; t <= 4; ++t) {
    const double f = t / 4.0;
    s += "<line x1=\"" + std::to_string(left) + "\" x2=\"" + std::to_string(w - 20) + "\" y1=\"" +
         std::to_string(Y(f)) + "\" y2=\"" + std::to_string(Y(f)) + "\" stroke=\"#ddd\"/>\n";
    s += "<text x=\"" + std::to_string(left - 6) + "\" y=\"" + std::to_string(Y(f) + 4) + "\" text-anchor=\"end\">" +
         fixed(100 * f, 0) + "%</text>\n";
  }
  for (int i = 0; i < n; ++i) {
    const json& a = arms[static_cast<size_t>(i)];
    const int x = left + gap / 2 + i * (bar + gap);
    s += "<text x=\"" + std::to_string(x + bar / 2) + "\" y=\"" + std::to_string(top + plot_h + 16) +
         "\" text-anchor=\"middle\">" + xml(a["name"].get<std::string>()) + "</text>\n";
    if (a["accuracy"].is_null()) continue;
    const double v = a["accuracy"]["rate"].get<double>();
    const double l = a["accuracy"]["ci95"][0].get<double>(), u = a["accuracy"]["ci95"][1].get<double>();
    s += std::string("<rect x=\"") + std::to_string(x) + "\" y=\"" + std::to_string(Y(v)) + "\" width=\"" +
         std::to_string(bar) + "\" height=\"" + std::to_string(Y(0) - Y(v)) + "\" fill=\"" + kColours[i % 8] + "\"/>\n";
    const int cx = x + bar / 2;
    s += "<line x1=\"" + std::to_string(cx) + "\" x2=\"" + std::to_string(cx) + "\" y1=\"" + std::to_string(Y(l)) +
         "\" y2=\"" + std::to_string(Y(u)) + "\" stroke=\"black\"/>\n";
    for (double e : {l, u})
      s += "<line x1=\"" + std::to_string(cx - 6) + "\" x2=\"" + std::to_string(cx + 6) + "\" y1=\"" +
           std::to_string(Y(e)) + "\" y2=\"" + std::to_string(Y(e)) + "\" stroke=\"black\"/>\n";
    s += "<text x=\"" + std::to_string(cx) + "\" y=\"" + std::to_string(Y(u) - 4) + "\" text-anchor=\"middle\">" +
         fixed(100 * v, 1) + "%</text>\n";
  }
  return s + "</svg>\n";
}

}  // namespace gb::eval
