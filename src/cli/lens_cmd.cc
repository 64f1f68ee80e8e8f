// `glassbox lens`: the logit lens (nostalgebraist 2020; the picture the tuned lens refines). For a
// prompt, every layer's resid_post at every position is put through the model's own output head
// (final RMSNorm, lm_head): the top-k next tokens with their probabilities, and the entropy of
// that distribution. The hidden states come from one engine request whose glass spec captures
// them (capture.h); at the last layer the lens is the model's own next-token distribution.
// Writes a table to stdout, and with --out DIR lens.json, lens.md and lens.svg (a layer × position
// heat map of the top-1 probability, labelled with the top-1 token).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/lens.h"
#include "cli/commands.h"
#include "cli/common_flags.h"
#include "cli/glass_flags.h"
#include "cli/report_files.h"
#include "engine/sampler.h"
#include "tokenizer/tokenizer.h"

namespace gb::cli {
namespace {

struct LensOptions {
  std::string model, prompt, out;
  int threads = 0, top_k = 3;
  bool json = false;
  GlassFlags glass;
};

int fail(const std::string& msg) {
  std::fprintf(stderr, "glassbox lens: %s\n", msg.c_str());
  return 1;
}

using Cell = analysis::LensCell;

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// A readable label: whitespace made visible, cut to `max` bytes at a character boundary.
std::string label(std::string s, size_t max = 12) {
  for (char& c : s) {
    if (c == '\n') c = ' ';
  }
  if (s.size() > max) {
    size_t cut = max;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    s = s.substr(0, cut) + "…";
  }
  return s;
}

// Top-1 probability as a colour from pale to dark blue.
std::string colour(double p) {
  const int r = static_cast<int>(247 - p * (247 - 8)), g = static_cast<int>(251 - p * (251 - 48)),
            b = static_cast<int>(255 - p * (255 - 107));
  char buf[16];
  std::snprintf(buf, sizeof(buf), "#%02x%02x%02x", r, g, b);
  return buf;
}

std::string svg(const std::vector<std::vector<Cell>>& cells, const std::vector<std::string>& inputs,
                const std::function<std::string(int32_t)>& text, const std::string& title) {
  const int cw = 84, ch = 26, left = 70, top = 60, n_layers = static_cast<int>(cells.size()),
            n_pos = static_cast<int>(inputs.size());
  const int w = left + cw * n_pos + 20, h = top + ch * n_layers + 50;
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(w) + "\" height=\"" +
                  std::to_string(h) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + std::to_string(left) + "\" y=\"20\" font-size=\"14\">" + xml_escape(title) + "</text>\n";
  s += "<text x=\"" + std::to_string(left) +
       "\" y=\"38\" fill=\"#555\">cell: the lens' top-1 next token at (layer, "
       "position); shade: its probability (white 0 → dark 1)</text>\n";
  for (int p = 0; p < n_pos; ++p) {
    s += "<text x=\"" + std::to_string(left + p * cw + cw / 2) + "\" y=\"" + std::to_string(top - 6) +
         "\" text-anchor=\"middle\" font-weight=\"bold\">" + xml_escape(label(inputs[static_cast<size_t>(p)])) +
         "</text>\n";
  }
  for (int l = 0; l < n_layers; ++l) {
    // Last layer at the top, as the lens pictures read (the output is where the stream ends).
    const int row = n_layers - 1 - l;
    const int y = top + row * ch;
    s += "<text x=\"" + std::to_string(left - 8) + "\" y=\"" + std::to_string(y + ch / 2 + 4) +
         "\" text-anchor=\"end\">layer " + std::to_string(l) + "</text>\n";
    for (int p = 0; p < n_pos; ++p) {
      const Cell& c = cells[static_cast<size_t>(l)][static_cast<size_t>(p)];
      const double prob = c.top.empty() ? 0 : std::exp(static_cast<double>(c.top[0].logprob));
      s += "<rect x=\"" + std::to_string(left + p * cw) + "\" y=\"" + std::to_string(y) + "\" width=\"" +
           std::to_string(cw - 1) + "\" height=\"" + std::to_string(ch - 1) + "\" fill=\"" + colour(prob) +
           "\"><title>" + xml_escape(c.top.empty() ? "" : text(c.top[0].token)) + " p=" + std::to_string(prob) +
           "</title></rect>\n";
      s += "<text x=\"" + std::to_string(left + p * cw + cw / 2) + "\" y=\"" + std::to_string(y + ch / 2 + 4) +
           "\" text-anchor=\"middle\" fill=\"" + (prob > 0.55 ? "white" : "black") + "\">" +
           xml_escape(label(c.top.empty() ? "" : text(c.top[0].token))) + "</text>\n";
    }
  }
  s += "<text x=\"" + std::to_string(left) + "\" y=\"" + std::to_string(top + ch * n_layers + 24) +
       "\" fill=\"#555\">columns: the input token at each position; the lens there predicts the next one</text>\n";
  return s + "</svg>\n";
}

int run_lens(const LensOptions& o) {
  auto tok = Tokenizer::load(o.model);
  if (!tok.is_ok()) return fail(tok.message());
  const std::vector<int32_t> ids = (*tok)->encode(o.prompt, /*add_special=*/true);
  if (ids.empty()) return fail("the prompt encodes to no tokens");
  auto model = load_model(
      o.model, {.max_batch_tokens = static_cast<int32_t>(std::min<size_t>(ids.size(), 512)), .n_threads = o.threads});
  if (!model.is_ok()) return fail(model.message());
  Model& m = **model;
  const ModelConfig& c = m.config();
  if (static_cast<int64_t>(ids.size()) >= c.max_pos) return fail("the prompt does not fit the model's context");
  auto engine = analysis::local_engine(m, 1, static_cast<int32_t>(ids.size()));
  if (!engine.is_ok()) return fail(engine.message());
  auto head = [&](const float* x, int64_t n, float* logits) {
    m.output_head(x, n, logits);
    return Status::ok();
  };
  auto steer = load_glass_interventions(o.glass, c);
  if (!steer.is_ok()) return fail(steer.message());
  auto grid = analysis::run_lens(analysis::with_interventions(analysis::local_runner(**engine, "lens"), *steer, c), c,
                                 ids, head, o.top_k);
  if (!grid.is_ok()) return fail(grid.message());
  const analysis::LensGrid& cells = *grid;
  auto text = [&](int32_t id) { return (*tok)->decode(std::span<const int32_t>(&id, 1), /*skip_special=*/false); };
  std::vector<std::string> inputs;
  for (int32_t id : ids) inputs.push_back(text(id));
  nlohmann::json j = analysis::lens_json(cells, ids, text);
  j["model"] = o.model;
  j["prompt"] = o.prompt;
  j["top_k"] = o.top_k;

  // The table: a row per layer (last first), a column per position, the top-1 token and its probability.
  std::string md = "| layer |";
  for (const std::string& in : inputs) md += " " + label(in) + " |";
  md += "\n| --- |";
  for (size_t p = 0; p < inputs.size(); ++p) md += " --- |";
  md += "\n";
  for (int32_t l = c.n_layers - 1; l >= 0; --l) {
    md += "| " + std::to_string(l) + " |";
    for (const Cell& cell : cells[static_cast<size_t>(l)]) {
      char prob[16];
      std::snprintf(prob, sizeof(prob), "%.2f", cell.top.empty() ? 0.0 : std::exp(cell.top[0].logprob));
      md += " " + json_text(label(cell.top.empty() ? "" : text(cell.top[0].token))) + " " + prob + " |";
    }
    md += "\n";
  }
  if (o.json) {
    std::printf("%s\n", json_text(j).c_str());
  } else {
    std::printf("logit lens of %s (resid_post, top-1 next token and its probability)\n\n%s", m.describe().c_str(),
                md.c_str());
  }
  if (!o.out.empty()) {
    const Status st =
        write_report_files("lens", o.out,
                           {{"lens.json", json_text(j) + "\n"},
                            {"lens.md", "# Logit lens: " + m.describe() + "\n\nPrompt: `" + o.prompt + "`\n\n" + md},
                            {"lens.svg", svg(cells, inputs, text, "Logit lens — " + m.describe())}});
    if (!st) return fail(st.message());
  }
  return 0;
}

}  // namespace

void register_lens(CLI::App& app, Action* action) {
  auto o = std::make_shared<LensOptions>();
  CLI::App* cmd = app.add_subcommand("lens", "Logit lens: each layer's top next tokens at every position of a prompt");
  add_model_flag(*cmd, &o->model)->required();
  add_glass_flags(*cmd, &o->glass);
  cmd->add_option("--prompt,-p", o->prompt, "prompt text")->required();
  cmd->add_option("--top-k,-k", o->top_k, "tokens per cell in the JSON")
      ->capture_default_str()
      ->check(CLI::Range(1, 50));
  cmd->add_option("--out,-o", o->out, "directory for lens.json, lens.md and lens.svg");
  add_threads_flag(*cmd, &o->threads);
  cmd->add_flag("--json", o->json, "print the JSON instead of the table");
  cmd->callback([action, o] { *action = [o] { return run_lens(*o); }; });
}

}  // namespace gb::cli
