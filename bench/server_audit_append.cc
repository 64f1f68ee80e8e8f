// Audit append latency (AuditStore::append, a request row as the server writes it at admission:
// committed and flushed before it returns) on SQLite and on PostgreSQL, interleaved: rounds of
// --per-round appends alternate between the backends, so both see the same machine load. Prints
// p50 / p90 / p99 / max per backend. See docs/PERFORMANCE.md, "Audit append latency".
//
//   bench_server_audit_append --sqlite /tmp/a.db --pg 'postgresql:///glassbox?host=...' [--rounds 20]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "server/audit.h"

using gb::server::AuditRecord;
using gb::server::AuditStore;

int main(int argc, char** argv) {
  CLI::App app("Audit append latency, SQLite vs PostgreSQL, interleaved");
  std::string sqlite_path, pg_url;
  int rounds = 20, per_round = 50;
  app.add_option("--sqlite", sqlite_path, "SQLite audit file (created)");
  app.add_option("--pg", pg_url, "postgresql:// URL of a database to write into");
  app.add_option("--rounds", rounds, "Rounds (each backend once per round)")->check(CLI::Range(1, 100000));
  app.add_option("--per-round", per_round, "Appends per backend per round")->check(CLI::Range(1, 100000));
  CLI11_PARSE(app, argc, argv);
  std::vector<std::pair<std::string, std::unique_ptr<AuditStore>>> stores;
  for (const std::string& where : {sqlite_path, pg_url}) {
    if (where.empty()) continue;
    auto s = AuditStore::open(where);
    if (!s.is_ok()) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      return 1;
    }
    stores.emplace_back((*s)->backend(), std::move(s).value());
  }
  if (stores.empty()) {
    std::fprintf(stderr, "give --sqlite PATH and/or --pg URL\n");
    return 2;
  }
  std::map<std::string, std::vector<double>> us;
  for (int round = 0; round < rounds; ++round) {
    for (auto& [name, store] : stores) {
      for (int i = 0; i < per_round; ++i) {
        AuditRecord r;
        r.kind = "request";
        r.key_id = "bench";
        r.request_id = "cmpl-bench-" + std::to_string(round) + "-" + std::to_string(i);
        r.model = "stories260K@bench";
        r.action = "/v1/completions";
        r.spec_json =
            R"({"glassbox":{"interventions":[{"dims":[5],"layer":1,"op":"scale","point":"mlp_act","strength":0.5}]}})";
        const auto t0 = std::chrono::steady_clock::now();
        if (auto st = store->append(&r); !st.is_ok()) {
          std::fprintf(stderr, "%s\n", st.message().c_str());
          return 1;
        }
        us[name].push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
    }
  }
  std::printf("%-11s %8s %10s %10s %10s %10s\n", "backend", "appends", "p50_ms", "p90_ms", "p99_ms", "max_ms");
  for (auto& [name, v] : us) {
    std::sort(v.begin(), v.end());
    auto pct = [&](double p) {
      return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))] / 1000;
    };
    std::printf("%-11s %8zu %10.3f %10.3f %10.3f %10.3f\n", name.c_str(), v.size(), pct(0.50), pct(0.90), pct(0.99),
                v.back() / 1000);
  }
  return 0;
}
