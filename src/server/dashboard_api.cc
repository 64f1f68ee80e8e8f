// The dashboard: its static files at /ui/ (dashboard.h), and the two small JSON endpoints its
// pages need beside the API they already use: GET /v1/glassbox/whoami (the key's id, role and
// what it may do, so pages and controls follow the role) and GET /v1/glassbox/monitor (the
// massive-activation monitor's per-layer state and latest events, which /metrics has only as
// counters). Neither touches the engine step: the monitor snapshot is the copy /metrics and the
// monitor thread already take.
#include <httplib.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "core/mapped_file.h"
#include "server/dashboard.h"
#include "server/http_transport.h"
#include "server/json_input.h"
#include "server/server.h"
#include "server/server_internal.h"

namespace gb::server {

using json = nlohmann::json;

namespace {

bool has_index(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(std::filesystem::path(dir) / "index.html", ec);
}

bool safe_segment_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

// A page that says what is missing and how to fix it, instead of an empty 404.
std::string missing_ui_page(const std::vector<std::string>& tried) {
  std::string dirs;
  for (const std::string& d : tried) dirs += "<li><code>" + d + "</code></li>";
  return "<!doctype html><html><head><meta charset=\"utf-8\"><title>Glassbox dashboard not installed</title></head>"
         "<body><h1>Glassbox dashboard files not found</h1><p>The server is running, but no directory with the "
         "dashboard's <code>index.html</code> was found. Looked in:</p><ul>" +
         dirs +
         "</ul><p>Build the project (CMake copies <code>ui/</code> beside the <code>glassbox</code> binary), install "
         "it (<code>share/glassbox/ui</code>), or set <code>ui_dir</code> (<code>--ui-dir DIR</code>, "
         "<code>GLASSBOX_UI_DIR</code>) to the directory that holds <code>index.html</code>.</p></body></html>";
}

// What the key's role may do with this server's policy; the UI hides what is false.
json capabilities(const Caller& caller, const GlassService* glass, bool interventions, bool audit) {
  const bool admin = caller.role == Role::kAdmin;
  const bool observe = glass != nullptr && !glass->may_observe(caller, "");
  const bool intervene = glass != nullptr && interventions && !glass->may_intervene(caller, "");
  return {{"observe", observe}, {"intervene", intervene}, {"admin", admin}, {"audit", admin && audit}};
}

}  // namespace

std::string executable_dir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  return exe.parent_path().string();
}

std::string find_ui_dir(const std::string& configured, const std::string& exe_dir, std::vector<std::string>* tried) {
  tried->clear();
  if (!configured.empty()) {
    tried->push_back(configured);
    return has_index(configured) ? configured : "";
  }
  if (exe_dir.empty()) return "";
  for (const std::filesystem::path& p :
       {std::filesystem::path(exe_dir) / "ui", std::filesystem::path(exe_dir) / ".." / "share" / "glassbox" / "ui"}) {
    const std::string d = p.lexically_normal().string();
    tried->push_back(d);
    if (has_index(d)) return d;
  }
  return "";
}

std::optional<std::string> ui_file_for(const std::string& rel) {
  if (rel.empty()) return std::string("index.html");
  if (rel.size() > 255) return std::nullopt;
  size_t start = 0;
  while (start <= rel.size()) {
    const size_t end = std::min(rel.find('/', start), rel.size());
    if (end == start) return std::nullopt;  // empty segment: a leading, doubled or trailing slash
    if (rel[start] == '.') return std::nullopt;
    for (size_t i = start; i < end; ++i)
      if (!safe_segment_char(rel[i])) return std::nullopt;
    start = end + 1;
  }
  return rel;
}

std::optional<std::string> ui_content_type(const std::string& file) {
  static const std::pair<const char*, const char*> kTypes[] = {{".html", "text/html; charset=utf-8"},
                                                               {".js", "text/javascript; charset=utf-8"},
                                                               {".css", "text/css; charset=utf-8"},
                                                               {".svg", "image/svg+xml"},
                                                               {".png", "image/png"},
                                                               {".json", "application/json"},
                                                               {".ico", "image/x-icon"},
                                                               {".txt", "text/plain; charset=utf-8"}};
  for (const auto& [ext, type] : kTypes) {
    const size_t n = std::char_traits<char>::length(ext);
    if (file.size() > n && file.compare(file.size() - n, n, ext) == 0) return std::string(type);
  }
  return std::nullopt;
}

void Server::install_dashboard_routes() {
  ui_dir_ = find_ui_dir(cfg_.ui_dir, executable_dir(), &ui_tried_);
  if (!ui_dir_.empty()) {
    spdlog::info("dashboard at /ui/ (files in {})", ui_dir_);
  } else {
    std::string dirs;
    for (const std::string& d : ui_tried_) dirs += (dirs.empty() ? "" : ", ") + d;
    spdlog::warn("dashboard files not found (looked in {}): /ui/ answers 404 saying so; set ui_dir", dirs);
  }
  auto guarded = [this](void (Server::*fn)(const httplib::Request&, httplib::Response&)) {
    return [this, fn](const httplib::Request& req, httplib::Response& res) {
      try {
        (this->*fn)(req, res);
      } catch (const std::exception& e) {
        spdlog::error("{} {}: {}", req.method, req.path, e.what());
        send_error(res, make_error(500, "server_error", "internal_error", "internal error"));
      }
    };
  };
  http_->Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_redirect("/ui/", 302); });
  http_->Get("/ui", [](const httplib::Request&, httplib::Response& res) { res.set_redirect("/ui/", 301); });
  http_->Get(R"(/ui/(.*))", guarded(&Server::handle_ui));
  http_->Get("/v1/glassbox/whoami", guarded(&Server::handle_whoami));
  http_->Get("/v1/glassbox/monitor", guarded(&Server::handle_monitor));
}

void Server::handle_ui(const httplib::Request& req, httplib::Response& res) {
  // The pages load scripts and styles from here only and talk to this origin only.
  res.set_header("Content-Security-Policy",
                 "default-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; "
                 "base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Cache-Control", "no-cache");
  if (ui_dir_.empty()) {
    res.status = 404;
    return res.set_content(missing_ui_page(ui_tried_), "text/html; charset=utf-8");
  }
  const std::optional<std::string> file = ui_file_for(req.matches[1].str());
  const std::optional<std::string> type = file ? ui_content_type(*file) : std::nullopt;
  if (!file || !type) {
    res.status = 404;
    return res.set_content("no dashboard file " + quote_input(req.matches[1].str()) + "\n",
                           "text/plain; charset=utf-8");
  }
  Result<std::string> body = read_file(ui_dir_ + "/" + *file);
  if (!body.is_ok()) {
    res.status = 404;
    return res.set_content("no dashboard file " + quote_input(*file) + "\n", "text/plain; charset=utf-8");
  }
  res.set_content(std::move(body.value()), type->c_str());
}

void Server::handle_whoami(const httplib::Request& req, httplib::Response& res) {
  Caller caller;
  ApiError err;
  if (!authorize(req, Role::kUser, &caller, &err)) return send_error(res, err);
  json out = {{"object", "glassbox.whoami"},
              {"key_id", caller.key_id},
              {"role", role_name(caller.role)},
              {"can", capabilities(caller, glass_.get(), cfg_.interventions, audit_ != nullptr)},
              {"model", cfg_.served_model_name},
              {"ready", state() == State::kReady}};
  // The kinds the Audit page filters by, as `glassbox audit --kind` takes them.
  if (caller.role == Role::kAdmin && audit_ != nullptr) out["audit_kinds"] = audit_kinds();
  if (engine_ != nullptr) {
    if (const ModelConfig* m = engine_->model_config(); m != nullptr)
      out["shape"] = {{"n_layers", m->n_layers}, {"hidden", m->n_embd}, {"intermediate", m->n_ff}};
  }
  res.set_content(out.dump(), "application/json");
}

void Server::handle_monitor(const httplib::Request& req, httplib::Response& res) {
  Caller caller;
  ApiError err;
  if (!authorize(req, Role::kUser, &caller, &err)) return send_error(res, err);
  if (engine_ == nullptr || glass_ == nullptr)
    return send_error(res, make_error(503, "service_unavailable", "not_ready", "the model is still loading"));
  if (auto e = glass_->may_observe(caller, "monitor")) return send_error(res, *e);
  uint64_t after = 0;
  if (req.has_param("after")) {
    const std::string v = req.get_param_value("after");
    char* end = nullptr;
    const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
    if (v.empty() || v[0] == '-' || end == v.c_str() || *end != '\0')
      return send_error(res, invalid_field("after", "after: expected a non-negative integer (an event index)"));
    after = x;
  }
  const MonitorSnapshot m = engine_->monitor();
  auto num = [](double v) { return std::isfinite(v) ? json(v) : json("inf"); };
  json layers = json::array();
  for (size_t l = 0; l < m.events_per_layer.size(); ++l) {
    layers.push_back({{"layer", l},
                      {"events", m.events_per_layer[l]},
                      {"last_max_ratio", l < m.last_max_ratio.size() ? num(m.last_max_ratio[l]) : json(0)},
                      {"last_max_abs", l < m.last_max_abs.size() ? num(m.last_max_abs[l]) : json(0)},
                      {"peak_max_ratio", l < m.peak_max_ratio.size() ? num(m.peak_max_ratio[l]) : json(0)}});
  }
  // Request ids say whose requests they were: admins only.
  const bool admin = caller.role == Role::kAdmin;
  json recent = json::array();
  for (const MonitorSnapshot::Event& e : m.recent) {
    if (e.index <= after) continue;
    const MassiveEvent& ev = e.event;
    json j = {{"index", e.index},
              {"layer", ev.layer},
              {"point", std::string(hook_point_name(ev.point))},
              {"token", ev.position},
              {"dim", ev.dim},
              {"value", num(ev.value)},
              {"median_abs", num(ev.median_abs)},
              {"ratio", num(ev.ratio)}};
    if (admin) j["request_id"] = e.request_id;
    recent.push_back(std::move(j));
  }
  const MassiveRule& rule = m.config.rule;
  json out = {{"object", "glassbox.monitor"},
              {"enabled", m.config.enabled},
              {"every_steps", m.config.every_steps},
              {"rule",
               {{"min_abs", rule.min_abs},
                {"min_ratio", rule.min_ratio},
                {"median", std::string(massive_median_name(rule.median))},
                {"fire_on", std::string(massive_fire_name(rule.fire_on))}}},
              {"steps_sampled", m.steps_sampled},
              {"rows_checked", m.rows_checked},
              {"events_total", m.events_total},
              {"events_dropped", m.events_dropped},
              {"layers", layers},
              {"recent", recent}};
  res.set_content(out.dump(), "application/json");
}

}  // namespace gb::server
