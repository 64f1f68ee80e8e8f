// Scoring a given text for the local tools (score, depth --skip): every token's log-probability
// given the tokens before it — the engine's prompt logprobs, the ones `echo` + `logprobs` and
// `prompt_logprobs` return over HTTP — and the perplexity exp(−mean log p) over the scored tokens
// (all but the first). A text longer than the context is scored in windows of it, each window
// starting afresh (its first token is context only).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"

namespace gb::cli {

struct ScoredText {
  std::vector<GeneratedToken> tokens;  // [ids.size()]: entry i scores ids[i]; entry 0 is unused
  double sum_logprob = 0;
  int64_t n_scored = 0;
  double mean_logprob() const { return sum_logprob / static_cast<double>(n_scored); }
  double perplexity() const;
};

// An engine for scoring n_tokens on m: one sequence at a time, windows of the model's context, or
// shorter: the text's length, or the tokens the automatic KV cache (kAutoKvCacheMaxBytes) holds.
Result<std::unique_ptr<Engine>> scoring_engine(Model& m, int64_t n_tokens);

// Scores ids (at least 2 tokens) on the engine, under spec (null: the plain model); top: the
// alternatives listed per token.
Result<ScoredText> score_tokens(Engine& engine, const std::vector<int32_t>& ids,
                                const std::shared_ptr<const GlassSpec>& spec, int32_t top = 0);

}  // namespace gb::cli
