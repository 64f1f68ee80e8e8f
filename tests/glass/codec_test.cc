// The glass module's JSON codec and limits on a small model shape (4 layers, 8 wide, MLP 16):
// items resolve once and re-encode canonically; non-finite and out-of-range numbers are refused,
// never truncated; expansion is bounded; messages stay short whatever the input; and the caps
// bound what stacked items do together.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "glass/codec.h"
#include "glass/limits.h"

namespace gb {
namespace {

using json = nlohmann::json;

ModelConfig tiny() {
  ModelConfig c;
  c.n_layers = 4;
  c.n_embd = 8;
  c.n_ff = 16;
  return c;
}

GlassLimits default_caps() {
  GlassLimits l;
  l.caps[static_cast<size_t>(InterventionOp::kScale)] = 10;
  l.caps[static_cast<size_t>(InterventionOp::kAdd)] = 100;
  l.caps[static_cast<size_t>(InterventionOp::kSet)] = 100;
  l.caps[static_cast<size_t>(InterventionOp::kAblate)] = 1;
  l.caps[static_cast<size_t>(InterventionOp::kClipMassive)] = 1;
  return l;
}

struct Fixture {
  ModelConfig model = tiny();
  GlassLimits limits = default_caps();
  std::map<std::string, std::shared_ptr<const InterventionSet>> presets;
  std::map<std::string, std::shared_ptr<const ControlVector>> vectors;
  ParseContext ctx() const { return {&model, {&presets, &vectors}, &limits, limits.max_interventions}; }

  // (Lists as vectors: a braced {item} would copy the item instead of making a list of it.)
  std::optional<GlassError> parse_json(const json& list, InterventionSet* out) const {
    return parse_interventions(list, "glassbox.interventions", ctx(), true, out);
  }
  std::optional<GlassError> parse(const std::vector<json>& list, InterventionSet* out) const {
    return parse_json(json(list), out);
  }
  // parse + the stacked check, as a request is resolved.
  std::optional<GlassError> request(const std::vector<json>& list) const {
    InterventionSet set;
    if (auto e = parse(list, &set)) return e;
    return check_combined(set.interventions, set.sources, limits, model, "glassbox.interventions");
  }
};

json item(const char* op, double strength, json extra = json::object()) {
  json j = {{"op", op}, {"point", "resid_post"}, {"layer", 1}, {"strength", strength}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  return j;
}

std::vector<json> repeat(const json& one, int n) { return std::vector<json>(static_cast<size_t>(n), one); }

TEST(GlassCodec, ItemsResolveOnceAndReencodeCanonically) {
  Fixture f;
  InterventionSet set;
  const json list = {
      {{"op", "ablate"},
       {"point", "resid_post"},
       {"layers", {{"from", 1}, {"to", 2}}},
       {"vector", {3, 0, 0, 0, 4, 0, 0, 0}},
       {"strength", 0.5}},
      {{"op", "scale"}, {"point", "mlp_act"}, {"layers", {0, 1, 3}}, {"dims", {5, 2, 5}}, {"strength", -0.98}}};
  ASSERT_FALSE(f.parse_json(list, &set));
  // One ablate (a layer run), then two scale runs: [0, 1] and [3, 3].
  ASSERT_EQ(set.interventions.size(), 3u);
  EXPECT_FLOAT_EQ(set.interventions[0].vector[0], 0.6f);  // normalised once
  EXPECT_FLOAT_EQ(set.interventions[0].vector[4], 0.8f);
  EXPECT_EQ(set.interventions[1].dims, std::vector<int32_t>({2, 5}));
  EXPECT_EQ(set.interventions[2].layer_first, 3);
  EXPECT_EQ(set.sources[2], "glassbox.interventions[1]");
  // The canonical items are request syntax: parsing them again gives the same interventions.
  ASSERT_EQ(set.items.size(), 2u);
  EXPECT_EQ(set.items[1]["strength"], -0.98);
  EXPECT_EQ(set.items[1]["layers"], json({0, 1, 3}));
  EXPECT_EQ(set.items[0]["layers"], json({{"from", 1}, {"to", 2}}));
  InterventionSet again;
  ASSERT_FALSE(f.parse_json(set.items, &again));
  ASSERT_EQ(again.interventions.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(again.interventions[i].strength, set.interventions[i].strength);
    EXPECT_EQ(again.interventions[i].dims, set.interventions[i].dims);
    EXPECT_EQ(again.interventions[i].layer_first, set.interventions[i].layer_first);
  }
  EXPECT_EQ(again.items, set.items);
}

TEST(GlassCodec, NonFiniteAndOutOfRangeNumbersAreRefused) {
  Fixture f;
  struct Case {
    std::vector<json> list;
    std::string param, message;
  };
  const std::vector<Case> cases = {
      // 1e39 is a finite double but not a finite f32: it used to become inf (a clamp at infinity).
      {{item("clamp", 1e39)}, "glassbox.interventions[0].strength", "finite number"},
      {{item("scale", 1e39)}, "glassbox.interventions[0].strength", "finite number"},
      {{item("add", 1, {{"vector", {1e39, 0, 0, 0, 0, 0, 0, 0}}})}, "glassbox.interventions[0].vector", "finite"},
      {{{{"op", "clip_massive"}, {"point", "resid_post"}, {"layer", 1}, {"threshold", 1e39}}},
       "glassbox.interventions[0].threshold",
       "finite number"},
      {{{{"op", "clip_massive"},
         {"point", "resid_post"},
         {"layer", 1},
         {"threshold", 5},
         {"mean", json(repeat(1e300, 8))}}},
       "glassbox.interventions[0].mean",
       "finite"},
      // 2^32 + 3 used to become dim 3; 2^64 - 1 (unsigned) used to wrap.
      {{item("add", 1, {{"dims", {4294967299ULL}}})},
       "glassbox.interventions[0]",
       "4294967299 is outside resid_post's 8 dims"},
      {{item("add", 1, {{"dims", {18446744073709551615ULL}}})},
       "glassbox.interventions[0]",
       "is outside resid_post's 8 dims"},
      {{item("add", 1, {{"tokens", {4294967299ULL}}})}, "glassbox.interventions[0].tokens", "is not a token position"},
      {{{{"op", "add"}, {"point", "resid_post"}, {"layer", 18446744073709551615ULL}, {"strength", 1}}},
       "glassbox.interventions[0].layer",
       "outside the model's layers"},
  };
  for (const Case& c : cases) {
    InterventionSet set;
    auto e = f.parse(c.list, &set);
    ASSERT_TRUE(e) << json(c.list).dump();
    EXPECT_FALSE(e->forbidden);
    EXPECT_EQ(e->param, c.param) << e->message;
    EXPECT_NE(e->message.find(c.message), std::string::npos) << e->message;
  }
  // The request object: the massive rule and captures.
  auto gate = [](GlassUse) -> std::optional<GlassError> { return std::nullopt; };
  GlassRequestParts parts;
  auto e = parse_glass_request({{"massive", {{"min_abs", 1e39}}}}, f.ctx(), gate, &parts);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "glassbox.massive.min_abs");
  e = parse_glass_request(
      {{"observe", {{"capture", {{{"point", "resid_post"}, {"layer", 1}, {"token", 4294967299ULL}}}}}}}, f.ctx(), gate,
      &parts);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "glassbox.observe.capture[0].token");
  // A clamp at infinity is still "inf".
  InterventionSet set;
  EXPECT_FALSE(f.parse({{{"op", "clamp"}, {"point", "resid_post"}, {"layer", 1}, {"strength", "inf"}}}, &set));
  EXPECT_TRUE(std::isinf(set.interventions[0].strength));
}

TEST(GlassCodec, MessagesAreBoundedWhateverTheInput) {
  Fixture f;
  const std::string huge(1 << 20, 'x');
  // 100,000 nested lists, built and placed by moves (a copy or a dump would recurse).
  auto deep = [] {
    json d = json::array();
    for (int i = 0; i < 100000; ++i) {
      json next = json::array();
      next.push_back(std::move(d));
      d = std::move(next);
    }
    return d;
  };
  auto with = [](json item, const char* key, json value) {
    item[key] = std::move(value);
    json list = json::array();
    list.push_back(std::move(item));
    return list;
  };
  const json add = {{"op", "add"}, {"point", "resid_post"}, {"strength", 1}};
  json add1 = add;
  add1["layer"] = 1;
  json two = json::array({1});
  two.push_back(deep());
  json in_list = json::array();
  in_list.push_back(deep());
  // A long unknown key, a long preset name, a long string where a number belongs, deep lists.
  std::vector<json> lists;
  lists.push_back({{{"op", "add"}, {"point", "resid_post"}, {"layer", 1}, {"strength", 1}, {huge, 1}}});
  lists.push_back({{{"preset", huge}}});
  lists.push_back({{{"op", "add"}, {"point", "resid_post"}, {"layer", huge}, {"strength", 1}}});
  lists.push_back(with(add, "layers", std::move(two)));
  lists.push_back(with(add1, "dims", std::move(in_list)));
  lists.push_back(with(add1, "vector", deep()));
  lists.push_back(with(add, "layer", deep()));
  lists.push_back({{{"control_vector", huge}, {"strength", 1}}});
  for (const json& list : lists) {
    InterventionSet set;
    auto e = f.parse_json(list, &set);
    ASSERT_TRUE(e);
    EXPECT_LT(e->message.size(), 400u) << e->message.substr(0, 400);
    EXPECT_LT(e->param.size(), 200u);
  }
  auto gate = [](GlassUse) -> std::optional<GlassError> { return std::nullopt; };
  GlassRequestParts parts;
  auto e = parse_glass_request({{huge, 1}}, f.ctx(), gate, &parts);
  ASSERT_TRUE(e);
  EXPECT_LT(e->message.size(), 400u);
  json stats = json::array();
  stats.push_back(deep());
  json observe = json::object();
  observe["stats"] = std::move(stats);
  json ext = json::object();
  ext["observe"] = std::move(observe);
  e = parse_glass_request(ext, f.ctx(), gate, &parts);
  ASSERT_TRUE(e);
  EXPECT_LT(e->message.size(), 400u);
  ext = json::object();
  ext["interventions"] = deep();
  e = parse_glass_request(ext, f.ctx(), gate, &parts);
  ASSERT_TRUE(e);
  EXPECT_LT(e->message.size(), 400u);
  // Labels are bounded too.
  InterventionSet set;
  e = f.parse({item("add", 1, {{"label", huge}})}, &set);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "glassbox.interventions[0].label");
}

TEST(GlassCodec, PresetExpansionIsBoundedBeforeItHappens) {
  Fixture f;
  auto preset = std::make_shared<InterventionSet>();
  ASSERT_FALSE(f.parse(repeat(item("add", 0.1, {{"dims", {1}}}), 256), preset.get()));
  f.presets["p"] = preset;
  // 256 references to a 256-item preset used to expand to 65,536 interventions.
  const auto t0 = std::chrono::steady_clock::now();
  InterventionSet set;
  auto e = f.parse(repeat({{"preset", "p"}}, 256), &set);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "glassbox.interventions");
  EXPECT_NE(e->message.find("more than 256 (glassbox_policy.max_interventions)"), std::string::npos) << e->message;
  EXPECT_LE(set.interventions.size(), 256u);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  // One reference is fine; a second one passes the limit.
  InterventionSet one;
  EXPECT_FALSE(f.parse({{{"preset", "p"}}}, &one));
  EXPECT_EQ(one.interventions.size(), 256u);
  EXPECT_EQ(one.sources[0], "glassbox.interventions[0] (preset p) glassbox.interventions[0]");
  EXPECT_TRUE(f.parse({{{"preset", "p"}}, {{"preset", "p"}}}, &one));
  // A layer range counts once; library vectors count once per layer.
  f.limits.max_interventions = 3;
  auto cv = std::make_shared<ControlVector>();
  cv->name.push_back('v');
  cv->n_embd = 8;
  for (int l = 0; l < 4; ++l) cv->directions.emplace_back(l, std::vector<float>(8, 0.1f));
  f.vectors["v"] = cv;
  InterventionSet runs;
  EXPECT_FALSE(f.parse({{{"op", "add"}, {"point", "resid_post"}, {"layers", "all"}, {"strength", 1}}}, &runs));
  InterventionSet per_layer;
  e = f.parse({{{"op", "add"}, {"point", "resid_post"}, {"layers", "all"}, {"vector", "v"}, {"strength", 1}}},
              &per_layer);
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("more than 3"), std::string::npos);
}

TEST(GlassLimits, CapsBoundTheStackedEffect) {
  Fixture f;
  // add: per dim, the strengths add up.
  EXPECT_FALSE(f.request({item("add", 100, {{"dims", {3}}})}));
  EXPECT_FALSE(f.request({item("add", 50, {{"dims", {3}}}), item("add", 50, {{"dims", {3}}})}));
  auto e = f.request(repeat(item("add", 100, {{"dims", {3}}}), 256));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code, "cap_exceeded");
  EXPECT_EQ(e->param, "glassbox.interventions");
  EXPECT_NE(e->message.find("resid_post layer 1 dim 3"), std::string::npos) << e->message;
  EXPECT_NE(e->message.find("and 248 more"), std::string::npos) << e->message;
  EXPECT_TRUE(f.request({item("add", 60, {{"dims", {3}}}), item("add", 60)}));                    // all dims + dim 3
  EXPECT_FALSE(f.request({item("add", 60, {{"dims", {3}}}), item("add", 60, {{"dims", {4}}})}));  // different dims
  // Items on different layers do not stack; overlapping ranges do where they overlap.
  json l02 = item("add", 60, {{"dims", {3}}});
  l02.erase("layer");
  l02["layers"] = {{"from", 0}, {"to", 2}};
  json l3 = item("add", 60, {{"dims", {3}}});
  l3["layer"] = 3;
  EXPECT_FALSE(f.request({l02, l3}));
  json l23 = l3;
  l23.erase("layer");
  l23["layers"] = {2, 3};
  e = f.request({l02, l23});
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("layer 2 dim 3"), std::string::npos) << e->message;
  // add with vectors: the size of the shift, |s| · |v|, alone and stacked; [3e38]*8 is refused.
  const json unit = {1, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_FALSE(f.request({item("add", 100, {{"vector", unit}})}));
  e = f.request({item("add", 1, {{"vector", json(repeat(3e38, 8))}})});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "glassbox.interventions[0].vector");
  EXPECT_EQ(e->code, "cap_exceeded");
  EXPECT_TRUE(f.request({item("add", 1, {{"vector", {60, 0, 0, 0, 0, 0, 0, 0}}}),
                         item("add", 1, {{"vector", {0, 60, 0, 0, 0, 0, 0, 0}}})}));
  // scale: the factors multiply (1+10)^256 used to overflow to inf and NaN.
  EXPECT_FALSE(f.request({item("scale", 10, {{"dims", {3}}})}));
  EXPECT_FALSE(f.request({item("scale", 2), item("scale", 2)}));          // 3 · 3 = 9: |9 - 1| <= 10
  e = f.request({item("scale", 2), item("scale", 2), item("scale", 2)});  // 27
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("multiply it by 27"), std::string::npos) << e->message;
  EXPECT_TRUE(f.request(repeat(item("scale", 10), 256)));
  EXPECT_TRUE(f.request({item("scale", 3, {{"dims", {2}}}), item("scale", 3, {{"dims", {2, 5}}})}));  // dim 2: 16
  EXPECT_FALSE(f.request({item("scale", -1), item("scale", 9)}));  // a zero factor: the product is 0
  // ablate: each -1 doubles the direction; two do 4× (over 1 + 1).
  const json dir = {{"vector", unit}};
  EXPECT_FALSE(f.request({item("ablate", -1, dir)}));
  EXPECT_FALSE(f.request({item("ablate", 1, dir), item("ablate", 1, dir), item("ablate", 0.5, dir)}));
  EXPECT_TRUE(f.request({item("ablate", -1, dir), item("ablate", -1, dir)}));
  // clip_massive: the mean is bounded by the set cap; stacked factors multiply.
  json clip = {{"op", "clip_massive"}, {"point", "resid_post"}, {"layer", 1}, {"threshold", 10}};
  json mean = clip;
  mean["mean"] = json(repeat(3e38, 8));
  e = f.request({mean});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "glassbox.interventions[0].mean");
  f.limits.caps[static_cast<size_t>(InterventionOp::kClipMassive)] = 2;
  json up = clip;
  up["strength"] = 2;
  EXPECT_FALSE(f.request({up}));
  EXPECT_TRUE(f.request({up, up}));
  // Uncapped ops never stack-check.
  f.limits.caps[static_cast<size_t>(InterventionOp::kScale)] = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(f.request(repeat(item("scale", 10), 256)));
}

TEST(GlassLimits, PerItemLayersAndPoints) {
  Fixture f;
  f.limits.allowed_layers = {0, 1};
  f.limits.allowed_points = {HookPoint::kMlpAct};
  InterventionSet set;
  auto e = f.parse({item("add", 1)}, &set);
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->forbidden);
  EXPECT_EQ(e->code, "point_not_allowed");
  json on_mlp = item("add", 1);
  on_mlp["point"] = "mlp_act";
  on_mlp["layer"] = 2;
  e = f.parse({on_mlp}, &set);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code, "layer_not_allowed");
  e = f.parse({item("scale", 12)}, &set);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->message.find("glassbox.interventions[0].strength: 12 is over the cap of 10"), 0u) << e->message;
}

// skip: layers only (point resid_post or absent); whatever would edit by something is refused
// with a message saying what skip takes; no cap applies (it has no strength), the layers do.
TEST(GlassCodec, SkipTakesLayersOnly) {
  Fixture f;
  InterventionSet set;
  ASSERT_FALSE(f.parse(
      {{{"op", "skip"}, {"layer", 2}}, {{"op", "skip"}, {"point", "resid_post"}, {"layers", {{"from", 0}, {"to", 1}}}}},
      &set));
  ASSERT_EQ(set.interventions.size(), 2u);
  EXPECT_EQ(set.interventions[0].op, InterventionOp::kSkip);
  EXPECT_EQ(set.interventions[0].point, HookPoint::kResidPost);
  EXPECT_EQ(set.interventions[0].layer_first, 2);
  EXPECT_EQ(set.interventions[0].layer_last, 2);
  EXPECT_EQ(set.interventions[1].layer_first, 0);
  EXPECT_EQ(set.interventions[1].layer_last, 1);
  // Canonical: the point written out, no strength; it parses back to the same.
  EXPECT_EQ(set.items[0], json({{"op", "skip"}, {"point", "resid_post"}, {"layer", 2}}));
  InterventionSet again;
  ASSERT_FALSE(f.parse_json(set.items, &again));
  EXPECT_EQ(again.items, set.items);

  struct Case {
    json item;
    std::string param, message;
  };
  const std::vector<Case> cases = {
      {{{"op", "skip"}, {"layer", 1}, {"dims", {3}}}, "glassbox.interventions[0].dims", "dims: not used by skip"},
      {{{"op", "skip"}, {"layer", 1}, {"strength", 0}}, "glassbox.interventions[0].strength", "not used by skip"},
      {{{"op", "skip"}, {"layer", 1}, {"vector", json(repeat(0.0, 8))}},
       "glassbox.interventions[0].vector",
       "not used by skip"},
      {{{"op", "skip"}, {"layer", 1}, {"threshold", 5}}, "glassbox.interventions[0].threshold", "not used by skip"},
      {{{"op", "skip"}, {"layer", 1}, {"point", "mlp_act"}},
       "glassbox.interventions[0].point",
       "skip acts at resid_post (resid_post = resid_pre of the layer); give resid_post or leave point out, not "
       "mlp_act"},
      {{{"op", "skip"}, {"layer", 1}, {"point", "resid_pre"}}, "glassbox.interventions[0].point", "not resid_pre"},
      {{{"op", "skip"}, {"layer", 4}}, "glassbox.interventions[0].layer", "layer 4 is outside the model's layers 0..3"},
      {{{"op", "skip"}, {"layers", {{"from", 2}, {"to", 7}}}},
       "glassbox.interventions[0].layers",
       "outside the model's layers 0..3"},
      {{{"op", "skip"}}, "glassbox.interventions[0]", "give exactly one of layer or layers"},
      {{{"op", "skipp"}, {"layer", 1}}, "glassbox.interventions[0].op", "clip_massive or skip"},
  };
  for (const Case& c : cases) {
    InterventionSet out;
    auto e = f.parse({c.item}, &out);
    ASSERT_TRUE(e) << c.item.dump();
    EXPECT_FALSE(e->forbidden);
    EXPECT_EQ(e->param, c.param) << e->message;
    EXPECT_NE(e->message.find(c.message), std::string::npos) << e->message;
  }

  // Caps bound strengths; a skip has none, so every cap at 0 still lets it through, next to a
  // capped op that is refused. allowed_layers does bound it.
  Fixture capped;
  for (double& cap : capped.limits.caps) cap = 0;
  EXPECT_FALSE(capped.request({{{"op", "skip"}, {"layers", "all"}}}));
  EXPECT_TRUE(capped.request({item("scale", 0.5)}));
  capped.limits.allowed_layers = {0, 1};
  auto e = capped.request({{{"op", "skip"}, {"layers", {{"from", 1}, {"to", 2}}}}});
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->forbidden);
  EXPECT_NE(e->message.find("layer 2 is not in glassbox_policy.allowed_layers"), std::string::npos) << e->message;
}

// The massive rule's median and fire_on: parsed, re-encoded, and refused with the field named.
TEST(GlassCodec, MassiveRuleMedianAndFireOn) {
  Fixture f;
  auto gate = [](GlassUse) -> std::optional<GlassError> { return std::nullopt; };
  GlassRequestParts parts;
  ASSERT_FALSE(parse_glass_request({{"massive", json::object()}}, f.ctx(), gate, &parts));
  EXPECT_EQ(parts.massive.median, MassiveMedian::kLayer) << "the paper's rule by default";
  EXPECT_EQ(parts.massive.fire_on, MassiveFire::kBoth);
  ASSERT_FALSE(parse_glass_request(
      {{"massive", {{"min_abs", 50}, {"min_ratio", 20}, {"median", "token"}, {"fire_on", "ratio"}}}}, f.ctx(), gate,
      &parts));
  EXPECT_EQ(parts.massive.min_abs, 50.0f);
  EXPECT_EQ(parts.massive.min_ratio, 20.0f);
  EXPECT_EQ(parts.massive.median, MassiveMedian::kToken);
  EXPECT_EQ(parts.massive.fire_on, MassiveFire::kRatio);
  EXPECT_EQ(parts.canonical["massive"],
            json({{"min_abs", 50}, {"min_ratio", 20}, {"median", "token"}, {"fire_on", "ratio"}}));
  for (const char* fire : {"both", "abs", "ratio", "either"}) {
    ASSERT_FALSE(parse_glass_request({{"massive", {{"fire_on", fire}}}}, f.ctx(), gate, &parts)) << fire;
    EXPECT_EQ(massive_fire_name(parts.massive.fire_on), fire);
  }
  struct Case {
    json massive;
    std::string param, message;
  };
  const std::vector<Case> cases = {
      {{{"median", "row"}}, "glassbox.massive.median", "'row' is not \"layer\""},
      {{{"median", 1}}, "glassbox.massive.median", "1 is not \"layer\""},
      {{{"fire_on", "all"}}, "glassbox.massive.fire_on", "'all' is not \"both\", \"abs\", \"ratio\" or \"either\""},
      {{{"fire_on", true}}, "glassbox.massive.fire_on", "true is not"},
      {{{"min_ratio", -1}}, "glassbox.massive.min_ratio", "expected a finite number >= 0"},
      {{{"min_abs", "100"}}, "glassbox.massive.min_abs", "expected a finite number >= 0"},
      {{{"medain", "layer"}}, "glassbox.massive.medain", "unknown field (min_abs, min_ratio, median, fire_on)"},
      {json::array(), "glassbox.massive", "expected {min_abs, min_ratio, median, fire_on}"},
  };
  for (const Case& c : cases) {
    auto e = parse_glass_request({{"massive", c.massive}}, f.ctx(), gate, &parts);
    ASSERT_TRUE(e) << c.massive.dump();
    EXPECT_EQ(e->param, c.param) << e->message;
    EXPECT_NE(e->message.find(c.message), std::string::npos) << e->message;
  }
  // observe.layer_time: a boolean.
  ASSERT_FALSE(parse_glass_request({{"observe", {{"layer_time", true}}}}, f.ctx(), gate, &parts));
  EXPECT_TRUE(parts.observe.layer_time);
  EXPECT_EQ(parts.canonical["observe"]["layer_time"], true);
  auto e = parse_glass_request({{"observe", {{"layer_time", "yes"}}}}, f.ctx(), gate, &parts);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "glassbox.observe.layer_time");
}

// The event JSON carries both tests and the median it was compared with; layer_time its shares.
TEST(GlassCodec, ReportJsonEventTestsAndLayerTime) {
  GlassReport r;
  r.events.push_back({HookPoint::kResidPost, 2, 0, 17, -2000.0f, 0.5f, MassiveMedian::kLayer, 4000.0f, true, true});
  r.events.push_back({HookPoint::kResidPost, 2, 5, 3, 60.0f, 0.05f, MassiveMedian::kToken, 1200.0f, false, true});
  r.layer_time.enabled = true;
  r.layer_time.steps = 2;
  r.layer_time.layer_ms = {1.0, 3.0};
  r.layer_time.head_ms = 1.0;
  const json j = glass_report_json(r, {});
  ASSERT_EQ(j["events"].size(), 2u);
  EXPECT_EQ(j["events"][0]["median"], "layer");
  EXPECT_EQ(j["events"][0]["median_abs"], 0.5);
  EXPECT_EQ(j["events"][0]["abs_test"], true);
  EXPECT_EQ(j["events"][0]["ratio_test"], true);
  EXPECT_EQ(j["events"][1]["median"], "token");
  EXPECT_EQ(j["events"][1]["abs_test"], false);
  EXPECT_EQ(j["events"][1]["ratio_test"], true);
  const json& t = j["layer_time"];
  EXPECT_EQ(t["steps"], 2);
  EXPECT_DOUBLE_EQ(t["total_ms"].get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(t["layers"][0]["share"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(t["layers"][1]["share"].get<double>(), 0.6);
  EXPECT_DOUBLE_EQ(t["head"]["share"].get<double>(), 0.2);
  EXPECT_FALSE(glass_report_json(GlassReport{}, {}).contains("layer_time"));
}

// observe.attention_sinks: true | false | {"tokens": N}, canonical {"tokens": N}; bad values name
// the field; the report carries per-layer, per-head numbers. attn_in is a per-layer point.
TEST(GlassCodec, AttentionSinksAndAttnIn) {
  Fixture f;
  auto parse = [&](const json& observe, GlassRequestParts* out) {
    return parse_glass_request(
        json{{"observe", observe}}, f.ctx(), [](GlassUse) { return std::optional<GlassError>(); }, out);
  };
  struct Ok {
    json value;
    int32_t tokens;
  };
  for (const Ok& c : {Ok{true, 1}, Ok{false, 0}, Ok{{{"tokens", 1}}, 1}, Ok{{{"tokens", 16}}, 16}}) {
    GlassRequestParts parts;
    ASSERT_FALSE(parse({{"attention_sinks", c.value}}, &parts)) << c.value.dump();
    EXPECT_EQ(parts.observe.sink_tokens, c.tokens);
    EXPECT_EQ(parts.observe.sink_layers.size(), c.tokens > 0 ? 4u : 0u);
    if (c.tokens > 0) {
      EXPECT_EQ(parts.canonical["observe"]["attention_sinks"], json({{"tokens", c.tokens}}));
    } else {
      EXPECT_FALSE(parts.canonical["observe"].contains("attention_sinks"));
    }
  }
  {  // the sinks follow observe.layers
    GlassRequestParts parts;
    ASSERT_FALSE(parse({{"attention_sinks", true}, {"layers", {1, 3}}}, &parts));
    EXPECT_EQ(parts.observe.sink_layers, std::vector<int32_t>({1, 3}));
  }
  struct Bad {
    json value;
    std::string param, message;
  };
  const std::vector<Bad> bad = {
      {{{"tokens", 0}}, "glassbox.observe.attention_sinks.tokens", "0 is not a number of key positions in 1..16"},
      {{{"tokens", 17}}, "glassbox.observe.attention_sinks.tokens", "in 1..16"},
      {{{"tokens", 2.5}}, "glassbox.observe.attention_sinks.tokens", "in 1..16"},
      {{{"tokens", "1"}}, "glassbox.observe.attention_sinks.tokens", "in 1..16"},
      {json::object(), "glassbox.observe.attention_sinks.tokens", "required"},
      {{{"n", 1}}, "glassbox.observe.attention_sinks.n", "unknown field (tokens)"},
      {1, "glassbox.observe.attention_sinks", "expected true, false or {\"tokens\": N} with N in 1..16"},
      {"first", "glassbox.observe.attention_sinks", "expected true, false"},
  };
  for (const Bad& c : bad) {
    GlassRequestParts parts;
    auto e = parse({{"attention_sinks", c.value}}, &parts);
    ASSERT_TRUE(e) << c.value.dump();
    EXPECT_EQ(e->param, c.param) << e->message;
    EXPECT_NE(e->message.find(c.message), std::string::npos) << e->message;
  }
  {  // the unknown-field message lists it
    GlassRequestParts parts;
    auto e = parse({{"attention_sink", true}}, &parts);
    ASSERT_TRUE(e);
    EXPECT_NE(e->message.find("attention_sinks"), std::string::npos) << e->message;
  }

  // attn_in: observed, captured and intervened on like the other per-layer points.
  GlassRequestParts parts;
  ASSERT_FALSE(
      parse({{"points", {"attn_in", "resid_pre"}}, {"capture", {{{"point", "attn_in"}, {"layer", 2}, {"token", 0}}}}},
            &parts));
  EXPECT_EQ(parts.observe.points, std::vector<HookPoint>({HookPoint::kResidPre, HookPoint::kAttnIn}));
  GlassRequestParts all;
  ASSERT_FALSE(parse({{"points", "all"}}, &all));
  EXPECT_EQ(all.observe.points.size(), 7u);
  EXPECT_EQ(all.observe.points[1], HookPoint::kAttnIn);
  InterventionSet set;
  ASSERT_FALSE(f.parse({{{"op", "set"}, {"point", "attn_in"}, {"layer", 1}, {"dims", {7}}, {"strength", 0}}}, &set));
  EXPECT_EQ(set.interventions[0].point, HookPoint::kAttnIn);
  EXPECT_EQ(set.items[0]["point"], "attn_in");
  auto e = f.parse({{{"op", "set"}, {"point", "attn_inn"}, {"layer", 1}, {"strength", 0}}}, &set);
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("(resid_pre, attn_in, attn_out, resid_mid, mlp_act, mlp_out, resid_post)"),
            std::string::npos)
      << e->message;

  // The report.
  GlassReport r;
  r.sink_tokens = 2;
  r.sinks.push_back({3, 5, {0.5f, 0.25f}, {1.0f, 0.75f}, {0, 4}});
  const json j = glass_report_json(r, {"max_abs"});  // the stats filter does not drop the sinks
  EXPECT_EQ(j["attention_sinks"],
            json::parse(R"({"sink_tokens": 2, "layers": [{"layer": 3, "tokens": 5, "mean": [0.5, 0.25],
                            "max": [1.0, 0.75], "max_token": [0, 4]}]})"));
  EXPECT_FALSE(glass_report_json(GlassReport{}, {}).contains("attention_sinks"));
}

}  // namespace
}  // namespace gb
