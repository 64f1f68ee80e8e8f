// The glass box over HTTP against the FakeEngine (a 4-layer model shape; it reports the
// interventions it was given as applied): the request extension, the policy (off by default,
// roles, caps, layers and points), presets, the vector library, sessions, the versioned default
// set with rollback, streaming reports and the repetition stop.
#include "server/http_fixture.h"

#include "support/test_support.h"

namespace gb::server {
namespace {

constexpr const char* kResearcherKey = "sk-researcher-321";

ServerConfig glass_config(bool interventions = true) {
  ServerConfig cfg = test_config();
  cfg.keys.push_back({"rita", kResearcherKey, "", Role::kResearcher, -1});
  cfg.rate_limit_burst = 1000;
  cfg.interventions = interventions;
  cfg.audit_db = gb::test::temp_dir() + "/audit.db";
  cfg.glassbox_policy.presets = json::parse(R"({"neuron-2-5-low": [
      {"op": "scale", "point": "mlp_act", "layer": 2, "dims": [5], "strength": -0.98}]})");
  return cfg;
}

json scale(double strength, int layer = 1, const char* point = "mlp_act") {
  return {{"op", "scale"}, {"point", point}, {"layer", layer}, {"dims", {3}}, {"strength", strength}};
}

json completion(const json& glassbox) { return {{"prompt", "x"}, {"max_tokens", 3}, {"glassbox", glassbox}}; }

class GlassHttpTest : public HttpTest {
 protected:
  json applied_of(const httplib::Result& res) {
    EXPECT_TRUE(res);
    if (!res) return nullptr;
    EXPECT_EQ(res->status, 200) << res->body;
    json body = json::parse(res->body);
    return body["choices"][0]["glassbox"]["applied"];
  }
  httplib::Result admin(const std::string& method, const std::string& path, const json& body = json::object()) {
    auto c = client();
    if (method == "PUT") return c->Put(path.c_str(), auth(kAdminKey), body.dump(), "application/json");
    if (method == "POST") return c->Post(path.c_str(), auth(kAdminKey), body.dump(), "application/json");
    if (method == "DELETE") return c->Delete(path.c_str(), auth(kAdminKey));
    return c->Get(path.c_str(), auth(kAdminKey));
  }
};

TEST_F(GlassHttpTest, InterventionsAreOffByDefault) {
  start(glass_config(/*interventions=*/false));
  auto res = post("/v1/completions", completion({{"interventions", {scale(0.5)}}}), kResearcherKey);
  expect_error(res, 403, "permission_error", "interventions are off");
  // Observation needs no switch.
  res = post("/v1/completions", completion({{"observe", {{"points", {"resid_post"}}}}}));
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_TRUE(json::parse(res->body)["choices"][0]["glassbox"].contains("report"));
  // A request without the extension has no glassbox field at all.
  res = post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}});
  EXPECT_FALSE(json::parse(res->body)["choices"][0].contains("glassbox"));
}

TEST_F(GlassHttpTest, RolesCapsLayersAndPoints) {
  ServerConfig cfg = glass_config();
  cfg.glassbox_policy.allowed_layers = {0, 1, 2};
  cfg.glassbox_policy.allowed_points = {"mlp_act", "resid_post"};
  start(cfg);
  // The user role may not intervene.
  expect_error(post("/v1/completions", completion({{"interventions", {scale(0.5)}}})), 403, "permission_error",
               "the user role may not intervene");
  // A researcher may, within the caps; the applied list echoes what was resolved.
  json applied = applied_of(post("/v1/completions", completion({{"interventions", {scale(0.5)}}}), kResearcherKey));
  ASSERT_EQ(applied.size(), 1u);
  EXPECT_EQ(applied[0]["op"], "scale");
  EXPECT_EQ(applied[0]["point"], "mlp_act");
  EXPECT_EQ(applied[0]["layers"], json({1, 1}));
  EXPECT_EQ(applied[0]["dims"], json({3}));
  // Over the cap: 400 naming the cap, never clamped.
  auto res = post("/v1/completions", completion({{"interventions", {scale(12)}}}), kResearcherKey);
  expect_error(res, 400, "invalid_request_error", "over the cap of 10");
  EXPECT_EQ(json::parse(res->body)["error"]["code"], "cap_exceeded");
  EXPECT_EQ(json::parse(res->body)["error"]["param"], "glassbox.interventions[0].strength");
  // Layers and points outside the policy.
  expect_error(post("/v1/completions", completion({{"interventions", {scale(0.5, 3)}}}), kResearcherKey), 403,
               "permission_error", "layer 3 is not in glassbox_policy.allowed_layers");
  expect_error(post("/v1/completions", completion({{"interventions", {scale(0.5, 1, "attn_out")}}}), kResearcherKey),
               403, "permission_error", "attn_out is not in glassbox_policy.allowed_points");
}

TEST_F(GlassHttpTest, MalformedExtensionsNameTheField) {
  start(glass_config());
  struct Case {
    json glassbox;
    std::string param, message;
  };
  const std::vector<Case> cases = {
      {{{"interventions", {{{"op", "squash"}, {"point", "mlp_act"}, {"layer", 1}, {"strength", 1}}}}},
       "glassbox.interventions[0].op", "expected scale, add"},
      {{{"interventions", {{{"op", "scale"}, {"point", "mlp_act"}, {"layer", 9}, {"strength", 1}}}}},
       "glassbox.interventions[0].layer", "outside the model's layers 0..3"},
      {{{"interventions", {{{"op", "scale"}, {"point", "mlp_act"}, {"layer", 1}, {"dims", {16}}, {"strength", 1}}}}},
       "glassbox.interventions[0]", "16 is outside mlp_act's 16 dims"},
      {{{"interventions", {{{"op", "add"}, {"point", "resid_post"}, {"layer", 1}, {"vector", {1, 2}}, {"strength", 1}}}}},
       "glassbox.interventions[0]", "2 values, resid_post has 8 dims"},
      {{{"interventions", {{{"op", "scale"}, {"point", "logits"}, {"layer", 1}, {"strength", 1}}}}},
       "glassbox.interventions[0].point", "per-layer hook point"},
      {{{"interventions", {{{"op", "scale"}, {"point", "mlp_act"}, {"layer", 1}, {"strenght", 1}}}}},
       "glassbox.interventions[0].strenght", "unknown field"},
      {{{"interventions", {{{"preset", "nope"}}}}}, "glassbox.interventions[0].preset", "unknown preset"},
      {{{"observe", {{"points", {"resid_post"}}, {"top_k", 99}}}}, "glassbox.observe.top_k", "expected 0..16"},
      {{{"observe", {{"layers", {{"from", 2}, {"to", 1}}}}}}, "glassbox.observe.layers", "from > to"},
      {{{"colour", "blue"}}, "glassbox.colour", "unknown field"},
  };
  for (const Case& c : cases) {
    auto res = post("/v1/completions", completion(c.glassbox), kResearcherKey);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << c.glassbox.dump() << "\n" << res->body;
    const json e = json::parse(res->body)["error"];
    EXPECT_EQ(e["param"], c.param) << res->body;
    EXPECT_NE(e["message"].get<std::string>().find(c.message), std::string::npos) << res->body;
  }
}

TEST_F(GlassHttpTest, PresetsLayerRangesAndClampAtInfinity) {
  start(glass_config());
  json applied = applied_of(post("/v1/completions", completion({{"interventions", {{{"preset", "neuron-2-5-low"}}}}}),
                                 kResearcherKey));
  ASSERT_EQ(applied.size(), 1u);
  EXPECT_EQ(applied[0]["layers"], json({2, 2}));
  EXPECT_FLOAT_EQ(applied[0]["strength"].get<float>(), -0.98f);
  // A list of layers becomes one intervention per contiguous run.
  applied = applied_of(post("/v1/completions",
                            completion({{"interventions", {{{"op", "clamp"}, {"point", "resid_post"},
                                                            {"layers", {0, 1, 3}}, {"strength", "inf"}}}}}),
                            kResearcherKey));
  ASSERT_EQ(applied.size(), 2u);
  EXPECT_EQ(applied[0]["layers"], json({0, 1}));
  EXPECT_EQ(applied[1]["layers"], json({3, 3}));
  EXPECT_EQ(applied[0]["strength"], "inf");
}

TEST_F(GlassHttpTest, VectorLibrarySessionsAndTheVersionedDefaultSet) {
  start(glass_config());
  // Admin only.
  auto res = client()->Put("/admin/glassbox/default", auth(kResearcherKey), "{}", "application/json");
  EXPECT_EQ(res->status, 403);

  // A library vector by name: its direction for the intervention's layer.
  json dir = json::array();
  for (int i = 0; i < 8; ++i) dir.push_back(i == 2 ? 1.0 : 0.0);
  ASSERT_EQ(admin("PUT", "/admin/glassbox/vectors/up", {{"directions", {{"1", dir}}}})->status, 200);
  json applied = applied_of(post("/v1/completions",
                                 completion({{"interventions", {{{"op", "add"}, {"point", "resid_post"}, {"layer", 1},
                                                                 {"vector", "up"}, {"strength", 2}}}}}),
                                 kResearcherKey));
  ASSERT_EQ(applied.size(), 1u);
  EXPECT_EQ(applied[0]["label"], "vector:up");
  expect_error(post("/v1/completions",
                    completion({{"interventions", {{{"op", "add"}, {"point", "resid_post"}, {"layer", 2},
                                                    {"vector", "up"}, {"strength", 2}}}}}),
                    kResearcherKey),
               400, "invalid_request_error", "no direction for layer 2");
  // {"control_vector": name} adds every direction at resid_post.
  applied = applied_of(
      post("/v1/completions", completion({{"interventions", {{{"control_vector", "up"}, {"strength", 0.5}}}}}),
           kResearcherKey));
  ASSERT_EQ(applied.size(), 1u);
  EXPECT_EQ(applied[0]["point"], "resid_post");

  // A session binds a stored set to whoever sends its header, among the roles and keys it lists
  // (a user included here; see SessionsAreBoundToRolesAndKeys).
  ASSERT_EQ(admin("PUT", "/admin/glassbox/sessions/exp-1", {{"interventions", {scale(0.25, 0)}}, {"roles", {"user"}}})->status,
            200);
  httplib::Headers h = auth();
  h.emplace("X-Glassbox-Session", "exp-1");
  res = client()->Post("/v1/completions", h, json{{"prompt", "x"}, {"max_tokens", 2}}.dump(), "application/json");
  applied = applied_of(res);
  ASSERT_EQ(applied.size(), 1u);
  EXPECT_EQ(applied[0]["layers"], json({0, 0}));
  h.erase("X-Glassbox-Session");
  h.emplace("X-Glassbox-Session", "nope");
  res = client()->Post("/v1/completions", h, json{{"prompt", "x"}, {"max_tokens", 2}}.dump(), "application/json");
  expect_error(res, 400, "invalid_request_error", "unknown session 'nope'");

  // The global default set: versions, applied to every request, one-call rollback.
  res = admin("PUT", "/admin/glassbox/default", {{"interventions", {scale(0.1, 0)}}});
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["change"]["version"], 1);
  res = admin("PUT", "/admin/glassbox/default", {{"interventions", {scale(0.2, 1), scale(0.3, 2)}}});
  EXPECT_EQ(json::parse(res->body)["change"]["version"], 2);
  auto plain = [&] { return applied_of(post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}})); };
  EXPECT_EQ(plain().size(), 2u);
  res = admin("POST", "/admin/glassbox/default/rollback");
  EXPECT_EQ(json::parse(res->body)["change"]["version"], 1);
  applied = plain();
  ASSERT_EQ(applied.size(), 1u);
  EXPECT_FLOAT_EQ(applied[0]["strength"].get<float>(), 0.1f);
  admin("POST", "/admin/glassbox/default/rollback");
  EXPECT_FALSE(json::parse(post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}})->body)["choices"][0].contains(
      "glassbox"));
  expect_error(admin("POST", "/admin/glassbox/default/rollback"), 400, "invalid_request_error", "no earlier version");
  // Over-cap sets are refused at definition too.
  expect_error(admin("PUT", "/admin/glassbox/default", {{"interventions", {scale(50)}}}), 400, "invalid_request_error",
               "over the cap");

  const json state = json::parse(admin("GET", "/admin/glassbox")->body);
  EXPECT_EQ(state["default"]["version"], 0);
  EXPECT_EQ(state["default"]["history"].size(), 2u);
  EXPECT_TRUE(state["sessions"].contains("exp-1"));
  EXPECT_EQ(state["vectors"][0]["name"], "up");
  // Every change was logged.
  int changes = 0;
  for (const std::string& line : logs()) changes += json::parse(line)["event"] == "glassbox_change";
  EXPECT_EQ(changes, 6);
}

// Every request that used an intervention and every change has a durable audit row, readable at
// /admin/audit (admin only); requests without interventions have none.
TEST_F(GlassHttpTest, AuditRowForEachUseAndChange) {
  start(glass_config());
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(post("/v1/completions", completion({{"interventions", {scale(0.1 * i)}}}), kResearcherKey)->status, 200);
  }
  ASSERT_EQ(post("/v1/completions", completion({{"observe", {{"points", {"resid_post"}}}}}))->status, 200);
  ASSERT_EQ(post("/v1/completions", completion({{"interventions", {scale(20)}}}), kResearcherKey)->status, 400);
  ASSERT_EQ(admin("PUT", "/admin/glassbox/presets/p2", {{"interventions", {scale(0.5)}}})->status, 200);

  EXPECT_EQ(client()->Get("/admin/audit", auth(kResearcherKey))->status, 403);
  auto res = admin("GET", "/admin/audit?kind=request");
  ASSERT_EQ(res->status, 200) << res->body;
  const json rows = json::parse(res->body)["data"];
  ASSERT_EQ(rows.size(), 3u);
  for (const json& r : rows) {
    EXPECT_EQ(r["key_id"], "rita");
    EXPECT_EQ(r["status"], 200);
    EXPECT_EQ(r["finish_reason"], "length");
    EXPECT_EQ(r["completion_tokens"], 3);
    EXPECT_EQ(r["spec"]["glassbox"]["interventions"][0]["op"], "scale");
    EXPECT_EQ(r["spec_hash"].get<std::string>().size(), 64u);
    EXPECT_EQ(r["model"], "tiny@/models/tiny");
  }
  EXPECT_NE(rows[0]["spec_hash"], rows[1]["spec_hash"]);  // different strengths
  const json changes = json::parse(admin("GET", "/admin/audit?kind=preset")->body)["data"];
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0]["action"], "set");
  EXPECT_EQ(changes[0]["spec"]["preset"], "p2");
  expect_error(admin("GET", "/admin/audit?since=yesterday"), 400, "invalid_request_error", "since");
}

TEST_F(GlassHttpTest, StreamingCarriesTheReportInTheFinalChunk) {
  start(glass_config());
  json body = completion({{"interventions", {scale(0.5)}}});
  body["stream"] = true;
  int status = 0;
  httplib::Headers h = auth(kResearcherKey);
  std::string got;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = h;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    got.append(d, n);
    return true;
  };
  auto res = client()->send(req);
  status = res ? res->status : -1;
  ASSERT_EQ(status, 200);
  const auto payloads = sse_payloads(got);
  ASSERT_GE(payloads.size(), 2u);
  const json last = json::parse(payloads[payloads.size() - 2]);  // before [DONE]
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(last["choices"][0]["glassbox"]["applied"].size(), 1u);
  for (size_t i = 0; i + 2 < payloads.size(); ++i) EXPECT_FALSE(json::parse(payloads[i])["choices"][0].contains("glassbox"));
}

TEST_F(GlassHttpTest, StopOnRepetitionEndsALoop) {
  start(glass_config());
  // With ignore_eos the fake repeats its 21-character script: every 4-gram of the second pass repeats.
  json body = {{"prompt", "x"},
               {"max_tokens", 200},
               {"ignore_eos", true},
               {"glassbox", {{"stop_on_repetition", {{"ngram", 4}, {"window", 8}, {"max_rate", 0.5}}}}}};
  auto res = post("/v1/completions", body);
  ASSERT_EQ(res->status, 200) << res->body;
  const json r = json::parse(res->body);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["choices"][0]["glassbox"]["stopped_by"], "repetition");
  EXPECT_LT(r["usage"]["completion_tokens"].get<int>(), 40);
  EXPECT_GT(r["choices"][0]["glassbox"]["repetition_rate"].get<double>(), 0.0);
  EXPECT_TRUE(engine_->wait_cancelled(1, 2000ms));
  // Without the option the same request runs to max_tokens, and the rate lands in /metrics.
  body.erase("glassbox");
  res = post("/v1/completions", body);
  EXPECT_EQ(json::parse(res->body)["usage"]["completion_tokens"], 200);
  const std::string m = client()->Get("/metrics")->body;
  EXPECT_NE(m.find("glassbox_request_repetition_rate_count"), std::string::npos);
}

}  // namespace
}  // namespace gb::server
