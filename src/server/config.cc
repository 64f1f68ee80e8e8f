// Parsing, validation and masking of ServerConfig: the one place config text becomes values.
#include "server/config.h"

#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>

#include "core/mapped_file.h"
#include "glass/spec.h"
#include "model/hooks.h"
#include "server/audit.h"

namespace gb::server {

const char* role_name(Role role) {
  switch (role) {
    case Role::kUser: return "user";
    case Role::kResearcher: return "researcher";
    case Role::kAdmin: return "admin";
  }
  return "?";
}

std::optional<Role> parse_role(std::string_view name) {
  if (name == "user") return Role::kUser;
  if (name == "researcher") return Role::kResearcher;
  if (name == "admin") return Role::kAdmin;
  return std::nullopt;
}

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

namespace {

// The ConfigOverrides entry that carries the --variant flags (one NAME=PATH per line).
constexpr const char* kVariantFlags = "variants";

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string dashed(std::string s) {
  for (char& c : s) c = c == '_' ? '-' : c;
  return s;
}

std::string range_text(const FieldInfo& info) {
  auto num = [](double v) {
    if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%g", v);
    return std::string(buf);
  };
  return "[" + num(info.min) + ", " + num(info.max) + "]";
}

// Parses the string form of a value into a field; `where` names the key in messages.
Status parse_value(const FieldInfo& info, const std::string& where, const std::string& text, int64_t* out) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || p != end || text.empty())
    return Status::error(where + ": expected an integer, got '" + text + "'");
  if (static_cast<double>(v) < info.min || static_cast<double>(v) > info.max)
    return Status::error(where + ": " + text + " is out of range " + range_text(info));
  *out = v;
  return Status::ok();
}

Status parse_value(const FieldInfo& info, const std::string& where, const std::string& text, double* out) {
  char* end = nullptr;
  const double v = text.empty() ? 0 : std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v))
    return Status::error(where + ": expected a number, got '" + text + "'");
  if (v < info.min || v > info.max) return Status::error(where + ": " + text + " is out of range " + range_text(info));
  *out = v;
  return Status::ok();
}

Status parse_value(const FieldInfo&, const std::string& where, const std::string& text, bool* out) {
  if (text == "true" || text == "1") {
    *out = true;
  } else if (text == "false" || text == "0") {
    *out = false;
  } else {
    return Status::error(where + ": expected true or false, got '" + text + "'");
  }
  return Status::ok();
}

Status parse_value(const FieldInfo&, const std::string&, const std::string& text, std::string* out) {
  *out = text;
  return Status::ok();
}

// Applies name=value pairs; `where(name)` says how an error names the key.
Status apply_strings(const std::map<std::string, std::string>& values,
                     const std::function<std::string(const std::string&)>& where, ServerConfig* cfg) {
  std::set<std::string> known;
  Status status;
  visit_fields(*cfg, [&](const FieldInfo& info, auto& field) {
    known.insert(info.name);
    if (!status.is_ok()) return;
    auto it = values.find(info.name);
    if (it == values.end()) return;
    status = parse_value(info, where(info.name), it->second, &field);
  });
  GB_RETURN_IF_ERROR(status);
  for (const auto& [name, value] : values) {
    if (!known.count(name)) return Status::error(where(name) + ": unknown setting");
  }
  return Status::ok();
}

std::string node_text(const YAML::Node& node) { return node.IsScalar() ? node.Scalar() : std::string(); }

Status parse_keys(const YAML::Node& node, std::vector<KeyConfig>* keys) {
  if (!node.IsSequence()) return Status::error("config key 'keys': expected a list of {id, key | key_env, role}");
  keys->clear();
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string where = "config key 'keys[" + std::to_string(i) + "]";
    const YAML::Node& item = node[i];
    if (!item.IsMap()) return Status::error(where + "': expected a map with id, key or key_env, role");
    KeyConfig key;
    for (const auto& kv : item) {
      const std::string name = kv.first.as<std::string>();
      const YAML::Node& v = kv.second;
      if (!v.IsScalar()) return Status::error(where + "." + name + "': expected a scalar");
      if (name == "id") {
        key.id = v.Scalar();
      } else if (name == "key") {
        key.key = v.Scalar();
      } else if (name == "key_env") {
        key.key_env = v.Scalar();
      } else if (name == "role") {
        auto role = parse_role(v.Scalar());
        if (!role) return Status::error(where + ".role': must be user, researcher or admin, got '" + v.Scalar() + "'");
        key.role = *role;
      } else if (name == "rate_limit_rpm") {
        FieldInfo info{"rate_limit_rpm", "", 0, 1e9};
        GB_RETURN_IF_ERROR(parse_value(info, where + ".rate_limit_rpm'", v.Scalar(), &key.rate_limit_rpm));
      } else {
        return Status::error(where + "." + name + "': unknown key (expected id, key, key_env, role, rate_limit_rpm)");
      }
    }
    keys->push_back(std::move(key));
  }
  return Status::ok();
}

nlohmann::json yaml_to_json(const YAML::Node& node);

Status parse_routes(const YAML::Node& node, std::map<std::string, std::vector<RouteArm>>* routes) {
  if (!node.IsMap())
    return Status::error("config key 'routes': expected a map of ALIAS: [{variant: NAME, weight: W}, ...]");
  routes->clear();
  for (const auto& kv : node) {
    const std::string alias = kv.first.as<std::string>();
    GB_RETURN_IF_ERROR(
        parse_route_arms(yaml_to_json(kv.second), "config key 'routes." + alias + "'", &(*routes)[alias]));
  }
  return Status::ok();
}

Status parse_shadow(const YAML::Node& node, std::map<std::string, ShadowConfig>* shadow) {
  if (!node.IsMap()) return Status::error("config key 'shadow': expected a map of MODEL: {variant: NAME, share: S}");
  shadow->clear();
  for (const auto& kv : node) {
    const std::string model = kv.first.as<std::string>();
    GB_RETURN_IF_ERROR(
        parse_shadow_target(yaml_to_json(kv.second), "config key 'shadow." + model + "'", &(*shadow)[model]));
  }
  return Status::ok();
}

Status parse_variants(const YAML::Node& node, std::vector<VariantConfig>* variants) {
  if (!node.IsSequence()) return Status::error("config key 'variants': expected a list of {name, path, scale}");
  variants->clear();
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string where = "config key 'variants[" + std::to_string(i) + "]";
    const YAML::Node& item = node[i];
    if (!item.IsMap()) return Status::error(where + "': expected a map with name, path and optionally scale");
    VariantConfig v;
    for (const auto& kv : item) {
      const std::string name = kv.first.as<std::string>();
      if (!kv.second.IsScalar()) return Status::error(where + "." + name + "': expected a scalar");
      if (name == "name") {
        v.name = kv.second.Scalar();
      } else if (name == "path") {
        v.path = kv.second.Scalar();
      } else if (name == "scale") {
        FieldInfo info{"scale", "", -1000, 1000};
        GB_RETURN_IF_ERROR(parse_value(info, where + ".scale'", kv.second.Scalar(), &v.scale));
      } else {
        return Status::error(where + "." + name + "': unknown key (expected name, path, scale)");
      }
    }
    variants->push_back(std::move(v));
  }
  return Status::ok();
}

// YAML -> JSON, scalars typed as YAML 1.2's core schema reads them (bool, int, float, string).
nlohmann::json yaml_to_json(const YAML::Node& node) {
  if (node.IsMap()) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& kv : node) j[kv.first.as<std::string>()] = yaml_to_json(kv.second);
    return j;
  }
  if (node.IsSequence()) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& v : node) j.push_back(yaml_to_json(v));
    return j;
  }
  if (!node.IsScalar()) return nullptr;
  const std::string& s = node.Scalar();
  if (node.Tag() == "!") return s;  // quoted: a string
  if (s == "true" || s == "false") return s == "true";
  if (s == "null" || s == "~" || s.empty()) return nullptr;
  char* end = nullptr;
  const long long i = std::strtoll(s.c_str(), &end, 10);
  if (end != s.c_str() && *end == '\0') return i;
  const double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() && *end == '\0') return d;
  return s;
}

}  // namespace

namespace {
// A short description of a JSON value for messages (never the whole of an unbounded input).
std::string brief_name(const std::string& s) {
  if (s.size() <= 64) return s;
  size_t cut = 64;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 sequence
  return s.substr(0, cut) + "...";
}
std::string brief(const nlohmann::json& v) {
  if (v.is_string()) return "'" + brief_name(v.get<std::string>()) + "'";
  if (v.is_array()) return "a list";
  if (v.is_object()) return "an object";
  return v.dump();
}
bool int_in(const nlohmann::json& v, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= static_cast<uint64_t>(hi);
  return v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
}
}  // namespace

Status parse_route_arms(const nlohmann::json& j, const std::string& where, std::vector<RouteArm>* out) {
  if (!j.is_array() || j.empty() || j.size() > kMaxRouteArms)
    return Status::error(where + ": expected a list of 1 to " + std::to_string(kMaxRouteArms) +
                         " arms [{variant: NAME, weight: W}, ...]");
  out->clear();
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!j[i].is_object()) return Status::error(at + ": expected {variant: NAME, weight: W}");
    RouteArm arm;
    for (const auto& [key, v] : j[i].items()) {
      if (key == "variant" || key == "model") {
        if (!v.is_string()) return Status::error(at + "." + brief_name(key) + ": expected a model name");
        arm.model = v.get<std::string>();
      } else if (key == "weight") {
        if (!v.is_number() || !(v.get<double>() >= 1e-9 && v.get<double>() <= 1e9))
          return Status::error(at + ".weight: expected a number in [1e-9, 1e9], got " + brief(v));
        arm.weight = v.get<double>();
      } else {
        return Status::error(at + "." + brief_name(key) + ": unknown key (expected variant, weight)");
      }
    }
    if (arm.model.empty() || arm.weight <= 0) return Status::error(at + ": needs a variant and a weight > 0");
    out->push_back(std::move(arm));
  }
  return Status::ok();
}

Status parse_shadow_target(const nlohmann::json& j, const std::string& where, ShadowConfig* out) {
  if (!j.is_object()) return Status::error(where + ": expected {variant: NAME, share: S}");
  ShadowConfig sc;
  for (const auto& [key, v] : j.items()) {
    if (key == "variant" || key == "model") {
      if (!v.is_string()) return Status::error(where + "." + brief_name(key) + ": expected a model name");
      sc.model = v.get<std::string>();
    } else if (key == "share") {
      if (!v.is_number() || !(v.get<double>() > 0 && v.get<double>() <= 1))
        return Status::error(where + ".share: expected a number in (0, 1], got " + brief(v));
      sc.share = v.get<double>();
    } else {
      return Status::error(where + "." + brief_name(key) + ": unknown key (expected variant, share)");
    }
  }
  if (sc.model.empty() || sc.share <= 0) return Status::error(where + ": needs a variant and a share in (0, 1]");
  *out = std::move(sc);
  return Status::ok();
}

Status parse_glass_policy(const nlohmann::json& j, GlassPolicyConfig* out) {
  const std::string w = "glassbox_policy";
  if (!j.is_object()) return Status::error(w + ": expected a map");
  GlassPolicyConfig p;
  auto roles = [&](const char* key, std::vector<Role>* dst) -> Status {
    const nlohmann::json& v = j[key];
    if (!v.is_array()) return Status::error(w + "." + key + ": expected a list of roles (user, researcher, admin)");
    dst->clear();
    for (const auto& r : v) {
      auto role = r.is_string() ? parse_role(r.get<std::string>()) : std::nullopt;
      if (!role) return Status::error(w + "." + key + ": " + brief(r) + " is not user, researcher or admin");
      dst->push_back(*role);
    }
    return Status::ok();
  };
  for (const auto& [key, v] : j.items()) {
    if (key == "intervention_roles") {
      GB_RETURN_IF_ERROR(roles("intervention_roles", &p.intervention_roles));
    } else if (key == "observe_roles") {
      GB_RETURN_IF_ERROR(roles("observe_roles", &p.observe_roles));
    } else if (key == "caps") {
      if (!v.is_object()) return Status::error(w + ".caps: expected a map of op -> largest |strength|");
      static const std::set<std::string> kOps = {"scale", "add", "set", "clamp", "ablate", "clip_massive"};
      p.caps.clear();
      for (const auto& [op, cap] : v.items()) {
        if (op == "skip")
          return Status::error(w +
                               ".caps.skip: skip has no strength to cap; bound it with intervention_roles and "
                               "allowed_layers");
        if (!kOps.count(op))
          return Status::error(w + ".caps." + brief_name(op) +
                               ": unknown op (scale, add, set, clamp, ablate, clip_massive)");
        if (!cap.is_number() || !std::isfinite(cap.get<double>()) || cap.get<double>() < 0)
          return Status::error(w + ".caps." + op + ": expected a finite number >= 0");
        p.caps[op] = cap.get<double>();
      }
    } else if (key == "allowed_layers") {
      p.allowed_layers.clear();
      if (v.is_string() && v.get<std::string>() == "all") continue;
      if (!v.is_array()) return Status::error(w + ".allowed_layers: expected \"all\" or a list of layer numbers");
      for (const auto& l : v) {
        if (!int_in(l, 0, 1 << 30)) return Status::error(w + ".allowed_layers: " + brief(l) + " is not a layer number");
        p.allowed_layers.push_back(l.get<int64_t>());
      }
    } else if (key == "allowed_points") {
      p.allowed_points.clear();
      if (v.is_string() && v.get<std::string>() == "all") continue;
      if (!v.is_array()) return Status::error(w + ".allowed_points: expected \"all\" or a list of hook points");
      for (const auto& pt : v) {
        const auto hp = pt.is_string() ? parse_hook_point(pt.get<std::string>()) : std::nullopt;
        if (!hp || !is_layer_point(*hp))
          return Status::error(w + ".allowed_points: " + brief(pt) + " is not a per-layer hook point (" +
                               hook_point_list(true) + ")");
        p.allowed_points.push_back(pt.get<std::string>());
      }
    } else if (key == "presets") {
      if (!v.is_object()) return Status::error(w + ".presets: expected a map of name -> list of interventions");
      for (const auto& [name, list] : v.items()) {
        if (!list.is_array() || list.empty())
          return Status::error(w + ".presets." + brief_name(name) + ": expected a non-empty list of interventions");
      }
      p.presets = v;
    } else if (key == "control_vectors") {
      if (!v.is_array()) return Status::error(w + ".control_vectors: expected a list of {name, path}");
      for (const auto& cv : v) {
        if (!cv.is_object() || !cv.contains("name") || !cv["name"].is_string() || !cv.contains("path") ||
            !cv["path"].is_string())
          return Status::error(w + ".control_vectors: each entry needs a name and a path");
        p.control_vectors.push_back({cv["name"].get<std::string>(), cv["path"].get<std::string>()});
      }
    } else if (key == "max_interventions") {
      if (!int_in(v, 1, 65536)) return Status::error(w + ".max_interventions: expected 1..65536");
      p.max_interventions = v.get<int64_t>();
    } else {
      return Status::error(w + "." + brief_name(key) +
                           ": unknown key (intervention_roles, observe_roles, caps, allowed_layers, allowed_points, "
                           "presets, control_vectors, max_interventions)");
    }
  }
  *out = std::move(p);
  return Status::ok();
}

nlohmann::json glass_policy_json(const GlassPolicyConfig& p) {
  auto roles = [](const std::vector<Role>& rs) {
    nlohmann::json a = nlohmann::json::array();
    for (Role r : rs) a.push_back(role_name(r));
    return a;
  };
  nlohmann::json cvs = nlohmann::json::array();
  for (const ControlVectorFile& cv : p.control_vectors) cvs.push_back({{"name", cv.name}, {"path", cv.path}});
  return {{"intervention_roles", roles(p.intervention_roles)},
          {"observe_roles", roles(p.observe_roles)},
          {"caps", p.caps},
          {"allowed_layers", p.allowed_layers.empty() ? nlohmann::json("all") : nlohmann::json(p.allowed_layers)},
          {"allowed_points", p.allowed_points.empty() ? nlohmann::json("all") : nlohmann::json(p.allowed_points)},
          {"presets", p.presets},
          {"control_vectors", cvs},
          {"max_interventions", p.max_interventions}};
}

bool valid_model_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' || c == ':')) return false;
  }
  return true;
}

Status apply_yaml(std::string_view yaml_text, ServerConfig* cfg) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    return Status::error(std::string("config file is not valid YAML: ") + e.what());
  }
  if (root.IsNull()) return Status::ok();
  if (!root.IsMap()) return Status::error("config file: expected a map of settings at the top level");
  std::map<std::string, std::string> values;
  try {
    for (const auto& kv : root) {
      const std::string name = kv.first.as<std::string>();
      if (name == "keys") {
        GB_RETURN_IF_ERROR(parse_keys(kv.second, &cfg->keys));
        continue;
      }
      if (name == "glassbox_policy") {
        GB_RETURN_IF_ERROR(parse_glass_policy(yaml_to_json(kv.second), &cfg->glassbox_policy));
        continue;
      }
      if (name == "variants") {
        GB_RETURN_IF_ERROR(parse_variants(kv.second, &cfg->variants));
        continue;
      }
      if (name == "routes") {
        GB_RETURN_IF_ERROR(parse_routes(kv.second, &cfg->routes));
        continue;
      }
      if (name == "shadow") {
        GB_RETURN_IF_ERROR(parse_shadow(kv.second, &cfg->shadow));
        continue;
      }
      if (!kv.second.IsScalar())
        return Status::error("config key '" + name + "': expected a single value, not a list or map");
      values[name] = node_text(kv.second);
    }
  } catch (const YAML::Exception& e) {
    return Status::error(std::string("config file: ") + e.what());
  }
  return apply_strings(
      values, [](const std::string& n) { return "config key '" + n + "'"; }, cfg);
}

Status apply_env(const EnvLookup& env, ServerConfig* cfg) {
  std::map<std::string, std::string> values;
  visit_fields(*cfg, [&](const FieldInfo& info, auto&) {
    if (auto v = env("GLASSBOX_" + upper(info.name))) values[info.name] = *v;
  });
  return apply_strings(
      values, [](const std::string& n) { return "environment variable GLASSBOX_" + upper(n); }, cfg);
}

Status apply_overrides(const ConfigOverrides& values, ServerConfig* cfg) {
  ConfigOverrides scalars = values;
  if (auto it = scalars.find(kVariantFlags); it != scalars.end()) {
    // --variant NAME=PATH, repeatable (one per line here): added to the config file's variants.
    std::string list = it->second;
    scalars.erase(it);
    size_t start = 0;
    while (start < list.size()) {
      size_t end = list.find('\n', start);
      if (end == std::string::npos) end = list.size();
      const std::string item = list.substr(start, end - start);
      start = end + 1;
      const size_t eq = item.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
        return Status::error("--variant: expected NAME=PATH, got '" + brief_name(item) + "'");
      cfg->variants.push_back({item.substr(0, eq), item.substr(eq + 1), 1.0});
    }
  }
  return apply_strings(
      scalars, [](const std::string& n) { return "--" + dashed(n); }, cfg);
}

Status validate_config(const EnvLookup& env, ServerConfig* cfg) {
  if (cfg->model.empty())
    return Status::error("model: required (--model PATH, GLASSBOX_MODEL or 'model:' in the config file)");
  if (cfg->served_model_name.empty()) {
    std::string m = cfg->model;
    while (m.size() > 1 && m.back() == '/') m.pop_back();
    const size_t slash = m.find_last_of('/');
    cfg->served_model_name = slash == std::string::npos ? m : m.substr(slash + 1);
  }
  std::set<std::string> variant_names;
  for (size_t i = 0; i < cfg->variants.size(); ++i) {
    const VariantConfig& v = cfg->variants[i];
    const std::string where = "variants[" + std::to_string(i) + "]";
    if (!valid_model_name(v.name))
      return Status::error(
          where + ".name: '" + brief_name(v.name) +
          "' must be 1 to 64 letters, digits or the characters . _ - : (it is the `model` clients send)");
    if (v.name == cfg->served_model_name)
      return Status::error(where + ".name: '" + v.name + "' is the base model's name (served_model_name)");
    if (!variant_names.insert(v.name).second) return Status::error(where + ".name: '" + v.name + "' is used twice");
    if (v.path.empty()) return Status::error(where + ".path: required");
    if (!std::isfinite(v.scale)) return Status::error(where + ".scale: must be a finite number");
  }
  for (auto& [alias, arms] : cfg->routes) {
    const std::string where = "routes." + alias;
    if (!valid_model_name(alias))
      return Status::error(where + ": the alias must be 1 to 64 letters, digits or the characters . _ - :");
    if (alias == cfg->served_model_name || variant_names.count(alias))
      return Status::error(where + ": '" + alias + "' is already a served model's name");
    for (RouteArm& arm : arms) {
      if (arm.model == "base") arm.model = cfg->served_model_name;
      if (arm.model != cfg->served_model_name && !variant_names.count(arm.model))
        return Status::error(where + ": arm '" + brief_name(arm.model) + "' is neither the base ('base' or '" +
                             cfg->served_model_name + "') nor a variant");
    }
  }
  for (auto& [model, sc] : cfg->shadow) {
    const std::string where = "shadow." + model;
    if (model != cfg->served_model_name && !variant_names.count(model) && !cfg->routes.count(model))
      return Status::error(where + ": '" + brief_name(model) + "' is not a served model or route");
    if (sc.model == "base") sc.model = cfg->served_model_name;
    if (sc.model != cfg->served_model_name && !variant_names.count(sc.model))
      return Status::error(where + ": the shadow '" + brief_name(sc.model) + "' is neither the base nor a variant");
  }
  if (cfg->host.empty()) return Status::error("host: must not be empty");
  if (cfg->kv_cache_bytes > 0 && cfg->kv_cache_fraction > 0)
    return Status::error("kv_cache_bytes and kv_cache_fraction: set one, not both");
  if (cfg->kv_cache_dtype != "f32" && cfg->kv_cache_dtype != "bf16" && cfg->kv_cache_dtype != "f16")
    return Status::error("kv_cache_dtype: must be f32, bf16 or f16, got '" + brief_name(cfg->kv_cache_dtype) + "'");
  if (!parse_massive_median(cfg->monitor_median))
    return Status::error("monitor_median: must be layer or token, got '" + brief_name(cfg->monitor_median) + "'");
  if (!parse_massive_fire(cfg->monitor_fire_on))
    return Status::error("monitor_fire_on: must be both, abs, ratio or either, got '" +
                         brief_name(cfg->monitor_fire_on) + "'");
  static const std::set<std::string> kLevels = {"trace", "debug", "info", "warn", "error"};
  if (!kLevels.count(cfg->log_level))
    return Status::error("log_level: must be trace, debug, info, warn or error, got '" + cfg->log_level + "'");

  std::set<std::string> ids, secrets;
  for (size_t i = 0; i < cfg->keys.size(); ++i) {
    KeyConfig& k = cfg->keys[i];
    const std::string where = "keys[" + std::to_string(i) + "]";
    if (k.id.empty()) return Status::error(where + ".id: required (it names the key in logs)");
    if (!k.key.empty() && !k.key_env.empty()) return Status::error(where + ": set key or key_env, not both");
    if (!k.key_env.empty()) {
      auto v = env(k.key_env);
      if (!v || v->empty())
        return Status::error(where + ".key_env: environment variable " + k.key_env + " is not set or empty");
      k.key = *v;
    }
    if (k.key.empty()) return Status::error(where + ": key or key_env required");
    if (!ids.insert(k.id).second) return Status::error(where + ".id: '" + k.id + "' is used twice");
    if (!secrets.insert(k.key).second) return Status::error(where + ".key: the same key is given twice");
  }
  if (!cfg->api_key.empty()) {
    if (ids.count("cli")) return Status::error("api_key: the key id 'cli' is reserved for --api-key");
    if (secrets.count(cfg->api_key)) return Status::error("api_key: the same key is also in keys");
  }
  if (cfg->interventions && cfg->audit_db.empty())
    return Status::error("audit_db: required when interventions are on (every use is audited)");
  if (cfg->admin_sync != "auto" && cfg->admin_sync != "on" && cfg->admin_sync != "off")
    return Status::error("admin_sync: must be auto, on or off, got '" + brief_name(cfg->admin_sync) + "'");
  if (cfg->admin_sync == "on" && cfg->audit_db.empty())
    return Status::error("admin_sync: on needs audit_db (the admin changes are shared through the audit store)");
  if (cfg->keys.empty() && cfg->api_key.empty() && !cfg->allow_unauthenticated)
    return Status::error(
        "no API keys configured: give --api-key KEY, GLASSBOX_API_KEY or 'keys:' in the config file, or set "
        "allow_unauthenticated: true to serve without authentication");
  return Status::ok();
}

Result<ServerConfig> load_config(const std::string& config_file, const EnvLookup& env, const ConfigOverrides& flags) {
  ServerConfig cfg;
  // --config, else GLASSBOX_CONFIG (a container's mounted ConfigMap).
  std::string file = config_file;
  if (file.empty()) file = env("GLASSBOX_CONFIG").value_or("");
  if (!file.empty()) {
    Result<std::string> text = read_file(file);  // a FIFO or a directory is refused, never waited on
    if (!text.is_ok()) return Status::error("config file: " + text.message());
    GB_RETURN_IF_ERROR(apply_yaml(*text, &cfg).with_context(file));
  }
  GB_RETURN_IF_ERROR(apply_env(env, &cfg));
  GB_RETURN_IF_ERROR(apply_overrides(flags, &cfg));
  GB_RETURN_IF_ERROR(validate_config(env, &cfg));
  return cfg;
}

nlohmann::json config_to_json(const ServerConfig& cfg) {
  nlohmann::json j = nlohmann::json::object();
  visit_fields(cfg, [&](const FieldInfo& info, const auto& field) {
    using T = std::decay_t<decltype(field)>;
    if constexpr (std::is_same_v<T, std::string>) {
      j[info.name] = info.secret && !field.empty() ? std::string("***") : field;
    } else {
      j[info.name] = field;
    }
  });
  nlohmann::json keys = nlohmann::json::array();
  for (const KeyConfig& k : cfg.keys) {
    nlohmann::json e = {{"id", k.id}, {"key", "***"}, {"role", role_name(k.role)}};
    if (!k.key_env.empty()) e["key_env"] = k.key_env;
    if (k.rate_limit_rpm >= 0) e["rate_limit_rpm"] = k.rate_limit_rpm;
    keys.push_back(std::move(e));
  }
  j["keys"] = std::move(keys);
  j["audit_db"] = redact_url(cfg.audit_db);  // a postgresql:// URL may hold a password
  j["glassbox_policy"] = glass_policy_json(cfg.glassbox_policy);
  nlohmann::json variants = nlohmann::json::array();
  for (const VariantConfig& v : cfg.variants)
    variants.push_back({{"name", v.name}, {"path", v.path}, {"scale", v.scale}});
  j["variants"] = std::move(variants);
  nlohmann::json routes = nlohmann::json::object();
  for (const auto& [alias, arms] : cfg.routes) {
    nlohmann::json a = nlohmann::json::array();
    for (const RouteArm& arm : arms) a.push_back({{"variant", arm.model}, {"weight", arm.weight}});
    routes[alias] = std::move(a);
  }
  j["routes"] = std::move(routes);
  nlohmann::json shadow = nlohmann::json::object();
  for (const auto& [model, sc] : cfg.shadow) shadow[model] = {{"variant", sc.model}, {"share", sc.share}};
  j["shadow"] = std::move(shadow);
  return j;
}

void add_config_flags(CLI::App& app, ConfigOverrides* flags, std::string* config_file,
                      const std::map<std::string, std::string>& short_flags) {
  app.add_option("--config", *config_file, "YAML config file (environment and flags override it)");
  app.add_option_function<std::vector<std::string>>(
         "--variant",
         [flags](const std::vector<std::string>& items) {
           std::string& list = (*flags)[kVariantFlags];
           for (const std::string& item : items) list += (list.empty() ? "" : "\n") + item;
         },
         "weight variant served beside the base, NAME=PATH (a patch, PEFT adapter, LoRA GGUF or edited "
         "checkpoint; repeatable): requests with model NAME run on it")
      ->type_name("NAME=PATH")
      ->allow_extra_args(false);
  ServerConfig defaults;
  visit_fields(defaults, [&](const FieldInfo& info, auto& field) {
    using T = std::decay_t<decltype(field)>;
    const std::string name = info.name;
    std::string flag = "--" + dashed(name);
    if (auto it = short_flags.find(name); it != short_flags.end()) flag = it->second + "," + flag;
    if constexpr (std::is_same_v<T, bool>) {
      app.add_flag_function(
          flag, [flags, name](int64_t count) { (*flags)[name] = count > 0 ? "true" : "false"; }, info.help);
    } else {
      app.add_option_function<std::string>(
             flag, [flags, name](const std::string& v) { (*flags)[name] = v; }, info.help)
          ->type_name(std::is_same_v<T, int64_t>  ? "INT"
                      : std::is_same_v<T, double> ? "NUMBER"
                                                  : "TEXT");
    }
  });
}

}  // namespace gb::server
