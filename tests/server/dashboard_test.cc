// The dashboard's server side on the FakeEngine: finding the UI directory, which paths name a
// file, the static answers (types, CSP, a missing directory's message, no escape from the
// directory), GET /v1/glassbox/whoami per role and GET /v1/glassbox/monitor (request ids for
// admins only, `after`), and the interventions counter.
#include <filesystem>
#include <fstream>

#include "server/dashboard.h"
#include "server/http_fixture.h"
#include "support/test_support.h"

namespace gb::server {
namespace {

constexpr const char* kResearcherKey = "sk-researcher-321";

void write(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

// A UI directory with an index page, a script and a file whose type the dashboard does not serve.
std::string make_ui_dir() {
  const std::string dir = gb::test::temp_dir() + "/ui";
  write(dir + "/index.html", "<!doctype html><title>t</title>");
  write(dir + "/js/app.js", "export const x = 1;\n");
  write(dir + "/notes.exe", "MZ");
  write(dir + "/../secret.js", "the parent directory");
  return dir;
}

TEST(Dashboard, FindsTheDirectoryBesideTheBinaryOrInstalled) {
  const std::string root = gb::test::temp_dir();
  std::vector<std::string> tried;
  EXPECT_EQ(find_ui_dir("", root + "/bin", &tried), "");
  ASSERT_EQ(tried.size(), 2u);
  EXPECT_EQ(tried[0], root + "/bin/ui");
  EXPECT_EQ(tried[1], root + "/share/glassbox/ui");
  write(root + "/share/glassbox/ui/index.html", "x");
  EXPECT_EQ(find_ui_dir("", root + "/bin", &tried), root + "/share/glassbox/ui");
  write(root + "/bin/ui/index.html", "x");
  EXPECT_EQ(find_ui_dir("", root + "/bin", &tried), root + "/bin/ui");
  // A configured directory is the only one looked at.
  EXPECT_EQ(find_ui_dir(root + "/elsewhere", root + "/bin", &tried), "");
  EXPECT_EQ(tried, std::vector<std::string>{root + "/elsewhere"});
}

TEST(Dashboard, OnlyPlainRelativePathsNameAFile) {
  EXPECT_EQ(ui_file_for(""), "index.html");
  EXPECT_EQ(ui_file_for("js/pages/audit.js"), "js/pages/audit.js");
  for (const char* bad : {"../x.js", "js/../../x.js", ".hidden.js", "js/.x.js", "/etc/passwd", "js//a.js", "js/",
                          "a b.js", "a\\b.js", "%2e%2e/x.js"}) {
    EXPECT_FALSE(ui_file_for(bad).has_value()) << bad;
  }
  EXPECT_FALSE(ui_file_for(std::string(300, 'a')).has_value());
  EXPECT_EQ(ui_content_type("index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(ui_content_type("js/app.js"), "text/javascript; charset=utf-8");
  EXPECT_EQ(ui_content_type("vendor/uplot/uPlot.min.css"), "text/css; charset=utf-8");
  EXPECT_FALSE(ui_content_type("notes.exe").has_value());
  EXPECT_FALSE(ui_content_type("LICENSE").has_value());
}

class DashboardHttpTest : public HttpTest {};

TEST_F(DashboardHttpTest, ServesTheFilesWithTypesAndAPolicy) {
  ServerConfig cfg = test_config();
  cfg.ui_dir = make_ui_dir();
  start(cfg);
  auto c = client();
  auto res = c->Get("/ui/");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "<!doctype html><title>t</title>");
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(res->get_header_value("Content-Security-Policy").find("default-src 'self'"), std::string::npos);
  EXPECT_EQ(res->get_header_value("X-Content-Type-Options"), "nosniff");
  res = c->Get("/ui/js/app.js");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/javascript; charset=utf-8");
  // No key is needed for the pages themselves (they hold no data).
  res = c->Get("/ui");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 301);
  EXPECT_EQ(res->get_header_value("Location"), "/ui/");
  for (const char* path :
       {"/ui/notes.exe", "/ui/missing.js", "/ui/../secret.js", "/ui/%2e%2e/secret.js", "/ui/js//app.js"}) {
    res = c->Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 404) << path;
    EXPECT_EQ(res->body.find("the parent directory"), std::string::npos) << path;
  }
}

TEST_F(DashboardHttpTest, AMissingDirectoryIsAClearPageNotACrash) {
  ServerConfig cfg = test_config();
  cfg.ui_dir = gb::test::temp_dir() + "/no-ui-here";
  start(cfg);
  auto res = client()->Get("/ui/");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_NE(res->body.find("dashboard files not found"), std::string::npos) << res->body;
  EXPECT_NE(res->body.find(cfg.ui_dir), std::string::npos) << res->body;
  EXPECT_NE(res->body.find("ui_dir"), std::string::npos);
  res = client()->Get("/ui/js/app.js");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(client()->Get("/health")->status, 200);  // the server goes on
}

TEST_F(DashboardHttpTest, WhoamiTellsTheKeyItsRoleAndWhatItMayDo) {
  ServerConfig cfg = test_config();
  cfg.keys.push_back({"rita", kResearcherKey, "", Role::kResearcher, -1});
  cfg.interventions = true;
  cfg.audit_db = gb::test::temp_dir() + "/audit.db";
  start(cfg);
  auto who = [&](const char* key) {
    auto res = client()->Get("/v1/glassbox/whoami", auth(key));
    EXPECT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
    return json::parse(res->body);
  };
  json u = who(kUserKey);
  EXPECT_EQ(u["key_id"], "alice");
  EXPECT_EQ(u["role"], "user");
  EXPECT_EQ(u["can"], json::parse(R"({"observe": true, "intervene": false, "admin": false, "audit": false})"));
  EXPECT_FALSE(u.contains("audit_kinds"));
  EXPECT_EQ(u["model"], "tiny");
  EXPECT_EQ(u["shape"], json::parse(R"({"n_layers": 4, "hidden": 8, "intermediate": 16})"));
  json r = who(kResearcherKey);
  EXPECT_EQ(r["role"], "researcher");
  EXPECT_EQ(r["can"]["intervene"], true);
  EXPECT_EQ(r["can"]["admin"], false);
  json a = who(kAdminKey);
  EXPECT_EQ(a["role"], "admin");
  EXPECT_EQ(a["can"], json::parse(R"({"observe": true, "intervene": true, "admin": true, "audit": true})"));
  EXPECT_EQ(a["audit_kinds"][0], "request");
  // No key, a wrong key: refused as every /v1 route refuses them.
  expect_error(client()->Get("/v1/glassbox/whoami"), 401, "authentication_error", "");
  expect_error(client()->Get("/v1/glassbox/whoami", auth("sk-nope")), 401, "authentication_error", "");
}

TEST_F(DashboardHttpTest, WhoamiFollowsThePolicy) {
  ServerConfig cfg = test_config();
  cfg.glassbox_policy.observe_roles = {Role::kAdmin};  // interventions off (the default)
  start(cfg);
  json u = json::parse(client()->Get("/v1/glassbox/whoami", auth(kUserKey))->body);
  EXPECT_EQ(u["can"]["observe"], false);
  json a = json::parse(client()->Get("/v1/glassbox/whoami", auth(kAdminKey))->body);
  EXPECT_EQ(a["can"]["observe"], true);
  EXPECT_EQ(a["can"]["intervene"], false) << "interventions are off on this server";
  EXPECT_EQ(a["can"]["audit"], false) << "no audit store";
  // The monitor is observation: refused to the user here.
  expect_error(client()->Get("/v1/glassbox/monitor", auth(kUserKey)), 403, "permission_error", "may not observe");
}

TEST_F(DashboardHttpTest, MonitorGivesLayersAndEventsWithRequestIdsForAdminsOnly) {
  test::FakeEngineOptions opts;
  MonitorSnapshot& m = opts.monitor;
  MonitorConfig mc;
  mc.enabled = true;
  mc.every_steps = 2;
  mc.rule.min_abs = 5;
  mc.rule.min_ratio = 6;
  m.reset(4, mc);
  m.steps_sampled = 10;
  m.events_total = 3;
  m.events_per_layer = {0, 1, 2, 0};
  m.last_max_ratio = {1.5f, 7.f, 9.f, 2.f};
  m.peak_max_ratio = {2.f, 8.f, 12.f, 3.f};
  for (uint64_t i = 1; i <= 3; ++i) {
    MonitorSnapshot::Event e;
    e.index = i;
    e.request_id = "cmpl-" + std::to_string(i);
    e.event.layer = i == 1 ? 1 : 2;
    e.event.dim = 5;
    e.event.value = 9.5f;
    e.event.median_abs = 1.f;
    e.event.ratio = 9.5f;
    m.recent.push_back(e);
  }
  start(test_config(), opts);
  auto get = [&](const std::string& path, const char* key) {
    auto res = client()->Get(path.c_str(), auth(key));
    EXPECT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
    return json::parse(res->body);
  };
  json u = get("/v1/glassbox/monitor", kUserKey);
  EXPECT_EQ(u["enabled"], true);
  EXPECT_EQ(u["every_steps"], 2);
  EXPECT_EQ(u["rule"]["min_ratio"], 6);
  EXPECT_EQ(u["steps_sampled"], 10);
  EXPECT_EQ(u["events_total"], 3);
  ASSERT_EQ(u["layers"].size(), 4u);
  EXPECT_EQ(u["layers"][2]["events"], 2);
  EXPECT_EQ(u["layers"][2]["peak_max_ratio"], 12);
  EXPECT_EQ(u["layers"][1]["last_max_ratio"], 7);
  ASSERT_EQ(u["recent"].size(), 3u);
  EXPECT_EQ(u["recent"][0]["layer"], 1);
  EXPECT_EQ(u["recent"][0]["point"], "resid_post");
  EXPECT_FALSE(u["recent"][0].contains("request_id")) << "whose request it was is admin data";
  json a = get("/v1/glassbox/monitor?after=1", kAdminKey);
  ASSERT_EQ(a["recent"].size(), 2u);
  EXPECT_EQ(a["recent"][0]["index"], 2);
  EXPECT_EQ(a["recent"][0]["request_id"], "cmpl-2");
  EXPECT_EQ(get("/v1/glassbox/monitor?after=3", kAdminKey)["recent"].size(), 0u);
  expect_error(client()->Get("/v1/glassbox/monitor?after=-1", auth(kUserKey)), 400, "invalid_request_error", "after");
  expect_error(client()->Get("/v1/glassbox/monitor?after=x", auth(kUserKey)), 400, "invalid_request_error", "after");
}

TEST_F(DashboardHttpTest, InterventionsAreCountedByOpAndPoint) {
  ServerConfig cfg = test_config();
  cfg.keys.push_back({"rita", kResearcherKey, "", Role::kResearcher, -1});
  cfg.interventions = true;
  cfg.audit_db = gb::test::temp_dir() + "/audit.db";
  start(cfg);
  const json body = {{"prompt", "x"},
                     {"max_tokens", 2},
                     {"glassbox",
                      {{"interventions",
                        {{{"op", "scale"}, {"point", "mlp_act"}, {"layer", 1}, {"dims", {3}}, {"strength", 0.5}},
                         {{"op", "scale"}, {"point", "mlp_act"}, {"layer", 2}, {"dims", {3}}, {"strength", 0.5}},
                         {{"op", "skip"}, {"layer", 3}}}}}}};
  for (int i = 0; i < 2; ++i) {
    auto res = post("/v1/completions", body, kResearcherKey);
    ASSERT_EQ(res->status, 200) << res->body;
  }
  // Observation alone is not an intervention.
  ASSERT_EQ(post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}, {"glassbox", {{"observe", json::object()}}}})
                ->status,
            200);
  const std::string text = client()->Get("/metrics")->body;
  EXPECT_NE(text.find("glassbox_interventions_total{model=\"tiny\",op=\"scale\",point=\"mlp_act\"} 4"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("glassbox_interventions_total{model=\"tiny\",op=\"skip\",point=\"resid_post\"} 2"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace gb::server
