#include "server/audit.h"

#include <openssl/evp.h>
#include <sqlite3.h>

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>

namespace gb::server {

namespace {

constexpr const char* kColumns =
    "id, time_ms, kind, key_id, request_id, model, action, spec_json, spec_hash, status, "
    "prompt_tokens, completion_tokens, finish_reason, repetition_rate";

constexpr const char* kSchema =
    "CREATE TABLE audit ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " time_ms INTEGER NOT NULL,"
    " kind TEXT NOT NULL,"
    " key_id TEXT NOT NULL,"
    " request_id TEXT NOT NULL,"
    " model TEXT NOT NULL,"
    " action TEXT NOT NULL,"
    " spec_json TEXT NOT NULL,"
    " spec_hash TEXT NOT NULL,"
    " status INTEGER NOT NULL,"
    " prompt_tokens INTEGER NOT NULL,"
    " completion_tokens INTEGER NOT NULL,"
    " finish_reason TEXT NOT NULL,"
    " repetition_rate REAL NOT NULL);"
    "CREATE INDEX audit_time ON audit(time_ms);"
    "CREATE INDEX audit_request ON audit(request_id);"
    "CREATE INDEX audit_key ON audit(key_id, id);";

// What an SQLite result code means for someone running the server.
std::string hint(int code) {
  switch (code & 0xff) {
    case SQLITE_NOTADB: return " (not an SQLite database)";
    case SQLITE_FULL: return " (disk full)";
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return " (locked by another connection or process)";
    case SQLITE_CORRUPT: return " (the database file is corrupted)";
    case SQLITE_READONLY: return " (opened read-only, or the file or its directory is not writable)";
    case SQLITE_CANTOPEN: return " (cannot open the file: missing, or its directory is not writable)";
    case SQLITE_IOERR: return " (I/O error)";
    default: return "";
  }
}

Status db_error(sqlite3* db, int code, const std::string& path, const std::string& what) {
  const char* msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(code);
  return Status::error("audit store " + path + ": " + what + ": " + (msg ? msg : "unknown error") + hint(code));
}

// A prepared statement, finalized on scope exit.
class Stmt {
 public:
  Stmt() = default;
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  sqlite3_stmt** out() { return &s_; }
  sqlite3_stmt* get() const { return s_; }

 private:
  sqlite3_stmt* s_ = nullptr;
};

Status prepare(sqlite3* db, const std::string& path, const std::string& sql, Stmt* stmt) {
  const int rc = sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), stmt->out(), nullptr);
  if (rc != SQLITE_OK) return db_error(db, rc, path, "preparing a statement");
  return Status::ok();
}

// Runs a statement returning one integer (PRAGMA user_version, count(*)).
Result<int64_t> query_int(sqlite3* db, const std::string& path, const std::string& sql) {
  Stmt st;
  GB_RETURN_IF_ERROR(prepare(db, path, sql, &st));
  const int rc = sqlite3_step(st.get());
  if (rc != SQLITE_ROW) return db_error(db, rc, path, "reading " + sql);
  return static_cast<int64_t>(sqlite3_column_int64(st.get(), 0));
}

Result<std::string> query_text(sqlite3* db, const std::string& path, const std::string& sql) {
  Stmt st;
  GB_RETURN_IF_ERROR(prepare(db, path, sql, &st));
  const int rc = sqlite3_step(st.get());
  if (rc != SQLITE_ROW) return db_error(db, rc, path, "running " + sql);
  const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(st.get(), 0));
  return std::string(t ? t : "");
}

Status exec(sqlite3* db, const std::string& path, const char* sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return Status::ok();
  std::string msg = err ? err : sqlite3_errstr(rc);
  sqlite3_free(err);
  return Status::error("audit store " + path + ": " + msg + hint(rc));
}

// Opens one connection; closes it again on failure.
Result<sqlite3*> open_connection(const std::string& path, bool read_only) {
  sqlite3* db = nullptr;
  const int flags =
      (read_only ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)) | SQLITE_OPEN_NOMUTEX;
  const int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    Status s = db_error(db, rc, path, "opening");
    sqlite3_close(db);
    return s;
  }
  sqlite3_extended_result_codes(db, 1);
  // Another process (a second server, `glassbox audit`, a checkpoint) may hold a lock briefly.
  sqlite3_busy_timeout(db, 10000);
  return db;
}

// The schema version check shared by both modes. user_version 0 with no tables is a fresh file.
Status check_schema(sqlite3* db, const std::string& path, bool read_only, int64_t* version) {
  GB_ASSIGN_OR_RETURN(*version, query_int(db, path, "PRAGMA user_version"));
  if (*version > AuditStore::kSchemaVersion) {
    return Status::error("audit store " + path + ": schema version " + std::to_string(*version) +
                         " is newer than this glassbox supports (" + std::to_string(AuditStore::kSchemaVersion) +
                         "); use a newer glassbox or another file");
  }
  if (*version == 0) {
    GB_ASSIGN_OR_RETURN(const int64_t tables, query_int(db, path, "SELECT count(*) FROM sqlite_master"));
    if (tables > 0) {
      return Status::error("audit store " + path + ": an SQLite database, but not an audit store (no schema version)");
    }
    if (read_only) return Status::error("audit store " + path + ": empty database, not an audit store yet");
  }
  return Status::ok();
}

std::string column_text(sqlite3_stmt* st, int i) {
  const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(st, i));
  return t ? std::string(t, static_cast<size_t>(sqlite3_column_bytes(st, i))) : std::string();
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

}  // namespace

const std::vector<std::string>& audit_kinds() {
  static const std::vector<std::string> kinds = {"request", "policy",      "preset",  "vector",
                                                 "session", "default_set", "variant", "route"};
  return kinds;
}

std::string sha256_hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr) != 1) return std::string();
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(len * 2);
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(hex[digest[i] >> 4]);
    out.push_back(hex[digest[i] & 15]);
  }
  return out;
}

std::string iso8601_utc_ms(int64_t ms) {
  int64_t secs = ms / 1000, rem = ms % 1000;
  if (rem < 0) {
    rem += 1000;
    secs -= 1;
  }
  const std::time_t t = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(rem));
  return buf;
}

Result<int64_t> parse_time_ms(std::string_view text) {
  const std::string orig(text);
  auto bad = [&]() {
    return Status::error("not a time: '" + orig + "' (use unix milliseconds or ISO-8601, e.g. 2026-11-30T08:00:00Z)");
  };
  if (text.empty()) return bad();
  if (std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    if (text.size() > 15) return bad();
    return static_cast<int64_t>(std::stoll(orig));
  }
  size_t i = 0;
  auto digits = [&](size_t n, int64_t* out) {
    if (i + n > text.size()) return false;
    int64_t v = 0;
    for (size_t k = 0; k < n; ++k) {
      const char c = text[i + k];
      if (c < '0' || c > '9') return false;
      v = v * 10 + (c - '0');
    }
    i += n;
    *out = v;
    return true;
  };
  auto expect = [&](char c) {
    if (i < text.size() && text[i] == c) {
      ++i;
      return true;
    }
    return false;
  };
  int64_t y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0, frac = 0;
  if (!digits(4, &y) || !expect('-') || !digits(2, &mo) || !expect('-') || !digits(2, &d)) return bad();
  if (i < text.size() && (text[i] == 'T' || text[i] == 't' || text[i] == ' ')) {
    ++i;
    if (!digits(2, &h) || !expect(':') || !digits(2, &mi)) return bad();
    if (expect(':')) {
      if (!digits(2, &s)) return bad();
      if (expect('.')) {
        size_t n = 0;
        int64_t scale = 100;
        while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
          if (n < 3) frac += (text[i] - '0') * scale;
          scale /= 10;
          ++i;
          ++n;
        }
        if (n == 0) return bad();
      }
    }
  }
  int64_t offset_min = 0;
  if (i < text.size()) {
    if (text[i] == 'Z' || text[i] == 'z') {
      ++i;
    } else if (text[i] == '+' || text[i] == '-') {
      const int64_t sign = text[i] == '-' ? -1 : 1;
      ++i;
      int64_t oh = 0, om = 0;
      if (!digits(2, &oh)) return bad();
      expect(':');
      if (!digits(2, &om)) return bad();
      if (oh > 23 || om > 59) return bad();
      offset_min = sign * (oh * 60 + om);
    } else {
      return bad();
    }
  }
  if (i != text.size()) return bad();
  static const int kDays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (mo < 1 || mo > 12 || d < 1 || d > kDays[mo - 1] || h > 23 || mi > 59 || s > 60) return bad();
  const int64_t days = days_from_civil(y, mo, d);
  return ((days * 24 + h) * 60 + mi - offset_min) * 60000 + s * 1000 + frac;
}

nlohmann::json audit_record_json(const AuditRecord& r) {
  nlohmann::json spec = nlohmann::json::parse(r.spec_json, nullptr, /*allow_exceptions=*/false);
  nlohmann::json j;
  j["id"] = r.id;
  j["time_ms"] = r.time_ms;
  j["time"] = iso8601_utc_ms(r.time_ms);
  j["kind"] = r.kind;
  j["key_id"] = r.key_id;
  j["request_id"] = r.request_id;
  j["model"] = r.model;
  j["action"] = r.action;
  j["spec"] = spec.is_discarded() ? nlohmann::json(r.spec_json) : spec;
  j["spec_hash"] = r.spec_hash;
  j["status"] = r.status;
  j["prompt_tokens"] = r.prompt_tokens;
  j["completion_tokens"] = r.completion_tokens;
  j["finish_reason"] = r.finish_reason;
  j["repetition_rate"] = r.repetition_rate;
  return j;
}

AuditStore::~AuditStore() {
  // sqlite3_close_v2 checkpoints the WAL when this is the last connection.
  if (reader_) sqlite3_close_v2(reader_);
  if (writer_) sqlite3_close_v2(writer_);
}

Result<std::unique_ptr<AuditStore>> AuditStore::open(const std::string& path) { return open_impl(path, false); }

Result<std::unique_ptr<AuditStore>> AuditStore::open_readonly(const std::string& path) { return open_impl(path, true); }

Result<std::unique_ptr<AuditStore>> AuditStore::open_impl(const std::string& path, bool read_only) {
  std::unique_ptr<AuditStore> store(new AuditStore());
  store->path_ = path;
  store->read_only_ = read_only;
  if (!read_only) {
    GB_ASSIGN_OR_RETURN(store->writer_, open_connection(path, false));
    sqlite3* w = store->writer_;
    // The first statement reads the header: a file that is not SQLite fails here.
    GB_ASSIGN_OR_RETURN(const std::string mode, query_text(w, path, "PRAGMA journal_mode=WAL"));
    if (mode != "wal") {
      return Status::error("audit store " + path + ": cannot switch to WAL journal mode (got '" + mode + "')");
    }
    GB_RETURN_IF_ERROR(exec(w, path, "PRAGMA synchronous=FULL"));
    GB_RETURN_IF_ERROR(exec(w, path, "BEGIN IMMEDIATE"));
    int64_t version = 0;
    Status s = check_schema(w, path, false, &version);
    if (s.is_ok() && version == 0) {
      s = exec(w, path, kSchema);
      if (s.is_ok()) s = exec(w, path, ("PRAGMA user_version=" + std::to_string(kSchemaVersion)).c_str());
    }
    if (!s.is_ok()) {
      (void)exec(w, path, "ROLLBACK");
      return s;
    }
    GB_RETURN_IF_ERROR(exec(w, path, "COMMIT"));
  }
  GB_ASSIGN_OR_RETURN(store->reader_, open_connection(path, true));
  struct stat sb {};
  if (::stat(path.c_str(), &sb) == 0) {
    store->dev_ = static_cast<uint64_t>(sb.st_dev);
    store->ino_ = static_cast<uint64_t>(sb.st_ino);
  }
  if (read_only) {
    int64_t version = 0;
    GB_RETURN_IF_ERROR(check_schema(store->reader_, path, true, &version));
  }
  return store;
}

Status AuditStore::append(AuditRecord* r) {
  if (read_only_ || !writer_) return Status::error("audit store " + path_ + ": opened read-only");
  const auto& kinds = audit_kinds();
  if (std::find(kinds.begin(), kinds.end(), r->kind) == kinds.end()) {
    std::string known;
    for (const std::string& k : kinds) known += (known.empty() ? "" : ", ") + k;
    return Status::error("audit record: unknown kind '" + r->kind + "' (" + known + ")");
  }
  if (r->spec_json.empty()) {
    r->spec_json = "null";
  } else {
    // Canonical form: compact, object keys sorted (nlohmann::json), so the same spec always has
    // the same text and hash, and audit_record_json(r)["spec"].dump() reproduces it.
    const auto spec = nlohmann::json::parse(r->spec_json, nullptr, /*allow_exceptions=*/false);
    if (spec.is_discarded()) return Status::error("audit record: spec_json is not valid JSON");
    r->spec_json = spec.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  if (r->spec_hash.empty()) r->spec_hash = sha256_hex(r->spec_json);
  if (r->time_ms == 0) r->time_ms = now_ms();

  std::lock_guard<std::mutex> lock(write_mu_);
  GB_RETURN_IF_ERROR(note(check_file()));
  Stmt st;
  GB_RETURN_IF_ERROR(prepare(
      writer_, path_,
      std::string("INSERT INTO audit (") + kColumns + ") VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", &st));
  sqlite3_stmt* s = st.get();
  auto text = [&](int i, const std::string& v) {
    sqlite3_bind_text(s, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC);
  };
  sqlite3_bind_int64(s, 1, r->time_ms);
  text(2, r->kind);
  text(3, r->key_id);
  text(4, r->request_id);
  text(5, r->model);
  text(6, r->action);
  text(7, r->spec_json);
  text(8, r->spec_hash);
  sqlite3_bind_int(s, 9, r->status);
  sqlite3_bind_int64(s, 10, r->prompt_tokens);
  sqlite3_bind_int64(s, 11, r->completion_tokens);
  text(12, r->finish_reason);
  sqlite3_bind_double(s, 13, r->repetition_rate);
  // Autocommit: the INSERT is its own transaction; with WAL + synchronous=FULL the commit fsyncs
  // the WAL before sqlite3_step returns.
  const int rc = sqlite3_step(s);
  if (rc != SQLITE_DONE) return note(db_error(writer_, rc, path_, "append"));
  r->id = sqlite3_last_insert_rowid(writer_);
  return note(Status::ok());
}

Status AuditStore::update_result(const AuditRecord& r) {
  if (read_only_ || !writer_) return Status::error("audit store " + path_ + ": opened read-only");
  std::lock_guard<std::mutex> lock(write_mu_);
  GB_RETURN_IF_ERROR(note(check_file()));
  Stmt st;
  GB_RETURN_IF_ERROR(prepare(writer_, path_,
                             "UPDATE audit SET status = ?, prompt_tokens = ?, completion_tokens = ?, "
                             "finish_reason = ?, repetition_rate = ? WHERE id = ?",
                             &st));
  sqlite3_stmt* s = st.get();
  sqlite3_bind_int(s, 1, r.status);
  sqlite3_bind_int64(s, 2, r.prompt_tokens);
  sqlite3_bind_int64(s, 3, r.completion_tokens);
  sqlite3_bind_text(s, 4, r.finish_reason.data(), static_cast<int>(r.finish_reason.size()), SQLITE_STATIC);
  sqlite3_bind_double(s, 5, r.repetition_rate);
  sqlite3_bind_int64(s, 6, r.id);
  const int rc = sqlite3_step(s);
  if (rc != SQLITE_DONE) return note(db_error(writer_, rc, path_, "update"));
  if (sqlite3_changes(writer_) != 1)
    return Status::error("audit store " + path_ + ": no row " + std::to_string(r.id) + " to update");
  return note(Status::ok());
}

Status AuditStore::check_file() const {
  struct stat sb {};
  if (::stat(path_.c_str(), &sb) != 0) {
    return Status::error("audit store " + path_ +
                         ": the file was deleted while the server runs (rows would go to a file nobody can read); "
                         "restore it or restart the server");
  }
  if (static_cast<uint64_t>(sb.st_dev) != dev_ || static_cast<uint64_t>(sb.st_ino) != ino_) {
    return Status::error("audit store " + path_ +
                         ": the file was replaced while the server runs; restart the server to use the new one");
  }
  return Status::ok();
}

Status AuditStore::note(Status st) {
  write_error_ = st.is_ok() ? std::string() : st.message();
  return st;
}

Status AuditStore::health() const {
  if (read_only_ || !writer_) return Status::error("audit store " + path_ + ": opened read-only");
  std::lock_guard<std::mutex> lock(write_mu_);
  GB_RETURN_IF_ERROR(check_file());
  if (!write_error_.empty()) return Status::error(write_error_);
  return Status::ok();
}

Status AuditStore::limit_pages_for_test(int64_t pages) {
  std::lock_guard<std::mutex> lock(write_mu_);
  return exec(writer_, path_, ("PRAGMA max_page_count=" + std::to_string(pages)).c_str());
}

Result<std::vector<AuditRecord>> AuditStore::query(const AuditQuery& q) const {
  if (q.limit < 1 || q.limit > kMaxAuditLimit) {
    return Status::error("audit query: limit must be 1.." + std::to_string(kMaxAuditLimit) + ", got " +
                         std::to_string(q.limit));
  }
  if (q.since_ms < 0 || q.until_ms < 0 || q.after_id < 0) {
    return Status::error("audit query: since, until and after_id must not be negative");
  }
  // The statement is assembled from fixed fragments only; every value is a bound parameter.
  std::string sql = std::string("SELECT ") + kColumns + " FROM audit WHERE id > ?";
  if (q.since_ms) sql += " AND time_ms >= ?";
  if (q.until_ms) sql += " AND time_ms < ?";
  if (!q.kind.empty()) sql += " AND kind = ?";
  if (!q.key_id.empty()) sql += " AND key_id = ?";
  if (!q.request_id.empty()) sql += " AND request_id = ?";
  sql += " ORDER BY id LIMIT ?";

  std::lock_guard<std::mutex> lock(read_mu_);
  Stmt st;
  GB_RETURN_IF_ERROR(prepare(reader_, path_, sql, &st));
  sqlite3_stmt* s = st.get();
  int i = 1;
  sqlite3_bind_int64(s, i++, q.after_id);
  if (q.since_ms) sqlite3_bind_int64(s, i++, q.since_ms);
  if (q.until_ms) sqlite3_bind_int64(s, i++, q.until_ms);
  for (const std::string* v : {&q.kind, &q.key_id, &q.request_id}) {
    if (!v->empty()) sqlite3_bind_text(s, i++, v->data(), static_cast<int>(v->size()), SQLITE_STATIC);
  }
  sqlite3_bind_int(s, i++, q.limit);
  std::vector<AuditRecord> out;
  for (;;) {
    const int rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return db_error(reader_, rc, path_, "query");
    AuditRecord r;
    r.id = sqlite3_column_int64(s, 0);
    r.time_ms = sqlite3_column_int64(s, 1);
    r.kind = column_text(s, 2);
    r.key_id = column_text(s, 3);
    r.request_id = column_text(s, 4);
    r.model = column_text(s, 5);
    r.action = column_text(s, 6);
    r.spec_json = column_text(s, 7);
    r.spec_hash = column_text(s, 8);
    r.status = sqlite3_column_int(s, 9);
    r.prompt_tokens = sqlite3_column_int64(s, 10);
    r.completion_tokens = sqlite3_column_int64(s, 11);
    r.finish_reason = column_text(s, 12);
    r.repetition_rate = sqlite3_column_double(s, 13);
    out.push_back(std::move(r));
  }
  return out;
}

int64_t AuditStore::count() const {
  std::lock_guard<std::mutex> lock(read_mu_);
  auto n = query_int(reader_, path_, "SELECT count(*) FROM audit");
  return n.is_ok() ? *n : -1;
}

Result<AuditStoreSettings> AuditStore::settings() const {
  std::unique_lock<std::mutex> wlock(write_mu_, std::defer_lock);
  std::unique_lock<std::mutex> rlock(read_mu_, std::defer_lock);
  sqlite3* db = writer_ ? writer_ : reader_;
  if (writer_) wlock.lock();
  else rlock.lock();
  AuditStoreSettings out;
  GB_ASSIGN_OR_RETURN(out.journal_mode, query_text(db, path_, "PRAGMA journal_mode"));
  GB_ASSIGN_OR_RETURN(const int64_t sync, query_int(db, path_, "PRAGMA synchronous"));
  GB_ASSIGN_OR_RETURN(const int64_t version, query_int(db, path_, "PRAGMA user_version"));
  out.synchronous = static_cast<int>(sync);
  out.schema_version = static_cast<int>(version);
  return out;
}

}  // namespace gb::server
