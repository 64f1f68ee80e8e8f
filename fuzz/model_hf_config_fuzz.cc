// libFuzzer target: a Hugging Face config.json (and optional generation_config.json) through
// parse_hf_config, then the derived values the loader uses. Input: config.json bytes, optionally
// a NUL byte and generation_config.json. Seeds: the fixtures' config.json files.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const nlohmann::json config = nlohmann::json::parse(in.substr(0, nul), nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return 0;
  nlohmann::json gen;
  if (nul != std::string_view::npos) {
    gen = nlohmann::json::parse(in.substr(nul + 1), nullptr, /*allow_exceptions=*/false);
    if (gen.is_discarded()) return 0;
  }
  auto c = gb::parse_hf_config(config, nul != std::string_view::npos ? &gen : nullptr);
  if (!c.is_ok()) return 0;
  (void)c->rope_inv_freq();
  (void)c->n_layers_of(gb::LayerKind::kLinearAttention);
  return 0;
}
