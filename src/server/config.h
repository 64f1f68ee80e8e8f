// ServerConfig: every setting of `glassbox serve` in one plain struct, read from a YAML file,
// then GLASSBOX_* environment variables, then command-line flags (later wins), validated once.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "server/routing.h"

namespace CLI {
class App;
}

namespace gb::server {

// Ordered: a role may do everything the roles below it may.
enum class Role { kUser = 0, kResearcher = 1, kAdmin = 2 };
const char* role_name(Role role);
std::optional<Role> parse_role(std::string_view name);

struct KeyConfig {
  std::string id;       // appears in logs and metrics instead of the key
  std::string key;      // the secret itself, or empty with key_env set
  std::string key_env;  // environment variable holding the key (resolved by validate_config)
  Role role = Role::kUser;
  double rate_limit_rpm = -1;  // < 0: the server-wide rate_limit_rpm
};

// The glass-box policy (the `glassbox_policy:` map of the config file, or PUT /admin/glassbox/policy):
// who may observe and intervene, hard caps on strength per op (over a cap: 400, never clamped),
// which layers and points may be touched, named presets, control vectors to load at start.
struct ControlVectorFile {
  std::string name;
  std::string path;  // a llama.cpp / repeng control-vector GGUF
};

// A weight variant served beside the base model (`variants:` in the config, --variant NAME=PATH):
// a request with `model: NAME` runs on it. PATH: a patch directory, a PEFT adapter directory, a
// llama.cpp LoRA GGUF, or an edited checkpoint of the (Hugging Face) base, diffed at load.
struct VariantConfig {
  std::string name;
  std::string path;
  double scale = 1.0;  // multiplies low-rank, column and sparse deltas (a LoRA's strength)
};

struct GlassPolicyConfig {
  std::vector<Role> intervention_roles = {Role::kResearcher, Role::kAdmin};
  std::vector<Role> observe_roles = {Role::kUser, Role::kResearcher, Role::kAdmin};
  // op name -> largest |strength| a request may use; an op without an entry is not capped.
  std::map<std::string, double> caps = {{"scale", 10}, {"add", 100}, {"set", 100}, {"ablate", 1}, {"clip_massive", 1}};
  std::vector<int64_t> allowed_layers;                // empty: every layer
  std::vector<std::string> allowed_points;            // hook point names; empty: every per-layer point
  nlohmann::json presets = nlohmann::json::object();  // name -> list of interventions (request syntax)
  std::vector<ControlVectorFile> control_vectors;
  int64_t max_interventions = 256;  // resolved interventions per request (after presets, vectors, session, default set)
};

// One canary route's arms ([{variant, weight}, ...], at most kMaxRouteArms) or one shadow copy
// ({variant, share}) from JSON (the YAML config converted, or an admin request); errors start
// with `where`. Names are checked against the served models by the caller.
inline constexpr size_t kMaxRouteArms = 16;
Status parse_route_arms(const nlohmann::json& j, const std::string& where, std::vector<RouteArm>* out);
Status parse_shadow_target(const nlohmann::json& j, const std::string& where, ShadowConfig* out);

// Parses the policy from JSON (the YAML map converted, or an admin request); errors name the key.
Status parse_glass_policy(const nlohmann::json& j, GlassPolicyConfig* out);
nlohmann::json glass_policy_json(const GlassPolicyConfig& p);

struct ServerConfig {
  // Model
  std::string model;              // model directory or file
  std::string served_model_name;  // the `model` clients send; default: the model's directory name
  std::string chat_template;      // Jinja template file overriding the model's own
  std::vector<VariantConfig> variants;
  // Canary routes: `model: ALIAS` split over served models by weight (file only; see routing.h).
  std::map<std::string, std::vector<RouteArm>> routes;
  // Shadow mode: a share of the requests sent to a model (or alias) also runs on another served
  // model in the background; its tokens are logged for comparison, never returned (file only).
  std::map<std::string, ShadowConfig> shadow;

  // Engine (passed through to the engine factory)
  int64_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 2048;
  int64_t max_model_len = 0;                   // 0: the model's own context length, or what kv_cache_memory holds
  int64_t kv_cache_memory = int64_t{4} << 30;  // budget: max_num_seqs sequences of max_model_len, at most this
  int64_t kv_cache_bytes = 0;                  // exact size instead of the budget rule; 0: unset
  double kv_cache_fraction = 0;                // exact size as a fraction of physical RAM; 0: unset
  std::string kv_cache_dtype = "f32";          // K/V element type: f32, bf16 or f16
  int64_t threads = 0;                         // compute threads; 0: all cores

  // HTTP
  std::string host = "127.0.0.1";
  int64_t port = 8000;
  int64_t http_threads = 0;        // 0: max_concurrent_requests + 8; probes have two threads of their own
  int64_t max_connections = 1024;  // open HTTP connections; more are answered 503 at once
  std::string ui_dir;              // dashboard files served at /ui; empty: ui/ beside the binary (dashboard.h)

  // Authentication
  std::string api_key;  // vLLM-style single key with the admin role (id "cli")
  bool allow_unauthenticated = false;
  std::vector<KeyConfig> keys;

  // Limits
  int64_t max_concurrent_requests = 256;  // generation requests in flight (HTTP level)
  int64_t max_queue_length = 1024;        // engine waiting queue; more is answered 429
  double rate_limit_rpm = 0;              // per key, requests per minute; 0: off
  int64_t rate_limit_burst = 0;           // token bucket size; 0: max(1, rpm / 6)
  int64_t max_body_bytes = 4 << 20;
  double read_timeout_s = 30;
  double write_timeout_s = 30;
  double header_timeout_s = 10;  // a request's line and headers must arrive within this
  double body_timeout_s = 60;    // a request's whole body must arrive within this
  double request_timeout_s = 600;
  double drain_timeout_s = 30;
  int64_t max_n = 16;
  int64_t max_stop = 16;
  int64_t max_logprobs = 20;

  // Glass box
  bool interventions = false;  // per-request interventions allowed at all (then roles and caps apply)
  std::string audit_db;        // audit store: an SQLite path or a postgresql:// URL; required with interventions
  std::string admin_sync =
      "auto";  // replay other replicas' admin changes from audit_db: on, off, auto (on for PostgreSQL)
  int64_t admin_sync_interval_ms = 1000;  // admin sync: poll the change rows this often (NOTIFY wakes it sooner)
  int64_t monitor_every_steps = 1;        // massive-activation monitor: one step in this many (0: off)
  double monitor_min_abs = 100;           // the rule (MassiveRule): |x| > min_abs, |x| > min_ratio · median|x|
  double monitor_min_ratio = 1000;
  std::string monitor_median = "layer";  // layer: the median over a sequence's rows in the step; token: the row's
  std::string monitor_fire_on = "both";  // both, abs, ratio or either test
  int64_t repetition_ngram = 4;          // n of the n-gram repetition rate of generated text
  int64_t max_request_observation_bytes = 16 << 20;  // observation memory one request may hold (all its sequences)
  int64_t max_observation_bytes = 256 << 20;         // observation memory of all requests in flight together
  GlassPolicyConfig glassbox_policy;

  // Logging
  bool log_prompts = false;
  std::string log_level = "info";
};

// Metadata of one scalar field; the one declaration drives YAML keys, GLASSBOX_* variables,
// --flags, range checks and masking.
struct FieldInfo {
  const char* name;  // YAML key; the flag is --name-with-dashes, the variable GLASSBOX_NAME
  const char* help;
  double min = -1e300;
  double max = 1e300;
  bool secret = false;
};

template <class Config, class F>
void visit_fields(Config& c, F&& f) {
  f(FieldInfo{"model", "model directory or file"}, c.model);
  f(FieldInfo{"served_model_name", "model name clients send (default: the model's directory name)"},
    c.served_model_name);
  f(FieldInfo{"chat_template", "Jinja chat template file overriding the model's own"}, c.chat_template);
  f(FieldInfo{"max_num_seqs", "most sequences in one batch", 1, 1 << 20}, c.max_num_seqs);
  f(FieldInfo{"max_num_batched_tokens", "token budget of one engine step", 1, 1 << 24}, c.max_num_batched_tokens);
  f(FieldInfo{"max_model_len", "context length (0: the model's, or what the KV cache budget holds)", 0, 1 << 24},
    c.max_model_len);
  f(FieldInfo{"kv_cache_memory",
              "KV cache memory budget, bytes: room for max_num_seqs sequences of max_model_len, at most this", 1, 1e15},
    c.kv_cache_memory);
  f(FieldInfo{"kv_cache_bytes", "KV cache size in bytes, instead of the kv_cache_memory rule (0: unset)", 0, 1e15},
    c.kv_cache_bytes);
  f(FieldInfo{"kv_cache_fraction", "KV cache size as a fraction of RAM, instead of the kv_cache_memory rule (0: unset)",
              0, 1},
    c.kv_cache_fraction);
  f(FieldInfo{"kv_cache_dtype", "K/V element type: f32, bf16 or f16 (bf16/f16: half the KV memory and traffic)"},
    c.kv_cache_dtype);
  f(FieldInfo{"threads", "compute threads (0: all cores)", 0, 4096}, c.threads);
  f(FieldInfo{"host", "address to listen on"}, c.host);
  f(FieldInfo{"port", "TCP port (0: any free port)", 0, 65535}, c.port);
  f(FieldInfo{"http_threads", "HTTP worker threads (0: max_concurrent_requests + 8)", 0, 65536}, c.http_threads);
  f(FieldInfo{"max_connections", "open HTTP connections; more are refused with 503", 1, 1 << 20}, c.max_connections);
  f(FieldInfo{"ui_dir",
              "dashboard files served at /ui (default: ui/ beside the glassbox binary, else ../share/glassbox/ui)"},
    c.ui_dir);
  f(FieldInfo{"api_key", "single API key with the admin role", -1e300, 1e300, true}, c.api_key);
  f(FieldInfo{"allow_unauthenticated", "serve requests without an API key"}, c.allow_unauthenticated);
  f(FieldInfo{"max_concurrent_requests", "generation requests in flight", 1, 1 << 20}, c.max_concurrent_requests);
  f(FieldInfo{"max_queue_length", "engine waiting queue length", 0, 1 << 24}, c.max_queue_length);
  f(FieldInfo{"rate_limit_rpm", "requests per minute per key (0: off)", 0, 1e9}, c.rate_limit_rpm);
  f(FieldInfo{"rate_limit_burst", "rate limit bucket size (0: max(1, rpm/6))", 0, 1e9}, c.rate_limit_burst);
  f(FieldInfo{"max_body_bytes", "largest request body", 1, 1LL << 34}, c.max_body_bytes);
  f(FieldInfo{"read_timeout_s", "socket read timeout, seconds", 0.001, 86400}, c.read_timeout_s);
  f(FieldInfo{"write_timeout_s", "socket write timeout, seconds", 0.001, 86400}, c.write_timeout_s);
  f(FieldInfo{"header_timeout_s", "a request's line and headers must arrive within this, seconds", 0.001, 86400},
    c.header_timeout_s);
  f(FieldInfo{"body_timeout_s", "a request's whole body must arrive within this, seconds", 0.001, 86400},
    c.body_timeout_s);
  f(FieldInfo{"request_timeout_s", "a generation request is cancelled after this, seconds", 0.001, 1e7},
    c.request_timeout_s);
  f(FieldInfo{"drain_timeout_s", "on SIGTERM, running requests get this long, seconds", 0, 86400}, c.drain_timeout_s);
  f(FieldInfo{"max_n", "largest n", 1, 1024}, c.max_n);
  f(FieldInfo{"max_stop", "most stop strings per request", 0, 1024}, c.max_stop);
  f(FieldInfo{"max_logprobs", "most top logprobs per token", 0, 1024}, c.max_logprobs);
  f(FieldInfo{"interventions", "allow per-request interventions (roles and caps: glassbox_policy)"}, c.interventions);
  f(FieldInfo{"audit_db",
              "audit store: an SQLite file path, or postgresql://user:pass@host:port/db shared by replicas "
              "(required with interventions)"},
    c.audit_db);
  f(FieldInfo{"admin_sync",
              "follow admin changes made by other servers on the same audit_db: on, off or auto (on for "
              "PostgreSQL, off for SQLite)"},
    c.admin_sync);
  f(FieldInfo{"admin_sync_interval_ms", "admin sync: how often the change rows are polled, ms", 20, 600000},
    c.admin_sync_interval_ms);
  f(FieldInfo{"monitor_every_steps", "massive-activation monitor samples one step in this many (0: off)", 0, 1 << 20},
    c.monitor_every_steps);
  f(FieldInfo{"monitor_min_abs", "massive activation: |x| above this", 0, 1e30}, c.monitor_min_abs);
  f(FieldInfo{"monitor_min_ratio", "massive activation: |x| above this times the median |x| (monitor_median)", 0, 1e30},
    c.monitor_min_ratio);
  f(
      FieldInfo{
          "monitor_median",
          "massive activation: the median |x| compared with, layer (the sequence's rows in the step, as Sun et al.) "
          "or token (each row's own)"},
      c.monitor_median);
  f(FieldInfo{"monitor_fire_on", "massive activation: an event needs both tests, abs, ratio or either"},
    c.monitor_fire_on);
  f(FieldInfo{"repetition_ngram", "n of the generated text's n-gram repetition rate", 1, 64}, c.repetition_ngram);
  f(FieldInfo{"max_request_observation_bytes",
              "glass-box observation memory one request may hold, all its sequences (statistics, events, captures)",
              4096, 1e15},
    c.max_request_observation_bytes);
  f(FieldInfo{"max_observation_bytes", "glass-box observation memory of all requests in flight together", 4096, 1e15},
    c.max_observation_bytes);
  f(FieldInfo{"log_prompts", "write prompt text into request logs"}, c.log_prompts);
  f(FieldInfo{"log_level", "trace, debug, info, warn or error"}, c.log_level);
}

// A name clients may send as `model` for a variant: 1 to 64 of [A-Za-z0-9._:-].
bool valid_model_name(const std::string& s);

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();

// Overrides by field name, in the field's string form (from flags or the environment).
using ConfigOverrides = std::map<std::string, std::string>;

// Parses a YAML document onto cfg (fields absent from it keep their value). Unknown keys and
// wrong types are errors naming the key.
Status apply_yaml(std::string_view yaml_text, ServerConfig* cfg);
// Applies GLASSBOX_<FIELD> variables.
Status apply_env(const EnvLookup& env, ServerConfig* cfg);
// Applies flag values; `source` is how the error names them ("--").
Status apply_overrides(const ConfigOverrides& values, ServerConfig* cfg);
// Checks ranges and cross-field rules and resolves keys[].key_env.
Status validate_config(const EnvLookup& env, ServerConfig* cfg);

// The whole pipeline: defaults -> file (config_file, else $GLASSBOX_CONFIG; none when both are empty) ->
// environment -> flags -> validation.
Result<ServerConfig> load_config(const std::string& config_file, const EnvLookup& env, const ConfigOverrides& flags);

// The effective config as JSON with every secret replaced by "***".
nlohmann::json config_to_json(const ServerConfig& cfg);

// Declares one flag per field on app (--config too); parsed values land in *flags and
// *config_file. Flags are declared here once, from visit_fields; short_flags gives some fields a
// short name too (field name -> "-m"), so they match the other subcommands.
void add_config_flags(CLI::App& app, ConfigOverrides* flags, std::string* config_file,
                      const std::map<std::string, std::string>& short_flags = {});

}  // namespace gb::server
