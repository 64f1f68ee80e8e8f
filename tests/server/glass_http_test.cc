// The glass box over HTTP against the FakeEngine (a 4-layer model shape; it reports the
// interventions it was given as applied): the request extension, the policy (off by default,
// roles, caps, layers and points), presets, the vector library, sessions, the versioned default
// set with rollback, streaming reports and the repetition stop.
#include "server/http_fixture.h"

#include "engine/engine.h"
#include "support/glass_fixtures.h"
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
  cfg.max_body_bytes = 1 << 20;  // room for the stacking tests' 256-item lists
  return cfg;
}

json add_dims(double strength, int layer = 1) {
  return {{"op", "add"}, {"point", "mlp_act"}, {"layer", layer}, {"dims", {3}}, {"strength", strength}};
}

json times(const json& item, int n) {
  json a = json::array();
  for (int i = 0; i < n; ++i) a.push_back(item);
  return a;
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
    if (method == "PATCH") return c->Patch(path.c_str(), auth(kAdminKey), body.dump(), "application/json");
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
       "glassbox.interventions[0].op",
       "expected scale, add"},
      {{{"interventions", {{{"op", "scale"}, {"point", "mlp_act"}, {"layer", 9}, {"strength", 1}}}}},
       "glassbox.interventions[0].layer",
       "outside the model's layers 0..3"},
      {{{"interventions", {{{"op", "scale"}, {"point", "mlp_act"}, {"layer", 1}, {"dims", {16}}, {"strength", 1}}}}},
       "glassbox.interventions[0]",
       "16 is outside mlp_act's 16 dims"},
      {{{"interventions",
         {{{"op", "add"}, {"point", "resid_post"}, {"layer", 1}, {"vector", {1, 2}}, {"strength", 1}}}}},
       "glassbox.interventions[0]",
       "2 values, resid_post has 8 dims"},
      {{{"interventions", {{{"op", "scale"}, {"point", "logits"}, {"layer", 1}, {"strength", 1}}}}},
       "glassbox.interventions[0].point",
       "per-layer hook point"},
      {{{"interventions", {{{"op", "scale"}, {"point", "mlp_act"}, {"layer", 1}, {"strenght", 1}}}}},
       "glassbox.interventions[0].strenght",
       "unknown field"},
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

// observe.attention_sinks over HTTP: the choice's glassbox object carries per (layer, head) the
// mean, the max and its token (the fake reports 1 / (2 + h), 1 at token 0); a bad value is a 400
// naming the field; attn_in is a point a request may observe and steer.
TEST_F(GlassHttpTest, AttentionSinksAndAttnIn) {
  start(glass_config());
  auto res =
      post("/v1/completions", completion({{"observe", {{"layers", {1, 2}}, {"attention_sinks", {{"tokens", 3}}}}}}));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json g = json::parse(res->body)["choices"][0]["glassbox"];
  ASSERT_TRUE(g.contains("attention_sinks")) << g.dump();
  const json& s = g["attention_sinks"];
  EXPECT_EQ(s["sink_tokens"], 3);
  ASSERT_EQ(s["layers"].size(), 2u);
  EXPECT_EQ(s["layers"][0]["layer"], 1);
  EXPECT_EQ(s["layers"][1]["layer"], 2);
  EXPECT_EQ(s["layers"][0]["tokens"], 2);  // the prompt "x" with BOS
  ASSERT_EQ(s["layers"][0]["mean"].size(), 2u);
  EXPECT_EQ(s["layers"][0]["mean"][0], 0.5);
  EXPECT_NEAR(s["layers"][0]["mean"][1].get<double>(), 1.0 / 3.0, 1e-7);
  EXPECT_EQ(s["layers"][0]["max"], json({1.0, 1.0}));
  EXPECT_EQ(s["layers"][0]["max_token"], json({0, 0}));
  // true is the first token; without it there is no attention_sinks object.
  res = post("/v1/completions", completion({{"observe", {{"attention_sinks", true}}}}));
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["choices"][0]["glassbox"]["attention_sinks"]["sink_tokens"], 1);
  res = post("/v1/completions", completion({{"observe", {{"points", {"attn_in"}}}}}));
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_FALSE(json::parse(res->body)["choices"][0]["glassbox"].contains("attention_sinks"));

  for (const auto& [value, param] :
       std::vector<std::pair<json, std::string>>{{json{{"tokens", 17}}, "glassbox.observe.attention_sinks.tokens"},
                                                 {json{{"tokens", 0}}, "glassbox.observe.attention_sinks.tokens"},
                                                 {json("yes"), "glassbox.observe.attention_sinks"},
                                                 {json{{"count", 1}}, "glassbox.observe.attention_sinks.count"}}) {
    res = post("/v1/completions", completion({{"observe", {{"attention_sinks", value}}}}));
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << value.dump() << "\n" << res->body;
    const json e = json::parse(res->body)["error"];
    EXPECT_EQ(e["param"], param) << res->body;
    EXPECT_NE(e["message"].get<std::string>().find("attention_sinks"), std::string::npos) << res->body;
  }

  // A WeMask-style mask of a dim at attention's input.
  json applied = applied_of(
      post("/v1/completions",
           completion({{"interventions",
                        {{{"op", "set"}, {"point", "attn_in"}, {"layers", "all"}, {"dims", {5}}, {"strength", 0}}}}}),
           kResearcherKey));
  ASSERT_EQ(applied.size(), 1u);
  EXPECT_EQ(applied[0]["point"], "attn_in");
}

TEST_F(GlassHttpTest, PresetsLayerRangesAndClampAtInfinity) {
  start(glass_config());
  json applied = applied_of(
      post("/v1/completions", completion({{"interventions", {{{"preset", "neuron-2-5-low"}}}}}), kResearcherKey));
  ASSERT_EQ(applied.size(), 1u);
  EXPECT_EQ(applied[0]["layers"], json({2, 2}));
  EXPECT_FLOAT_EQ(applied[0]["strength"].get<float>(), -0.98f);
  // A list of layers becomes one intervention per contiguous run.
  applied = applied_of(
      post("/v1/completions",
           completion({{"interventions",
                        {{{"op", "clamp"}, {"point", "resid_post"}, {"layers", {0, 1, 3}}, {"strength", "inf"}}}}}),
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
  json applied = applied_of(
      post("/v1/completions",
           completion({{"interventions",
                        {{{"op", "add"}, {"point", "resid_post"}, {"layer", 1}, {"vector", "up"}, {"strength", 2}}}}}),
           kResearcherKey));
  ASSERT_EQ(applied.size(), 1u);
  EXPECT_EQ(applied[0]["label"], "vector:up");
  expect_error(
      post("/v1/completions",
           completion({{"interventions",
                        {{{"op", "add"}, {"point", "resid_post"}, {"layer", 2}, {"vector", "up"}, {"strength", 2}}}}}),
           kResearcherKey),
      400, "invalid_request_error", "no direction for layer 2");
  // {"control_vector": name} adds every direction at resid_post.
  applied = applied_of(post("/v1/completions",
                            completion({{"interventions", {{{"control_vector", "up"}, {"strength", 0.5}}}}}),
                            kResearcherKey));
  ASSERT_EQ(applied.size(), 1u);
  EXPECT_EQ(applied[0]["point"], "resid_post");

  // A session binds a stored set to whoever sends its header, among the roles and keys it lists
  // (a user included here; see SessionsAreBoundToRolesAndKeys).
  ASSERT_EQ(admin("PUT", "/admin/glassbox/sessions/exp-1", {{"interventions", {scale(0.25, 0)}}, {"roles", {"user"}}})
                ->status,
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

// skip over HTTP: an intervention like the others — the intervention role, the audit row's spec
// shows it as given (canonical), and the user role is refused; its parse errors are 400s.
TEST_F(GlassHttpTest, SkipIsAnAuditedIntervention) {
  start(glass_config());
  const json skip = {{"op", "skip"}, {"layers", {{"from", 1}, {"to", 2}}}};
  expect_error(post("/v1/completions", completion({{"interventions", {skip}}})), 403, "permission_error",
               "the user role may not intervene");
  json applied = applied_of(post("/v1/completions", completion({{"interventions", {skip}}}), kResearcherKey));
  ASSERT_EQ(applied.size(), 1u);
  EXPECT_EQ(applied[0]["op"], "skip");
  EXPECT_EQ(applied[0]["point"], "resid_post");
  EXPECT_EQ(applied[0]["layers"], json({1, 2}));
  EXPECT_FALSE(applied[0].contains("strength"));
  auto res = admin("GET", "/admin/audit?kind=request");
  ASSERT_EQ(res->status, 200) << res->body;
  const json rows = json::parse(res->body)["data"];
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["key_id"], "rita");
  EXPECT_EQ(rows[0]["spec"]["glassbox"]["interventions"],
            json::parse(R"([{"op": "skip", "point": "resid_post", "layers": {"from": 1, "to": 2}}])"));
  // Bad skips are the request's error, naming the field.
  expect_error(post("/v1/completions", completion({{"interventions", {{{"op", "skip"}, {"layer", 1}, {"dims", {3}}}}}}),
                    kResearcherKey),
               400, "invalid_request_error", "glassbox.interventions[0].dims: not used by skip");
  expect_error(
      post("/v1/completions", completion({{"interventions", {{{"op", "skip"}, {"layer", 1}, {"point", "attn_out"}}}}}),
           kResearcherKey),
      400, "invalid_request_error", "skip acts at resid_post");
  expect_error(
      post("/v1/completions", completion({{"interventions", {{{"op", "skip"}, {"layer", 4}}}}}), kResearcherKey), 400,
      "invalid_request_error", "layer 4 is outside the model's layers 0..3");
  // A cap on skip is a configuration error: it has no strength.
  GlassPolicyConfig p;
  const Status st = parse_glass_policy(json::parse(R"({"caps": {"skip": 1}})"), &p);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("glassbox_policy.caps.skip: skip has no strength to cap"), std::string::npos)
      << st.message();
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
  for (size_t i = 0; i + 2 < payloads.size(); ++i)
    EXPECT_FALSE(json::parse(payloads[i])["choices"][0].contains("glassbox"));
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
  EXPECT_LT(r["usage"]["completion_tokens"].get<int>(), 40);
  // Issue 11.8: the choice says the stop was the repetition rule, with its figures.
  json g = r["choices"][0]["glassbox"];
  EXPECT_EQ(g["stopped_by"], "repetition");
  EXPECT_GT(g["repetition_rate"].get<double>(), 0.0);
  EXPECT_EQ(g["stopped"]["by"], "repetition");
  EXPECT_GT(g["stopped"]["window_rate"].get<double>(), 0.5);
  EXPECT_EQ(g["stopped"]["max_rate"], 0.5);
  EXPECT_EQ(g["stopped"]["window"], 8);
  EXPECT_TRUE(engine_->wait_cancelled(1, 2000ms));
  // Streamed: the last chunk before [DONE] says the same.
  body["stream"] = true;
  int status = 0;
  const auto payloads = sse_payloads(post_stream("/v1/completions", body, 0, &status));
  ASSERT_EQ(status, 200);
  ASSERT_GE(payloads.size(), 2u);
  g = json::parse(payloads[payloads.size() - 2])["choices"][0]["glassbox"];
  EXPECT_EQ(g["stopped_by"], "repetition");
  EXPECT_GT(g["stopped"]["window_rate"].get<double>(), 0.5);
  // Without the option the same request runs to max_tokens, and the rate lands in /metrics.
  body.erase("stream");
  body.erase("glassbox");
  res = post("/v1/completions", body);
  EXPECT_EQ(json::parse(res->body)["usage"]["completion_tokens"], 200);
  const std::string m = client()->Get("/metrics")->body;
  EXPECT_NE(m.find("glassbox_request_repetition_rate_count"), std::string::npos);
  // A natural end under the option has no "stopped".
  body["glassbox"] = {{"stop_on_repetition", {{"ngram", 4}, {"window", 8}, {"max_rate", 0.5}}}};
  body["ignore_eos"] = false;
  res = post("/v1/completions", body);
  EXPECT_FALSE(json::parse(res->body)["choices"][0]["glassbox"].contains("stopped"));
}

// Issue 11.4: no steered token leaves the server before a durable row for that request exists.
// The row is written at admission (status 0) and completed at the end.
TEST_F(GlassHttpTest, SteeredStreamHasItsRowBeforeTheFirstToken) {
  test::FakeEngineOptions opts;
  opts.token_delay = 20ms;
  start(glass_config(), opts);
  json body = completion({{"interventions", {scale(0.5)}}});
  body["stream"] = true;
  body["max_tokens"] = 10;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = auth(kResearcherKey);
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  json rows_at_first_token;
  std::string got;
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    got.append(d, n);
    if (rows_at_first_token.is_null() && got.find("\"text\"") != std::string::npos) {
      AuditQuery q;
      q.kind = "request";
      auto rows = server_->audit_store()->query(q);
      rows_at_first_token = json::array();
      if (rows.is_ok()) {
        for (const AuditRecord& r : *rows) rows_at_first_token.push_back(audit_record_json(r));
      }
    }
    return true;
  };
  auto res = client()->send(req);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  ASSERT_EQ(rows_at_first_token.size(), 1u) << got;
  EXPECT_EQ(rows_at_first_token[0]["status"], 0);  // admitted, outcome not yet known
  EXPECT_EQ(rows_at_first_token[0]["request_id"], res->get_header_value("X-Request-Id"));
  const json done = json::parse(admin("GET", "/admin/audit?kind=request")->body)["data"];
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0]["status"], 200);
  EXPECT_EQ(done[0]["finish_reason"], "length");
  EXPECT_EQ(done[0]["completion_tokens"], 10);
}

// Issue 11.4: a store that stops accepting writes (here: capped at its size, SQLITE_FULL as on a
// full disk — a fault injection; the e2e test uses a full tmpfs where it can mount one) refuses
// intervention requests with 503 before the engine sees them, and admin changes do not take
// effect; plain requests go on; /ready says why; it recovers when writes succeed again.
TEST_F(GlassHttpTest, FullAuditStoreRefusesSteeringBeforeAnyToken) {
  start(glass_config());
  AuditStore* store = server_->audit_store();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->limit_pages_for_test(1).is_ok());  // cannot grow beyond its pages now
  AuditRecord filler;
  filler.kind = "policy";
  for (int i = 0; i < 10000 && store->append(&filler).is_ok(); ++i) filler.id = 0;
  ASSERT_FALSE(store->append(&filler).is_ok());

  const size_t submitted = engine_->submitted().size();
  json steered = completion({{"interventions", {scale(0.5)}}});
  auto res = post("/v1/completions", steered, kResearcherKey);
  expect_error(res, 503, "service_unavailable", "audit store");
  EXPECT_EQ(json::parse(res->body)["error"]["code"], "audit_unavailable");
  steered["stream"] = true;
  res = post("/v1/completions", steered, kResearcherKey);
  expect_error(res, 503, "service_unavailable", "audit store");  // a JSON error, not a stream
  EXPECT_EQ(res->body.find("data:"), std::string::npos);
  EXPECT_EQ(engine_->submitted().size(), submitted);  // the engine never saw them

  EXPECT_EQ(post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}})->status, 200);  // plain: served
  json ready = json::parse(client()->Get("/ready")->body);
  EXPECT_EQ(ready["status"], "degraded");
  EXPECT_NE(ready["audit"].get<std::string>().find("full"), std::string::npos) << ready;

  auto change = admin("PUT", "/admin/glassbox/presets/p-full", {{"interventions", {scale(0.5)}}});
  expect_error(change, 503, "service_unavailable", "the change was not made");
  EXPECT_FALSE(json::parse(admin("GET", "/admin/glassbox")->body).dump().find("p-full") != std::string::npos);

  ASSERT_TRUE(store->limit_pages_for_test(1 << 30).is_ok());
  EXPECT_EQ(post("/v1/completions", completion({{"interventions", {scale(0.5)}}}), kResearcherKey)->status, 200);
  EXPECT_EQ(json::parse(client()->Get("/ready")->body)["status"], "ready");
}

// Issue 11.4: deleting the audit file while serving went unnoticed (SQLite kept writing into the
// unlinked inode).
TEST_F(GlassHttpTest, DeletedAuditFileIsNoticed) {
  ServerConfig cfg = glass_config();
  start(cfg);
  ASSERT_EQ(post("/v1/completions", completion({{"interventions", {scale(0.5)}}}), kResearcherKey)->status, 200);
  ASSERT_EQ(std::remove(cfg.audit_db.c_str()), 0);
  auto res = post("/v1/completions", completion({{"interventions", {scale(0.5)}}}), kResearcherKey);
  expect_error(res, 503, "service_unavailable", "deleted");
  EXPECT_EQ(post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}})->status, 200);
  json ready = json::parse(client()->Get("/ready")->body);
  EXPECT_EQ(ready["status"], "degraded");
  EXPECT_NE(ready["audit"].get<std::string>().find("deleted"), std::string::npos) << ready;
  expect_error(admin("PUT", "/admin/glassbox/presets/p2", {{"interventions", {scale(0.5)}}}), 503,
               "service_unavailable", "deleted");
}

}  // namespace
}  // namespace gb::server

namespace gb::server {
namespace {

class GlassHardeningTest : public HttpTest {
 protected:
  httplib::Result admin(const std::string& method, const std::string& path, const json& body = json::object()) {
    auto c = client();
    if (method == "PUT") return c->Put(path.c_str(), auth(kAdminKey), body.dump(), "application/json");
    if (method == "PATCH") return c->Patch(path.c_str(), auth(kAdminKey), body.dump(), "application/json");
    if (method == "POST") return c->Post(path.c_str(), auth(kAdminKey), body.dump(), "application/json");
    if (method == "DELETE") return c->Delete(path.c_str(), auth(kAdminKey));
    return c->Get(path.c_str(), auth(kAdminKey));
  }
  httplib::Result with_session(const char* key, const std::string& session, const json& body) {
    httplib::Headers h = auth(key);
    h.emplace("X-Glassbox-Session", session);
    return client()->Post("/v1/completions", h, body.dump(), "application/json");
  }
  static json error_of(const httplib::Result& res) { return res ? json::parse(res->body)["error"] : json(); }
};

// Caps bound what a request's items do together, not each item alone: stacked adds sum, stacked
// scales multiply, a vector add counts by the size of its shift, the clip_massive mean by the set
// cap, and the default set counts with the request's own items.
TEST_F(GlassHardeningTest, StackedItemsOverACapAreRefused) {
  start(glass_config());
  // 256 adds of 100 on one dim used to pass a cap of 100 (each alone is at the cap).
  auto res = post("/v1/completions", completion({{"interventions", times(add_dims(100), 256)}}), kResearcherKey);
  expect_error(res, 400, "invalid_request_error",
               "the stacked add interventions at mlp_act layer 1 dim 3 add up to 25600");
  EXPECT_EQ(error_of(res)["code"], "cap_exceeded");
  EXPECT_EQ(error_of(res)["param"], "glassbox.interventions");
  // 256 scales of 10 used to multiply activations by 11^256 (inf, then NaN) and answer 200.
  res = post("/v1/completions", completion({{"interventions", times(scale(10), 256)}}), kResearcherKey);
  expect_error(res, 400, "invalid_request_error", "the stacked scale interventions");
  // Within the cap together: fine.
  EXPECT_EQ(post("/v1/completions", completion({{"interventions", times(add_dims(50), 2)}}), kResearcherKey)->status,
            200);
  // A raw vector is capped by the size of the shift it adds; [3e38]*8 used to pass.
  json huge = json::array();
  for (int i = 0; i < 8; ++i) huge.push_back(3e38);
  res =
      post("/v1/completions",
           completion({{"interventions",
                        {{{"op", "add"}, {"point", "resid_post"}, {"layer", 1}, {"vector", huge}, {"strength", 1}}}}}),
           kResearcherKey);
  expect_error(res, 400, "invalid_request_error", "|strength| × |vector|");
  EXPECT_EQ(error_of(res)["param"], "glassbox.interventions[0].vector");
  // The clip_massive mean writes values like set does: bounded by the set cap.
  res = post(
      "/v1/completions",
      completion(
          {{"interventions",
            {{{"op", "clip_massive"}, {"point", "resid_post"}, {"layer", 1}, {"threshold", 10}, {"mean", huge}}}}}),
      kResearcherKey);
  expect_error(res, 400, "invalid_request_error", "over the cap of 100 for set");
  // The default set stacks with the request's own items, and the message names both.
  ASSERT_EQ(admin("PUT", "/admin/glassbox/default", {{"interventions", {add_dims(60)}}})->status, 200);
  res = post("/v1/completions", completion({{"interventions", {add_dims(60)}}}), kResearcherKey);
  expect_error(res, 400, "invalid_request_error", "glassbox.interventions[0], default set v1 interventions[0]");
  EXPECT_EQ(post("/v1/completions", completion({{"interventions", {add_dims(60, 2)}}}), kResearcherKey)->status, 200);
}

// One limit on the resolved interventions: presets, sessions and the default set count after
// expansion, and a list that expands too far is refused before it is built.
TEST_F(GlassHardeningTest, ResolvedInterventionsAreLimited) {
  start(glass_config());
  ASSERT_EQ(admin("PUT", "/admin/glassbox/presets/wide", {{"interventions", times(add_dims(0.1, 0), 256)}})->status,
            200);
  // 256 references to it used to become 65,536 interventions.
  json refs = times({{"preset", "wide"}}, 256);
  auto res = post("/v1/completions", completion({{"interventions", refs}}), kResearcherKey);
  expect_error(res, 400, "invalid_request_error", "more than 256 (glassbox_policy.max_interventions)");
  EXPECT_EQ(post("/v1/completions", completion({{"interventions", {{{"preset", "wide"}}}}}), kResearcherKey)->status,
            200);
  // A session of the full preset leaves no room for the default set's item: the request is refused, naming it.
  ASSERT_EQ(admin("PUT", "/admin/glassbox/sessions/big", {{"interventions", {{{"preset", "wide"}}}}})->status, 200);
  res = admin("PUT", "/admin/glassbox/default", {{"interventions", {scale(0.1, 3)}}});
  EXPECT_EQ(res->status, 409) << res->body;
  EXPECT_NE(error_of(res)["message"].get<std::string>().find("session big"), std::string::npos) << res->body;
  // The limit is part of the policy.
  res = admin("PATCH", "/admin/glassbox/policy", {{"max_interventions", 100}});
  EXPECT_EQ(res->status, 409) << res->body;  // the preset and the session hold 256
  ASSERT_EQ(admin("DELETE", "/admin/glassbox/sessions/big")->status, 200);
  ASSERT_EQ(admin("DELETE", "/admin/glassbox/presets/wide")->status, 200);
  ASSERT_EQ(admin("PATCH", "/admin/glassbox/policy", {{"max_interventions", 2}})->status, 200);
  expect_error(post("/v1/completions", completion({{"interventions", times(scale(0.1), 3)}}), kResearcherKey), 400,
               "invalid_request_error", "at most 2 interventions");
}

// Non-finite numbers (values beyond the f32 range) and integers beyond their type are refused,
// never turned into inf or truncated.
TEST_F(GlassHardeningTest, NonFiniteAndOutOfRangeNumbersAreRefused) {
  start(glass_config());
  struct Case {
    json glassbox;
    std::string param;
  };
  const std::vector<Case> cases = {
      // A clamp at 1e39 used to become a clamp at infinity (200).
      {{{"interventions", {{{"op", "clamp"}, {"point", "resid_post"}, {"layer", 1}, {"strength", 1e39}}}}},
       "glassbox.interventions[0].strength"},
      // min_abs 1e39 used to become inf (200).
      {{{"observe", {{"points", {"resid_post"}}}}, {"massive", {{"min_abs", 1e39}}}}, "glassbox.massive.min_abs"},
      // dim 2^32 + 3 used to become dim 3 (200, applied to dim 3).
      {{{"interventions",
         {{{"op", "scale"}, {"point", "mlp_act"}, {"layer", 1}, {"dims", {4294967299LL}}, {"strength", 1}}}}},
       "glassbox.interventions[0]"},
      {{{"observe", {{"capture", {{{"point", "resid_post"}, {"layer", 1}, {"token", 4294967296LL}}}}}}},
       "glassbox.observe.capture[0].token"},
  };
  for (const Case& c : cases) {
    auto res = post("/v1/completions", completion(c.glassbox), kResearcherKey);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << c.glassbox.dump() << "\n" << res->body;
    EXPECT_EQ(error_of(res)["param"], c.param) << res->body;
  }
}

// A session is open to the roles and keys its PUT lists; without them, to the roles that may
// intervene. A user key sending an admin's session header used to get its interventions.
TEST_F(GlassHardeningTest, SessionsAreBoundToRolesAndKeys) {
  start(glass_config());
  const json body = {{"prompt", "x"}, {"max_tokens", 2}};
  ASSERT_EQ(admin("PUT", "/admin/glassbox/sessions/lab", {{"interventions", {scale(0.25, 0)}}})->status, 200);
  auto res = with_session(kUserKey, "lab", body);
  expect_error(res, 403, "permission_error", "session 'lab' is not open to key 'alice' (user role)");
  EXPECT_EQ(error_of(res)["code"], "session_not_allowed");
  EXPECT_EQ(with_session(kResearcherKey, "lab", body)->status, 200);
  // Listed keys: alice may, another user key may not.
  ASSERT_EQ(
      admin("PUT", "/admin/glassbox/sessions/alice-only", {{"interventions", {scale(0.25, 0)}}, {"keys", {"alice"}}})
          ->status,
      200);
  res = with_session(kUserKey, "alice-only", body);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["choices"][0]["glassbox"]["applied"].size(), 1u);
  EXPECT_EQ(with_session(kLimitedKey, "alice-only", body)->status, 403);
  EXPECT_EQ(with_session(kResearcherKey, "alice-only", body)->status,
            403);  // restricted: the policy roles no longer apply
  // Listed roles.
  ASSERT_EQ(
      admin("PUT", "/admin/glassbox/sessions/all-users", {{"interventions", {scale(0.25, 0)}}, {"roles", {"user"}}})
          ->status,
      200);
  EXPECT_EQ(with_session(kLimitedKey, "all-users", body)->status, 200);
  // The body is checked, and GET shows who may use each session.
  expect_error(admin("PUT", "/admin/glassbox/sessions/x", {{"interventions", json::array()}, {"roles", {"god"}}}), 400,
               "invalid_request_error", "'god' is not user, researcher or admin");
  expect_error(admin("PUT", "/admin/glassbox/sessions/x", {{"interventions", json::array()}, {"colour", 1}}), 400,
               "invalid_request_error", "colour: unknown field");
  const json state = json::parse(admin("GET", "/admin/glassbox")->body);
  EXPECT_EQ(state["sessions"]["alice-only"]["keys"], json({"alice"}));
  EXPECT_EQ(state["sessions"]["all-users"]["roles"], json({"user"}));
  EXPECT_FALSE(state["sessions"]["lab"].contains("roles"));
}

// A policy under which a stored set would be refused is itself refused, listing every conflict;
// plain requests (which carry the default set) keep working.
TEST_F(GlassHardeningTest, PolicyChangesConflictingWithStoredSetsAreRefused) {
  start(glass_config());
  ASSERT_EQ(admin("PUT", "/admin/glassbox/default", {{"interventions", {scale(5, 0)}}})->status, 200);
  ASSERT_EQ(admin("PUT", "/admin/glassbox/sessions/s1", {{"interventions", {scale(4, 1)}}})->status, 200);
  ASSERT_EQ(admin("PUT", "/admin/glassbox/presets/p1", {{"interventions", {scale(3, 2)}}})->status, 200);
  json policy = glass_policy_json(glass_config().glassbox_policy);
  policy["caps"]["scale"] = 1;
  for (const char* method : {"PUT", "PATCH"}) {
    auto res =
        admin(method, "/admin/glassbox/policy", std::string(method) == "PUT" ? policy : json{{"caps", {{"scale", 1}}}});
    ASSERT_EQ(res->status, 409) << method << " " << res->body;
    const json e = error_of(res);
    EXPECT_EQ(e["code"], "policy_conflict");
    const std::string m = e["message"].get<std::string>();
    EXPECT_NE(m.find("default set v1: interventions[0].strength: 5 is over the cap of 1"), std::string::npos) << m;
    EXPECT_NE(m.find("session s1: "), std::string::npos) << m;
    if (std::string(method) == "PUT") {
      EXPECT_NE(m.find("conflicts with 2 stored set(s)"), std::string::npos) << m;  // the PUT drops preset p1
    } else {
      EXPECT_NE(m.find("conflicts with 3 stored set(s)"), std::string::npos) << m;
      EXPECT_NE(m.find("preset p1: "), std::string::npos) << m;
    }
  }
  // Nothing changed: plain requests still get the default set.
  auto res = post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}});
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["choices"][0]["glassbox"]["applied"].size(), 1u);
  EXPECT_EQ(json::parse(admin("GET", "/admin/glassbox")->body)["policy"]["caps"]["scale"], 10);
  // A session that, with the default set, would pass a cap is refused when it is PUT.
  res = admin("PUT", "/admin/glassbox/sessions/s2", {{"interventions", {scale(2, 0)}}});  // 6 · 3 = 18
  EXPECT_EQ(res->status, 409) << res->body;
  // So is rolling back to a version that conflicts, and a new default set that conflicts with a session.
  res = admin("PUT", "/admin/glassbox/default", {{"interventions", {scale(9, 1)}}});  // with s1: 10 · 5 = 50
  EXPECT_EQ(res->status, 409) << res->body;
}

// PUT replaces the whole policy and says what that removed; PATCH merges.
TEST_F(GlassHardeningTest, PutPolicyReplacesAndSaysSoPatchMerges) {
  start(glass_config());
  auto res = admin("PUT", "/admin/glassbox/policy", {{"caps", {{"scale", 5}}}});
  ASSERT_EQ(res->status, 200) << res->body;
  json change = json::parse(res->body)["change"];
  EXPECT_EQ(change["replaced"], true);
  EXPECT_EQ(change["presets_removed"], json({"neuron-2-5-low"}));
  EXPECT_NE(std::find(change["defaults_applied"].begin(), change["defaults_applied"].end(), "presets"),
            change["defaults_applied"].end());
  EXPECT_EQ(change["policy"]["caps"], json({{"scale", 5}}));
  expect_error(
      post("/v1/completions", completion({{"interventions", {{{"preset", "neuron-2-5-low"}}}}}), kResearcherKey), 400,
      "invalid_request_error", "unknown preset");
  // PATCH: caps merge by op, presets by name; the rest stays.
  res = admin("PATCH", "/admin/glassbox/policy",
              {{"caps", {{"add", 7}}}, {"presets", {{"p", {scale(0.5)}}}}, {"allowed_layers", {0, 1}}});
  ASSERT_EQ(res->status, 200) << res->body;
  change = json::parse(res->body)["change"];
  EXPECT_EQ(change["policy"]["caps"], json({{"add", 7}, {"scale", 5}}));
  EXPECT_EQ(change["presets_set"], json({"p"}));
  EXPECT_EQ(change["policy"]["allowed_layers"], json({0, 1}));
  EXPECT_EQ(json::parse(res->body)["action"], "merge");
  EXPECT_EQ(post("/v1/completions", completion({{"interventions", {{{"preset", "p"}}}}}), kResearcherKey)->status, 200);
  // null: back to the default (a key), or delete (a cap, a preset).
  res = admin("PATCH", "/admin/glassbox/policy", {{"caps", {{"add", nullptr}}}, {"allowed_layers", nullptr}});
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["change"]["policy"]["caps"], json({{"scale", 5}}));
  EXPECT_EQ(json::parse(res->body)["change"]["policy"]["allowed_layers"], "all");
  res = admin("PATCH", "/admin/glassbox/policy", {{"presets", {{"p", nullptr}}}});
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["change"]["presets_removed"], json({"p"}));
  expect_error(admin("PATCH", "/admin/glassbox/policy", {{"caps", {{"scale", "big"}}}}), 400, "invalid_request_error",
               "glassbox_policy.caps.scale");
  expect_error(admin("PATCH", "/admin/glassbox/policy", {{"presets", {{"nope", nullptr}}}}), 400,
               "invalid_request_error", "no such preset");
  // Every change is an audit row: set, merge, merge, merge.
  const json rows = json::parse(admin("GET", "/admin/audit?kind=policy")->body)["data"];
  ASSERT_EQ(rows.size(), 4u);
  int merges = 0;
  for (const json& r : rows) merges += r["action"] == "merge";
  EXPECT_EQ(merges, 3);
}

// Observation memory: a request's own budget (400 naming it) and the server's (429 naming it,
// given back when the request ends); nothing is reserved for a request that is refused.
TEST_F(GlassHardeningTest, ObservationHasARequestAndAServerBudget) {
  test::FakeEngineOptions slow;
  slow.token_delay = 20ms;
  const ModelConfig& m = slow.model;
  GlassSpec probe;
  probe.observe.enabled = true;
  const int64_t per_sequence = observation_bytes(*resolve_glass_spec(probe, m).value(), m);
  ServerConfig cfg = glass_config();
  cfg.max_request_observation_bytes = 4 * per_sequence;
  cfg.max_observation_bytes = per_sequence + per_sequence / 2;
  start(cfg, slow);
  const json observe = {{"observe", {{"points", {"resid_post"}}}}};
  // n = 16 used to reserve 16 accumulators (and, with captures, a 198 MB answer).
  json body = completion(observe);
  body["n"] = 16;
  auto res = post("/v1/completions", body);
  expect_error(res, 400, "invalid_request_error",
               "over max_request_observation_bytes = " + std::to_string(4 * per_sequence));
  EXPECT_EQ(error_of(res)["code"], "observation_budget_exceeded");
  body["n"] = 1;
  ASSERT_EQ(post("/v1/completions", body)->status, 200);
  // A long request holds the server's budget; a second one meanwhile is 429, naming the setting.
  json longer = completion(observe);
  longer["max_tokens"] = 200;
  longer["ignore_eos"] = true;
  longer["stream"] = true;
  std::atomic<bool> streaming{false};
  std::thread first([&] {
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.headers = auth();
    req.body = longer.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      streaming = true;
      return true;
    };
    client()->send(req);
  });
  // (No ASSERT until the thread is joined.) The first request streams for 200 × 20 ms.
  for (int i = 0; i < 2000 && !streaming; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(streaming);
  EXPECT_EQ(json::parse(admin("GET", "/admin/glassbox")->body)["observation"]["bytes_in_use"], per_sequence);
  res = post("/v1/completions", body);
  expect_error(res, 429, "rate_limit_error", "max_observation_bytes = " + std::to_string(cfg.max_observation_bytes));
  EXPECT_EQ(error_of(res)["code"], "observation_budget_busy");
  EXPECT_EQ(res->get_header_value("Retry-After"), "1");
  // Requests that observe nothing are not held up.
  EXPECT_EQ(post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}})->status, 200);
  first.join();
  ASSERT_TRUE(wait_idle());
  EXPECT_EQ(json::parse(admin("GET", "/admin/glassbox")->body)["observation"]["bytes_in_use"], 0);
  EXPECT_EQ(post("/v1/completions", body)->status, 200);
}

// Error messages and audit rows never carry unbounded input.
TEST_F(GlassHardeningTest, MessagesAndAuditRowsAreBounded) {
  start(glass_config());
  const std::string long_key(200000, 'k');
  auto res = post("/v1/completions", completion({{long_key, 1}}), kResearcherKey);
  ASSERT_EQ(res->status, 400);
  EXPECT_LT(res->body.size(), 1000u);
  // A session header of arbitrary bytes: 400 naming it, the message printable.
  res = with_session(kResearcherKey, std::string(2000, '\xff'), {{"prompt", "x"}, {"max_tokens", 2}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400) << res->body;
  EXPECT_LT(res->body.size(), 1000u);
  // The audit row holds the request as parsed: duplicates collapsed, no raw input.
  json stats = json::array();
  for (int i = 0; i < 20000; ++i) stats.push_back("rms");
  res = post("/v1/completions",
             completion({{"observe", {{"points", {"resid_post"}}, {"stats", stats}}}, {"interventions", {scale(0.5)}}}),
             kResearcherKey);
  ASSERT_EQ(res->status, 200) << res->body.substr(0, 300);
  const json rows = json::parse(admin("GET", "/admin/audit?kind=request")->body)["data"];
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["spec"]["glassbox"]["observe"]["stats"], json({"rms"}));
  EXPECT_LT(rows[0]["spec"].dump().size(), 1000u);
}

// The repetition stop is visible in the choice's glassbox object, streaming or not.
// Issue 11.6: NaN/Inf activations answer 400 naming where when the request's interventions did it
// (500 without interventions: HardeningTest.EngineErrorCodesMapToStatuses).
TEST_F(GlassHttpTest, NonFiniteUnderInterventionsIsTheRequestsError) {
  test::FakeEngineOptions opts;
  opts.fail_with = "non-finite activations (NaN or Inf) first at layer 1 mlp_act, token position 0";
  opts.fail_code = EngineErrorCode::kNonFinite;
  start(glass_config(), opts, /*ready=*/false);
  server_->attach(engine_.get(), &codec_, kContext);
  server_->set_ready();
  auto res = post("/v1/completions", completion({{"interventions", {scale(0.5)}}}), kResearcherKey);
  expect_error(res, 400, "invalid_request_error", "interventions made");
  EXPECT_EQ(json::parse(res->body)["error"]["code"], "non_finite_activations");
  EXPECT_NE(res->body.find("layer 1 mlp_act"), std::string::npos);
  // The server goes on serving.
  EXPECT_TRUE(client()->Get("/health"));
}

// The massive rule and layer_time over HTTP on a real engine serving the constructed
// massive-activation model (tests/support/glass_fixtures.h: |x| ≈ 2000 on dim 17 of the BOS row
// from layer 1 on), through the FakeCodec (token-id prompts; BOS = 1 in both).
class GlassRealEngineTest : public HttpTest {
 protected:
  void start_real(const std::string& model_dir) {
    auto m = load_model(model_dir, {.max_batch_tokens = 64, .n_threads = 1});
    ASSERT_TRUE(m.is_ok()) << m.message();
    model_ = std::move(*m);
    EngineConfig ec;
    ec.scheduler.max_num_seqs = 4;
    ec.scheduler.max_num_batched_tokens = 64;
    ec.max_model_len = 128;
    ec.monitor.enabled = true;  // the default rule: the layer median, both tests
    auto e = Engine::create(model_.get(), ec);
    ASSERT_TRUE(e.is_ok()) << e.message();
    real_ = std::move(*e);
    real_->start();
    server_ = std::make_unique<Server>(glass_config(), [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(logs_mutex_);
      logs_.push_back(line);
    });
    ASSERT_TRUE(server_->start().is_ok());
    server_->attach(real_.get(), &codec_, 128);
    ASSERT_TRUE(server_->self_test(10000ms).is_ok());
    server_->set_ready();
  }
  void TearDown() override {
    HttpTest::TearDown();  // the server first, then the engine it used
    real_.reset();
  }
  // The choice's glassbox object of a completion over the prompt's token ids.
  json glassbox_of(const json& glassbox, double* wall_ms = nullptr) {
    const auto t0 = std::chrono::steady_clock::now();
    auto res = post("/v1/completions",
                    {{"prompt", {1, 40, 50, 60, 70, 80, 90, 100, 110, 120}}, {"max_tokens", 3}, {"glassbox", glassbox}},
                    kResearcherKey);
    if (wall_ms != nullptr)
      *wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_TRUE(res);
    if (!res) return nullptr;
    EXPECT_EQ(res->status, 200) << res->body;
    return json::parse(res->body)["choices"][0]["glassbox"];
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<Engine> real_;
};

TEST_F(GlassRealEngineTest, MassiveEventsCarryBothTestsAndTheMedian) {
  start_real(gb::test::MassiveFixture::make());
  const json observe = {{"points", {"resid_post"}}};
  // The default rule: the layer median, both tests. The BOS row from layer 1 on, once per layer;
  // the decode rows compare with the prompt's stored median and are not massive.
  json g = glassbox_of({{"observe", observe}});
  ASSERT_EQ(g["events"].size(), 2u) << g.dump();
  for (size_t i = 0; i < 2; ++i) {
    const json& e = g["events"][i];
    EXPECT_EQ(e["layer"], gb::test::MassiveFixture::kLayer + static_cast<int>(i));
    EXPECT_EQ(e["token"], 0);
    EXPECT_EQ(e["dim"], gb::test::MassiveFixture::kDim);
    EXPECT_EQ(e["median"], "layer");
    EXPECT_EQ(e["abs_test"], true);
    EXPECT_EQ(e["ratio_test"], true);
    const double med = e["median_abs"].get<double>(), v = std::fabs(e["value"].get<double>());
    EXPECT_GT(med, 0.0);
    EXPECT_LT(med, 2.0);
    EXPECT_NEAR(e["ratio"].get<double>(), v / med, 1e-3 * v / med);
  }
  // Only the ratio test, with an absolute threshold no value reaches: the same rows fire, and the
  // JSON says which test held.
  g = glassbox_of({{"observe", observe}, {"massive", {{"min_abs", 1e6}, {"fire_on", "ratio"}}}});
  ASSERT_EQ(g["events"].size(), 2u) << g.dump();
  for (const json& e : g["events"]) {
    EXPECT_EQ(e["abs_test"], false);
    EXPECT_EQ(e["ratio_test"], true);
  }
  // With both tests that threshold leaves no event; the token rule names its median.
  g = glassbox_of({{"observe", observe}, {"massive", {{"min_abs", 1e6}}}});
  EXPECT_TRUE(g["events"].empty()) << g.dump();
  g = glassbox_of({{"observe", observe}, {"massive", {{"median", "token"}}}});
  ASSERT_EQ(g["events"].size(), 2u) << g.dump();
  for (const json& e : g["events"]) EXPECT_EQ(e["median"], "token");
  auto res =
      post("/v1/completions", completion({{"observe", observe}, {"massive", {{"median", "row"}}}}), kResearcherKey);
  expect_error(res, 400, "invalid_request_error", "glassbox.massive.median: 'row' is not \"layer\"");
  // The engine-wide monitor logs the prompts' events with both tests and the layer median (the
  // self-test's one-token prompt has only its row's own median).
  bool logged = false;
  for (int i = 0; i < 400 && !logged; ++i) {
    for (const std::string& line : logs()) {
      const json l = json::parse(line, nullptr, false);
      if (!l.is_object() || l.value("event", "") != "massive_activation") continue;
      EXPECT_EQ(l["dim"], gb::test::MassiveFixture::kDim) << line;
      EXPECT_TRUE(l["abs_test"].is_boolean() && l["ratio_test"].is_boolean()) << line;
      if (l["median"] == "layer" && l["abs_test"] == true && l["ratio_test"] == true) logged = true;
    }
    if (!logged) std::this_thread::sleep_for(25ms);
  }
  EXPECT_TRUE(logged);
}

// observe.layer_time: each layer's share of the forward passes' wall time, the output head the
// rest: shares summing to 1, every layer's time positive, all of it within the request's wall time.
TEST_F(GlassRealEngineTest, LayerTimeSharesOverHttp) {
  start_real(gb::test::MassiveFixture::make());
  double wall_ms = 0;
  const json g = glassbox_of({{"observe", {{"layers", {0}}, {"layer_time", true}}}}, &wall_ms);
  ASSERT_TRUE(g.contains("layer_time")) << g.dump();
  const json& t = g["layer_time"];
  EXPECT_GE(t["steps"].get<int>(), 1);
  ASSERT_EQ(t["layers"].size(), 3u);
  double shares = t["head"]["share"].get<double>(), ms = t["head"]["ms"].get<double>();
  for (const json& l : t["layers"]) {
    EXPECT_GT(l["ms"].get<double>(), 0.0) << t.dump();
    shares += l["share"].get<double>();
    ms += l["ms"].get<double>();
  }
  EXPECT_NEAR(shares, 1.0, 1e-6);
  EXPECT_NEAR(t["total_ms"].get<double>(), ms, 1e-9 * ms);
  EXPECT_LE(ms, wall_ms);
  // Without the option there is no layer_time.
  EXPECT_FALSE(glassbox_of({{"observe", {{"layers", {0}}}}}).contains("layer_time"));
}

}  // namespace
}  // namespace gb::server
