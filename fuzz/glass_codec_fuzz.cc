// libFuzzer target: fuzz bytes parsed as JSON and read as a request's `glassbox` object, as an
// intervention list (a preset's) and as control-vector directions, on a 4-layer model shape with
// a preset and a library vector, under the default caps; a spec that resolves is sealed, checked
// for its stacked effect and its report written as JSON. Nothing may crash, hang or recurse.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "glass/accumulator.h"
#include "glass/codec.h"
#include "glass/limits.h"

namespace {

struct World {
  gb::ModelConfig model;
  gb::GlassLimits limits;
  std::map<std::string, std::shared_ptr<const gb::InterventionSet>> presets;
  std::map<std::string, std::shared_ptr<const gb::ControlVector>> vectors;
  World() {
    model.n_layers = 4;
    model.n_embd = 8;
    model.n_ff = 16;
    // The default policy's caps: scale 10, add 100, set 100, clamp none, ablate 1, clip_massive 1.
    limits.caps = {10, 100, 100, std::numeric_limits<double>::infinity(), 1, 1};
    auto cv = std::make_shared<gb::ControlVector>();
    cv->name = "v";
    cv->n_embd = 8;
    for (int l = 1; l < 4; ++l) cv->directions.emplace_back(l, std::vector<float>(8, 0.25f));
    vectors["v"] = cv;
    auto p = std::make_shared<gb::InterventionSet>();
    gb::ParseContext ctx{&model, {nullptr, &vectors}, &limits, limits.max_interventions};
    (void)gb::parse_interventions(nlohmann::json::parse(R"([{"op": "scale", "point": "mlp_act", "layer": 2,
                                                           "dims": [5], "strength": -0.98}])"),
                                  "presets.p", ctx, false, p.get());
    presets["p"] = p;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const World w;
  if (size > 256 * 1024) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  const gb::ParseContext ctx{&w.model, {&w.presets, &w.vectors}, &w.limits, w.limits.max_interventions};
  auto gate = [&](gb::GlassUse use) -> std::optional<gb::GlassError> {
    if (use == gb::GlassUse::kIntervene && size % 7 == 0) return gb::glass_forbidden("role_not_allowed", "no");
    return std::nullopt;
  };
  gb::GlassRequestParts parts;
  if (!gb::parse_glass_request(j, ctx, gate, &parts)) {
    if (!gb::check_combined(parts.interventions.interventions, parts.interventions.sources, w.limits, w.model,
                            "glassbox.interventions")) {
      gb::GlassSpec spec;
      spec.observe = parts.observe;
      spec.massive = parts.massive;
      spec.interventions = parts.interventions.interventions;
      auto sealed = gb::seal_resolved_spec(std::move(spec), w.model);
      (void)gb::observation_bytes(*sealed, w.model);
      (void)gb::glass_kv_salt(*sealed, 5);
      gb::GlassAccumulator acc(sealed, w.model);
      (void)gb::glass_report_json(acc.report(), parts.stats).dump();
      (void)parts.canonical.dump();
    }
  }
  gb::InterventionSet set;
  if (!gb::parse_interventions(j, "interventions", ctx, false, &set)) (void)gb::check_set(set, w.limits, w.model);
  gb::ControlVector cv;
  nlohmann::json canon;
  (void)gb::parse_vector_directions(j, w.model, "x", &cv, &canon);
  return 0;
}
