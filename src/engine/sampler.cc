#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/argmax.h"

namespace gb {

Status SamplingParams::validate(int32_t vocab_size) const {
  auto bad = [](const std::string& field, const std::string& why) { return Status::error(field + " " + why); };
  if (!std::isfinite(temperature) || temperature < 0.0f || temperature > 100.0f)
    return bad("temperature", "must be between 0 and 100");
  if (top_k < -1) return bad("top_k", "must be -1, 0 (off) or a positive number");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return bad("top_p", "must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return bad("min_p", "must be in [0, 1]");
  if (!(repetition_penalty > 0.0f && repetition_penalty <= 100.0f))
    return bad("repetition_penalty", "must be in (0, 100]");
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) return bad("presence_penalty", "must be in [-2, 2]");
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) return bad("frequency_penalty", "must be in [-2, 2]");
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab_size)
      return bad("logit_bias", "has token id " + std::to_string(id) + " outside the vocabulary [0, " +
                                   std::to_string(vocab_size) + ")");
    if (!std::isfinite(bias) || bias < -100.0f || bias > 100.0f)
      return bad("logit_bias", "values must be in [-100, 100]");
  }
  return Status::ok();
}

void log_softmax(std::span<const float> logits, std::span<float> out) {
  float mx = -std::numeric_limits<float>::infinity();
  for (float v : logits) mx = std::max(mx, v);
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  const float lse = mx + static_cast<float>(std::log(sum));
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - lse;
}

void top_logprobs(std::span<const float> logprobs, int32_t k, std::vector<TokenLogprob>* top) {
  const int32_t vocab = static_cast<int32_t>(logprobs.size());
  k = std::min(k, vocab);
  top->clear();
  top->reserve(k + 1);
  for (int32_t i = 0; i < vocab && k > 0; ++i) {
    const float lp = logprobs[i];
    if (static_cast<int32_t>(top->size()) == k && lp <= top->back().logprob) continue;
    auto pos = std::find_if(top->begin(), top->end(), [&](const TokenLogprob& t) { return lp > t.logprob; });
    top->insert(pos, {i, lp});
    if (static_cast<int32_t>(top->size()) > k) top->pop_back();
  }
}

Sampler::Sampler(const SamplingParams& params, int32_t vocab_size)
    : params_(params),
      vocab_size_(vocab_size),
      rng_(params.has_seed ? params.seed : std::random_device{}()),
      output_counts_(vocab_size, 0),
      in_prompt_(vocab_size, 0) {
  candidates_.reserve(vocab_size);
  seen_.reserve(1024);
}

void Sampler::set_prompt(std::span<const int32_t> prompt) {
  for (int32_t t : prompt) {
    if (t < 0 || t >= vocab_size_) continue;
    if (!in_prompt_[t] && output_counts_[t] == 0) seen_.push_back(t);
    in_prompt_[t] = 1;
  }
}

void Sampler::accept(int32_t token) {
  if (token < 0 || token >= vocab_size_) return;
  if (!in_prompt_[token] && output_counts_[token] == 0) seen_.push_back(token);
  ++output_counts_[token];
}

GeneratedToken Sampler::sample(float* logits, int32_t top_k_logprobs, std::span<float> scratch) {
  GeneratedToken gen{};
  const std::span<const float> row(logits, static_cast<size_t>(vocab_size_));
  if (top_k_logprobs >= 0) log_softmax(row, scratch);  // before sample() edits the logits
  gen.token = sample(logits);
  if (top_k_logprobs >= 0) {
    gen.logprob = scratch[gen.token];
    top_logprobs(scratch.first(static_cast<size_t>(vocab_size_)), top_k_logprobs, &gen.top);
  }
  return gen;
}

void Sampler::apply_penalties(float* logits) const {
  const float rep = params_.repetition_penalty;
  const float pres = params_.presence_penalty, freq = params_.frequency_penalty;
  if (rep == 1.0f && pres == 0.0f && freq == 0.0f) return;
  for (int32_t t : seen_) {
    const int32_t count = output_counts_[t];
    float& l = logits[t];
    if (rep != 1.0f) l = l > 0.0f ? l / rep : l * rep;
    if (count > 0) l -= pres + freq * static_cast<float>(count);
  }
}

int32_t Sampler::sample(float* logits) {
  for (const auto& [id, bias] : params_.logit_bias) logits[id] += bias;
  apply_penalties(logits);

  int32_t token;
  if (params_.is_greedy()) {
    token = ops::argmax({logits, static_cast<size_t>(vocab_size_)});
  } else {
    // Candidates as (logit / T, id), then truncated by top-k, min-p and top-p in that order.
    const float inv_t = 1.0f / params_.temperature;
    candidates_.clear();
    for (int32_t i = 0; i < vocab_size_; ++i) {
      if (std::isfinite(logits[i]) || logits[i] > 0) candidates_.emplace_back(logits[i] * inv_t, i);
    }
    auto by_logit = [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    size_t n = candidates_.size();
    if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n) {
      std::nth_element(candidates_.begin(), candidates_.begin() + params_.top_k, candidates_.end(), by_logit);
      n = static_cast<size_t>(params_.top_k);
    }
    float mx = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < n; ++i) mx = std::max(mx, candidates_[i].first);
    double total = 0;
    for (size_t i = 0; i < n; ++i) total += std::exp(static_cast<double>(candidates_[i].first - mx));
    size_t keep = n;
    const float min_p_cut = params_.min_p > 0.0f ? std::log(params_.min_p) : -std::numeric_limits<float>::infinity();
    if (params_.top_p < 1.0f || params_.min_p > 0.0f) {
      // top-p and min-p need the head of the distribution in order. Sorting the whole
      // vocabulary costs milliseconds for 150k tokens; the first 256 candidates almost always
      // hold what survives, so sort those and fall back to a full sort only if they do not.
      size_t sorted = std::min<size_t>(n, 256);
      std::partial_sort(candidates_.begin(), candidates_.begin() + sorted, candidates_.begin() + n, by_logit);
      if (sorted < n) {
        double head = 0;
        for (size_t i = 0; i < sorted; ++i) head += std::exp(static_cast<double>(candidates_[i].first - mx));
        const bool top_p_inside = params_.top_p < 1.0f && head >= params_.top_p * total;
        const bool min_p_inside = params_.min_p > 0.0f && candidates_[sorted - 1].first - mx < min_p_cut;
        if (top_p_inside || min_p_inside) {
          keep = sorted;
        } else {
          std::sort(candidates_.begin(), candidates_.begin() + n, by_logit);
        }
      }
    }
    if (params_.min_p > 0.0f) {
      // p_i >= min_p * p_max  <=>  logit_i - max >= log(min_p)
      size_t k = 0;
      while (k < keep && candidates_[k].first - mx >= min_p_cut) ++k;
      keep = std::max<size_t>(k, 1);
    }
    if (params_.top_p < 1.0f) {
      double cum = 0;
      size_t k = 0;
      while (k < keep) {
        cum += std::exp(static_cast<double>(candidates_[k].first - mx)) / total;
        ++k;
        if (cum >= params_.top_p) break;
      }
      keep = std::max<size_t>(k, 1);
    }
    double kept_total = 0;
    for (size_t i = 0; i < keep; ++i) kept_total += std::exp(static_cast<double>(candidates_[i].first - mx));
    std::uniform_real_distribution<double> uniform(0.0, kept_total);
    const double r = uniform(rng_);
    double acc = 0;
    token = candidates_[keep - 1].second;
    for (size_t i = 0; i < keep; ++i) {
      acc += std::exp(static_cast<double>(candidates_[i].first - mx));
      if (r < acc) {
        token = candidates_[i].second;
        break;
      }
    }
  }
  accept(token);
  return token;
}

}  // namespace gb
