// The report of a `glassbox eval` run, computed from its stored samples and settings alone (so
// `glassbox eval report` rebuilds exactly what the run wrote): per arm, accuracy with a 95% Wilson
// interval (and GSM8K's strict-match beside it), the truncation rate (finish_reason "length")
// with its interval, finish reasons, output length (mean, p50, p90, p99, max, a histogram), the
// n-gram repetition rate and the share of outputs judged as loops, TTFT, inter-token latency and
// decode tokens/s; between each arm and the first (the baseline), on the (problem, sample) pairs
// both graded, McNemar's exact test and the per-problem wins and losses.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/store.h"

namespace gb::eval {

// The definitions, shared with the server's live metrics (docs/ARCHITECTURE.md "eval").
inline constexpr int kRepetitionNgram = 4;   // n of the n-gram repetition rate (RepetitionTracker)
inline constexpr int kLoopWindow = 64;       // a loop: the last 64 n-grams ...
inline constexpr double kLoopMaxRate = 0.6;  // ... more than 60% of them repeats (stop_on_repetition's default)

// settings: what EvalStore holds ({"arms": [{"name", "max_tokens", ...}], "samples", ...}).
nlohmann::json build_report(const nlohmann::json& settings, const std::vector<Sample>& samples);
std::string report_markdown(const nlohmann::json& report);
// Overlaid output-length distributions with each arm's max_tokens line.
std::string lengths_svg(const nlohmann::json& report);
// Accuracy per arm with its 95% interval.
std::string accuracy_svg(const nlohmann::json& report);

}  // namespace gb::eval
