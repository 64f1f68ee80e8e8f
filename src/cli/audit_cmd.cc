// `glassbox audit`: query the audit store (server/audit.h) — a table, or one JSON object a line.
// Opens the store read-only (an SQLite file or a postgresql:// URL), so it runs beside a live server.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/table.h"
#include "server/audit.h"

namespace gb::cli {

namespace {

struct AuditOptions {
  std::string db;
  std::string kind, key_id, request_id, since, until;
  int64_t after_id = 0;
  int32_t limit = 100;
  bool json = false;
};

std::string or_dash(const std::string& s) { return s.empty() ? "-" : s; }

void print_table(const std::vector<server::AuditRecord>& rows) {
  const std::vector<std::string> head = {"id",     "time",   "kind",          "key_id", "request_id",
                                         "action", "status", "finish_reason", "tokens", "spec_hash"};
  std::vector<std::vector<std::string>> cells;
  cells.push_back(head);
  for (const auto& r : rows) {
    cells.push_back(
        {std::to_string(r.id), server::iso8601_utc_ms(r.time_ms), r.kind, or_dash(r.key_id), or_dash(r.request_id),
         or_dash(r.action), r.status ? std::to_string(r.status) : "-", or_dash(r.finish_reason),
         r.kind == "request" ? std::to_string(r.prompt_tokens) + "+" + std::to_string(r.completion_tokens) : "-",
         r.spec_hash.substr(0, 12)});
  }
  print_columns(cells);
}

int run_audit(const AuditOptions& o) {
  auto fail = [](const std::string& m) {
    std::fprintf(stderr, "glassbox audit: %s\n", m.c_str());
    return 1;
  };
  server::AuditQuery q;
  q.kind = o.kind;
  q.key_id = o.key_id;
  q.request_id = o.request_id;
  q.after_id = o.after_id;
  q.limit = o.limit;
  if (!o.since.empty()) {
    auto t = server::parse_time_ms(o.since);
    if (!t.is_ok()) return fail("--since: " + t.message());
    q.since_ms = *t;
  }
  if (!o.until.empty()) {
    auto t = server::parse_time_ms(o.until);
    if (!t.is_ok()) return fail("--until: " + t.message());
    q.until_ms = *t;
  }
  auto store = server::AuditStore::open_readonly(o.db);
  if (!store.is_ok()) return fail(store.message());
  auto rows = (*store)->query(q);
  if (!rows.is_ok()) return fail(rows.message());
  if (o.json) {
    for (const auto& r : *rows) {
      std::printf("%s\n",
                  server::audit_record_json(r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    }
  } else {
    print_table(*rows);
  }
  std::fflush(stdout);
  // A full page: say whether more rows match, and how to get them (on stderr, so stdout stays
  // the rows alone).
  if (static_cast<int32_t>(rows->size()) == q.limit) {
    server::AuditQuery next = q;
    next.after_id = rows->back().id;
    next.limit = 1;
    auto more = (*store)->query(next);
    if (more.is_ok() && !more->empty()) {
      std::string hint = "the next page is --after-id " + std::to_string(rows->back().id);
      if (q.limit < server::kMaxAuditLimit) {
        hint += ", or more at once with --limit N (up to " + std::to_string(server::kMaxAuditLimit) + ")";
      }
      std::fprintf(stderr, "glassbox audit: %d row%s shown, more match: %s\n", q.limit, q.limit == 1 ? "" : "s",
                   hint.c_str());
    }
  }
  return 0;
}

}  // namespace

void register_audit(CLI::App& app, Action* action) {
  auto o = std::make_shared<AuditOptions>();
  CLI::App* cmd =
      app.add_subcommand("audit", "Query the audit store (requests with interventions, policy/preset/vector changes)");
  cmd->add_option("--db", o->db, "The audit store the server writes: an SQLite file or a postgresql:// URL")
      ->required();
  const auto& kinds = server::audit_kinds();
  cmd->add_option("--kind", o->kind, "Only this kind")->check(CLI::IsMember(kinds));
  cmd->add_option("--key-id", o->key_id, "Only rows of this API key id");
  cmd->add_option("--request-id", o->request_id, "Only rows of this request id");
  cmd->add_option("--since", o->since, "From this time on (ISO-8601, e.g. 2026-11-30T08:00:00Z, or unix ms)");
  cmd->add_option("--until", o->until, "Before this time (ISO-8601 or unix ms)");
  cmd->add_option("--after-id", o->after_id, "Only ids greater than this (paging)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--limit", o->limit, "At most this many rows (default 100; stderr says when more match)")
      ->check(CLI::Range(1, server::kMaxAuditLimit));
  cmd->add_flag("--json", o->json, "One JSON object per line instead of a table");
  cmd->callback([o, action]() { *action = [o]() { return run_audit(*o); }; });
}

}  // namespace gb::cli
