// glassbox-fake-server: `glassbox serve` on the FakeEngine and the byte-level FakeCodec, so the
// OpenAI SDK end-to-end test (tests/e2e) runs before the real engine exists. Same flags.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "server/fakes.h"
#include "server/lifecycle.h"

int main(int argc, char** argv) {
  gb::server::block_shutdown_signals();
  CLI::App app{"glassbox serve on a fake engine (tests only)"};
  gb::server::ConfigOverrides flags;
  std::string config_file;
  gb::server::add_config_flags(app, &flags, &config_file);
  int64_t context = 512;
  int64_t token_delay_ms = 1;
  app.add_option("--fake-context", context, "context length the fake model reports");
  app.add_option("--fake-token-delay-ms", token_delay_ms, "delay between fake engine steps");
  CLI11_PARSE(app, argc, argv);
  auto cfg = gb::server::load_config(config_file, gb::server::process_env(), flags);
  if (!cfg.is_ok()) {
    std::fprintf(stderr, "glassbox-fake-server: invalid config: %s\n", cfg.message().c_str());
    return 2;
  }
  return gb::server::run_server(*cfg, [&](const gb::server::ServerConfig&) -> gb::Result<gb::server::Backend> {
    gb::server::Backend b;
    gb::server::test::FakeEngineOptions opts;
    opts.token_delay = std::chrono::milliseconds(token_delay_ms);
    b.engine = std::make_unique<gb::server::test::FakeEngine>(opts);
    b.codec = std::make_unique<gb::server::test::FakeCodec>();
    b.max_model_len = static_cast<int32_t>(context);
    return b;
  });
}
