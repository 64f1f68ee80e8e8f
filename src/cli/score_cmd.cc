// `glassbox score`: the log-probability of every token of a text given the tokens before it
// (the engine's prompt logprobs, the same ones `echo` + `logprobs` and `prompt_logprobs` return
// over HTTP) and its perplexity, exp(−mean log p) over the scored tokens (all but the first).
// Long texts are scored in windows of the model's context, each window starting afresh
// (scoring.h, which depth --skip shares).
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "cli/common_flags.h"
#include "cli/glass_flags.h"
#include "cli/scoring.h"
#include "core/mapped_file.h"
#include "tokenizer/tokenizer.h"

namespace gb::cli {
namespace {

struct ScoreOptions {
  std::string model, tokenizer, text, file;
  int threads = 0, top = 0;
  bool tokens = false, json = false;
  GlassFlags glass;
};

int fail(const std::string& msg) {
  std::fprintf(stderr, "glassbox score: %s\n", msg.c_str());
  return 1;
}

int run_score(const ScoreOptions& o) {
  if (o.text.empty() == o.file.empty()) return fail("give the text with --text or --file (one of them)");
  std::string text = o.text;
  if (!o.file.empty()) {
    auto content = read_file(o.file);
    if (!content.is_ok()) return fail(content.message());
    text = *content;
  }
  auto tok = Tokenizer::load(o.tokenizer.empty() ? o.model : o.tokenizer);
  if (!tok.is_ok()) return fail(tok.message());
  auto model = load_model(o.model, {.n_threads = o.threads});
  if (!model.is_ok()) return fail(model.message());
  Model& m = **model;
  const std::vector<int32_t> ids = (*tok)->encode(text, /*add_special=*/true);
  if (ids.size() < 2) return fail("the text encodes to " + std::to_string(ids.size()) + " token(s): nothing to score");

  auto glass = load_glass_flags(o.glass, m.config());
  if (!glass.is_ok()) return fail(glass.message());
  if (glass->spec != nullptr && glass->spec->observe.enabled)
    return fail("--glassbox: score applies interventions only (observe with generate or dump)");

  auto engine = scoring_engine(m, static_cast<int64_t>(ids.size()));
  if (!engine.is_ok()) return fail(engine.message());
  auto result = score_tokens(**engine, ids, glass->spec, o.top);
  if (!result.is_ok()) return fail(result.message());
  const std::vector<GeneratedToken>& scored = result->tokens;
  const double sum = result->sum_logprob;
  const size_t n = static_cast<size_t>(result->n_scored);
  const double ppl = result->perplexity();
  // Each token's text as it continues the ones before it (the leading space kept).
  std::vector<std::string> pieces;
  if (o.tokens) {
    StreamDecoder decoder(**tok, /*skip_special=*/false);
    for (int32_t id : ids) pieces.push_back(decoder.push(id));
    if (!pieces.empty()) pieces.back() += decoder.flush();
  }

  if (o.json) {
    nlohmann::json j = {{"model", o.model},
                        {"n_tokens", ids.size()},
                        {"n_scored", n},
                        {"sum_logprob", sum},
                        {"mean_logprob", sum / static_cast<double>(n)},
                        {"perplexity", ppl}};
    if (o.tokens) {
      nlohmann::json toks = nlohmann::json::array();
      for (size_t i = 0; i < ids.size(); ++i) {
        nlohmann::json t = {{"id", ids[i]}, {"text", pieces[i]}};
        if (i > 0) {
          t["logprob"] = scored[i].logprob;
          t["rank"] = scored[i].rank;
          nlohmann::json top = nlohmann::json::array();
          for (const TokenLogprob& a : scored[i].top) top.push_back({{"id", a.token}, {"logprob", a.logprob}});
          if (o.top > 0) t["top"] = std::move(top);
        }
        toks.push_back(std::move(t));
      }
      j["tokens"] = std::move(toks);
    }
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  if (o.tokens) {
    std::printf("%6s %8s %10s %6s  %s\n", "pos", "id", "logprob", "rank", "token");
    for (size_t i = 1; i < ids.size(); ++i) {
      std::printf("%6zu %8d %10.4f %6d  %s\n", i, ids[i], scored[i].logprob, scored[i].rank,
                  nlohmann::json(pieces[i]).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    }
  }
  std::printf("%zu tokens, %zu scored: mean logprob %.5f, perplexity %.4f\n", ids.size(), n,
              sum / static_cast<double>(n), ppl);
  return 0;
}

}  // namespace

void register_score(CLI::App& app, Action* action) {
  auto o = std::make_shared<ScoreOptions>();
  CLI::App* cmd = app.add_subcommand("score", "Log-probability of every token of a text, and its perplexity");
  add_model_flag(*cmd, &o->model)->required();
  cmd->add_option("--text", o->text, "the text to score");
  cmd->add_option("--file,-f", o->file, "a file whose contents to score")->check(CLI::ExistingFile);
  add_tokenizer_flag(*cmd, &o->tokenizer, " (default: the model's own)");
  add_threads_flag(*cmd, &o->threads);
  add_glass_flags(*cmd, &o->glass);
  cmd->add_flag("--tokens", o->tokens, "list every token with its logprob and rank");
  cmd->add_option("--top", o->top, "alternatives per token (with --tokens --json)")->check(CLI::Range(0, 100));
  cmd->add_flag("--json", o->json, "print one JSON object");
  cmd->callback([action, o] { *action = [o] { return run_score(*o); }; });
}

}  // namespace gb::cli
