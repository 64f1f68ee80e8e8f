// The Prometheus registry and text rendering.
#include "server/metrics.h"

#include <cassert>
#include <charconv>
#include <cmath>

namespace gb::server {

namespace {

std::string format_number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, p);
}

std::string render_labels(const Labels& labels) {
  if (labels.empty()) return "";
  std::string s = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) s += ',';
    s += labels[i].first + "=\"" + escape_label_value(labels[i].second) + "\"";
  }
  return s + "}";
}

// Adds one label to an already rendered label set ("{a=\"b\"}" + le -> "{a=\"b\",le=\"1\"}").
std::string with_label(const std::string& rendered, const std::string& name, const std::string& value) {
  const std::string extra = name + "=\"" + value + "\"";
  if (rendered.empty()) return "{" + extra + "}";
  return rendered.substr(0, rendered.size() - 1) + "," + extra + "}";
}

}  // namespace

std::string escape_label_value(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;  // buckets are few; a linear scan is fastest
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

void Histogram::load(std::span<const uint64_t> buckets, uint64_t count, double sum) {
  assert(buckets.size() == bounds_.size() + 1);
  for (size_t i = 0; i < buckets.size(); ++i) buckets_[i].store(buckets[i], std::memory_order_relaxed);
  count_.store(count, std::memory_order_relaxed);
  sum_.store(sum, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::bucket_counts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = buckets_[i].load(std::memory_order_relaxed);
  return out;
}

MetricsRegistry::Family& MetricsRegistry::family(const std::string& name, Type type, const std::string& help) {
  auto [it, inserted] = families_.try_emplace(name);
  if (inserted) {
    it->second.type = type;
    it->second.help = help;
  }
  assert(it->second.type == type);
  return it->second;
}

Counter& MetricsRegistry::counter(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = family(name, Type::kCounter, help).counters[render_labels(labels)];
  if (!slot) slot = std::make_unique<Counter>();
  return *slot;
}

Gauge& MetricsRegistry::gauge(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = family(name, Type::kGauge, help).gauges[render_labels(labels)];
  if (!slot) slot = std::make_unique<Gauge>();
  return *slot;
}

Gauge& MetricsRegistry::replace_gauge(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& gauges = family(name, Type::kGauge, help).gauges;
  const std::string key = render_labels(labels);
  std::erase_if(gauges, [&](const auto& kv) { return kv.first != key; });
  auto& slot = gauges[key];
  if (!slot) slot = std::make_unique<Gauge>();
  return *slot;
}

void MetricsRegistry::remove(const std::string& name, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = families_.find(name);
  if (it == families_.end()) return;
  const std::string key = render_labels(labels);
  it->second.counters.erase(key);
  it->second.gauges.erase(key);
  it->second.histograms.erase(key);
}

Histogram& MetricsRegistry::histogram(const std::string& name, const std::string& help,
                                      const std::vector<double>& bounds, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mutex_);
  Family& f = family(name, Type::kHistogram, help);
  if (f.bounds.empty()) f.bounds = bounds;
  auto& slot = f.histograms[render_labels(labels)];
  if (!slot) slot = std::make_unique<Histogram>(f.bounds);
  return *slot;
}

std::string MetricsRegistry::render() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  for (const auto& [name, f] : families_) {
    static const char* kTypeNames[] = {"counter", "gauge", "histogram"};
    out += "# HELP " + name + " " + f.help + "\n";
    out += "# TYPE " + name + " " + kTypeNames[static_cast<int>(f.type)] + "\n";
    for (const auto& [labels, c] : f.counters) out += name + labels + " " + format_number(c->value()) + "\n";
    for (const auto& [labels, g] : f.gauges) out += name + labels + " " + format_number(g->value()) + "\n";
    for (const auto& [labels, h] : f.histograms) {
      const std::vector<uint64_t> counts = h->bucket_counts();
      uint64_t cumulative = 0;
      for (size_t i = 0; i < counts.size(); ++i) {
        cumulative += counts[i];
        const std::string le = i < h->bounds().size() ? format_number(h->bounds()[i]) : "+Inf";
        out += name + "_bucket" + with_label(labels, "le", le) + " " + std::to_string(cumulative) + "\n";
      }
      out += name + "_sum" + labels + " " + format_number(h->sum()) + "\n";
      // The count is the +Inf bucket, so a scrape between the bucket and count updates of a
      // concurrent observe() still renders a consistent histogram.
      out += name + "_count" + labels + " " + std::to_string(cumulative) + "\n";
    }
  }
  return out;
}

std::vector<double> latency_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0};
}

std::vector<double> token_latency_buckets() {
  return {0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1,
          0.15,  0.2,   0.3,  0.4,   0.5,  0.75,  1.0,  2.5,  5.0,  7.5,   10.0};
}

std::vector<double> token_count_buckets() {
  std::vector<double> b;
  for (double v = 1; v <= 131072; v *= 2) b.push_back(v);
  return b;
}

}  // namespace gb::server
