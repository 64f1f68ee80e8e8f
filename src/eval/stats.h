// The statistics of an eval report: Wilson intervals, McNemar's exact test, percentiles,
// histograms, and the repetition measure of an output's tokens.
#pragma once

#include <cstdint>
#include <vector>

namespace gb::eval {

struct Interval {
  double lo = 0, hi = 0;
};
// The Wilson score interval of successes / n at normal quantile z (default: 95%). n <= 0 -> {0, 1};
// successes is clamped into [0, n]. lo is exactly 0 at 0 successes and hi exactly 1 at n.
Interval wilson_interval(int64_t successes, int64_t n, double z = 1.959963984540054);

// McNemar's exact test: two-sided p-value for b discordant pairs one way and c the other
// (binomial(b + c, 0.5), doubled one tail, capped at 1; b + c == 0 -> 1). Exact for large b + c too
// (log-space). Negative counts -> NaN.
double mcnemar_exact_p(int64_t b, int64_t c);

// q in [0, 1]; linear interpolation between closest ranks (numpy's default "linear"); empty, q
// outside [0, 1] or any NaN among the values -> NaN (numpy: NaN when a value is NaN).
double percentile(std::vector<double> values, double q);

struct Histogram {
  double lo = 0, width = 1;
  std::vector<int64_t> counts;  // [bins]; bin i holds [lo + i * width, lo + (i + 1) * width), the last also hi
};
// `bins` equal bins over [lo, hi]; values outside clamp into the end bins, NaNs are not counted.
// bins < 1, a non-finite bound or hi <= lo -> no counts (counts empty, width 0).
Histogram histogram(const std::vector<double>& values, double lo, double hi, int bins);

// Repetition of a token (or word) sequence: the share of its n-grams (n = 4 default) that already
// occurred earlier in the sequence (overlaps count); 0 for sequences shorter than n + 1 or n < 1.
// It is the server's RepetitionTracker (glassbox_request_repetition_rate, stop_on_repetition).
double ngram_repetition_rate(const std::vector<int32_t>& tokens, int n = 4);

}  // namespace gb::eval
