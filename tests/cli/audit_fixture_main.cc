// Writes a small audit store for the `glassbox audit` CLI tests: glassbox-audit-fixture PATH.
// The file is replaced; rows have fixed times so the tests can match them.
#include <cstdio>
#include <filesystem>
#include <string>

#include "server/audit.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: glassbox-audit-fixture PATH\n");
    return 2;
  }
  const std::string path = argv[1];
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  auto store = gb::server::AuditStore::open(path);
  if (!store.is_ok()) {
    std::fprintf(stderr, "%s\n", store.message().c_str());
    return 1;
  }
  const int64_t t0 = 1764491916000;  // 2025-11-30T08:38:36Z
  auto add = [&](gb::server::AuditRecord r) {
    const gb::Status s = (*store)->append(&r);
    if (!s.is_ok()) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      std::exit(1);
    }
  };
  gb::server::AuditRecord policy;
  policy.time_ms = t0;
  policy.kind = "policy";
  policy.key_id = "admin-1";
  policy.action = "set";
  policy.spec_json = R"({"allow":["steer"],"max_scale":4})";
  add(policy);
  for (int i = 0; i < 3; ++i) {
    gb::server::AuditRecord r;
    r.time_ms = t0 + 60000 * (i + 1);
    r.kind = "request";
    r.key_id = i == 1 ? "key-bob" : "key-alice";
    r.request_id = "chatcmpl-" + std::to_string(100 + i);
    r.model = "stories260K";
    r.action = "/v1/chat/completions";
    r.spec_json = R"({"steer":[{"layer":3,"vector":"calm","scale":)" + std::to_string(i + 1) + "}]}";
    r.status = 200;
    r.prompt_tokens = 10 + i;
    r.completion_tokens = 20 + i;
    r.finish_reason = i == 2 ? "stop,length" : "stop";
    r.repetition_rate = 0.25;
    add(r);
  }
  return 0;
}
