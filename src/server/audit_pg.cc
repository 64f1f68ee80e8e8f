// The PostgreSQL backend of the audit store (audit.h), over libpq: the same table as the SQLite
// file, shared by every replica. Three connections, each under its own mutex: the writer
// (appends, updates, pings), the reader (queries) and the listener (LISTEN for change rows, used
// by the admin sync thread only). A connection that breaks is dropped and made again on its next
// use (at most one attempt every kReconnectGap, so an outage costs each request one failed
// attempt, not a pile-up of connect timeouts).
//
// Durability: every connection runs with synchronous_commit at least "on" (a server configured
// "off" or "local" is overridden for our sessions), so a COMMIT — an autocommit INSERT included —
// returns only after the WAL record is flushed: the row exists even if the server or glassbox is
// killed right after.
#include <libpq-fe.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <utility>

#include "server/audit.h"

namespace gb::server {

namespace {

using Clock = std::chrono::steady_clock;

// Change rows of every replica are appended under this transaction-level advisory lock, so their
// ids are assigned and committed in one order ("glassbox" in ASCII, 8 bytes).
constexpr const char* kLockKey = "7453010373644244344";
constexpr const char* kChannel = "glassbox_audit_change";
constexpr auto kReconnectGap = std::chrono::milliseconds(250);

constexpr const char* kColumns =
    "id, time_ms, kind, key_id, request_id, model, action, spec_json, spec_hash, status, "
    "prompt_tokens, completion_tokens, finish_reason, repetition_rate";

constexpr const char* kSchema =
    "CREATE TABLE audit ("
    " id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    " time_ms BIGINT NOT NULL,"
    " kind TEXT NOT NULL,"
    " key_id TEXT NOT NULL,"
    " request_id TEXT NOT NULL,"
    " model TEXT NOT NULL,"
    " action TEXT NOT NULL,"
    " spec_json TEXT NOT NULL,"
    " spec_hash TEXT NOT NULL,"
    " status INTEGER NOT NULL,"
    " prompt_tokens BIGINT NOT NULL,"
    " completion_tokens BIGINT NOT NULL,"
    " finish_reason TEXT NOT NULL,"
    " repetition_rate DOUBLE PRECISION NOT NULL);"
    "CREATE INDEX audit_time ON audit(time_ms);"
    "CREATE INDEX audit_request ON audit(request_id);"
    "CREATE INDEX audit_key ON audit(key_id, id);"
    "CREATE TABLE glassbox_schema (version INTEGER NOT NULL);";

// libpq's messages end with a newline (sometimes two lines); one line for ours.
std::string one_line(const char* msg) {
  std::string s = msg ? msg : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  for (char& c : s) {
    if (c == '\n') c = ' ';
  }
  return s.empty() ? "unknown error" : s;
}

// What an SQLSTATE means for someone running the server.
std::string hint(const char* sqlstate) {
  const std::string s = sqlstate ? sqlstate : "";
  if (s == "53100") return " (disk full)";
  if (s == "25006") return " (opened read-only)";
  if (s.rfind("08", 0) == 0 || s == "57P01" || s == "57P02" || s == "57P03")
    return " (the connection to PostgreSQL was lost; it is made again on the next write)";
  if (s == "42501") return " (permission denied: the role in the URL may not do this)";
  if (s == "3D000") return " (no such database)";
  return "";
}

class PgResult {
 public:
  PgResult() = default;
  ~PgResult() { PQclear(r_); }
  PgResult(const PgResult&) = delete;
  PgResult& operator=(const PgResult&) = delete;
  void reset(PGresult* r) {
    PQclear(r_);
    r_ = r;
  }
  PGresult* get() const { return r_; }

 private:
  PGresult* r_ = nullptr;
};

void quiet_notices(void*, const char*) {}

// One connection, made on demand from the parsed URL.
class PgConn {
 public:
  enum class Role { kWriter, kReader, kListener };
  PgConn(const std::vector<std::pair<std::string, std::string>>* params, const std::string* display, Role role,
         bool read_only)
      : params_(params), display_(display), role_(role), read_only_(read_only) {}
  ~PgConn() { drop(); }
  PgConn(const PgConn&) = delete;
  PgConn& operator=(const PgConn&) = delete;

  void drop() {
    if (conn_) PQfinish(conn_);
    conn_ = nullptr;
  }
  PGconn* get() const { return conn_; }

  // Connected and set up, or the reason not.
  Status ensure() {
    if (conn_ != nullptr && PQstatus(conn_) == CONNECTION_OK) return Status::ok();
    drop();
    const Clock::time_point now = Clock::now();
    if (!last_error_.empty() && now - last_attempt_ < kReconnectGap) return Status::error(last_error_);
    last_attempt_ = now;
    std::vector<const char*> keys, values;
    for (const auto& [k, v] : *params_) {
      keys.push_back(k.c_str());
      values.push_back(v.c_str());
    }
    keys.push_back(nullptr);
    values.push_back(nullptr);
    conn_ = PQconnectdbParams(keys.data(), values.data(), /*expand_dbname=*/0);
    if (conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK) {
      last_error_ = "audit store " + *display_ +
                    ": cannot connect: " + one_line(conn_ ? PQerrorMessage(conn_) : "out of memory") +
                    " (is PostgreSQL running and reachable? check audit_db)";
      drop();
      return Status::error(last_error_);
    }
    PQsetNoticeProcessor(conn_, quiet_notices, nullptr);
    Status s = setup();
    if (!s.is_ok()) {
      last_error_ = s.message();
      drop();
      return s;
    }
    last_error_.clear();
    return Status::ok();
  }

  // Runs sql with text parameters; the result must have status `expect`. A failure that lost
  // the connection drops it (the next ensure() reconnects).
  Status run(const std::string& what, const std::string& sql, const std::vector<std::string>& params,
             ExecStatusType expect, PgResult* out) {
    std::vector<const char*> values;
    for (const std::string& p : params) values.push_back(p.c_str());
    out->reset(PQexecParams(conn_, sql.c_str(), static_cast<int>(values.size()), nullptr,
                            values.empty() ? nullptr : values.data(), nullptr, nullptr, 0));
    if (out->get() != nullptr && PQresultStatus(out->get()) == expect) return Status::ok();
    const char* state = out->get() ? PQresultErrorField(out->get(), PG_DIAG_SQLSTATE) : nullptr;
    std::string msg = out->get() ? one_line(PQresultErrorMessage(out->get())) : one_line(PQerrorMessage(conn_));
    if (msg == "unknown error") msg = one_line(PQerrorMessage(conn_));
    std::string h = hint(state);
    if (PQstatus(conn_) != CONNECTION_OK) {
      drop();
      if (h.empty()) h = " (the connection to PostgreSQL was lost; it is made again on the next use)";
    }
    return Status::error("audit store " + *display_ + ": " + what + ": " + msg + h);
  }
  // A statement without parameters or rows (SET, BEGIN, COMMIT; several at once are allowed).
  Status exec(const std::string& what, const std::string& sql) {
    PgResult r;
    r.reset(PQexec(conn_, sql.c_str()));
    if (r.get() != nullptr &&
        (PQresultStatus(r.get()) == PGRES_COMMAND_OK || PQresultStatus(r.get()) == PGRES_TUPLES_OK))
      return Status::ok();
    const char* state = r.get() ? PQresultErrorField(r.get(), PG_DIAG_SQLSTATE) : nullptr;
    std::string msg = one_line(r.get() ? PQresultErrorMessage(r.get()) : PQerrorMessage(conn_));
    std::string h = hint(state);
    if (PQstatus(conn_) != CONNECTION_OK) {
      drop();
      if (h.empty()) h = " (the connection to PostgreSQL was lost; it is made again on the next use)";
    }
    return Status::error("audit store " + *display_ + ": " + what + ": " + msg + h);
  }
  Result<std::string> show(const std::string& setting) {
    PgResult r;
    GB_RETURN_IF_ERROR(run("reading " + setting, "SHOW " + setting, {}, PGRES_TUPLES_OK, &r));
    if (PQntuples(r.get()) != 1) return Status::error("audit store " + *display_ + ": SHOW " + setting + ": no value");
    return std::string(PQgetvalue(r.get(), 0, 0));
  }

 private:
  Status setup() {
    // Our own errors and a schema's CREATE notices are not for stderr.
    GB_RETURN_IF_ERROR(exec("setting up the session", "SET client_min_messages TO warning"));
    if (role_ == Role::kWriter) {
      // At least "on": the commit waits for the local WAL flush (and a synchronous standby's,
      // where one is configured). A stronger setting (remote_write, remote_apply) is kept.
      GB_ASSIGN_OR_RETURN(const std::string sc, show("synchronous_commit"));
      if (sc == "off" || sc == "local")
        GB_RETURN_IF_ERROR(exec("setting up the session", "SET synchronous_commit TO on"));
    }
    if (read_only_) GB_RETURN_IF_ERROR(exec("setting up the session", "SET default_transaction_read_only TO on"));
    if (role_ == Role::kListener) GB_RETURN_IF_ERROR(exec("listening for changes", std::string("LISTEN ") + kChannel));
    return Status::ok();
  }

  const std::vector<std::pair<std::string, std::string>>* params_;
  const std::string* display_;
  Role role_;
  bool read_only_;
  PGconn* conn_ = nullptr;
  Clock::time_point last_attempt_{};
  std::string last_error_;
};

AuditRecord read_row(const PGresult* r, int row) {
  auto text = [&](int col) {
    return std::string(PQgetvalue(r, row, col), static_cast<size_t>(PQgetlength(r, row, col)));
  };
  auto int64 = [&](int col) { return static_cast<int64_t>(std::strtoll(PQgetvalue(r, row, col), nullptr, 10)); };
  AuditRecord a;
  a.id = int64(0);
  a.time_ms = int64(1);
  a.kind = text(2);
  a.key_id = text(3);
  a.request_id = text(4);
  a.model = text(5);
  a.action = text(6);
  a.spec_json = text(7);
  a.spec_hash = text(8);
  a.status = static_cast<int32_t>(int64(9));
  a.prompt_tokens = int64(10);
  a.completion_tokens = int64(11);
  a.finish_reason = text(12);
  a.repetition_rate = std::strtod(PQgetvalue(r, row, 13), nullptr);
  return a;
}

std::string double_text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

class PgAuditStore final : public AuditStore {
 public:
  PgAuditStore(std::vector<std::pair<std::string, std::string>> params, const std::string& display, bool read_only)
      : AuditStore(display, "postgresql"),
        params_(std::move(params)),
        display_(display),
        read_only_(read_only),
        writer_(&params_, &display_, PgConn::Role::kWriter, read_only),
        reader_(&params_, &display_, PgConn::Role::kReader, true),
        listener_(&params_, &display_, PgConn::Role::kListener, true) {
    if (pipe(wake_) != 0) wake_[0] = wake_[1] = -1;
  }
  ~PgAuditStore() override {
    for (int fd : wake_) {
      if (fd >= 0) close(fd);
    }
  }

  Status open();
  Status update_result(const AuditRecord& record) override;
  Status health() const override;
  Status ping() override;
  Result<std::vector<AuditRecord>> changes_after(int64_t after_id, int32_t limit) const override;
  void wait_for_change(std::chrono::milliseconds timeout) override;
  void interrupt_wait() override;
  int64_t count() const override;
  Result<AuditStoreSettings> settings() const override;

 protected:
  Status insert(AuditRecord* record, int64_t last_change_id, bool* stale) override;
  Result<std::vector<AuditRecord>> select(const AuditQuery& q) const override;

 private:
  // Remembers a write's (or ping's) outcome for health(); write_mu_ held.
  Status note(Status st) {
    std::lock_guard<std::mutex> lock(status_mu_);
    status_error_ = st.is_ok() ? std::string() : st.message();
    return st;
  }
  Status check_schema(PgConn& c, bool create);
  // Runs a read on the reader, once more after reconnecting when the connection was lost.
  template <class F>
  auto read(F&& f) const -> decltype(f(std::declval<PgConn&>()));
  Status insert_locked(AuditRecord* r, int64_t last_change_id, bool* stale);

  std::vector<std::pair<std::string, std::string>> params_;
  std::string display_;
  bool read_only_;
  mutable std::mutex write_mu_;
  PgConn writer_;
  mutable std::mutex read_mu_;
  mutable PgConn reader_;
  std::mutex listen_mu_;
  PgConn listener_;
  int wake_[2] = {-1, -1};
  mutable std::mutex status_mu_;
  std::string status_error_;
};

Status PgAuditStore::check_schema(PgConn& c, bool create) {
  PgResult r;
  if (create)
    GB_RETURN_IF_ERROR(
        c.exec("creating the schema", std::string("BEGIN; SELECT pg_advisory_xact_lock(") + kLockKey + ")"));
  Status s = c.run("reading the schema",
                   "SELECT to_regclass('glassbox_schema') IS NOT NULL, to_regclass('audit') IS NOT NULL, "
                   "current_schema()",
                   {}, PGRES_TUPLES_OK, &r);
  auto fail = [&](Status st) {
    if (create && c.get() != nullptr) (void)c.exec("creating the schema", "ROLLBACK");
    return st;
  };
  if (!s.is_ok()) return fail(s);
  const bool has_version = std::string(PQgetvalue(r.get(), 0, 0)) == "t";
  const bool has_audit = std::string(PQgetvalue(r.get(), 0, 1)) == "t";
  const bool has_schema = !PQgetisnull(r.get(), 0, 2);
  if (has_version) {
    PgResult v;
    s = c.run("reading the schema version", "SELECT max(version) FROM glassbox_schema", {}, PGRES_TUPLES_OK, &v);
    if (!s.is_ok()) return fail(s);
    const int64_t version = PQgetisnull(v.get(), 0, 0) ? 0 : std::strtoll(PQgetvalue(v.get(), 0, 0), nullptr, 10);
    if (version > kSchemaVersion)
      return fail(Status::error("audit store " + display_ + ": schema version " + std::to_string(version) +
                                " is newer than this glassbox supports (" + std::to_string(kSchemaVersion) +
                                "); use a newer glassbox or another database"));
    if (version < 1 || !has_audit)
      return fail(Status::error("audit store " + display_ +
                                ": glassbox_schema exists but the audit table does not (a damaged store); "
                                "use another database or schema"));
    return create ? c.exec("creating the schema", "COMMIT") : Status::ok();
  }
  if (has_audit)
    return fail(Status::error("audit store " + display_ +
                              ": the database has a table named audit that is not a glassbox audit store (no "
                              "glassbox_schema table); use another database, or another schema with "
                              "?options=-csearch_path%3DNAME"));
  if (!create)
    return Status::error("audit store " + display_ +
                         ": no audit store in this database yet (no glassbox_schema table); a server with this "
                         "audit_db creates it");
  if (!has_schema)
    return fail(Status::error("audit store " + display_ +
                              ": no schema to create the audit table in (the search_path names none that exists)"));
  s = c.exec("creating the schema", kSchema);
  if (s.is_ok())
    s = c.exec("creating the schema",
               "INSERT INTO glassbox_schema (version) VALUES (" + std::to_string(kSchemaVersion) + ")");
  if (!s.is_ok()) return fail(s);
  return c.exec("creating the schema", "COMMIT");
}

Status PgAuditStore::open() {
  if (wake_[0] < 0) return Status::error("audit store " + display_ + ": cannot create a pipe");
  if (!read_only_) {
    std::lock_guard<std::mutex> lock(write_mu_);
    GB_RETURN_IF_ERROR(writer_.ensure());
    GB_RETURN_IF_ERROR(check_schema(writer_, true));
  }
  std::lock_guard<std::mutex> lock(read_mu_);
  GB_RETURN_IF_ERROR(reader_.ensure());
  if (read_only_) GB_RETURN_IF_ERROR(check_schema(reader_, false));
  return Status::ok();
}

Status PgAuditStore::insert_locked(AuditRecord* r, int64_t last_change_id, bool* stale) {
  GB_RETURN_IF_ERROR(writer_.ensure());
  const std::vector<std::string> values = {std::to_string(r->time_ms),
                                           r->kind,
                                           r->key_id,
                                           r->request_id,
                                           r->model,
                                           r->action,
                                           r->spec_json,
                                           r->spec_hash,
                                           std::to_string(r->status),
                                           std::to_string(r->prompt_tokens),
                                           std::to_string(r->completion_tokens),
                                           r->finish_reason,
                                           double_text(r->repetition_rate)};
  const std::string insert =
      "INSERT INTO audit (time_ms, kind, key_id, request_id, model, action, spec_json, spec_hash, status, "
      "prompt_tokens, completion_tokens, finish_reason, repetition_rate) "
      "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) RETURNING id";
  PgResult res;
  if (!is_change_kind(r->kind)) {
    // Autocommit: the INSERT is its own transaction, flushed (synchronous_commit) before it returns.
    GB_RETURN_IF_ERROR(writer_.run("append", insert, values, PGRES_TUPLES_OK, &res));
    r->id = std::strtoll(PQgetvalue(res.get(), 0, 0), nullptr, 10);
    return Status::ok();
  }
  // A change row: under the advisory lock (change rows commit in id order), with a NOTIFY that
  // wakes the other replicas' sync threads when it commits.
  GB_RETURN_IF_ERROR(writer_.exec("append", std::string("BEGIN; SELECT pg_advisory_xact_lock(") + kLockKey + ")"));
  auto rollback = [&](Status s) {
    if (writer_.get() != nullptr) (void)writer_.exec("append", "ROLLBACK");
    return s;
  };
  if (last_change_id >= 0) {
    // A statement of its own, after the lock: its snapshot sees every change committed before.
    PgResult newer;
    Status s = writer_.run("append", "SELECT EXISTS (SELECT 1 FROM audit WHERE id > $1 AND kind <> 'request')",
                           {std::to_string(last_change_id)}, PGRES_TUPLES_OK, &newer);
    if (!s.is_ok()) return rollback(s);
    if (std::string(PQgetvalue(newer.get(), 0, 0)) == "t") {
      *stale = true;
      return rollback(Status::ok());
    }
  }
  Status s = writer_.run("append", insert, values, PGRES_TUPLES_OK, &res);
  if (!s.is_ok()) return rollback(s);
  r->id = std::strtoll(PQgetvalue(res.get(), 0, 0), nullptr, 10);
  s = writer_.exec("append", std::string("NOTIFY ") + kChannel + ", '" + std::to_string(r->id) + "'");
  if (!s.is_ok()) return rollback(s);
  return writer_.exec("append (commit)", "COMMIT");
}

Status PgAuditStore::insert(AuditRecord* r, int64_t last_change_id, bool* stale) {
  *stale = false;
  if (read_only_) return Status::error("audit store " + display_ + ": opened read-only");
  std::lock_guard<std::mutex> lock(write_mu_);
  return note(insert_locked(r, last_change_id, stale));
}

Status PgAuditStore::update_result(const AuditRecord& r) {
  if (read_only_) return Status::error("audit store " + display_ + ": opened read-only");
  std::lock_guard<std::mutex> lock(write_mu_);
  Status s = writer_.ensure();
  PgResult res;
  if (s.is_ok())
    s = writer_.run("update",
                    "UPDATE audit SET status = $1, prompt_tokens = $2, completion_tokens = $3, finish_reason = $4, "
                    "repetition_rate = $5 WHERE id = $6",
                    {std::to_string(r.status), std::to_string(r.prompt_tokens), std::to_string(r.completion_tokens),
                     r.finish_reason, double_text(r.repetition_rate), std::to_string(r.id)},
                    PGRES_COMMAND_OK, &res);
  GB_RETURN_IF_ERROR(note(s));
  if (std::string(PQcmdTuples(res.get())) != "1")
    return Status::error("audit store " + display_ + ": no row " + std::to_string(r.id) + " to update");
  return Status::ok();
}

Status PgAuditStore::health() const {
  if (read_only_) return Status::error("audit store " + display_ + ": opened read-only");
  std::lock_guard<std::mutex> lock(status_mu_);
  if (!status_error_.empty()) return Status::error(status_error_);
  return Status::ok();
}

Status PgAuditStore::ping() {
  if (read_only_) return Status::error("audit store " + display_ + ": opened read-only");
  std::lock_guard<std::mutex> lock(write_mu_);
  Status s = writer_.ensure();
  PgResult r;
  if (s.is_ok()) s = writer_.run("ping", "SELECT 1", {}, PGRES_TUPLES_OK, &r);
  return note(s);
}

template <class F>
auto PgAuditStore::read(F&& f) const -> decltype(f(std::declval<PgConn&>())) {
  std::lock_guard<std::mutex> lock(read_mu_);
  for (int attempt = 0;; ++attempt) {
    const bool was_connected = reader_.get() != nullptr;
    if (Status s = reader_.ensure(); !s.is_ok()) return s;
    auto out = f(reader_);
    // A connection that broke since its last use (a restarted server): once more on a new one.
    if (out.is_ok() || attempt > 0 || !was_connected || reader_.get() != nullptr) return out;
  }
}

Result<std::vector<AuditRecord>> PgAuditStore::select(const AuditQuery& q) const {
  // The statement is assembled from fixed fragments only; every value is a bound parameter.
  std::vector<std::string> params = {std::to_string(q.after_id)};
  std::string sql = std::string("SELECT ") + kColumns + " FROM audit WHERE id > $1";
  auto add = [&](const char* clause, std::string value) {
    params.push_back(std::move(value));
    sql += std::string(" AND ") + clause + " $" + std::to_string(params.size());
  };
  if (q.since_ms) add("time_ms >=", std::to_string(q.since_ms));
  if (q.until_ms) add("time_ms <", std::to_string(q.until_ms));
  if (!q.kind.empty()) add("kind =", q.kind);
  if (!q.key_id.empty()) add("key_id =", q.key_id);
  if (!q.request_id.empty()) add("request_id =", q.request_id);
  params.push_back(std::to_string(q.limit));
  sql += " ORDER BY id LIMIT $" + std::to_string(params.size());
  return read([&](PgConn& c) -> Result<std::vector<AuditRecord>> {
    PgResult r;
    GB_RETURN_IF_ERROR(c.run("query", sql, params, PGRES_TUPLES_OK, &r));
    std::vector<AuditRecord> out;
    for (int i = 0; i < PQntuples(r.get()); ++i) out.push_back(read_row(r.get(), i));
    return out;
  });
}

Result<std::vector<AuditRecord>> PgAuditStore::changes_after(int64_t after_id, int32_t limit) const {
  if (limit < 1 || limit > kMaxAuditLimit || after_id < 0)
    return Status::error("audit store: changes_after needs after_id >= 0 and limit 1.." +
                         std::to_string(kMaxAuditLimit));
  return read([&](PgConn& c) -> Result<std::vector<AuditRecord>> {
    PgResult r;
    GB_RETURN_IF_ERROR(c.run(
        "reading the change rows",
        std::string("SELECT ") + kColumns + " FROM audit WHERE id > $1 AND kind <> 'request' ORDER BY id LIMIT $2",
        {std::to_string(after_id), std::to_string(limit)}, PGRES_TUPLES_OK, &r));
    std::vector<AuditRecord> out;
    for (int i = 0; i < PQntuples(r.get()); ++i) out.push_back(read_row(r.get(), i));
    return out;
  });
}

void PgAuditStore::wait_for_change(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(listen_mu_);
  pollfd fds[2] = {{wake_[0], POLLIN, 0}, {-1, POLLIN, 0}};
  int n = 1;
  if (listener_.ensure().is_ok()) {
    // Notifications that arrived with an earlier result are already queued.
    bool queued = false;
    while (PGnotify* note = PQnotifies(listener_.get())) {
      PQfreemem(note);
      queued = true;
    }
    if (queued) return;
    fds[1].fd = PQsocket(listener_.get());
    if (fds[1].fd >= 0) n = 2;
  }
  const int rc = ::poll(fds, static_cast<nfds_t>(n), static_cast<int>(timeout.count()));
  if (rc > 0 && (fds[0].revents & POLLIN)) {
    char buf[64];
    (void)!::read(wake_[0], buf, sizeof(buf));
  }
  if (n == 2 && rc > 0 && fds[1].revents != 0) {
    if (PQconsumeInput(listener_.get()) == 0) {
      listener_.drop();  // lost: LISTEN again on the next wait
      return;
    }
    while (PGnotify* note = PQnotifies(listener_.get())) PQfreemem(note);
  }
}

void PgAuditStore::interrupt_wait() {
  const char c = 1;
  (void)!::write(wake_[1], &c, 1);
}

int64_t PgAuditStore::count() const {
  auto n = read([&](PgConn& c) -> Result<int64_t> {
    PgResult r;
    GB_RETURN_IF_ERROR(c.run("counting", "SELECT count(*) FROM audit", {}, PGRES_TUPLES_OK, &r));
    return static_cast<int64_t>(std::strtoll(PQgetvalue(r.get(), 0, 0), nullptr, 10));
  });
  return n.is_ok() ? *n : -1;
}

Result<AuditStoreSettings> PgAuditStore::settings() const {
  auto get = [&](PgConn& c) -> Result<AuditStoreSettings> {
    AuditStoreSettings out;
    out.backend = "postgresql";
    GB_ASSIGN_OR_RETURN(out.synchronous_commit, c.show("synchronous_commit"));
    GB_ASSIGN_OR_RETURN(out.fsync, c.show("fsync"));
    PgResult r;
    GB_RETURN_IF_ERROR(
        c.run("reading the schema version", "SELECT max(version) FROM glassbox_schema", {}, PGRES_TUPLES_OK, &r));
    out.schema_version = static_cast<int>(std::strtol(PQgetvalue(r.get(), 0, 0), nullptr, 10));
    return out;
  };
  if (read_only_) return read(get);
  // The writer's session is the one whose commits must be durable.
  std::lock_guard<std::mutex> lock(write_mu_);
  auto& w = const_cast<PgConn&>(writer_);
  GB_RETURN_IF_ERROR(w.ensure());
  return get(w);
}

}  // namespace

Result<std::unique_ptr<AuditStore>> open_pg_audit_store(const std::string& url, bool read_only) {
  const std::string display = redact_url(url);
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(url.c_str(), &err);
  if (opts == nullptr) {
    std::string msg = one_line(err ? err : "out of memory");
    PQfreemem(err);
    return Status::error("audit store " + display + ": not a valid PostgreSQL URL: " + msg +
                         " (expected postgresql://[user[:password]@][host][:port]/dbname[?param=value&...])");
  }
  std::vector<std::pair<std::string, std::string>> params;
  bool has_timeout = false, has_name = false;
  for (PQconninfoOption* o = opts; o->keyword != nullptr; ++o) {
    if (o->val == nullptr) continue;
    params.emplace_back(o->keyword, o->val);
    has_timeout |= std::string(o->keyword) == "connect_timeout";
    has_name |= std::string(o->keyword) == "application_name";
  }
  PQconninfoFree(opts);
  // An unreachable host fails within seconds, not after the TCP timeout.
  if (!has_timeout) params.emplace_back("connect_timeout", "5");
  if (!has_name) params.emplace_back("application_name", "glassbox");
  auto store = std::make_unique<PgAuditStore>(std::move(params), display, read_only);
  GB_RETURN_IF_ERROR(store->open());
  return std::unique_ptr<AuditStore>(std::move(store));
}

}  // namespace gb::server
