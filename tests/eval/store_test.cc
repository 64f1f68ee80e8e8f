// The eval dataset reader, the sample store (round trip, resume, settings that differ) and the
// report of constructed samples.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "eval/dataset.h"
#include "eval/report.h"
#include "eval/stats.h"
#include "eval/store.h"

namespace gb::eval {
namespace {

std::string temp_path(const std::string& name) {
  std::string leaf = "glassbox-eval-test-";
  leaf += std::to_string(getpid());
  const auto dir = std::filesystem::temp_directory_path() / leaf;
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

std::string write(const std::string& name, const std::string& text) {
  const std::string path = temp_path(name);
  std::ofstream(path) << text;
  return path;
}

TEST(EvalDataset, ReadsTheThreeRowKinds) {
  const std::string path = write("rows.jsonl",
                                 "{\"question\": \"2+2?\", \"answer\": \"four\\n#### 4\"}\n"
                                 "\n"
                                 "{\"id\": \"m1\", \"problem\": \"half?\", \"answer\": \"\\\\frac{1}{2}\"}\n"
                                 "{\"id\": 7, \"prompt\": \"Once\", \"expected\": \" upon\"}\n"
                                 "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n");
  auto rows = load_dataset(path, "Q: {question} A:");
  ASSERT_TRUE(rows.is_ok()) << rows.message();
  ASSERT_EQ(rows->size(), 4u);
  const Problem& g = (*rows)[0];
  EXPECT_EQ(g.id, "1");
  EXPECT_EQ(g.kind, TaskKind::kGsm8k);
  EXPECT_EQ(g.reference, "4");
  ASSERT_TRUE(g.chat);
  EXPECT_EQ(g.messages[0]["content"], "Q: 2+2? A:");
  EXPECT_EQ((*rows)[1].id, "m1");
  EXPECT_EQ((*rows)[1].kind, TaskKind::kMath);
  EXPECT_EQ((*rows)[2].id, "7");
  EXPECT_FALSE((*rows)[2].chat);
  EXPECT_EQ((*rows)[2].prompt, "Once");
  EXPECT_EQ((*rows)[2].reference, " upon");
  EXPECT_TRUE((*rows)[3].chat);
  EXPECT_FALSE((*rows)[3].reference.has_value()) << "a row without expected is measured, not graded";
  // The default template is the math prompt.
  auto plain = load_dataset(path);
  ASSERT_TRUE(plain.is_ok());
  EXPECT_EQ((*plain)[0].messages[0]["content"],
            "2+2?\nPlease reason step by step, and put your final answer within \\boxed{}.");
}

TEST(EvalDataset, EveryBadLineIsAnErrorNamingIt) {
  auto error = [](const std::string& text, const std::string& tmpl = "") {
    auto r = load_dataset(write("bad.jsonl", text), tmpl);
    return r.is_ok() ? std::string("ok") : r.message();
  };
  EXPECT_NE(error("{\"prompt\": \"a\"}\nnot json\n").find("bad.jsonl: line 2: not valid JSON"), std::string::npos);
  EXPECT_NE(error("{\"question\": \"q\", \"answer\": \"no hashes\"}\n").find("line 1: \"answer\""), std::string::npos);
  EXPECT_NE(error("{\"question\": \"q\"}\n").find("\"answer\" must be a non-empty string"), std::string::npos);
  EXPECT_NE(error("{\"prompt\": \"a\", \"messages\": []}\n").find("expected GSM8K"), std::string::npos);
  EXPECT_NE(error("{\"messages\": [{\"content\": \"x\"}]}\n").find("\"role\""), std::string::npos);
  EXPECT_NE(error("{\"prompt\": \"a\", \"expected\": 3}\n").find("\"expected\" must be a string"), std::string::npos);
  EXPECT_NE(error("{\"id\": \"x\", \"prompt\": \"a\"}\n{\"id\": \"x\", \"prompt\": \"b\"}\n").find("used twice"),
            std::string::npos);
  EXPECT_NE(error("{\"id\": [1], \"prompt\": \"a\"}\n").find("\"id\""), std::string::npos);
  EXPECT_NE(error("\n\n").find("no rows"), std::string::npos);
  EXPECT_NE(error("{\"prompt\": \"a\"}\n", "no placeholder").find("{question}"), std::string::npos);
  EXPECT_NE(error("[1]\n").find("expected a JSON object"), std::string::npos);
  auto missing = load_dataset(temp_path("does-not-exist.jsonl"));
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.message().find("cannot open"), std::string::npos);
}

TEST(EvalStore, RoundTripResumeAndOtherSettings) {
  const std::string path = temp_path("samples.db");
  std::filesystem::remove(path);
  const nlohmann::json settings = {{"arms", {{{"name", "a"}}}}, {"samples_per_problem", 1}};
  Sample s;
  s.arm = "a";
  s.problem_id = "p|1";
  s.seed = 42;
  s.text = "é\nline";
  s.token_ids = {1, 2, 3};
  s.prompt_tokens = 5;
  s.completion_tokens = 3;
  s.finish_reason = "length";
  s.ttft_ms = 1.5;
  s.latency_ms = 9.25;
  s.itl_ms = {0.5, 0.75};
  s.graded = true;
  s.extracted = "x";
  s.correct = true;
  {
    auto store = EvalStore::open(path, settings);
    ASSERT_TRUE(store.is_ok()) << store.message();
    EXPECT_FALSE(*(*store)->has("a", "p|1", 0));
    ASSERT_TRUE((*store)->insert(s).is_ok());
    EXPECT_TRUE(*(*store)->has("a", "p|1", 0));
    EXPECT_FALSE((*store)->insert(s).is_ok()) << "a stored sample is never written twice";
  }
  // Reopened with the same settings: the sample is there, as it was.
  auto again = EvalStore::open(path, settings);
  ASSERT_TRUE(again.is_ok()) << again.message();
  auto all = (*again)->samples();
  ASSERT_TRUE(all.is_ok());
  ASSERT_EQ(all->size(), 1u);
  const Sample& t = (*all)[0];
  EXPECT_EQ(t.text, s.text);
  EXPECT_EQ(t.token_ids, s.token_ids);
  EXPECT_EQ(t.itl_ms, s.itl_ms);
  EXPECT_EQ(t.finish_reason, "length");
  EXPECT_EQ(t.latency_ms, 9.25);
  EXPECT_TRUE(t.graded && t.correct);
  // Other settings: refused, naming the key.
  nlohmann::json other = settings;
  other["samples_per_problem"] = 2;
  auto refused = EvalStore::open(path, other);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.message().find("other settings (samples_per_problem)"), std::string::npos) << refused.message();
  // open_existing: for eval report; a missing or foreign file is an error.
  EXPECT_TRUE(EvalStore::open_existing(path).is_ok());
  EXPECT_FALSE(EvalStore::open_existing(temp_path("nothing.db")).is_ok());
  const std::string foreign = write("foreign.db", "not sqlite at all, just text");
  EXPECT_FALSE(EvalStore::open_existing(foreign).is_ok());
}

TEST(EvalReport, CountsAndPairsOfConstructedSamples) {
  // Two arms on four problems: base right on all, b right on p0 only; b is truncated twice.
  const nlohmann::json settings = {
      {"arms", {{{"name", "base"}, {"max_tokens", 8}}, {{"name", "b"}, {"max_tokens", 8}}}}, {"expected_samples", 8}};
  std::vector<Sample> samples;
  for (int p = 0; p < 4; ++p) {
    for (const char* arm : {"base", "b"}) {
      Sample s;
      s.arm = arm;
      s.problem_id = "p";
      s.problem_id += std::to_string(p);
      s.graded = true;
      s.correct = std::string(arm) == "base" || p == 0;
      s.completion_tokens = std::string(arm) == "b" && p >= 2 ? 8 : 2 + p;
      s.finish_reason = s.completion_tokens == 8 ? "length" : "stop";
      s.ttft_ms = 10;
      s.latency_ms = 10 + 2.0 * static_cast<double>(s.completion_tokens - 1);
      samples.push_back(s);
    }
  }
  const nlohmann::json r = build_report(settings, samples);
  ASSERT_EQ(r["arms"].size(), 2u);
  const nlohmann::json& b = r["arms"][1];
  EXPECT_EQ(b["accuracy"]["count"], 1);
  EXPECT_EQ(b["accuracy"]["n"], 4);
  EXPECT_EQ(b["truncation"]["count"], 2);
  EXPECT_DOUBLE_EQ(b["length"]["mean"].get<double>(), (2 + 3 + 8 + 8) / 4.0);
  EXPECT_DOUBLE_EQ(b["latency"]["decode_tokens_per_s"].get<double>(), 500.0);  // 1 token per 2 ms
  const nlohmann::json& p = r["paired"][0];
  EXPECT_EQ(p["both_correct"], 1);
  EXPECT_EQ(p["baseline_only"], 3);
  EXPECT_EQ(p["arm_only"], 0);
  EXPECT_DOUBLE_EQ(p["mcnemar_p"].get<double>(), 0.25);  // 2 · 0.5³
  EXPECT_EQ(p["problems_lost"], 3);
  EXPECT_EQ(r["missing_samples"], 0);
  EXPECT_NE(report_markdown(r).find("| b | 4 | 25.0% ["), std::string::npos);
  EXPECT_NE(lengths_svg(r).find("max_tokens 8"), std::string::npos);
}

}  // namespace
}  // namespace gb::eval
