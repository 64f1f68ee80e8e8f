// `glassbox sweep`: one intervention at a range of strengths (seed 001's strength table for any
// neuron or vector). For each strength the prompts are generated through the engine with the
// intervention (the request's glass spec), then measured: output length, truncation rate
// (finish_reason length), the 4-gram repetition rate, distinct-2, the perplexity of the outputs
// under the unsteered model, and the KL divergence KL(steered ‖ unsteered) of the next-token
// distributions over the first --kl-tokens output positions (both scored on the same steered
// text). Strength 0 of scale / add is the identity, so its row equals the unsteered run exactly.
// Writes a table, and with --out DIR sweep.json, sweep.md and sweep.svg (a curve per metric).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "analysis/run.h"
#include "cli/commands.h"
#include "cli/common_flags.h"
#include "cli/glass_flags.h"
#include "cli/report_files.h"
#include "core/mapped_file.h"
#include "engine/engine.h"
#include "glass/codec.h"
#include "glass/repetition.h"
#include "tokenizer/tokenizer.h"

namespace gb::cli {
namespace {

struct SweepOptions {
  std::string model, prompt, prompts_file, intervention, strengths = "0,0.5,1", out;
  int threads = 0, max_tokens = 64, kl_tokens = 8;
  bool json = false;
  GlassFlags glass;
};

int fail(const std::string& msg) {
  std::fprintf(stderr, "glassbox sweep: %s\n", msg.c_str());
  return 1;
}

using Output = analysis::RunOutput;

struct Metrics {
  double length = 0, truncation = 0, repetition = 0, distinct2 = 0, ppl = 0, kl = 0;
};

std::string svg_curves(const std::vector<float>& x, const std::vector<Metrics>& ms, const std::string& title) {
  struct Series {
    const char* name;
    double Metrics::*field;
  };
  const Series series[] = {{"output length", &Metrics::length},         {"truncation rate", &Metrics::truncation},
                           {"4-gram repetition", &Metrics::repetition}, {"distinct-2", &Metrics::distinct2},
                           {"perplexity (unsteered)", &Metrics::ppl},   {"KL first tokens", &Metrics::kl}};
  const int pw = 300, ph = 150, cols = 3, pad = 50;
  const int w = cols * (pw + pad) + pad, h = 2 * (ph + pad) + pad + 20;
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(w) + "\" height=\"" +
                  std::to_string(h) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"" + std::to_string(pad) +
       "\" y=\"22\" font-size=\"14\">" + title + "</text>\n";
  const double x0 = x.front(), x1 = x.back() > x.front() ? x.back() : x.front() + 1;
  for (int k = 0; k < 6; ++k) {
    const int ox = pad + (k % cols) * (pw + pad), oy = 40 + (k / cols) * (ph + pad);
    double lo = INFINITY, hi = -INFINITY;
    for (const Metrics& m : ms) lo = std::min(lo, m.*series[k].field), hi = std::max(hi, m.*series[k].field);
    if (!(hi > lo)) hi = lo + 1;
    auto X = [&](double v) { return ox + static_cast<int>((v - x0) / (x1 - x0) * pw); };
    auto Y = [&](double v) { return oy + ph - static_cast<int>((v - lo) / (hi - lo) * ph); };
    s += "<rect x=\"" + std::to_string(ox) + "\" y=\"" + std::to_string(oy) + "\" width=\"" + std::to_string(pw) +
         "\" height=\"" + std::to_string(ph) + "\" fill=\"none\" stroke=\"#ccc\"/>\n";
    s += "<text x=\"" + std::to_string(ox) + "\" y=\"" + std::to_string(oy - 6) + "\" font-weight=\"bold\">" +
         series[k].name + "</text>\n";
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.3g", hi);
    s += "<text x=\"" + std::to_string(ox - 4) + "\" y=\"" + std::to_string(oy + 10) + "\" text-anchor=\"end\">" + buf +
         "</text>\n";
    std::snprintf(buf, sizeof(buf), "%.3g", lo);
    s += "<text x=\"" + std::to_string(ox - 4) + "\" y=\"" + std::to_string(oy + ph) + "\" text-anchor=\"end\">" + buf +
         "</text>\n";
    std::string pts;
    for (size_t i = 0; i < ms.size(); ++i) {
      pts += std::to_string(X(x[i])) + "," + std::to_string(Y(ms[i].*series[k].field)) + " ";
      s += "<circle cx=\"" + std::to_string(X(x[i])) + "\" cy=\"" + std::to_string(Y(ms[i].*series[k].field)) +
           "\" r=\"3\" fill=\"#1f77b4\"/>\n";
    }
    s += "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"" + pts + "\"/>\n";
    std::snprintf(buf, sizeof(buf), "strength %g … %g", x0, x1);
    s += "<text x=\"" + std::to_string(ox + pw / 2) + "\" y=\"" + std::to_string(oy + ph + 16) +
         "\" text-anchor=\"middle\" fill=\"#555\">" + buf + "</text>\n";
  }
  return s + "</svg>\n";
}

GenerationRequest greedy(const std::vector<int32_t>& prompt, int32_t max_tokens, std::shared_ptr<const GlassSpec> g) {
  GenerationRequest r;
  r.id = "sweep";
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.glass = std::move(g);
  return r;
}

// --intervention (JSON or @FILE) and --strengths, checked and sorted.
Status sweep_inputs(const SweepOptions& o, nlohmann::json* item, std::vector<float>* strengths) {
  std::string text = o.intervention;
  if (!text.empty() && text[0] == '@') {
    GB_ASSIGN_OR_RETURN(text, read_file(text.substr(1)));
  }
  *item = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!item->is_object())
    return Status::error("--intervention: expected one intervention item as a JSON object (or @FILE)");
  std::istringstream in(o.strengths);
  for (std::string v; std::getline(in, v, ',');) {
    char* end = nullptr;
    const float f = std::strtof(v.c_str(), &end);
    if (end == v.c_str() || *end != '\0' || !std::isfinite(f))
      return Status::error("--strengths: '" + v + "' is not a number");
    strengths->push_back(f);
  }
  if (strengths->empty()) return Status::error("--strengths: none given");
  std::sort(strengths->begin(), strengths->end());
  return Status::ok();
}

double repetition_rate(const std::vector<int32_t>& tokens) {
  RepetitionTracker tracker(4);
  for (int32_t t : tokens) tracker.push(t);
  return tracker.rate();
}

// KL(steered ‖ unsteered) summed over the rows of two full-vocabulary prompt-logprob lists from
// entry `first` on (entry j scores text token j + 1 from the row at position j).
double kl_rows(const std::vector<GeneratedToken>& steered, const std::vector<GeneratedToken>& base, size_t first,
               int32_t vocab, int64_t* rows) {
  double kl = 0;
  std::vector<float> pb(static_cast<size_t>(vocab));
  for (size_t k = first; k < steered.size(); ++k) {
    for (const TokenLogprob& a : base[k].top) pb[static_cast<size_t>(a.token)] = a.logprob;
    for (const TokenLogprob& a : steered[k].top) {
      const double ps = std::exp(static_cast<double>(a.logprob));
      if (ps > 0) kl += ps * (static_cast<double>(a.logprob) - pb[static_cast<size_t>(a.token)]);
    }
    ++*rows;
  }
  return kl;
}

// One strength: generate every prompt under spec, then score the outputs — under the unsteered
// model for their perplexity, and the first kl_tokens positions under both for the KL.
Result<Metrics> measure(const analysis::Runner& run, const ModelConfig& c,
                        const std::vector<std::vector<int32_t>>& prompts, const std::vector<std::string>& texts,
                        const Tokenizer& tok, const std::shared_ptr<const GlassSpec>& spec, const SweepOptions& o,
                        nlohmann::json* outputs) {
  std::vector<GenerationRequest> reqs;
  for (const auto& p : prompts) reqs.push_back(greedy(p, o.max_tokens, spec));
  GB_ASSIGN_OR_RETURN(std::vector<Output> outs, run(std::move(reqs)));
  std::vector<GenerationRequest> base_scores, steered_scores;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> text = prompts[i];
    text.insert(text.end(), outs[i].tokens.begin(), outs[i].tokens.end());
    GenerationRequest b = greedy(text, 0, nullptr);
    b.prompt_logprobs = 0;
    base_scores.push_back(b);
    const size_t k = std::min(outs[i].tokens.size(), static_cast<size_t>(o.kl_tokens));
    std::vector<int32_t> head(prompts[i]);
    head.insert(head.end(), outs[i].tokens.begin(), outs[i].tokens.begin() + static_cast<std::ptrdiff_t>(k));
    GenerationRequest bk = greedy(head, 0, nullptr), sk = greedy(head, 0, spec);
    bk.prompt_logprobs = sk.prompt_logprobs = c.vocab;
    base_scores.push_back(bk);
    steered_scores.push_back(sk);
  }
  GB_ASSIGN_OR_RETURN(std::vector<Output> base, run(std::move(base_scores)));
  GB_ASSIGN_OR_RETURN(std::vector<Output> steered, run(std::move(steered_scores)));

  int64_t n_tokens = 0, truncated = 0, bigrams = 0, n_kl = 0;
  double rep = 0, logp = 0, kl = 0;
  std::set<std::pair<int32_t, int32_t>> distinct;
  *outputs = nlohmann::json::array();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Output& out = outs[i];
    n_tokens += static_cast<int64_t>(out.tokens.size());
    truncated += out.finish == FinishReason::kLength;
    rep += repetition_rate(out.tokens);
    for (size_t k = 1; k < out.tokens.size(); ++k) distinct.insert({out.tokens[k - 1], out.tokens[k]});
    bigrams += std::max<int64_t>(0, static_cast<int64_t>(out.tokens.size()) - 1);
    // The output tokens' logprobs under the unsteered model: the last |output| scored entries.
    const auto& scored = base[2 * i].prompt_logprobs;
    for (size_t k = scored.size() - out.tokens.size(); k < scored.size(); ++k) logp += scored[k].logprob;
    // Output token 0 (text position n_prompt) is scored by entry n_prompt - 1.
    kl += kl_rows(steered[i].prompt_logprobs, base[2 * i + 1].prompt_logprobs, prompts[i].size() - 1, c.vocab, &n_kl);
    outputs->push_back({{"prompt", texts[i]},
                        {"tokens", out.tokens},
                        {"text", tok.decode(out.tokens, /*skip_special=*/true)},
                        {"finish_reason", finish_reason_name(out.finish)}});
  }
  const double np = static_cast<double>(prompts.size());
  Metrics mt;
  mt.length = static_cast<double>(n_tokens) / np;
  mt.truncation = static_cast<double>(truncated) / np;
  mt.repetition = rep / np;
  mt.distinct2 = bigrams > 0 ? static_cast<double>(distinct.size()) / static_cast<double>(bigrams) : 0.0;
  mt.ppl = n_tokens > 0 ? std::exp(-logp / static_cast<double>(n_tokens)) : 0.0;
  mt.kl = n_kl > 0 ? kl / static_cast<double>(n_kl) : 0.0;
  return mt;
}

std::string sweep_table(const std::vector<float>& strengths, const std::vector<Metrics>& metrics, int kl_tokens) {
  std::string md =
      "| strength | output length | truncated | 4-gram repetition | distinct-2 | perplexity (unsteered) | "
      "KL first " +
      std::to_string(kl_tokens) + " |\n| --- | --- | --- | --- | --- | --- | --- |\n";
  for (size_t i = 0; i < strengths.size(); ++i) {
    const Metrics& mt = metrics[i];
    char line[256];
    std::snprintf(line, sizeof(line), "| %g | %.1f | %.2f | %.3f | %.3f | %.3f | %.4f |\n", strengths[i], mt.length,
                  mt.truncation, mt.repetition, mt.distinct2, mt.ppl, mt.kl);
    md += line;
  }
  return md;
}

int run_sweep(const SweepOptions& o) {
  nlohmann::json item;
  std::vector<float> strengths;
  if (Status st = sweep_inputs(o, &item, &strengths); !st) return fail(st.message());
  auto texts = read_prompts(o.prompt, o.prompts_file);
  if (!texts.is_ok()) return fail(texts.message());
  auto tok = Tokenizer::load(o.model);
  if (!tok.is_ok()) return fail(tok.message());
  auto model = load_model(o.model, {.n_threads = o.threads});
  if (!model.is_ok()) return fail(model.message());
  Model& m = **model;
  const ModelConfig& c = m.config();
  std::vector<std::vector<int32_t>> prompts;
  int64_t longest = 0;
  for (const std::string& t : *texts) {
    prompts.push_back((*tok)->encode(t, /*add_special=*/true));
    longest = std::max<int64_t>(longest, static_cast<int64_t>(prompts.back().size()));
  }
  if (longest + o.max_tokens > c.max_pos) return fail("prompt + --max-tokens exceeds the model's context");
  EngineConfig ec;
  ec.scheduler.max_num_seqs = static_cast<int32_t>(std::min<size_t>(prompts.size(), 16));
  ec.scheduler.max_num_batched_tokens = m.max_batch_tokens();
  ec.max_model_len = static_cast<int32_t>(longest + o.max_tokens);
  auto engine = Engine::create(&m, ec);
  if (!engine.is_ok()) return fail(engine.message());
  // --glassbox: its interventions steer every run, the "unsteered" baseline included.
  auto steer = load_glass_interventions(o.glass, c);
  if (!steer.is_ok()) return fail(steer.message());
  const analysis::Runner run = analysis::with_interventions(analysis::local_runner(**engine, "sweep"), *steer, c);

  std::vector<Metrics> metrics;
  nlohmann::json rows = nlohmann::json::array();
  for (float strength : strengths) {
    nlohmann::json it = item;
    it["strength"] = strength;
    auto parsed = parse_local_glass({{"interventions", {it}}}, c, nullptr);
    if (!parsed.is_ok()) return fail("--intervention: " + parsed.message());
    nlohmann::json outputs;
    auto mt = measure(run, c, prompts, *texts, **tok, parsed->spec, o, &outputs);
    if (!mt.is_ok()) return fail(mt.message());
    metrics.push_back(*mt);
    rows.push_back({{"strength", strength},
                    {"output_length", mt->length},
                    {"truncation_rate", mt->truncation},
                    {"repetition_rate", mt->repetition},
                    {"distinct_2", mt->distinct2},
                    {"perplexity_unsteered", mt->ppl},
                    {"kl_first_tokens", mt->kl},
                    {"outputs", outputs}});
  }
  const std::string md = sweep_table(strengths, metrics, o.kl_tokens);
  const nlohmann::json j = {{"model", o.model},
                            {"intervention", item},
                            {"max_tokens", o.max_tokens},
                            {"kl_tokens", o.kl_tokens},
                            {"strengths", rows}};
  if (o.json) {
    std::printf("%s\n", json_text(j).c_str());
  } else {
    std::printf("%s, %zu prompt(s), greedy, max_tokens %d\nintervention: %s\n\n%s", m.describe().c_str(),
                prompts.size(), o.max_tokens, json_text(item).c_str(), md.c_str());
  }
  if (o.out.empty()) return 0;
  const Status st = write_report_files(
      "sweep", o.out,
      {{"sweep.json", json_text(j) + "\n"},
       {"sweep.md", "# Strength sweep: " + m.describe() + "\n\nIntervention: `" + json_text(item) + "`\n\n" + md},
       {"sweep.svg", svg_curves(strengths, metrics, "Strength sweep")}});
  if (!st) return fail(st.message());
  return 0;
}

}  // namespace

void register_sweep(CLI::App& app, Action* action) {
  auto o = std::make_shared<SweepOptions>();
  CLI::App* cmd = app.add_subcommand("sweep",
                                     "One intervention at a range of strengths: length, truncation, "
                                     "repetition, distinct-2, perplexity, KL");
  add_model_flag(*cmd, &o->model)->required();
  add_glass_flags(*cmd, &o->glass);
  cmd->add_option("--prompt,-p", o->prompt, "prompt text");
  cmd->add_option("--prompts", o->prompts_file, "a file of prompts, one per line")->check(CLI::ExistingFile);
  cmd->add_option("--intervention", o->intervention,
                  "one intervention item (the request syntax; its strength is swept), or @FILE")
      ->required();
  cmd->add_option("--strengths", o->strengths, "comma list of strengths")->capture_default_str();
  cmd->add_option("--max-tokens,-n", o->max_tokens, "tokens per output")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--kl-tokens", o->kl_tokens, "output positions the KL covers")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--out,-o", o->out, "directory for sweep.json, sweep.md and sweep.svg");
  add_threads_flag(*cmd, &o->threads);
  cmd->add_flag("--json", o->json, "print the JSON (with every output) instead of the table");
  cmd->callback([action, o] { *action = [o] { return run_sweep(*o); }; });
}

}  // namespace gb::cli
