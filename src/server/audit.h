// The audit store: a durable, append-only record of every request that used an intervention and
// every admin change (policy, preset, vector, session, default set, variant, route) — who, when,
// what (the spec and its SHA-256), which model, and what came out. SQLite (a file, the default) or
// PostgreSQL (shared by replicas). An append is committed and flushed to disk when it returns, so a
// row exists for every answer the server sent even if the process is killed right after. Read by
// `GET /admin/audit` and `glassbox audit`; the change rows are also what replicas replay to share
// the admin state.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gb::server {

struct AuditRecord {
  int64_t id = 0;          // assigned by the store (monotonic, never reused)
  int64_t time_ms = 0;     // unix epoch ms; 0 = now at append
  std::string kind;        // one of audit_kinds(); anything else is an error
  std::string key_id;      // who (API key id; never the key)
  std::string request_id;  // for kind == "request"
  std::string model;       // served model name and version string
  std::string action;      // changes: "set", "delete", "rollback", "load", ...; requests: the endpoint
  std::string spec_json;   // the intervention spec / the change as JSON text (must parse; empty = null);
                           // stored canonical: compact, object keys sorted
  std::string spec_hash;   // hex SHA-256 of the stored (canonical) spec_json; computed at append when empty
  int32_t status = 0;      // HTTP status answered (requests)
  int64_t prompt_tokens = 0, completion_tokens = 0;
  std::string finish_reason;   // requests: e.g. "stop", "length", or "stop,length" for n > 1
  double repetition_rate = 0;  // requests: n-gram repetition rate of the output (computed by the caller)
};

// "request", "policy", "preset", "vector", "session", "default_set", "variant", "route".
const std::vector<std::string>& audit_kinds();

struct AuditQuery {
  int64_t since_ms = 0, until_ms = 0;    // since_ms <= time_ms < until_ms; 0 = unbounded
  std::string kind, key_id, request_id;  // empty = any
  int64_t after_id = 0;                  // paging: only ids > after_id
  int32_t limit = 100;                   // 1..1000 (kMaxAuditLimit); outside is an error
};
inline constexpr int32_t kMaxAuditLimit = 1000;

// What the store's write connection runs with (for tests and health output).
struct AuditStoreSettings {
  std::string backend;             // "sqlite" or "postgresql"
  std::string journal_mode;        // SQLite: "wal"
  int synchronous = 0;             // SQLite: 2 = FULL
  std::string synchronous_commit;  // PostgreSQL: "on" (or a stronger remote_write / remote_apply)
  std::string fsync;               // PostgreSQL: the server's fsync setting, "on"
  int schema_version = 0;          // SQLite: PRAGMA user_version; PostgreSQL: glassbox_schema.version
};

// Kinds of rows that change the admin state (every kind but "request"): the rows a replica
// replays to follow admin changes made on another one (Server's admin sync).
bool is_change_kind(const std::string& kind);

// The audit store: one interface, two backends chosen by the location. A location that starts
// with postgresql:// or postgres:// is a libpq connection URL (audit_pg.cc); anything else is
// the path of an SQLite file (audit_sqlite.cc). Both keep the same table and the same promises:
// ids only grow and are never reused, a row is committed durably before append returns, the spec
// is stored canonical with its SHA-256, queries filter and page the same way.
class AuditStore {
 public:
  static constexpr int kSchemaVersion = 1;

  // Opens or creates the store. SQLite: schema versioned with PRAGMA user_version, journal_mode
  // WAL, synchronous=FULL; a file that is not SQLite or has a newer schema is an error naming the
  // path. PostgreSQL: connects (a malformed URL or an unreachable server is an error naming the
  // URL, its password hidden), creates the table in the connection's schema under an advisory
  // lock (replicas may start together), synchronous_commit at least "on".
  static Result<std::unique_ptr<AuditStore>> open(const std::string& location);
  // Opens an existing store read-only (SQLite: SQLITE_OPEN_READONLY, e.g. beside a live server;
  // PostgreSQL: read-only transactions); append then fails. A missing file or database, a
  // non-SQLite file or a database without the audit table is an error naming the location.
  static Result<std::unique_ptr<AuditStore>> open_readonly(const std::string& location);
  // "postgresql" for a postgresql:// or postgres:// URL, else "sqlite".
  static std::string backend_of(const std::string& location);
  virtual ~AuditStore() = default;
  AuditStore(const AuditStore&) = delete;
  AuditStore& operator=(const AuditStore&) = delete;

  // Appends one row; durable (committed, and flushed to disk) when it returns OK. Validates kind
  // and spec_json, fills in id, time_ms (when 0), spec_json (canonical) and spec_hash (when
  // empty). Thread-safe (many HTTP threads); appends are serialized on one write connection.
  Status append(AuditRecord* record);
  // Appends a change row (is_change_kind) only if no change row has an id above last_change_id,
  // atomically with respect to every other writer of the store (another replica included): true
  // when appended (record->id set), false when another change came first (nothing written; the
  // caller applies the newer rows and tries again). Change rows of the store so appended get ids
  // in the order they commit.
  Result<bool> append_change(AuditRecord* record, int64_t last_change_id);
  // Records how a request that already has its row (appended at admission, before any token
  // left) ended: status, token counts, finish reason, repetition rate of record.id's row.
  // Durable when it returns OK.
  virtual Status update_result(const AuditRecord& record) = 0;
  // OK while the store accepts writes, else the reason: SQLite: the file is still the one opened
  // (not deleted or replaced) and the last write succeeded (a full disk, an I/O error);
  // PostgreSQL: the last write or ping reached the server. A later write that succeeds clears a
  // failure. Never waits on I/O (probes and /metrics call it).
  virtual Status health() const = 0;
  // Checks that the store accepts writes now (PostgreSQL: a round trip on the write connection,
  // reconnecting when it was lost), and records the outcome for health().
  virtual Status ping() = 0;
  // Fault injection for tests (SQLite): caps the database at this many pages (PRAGMA
  // max_page_count), so a write that needs more fails with SQLITE_FULL exactly as on a full disk.
  virtual Status limit_pages_for_test(int64_t pages);
  // Rows matching q, ascending id, at most q.limit. Runs on a separate read connection, so a
  // query does not hold up appends.
  Result<std::vector<AuditRecord>> query(const AuditQuery& q) const;
  // Change rows (is_change_kind) with id > after_id, ascending id, at most limit (1..1000).
  virtual Result<std::vector<AuditRecord>> changes_after(int64_t after_id, int32_t limit) const = 0;
  // Waits up to timeout for a sign that another writer appended a change (PostgreSQL: a NOTIFY on
  // the change channel; SQLite: none, it just waits), or until interrupt_wait().
  virtual void wait_for_change(std::chrono::milliseconds timeout) = 0;
  virtual void interrupt_wait() = 0;
  // Number of rows; -1 when the database cannot be read.
  virtual int64_t count() const = 0;
  virtual Result<AuditStoreSettings> settings() const = 0;
  // The location for messages: the SQLite path, or the URL with its password hidden.
  const std::string& path() const { return path_; }
  const std::string& backend() const { return backend_; }

 protected:
  AuditStore(std::string path, std::string backend) : path_(std::move(path)), backend_(std::move(backend)) {}
  // The backend's insert of a validated, canonical row; last_change_id < 0: unconditional, else
  // as append_change (*stale = true when a newer change row exists).
  virtual Status insert(AuditRecord* record, int64_t last_change_id, bool* stale) = 0;
  virtual Result<std::vector<AuditRecord>> select(const AuditQuery& q) const = 0;

 private:
  Status prepare_row(AuditRecord* record) const;
  std::string path_, backend_;
};

// The backends (audit_sqlite.cc, audit_pg.cc); AuditStore::open picks one by the location.
Result<std::unique_ptr<AuditStore>> open_sqlite_audit_store(const std::string& path, bool read_only);
Result<std::unique_ptr<AuditStore>> open_pg_audit_store(const std::string& url, bool read_only);

// A postgresql:// URL with its password (user:PASSWORD@ or password=...) replaced by "***".
std::string redact_url(const std::string& url);

// One record as JSON: every field; "spec" is the parsed spec (the text when it does not parse), so
// sha256_hex(j["spec"].dump()) == spec_hash for a hash the store computed; "time_ms" and "time"
// (ISO-8601 UTC with milliseconds).
nlohmann::json audit_record_json(const AuditRecord& r);

// Lower-case hex SHA-256 (OpenSSL EVP).
std::string sha256_hex(std::string_view data);

// "2026-11-30T08:38:36.123Z" for unix ms.
std::string iso8601_utc_ms(int64_t ms);
// Unix ms from all digits ("1764491916123") or ISO-8601: "YYYY-MM-DD", "YYYY-MM-DDTHH:MM[:SS[.fff]]"
// (also with ' ' for 'T'), optionally followed by "Z" or "±HH:MM" / "±HHMM"; no zone = UTC.
Result<int64_t> parse_time_ms(std::string_view text);

}  // namespace gb::server
