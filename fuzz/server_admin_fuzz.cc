// libFuzzer target: a sequence of admin API changes on a GlassService in its initial state (the
// stories260K shape, with a vector, a preset, two sessions and a default set; restored before
// each input), each through the function its
// route calls after parse_json_body, as handle_admin_glass does. The input is records of
//   op (1 byte), name (1 byte), body length (2 bytes, little-endian), body
// op % 14: 0 PUT policy, 1 PATCH policy, 2 PUT preset, 3 DELETE preset, 4 PUT vector (JSON
// directions; a body naming a "path" is skipped), 5 PUT vector from a file (the body is the
// control-vector GGUF, on a memfd), 6 DELETE vector, 7 PUT session, 8 DELETE session, 9 PUT
// default set, 10 roll the default set back; and the roll-out bodies as their routes parse them
// (the files a variant names are patch_load_fuzz's): 11 PUT /admin/variants/NAME, 12 PUT
// /admin/routes/ALIAS, 13 PUT /admin/shadow/MODEL. name % 8 picks the preset / vector / session name;
// name & 0x80 makes the commit hook (the audit append) fail, so the change must be cancelled.
// After at most 8 changes the state is described and a steered, observed request resolved
// against it. Nothing may crash, hang or recurse without bound.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_file.h"
#include "server/openai_response.h"
#include "server/routing.h"
#include "server_world.h"

namespace {

using gb::server::ApiError;
using json = nlohmann::json;

struct World {
  std::string dir = gb::fuzz::model_dir();
  gb::ModelConfig model = gb::fuzz::load_model_config(dir);
  gb::server::ServerConfig cfg = gb::fuzz::fuzz_server_config();
  json probe = json::parse(R"({"interventions": [{"preset": "p"}, {"control_vector": "v", "strength": 0.5}],
                               "observe": {"points": ["resid_post"], "layers": [1, 2], "tokens": "first"}})");
  // The service every input starts from: made once, its state put back before each input.
  std::unique_ptr<gb::server::GlassService> glass = gb::fuzz::make_glass(cfg, model);
  std::shared_ptr<const gb::server::GlassState> initial = glass->state();
};

void touch(const std::optional<ApiError>& e) {
  if (e) (void)gb::server::error_body(*e).dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const World w;
  static gb::fuzz::MemFile file;
  if (size > 256 * 1024) return 0;
  gb::server::GlassService* glass = w.glass.get();
  glass->restore(w.initial);
  static const char* kNames[] = {"p", "q", "v", "w", "s", "locked", "bad name!", ""};
  size_t pos = 0;
  for (int record = 0; record < 8 && pos + 4 <= size; ++record) {
    const uint8_t op = data[pos] % 14, name_byte = data[pos + 1];
    const size_t declared = data[pos + 2] | (static_cast<size_t>(data[pos + 3]) << 8);
    pos += 4;
    const size_t len = std::min(declared, size - pos);
    const std::string_view body_text(reinterpret_cast<const char*>(data + pos), len);
    pos += len;
    const std::string name = kNames[name_byte % 8];
    const bool fail_commit = (name_byte & 0x80) != 0;
    glass->set_commit_hook([fail_commit]() -> std::optional<ApiError> {
      if (!fail_commit) return std::nullopt;
      ApiError e;
      e.status = 503;
      e.message = "the audit store cannot record it";
      return e;
    });
    if (op >= 11) {  // the roll-out bodies: shape and ranges, then what the route would log
      json parsed;
      std::optional<ApiError> e;
      if (op == 11) {
        gb::server::VariantLoadBody v;
        if (!(e = gb::server::parse_variant_load_body(body_text, &v))) parsed = {v.path, v.sha256, v.scale};
      } else if (op == 12) {
        std::vector<gb::server::RouteArm> arms;
        if (!(e = gb::server::parse_route_body(body_text, &arms))) {
          double total = 0;
          for (const auto& a : arms) total += a.weight, parsed.push_back({a.model, a.weight});
          const size_t arm = gb::server::pick_arm(arms, name, std::string_view(body_text).substr(0, 16), size);
          if (arm >= arms.size() || !(total > 0)) __builtin_trap();  // a pick inside the arms, always
        }
      } else {
        gb::server::ShadowConfig sc;
        if (!(e = gb::server::parse_shadow_body(body_text, &sc))) {
          if (!(sc.share > 0 && sc.share <= 1)) __builtin_trap();
          parsed = {sc.model, sc.share};
        }
      }
      touch(e);
      (void)parsed.dump(-1, ' ', false, json::error_handler_t::replace);
      continue;
    }
    json change;
    if (op == 5) {
      touch(glass->put_vector(name, {{"path", file.write(data + pos - len, len)}}, &change));
      continue;
    }
    json body = json::object();
    if (!body_text.empty()) {
      if (auto e = gb::server::parse_json_body(body_text, &body)) {
        touch(e);
        continue;
      }
    }
    std::optional<ApiError> e;
    switch (op) {
      case 0: e = glass->set_policy(body, &change); break;
      case 1: e = glass->patch_policy(body, &change); break;
      case 2: e = glass->put_preset(name, body, &change); break;
      case 3: e = glass->delete_preset(name, &change); break;
      case 4:
        if (body.is_object() && body.contains("path")) continue;  // a server-side file of the fuzzer's choosing
        e = glass->put_vector(name, body, &change);
        break;
      case 6: e = glass->delete_vector(name, &change); break;
      case 7: e = glass->put_session(name, body, &change); break;
      case 8: e = glass->delete_session(name, &change); break;
      case 9: e = glass->put_default(body, &change); break;
      default: e = glass->rollback_default(&change); break;
    }
    touch(e);
    // What the route logs and answers on success.
    if (!e) (void)json({{"ok", true}, {"change", change}}).dump(-1, ' ', false, json::error_handler_t::replace);
  }
  glass->set_commit_hook(nullptr);
  (void)glass->describe().dump(2, ' ', false, json::error_handler_t::replace);
  gb::server::GlassRequest g;
  for (const char* session : {"", "s", "locked"}) {
    touch(glass->resolve(&w.probe, session, {"k", gb::server::Role::kAdmin, 0}, 2, &g));
    if (g.spec != nullptr) (void)g.audit_spec.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  return 0;
}
