// `glassbox depth`: what each layer contributes (ShortGPT, Gromov et al. 2024, the curse-of-depth
// update ratios), from the hidden states of engine requests (analysis/depth.h), averaged over
// every token of the prompts (--prompt, --prompts FILE with one per line, --file as one prompt):
//   Block Influence BI_l = 1 − mean_t cos(resid_pre_l, resid_post_l)
//   update ratios        mean_t ‖attn_out_l‖ / ‖resid_pre_l‖ and mean_t ‖mlp_out_l‖ / ‖resid_mid_l‖
//   angular distance     d(l, n) = mean_t arccos(cos(resid_pre_l, resid_post_{l+n−1})) / π, n = 1..L−l
// (means over the prompts' tokens t). The smallest d(l, n) for each n names the block of n layers
// that changes the stream least — the first candidate to drop. Writes a table to stdout, and with
// --out DIR depth.json, depth.md and depth.svg (the d(l, n) heat map, Gromov's picture).
// --skip: the perplexity of the prompts (prompt logprobs, as `glassbox score` computes it) with nothing
// skipped, with each single layer skipped, and with the least-change block of n = 2..--skip-block
// layers skipped — Gromov's pruning rule — through the glass box's `skip` intervention
// (resid_post = resid_pre), the same op a request may use over HTTP.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/depth.h"
#include "cli/commands.h"
#include "cli/common_flags.h"
#include "cli/glass_flags.h"
#include "cli/report_files.h"
#include "core/mapped_file.h"
#include "tokenizer/tokenizer.h"

namespace gb::cli {
namespace {

struct DepthOptions {
  std::string model, prompt, prompt_ids, prompts_file, file, out;
  int threads = 0;
  bool json = false;
  bool skip = false;
  int skip_block = 4;
  GlassFlags glass;
};

int fail(const std::string& msg) {
  std::fprintf(stderr, "glassbox depth: %s\n", msg.c_str());
  return 1;
}

std::string svg_heat(const std::vector<std::vector<double>>& d, const std::string& title) {
  const int L = static_cast<int>(d.size()), cell = 36, left = 90, top = 50;
  const int w = left + cell * L + 30, h = top + cell * L + 50;
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(w) + "\" height=\"" +
                  std::to_string(h) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + std::to_string(left) + "\" y=\"20\" font-size=\"14\">" + title + "</text>\n";
  s += "<text x=\"" + std::to_string(left) +
       "\" y=\"36\" fill=\"#555\">angular distance d(l, n) between the input "
       "of layer l and the output of layer l+n−1 (dark: 0)</text>\n";
  for (int l = 0; l < L; ++l) {
    s += "<text x=\"" + std::to_string(left - 6) + "\" y=\"" + std::to_string(top + l * cell + cell / 2 + 4) +
         "\" text-anchor=\"end\">from layer " + std::to_string(l) + "</text>\n";
    s += "<text x=\"" + std::to_string(left + l * cell + cell / 2) + "\" y=\"" + std::to_string(top + L * cell + 14) +
         "\" text-anchor=\"middle\">n=" + std::to_string(l + 1) + "</text>\n";
    for (int n = 1; n <= L - l; ++n) {
      const double v = d[static_cast<size_t>(l)][static_cast<size_t>(n - 1)];
      const int g = static_cast<int>(40 + std::min(1.0, v * 2) * 215);
      char fill[16];
      std::snprintf(fill, sizeof(fill), "#%02x%02x%02x", g, g, 255);
      char txt[16];
      std::snprintf(txt, sizeof(txt), "%.2f", v);
      const int x = left + (n - 1) * cell, y = top + l * cell;
      s += "<rect x=\"" + std::to_string(x) + "\" y=\"" + std::to_string(y) + "\" width=\"" + std::to_string(cell - 1) +
           "\" height=\"" + std::to_string(cell - 1) + "\" fill=\"" + fill + "\"/>\n";
      s += "<text x=\"" + std::to_string(x + cell / 2) + "\" y=\"" + std::to_string(y + cell / 2 + 4) +
           "\" text-anchor=\"middle\" fill=\"" + (g < 140 ? "white" : "black") + "\">" + txt + "</text>\n";
    }
  }
  s += "<text x=\"" + std::to_string(left) + "\" y=\"" + std::to_string(h - 10) +
       "\" fill=\"#555\">n: the number of consecutive layers</text>\n";
  return s + "</svg>\n";
}

int run_depth(const DepthOptions& o) {
  std::vector<std::vector<int32_t>> prompts;
  if (!o.prompt_ids.empty()) {
    std::vector<int32_t> ids;
    if (Status st = parse_token_ids(o.prompt_ids, &ids); !st) return fail(st.message());
    prompts.push_back(std::move(ids));
  } else {
    std::vector<std::string> texts;
    if (!o.file.empty()) {
      auto content = read_file(o.file);
      if (!content.is_ok()) return fail(content.message());
      texts.push_back(*content);
    } else {
      auto read = read_prompts(o.prompt, o.prompts_file);
      if (!read.is_ok()) return fail(read.message() + " (or --prompt-ids, --file)");
      texts = std::move(*read);
    }
    auto tok = Tokenizer::load(o.model);
    if (!tok.is_ok()) return fail(tok.message());
    for (const std::string& t : texts) prompts.push_back((*tok)->encode(t, /*add_special=*/true));
  }
  size_t longest = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) return fail("prompt " + std::to_string(i + 1) + " encodes to no tokens");
    if (o.skip && prompts[i].size() < 2)
      return fail("--skip: prompt " + std::to_string(i + 1) + " needs at least 2 tokens to have a perplexity");
    longest = std::max(longest, prompts[i].size());
  }
  auto model = load_model(
      o.model, {.max_batch_tokens = static_cast<int32_t>(std::min<size_t>(longest, 512)), .n_threads = o.threads});
  if (!model.is_ok()) return fail(model.message());
  Model& m = **model;
  const ModelConfig& c = m.config();
  if (static_cast<int64_t>(longest) >= c.max_pos) return fail("a prompt does not fit the model's context");
  auto engine = analysis::local_engine(m, 1, static_cast<int32_t>(longest));
  if (!engine.is_ok()) return fail(engine.message());
  auto steer = load_glass_interventions(o.glass, c);
  if (!steer.is_ok()) return fail(steer.message());
  if (o.skip && *steer != nullptr) return fail("--skip scores the model as it is: leave out --glassbox");
  auto sums = analysis::run_depth(analysis::with_interventions(analysis::local_runner(**engine, "depth"), *steer, c), c,
                                  prompts);
  if (!sums.is_ok()) return fail(sums.message());

  nlohmann::json j = analysis::depth_json(*sums);
  j["model"] = o.model;
  j["n_prompts"] = prompts.size();
  std::string md = analysis::depth_md(*sums);
  const std::vector<std::vector<double>> dist = sums->distances();
  if (o.skip) {
    const bool tty = isatty(2) != 0;
    auto progress = [tty](size_t k, size_t n) {
      if (!tty) return;
      if (k < n) std::fprintf(stderr, "\rskip: %zu / %zu perplexities", k + 1, n);
      if (k == n) std::fprintf(stderr, "\n");
    };
    auto skipped =
        analysis::skip_perplexities(analysis::local_runner(**engine), c, prompts, *sums, o.skip_block, progress);
    if (!skipped.is_ok()) return fail(skipped.message());
    j["skip"] = std::move(skipped->json);
    md += "\n" + skipped->md;
  }
  if (o.json) {
    std::printf("%s\n", json_text(j).c_str());
  } else {
    std::printf("%s, %zu prompt(s), %lld tokens\n\n%s", m.describe().c_str(), prompts.size(),
                static_cast<long long>(sums->n_tokens()), md.c_str());
  }
  if (!o.out.empty()) {
    const Status st = write_report_files("depth", o.out,
                                         {{"depth.json", json_text(j) + "\n"},
                                          {"depth.md", "# Layer contributions: " + m.describe() + "\n\n" + md},
                                          {"depth.svg", svg_heat(dist, "Angular distance between layers")}});
    if (!st) return fail(st.message());
  }
  return 0;
}

}  // namespace

void register_depth(CLI::App& app, Action* action) {
  auto o = std::make_shared<DepthOptions>();
  CLI::App* cmd =
      app.add_subcommand("depth", "What each layer contributes: block influence, update ratios, angular distances");
  add_model_flag(*cmd, &o->model)->required();
  add_glass_flags(*cmd, &o->glass);
  auto* text = cmd->add_option("--prompt,-p", o->prompt, "prompt text");
  auto* ids = cmd->add_option("--prompt-ids", o->prompt_ids, "token ids, e.g. \"1 2 3\" (no tokenizer needed)");
  ids->excludes(text);
  auto* prompts = cmd->add_option("--prompts", o->prompts_file, "a file of prompts, one per line")
                      ->check(CLI::ExistingFile)
                      ->excludes(ids);
  cmd->add_option("--file,-f", o->file, "a text file to use as one prompt")
      ->check(CLI::ExistingFile)
      ->excludes(text)
      ->excludes(ids)
      ->excludes(prompts);
  cmd->add_flag("--skip", o->skip,
                "perplexity of the prompt with each layer, and the least-change block of 2..--skip-block layers, "
                "skipped (resid_post = resid_pre)");
  cmd->add_option("--skip-block", o->skip_block, "the longest block --skip removes (default 4)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--out,-o", o->out, "directory for depth.json, depth.md and depth.svg");
  add_threads_flag(*cmd, &o->threads);
  cmd->add_flag("--json", o->json, "print the JSON instead of the tables");
  cmd->callback([action, o] { *action = [o] { return run_depth(*o); }; });
}

}  // namespace gb::cli
