#include "server/audit.h"

#include <openssl/evp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>

namespace gb::server {

namespace {

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

bool is_change_kind(const std::string& kind) {
  const auto& kinds = audit_kinds();
  return kind != "request" && std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

std::string AuditStore::backend_of(const std::string& location) {
  for (const char* scheme : {"postgresql://", "postgres://"}) {
    if (location.rfind(scheme, 0) == 0) return "postgresql";
  }
  return "sqlite";
}

Result<std::unique_ptr<AuditStore>> AuditStore::open(const std::string& location) {
  if (location.empty()) return Status::error("audit store: no location given (an SQLite path or a postgresql:// URL)");
  if (backend_of(location) == "postgresql") return open_pg_audit_store(location, false);
  return open_sqlite_audit_store(location, false);
}

Result<std::unique_ptr<AuditStore>> AuditStore::open_readonly(const std::string& location) {
  if (location.empty()) return Status::error("audit store: no location given (an SQLite path or a postgresql:// URL)");
  if (backend_of(location) == "postgresql") return open_pg_audit_store(location, true);
  return open_sqlite_audit_store(location, true);
}

Status AuditStore::limit_pages_for_test(int64_t) {
  return Status::error("audit store " + path_ + ": limit_pages_for_test is SQLite fault injection");
}

Status AuditStore::prepare_row(AuditRecord* r) const {
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
  return Status::ok();
}

Status AuditStore::append(AuditRecord* r) {
  GB_RETURN_IF_ERROR(prepare_row(r));
  bool stale = false;
  return insert(r, -1, &stale);
}

Result<bool> AuditStore::append_change(AuditRecord* r, int64_t last_change_id) {
  if (!is_change_kind(r->kind))
    return Status::error("audit record: append_change takes a change row, not kind '" + r->kind + "'");
  if (last_change_id < 0) return Status::error("audit record: last_change_id must not be negative");
  GB_RETURN_IF_ERROR(prepare_row(r));
  bool stale = false;
  GB_RETURN_IF_ERROR(insert(r, last_change_id, &stale));
  return !stale;
}

Result<std::vector<AuditRecord>> AuditStore::query(const AuditQuery& q) const {
  if (q.limit < 1 || q.limit > kMaxAuditLimit) {
    return Status::error("audit query: limit must be 1.." + std::to_string(kMaxAuditLimit) + ", got " +
                         std::to_string(q.limit));
  }
  if (q.since_ms < 0 || q.until_ms < 0 || q.after_id < 0) {
    return Status::error("audit query: since, until and after_id must not be negative");
  }
  return select(q);
}

std::string redact_url(const std::string& url) {
  if (AuditStore::backend_of(url) != "postgresql") return url;
  std::string out = url;
  // user:PASSWORD@host in the authority part.
  const size_t scheme = out.find("://");
  if (scheme != std::string::npos) {
    const size_t start = scheme + 3;
    size_t end = out.find_first_of("/?", start);
    if (end == std::string::npos) end = out.size();
    const size_t at = out.rfind('@', end);
    if (at != std::string::npos && at >= start) {
      const size_t colon = out.find(':', start);
      if (colon != std::string::npos && colon < at) out.replace(colon + 1, at - colon - 1, "***");
    }
  }
  // password=... as a query parameter.
  for (size_t pos = out.find("password="); pos != std::string::npos; pos = out.find("password=", pos + 1)) {
    if (pos > 0 && out[pos - 1] != '?' && out[pos - 1] != '&') continue;
    const size_t v = pos + 9;
    size_t e = out.find('&', v);
    if (e == std::string::npos) e = out.size();
    out.replace(v, e - v, "***");
  }
  return out;
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

}  // namespace gb::server
