// The audit store: a durable, append-only record in SQLite of every request that used an
// intervention and every policy / preset / vector change — who, when, what (the spec and its
// SHA-256), which model, and what came out. An append is committed and fsynced (WAL,
// synchronous=FULL) when it returns, so a row exists for every answer the server sent even if the
// process is killed right after. Read by `GET /admin/audit` and `glassbox audit`.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

struct sqlite3;

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

// "request", "policy", "preset", "vector", "session", "default_set".
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
  std::string journal_mode;  // "wal"
  int synchronous = 0;       // 2 = FULL
  int schema_version = 0;    // PRAGMA user_version
};

class AuditStore {
 public:
  static constexpr int kSchemaVersion = 1;

  // Opens or creates the database (schema versioned with PRAGMA user_version; a file that is not
  // SQLite or has a newer schema is an error naming the path), journal_mode=WAL, synchronous=FULL.
  static Result<std::unique_ptr<AuditStore>> open(const std::string& path);
  // Opens an existing store read-only (SQLITE_OPEN_READONLY), e.g. beside a live server; append
  // then fails. A missing file, a non-SQLite file or a database without the audit table is an
  // error naming the path.
  static Result<std::unique_ptr<AuditStore>> open_readonly(const std::string& path);
  ~AuditStore();
  AuditStore(const AuditStore&) = delete;
  AuditStore& operator=(const AuditStore&) = delete;

  // Appends one row; durable (committed and fsynced) when it returns OK. Validates kind and
  // spec_json, fills in id, time_ms (when 0), spec_json (compact) and spec_hash (when empty).
  // Thread-safe (many HTTP threads); appends are serialized on one write connection.
  Status append(AuditRecord* record);
  // Records how a request that already has its row (appended at admission, before any token
  // left) ended: status, token counts, finish reason, repetition rate of record.id's row.
  // Durable when it returns OK.
  Status update_result(const AuditRecord& record);
  // OK while the store accepts writes: the file is still the one opened (not deleted or replaced)
  // and the last write succeeded (a full disk, an I/O error); else the reason. A later write that
  // succeeds clears a write failure.
  Status health() const;
  // Fault injection for tests: caps the database at this many pages (PRAGMA max_page_count), so
  // a write that needs more fails with SQLITE_FULL exactly as on a full disk.
  Status limit_pages_for_test(int64_t pages);
  // Rows matching q, ascending id, at most q.limit. Runs on a separate read connection, so a
  // query does not hold up appends (WAL: readers and the writer do not block each other).
  Result<std::vector<AuditRecord>> query(const AuditQuery& q) const;
  // Number of rows; -1 when the database cannot be read.
  int64_t count() const;
  Result<AuditStoreSettings> settings() const;
  const std::string& path() const { return path_; }

 private:
  AuditStore() = default;
  static Result<std::unique_ptr<AuditStore>> open_impl(const std::string& path, bool read_only);

  // The file still is the one opened (called with write_mu_ held).
  Status check_file() const;
  // Remembers a write's outcome for health() (write_mu_ held).
  Status note(Status st);

  std::string path_;
  bool read_only_ = false;
  uint64_t dev_ = 0, ino_ = 0;  // of the file opened
  std::string write_error_;     // the last write's failure; empty after a success
  mutable std::mutex write_mu_;
  sqlite3* writer_ = nullptr;  // null when read-only
  mutable std::mutex read_mu_;
  sqlite3* reader_ = nullptr;
};

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
