// A small Prometheus registry: counters, gauges and fixed-bucket histograms with labels,
// rendered in the text exposition format. Updates are lock-free atomics; only creating a new
// labelled child takes the registry lock, so callers keep references to hot metrics.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace gb::server {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void inc(double v = 1.0) { value_.fetch_add(v, std::memory_order_relaxed); }
  // Mirrors a cumulative count kept elsewhere (e.g. the engine's prefix-cache lookups).
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // upper bounds, ascending; +Inf is implicit
  void observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Per-bucket (not cumulative) counts, the last one the +Inf bucket.
  std::vector<uint64_t> bucket_counts() const;
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  // Replaces the state with a snapshot of a histogram kept elsewhere (same bounds; per-bucket
  // counts, the last the +Inf bucket), e.g. the engine's step durations.
  void load(std::span<const uint64_t> buckets, uint64_t count, double sum);

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // [bounds_.size() + 1]
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0.0};
};

class MetricsRegistry {
 public:
  // Returns the child with these label values, creating family and child on first use. The
  // reference stays valid for the registry's lifetime. Asking for an existing name with another
  // type is a programming error (asserted).
  Counter& counter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& gauge(const std::string& name, const std::string& help, const Labels& labels = {});
  // The family's only child from now on (an info metric whose label values change, like
  // lora_requests_info); references to the family's other children become invalid.
  Gauge& replace_gauge(const std::string& name, const std::string& help, const Labels& labels);
  // Drops one child of a family (an info metric of something no longer there); references to it
  // become invalid. No-op when absent.
  void remove(const std::string& name, const Labels& labels);
  Histogram& histogram(const std::string& name, const std::string& help, const std::vector<double>& bounds,
                       const Labels& labels = {});

  // Prometheus text format 0.0.4, families sorted by name.
  std::string render() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Family {
    Type type;
    std::string help;
    std::vector<double> bounds;
    std::map<std::string, std::unique_ptr<Counter>> counters;  // by rendered label set
    std::map<std::string, std::unique_ptr<Gauge>> gauges;
    std::map<std::string, std::unique_ptr<Histogram>> histograms;
  };
  Family& family(const std::string& name, Type type, const std::string& help);

  mutable std::mutex mutex_;
  std::map<std::string, Family> families_;
};

// Bucket sets shared by the server's histograms.
std::vector<double> latency_buckets();        // seconds, 1 ms .. 10 min
std::vector<double> token_latency_buckets();  // seconds, 1 ms .. 10 s
std::vector<double> token_count_buckets();    // 1 .. 128k, powers of two

// Escapes a label value for the text format (backslash, quote, newline).
std::string escape_label_value(const std::string& v);

}  // namespace gb::server
