// The audit store: round trip, filters and paging, validation, durability across SIGKILL,
// concurrent appends, bad files, and the pragmas it runs with.
#include "server/audit.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>
#include <thread>

#include "support/test_support.h"

namespace gb::server {
namespace {

AuditRecord request_row(const std::string& request_id, const std::string& key_id, int64_t time_ms) {
  AuditRecord r;
  r.time_ms = time_ms;
  r.kind = "request";
  r.key_id = key_id;
  r.request_id = request_id;
  r.model = "stories260K@abc123";
  r.action = "/v1/chat/completions";
  r.spec_json = R"({"steer":[{"layer":3,"scale":2.5,"vector":"calm"}],"zero":{"dims":[17],"layer":1}})";
  r.status = 200;
  r.prompt_tokens = 12;
  r.completion_tokens = 34;
  r.finish_reason = "stop";
  r.repetition_rate = 0.125;
  return r;
}

// prefix + n, appended (GCC 12's -Wrestrict misfires on "k" + std::to_string(n) when inlined).
std::string tag(const char* prefix, int n) {
  std::string s(prefix);
  s += std::to_string(n);
  return s;
}

std::unique_ptr<AuditStore> open_store(const std::string& path) {
  auto s = AuditStore::open(path);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return s.is_ok() ? std::move(s).value() : nullptr;
}

TEST(AuditTest, Sha256) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(AuditTest, RoundTrip) {
  const std::string path = test::temp_dir() + "/audit.db";
  auto store = open_store(path);
  ASSERT_TRUE(store);
  EXPECT_EQ(store->count(), 0);
  AuditRecord r = request_row("req-1", "alice", 1764491916123);
  const std::string spec = r.spec_json;
  ASSERT_TRUE(store->append(&r).is_ok());
  EXPECT_EQ(r.id, 1);
  EXPECT_EQ(r.spec_json, spec);  // already canonical: stored as given
  EXPECT_EQ(r.spec_hash, sha256_hex(spec));
  EXPECT_EQ(r.spec_hash.size(), 64u);

  AuditRecord change;
  change.kind = "policy";
  change.key_id = "admin";
  change.action = "set";
  change.spec_json = "{ \"z\" : 1,\n \"a\" : [1, 2.5] }";  // not canonical: re-serialized, keys sorted
  change.spec_hash = "given-by-caller";
  const auto before = std::chrono::system_clock::now();
  ASSERT_TRUE(store->append(&change).is_ok());
  EXPECT_EQ(change.id, 2);
  EXPECT_EQ(change.spec_json, R"({"a":[1,2.5],"z":1})");
  EXPECT_EQ(change.spec_hash, "given-by-caller");
  const int64_t before_ms = std::chrono::duration_cast<std::chrono::milliseconds>(before.time_since_epoch()).count();
  EXPECT_GE(change.time_ms, before_ms);
  EXPECT_LT(change.time_ms, before_ms + 60000);

  auto rows = store->query({});
  ASSERT_TRUE(rows.is_ok()) << rows.message();
  ASSERT_EQ(rows->size(), 2u);
  const AuditRecord& a = (*rows)[0];
  EXPECT_EQ(a.id, 1);
  EXPECT_EQ(a.time_ms, 1764491916123);
  EXPECT_EQ(a.kind, "request");
  EXPECT_EQ(a.key_id, "alice");
  EXPECT_EQ(a.request_id, "req-1");
  EXPECT_EQ(a.model, "stories260K@abc123");
  EXPECT_EQ(a.action, "/v1/chat/completions");
  EXPECT_EQ(a.spec_json, spec);
  EXPECT_EQ(a.spec_hash, sha256_hex(spec));
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.prompt_tokens, 12);
  EXPECT_EQ(a.completion_tokens, 34);
  EXPECT_EQ(a.finish_reason, "stop");
  EXPECT_DOUBLE_EQ(a.repetition_rate, 0.125);
  EXPECT_EQ((*rows)[1].spec_json, R"({"a":[1,2.5],"z":1})");
  EXPECT_EQ(store->count(), 2);

  const nlohmann::json j = audit_record_json(a);
  EXPECT_EQ(j["time"], "2025-11-30T08:38:36.123Z");
  EXPECT_EQ(j["time_ms"], 1764491916123);
  ASSERT_TRUE(j["spec"].is_object());
  EXPECT_EQ(j["spec"]["steer"][0]["vector"], "calm");
  EXPECT_EQ(j["spec_hash"], a.spec_hash);
  EXPECT_EQ(j["finish_reason"], "stop");
  // The hash can be checked from the JSON output alone.
  EXPECT_EQ(sha256_hex(j["spec"].dump()), a.spec_hash);
  // The same spec with another key order and spacing has the same text and hash.
  AuditRecord same = request_row("req-2", "alice", 0);
  same.spec_json = R"({ "zero": {"layer": 1, "dims": [17]}, "steer": [{"vector": "calm", "scale": 2.5, "layer": 3}] })";
  ASSERT_TRUE(store->append(&same).is_ok());
  EXPECT_EQ(same.spec_json, spec);
  EXPECT_EQ(same.spec_hash, a.spec_hash);

  // Reopened: the rows and the id sequence survive.
  store.reset();
  store = open_store(path);
  ASSERT_TRUE(store);
  EXPECT_EQ(store->count(), 3);
  AuditRecord fourth = request_row("req-4", "bob", 0);
  ASSERT_TRUE(store->append(&fourth).is_ok());
  EXPECT_EQ(fourth.id, 4);
}

TEST(AuditTest, EmptySpecIsNull) {
  auto store = open_store(test::temp_dir() + "/audit.db");
  ASSERT_TRUE(store);
  AuditRecord r;
  r.kind = "vector";
  r.action = "delete";
  ASSERT_TRUE(store->append(&r).is_ok());
  EXPECT_EQ(r.spec_json, "null");
  EXPECT_EQ(r.spec_hash, sha256_hex("null"));
  EXPECT_TRUE(audit_record_json(r)["spec"].is_null());
}

TEST(AuditTest, Validation) {
  auto store = open_store(test::temp_dir() + "/audit.db");
  ASSERT_TRUE(store);
  for (const std::string& kind : audit_kinds()) {
    AuditRecord r;
    r.kind = kind;
    r.spec_json = "{}";
    EXPECT_TRUE(store->append(&r).is_ok()) << kind;
  }
  AuditRecord bad_kind = request_row("x", "k", 0);
  bad_kind.kind = "requests";
  Status s = store->append(&bad_kind);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("unknown kind 'requests'"), std::string::npos) << s.message();
  AuditRecord no_kind = request_row("x", "k", 0);
  no_kind.kind = "";
  EXPECT_FALSE(store->append(&no_kind).is_ok());
  AuditRecord bad_spec = request_row("x", "k", 0);
  bad_spec.spec_json = R"({"steer": [)";
  s = store->append(&bad_spec);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("not valid JSON"), std::string::npos) << s.message();
  EXPECT_EQ(store->count(), static_cast<int64_t>(audit_kinds().size()));

  for (int32_t limit : {0, -1, kMaxAuditLimit + 1}) {
    AuditQuery q;
    q.limit = limit;
    auto rows = store->query(q);
    ASSERT_FALSE(rows.is_ok()) << limit;
    EXPECT_NE(rows.message().find("limit must be 1..1000"), std::string::npos) << rows.message();
  }
  AuditQuery q;
  q.limit = kMaxAuditLimit;
  EXPECT_TRUE(store->query(q).is_ok());
  q.limit = 1;
  auto one = store->query(q);
  ASSERT_TRUE(one.is_ok());
  EXPECT_EQ(one->size(), 1u);
}

TEST(AuditTest, FiltersAndPaging) {
  auto store = open_store(test::temp_dir() + "/audit.db");
  ASSERT_TRUE(store);
  const int64_t t0 = 1764491916000;
  for (int i = 0; i < 30; ++i) {
    AuditRecord r = request_row("req-" + std::to_string(i), i % 3 == 0 ? "alice" : "bob", t0 + i * 1000);
    if (i % 5 == 4) {
      r.kind = "preset";
      r.request_id.clear();
      r.action = "set";
    }
    ASSERT_TRUE(store->append(&r).is_ok());
    ASSERT_EQ(r.id, i + 1);
  }
  auto ids = [&](const AuditQuery& q) {
    std::vector<int64_t> out;
    auto rows = store->query(q);
    EXPECT_TRUE(rows.is_ok()) << rows.message();
    if (rows.is_ok()) {
      for (const auto& r : *rows) out.push_back(r.id);
    }
    return out;
  };
  AuditQuery q;
  EXPECT_EQ(ids(q).size(), 30u);
  q.kind = "preset";
  EXPECT_EQ(ids(q), (std::vector<int64_t>{5, 10, 15, 20, 25, 30}));
  q = {};
  q.key_id = "alice";
  EXPECT_EQ(ids(q), (std::vector<int64_t>{1, 4, 7, 10, 13, 16, 19, 22, 25, 28}));
  q.kind = "request";
  EXPECT_EQ(ids(q), (std::vector<int64_t>{1, 4, 7, 13, 16, 19, 22, 28}));
  q = {};
  q.request_id = "req-7";
  EXPECT_EQ(ids(q), (std::vector<int64_t>{8}));
  q.request_id = "req-404";
  EXPECT_TRUE(ids(q).empty());
  // Time range: since inclusive, until exclusive.
  q = {};
  q.since_ms = t0 + 10000;
  q.until_ms = t0 + 13000;
  EXPECT_EQ(ids(q), (std::vector<int64_t>{11, 12, 13}));
  q.until_ms = 0;
  EXPECT_EQ(ids(q).size(), 20u);
  // Paging with after_id and limit walks every row exactly once, in order.
  std::vector<int64_t> all;
  q = {};
  q.limit = 7;
  for (;;) {
    auto page = ids(q);
    if (page.empty()) break;
    EXPECT_LE(page.size(), 7u);
    all.insert(all.end(), page.begin(), page.end());
    q.after_id = page.back();
  }
  ASSERT_EQ(all.size(), 30u);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], static_cast<int64_t>(i) + 1);
  // Paging combined with a filter.
  q = {};
  q.key_id = "bob";
  q.after_id = 20;
  q.limit = 2;
  EXPECT_EQ(ids(q), (std::vector<int64_t>{21, 23}));
  // A value with SQL in it is just a value.
  q = {};
  q.key_id = "x' OR '1'='1";
  EXPECT_TRUE(ids(q).empty());
}

// A child appends N rows, acknowledging each on a pipe as its append returns; the parent kills
// it with SIGKILL right after the N-th ack and must find all N rows.
TEST(AuditTest, DurableAcrossSigkill) {
  const std::string path = test::temp_dir() + "/audit.db";
  constexpr int kRows = 50;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    auto store = AuditStore::open(path);
    if (!store.is_ok()) _exit(3);
    for (int i = 1; i <= kRows; ++i) {
      AuditRecord r = request_row("req-" + std::to_string(i), "k", 0);
      if (!(*store)->append(&r).is_ok()) _exit(4);
      const int32_t n = i;
      if (write(fds[1], &n, sizeof(n)) != sizeof(n)) _exit(5);
    }
    for (;;) pause();  // killed here, with the store still open and nothing closed cleanly
  }
  close(fds[1]);
  int32_t acked = 0, n = 0;
  while (acked < kRows && read(fds[0], &n, sizeof(n)) == sizeof(n)) acked = n;
  kill(pid, SIGKILL);
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  close(fds[0]);
  ASSERT_EQ(acked, kRows) << "child exited early, status " << wstatus;
  ASSERT_TRUE(WIFSIGNALED(wstatus));
  EXPECT_EQ(WTERMSIG(wstatus), SIGKILL);

  auto store = open_store(path);
  ASSERT_TRUE(store);
  EXPECT_EQ(store->count(), kRows);
  AuditQuery q;
  q.limit = kMaxAuditLimit;
  auto rows = store->query(q);
  ASSERT_TRUE(rows.is_ok());
  ASSERT_EQ(rows->size(), static_cast<size_t>(kRows));
  for (int i = 0; i < kRows; ++i) EXPECT_EQ((*rows)[i].request_id, "req-" + std::to_string(i + 1));
}

TEST(AuditTest, ConcurrentAppends) {
  auto store = open_store(test::temp_dir() + "/audit.db");
  ASSERT_TRUE(store);
  constexpr int kThreads = 8, kPerThread = 25;
  std::vector<std::vector<int64_t>> ids(kThreads);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        AuditRecord r = request_row(tag("t", t) + tag("-", i), tag("k", t), 0);
        if (store->append(&r).is_ok()) ids[t].push_back(r.id);
        else failures++;
        if (i % 5 == 0) (void)store->query({});  // readers interleaved with writers
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  std::set<int64_t> unique;
  for (const auto& v : ids) {
    EXPECT_EQ(v.size(), static_cast<size_t>(kPerThread));
    for (size_t i = 1; i < v.size(); ++i) EXPECT_LT(v[i - 1], v[i]);  // monotonic per thread
    unique.insert(v.begin(), v.end());
  }
  EXPECT_EQ(unique.size(), static_cast<size_t>(kThreads * kPerThread));
  EXPECT_EQ(store->count(), kThreads * kPerThread);
  for (int t = 0; t < kThreads; ++t) {
    AuditQuery q;
    q.key_id = tag("k", t);
    auto rows = store->query(q);
    ASSERT_TRUE(rows.is_ok());
    EXPECT_EQ(rows->size(), static_cast<size_t>(kPerThread));
  }
}

TEST(AuditTest, NotSqliteFile) {
  const std::string path = test::temp_dir() + "/not.db";
  {
    std::ofstream f(path);
    f << "this is a text file, not a database, and it is long enough to have a header of sorts\n";
  }
  for (bool ro : {false, true}) {
    auto s = ro ? AuditStore::open_readonly(path) : AuditStore::open(path);
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("not an SQLite database"), std::string::npos) << s.message();
  }
}

TEST(AuditTest, NewerSchemaAndForeignDatabase) {
  const std::string dir = test::temp_dir();
  const std::string newer = dir + "/newer.db";
  {
    auto store = open_store(newer);
    ASSERT_TRUE(store);
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(newer.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version=2", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  for (bool ro : {false, true}) {
    auto s = ro ? AuditStore::open_readonly(newer) : AuditStore::open(newer);
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find(newer), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("schema version 2 is newer"), std::string::npos) << s.message();
  }

  const std::string foreign = dir + "/foreign.db";
  ASSERT_EQ(sqlite3_open(foreign.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE t(x)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto s = AuditStore::open(foreign);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("not an audit store"), std::string::npos) << s.message();

  auto missing = AuditStore::open_readonly(dir + "/missing.db");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.message().find(dir + "/missing.db"), std::string::npos) << missing.message();
  auto in_missing_dir = AuditStore::open(dir + "/no/such/dir/a.db");
  ASSERT_FALSE(in_missing_dir.is_ok());
}

// A damaged file is an error from open, append or query, never a crash.
TEST(AuditTest, CorruptedFile) {
  const std::string path = test::temp_dir() + "/audit.db";
  {
    auto store = open_store(path);
    ASSERT_TRUE(store);
    for (int i = 0; i < 200; ++i) {
      AuditRecord r = request_row(tag("req-", i), "k", 0);
      ASSERT_TRUE(store->append(&r).is_ok());
    }
  }  // closed: the WAL is checkpointed into the file
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096);
    const std::string junk(8192, '\xa5');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  auto store = AuditStore::open(path);
  if (!store.is_ok()) {
    std::printf("open: %s\n", store.message().c_str());
    EXPECT_NE(store.message().find(path), std::string::npos) << store.message();
    return;
  }
  AuditQuery q;
  q.limit = kMaxAuditLimit;
  auto rows = (*store)->query(q);
  AuditRecord r = request_row("after", "k", 0);
  const Status s = (*store)->append(&r);
  EXPECT_TRUE(!rows.is_ok() || !s.is_ok());
  std::printf("query: %s\nappend: %s\n", rows.message().c_str(), s.message().c_str());
  if (!rows.is_ok()) {
    EXPECT_NE(rows.message().find("corrupt"), std::string::npos) << rows.message();
  }
  if (!s.is_ok()) {
    EXPECT_NE(s.message().find("corrupt"), std::string::npos) << s.message();
  }
}

TEST(AuditTest, WalAndSynchronousFull) {
  const std::string path = test::temp_dir() + "/audit.db";
  auto store = open_store(path);
  ASSERT_TRUE(store);
  auto st = store->settings();
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(st->journal_mode, "wal");
  EXPECT_EQ(st->synchronous, 2);  // FULL
  EXPECT_EQ(st->schema_version, AuditStore::kSchemaVersion);
  // WAL is a property of the file: another connection sees it too.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &s, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(s), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(s, 0)), "wal");
  sqlite3_finalize(s);
  sqlite3_close(db);
}

TEST(AuditTest, ReadOnlyBesideWriter) {
  const std::string path = test::temp_dir() + "/audit.db";
  auto writer = open_store(path);
  ASSERT_TRUE(writer);
  AuditRecord r = request_row("a", "k", 0);
  ASSERT_TRUE(writer->append(&r).is_ok());
  auto ro = AuditStore::open_readonly(path);
  ASSERT_TRUE(ro.is_ok()) << ro.message();
  EXPECT_EQ((*ro)->count(), 1);
  AuditRecord r2 = request_row("b", "k", 0);
  EXPECT_FALSE((*ro)->append(&r2).is_ok());
  ASSERT_TRUE(writer->append(&r2).is_ok());
  EXPECT_EQ((*ro)->count(), 2);  // sees the writer's new commits
  // Read-only after the writer has gone (and checkpointed the WAL away).
  writer.reset();
  ro = AuditStore::open_readonly(path);
  ASSERT_TRUE(ro.is_ok()) << ro.message();
  EXPECT_EQ((*ro)->count(), 2);
}

TEST(AuditTest, ParseTime) {
  EXPECT_EQ(*parse_time_ms("1764491916123"), 1764491916123);
  EXPECT_EQ(*parse_time_ms("1970-01-01"), 0);
  EXPECT_EQ(*parse_time_ms("2025-11-30T08:38:36.123Z"), 1764491916123);
  EXPECT_EQ(*parse_time_ms("2025-11-30T08:38:36.123456Z"), 1764491916123);
  EXPECT_EQ(*parse_time_ms("2025-11-30 08:38:36"), 1764491916000);
  EXPECT_EQ(*parse_time_ms("2025-11-30T08:38"), 1764491880000);
  EXPECT_EQ(*parse_time_ms("2025-11-30T09:38:36+01:00"), 1764491916000);
  EXPECT_EQ(*parse_time_ms("2025-11-30T07:38:36-0100"), 1764491916000);
  for (const char* bad : {"", "yesterday", "2025-13-01", "2025-11-30T25:00", "2025-11-30T08:38:36X", "2025-11-3",
                          "99999999999999999999"}) {
    EXPECT_FALSE(parse_time_ms(bad).is_ok()) << bad;
  }
  EXPECT_EQ(iso8601_utc_ms(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(iso8601_utc_ms(1764491916123), "2025-11-30T08:38:36.123Z");
  for (int64_t ms : {int64_t{0}, int64_t{951782400000}, int64_t{1764491916123}, int64_t{4102444799999}}) {
    EXPECT_EQ(*parse_time_ms(iso8601_utc_ms(ms)), ms);
  }
}

// Per-append latency (commit + fsync), printed for the record; the bound only catches a store
// that stopped committing per append... or a pathologically slow disk.
TEST(AuditTest, AppendLatency) {
  auto store = open_store(test::temp_dir() + "/audit.db");
  ASSERT_TRUE(store);
  constexpr int kN = 100;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kN; ++i) {
    AuditRecord r = request_row("lat-" + std::to_string(i), "k", 0);
    ASSERT_TRUE(store->append(&r).is_ok());
  }
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / kN;
  std::printf("audit append: %.1f us per append (%d appends, %s)\n", us, kN, store->path().c_str());
  RecordProperty("append_us", std::to_string(us));
  EXPECT_LT(us, 200000.0);
}

}  // namespace
}  // namespace gb::server
