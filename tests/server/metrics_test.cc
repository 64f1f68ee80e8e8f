// The Prometheus registry's text format and thread safety.
#include <gtest/gtest.h>

#include <thread>

#include "server/metrics.h"

namespace gb::server {
namespace {

TEST(MetricsTest, CountersGaugesAndLabels) {
  MetricsRegistry r;
  r.counter("glassbox_x_total", "X things", {{"status", "200"}}).inc();
  r.counter("glassbox_x_total", "X things", {{"status", "200"}}).inc(2);
  r.counter("glassbox_x_total", "X things", {{"status", "4\"0\\4\n"}}).inc();
  r.gauge("glassbox_g", "A gauge").set(1.5);
  const std::string text = r.render();
  EXPECT_NE(text.find("# HELP glassbox_x_total X things\n# TYPE glassbox_x_total counter\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("glassbox_x_total{status=\"200\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("glassbox_x_total{status=\"4\\\"0\\\\4\\n\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE glassbox_g gauge\nglassbox_g 1.5\n"), std::string::npos) << text;
}

// An info metric whose label values change (lora_requests_info): only the latest set is shown.
TEST(MetricsTest, ReplacedGaugeKeepsOnlyTheLatestLabels) {
  MetricsRegistry r;
  r.replace_gauge("glassbox_info", "Info", {{"running", "a"}}).set(1);
  r.replace_gauge("glassbox_info", "Info", {{"running", "a,b"}}).set(2);
  const std::string text = r.render();
  EXPECT_EQ(text.find("running=\"a\"}"), std::string::npos) << text;
  EXPECT_NE(text.find("glassbox_info{running=\"a,b\"} 2\n"), std::string::npos) << text;
}

TEST(MetricsTest, HistogramBucketsAreCumulative) {
  MetricsRegistry r;
  Histogram& h = r.histogram("glassbox_h_seconds", "H", {0.1, 1}, {{"a", "b"}});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(0.5);
  h.observe(7);
  const std::string text = r.render();
  EXPECT_NE(text.find("# TYPE glassbox_h_seconds histogram\n"
                      "glassbox_h_seconds_bucket{a=\"b\",le=\"0.1\"} 1\n"
                      "glassbox_h_seconds_bucket{a=\"b\",le=\"1\"} 3\n"
                      "glassbox_h_seconds_bucket{a=\"b\",le=\"+Inf\"} 4\n"
                      "glassbox_h_seconds_sum{a=\"b\"} 8.05\n"
                      "glassbox_h_seconds_count{a=\"b\"} 4\n"),
            std::string::npos)
      << text;
}

TEST(MetricsTest, ConcurrentUpdatesAreNotLost) {
  MetricsRegistry r;
  Counter& c = r.counter("glassbox_c_total", "C");
  Histogram& h = r.histogram("glassbox_h", "H", {1});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.inc();
        h.observe(0.5);
        r.counter("glassbox_l_total", "L", {{"k", std::to_string(i % 3)}}).inc();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 40000);
  EXPECT_EQ(h.count(), 40000u);
  EXPECT_NE(r.render().find("glassbox_l_total{k=\"0\"} 13336"), std::string::npos);
}

}  // namespace
}  // namespace gb::server
