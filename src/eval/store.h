// The samples of one `glassbox eval` run, in SQLite (DIR/samples.db), each written as it finishes
// (WAL, one transaction per sample: a killed run keeps every sample it finished). The run's
// settings are stored beside them; re-running the same command on the same store resumes it (a
// sample already stored is never recomputed), and a store made with other settings is refused
// with the settings that differ. `glassbox eval report` rebuilds the report from the store alone.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

struct sqlite3;

namespace gb::eval {

struct Sample {
  std::string arm, problem_id;
  int32_t sample = 0;  // 0 .. samples-1
  int64_t seed = 0;
  std::string text;
  std::vector<int32_t> token_ids;  // empty when the server does not name token ids
  int64_t prompt_tokens = 0, completion_tokens = 0;
  std::string finish_reason;  // "stop", "length", ...
  double ttft_ms = 0, latency_ms = 0;
  std::vector<double> itl_ms;  // gaps between streamed chunks after the first
  // Grading (graded = false: the row has no reference answer).
  bool graded = false;
  std::string extracted, strict_extracted;
  bool correct = false, strict_correct = false;
};

class EvalStore {
 public:
  // Creates the store or opens it to resume: an existing store must hold the same settings
  // (the error lists the keys that differ).
  static Result<std::unique_ptr<EvalStore>> open(const std::string& path, const nlohmann::json& settings);
  // An existing store, read-only use (eval report).
  static Result<std::unique_ptr<EvalStore>> open_existing(const std::string& path);
  ~EvalStore();
  EvalStore(const EvalStore&) = delete;
  EvalStore& operator=(const EvalStore&) = delete;

  const nlohmann::json& settings() const { return settings_; }
  // Committed when it returns; thread-safe. A sample already stored is an error.
  Status insert(const Sample& s);
  // Every stored sample, ordered by arm, problem and sample index.
  Result<std::vector<Sample>> samples() const;
  // Whether (arm, problem, sample) is stored.
  Result<bool> has(const std::string& arm, const std::string& problem_id, int32_t sample) const;

 private:
  EvalStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  static Result<std::unique_ptr<EvalStore>> open_db(const std::string& path, bool create);
  Status exec(const char* sql) const;
  sqlite3* db_;
  std::string path_;
  nlohmann::json settings_;
  mutable std::mutex mu_;
};

}  // namespace gb::eval
