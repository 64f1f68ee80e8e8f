#include "eval/store.h"

#include <sqlite3.h>

namespace gb::eval {

namespace {

constexpr int kSchemaVersion = 1;

constexpr const char* kSchema =
    "CREATE TABLE IF NOT EXISTS run (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS samples ("
    " arm TEXT NOT NULL, problem_id TEXT NOT NULL, sample INTEGER NOT NULL, seed INTEGER NOT NULL,"
    " text TEXT NOT NULL, token_ids TEXT NOT NULL, prompt_tokens INTEGER NOT NULL,"
    " completion_tokens INTEGER NOT NULL, finish_reason TEXT NOT NULL, ttft_ms REAL NOT NULL,"
    " latency_ms REAL NOT NULL, itl_ms TEXT NOT NULL, graded INTEGER NOT NULL, extracted TEXT NOT NULL,"
    " correct INTEGER NOT NULL, strict_extracted TEXT NOT NULL, strict_correct INTEGER NOT NULL,"
    " finished_ms INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),"
    " PRIMARY KEY (arm, problem_id, sample));";

std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

// RAII for a prepared statement.
struct Stmt {
  sqlite3_stmt* s = nullptr;
  ~Stmt() { sqlite3_finalize(s); }
};

std::string column_text(sqlite3_stmt* s, int i) {
  const unsigned char* t = sqlite3_column_text(s, i);
  return t == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(t), sqlite3_column_bytes(s, i));
}

}  // namespace

EvalStore::~EvalStore() { sqlite3_close(db_); }

Status EvalStore::exec(const char* sql) const {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) == SQLITE_OK) return Status::ok();
  std::string msg = err != nullptr ? err : sqlite3_errmsg(db_);
  sqlite3_free(err);
  return Status::error("eval store " + path_ + ": " + msg);
}

Result<std::unique_ptr<EvalStore>> EvalStore::open_db(const std::string& path, bool create) {
  sqlite3* db = nullptr;
  const int flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_FULLMUTEX;
  if (int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr); rc != SQLITE_OK) {
    std::string msg = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return Status::error("eval store " + path + ": " + msg);
  }
  sqlite3_busy_timeout(db, 10000);
  std::unique_ptr<EvalStore> store(new EvalStore(db, path));
  // A killed run loses nothing it committed (WAL); NORMAL is durable across a process kill.
  GB_RETURN_IF_ERROR(store->exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"));
  Stmt v;
  sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &v.s, nullptr);
  const int version = sqlite3_step(v.s) == SQLITE_ROW ? sqlite3_column_int(v.s, 0) : -1;
  if (version > kSchemaVersion)
    return Status::error("eval store " + path + ": schema version " + std::to_string(version) +
                         " is newer than this glassbox reads");
  if (version == 0) {
    Stmt t;
    sqlite3_prepare_v2(db, "SELECT count(*) FROM sqlite_master", -1, &t.s, nullptr);
    if (sqlite3_step(t.s) == SQLITE_ROW && sqlite3_column_int(t.s, 0) > 0)
      return Status::error("eval store " + path + ": not a glassbox eval store (it has other tables)");
    if (!create) return Status::error("eval store " + path + ": empty (no run was stored in it)");
    GB_RETURN_IF_ERROR(store->exec(kSchema));
    GB_RETURN_IF_ERROR(store->exec(("PRAGMA user_version=" + std::to_string(kSchemaVersion)).c_str()));
  }
  Stmt s;
  sqlite3_prepare_v2(db, "SELECT value FROM run WHERE key = 'settings'", -1, &s.s, nullptr);
  if (sqlite3_step(s.s) == SQLITE_ROW) {
    store->settings_ = nlohmann::json::parse(column_text(s.s, 0), nullptr, false);
    if (store->settings_.is_discarded()) return Status::error("eval store " + path + ": its settings are not JSON");
  }
  return store;
}

Result<std::unique_ptr<EvalStore>> EvalStore::open(const std::string& path, const nlohmann::json& settings) {
  GB_ASSIGN_OR_RETURN(std::unique_ptr<EvalStore> store, open_db(path, /*create=*/true));
  if (store->settings_.is_null()) {
    Stmt s;
    sqlite3_prepare_v2(store->db_, "INSERT INTO run (key, value) VALUES ('settings', ?)", -1, &s.s, nullptr);
    const std::string text = dump(settings);
    sqlite3_bind_text(s.s, 1, text.c_str(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
    if (sqlite3_step(s.s) != SQLITE_DONE)
      return Status::error("eval store " + path + ": cannot store the settings: " + sqlite3_errmsg(store->db_));
    store->settings_ = settings;
    return store;
  }
  if (store->settings_ != settings) {
    std::string keys;
    auto add = [&keys](const std::string& k) {
      if (!keys.empty()) keys += ", ";
      keys += k;
    };
    for (const auto& [k, v] : settings.items()) {
      if (!store->settings_.contains(k) || store->settings_[k] != v) add(k);
    }
    for (const auto& [k, v] : store->settings_.items()) {
      if (!settings.contains(k)) add(k);
    }
    return Status::error("eval store " + path + " holds a run with other settings (" + keys +
                         "); re-run the same command to resume it, or use another --out");
  }
  return store;
}

Result<std::unique_ptr<EvalStore>> EvalStore::open_existing(const std::string& path) {
  GB_ASSIGN_OR_RETURN(std::unique_ptr<EvalStore> store, open_db(path, /*create=*/false));
  if (store->settings_.is_null()) return Status::error("eval store " + path + ": no run settings stored");
  return store;
}

Status EvalStore::insert(const Sample& x) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s;
  sqlite3_prepare_v2(db_,
                     "INSERT INTO samples (arm, problem_id, sample, seed, text, token_ids, prompt_tokens,"
                     " completion_tokens, finish_reason, ttft_ms, latency_ms, itl_ms, graded, extracted, correct,"
                     " strict_extracted, strict_correct) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                     -1, &s.s, nullptr);
  const std::string tokens = dump(x.token_ids), itl = dump(x.itl_ms);
  int i = 1;
  auto text = [&](const std::string& v) {
    sqlite3_bind_text(s.s, i++, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  };
  text(x.arm);
  text(x.problem_id);
  sqlite3_bind_int(s.s, i++, x.sample);
  sqlite3_bind_int64(s.s, i++, x.seed);
  text(x.text);
  text(tokens);
  sqlite3_bind_int64(s.s, i++, x.prompt_tokens);
  sqlite3_bind_int64(s.s, i++, x.completion_tokens);
  text(x.finish_reason);
  sqlite3_bind_double(s.s, i++, x.ttft_ms);
  sqlite3_bind_double(s.s, i++, x.latency_ms);
  text(itl);
  sqlite3_bind_int(s.s, i++, x.graded ? 1 : 0);
  text(x.extracted);
  sqlite3_bind_int(s.s, i++, x.correct ? 1 : 0);
  text(x.strict_extracted);
  sqlite3_bind_int(s.s, i++, x.strict_correct ? 1 : 0);
  if (sqlite3_step(s.s) != SQLITE_DONE)
    return Status::error("eval store " + path_ + ": cannot store sample " + x.arm + "/" + x.problem_id + "/" +
                         std::to_string(x.sample) + ": " + sqlite3_errmsg(db_));
  return Status::ok();
}

Result<bool> EvalStore::has(const std::string& arm, const std::string& problem_id, int32_t sample) const {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s;
  sqlite3_prepare_v2(db_, "SELECT 1 FROM samples WHERE arm = ? AND problem_id = ? AND sample = ?", -1, &s.s, nullptr);
  sqlite3_bind_text(s.s, 1, arm.c_str(), static_cast<int>(arm.size()), SQLITE_TRANSIENT);
  sqlite3_bind_text(s.s, 2, problem_id.c_str(), static_cast<int>(problem_id.size()), SQLITE_TRANSIENT);
  sqlite3_bind_int(s.s, 3, sample);
  const int rc = sqlite3_step(s.s);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return Status::error("eval store " + path_ + ": " + sqlite3_errmsg(db_));
  return rc == SQLITE_ROW;
}

Result<std::vector<Sample>> EvalStore::samples() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s;
  sqlite3_prepare_v2(db_,
                     "SELECT arm, problem_id, sample, seed, text, token_ids, prompt_tokens, completion_tokens,"
                     " finish_reason, ttft_ms, latency_ms, itl_ms, graded, extracted, correct, strict_extracted,"
                     " strict_correct FROM samples ORDER BY arm, problem_id, sample",
                     -1, &s.s, nullptr);
  std::vector<Sample> out;
  int rc;
  while ((rc = sqlite3_step(s.s)) == SQLITE_ROW) {
    Sample x;
    x.arm = column_text(s.s, 0);
    x.problem_id = column_text(s.s, 1);
    x.sample = sqlite3_column_int(s.s, 2);
    x.seed = sqlite3_column_int64(s.s, 3);
    x.text = column_text(s.s, 4);
    const auto tokens = nlohmann::json::parse(column_text(s.s, 5), nullptr, false);
    const auto itl = nlohmann::json::parse(column_text(s.s, 11), nullptr, false);
    if (!tokens.is_array() || !itl.is_array())
      return Status::error("eval store " + path_ + ": sample " + x.arm + "/" + x.problem_id + " is corrupt");
    for (const auto& t : tokens) {
      if (!t.is_number_integer()) return Status::error("eval store " + path_ + ": corrupt token ids");
      x.token_ids.push_back(t.get<int32_t>());
    }
    for (const auto& t : itl) {
      if (!t.is_number()) return Status::error("eval store " + path_ + ": corrupt latencies");
      x.itl_ms.push_back(t.get<double>());
    }
    x.prompt_tokens = sqlite3_column_int64(s.s, 6);
    x.completion_tokens = sqlite3_column_int64(s.s, 7);
    x.finish_reason = column_text(s.s, 8);
    x.ttft_ms = sqlite3_column_double(s.s, 9);
    x.latency_ms = sqlite3_column_double(s.s, 10);
    x.graded = sqlite3_column_int(s.s, 12) != 0;
    x.extracted = column_text(s.s, 13);
    x.correct = sqlite3_column_int(s.s, 14) != 0;
    x.strict_extracted = column_text(s.s, 15);
    x.strict_correct = sqlite3_column_int(s.s, 16) != 0;
    out.push_back(std::move(x));
  }
  if (rc != SQLITE_DONE) return Status::error("eval store " + path_ + ": " + sqlite3_errmsg(db_));
  return out;
}

}  // namespace gb::eval
