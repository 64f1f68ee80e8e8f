// The audit store: round trip, filters and paging, validation, durability across SIGKILL,
// concurrent appends, conditional change rows, bad files and URLs, and the settings it runs with.
// The shared suite (AuditStoreTest) runs on both backends: SQLite (a temp file) and PostgreSQL (a
// fresh schema of the throwaway server ctest's pg_audit fixture starts, tests/support/pg_cluster.sh;
// GB_TEST_PG names its state folder). Without that server the PostgreSQL cases fail, naming
// scripts/setup.sh.
#include "server/audit.h"

#include <gtest/gtest.h>
#include <libpq-fe.h>
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

// The fixture server's URL (database "glassbox"), or "" after a failure naming what is missing.
std::string pg_base_url() {
  const char* dir = std::getenv("GB_TEST_PG");
  if (dir == nullptr || *dir == '\0') {
    ADD_FAILURE() << "GB_TEST_PG is not set: run this test through ctest (its pg_audit fixture starts a throwaway "
                     "PostgreSQL), or start one with tests/support/pg_cluster.sh start DIR and set GB_TEST_PG=DIR; "
                     "the server binaries come from scripts/setup.sh (Debian's postgresql)";
    return "";
  }
  std::ifstream f(std::string(dir) + "/url");
  std::string url;
  if (!std::getline(f, url) || url.empty()) {
    ADD_FAILURE() << "no PostgreSQL for the test: " << dir << "/url is missing (the pg_audit fixture failed; "
                  << "see its output; the server binaries come from scripts/setup.sh)";
    return "";
  }
  return url;
}

// Runs SQL on the fixture server's glassbox database (the test's own connection).
bool pg_exec(const std::string& url, const std::string& sql) {
  PGconn* c = PQconnectdb(url.c_str());
  bool ok = PQstatus(c) == CONNECTION_OK;
  if (!ok) ADD_FAILURE() << "cannot connect to the test PostgreSQL: " << PQerrorMessage(c);
  if (ok) {
    PQsetNoticeProcessor(
        c, [](void*, const char*) {}, nullptr);
    PGresult* r = PQexec(c, sql.c_str());
    ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
    if (!ok) ADD_FAILURE() << sql << ": " << PQresultErrorMessage(r);
    PQclear(r);
  }
  PQfinish(c);
  return ok;
}

// A fresh, empty store location: a file in a new temp folder, or a new schema of the test
// database (so ids start at 1 again).
std::string fresh_location(const std::string& backend) {
  if (backend == "sqlite") return test::temp_dir() + "/audit.db";
  const std::string base = pg_base_url();
  if (base.empty()) return "";
  static std::atomic<int> counter{0};
  const std::string schema = "t" + std::to_string(getpid()) + "_" + std::to_string(counter++);
  if (!pg_exec(base, "DROP SCHEMA IF EXISTS " + schema + " CASCADE; CREATE SCHEMA " + schema)) return "";
  return base + "&options=-csearch_path%3D" + schema;
}

class AuditStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::string location() {
    std::string l = fresh_location(GetParam());
    EXPECT_FALSE(l.empty());
    return l;
  }
};

INSTANTIATE_TEST_SUITE_P(Backends, AuditStoreTest, ::testing::Values("sqlite", "postgresql"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(AuditTest, Sha256) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_P(AuditStoreTest, RoundTrip) {
  const std::string path = location();
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

TEST_P(AuditStoreTest, EmptySpecIsNull) {
  auto store = open_store(location());
  ASSERT_TRUE(store);
  AuditRecord r;
  r.kind = "vector";
  r.action = "delete";
  ASSERT_TRUE(store->append(&r).is_ok());
  EXPECT_EQ(r.spec_json, "null");
  EXPECT_EQ(r.spec_hash, sha256_hex("null"));
  EXPECT_TRUE(audit_record_json(r)["spec"].is_null());
}

TEST_P(AuditStoreTest, Validation) {
  auto store = open_store(location());
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

TEST_P(AuditStoreTest, FiltersAndPaging) {
  auto store = open_store(location());
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
TEST_P(AuditStoreTest, DurableAcrossSigkill) {
  const std::string path = location();
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

TEST_P(AuditStoreTest, ConcurrentAppends) {
  auto store = open_store(location());
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

TEST_P(AuditStoreTest, UpdateResult) {
  auto store = open_store(location());
  ASSERT_TRUE(store);
  AuditRecord r = request_row("req-u", "k", 0);
  r.status = 0;
  r.completion_tokens = 0;
  r.finish_reason.clear();
  ASSERT_TRUE(store->append(&r).is_ok());
  r.status = 200;
  r.prompt_tokens = 7;
  r.completion_tokens = 9;
  r.finish_reason = "stop,length";
  r.repetition_rate = 1.0 / 3.0;
  ASSERT_TRUE(store->update_result(r).is_ok());
  auto rows = store->query({});
  ASSERT_TRUE(rows.is_ok()) << rows.message();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].status, 200);
  EXPECT_EQ((*rows)[0].prompt_tokens, 7);
  EXPECT_EQ((*rows)[0].completion_tokens, 9);
  EXPECT_EQ((*rows)[0].finish_reason, "stop,length");
  EXPECT_EQ((*rows)[0].repetition_rate, 1.0 / 3.0);  // bit for bit
  EXPECT_EQ((*rows)[0].spec_hash, r.spec_hash);      // the spec is not touched
  AuditRecord missing = r;
  missing.id = 999;
  Status s = store->update_result(missing);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("no row 999"), std::string::npos) << s.message();
  EXPECT_TRUE(store->health().is_ok()) << store->health().message();
  EXPECT_TRUE(store->ping().is_ok());
}

// Two writers on one store, as two replicas: a change row is appended only on top of the newest
// change row its writer has seen; request rows never count.
TEST_P(AuditStoreTest, ConditionalChangeRows) {
  const std::string where = location();
  auto a = open_store(where);
  auto b = open_store(where);
  ASSERT_TRUE(a && b);
  AuditRecord req = request_row("req-1", "k", 0);
  ASSERT_TRUE(a->append(&req).is_ok());
  AuditRecord p1;
  p1.kind = "policy";
  p1.action = "set";
  p1.spec_json = R"({"policy":{"max_interventions":4}})";
  auto ok = a->append_change(&p1, 0);
  ASSERT_TRUE(ok.is_ok()) << ok.message();
  EXPECT_TRUE(*ok);
  EXPECT_EQ(p1.id, 2);
  // b has not seen row 2: refused, nothing written.
  AuditRecord p2 = p1;
  p2.id = 0;
  p2.spec_json = R"({"policy":{"max_interventions":8}})";
  ok = b->append_change(&p2, 0);
  ASSERT_TRUE(ok.is_ok()) << ok.message();
  EXPECT_FALSE(*ok);
  EXPECT_EQ(a->count(), 2);
  // What b replays: the change rows only, in id order.
  auto changes = b->changes_after(0, 10);
  ASSERT_TRUE(changes.is_ok()) << changes.message();
  ASSERT_EQ(changes->size(), 1u);
  EXPECT_EQ((*changes)[0].id, 2);
  EXPECT_EQ((*changes)[0].spec_json, p1.spec_json);
  // More request rows after it change nothing; b, caught up, may append.
  AuditRecord req2 = request_row("req-2", "k", 0);
  ASSERT_TRUE(a->append(&req2).is_ok());
  ok = b->append_change(&p2, 2);
  ASSERT_TRUE(ok.is_ok()) << ok.message();
  EXPECT_TRUE(*ok);
  EXPECT_GT(p2.id, req2.id);
  AuditRecord p3 = p1;
  p3.id = 0;
  ok = a->append_change(&p3, 2);  // a has not seen b's row
  ASSERT_TRUE(ok.is_ok());
  EXPECT_FALSE(*ok);
  changes = a->changes_after(2, 10);
  ASSERT_TRUE(changes.is_ok());
  ASSERT_EQ(changes->size(), 1u);
  EXPECT_EQ((*changes)[0].id, p2.id);
  EXPECT_TRUE(a->changes_after(p2.id, 10)->empty());
  // Only change kinds, and the bounds.
  AuditRecord not_change = request_row("x", "k", 0);
  EXPECT_FALSE(a->append_change(&not_change, p2.id).is_ok());
  EXPECT_FALSE(a->changes_after(0, 0).is_ok());
  EXPECT_FALSE(a->changes_after(-1, 10).is_ok());
}

// Writers racing on one store (four threads, two connections each side): every change row that
// got in was appended on top of the one before it, so the rows form one chain in id order.
TEST_P(AuditStoreTest, RacingChangeWritersFormOneChain) {
  const std::string where = location();
  auto a = open_store(where);
  auto b = open_store(where);
  ASSERT_TRUE(a && b);
  constexpr int kThreads = 4, kEach = 15;
  std::atomic<int> errors{0}, refusals{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      AuditStore* s = (t % 2 ? a : b).get();
      int64_t last = 0;
      for (int done = 0; done < kEach;) {
        auto rows = s->changes_after(last, kMaxAuditLimit);
        if (!rows.is_ok()) {
          errors++;
          return;
        }
        if (!rows->empty()) last = rows->back().id;
        AuditRecord r;
        r.kind = "preset";
        r.action = "set";
        r.key_id = tag("w", t);
        r.spec_json = "{\"after\":" + std::to_string(last) + "}";
        auto ok = s->append_change(&r, last);
        if (!ok.is_ok()) {
          errors++;
          return;
        }
        if (*ok) {
          last = r.id;
          ++done;
        } else {
          refusals++;
        }
        if (t < 2) {
          AuditRecord req = request_row(tag("r", done), "k", 0);  // request rows in between
          if (!s->append(&req).is_ok()) errors++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  auto rows = a->changes_after(0, kMaxAuditLimit);
  ASSERT_TRUE(rows.is_ok()) << rows.message();
  ASSERT_EQ(rows->size(), static_cast<size_t>(kThreads * kEach));
  int64_t prev = 0;
  for (const AuditRecord& r : *rows) {
    const auto spec = nlohmann::json::parse(r.spec_json);
    EXPECT_EQ(spec["after"].get<int64_t>(), prev) << "row " << r.id;
    prev = r.id;
  }
  std::printf("%d change rows, %d refused and retried\n", kThreads * kEach, refusals.load());
}

TEST_P(AuditStoreTest, WaitForChange) {
  const std::string where = location();
  auto a = open_store(where);
  auto b = open_store(where);
  ASSERT_TRUE(a && b);
  // interrupt_wait ends a wait at once, on both backends.
  std::thread interrupter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    a->interrupt_wait();
  });
  auto t0 = std::chrono::steady_clock::now();
  a->wait_for_change(std::chrono::seconds(60));
  interrupter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  if (GetParam() != "postgresql") return;
  // PostgreSQL: another writer's change row wakes the waiter (NOTIFY at its commit).
  a->wait_for_change(std::chrono::milliseconds(50));  // LISTEN is in place
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    AuditRecord r;
    r.kind = "vector";
    r.action = "delete";
    EXPECT_TRUE(b->append(&r).is_ok());
  });
  t0 = std::chrono::steady_clock::now();
  a->wait_for_change(std::chrono::seconds(60));
  writer.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30)) << "no NOTIFY woke the waiter";
}

TEST(AuditTest, BackendAndRedaction) {
  EXPECT_EQ(AuditStore::backend_of("/var/lib/glassbox/audit.db"), "sqlite");
  EXPECT_EQ(AuditStore::backend_of("audit.db"), "sqlite");
  EXPECT_EQ(AuditStore::backend_of("postgresql://db/glassbox"), "postgresql");
  EXPECT_EQ(AuditStore::backend_of("postgres://db/glassbox"), "postgresql");
  EXPECT_EQ(redact_url("postgresql://gb:s3cret@db:5432/glassbox?sslmode=require"),
            "postgresql://gb:***@db:5432/glassbox?sslmode=require");
  EXPECT_EQ(redact_url("postgresql://db/glassbox?user=gb&password=s3cret&sslmode=require"),
            "postgresql://db/glassbox?user=gb&password=***&sslmode=require");
  EXPECT_EQ(redact_url("postgresql://gb@db/glassbox"), "postgresql://gb@db/glassbox");
  EXPECT_EQ(redact_url("/tmp/a:b@c.db"), "/tmp/a:b@c.db");
  EXPECT_FALSE(AuditStore::open("").is_ok());
}

// What the store's sessions commit with: at least synchronous_commit=on even when the URL (or the
// server's config) asks for off, on a server with fsync on.
TEST(AuditPgTest, SynchronousCommitOn) {
  const std::string where = fresh_location("postgresql");
  ASSERT_FALSE(where.empty());
  for (const std::string& url : {where, where + "%20-csynchronous_commit%3Doff"}) {
    auto store = open_store(url);
    ASSERT_TRUE(store);
    auto st = store->settings();
    ASSERT_TRUE(st.is_ok()) << st.message();
    EXPECT_EQ(st->backend, "postgresql");
    EXPECT_EQ(st->synchronous_commit, "on") << url;
    EXPECT_EQ(st->fsync, "on");
    EXPECT_EQ(st->schema_version, AuditStore::kSchemaVersion);
  }
}

TEST(AuditPgTest, NewerSchemaForeignTableAndEmptyDatabase) {
  const std::string base = pg_base_url();
  ASSERT_FALSE(base.empty());
  const std::string newer = fresh_location("postgresql");
  { ASSERT_TRUE(open_store(newer)); }
  const std::string schema = newer.substr(newer.rfind("%3D") + 3);
  ASSERT_TRUE(pg_exec(base, "UPDATE " + schema + ".glassbox_schema SET version = 2"));
  for (bool ro : {false, true}) {
    auto s = ro ? AuditStore::open_readonly(newer) : AuditStore::open(newer);
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("schema version 2 is newer"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("postgresql://"), std::string::npos) << s.message();
  }
  const std::string foreign = fresh_location("postgresql");
  const std::string fschema = foreign.substr(foreign.rfind("%3D") + 3);
  ASSERT_TRUE(pg_exec(base, "CREATE TABLE " + fschema + ".audit (x integer)"));
  auto s = AuditStore::open(foreign);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("not a glassbox audit store"), std::string::npos) << s.message();
  auto empty = AuditStore::open_readonly(fresh_location("postgresql"));
  ASSERT_FALSE(empty.is_ok());
  EXPECT_NE(empty.message().find("no audit store in this database yet"), std::string::npos) << empty.message();
  // Two servers starting at once on an empty database: one creates the table, both open it.
  const std::string both = fresh_location("postgresql");
  std::vector<std::thread> starters;
  std::atomic<int> opened{0};
  for (int i = 0; i < 4; ++i) {
    starters.emplace_back([&] {
      auto st = AuditStore::open(both);
      if (st.is_ok()) opened++;
      else ADD_FAILURE() << st.message();
    });
  }
  for (auto& t : starters) t.join();
  EXPECT_EQ(opened.load(), 4);
}

TEST(AuditPgTest, BadUrlsAndUnreachableServers) {
  const std::string base = pg_base_url();
  ASSERT_FALSE(base.empty());
  struct Case {
    std::string url, expect;
  };
  const std::vector<Case> cases = {
      {"postgresql://%zz/db", "not a valid PostgreSQL URL"},
      {"postgresql://gb:s3cret@127.0.0.1:1/glassbox", "cannot connect"},
      {"postgresql:///glassbox?host=/nonexistent-glassbox-dir&user=postgres", "cannot connect"},
      {"postgresql:///glassbox?host=/tmp&port=notaport", "cannot connect"},
      {"postgresql:///glassbox?nosuchparam=1", "not a valid PostgreSQL URL"},
      {std::string(base).replace(base.find("///glassbox"), 11, "///no_such_db"), "does not exist"},
  };
  for (const Case& c : cases) {
    for (bool ro : {false, true}) {
      auto s = ro ? AuditStore::open_readonly(c.url) : AuditStore::open(c.url);
      ASSERT_FALSE(s.is_ok()) << c.url;
      EXPECT_NE(s.message().find(c.expect), std::string::npos) << s.message();
      EXPECT_EQ(s.message().find("s3cret"), std::string::npos) << "password in: " << s.message();
    }
  }
}

// The server end of a connection goes away (a restarted server, a failover, an idle timeout):
// reads retry on a new connection at once; a write that was in flight fails, health() says so,
// and the next write reconnects. No row is lost.
TEST(AuditPgTest, ReconnectsAfterLosingItsConnections) {
  const std::string where = fresh_location("postgresql");
  ASSERT_FALSE(where.empty());
  const std::string app = "gb_reconnect_" + std::to_string(getpid());
  auto store = open_store(where + "&application_name=" + app);
  ASSERT_TRUE(store);
  AuditRecord r = request_row("before", "k", 0);
  ASSERT_TRUE(store->append(&r).is_ok());
  ASSERT_EQ(store->count(), 1);
  const std::string kill =
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '" + app + "'";
  ASSERT_TRUE(pg_exec(pg_base_url(), kill));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(store->count(), 1);  // the read retried on a new connection
  int failures = 0;
  AuditRecord after = request_row("after", "k", 0);
  Status s = store->append(&after);
  if (!s.is_ok()) {
    ++failures;
    EXPECT_NE(s.message().find("connection"), std::string::npos) << s.message();
    EXPECT_FALSE(store->health().is_ok());
    s = store->append(&after);
  }
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_LE(failures, 1);
  EXPECT_TRUE(store->health().is_ok()) << store->health().message();
  // ping() finds a lost writer connection without a write, and the next ping reconnects.
  ASSERT_TRUE(pg_exec(pg_base_url(), kill));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  if (!store->ping().is_ok()) {
    EXPECT_FALSE(store->health().is_ok());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // past the reconnect gap
  EXPECT_TRUE(store->ping().is_ok());
  EXPECT_TRUE(store->health().is_ok());
  auto rows = store->query({});
  ASSERT_TRUE(rows.is_ok()) << rows.message();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].request_id, "before");
  EXPECT_EQ((*rows)[1].request_id, "after");
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
  EXPECT_EQ(st->backend, "sqlite");
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

TEST_P(AuditStoreTest, ReadOnlyBesideWriter) {
  const std::string path = location();
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
TEST_P(AuditStoreTest, AppendLatency) {
  auto store = open_store(location());
  ASSERT_TRUE(store);
  constexpr int kN = 100;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kN; ++i) {
    AuditRecord r = request_row("lat-" + std::to_string(i), "k", 0);
    ASSERT_TRUE(store->append(&r).is_ok());
  }
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / kN;
  std::printf("audit append (%s): %.1f us per append (%d appends, %s)\n", GetParam().c_str(), us, kN,
              store->path().c_str());
  RecordProperty("append_us", std::to_string(us));
  EXPECT_LT(us, 200000.0);
}

}  // namespace
}  // namespace gb::server
