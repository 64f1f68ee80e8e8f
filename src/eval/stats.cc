// The report's statistics, each a short closed formula or scan (docs/ARCHITECTURE.md, "eval").
#include "eval/stats.h"

#include "glass/repetition.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace gb::eval {

Interval wilson_interval(int64_t successes, int64_t n, double z) {
  if (n <= 0) return {0, 1};
  successes = std::clamp<int64_t>(successes, 0, n);
  double nn = static_cast<double>(n);
  double p = static_cast<double>(successes) / nn;
  double z2 = z * z;
  double denom = 1 + z2 / nn;
  double center = (p + z2 / (2 * nn)) / denom;
  double half = z * std::sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn)) / denom;
  Interval r{std::max(0.0, center - half), std::min(1.0, center + half)};
  if (successes == 0) r.lo = 0;
  if (successes == n) r.hi = 1;
  return r;
}

double mcnemar_exact_p(int64_t b, int64_t c) {
  if (b < 0 || c < 0) return std::numeric_limits<double>::quiet_NaN();
  int64_t n = b + c;
  if (n == 0) return 1;
  int64_t m = std::min(b, c);
  if (2 * m >= n) return 1;  // b == c: the lower tail alone holds half the mass
  // P(X <= m) for X ~ Binomial(n, 1/2) = pmf(m) * sum_k pmf(k) / pmf(m); the ratios are
  // pmf(k - 1) / pmf(k) = k / (n - k + 1) < 1 below the mode, so the sum is summed from its
  // largest term down and stops once the terms no longer change it.
  double dn = static_cast<double>(n), dm = static_cast<double>(m);
  double log_pmf_m = std::lgamma(dn + 1) - std::lgamma(dm + 1) - std::lgamma(dn - dm + 1) - dn * std::log(2.0);
  double sum = 1, term = 1;
  for (int64_t k = m; k >= 1; --k) {
    term *= static_cast<double>(k) / static_cast<double>(n - k + 1);
    sum += term;
    if (term < sum * 1e-17) break;
  }
  return std::min(1.0, 2 * std::exp(log_pmf_m + std::log(sum)));
}

double percentile(std::vector<double> values, double q) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  if (values.empty() || !(q >= 0 && q <= 1)) return kNaN;
  if (std::any_of(values.begin(), values.end(), [](double v) { return std::isnan(v); })) return kNaN;
  std::sort(values.begin(), values.end());
  double h = static_cast<double>(values.size() - 1) * q;  // numpy "linear": virtual index (n - 1) q
  size_t below = static_cast<size_t>(std::floor(h));
  if (below + 1 >= values.size()) return values.back();
  double t = h - static_cast<double>(below);
  double a = values[below], b = values[below + 1];
  // numpy's _lerp: from the nearer end, so q = 1 - epsilon cannot overshoot b.
  double diff = b - a;
  return t >= 0.5 ? b - diff * (1 - t) : a + diff * t;
}

Histogram histogram(const std::vector<double>& values, double lo, double hi, int bins) {
  Histogram h;
  h.lo = lo;
  if (bins < 1 || !std::isfinite(lo) || !std::isfinite(hi) || !(hi > lo)) {
    h.width = 0;
    return h;
  }
  h.width = (hi - lo) / bins;
  h.counts.assign(static_cast<size_t>(bins), 0);
  const double scale = bins / (hi - lo);
  auto edge = [&](int64_t i) { return lo + static_cast<double>(i) * h.width; };
  for (double v : values) {
    if (std::isnan(v)) continue;
    int64_t i = 0;
    if (v >= hi) {
      i = bins - 1;
    } else if (v > lo) {
      // numpy's rule: the scaled index, then moved so the value lies within its bin's edges.
      i = std::clamp<int64_t>(static_cast<int64_t>((v - lo) * scale), 0, bins - 1);
      if (v < edge(i)) --i;
      if (i + 1 < bins && v >= edge(i + 1)) ++i;
    }
    ++h.counts[static_cast<size_t>(i)];
  }
  return h;
}

double ngram_repetition_rate(const std::vector<int32_t>& tokens, int n) {
  if (n < 1) return 0.0;
  RepetitionTracker tracker(n);  // the server's measure (glassbox_request_repetition_rate), not a second one
  for (int32_t t : tokens) tracker.push(t);
  return tracker.rate();
}

}  // namespace gb::eval
