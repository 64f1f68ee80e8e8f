// ServerConfig: YAML, environment and flag layering, validation messages, masking.
#include <gtest/gtest.h>

#include <cstdio>

#include <CLI/CLI.hpp>

#include "server/config.h"

namespace gb::server {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

Result<ServerConfig> from_yaml(const std::string& yaml, std::map<std::string, std::string> env = {},
                               ConfigOverrides flags = {}) {
  ServerConfig cfg;
  GB_RETURN_IF_ERROR(apply_yaml(yaml, &cfg));
  GB_RETURN_IF_ERROR(apply_env(env_of(env), &cfg));
  GB_RETURN_IF_ERROR(apply_overrides(flags, &cfg));
  GB_RETURN_IF_ERROR(validate_config(env_of(env), &cfg));
  return cfg;
}

TEST(ConfigTest, YamlEnvAndFlagsLayerInOrder) {
  auto cfg = from_yaml("model: /m/stories260K/\nport: 9000\nhost: 0.0.0.0\nallow_unauthenticated: true\n",
                       {{"GLASSBOX_PORT", "9100"}, {"GLASSBOX_MAX_NUM_SEQS", "8"}}, {{"max_num_seqs", "4"}});
  ASSERT_TRUE(cfg.is_ok()) << cfg.message();
  EXPECT_EQ(cfg->port, 9100);       // env over file
  EXPECT_EQ(cfg->max_num_seqs, 4);  // flag over env
  EXPECT_EQ(cfg->host, "0.0.0.0");
  EXPECT_EQ(cfg->served_model_name, "stories260K");  // the directory name by default
}

// A container mounts the file (a Kubernetes ConfigMap) and names it in GLASSBOX_CONFIG; --config wins.
TEST(ConfigTest, ConfigFileFromTheEnvironment) {
  const std::string dir = ::testing::TempDir();
  const std::string a = dir + "/gb_config_env_a.yaml", b = dir + "/gb_config_env_b.yaml";
  for (const auto& [path, port] : {std::pair{a, 9001}, std::pair{b, 9002}}) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fprintf(f, "model: /models/m\nallow_unauthenticated: true\nport: %d\n", port);
    std::fclose(f);
  }
  auto from_env = load_config("", env_of({{"GLASSBOX_CONFIG", a}}), {});
  ASSERT_TRUE(from_env.is_ok()) << from_env.message();
  EXPECT_EQ(from_env->port, 9001);
  EXPECT_EQ(from_env->model, "/models/m");
  auto flag_wins = load_config(b, env_of({{"GLASSBOX_CONFIG", a}}), {});
  ASSERT_TRUE(flag_wins.is_ok()) << flag_wins.message();
  EXPECT_EQ(flag_wins->port, 9002);
  auto missing = load_config("", env_of({{"GLASSBOX_CONFIG", dir + "/gb_no_such_config.yaml"}}), {});
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.message().find("gb_no_such_config.yaml"), std::string::npos) << missing.message();
}

TEST(ConfigTest, KeysWithRolesAndEnvSecrets) {
  auto cfg = from_yaml(R"(model: m
keys:
  - {id: alice, key: sk-alice, role: user}
  - {id: bob, key_env: BOB_KEY, role: researcher, rate_limit_rpm: 10}
)",
                       {{"BOB_KEY", "sk-bob"}});
  ASSERT_TRUE(cfg.is_ok()) << cfg.message();
  ASSERT_EQ(cfg->keys.size(), 2u);
  EXPECT_EQ(cfg->keys[1].key, "sk-bob");
  EXPECT_EQ(cfg->keys[1].role, Role::kResearcher);
  EXPECT_EQ(cfg->keys[1].rate_limit_rpm, 10);
}

TEST(ConfigTest, VariantsFromTheFileAndTheFlag) {
  auto cfg = from_yaml(
      "model: /m/qwen3\napi_key: k\nvariants:\n  - {name: lora, path: /p/adapter, scale: 0.5}\n  - name: fix\n    "
      "path: /p/fix\n",
      {}, {{"variants", "extra=/p/extra.gguf\nmore:v2=/p/more"}});
  ASSERT_TRUE(cfg.is_ok()) << cfg.message();
  ASSERT_EQ(cfg->variants.size(), 4u);
  EXPECT_EQ(cfg->variants[0].name, "lora");
  EXPECT_EQ(cfg->variants[0].scale, 0.5);
  EXPECT_EQ(cfg->variants[1].path, "/p/fix");
  EXPECT_EQ(cfg->variants[1].scale, 1.0);
  EXPECT_EQ(cfg->variants[2].name, "extra");
  EXPECT_EQ(cfg->variants[2].path, "/p/extra.gguf");
  EXPECT_EQ(cfg->variants[3].name, "more:v2");
  EXPECT_EQ(config_to_json(*cfg)["variants"][0]["path"], "/p/adapter");

  CLI::App app;
  ConfigOverrides flags;
  std::string file;
  add_config_flags(app, &flags, &file);
  app.parse(std::vector<std::string>{"b=/two", "--variant", "a=/one", "--variant"});  // CLI11 parses reversed
  EXPECT_EQ(flags["variants"], "a=/one\nb=/two");

  auto error = [](const std::string& yaml, ConfigOverrides f = {}) {
    auto c = from_yaml("model: /m/qwen3\napi_key: k\n" + yaml, {}, f);
    return c.is_ok() ? std::string("ok") : c.message();
  };
  EXPECT_NE(error("variants: [{name: qwen3, path: /p}]").find("is the base model's name"), std::string::npos);
  EXPECT_NE(error("variants: [{name: a, path: /p}, {name: a, path: /q}]").find("used twice"), std::string::npos);
  EXPECT_NE(error("variants: [{name: 'a b', path: /p}]").find("must be 1 to 64 letters"), std::string::npos);
  EXPECT_NE(error("variants: [{name: a}]").find("variants[0].path: required"), std::string::npos);
  EXPECT_NE(error("variants: [{name: a, path: /p, rank: 3}]").find("unknown key"), std::string::npos);
  EXPECT_NE(error("variants: [{name: a, path: /p, scale: 1e9}]").find("scale"), std::string::npos);
  EXPECT_NE(error("variants: a").find("expected a list"), std::string::npos);
  EXPECT_NE(error("", {{"variants", "nopath"}}).find("--variant: expected NAME=PATH"), std::string::npos);
  EXPECT_NE(error("", {{"variants", "=/p"}}).find("--variant: expected NAME=PATH"), std::string::npos);
}

TEST(ConfigTest, ErrorsNameTheKey) {
  struct Case {
    std::string yaml;
    std::string expect;
  };
  const Case cases[] = {
      {"model: m\nprot: 8000\nallow_unauthenticated: true", "config key 'prot': unknown setting"},
      {"model: m\nport: eighty\nallow_unauthenticated: true", "config key 'port': expected an integer"},
      {"model: m\nport: 70000\nallow_unauthenticated: true", "config key 'port': 70000 is out of range [0, 65535]"},
      {"model: m\nallow_unauthenticated: maybe", "config key 'allow_unauthenticated': expected true or false"},
      {"model: m\nkv_cache_fraction: 1.5\nallow_unauthenticated: true", "config key 'kv_cache_fraction'"},
      {"model: m\nport: [1, 2]\nallow_unauthenticated: true", "config key 'port': expected a single value"},
      {"model: m\nkeys:\n  - {id: a, key: k, role: god}", "keys[0].role': must be user, researcher or admin"},
      {"model: m\nkeys:\n  - {id: a, key: k, colour: red}", "keys[0].colour': unknown key"},
      {"model: m\nkeys:\n  - {id: a, key_env: NOPE}", "keys[0].key_env: environment variable NOPE is not set"},
      {"model: m\nkeys:\n  - {id: a, key: k}\n  - {id: a, key: j}", "keys[1].id: 'a' is used twice"},
      {"model: m\nkeys:\n  - {key: k}", "keys[0].id: required"},
      {"model: m\nlog_level: loud\nallow_unauthenticated: true", "log_level: must be"},
      {"model: m\nkv_cache_bytes: 100\nkv_cache_fraction: 0.5\nallow_unauthenticated: true",
       "kv_cache_bytes and kv_cache_fraction"},
      {"port: 1\nallow_unauthenticated: true", "model: required"},
      {"model: m", "no API keys configured"},
      {"model: [", "not valid YAML"},
      {"model: m\nmonitor_median: row\nallow_unauthenticated: true",
       "monitor_median: must be layer or token, got 'row'"},
      {"model: m\nmonitor_fire_on: all\nallow_unauthenticated: true",
       "monitor_fire_on: must be both, abs, ratio or either, got 'all'"},
  };
  for (const Case& c : cases) {
    auto cfg = from_yaml(c.yaml);
    ASSERT_FALSE(cfg.is_ok()) << c.yaml;
    EXPECT_NE(cfg.message().find(c.expect), std::string::npos) << "got: " << cfg.message() << "\nwant: " << c.expect;
  }
}

// The monitor's massive rule: the layer median and both tests by default; from YAML, a JSON
// document (YAML's flow syntax), the environment or flags; printed back in the effective config.
TEST(ConfigTest, MonitorMassiveRule) {
  auto d = from_yaml("model: m\nallow_unauthenticated: true");
  ASSERT_TRUE(d.is_ok()) << d.message();
  EXPECT_EQ(d->monitor_median, "layer");
  EXPECT_EQ(d->monitor_fire_on, "both");
  auto y = from_yaml("model: m\nallow_unauthenticated: true\nmonitor_median: token\nmonitor_fire_on: either\n");
  ASSERT_TRUE(y.is_ok()) << y.message();
  EXPECT_EQ(y->monitor_median, "token");
  EXPECT_EQ(y->monitor_fire_on, "either");
  auto j =
      from_yaml(R"({"model": "m", "allow_unauthenticated": true, "monitor_min_abs": 50, "monitor_median": "token", )"
                R"("monitor_fire_on": "ratio"})");
  ASSERT_TRUE(j.is_ok()) << j.message();
  EXPECT_EQ(j->monitor_min_abs, 50);
  EXPECT_EQ(j->monitor_median, "token");
  EXPECT_EQ(j->monitor_fire_on, "ratio");
  const nlohmann::json printed = config_to_json(*j);
  EXPECT_EQ(printed["monitor_median"], "token");
  EXPECT_EQ(printed["monitor_fire_on"], "ratio");
  auto e = from_yaml("model: m\nallow_unauthenticated: true", {{"GLASSBOX_MONITOR_FIRE_ON", "abs"}},
                     {{"monitor_median", "token"}});
  ASSERT_TRUE(e.is_ok()) << e.message();
  EXPECT_EQ(e->monitor_fire_on, "abs");
  EXPECT_EQ(e->monitor_median, "token");
  auto bad = from_yaml("model: m\nallow_unauthenticated: true", {}, {{"monitor_fire_on", "neither"}});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("monitor_fire_on: must be both, abs, ratio or either, got 'neither'"), std::string::npos)
      << bad.message();
}

TEST(ConfigTest, EnvAndFlagErrorsNameTheirSource) {
  auto e = from_yaml("model: m\nallow_unauthenticated: true", {{"GLASSBOX_PORT", "x"}});
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.message().find("environment variable GLASSBOX_PORT"), std::string::npos) << e.message();
  auto f = from_yaml("model: m\nallow_unauthenticated: true", {}, {{"max_num_seqs", "0"}});
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.message().find("--max-num-seqs: 0 is out of range"), std::string::npos) << f.message();
}

TEST(ConfigTest, ApiKeyFromEnvironmentIsEnough) {
  auto cfg = from_yaml("model: m", {{"GLASSBOX_API_KEY", "sk-admin"}});
  ASSERT_TRUE(cfg.is_ok()) << cfg.message();
  EXPECT_EQ(cfg->api_key, "sk-admin");
}

TEST(ConfigTest, PrintedConfigMasksSecrets) {
  auto cfg = from_yaml("model: m\napi_key: sk-top-secret\nkeys:\n  - {id: a, key: sk-also-secret}\n");
  ASSERT_TRUE(cfg.is_ok()) << cfg.message();
  const std::string text = config_to_json(*cfg).dump();
  EXPECT_EQ(text.find("sk-top-secret"), std::string::npos);
  EXPECT_EQ(text.find("sk-also-secret"), std::string::npos);
  EXPECT_NE(text.find("\"api_key\":\"***\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"id\":\"a\""), std::string::npos);
  EXPECT_NE(text.find("\"port\":8000"), std::string::npos);
}

TEST(ConfigTest, FlagsAreDeclaredFromTheFieldTable) {
  CLI::App app;
  ConfigOverrides flags;
  std::string file;
  add_config_flags(app, &flags, &file);
  const char* argv[] = {"serve",
                        "--config",
                        "x.yaml",
                        "--port",
                        "9",
                        "--api-key",
                        "k",
                        "--allow-unauthenticated",
                        "--max-num-batched-tokens",
                        "512"};
  app.parse(10, const_cast<char**>(argv));
  EXPECT_EQ(file, "x.yaml");
  EXPECT_EQ(flags["port"], "9");
  EXPECT_EQ(flags["api_key"], "k");
  EXPECT_EQ(flags["allow_unauthenticated"], "true");
  EXPECT_EQ(flags["max_num_batched_tokens"], "512");
}

// A field can also get a short name (serve's -m and -t, as in the other subcommands).
TEST(ConfigTest, FieldsTakeShortFlags) {
  CLI::App app;
  ConfigOverrides flags;
  std::string file;
  add_config_flags(app, &flags, &file, {{"model", "-m"}, {"threads", "-t"}});
  const char* argv[] = {"serve", "-m", "dir", "-t", "3", "--kv-cache-memory", "1000"};
  app.parse(7, const_cast<char**>(argv));
  EXPECT_EQ(flags["model"], "dir");
  EXPECT_EQ(flags["threads"], "3");
  EXPECT_EQ(flags["kv_cache_memory"], "1000");
}

}  // namespace
}  // namespace gb::server
