// score_tokens (scoring.h).
#include "cli/scoring.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace gb::cli {

double ScoredText::perplexity() const { return std::exp(-mean_logprob()); }

Result<std::unique_ptr<Engine>> scoring_engine(Model& m, int64_t n_tokens) {
  EngineConfig ec;
  ec.scheduler.max_num_seqs = 1;
  ec.scheduler.max_num_batched_tokens = m.max_batch_tokens();
  // The context, but no longer than the text, nor than the automatic KV cache holds (Qwen3's
  // 40960 positions take 9.4 GB of f32 K/V at 0.6B): a text beyond that is scored in windows.
  const int64_t block_bytes = kv_block_bytes(m.config(), ec.block_size, ec.kv_cache_dtype);
  const int64_t fits = block_bytes > 0 ? kAutoKvCacheMaxBytes / block_bytes * ec.block_size : n_tokens;
  ec.max_model_len =
      static_cast<int32_t>(std::max<int64_t>(2, std::min({int64_t{m.config().max_pos}, n_tokens, fits})));
  return Engine::create(&m, ec);
}

Result<ScoredText> score_tokens(Engine& engine, const std::vector<int32_t>& ids,
                                const std::shared_ptr<const GlassSpec>& spec, int32_t top) {
  if (ids.size() < 2)
    return Status::error("the text encodes to " + std::to_string(ids.size()) + " token(s): nothing to score");
  const size_t window = static_cast<size_t>(engine.max_model_len());
  ScoredText out;
  out.tokens.resize(ids.size());
  std::vector<bool> have(ids.size(), false);
  // Windows of the context: tokens [w, w + window); each scores all its tokens but its first.
  for (size_t w = 0; w + 1 < ids.size(); w += window - 1) {
    GenerationRequest r;
    r.id = "score";
    r.prompt.assign(ids.begin() + static_cast<std::ptrdiff_t>(w),
                    ids.begin() + static_cast<std::ptrdiff_t>(std::min(ids.size(), w + window)));
    r.max_tokens = 0;
    r.prompt_logprobs = top;
    r.glass = spec;
    auto channel = std::make_shared<RequestChannel>();
    GB_RETURN_IF_ERROR(engine.submit(std::move(r), channel));
    GB_RETURN_IF_ERROR(engine.run_until_idle());
    size_t at = w + 1;
    for (GenerationEvent ev; channel->pop(&ev, std::chrono::milliseconds(0));) {
      if (ev.finish == FinishReason::kError) return Status::error(ev.error);
      for (GeneratedToken& t : ev.prompt_logprobs) {
        if (at >= ids.size()) return Status::error("the engine scored more tokens than the text has");
        out.tokens[at] = std::move(t);
        have[at++] = true;
      }
    }
  }
  for (size_t i = 1; i < ids.size(); ++i) {
    if (!have[i]) return Status::error("token " + std::to_string(i) + " was not scored");
    out.sum_logprob += out.tokens[i].logprob;
    ++out.n_scored;
  }
  return out;
}

}  // namespace gb::cli
