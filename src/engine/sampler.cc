#include "engine/sampler.h"

#include <algorithm>
#include <array>
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

namespace {

// The vector passes over a vocabulary row: baseline vectors (SSE2 / NEON), four per block.
typedef float Vec __attribute__((vector_size(16)));
typedef int32_t IMask __attribute__((vector_size(16)));
#include "ops/vexp_inl.h"
constexpr size_t kLanes = sizeof(Vec) / sizeof(float);
constexpr size_t kBlock = 4 * kLanes;  // floats per step of a filtered scan
constexpr size_t kSumBlock = 1024;     // floats per partial sum of a draw over the whole row
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline Vec load(const float* p) {
  Vec v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

// Σ e^(v[i]·scale − m) over [0, n), with the terms into terms[] when given. A term is 0 where
// v[i]·scale − m is below −87 (e^−87 is 1.6·10⁻³⁸ of the largest term), NaN or −inf. Float lane
// sums over kSumBlock terms at a time (64 terms ≤ 1 per lane) are added in double. The result
// depends on the values and n only: a seeded draw repeats whatever the batch or the threads.
double exp_sum(const float* v, size_t n, float scale, float m, float* terms) {
  auto term = [&](const Vec& x) {
    const Vec d = x * scale - m;
    Vec e;
    vexp(e, d);
    return d >= -87.0f ? e : Vec{};
  };
  double sum = 0;
  for (size_t b = 0; b < n; b += kSumBlock) {
    const size_t end = std::min(n, b + kSumBlock);
    Vec acc[4] = {};
    size_t i = b;
    for (; i + kBlock <= end; i += kBlock) {
      for (size_t j = 0; j < 4; ++j) {
        const Vec e = term(load(v + i + j * kLanes));
        acc[j] += e;
        if (terms != nullptr) __builtin_memcpy(terms + i + j * kLanes, &e, sizeof e);
      }
    }
    for (; i < end; i += kLanes) {  // the tail through the same lanes (missing ones −inf: term 0)
      float lane[kLanes];
      for (size_t j = 0; j < kLanes; ++j) lane[j] = i + j < end ? v[i + j] : kNegInf;
      const Vec e = term(load(lane));
      acc[0] += e;
      if (terms != nullptr) {
        __builtin_memcpy(lane, &e, sizeof e);
        for (size_t j = 0; j < kLanes && i + j < end; ++j) terms[i + j] = lane[j];
      }
    }
    for (const Vec& a : acc) {
      for (size_t l = 0; l < kLanes; ++l) sum += a[l];
    }
  }
  return sum;
}

// Calls on(i, v[i]·scale) for every i with v[i]·scale > threshold(), in index order; threshold()
// may rise as on() runs. Blocks with no element above it are skipped with vector compares.
template <class Threshold, class On>
void for_each_above(const float* v, size_t n, float scale, Threshold&& threshold, On&& on) {
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    const float t = threshold();
    const IMask hit = (load(v + i) * scale > t) | (load(v + i + kLanes) * scale > t) |
                      (load(v + i + 2 * kLanes) * scale > t) | (load(v + i + 3 * kLanes) * scale > t);
    if ((hit[0] | hit[1] | hit[2] | hit[3]) == 0) continue;
    for (size_t j = i; j < i + kBlock; ++j) {
      const float s = v[j] * scale;
      if (s > threshold()) on(j, s);
    }
  }
  for (; i < n; ++i) {
    const float s = v[i] * scale;
    if (s > threshold()) on(i, s);
  }
}

// (value, id) most likely first: the higher value, then the lower id.
bool by_value(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// The k largest (v[i]·scale, i) by by_value, sorted, into out; NaN and −inf never enter. A heap
// of the k best so far: past the first few thousand elements few beat its worst, and those that
// cannot are skipped a block at a time. Later ids lose ties, so entering needs strictly more.
void select_top(const float* v, size_t n, float scale, size_t k, std::vector<std::pair<float, int32_t>>* out) {
  out->clear();
  if (k == 0) return;
  auto threshold = [&] { return out->size() < k ? kNegInf : out->front().first; };
  for_each_above(v, n, scale, threshold, [&](size_t i, float s) {
    if (out->size() == k) {
      std::pop_heap(out->begin(), out->end(), by_value);  // the worst to the back
      out->back() = {s, static_cast<int32_t>(i)};
    } else {
      out->emplace_back(s, static_cast<int32_t>(i));
    }
    std::push_heap(out->begin(), out->end(), by_value);
  });
  std::sort_heap(out->begin(), out->end(), by_value);
}

// w[i] = e^(c[i].first − mx) for n candidates, through the same vector exp (0 below e^−87);
// returns their sum (float lanes per kSumBlock, added in double).
double weigh(const std::pair<float, int32_t>* c, size_t n, float mx, float* w) {
  double sum = 0;
  auto one = [&](Vec& acc, size_t i, size_t m) {  // candidates [i, i + m), m <= kLanes
    float lane[kLanes];
    for (size_t j = 0; j < kLanes; ++j) lane[j] = j < m ? c[i + j].first : kNegInf;
    const Vec d = load(lane) - mx;
    Vec e;
    vexp(e, d);
    e = d >= -87.0f ? e : Vec{};
    acc += e;
    if (m == kLanes) {
      __builtin_memcpy(w + i, &e, sizeof e);
    } else {
      __builtin_memcpy(lane, &e, sizeof e);
      for (size_t j = 0; j < m; ++j) w[i + j] = lane[j];
    }
  };
  for (size_t b = 0; b < n; b += kSumBlock) {
    const size_t end = std::min(n, b + kSumBlock);
    Vec acc = {};
    size_t i = b;
    for (; i + kLanes <= end; i += kLanes) one(acc, i, kLanes);
    if (i < end) one(acc, i, end - i);
    for (size_t l = 0; l < kLanes; ++l) sum += acc[l];
  }
  return sum;
}

}  // namespace

void log_softmax(std::span<const float> logits, std::span<float> out) {
  const float mx = ops::max_value(logits);
  const float lse = mx + static_cast<float>(std::log(exp_sum(logits.data(), logits.size(), 1.0f, mx, nullptr)));
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - lse;
}

void top_logprobs(std::span<const float> logprobs, int32_t k, std::vector<TokenLogprob>* top) {
  thread_local std::vector<std::pair<float, int32_t>> best;
  top->clear();
  if (k <= 0) return;
  best.reserve(static_cast<size_t>(k));
  select_top(logprobs.data(), logprobs.size(), 1.0f, static_cast<size_t>(k), &best);
  for (const auto& [lp, id] : best) top->push_back({id, lp});
}

Sampler::Sampler(const SamplingParams& params, int32_t vocab_size)
    : params_(params),
      vocab_size_(vocab_size),
      rng_(params.has_seed ? params.seed : std::random_device{}()),
      output_counts_(vocab_size, 0),
      in_prompt_(vocab_size, 0),
      block_sums_((static_cast<size_t>(vocab_size) + kSumBlock - 1) / kSumBlock),
      terms_(kSumBlock) {
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
  const int32_t token = params_.is_greedy() ? ops::argmax({logits, static_cast<size_t>(vocab_size_)}) : draw(logits);
  accept(token);
  return token;
}

int32_t Sampler::draw(const float* logits) {
  // Scaled logits s = logit / T; NaN and −inf are never drawn. A +inf logit, or none that can be
  // drawn, leaves nothing to weigh: the first largest is taken, as greedy would.
  const size_t vocab = static_cast<size_t>(vocab_size_);
  const float inv_t = 1.0f / params_.temperature;
  const float mx_logit = ops::max_value({logits, vocab});
  if (std::isinf(mx_logit)) return ops::argmax({logits, vocab});
  const float mx = mx_logit * inv_t;
  const bool top_k = params_.top_k > 0 && static_cast<size_t>(params_.top_k) < vocab;
  const bool min_p = params_.min_p > 0.0f, top_p = params_.top_p < 1.0f;
  std::uniform_real_distribution<double> uniform(0.0, 1.0);

  if (!top_k && !min_p && !top_p) {
    // The whole row in index order: partial sums per kSumBlock, then the one block the draw
    // falls in is weighed again term by term (the same terms, so the same sums).
    const size_t n_blocks = (vocab + kSumBlock - 1) / kSumBlock;
    double total = 0;
    size_t last = 0;  // the last block with weight
    for (size_t b = 0; b < n_blocks; ++b) {
      block_sums_[b] = exp_sum(logits + b * kSumBlock, std::min(kSumBlock, vocab - b * kSumBlock), inv_t, mx, nullptr);
      total += block_sums_[b];
      if (block_sums_[b] > 0) last = b;
    }
    const double r = uniform(rng_) * total;
    double acc = 0;
    size_t b = 0;
    while (b < last && acc + block_sums_[b] <= r) acc += block_sums_[b++];
    const size_t begin = b * kSumBlock, len = std::min(kSumBlock, vocab - begin);
    exp_sum(logits + begin, len, inv_t, mx, terms_.data());
    int32_t token = -1;
    for (size_t j = 0; j < len; ++j) {
      if (terms_[j] <= 0) continue;
      token = static_cast<int32_t>(begin + j);  // the last one with weight if rounding runs past
      acc += terms_[j];
      if (r < acc) break;
    }
    return token;
  }

  // The candidates that can survive truncation. The first `sure` of them survive top-p whatever
  // follows, in any order (id order); the rest are sorted most likely first (value, then id).
  double total = 0;  // the mass top-p is a share of: after top-k, before min-p
  size_t sure = 0;
  thread_local std::vector<float> w;  // the candidates' weights e^(s − max), grown once per thread
  if (top_k) {
    const size_t k = static_cast<size_t>(params_.top_k);
    if (k <= kHeapTopK) {
      select_top(logits, vocab, inv_t, k, &candidates_);
    } else {
      candidates_.clear();
      for (size_t i = 0; i < vocab; ++i) {
        const float s = logits[i] * inv_t;
        if (s > kNegInf) candidates_.emplace_back(s, static_cast<int32_t>(i));
      }
      const size_t kk = std::min(k, candidates_.size());
      std::partial_sort(candidates_.begin(), candidates_.begin() + kk, candidates_.end(), by_value);
      candidates_.resize(kk);
    }
    w.resize(candidates_.size());
    total = weigh(candidates_.data(), candidates_.size(), mx, w.data());
  } else if (top_p) {
    // The head within 8 nats of the maximum, sorted, when it is short and holds the share;
    // otherwise the mass binned below the maximum (nucleus_bulk) sorts only the bin of the cut.
    total = exp_sum(logits, vocab, inv_t, mx, nullptr);
    const double share = params_.top_p * total;
    collect_above(logits, inv_t, mx - 8.0f);
    bool sorted_head = candidates_.size() <= kSortedHead;
    if (sorted_head) {
      std::sort(candidates_.begin(), candidates_.end(), by_value);
      w.resize(candidates_.size());
      sorted_head = weigh(candidates_.data(), candidates_.size(), mx, w.data()) >= share;
    }
    if (!sorted_head) {
      sure = nucleus_bulk(logits, inv_t, mx, share);
      w.resize(candidates_.size());
      weigh(candidates_.data(), candidates_.size(), mx, w.data());
      double bulk = 0;
      for (size_t i = 0; i < sure; ++i) bulk += w[i];
      if (bulk >= share) {  // rounding put the cut above the bin: the exact walk over all, sorted
        std::sort(candidates_.begin(), candidates_.end(), by_value);
        weigh(candidates_.data(), candidates_.size(), mx, w.data());
        sure = 0;
      }
    }
  } else {
    // min-p alone: its exact test is below; a nat more is collected here.
    collect_above(logits, inv_t, mx + std::log(params_.min_p) - 1.0f);
    w.resize(candidates_.size());
    weigh(candidates_.data(), candidates_.size(), mx, w.data());
  }
  size_t keep = candidates_.size();
  if (keep == 0) return ops::argmax({logits, vocab});
  if (top_p) {
    double cum = 0;
    for (size_t i = 0; i < sure; ++i) cum += w[i];
    cum /= total;
    size_t k = sure;
    while (k < keep) {
      cum += w[k] / total;
      ++k;
      if (cum >= params_.top_p) break;
    }
    keep = std::max<size_t>(k, 1);
  }
  if (min_p) {
    // p_i >= min_p · p_max  <=>  s_i − max >= log(min_p). Both cuts keep a head of the sorted
    // row, so min-p before top-p is the shorter of the two heads: filter what top-p kept.
    const float cut = std::log(params_.min_p);
    size_t k = 0;
    for (size_t i = 0; i < keep; ++i) {
      if (candidates_[i].first - mx >= cut) {
        candidates_[k] = candidates_[i];
        w[k++] = w[i];
      }
    }
    keep = std::max<size_t>(k, 1);  // the maximum always passes
  }
  double kept_total = 0;
  for (size_t i = 0; i < keep; ++i) kept_total += w[i];
  const double r = uniform(rng_) * kept_total;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += w[i];
    if (r < acc) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

void Sampler::collect_above(const float* logits, float inv_t, float floor) {
  candidates_.clear();
  for_each_above(
      logits, static_cast<size_t>(vocab_size_), inv_t, [floor] { return floor; },
      [&](size_t i, float s) { candidates_.emplace_back(s, static_cast<int32_t>(i)); });
}

size_t Sampler::nucleus_bulk(const float* logits, float inv_t, float mx, double share) {
  // The mass per 1/8 nat below the maximum, out to 32 nats (past them a 152k vocabulary holds
  // under 2·10⁻⁹ of it), finds the bin where the share is reached. Tokens in the bins above it
  // are all in the nucleus; those in it decide the cut and are sorted; the bins below are out.
  constexpr int kPerNat = 8, kBins = 32 * kPerNat;
  const auto bin_of = [mx](float s) { return static_cast<int>((mx - s) * static_cast<float>(kPerNat)); };
  std::array<double, kBins> mass{};
  const size_t vocab = static_cast<size_t>(vocab_size_);
  for (size_t b = 0; b < vocab; b += kSumBlock) {
    const size_t len = std::min(kSumBlock, vocab - b);
    exp_sum(logits + b, len, inv_t, mx, terms_.data());
    for (size_t j = 0; j < len; ++j) {
      const float s = logits[b + j] * inv_t;
      if (terms_[j] > 0 && s > mx - 32.0f) mass[static_cast<size_t>(bin_of(s))] += terms_[j];
    }
  }
  int edge = 0;
  for (double cum = 0; edge < kBins - 1 && (cum += mass[static_cast<size_t>(edge)]) < share;) ++edge;
  collect_above(logits, inv_t, mx - static_cast<float>(edge + 1) / kPerNat - 1.0f);
  std::erase_if(candidates_, [&](const auto& c) { return bin_of(c.first) > edge; });
  const auto boundary =
      std::partition(candidates_.begin(), candidates_.end(), [&](const auto& c) { return bin_of(c.first) < edge; });
  std::sort(boundary, candidates_.end(), by_value);
  return static_cast<size_t>(boundary - candidates_.begin());
}

}  // namespace gb
