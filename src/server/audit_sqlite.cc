// The SQLite backend of the audit store (audit.h): one file, WAL, synchronous=FULL, one write
// connection and one read-only connection.
#include <sqlite3.h>

#include <sys/stat.h>

#include <condition_variable>
#include <mutex>

#include "server/audit.h"

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

// The SELECT of every column, read into a record.
AuditRecord read_row(sqlite3_stmt* s) {
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
  return r;
}

class SqliteAuditStore final : public AuditStore {
 public:
  SqliteAuditStore(const std::string& path, bool read_only) : AuditStore(path, "sqlite"), read_only_(read_only) {}
  ~SqliteAuditStore() override {
    // sqlite3_close_v2 checkpoints the WAL when this is the last connection.
    if (reader_) sqlite3_close_v2(reader_);
    if (writer_) sqlite3_close_v2(writer_);
  }

  Status open();
  Status update_result(const AuditRecord& record) override;
  Status health() const override;
  Status ping() override;
  Status limit_pages_for_test(int64_t pages) override;
  Result<std::vector<AuditRecord>> changes_after(int64_t after_id, int32_t limit) const override;
  void wait_for_change(std::chrono::milliseconds timeout) override;
  void interrupt_wait() override;
  int64_t count() const override;
  Result<AuditStoreSettings> settings() const override;

 protected:
  Status insert(AuditRecord* record, int64_t last_change_id, bool* stale) override;
  Result<std::vector<AuditRecord>> select(const AuditQuery& q) const override;

 private:
  // The file still is the one opened (called with write_mu_ held).
  Status check_file() const;
  // Remembers a write's outcome for health() (write_mu_ held).
  Status note(Status st);
  Status insert_row(AuditRecord* r);

  bool read_only_ = false;
  uint64_t dev_ = 0, ino_ = 0;  // of the file opened
  std::string write_error_;     // the last write's failure; empty after a success
  mutable std::mutex write_mu_;
  sqlite3* writer_ = nullptr;  // null when read-only
  mutable std::mutex read_mu_;
  sqlite3* reader_ = nullptr;
  std::mutex wait_mu_;
  std::condition_variable wait_cv_;
  bool interrupted_ = false;
};

Status SqliteAuditStore::open() {
  const std::string& p = path();
  if (!read_only_) {
    GB_ASSIGN_OR_RETURN(writer_, open_connection(p, false));
    sqlite3* w = writer_;
    // The first statement reads the header: a file that is not SQLite fails here.
    GB_ASSIGN_OR_RETURN(const std::string mode, query_text(w, p, "PRAGMA journal_mode=WAL"));
    if (mode != "wal") {
      return Status::error("audit store " + p + ": cannot switch to WAL journal mode (got '" + mode + "')");
    }
    GB_RETURN_IF_ERROR(exec(w, p, "PRAGMA synchronous=FULL"));
    GB_RETURN_IF_ERROR(exec(w, p, "BEGIN IMMEDIATE"));
    int64_t version = 0;
    Status s = check_schema(w, p, false, &version);
    if (s.is_ok() && version == 0) {
      s = exec(w, p, kSchema);
      if (s.is_ok()) s = exec(w, p, ("PRAGMA user_version=" + std::to_string(kSchemaVersion)).c_str());
    }
    if (!s.is_ok()) {
      (void)exec(w, p, "ROLLBACK");
      return s;
    }
    GB_RETURN_IF_ERROR(exec(w, p, "COMMIT"));
  }
  GB_ASSIGN_OR_RETURN(reader_, open_connection(p, true));
  struct stat sb {};
  if (::stat(p.c_str(), &sb) == 0) {
    dev_ = static_cast<uint64_t>(sb.st_dev);
    ino_ = static_cast<uint64_t>(sb.st_ino);
  }
  if (read_only_) {
    int64_t version = 0;
    GB_RETURN_IF_ERROR(check_schema(reader_, p, true, &version));
  }
  return Status::ok();
}

Status SqliteAuditStore::insert_row(AuditRecord* r) {
  Stmt st;
  GB_RETURN_IF_ERROR(prepare(
      writer_, path(),
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
  const int rc = sqlite3_step(s);
  if (rc != SQLITE_DONE) return db_error(writer_, rc, path(), "append");
  r->id = sqlite3_last_insert_rowid(writer_);
  return Status::ok();
}

Status SqliteAuditStore::insert(AuditRecord* r, int64_t last_change_id, bool* stale) {
  *stale = false;
  if (read_only_ || !writer_) return Status::error("audit store " + path() + ": opened read-only");
  std::lock_guard<std::mutex> lock(write_mu_);
  GB_RETURN_IF_ERROR(note(check_file()));
  if (last_change_id < 0) {
    // Autocommit: the INSERT is its own transaction; with WAL + synchronous=FULL the commit
    // fsyncs the WAL before sqlite3_step returns.
    return note(insert_row(r));
  }
  // A conditional change row: BEGIN IMMEDIATE takes the database's write lock, so no other
  // writer (another process on the same file) appends between the check and the insert.
  GB_RETURN_IF_ERROR(note(exec(writer_, path(), "BEGIN IMMEDIATE")));
  auto newer =
      query_int(writer_, path(),
                "SELECT count(*) FROM audit WHERE id > " + std::to_string(last_change_id) + " AND kind <> 'request'");
  Status s = newer.status();
  if (s.is_ok() && *newer > 0) {
    *stale = true;
  } else if (s.is_ok()) {
    s = insert_row(r);
  }
  if (s.is_ok() && !*stale) s = exec(writer_, path(), "COMMIT");
  if (!s.is_ok() || *stale) (void)exec(writer_, path(), "ROLLBACK");
  return note(s);
}

Status SqliteAuditStore::update_result(const AuditRecord& r) {
  if (read_only_ || !writer_) return Status::error("audit store " + path() + ": opened read-only");
  std::lock_guard<std::mutex> lock(write_mu_);
  GB_RETURN_IF_ERROR(note(check_file()));
  Stmt st;
  GB_RETURN_IF_ERROR(prepare(writer_, path(),
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
  if (rc != SQLITE_DONE) return note(db_error(writer_, rc, path(), "update"));
  if (sqlite3_changes(writer_) != 1)
    return Status::error("audit store " + path() + ": no row " + std::to_string(r.id) + " to update");
  return note(Status::ok());
}

Status SqliteAuditStore::check_file() const {
  struct stat sb {};
  if (::stat(path().c_str(), &sb) != 0) {
    return Status::error("audit store " + path() +
                         ": the file was deleted while the server runs (rows would go to a file nobody can read); "
                         "restore it or restart the server");
  }
  if (static_cast<uint64_t>(sb.st_dev) != dev_ || static_cast<uint64_t>(sb.st_ino) != ino_) {
    return Status::error("audit store " + path() +
                         ": the file was replaced while the server runs; restart the server to use the new one");
  }
  return Status::ok();
}

Status SqliteAuditStore::note(Status st) {
  write_error_ = st.is_ok() ? std::string() : st.message();
  return st;
}

Status SqliteAuditStore::health() const {
  if (read_only_ || !writer_) return Status::error("audit store " + path() + ": opened read-only");
  std::lock_guard<std::mutex> lock(write_mu_);
  GB_RETURN_IF_ERROR(check_file());
  if (!write_error_.empty()) return Status::error(write_error_);
  return Status::ok();
}

// A local file has no connection to lose: the file check is the ping (a write failure stays
// until a write succeeds).
Status SqliteAuditStore::ping() { return health(); }

Status SqliteAuditStore::limit_pages_for_test(int64_t pages) {
  std::lock_guard<std::mutex> lock(write_mu_);
  return exec(writer_, path(), ("PRAGMA max_page_count=" + std::to_string(pages)).c_str());
}

Result<std::vector<AuditRecord>> SqliteAuditStore::select(const AuditQuery& q) const {
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
  GB_RETURN_IF_ERROR(prepare(reader_, path(), sql, &st));
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
    if (rc != SQLITE_ROW) return db_error(reader_, rc, path(), "query");
    out.push_back(read_row(s));
  }
  return out;
}

Result<std::vector<AuditRecord>> SqliteAuditStore::changes_after(int64_t after_id, int32_t limit) const {
  if (limit < 1 || limit > kMaxAuditLimit || after_id < 0)
    return Status::error("audit store: changes_after needs after_id >= 0 and limit 1.." +
                         std::to_string(kMaxAuditLimit));
  std::lock_guard<std::mutex> lock(read_mu_);
  Stmt st;
  GB_RETURN_IF_ERROR(prepare(
      reader_, path(),
      std::string("SELECT ") + kColumns + " FROM audit WHERE id > ? AND kind <> 'request' ORDER BY id LIMIT ?", &st));
  sqlite3_stmt* s = st.get();
  sqlite3_bind_int64(s, 1, after_id);
  sqlite3_bind_int(s, 2, limit);
  std::vector<AuditRecord> out;
  for (;;) {
    const int rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return db_error(reader_, rc, path(), "reading the change rows");
    out.push_back(read_row(s));
  }
  return out;
}

void SqliteAuditStore::wait_for_change(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(wait_mu_);
  wait_cv_.wait_for(lock, timeout, [&] { return interrupted_; });
  interrupted_ = false;
}

void SqliteAuditStore::interrupt_wait() {
  std::lock_guard<std::mutex> lock(wait_mu_);
  interrupted_ = true;
  wait_cv_.notify_all();
}

int64_t SqliteAuditStore::count() const {
  std::lock_guard<std::mutex> lock(read_mu_);
  auto n = query_int(reader_, path(), "SELECT count(*) FROM audit");
  return n.is_ok() ? *n : -1;
}

Result<AuditStoreSettings> SqliteAuditStore::settings() const {
  std::unique_lock<std::mutex> wlock(write_mu_, std::defer_lock);
  std::unique_lock<std::mutex> rlock(read_mu_, std::defer_lock);
  sqlite3* db = writer_ ? writer_ : reader_;
  if (writer_) wlock.lock();
  else rlock.lock();
  AuditStoreSettings out;
  out.backend = "sqlite";
  GB_ASSIGN_OR_RETURN(out.journal_mode, query_text(db, path(), "PRAGMA journal_mode"));
  GB_ASSIGN_OR_RETURN(const int64_t sync, query_int(db, path(), "PRAGMA synchronous"));
  GB_ASSIGN_OR_RETURN(const int64_t version, query_int(db, path(), "PRAGMA user_version"));
  out.synchronous = static_cast<int>(sync);
  out.schema_version = static_cast<int>(version);
  return out;
}

}  // namespace

Result<std::unique_ptr<AuditStore>> open_sqlite_audit_store(const std::string& path, bool read_only) {
  auto store = std::make_unique<SqliteAuditStore>(path, read_only);
  GB_RETURN_IF_ERROR(store->open());
  return std::unique_ptr<AuditStore>(std::move(store));
}

}  // namespace gb::server
